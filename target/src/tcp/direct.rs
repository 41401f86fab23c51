//! H2CData received in place: the data of a host-to-controller data PDU goes from the
//! socket (or the receive buffer) straight into its command's pool buffer instead of
//! through the framer's buffer, one copy fewer per byte (two when the socket is read
//! straight into it). The framer still reads every header and any data digest, and
//! digests the bytes placed here ([`Connection::skip_data`]).
//!
//! Ownership: the destination is the command's data buffer, which belongs to the
//! request while it is in `TransferringHostToController`; no backend I/O is posted on
//! it until all its data is in. A PDU is placed here only when it is exactly what
//! [`TcpTransport::on_h2c`](super::conn) will accept (the TTAG's command is waiting
//! for data, its CID matches, the data continues an outstanding R2T window and has
//! not failed a digest); anything else goes through the framer's buffer and the
//! ordinary checks, which report it. Once a PDU's data started here, the rest of it
//! comes here too; the handler then copies only the bytes the framer held
//! ([`Conn::direct`](super::conn::Conn)).

pub(super) use nvmf_common::transport::tcp::DIRECT_MIN;
use nvmf_common::transport::tcp::{Connection, DataProgress};

use super::transport::TcpTransport;
use crate::backend::DmaSlice;
use crate::runtime::{ReqState, Runtime};

/// Where the rest of the H2CData PDU `d` goes when it is put straight into its
/// command's buffer: the missing part of the PDU's data, as a slice of the buffer.
/// None when fewer than `min` bytes are missing (and the PDU is not already being
/// received this way) or the PDU is not one the handler would accept.
pub(super) fn direct_dst(
    rt: &mut Runtime<TcpTransport>,
    ci: u16,
    d: &DataProgress,
    min: usize,
) -> Option<DmaSlice> {
    let q = rt.queue(ci)?;
    let missing = q.t.in_place.wanted(d.received, d.len, min)?;
    let slot = q.slots.get(usize::from(d.ttag))?;
    if slot.state != ReqState::TransferringHostToController
        || slot.req.cid() != d.cid
        || slot.t.failed().is_some()
    {
        return None;
    }
    let end = d.datao.checked_add(u32::try_from(d.len).ok()?)?;
    if !slot.t.continues_window(d.datao, end) {
        return None;
    }
    let data = slot.req.data.as_ref()?;
    if end as usize > data.len {
        return None;
    }
    let at = data.offset + d.datao as usize + d.received;
    DmaSlice::new(data.buf.clone(), at, missing)
}

/// Borrows `dst` (from [`direct_dst`]) to receive into.
///
/// # Safety
/// No other slice of those bytes may live while the returned one does: the caller
/// takes one borrow at a time and ends it with the copy or socket read that fills it,
/// before control returns to the poll loop. (`dst` lies in the data buffer of a request
/// waiting for host data: nothing else reads or writes those bytes until its data is
/// complete, and no backend I/O is posted on it before.)
#[allow(clippy::mut_from_ref)]
pub(super) unsafe fn dst_bytes(dst: &DmaSlice) -> &mut [u8] {
    // SAFETY: exclusive access is the caller's obligation (above); the range was
    // checked against the buffer by `DmaSlice::new` and is checked again by `slice_mut`.
    unsafe { dst.buf.slice_mut(dst.offset, dst.len) }.unwrap_or(&mut [])
}

/// Counts `placed` (bytes put in `d`'s buffer) with the connection and notes on the
/// queue that its PDU is being received in place.
pub(super) fn placed(
    rt: &mut Runtime<TcpTransport>,
    ci: u16,
    conn: &mut Connection,
    d: &DataProgress,
    placed: &[u8],
) {
    conn.skip_data(placed);
    if let Some(q) = rt.queue_mut(ci) {
        q.t.in_place.placed(d.received);
    }
}
