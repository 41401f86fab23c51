//! What the target lends the connection's receive loop
//! (`nvmf_common::transport::tcp::Receiver`): H2CData received in place, and the
//! handling of each event.
//!
//! The data of a host-to-controller data PDU goes from the socket (or the receive
//! buffer) straight into its command's pool buffer instead of through the framer's
//! buffer, one copy fewer per byte (two when the socket is read straight into it). The
//! framer still reads every header and any data digest, and digests the bytes placed
//! here.
//!
//! Ownership: the destination is the command's data buffer, which belongs to the
//! request while it is in `TransferringHostToController`; no backend I/O is posted on
//! it until all its data is in. A PDU is placed here only when it is exactly what
//! [`TcpTransport::on_h2c`](super::conn) will accept (the TTAG's command is waiting
//! for data, its CID matches, the data continues an outstanding R2T window and has
//! not failed a digest); anything else goes through the framer's buffer and the
//! ordinary checks, which report it.

use nvmf_common::transport::tcp::{DataProgress, Event, Receiver, TransferError};

use super::transport::TcpTransport;
use crate::backend::DmaSlice;
use crate::runtime::{ReqState, Runtime};

/// Where the missing data of H2CData PDU `d` goes when it is put straight into its
/// command's buffer: the command's data and the offset in it; None when the PDU is
/// not one the handler would accept.
fn direct_dst<'r>(
    rt: &'r Runtime<TcpTransport>,
    ci: u16,
    d: &DataProgress,
) -> Option<&'r DmaSlice> {
    let q = rt.queue(ci)?;
    let slot = q.slots.get(usize::from(d.ttag))?;
    if slot.state != ReqState::TransferringHostToController
        || slot.req.cid() != d.cid
        || slot.t.failed().is_some()
    {
        return None;
    }
    let end = d.end()?;
    if !slot.t.continues_window(d.datao, end) {
        return None;
    }
    let data = slot.req.data.as_ref()?;
    (end as usize <= data.len).then_some(data)
}

/// The missing data of H2CData PDU `d`, as a handle on its command's buffer that the
/// socket can be read into ([`dst_bytes`]); None as for [`Receiver::destination`].
pub(super) fn socket_dst(
    rt: &Runtime<TcpTransport>,
    ci: u16,
    d: &DataProgress,
) -> Option<DmaSlice> {
    let data = direct_dst(rt, ci, d)?;
    DmaSlice::new(data.buf.clone(), data.offset + d.missing_at(), d.missing())
}

/// Borrows `dst` (from [`socket_dst`]) to receive into.
///
/// # Safety
/// No other slice of those bytes may live while the returned one does: the caller
/// takes one borrow at a time and ends it with the socket read that fills it (or the
/// digest of what it read), before control returns to the poll loop. (`dst` lies in
/// the data buffer of a request waiting for host data: nothing else reads or writes
/// those bytes until its data is complete, and no backend I/O is posted on it before.)
#[allow(clippy::mut_from_ref)]
pub(super) unsafe fn dst_bytes(dst: &DmaSlice) -> &mut [u8] {
    // SAFETY: exclusive access is the caller's obligation (above); the range was
    // checked against the buffer by `DmaSlice::new` and is checked again by `slice_mut`.
    unsafe { dst.buf.slice_mut(dst.offset, dst.len) }.unwrap_or(&mut [])
}

/// One connection's receiver: the transport and runtime its events act on.
pub(super) struct Rx<'a> {
    pub(super) tp: &'a mut TcpTransport,
    pub(super) rt: &'a mut Runtime<TcpTransport>,
    pub(super) ci: u16,
}

impl Receiver for Rx<'_> {
    // The transport's `ProtocolError` (`conn.rs`, which this file sits below).
    type Error = TransferError;

    #[inline]
    fn destination(&mut self, d: &DataProgress) -> Option<&mut [u8]> {
        let data = direct_dst(self.rt, self.ci, d)?;
        // SAFETY: the slice borrows `self`, so it ends before anything here can touch
        // the request again (the receive loop copies into it and drops it). The
        // request waits for host data: nothing else reads or writes these bytes, and
        // no backend I/O is posted on the buffer before its data is complete. The range
        // is checked by `slice_mut`.
        unsafe {
            data.buf
                .slice_mut(data.offset + d.missing_at(), d.missing())
        }
    }

    #[inline]
    fn on_event(&mut self, event: Event<'_>) -> Result<(), TransferError> {
        self.tp.on_event(self.rt, self.ci, event)
    }

    #[inline]
    fn stopped(&mut self) -> bool {
        self.rt.queue(self.ci).is_none_or(|q| q.dead)
    }
}
