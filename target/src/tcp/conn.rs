//! One NVMe/TCP connection's PDUs: the framer's output turned into runtime events
//! (capsules, H2CData, digest errors, termination requests), and the PDUs a command
//! sends back (R2T, C2HData, CapsuleResp).
//!
//! A connection's slot has R2T state ([`TcpSlot`]): the next offset to ask for and the
//! outstanding windows (at most `MAXR2T + 1`, capped by the config). H2CData must
//! continue a window of the command its TTAG names, or the connection ends with a
//! C2HTermReq naming the offending field. Data that fails its digest is dropped; its
//! command completes with Transient Transport Error once its windows drain, and never
//! executes.

use std::net::SocketAddr;

use nix::sys::epoll::EpollFlags;
use tracing::{debug, warn};

use nvmf_common::tls::Socket;
use nvmf_common::transport::tcp::{data_pieces, Connection, Event, FramerError};
use nvmf_common::transport::tcp::{Negotiated, Pdu, PduWriter};
use nvmf_common::transport::tcp::{R2tWindows, TransferError};
use nvmf_common::wire::sqe::SQE_LEN;
use nvmf_common::wire::status::{generic, Status};
use nvmf_common::wire::tcp::{
    offset, pdu_type, term_fes, term_fes_name, DataPdu, CMD_HDR_LEN, DATA_HDR_LEN, HDR_LEN,
};

use super::direct;
use super::transport::TcpTransport;
use super::tx::{PoolData, TxQueue, ZERO_COPY_MIN};
use crate::backend::DmaSlice;
use crate::core::DataDir;
use crate::runtime::stats::bump;
use crate::runtime::{InCapsule, ReqState, Runtime};

/// The transport part of a command slot: its R2T state.
#[derive(Debug, Default)]
pub struct TcpSlot {
    /// R2Ts sent and the H2CData they still expect.
    r2t: R2tWindows,
    /// Set when data of this command failed its digest: it completes with this status
    /// once its outstanding R2T windows are drained, and never executes.
    failed: Option<Status>,
}

impl TcpSlot {
    /// Ready for a new transfer (keeps the windows' allocation).
    pub fn reset(&mut self) {
        self.r2t.reset();
        self.failed = None;
    }

    /// The status the command completes with because its data failed a digest.
    pub fn failed(&self) -> Option<Status> {
        self.failed
    }

    /// The R2T state in words (a stuck command's report).
    pub fn describe(&self) -> String {
        format!(
            "{}{}",
            self.r2t.describe(),
            if self.failed.is_some() {
                "; data failed its digest"
            } else {
                ""
            }
        )
    }

    /// Whether data at `datao..end` continues an outstanding R2T window.
    pub fn continues_window(&self, datao: u32, end: u32) -> bool {
        self.r2t.continues_window(datao, end)
    }
}

/// The transport part of a queue: one connection.
pub struct Conn {
    pub(super) sock: Option<Socket>,
    pub(super) peer: SocketAddr,
    /// The connection's protocol state; taken out while it reads.
    pub(super) conn: Option<Connection>,
    /// Present once the ICReq was answered.
    pub(super) writer: Option<PduWriter>,
    /// R2Ts allowed outstanding per command.
    pub(super) r2t_limit: usize,
    /// Free slots (a command takes one when its capsule arrives).
    pub(super) free: Vec<u16>,
    /// Slots handed to `free` so far (the rest arrive when the queue is connected).
    pub(super) slots_known: usize,
    /// PDUs waiting to be written.
    pub(super) tx: TxQueue,
    /// The epoll interest registered for the socket.
    pub(super) interest: EpollFlags,
}

/// An error the transport finds in a PDU the framer accepted (an H2CData naming no
/// transfer or outside its R2T window): the connection ends with a C2HTermReq.
pub(super) type ProtocolError = TransferError;

/// Transient Transport Error: what a command whose data failed its digest completes with.
fn transient_transport_error() -> Status {
    Status::generic_retryable(generic::TRANSIENT_TRANSPORT_ERROR)
}

impl TcpTransport {
    /// Feeds bytes to the connection and runs each complete PDU. A PDU that lies whole
    /// in `input` is checked and handled where it is; the data of an H2CData PDU that
    /// does not goes straight into its command's buffer ([`super::direct`]). With no
    /// input: runs the PDU whose data a socket read put in place, if that completed it.
    pub(super) fn on_bytes(&mut self, rt: &mut Runtime<Self>, ci: u16, input: &[u8]) {
        let Some(mut conn) = rt.queue_mut(ci).and_then(|q| q.t.conn.take()) else {
            return;
        };
        let r = conn.receive(input, &mut direct::Rx { tp: self, rt, ci });
        if let Err(e) = r {
            return self.fatal_term(rt, ci, &mut conn, e);
        }
        if let Some(q) = rt.queue_mut(ci) {
            if !q.dead {
                q.t.conn = Some(conn);
            }
        }
    }

    pub(super) fn on_event(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        ev: Event<'_>,
    ) -> Result<(), ProtocolError> {
        match ev {
            Event::Established {
                negotiated,
                writer,
                send,
            } => self.on_established(rt, ci, negotiated, writer, send),
            Event::Pdu(pdu) => return self.on_pdu(rt, ci, pdu),
            Event::DataDigest { error, header } => {
                return self.on_digest_error(rt, ci, error, header)
            }
            Event::PeerTerminated { fes, fei } => {
                let qid = rt.qid(ci);
                if let Some(q) = rt.queue(ci) {
                    warn!(
                        peer = %q.t.peer, %qid,
                        "host terminated the NVMe/TCP connection: FES {fes:#x} ({}) FEI {fei:#x}",
                        term_fes_name(fes)
                    );
                }
                rt.kill(self, ci, "host sent H2CTermReq", false);
            }
            Event::Failed { error, send } => self.framer_fatal(rt, ci, error, send),
        }
        Ok(())
    }

    /// A fatal framer error: send its termination request (if it has one) and close.
    fn framer_fatal(&mut self, rt: &mut Runtime<Self>, ci: u16, e: FramerError, term: &[u8]) {
        bump(&rt.stats.protocol_errors, 1);
        let qid = rt.qid(ci);
        let Some(q) = rt.queue_mut(ci) else { return };
        let c = &mut q.t;
        // Responses already queued go before the termination request, never after.
        c.tx.release_deferred();
        c.tx.bytes.extend_from_slice(term);
        match e.fes() {
            Some(fes) if !term.is_empty() => warn!(
                peer = %c.peer, %qid,
                "NVMe/TCP protocol error: {e}; sending C2HTermReq FES {fes:#x} ({}) FEI {:#x} ({} bytes)",
                term_fes_name(fes), e.fei(), term.len()
            ),
            _ => warn!(peer = %c.peer, %qid, "NVMe/TCP protocol error: {e}; closing"),
        }
        rt.kill(self, ci, "protocol error", true);
    }

    /// An error this transport found in a PDU the framer accepted: C2HTermReq with
    /// the PDU's header, close.
    fn fatal_term(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        conn: &mut Connection,
        e: ProtocolError,
    ) {
        bump(&rt.stats.protocol_errors, 1);
        let qid = rt.qid(ci);
        let Some(q) = rt.queue_mut(ci) else { return };
        let c = &mut q.t;
        c.tx.release_deferred();
        conn.terminate(e.fes, e.fei, &mut c.tx.bytes);
        warn!(
            peer = %c.peer, %qid,
            "NVMe/TCP protocol error: {}; sending C2HTermReq FES {:#x} ({}) FEI {:#x}",
            e.reason, e.fes, term_fes_name(e.fes), e.fei
        );
        rt.kill(self, ci, "protocol error", true);
    }

    fn on_established(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        n: Negotiated,
        writer: PduWriter,
        icresp: &[u8],
    ) {
        let opts_cap = self.opts.max_r2t_per_command.max(1);
        let Some(q) = rt.queue_mut(ci) else { return };
        let c = &mut q.t;
        c.tx.bytes.extend_from_slice(icresp);
        c.writer = Some(writer);
        c.r2t_limit = n.maxr2t.saturating_add(1).min(opts_cap) as usize;
        debug!(
            peer = %c.peer, hdgst = n.header_digest, ddgst = n.data_digest, hpda = n.hpda,
            maxr2t = n.maxr2t, maxh2cdata = n.maxh2cdata, "NVMe/TCP connection initialized"
        );
        self.mark_dirty(ci);
    }

    fn on_pdu(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        pdu: Pdu<'_>,
    ) -> Result<(), ProtocolError> {
        match pdu {
            Pdu::CapsuleCmd { sqe, data } => {
                self.on_capsule(rt, ci, sqe, data);
                Ok(())
            }
            Pdu::H2CData {
                cid,
                ttag,
                datao,
                datal,
                data,
                ..
            } => self.on_h2c(rt, ci, cid, ttag, datao, datal, Some(data)),
            // The controller's framer yields nothing else after initialization.
            other => Err(ProtocolError {
                fes: term_fes::INVALID_HEADER_FIELD,
                fei: offset::TYPE,
                reason: format!("unexpected PDU type {:#x}", other.pdu_type()),
            }),
        }
    }

    /// A data digest error: the PDU's command fails with Transient Transport Error
    /// and its data is dropped.
    fn on_digest_error(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        e: FramerError,
        header: &[u8],
    ) -> Result<(), ProtocolError> {
        bump(&rt.stats.digest_errors, 1);
        let FramerError::DataDigest { pdu_type: t, .. } = e else {
            return Ok(());
        };
        let qid = rt.qid(ci);
        let Some(q) = rt.queue(ci) else {
            return Ok(());
        };
        warn!(peer = %q.t.peer, %qid, "NVMe/TCP: {e}; failing the command");
        let writer = q.t.writer;
        match t {
            pdu_type::CMD => {
                let mut sqe_bytes = [0u8; SQE_LEN];
                let Some(src) = header.get(HDR_LEN..CMD_HDR_LEN) else {
                    rt.kill(self, ci, "data digest error without a header", false);
                    return Ok(());
                };
                sqe_bytes.copy_from_slice(src);
                let Some(w) = writer else { return Ok(()) };
                if let Some(cqe) = rt.respond_unslotted(ci, &sqe_bytes, transient_transport_error())
                {
                    if let Some(q) = rt.queue_mut(ci) {
                        let _ = w.capsule_resp(&cqe, &mut q.t.tx.bytes);
                    }
                }
                self.mark_dirty(ci);
                Ok(())
            }
            pdu_type::H2C_DATA => {
                let Some(h) = header.get(..DATA_HDR_LEN) else {
                    rt.kill(self, ci, "data digest error without a header", false);
                    return Ok(());
                };
                let d = DataPdu::new_unchecked(h);
                let (cid, ttag, datao, datal) =
                    (d.command_id(), d.ttag(), d.data_offset(), d.data_length());
                self.on_h2c(rt, ci, cid, ttag, datao, datal, None)
            }
            _ => {
                rt.kill(self, ci, "data digest error on an unexpected PDU", false);
                Ok(())
            }
        }
    }

    fn on_capsule(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        sqe_bytes: &[u8; SQE_LEN],
        data: &[u8],
    ) {
        let Some(q) = rt.queue_mut(ci) else { return };
        if q.dead {
            return;
        }
        let Some(si) = q.t.free.pop() else {
            warn!(
                peer = %q.t.peer, qid = %q.ctx.qid, slots = q.slots.len(),
                "host sent more commands than its queue holds; closing the connection"
            );
            rt.kill(self, ci, "submission queue overrun", false);
            return;
        };
        rt.capsule(self, ci, si, sqe_bytes, InCapsule::Bytes(data));
    }

    /// Sends R2Ts for the command's next windows, up to the R2T limit.
    pub(super) fn issue_r2ts(&mut self, rt: &mut Runtime<Self>, ci: u16, si: u16) {
        let maxh2c = self.cfg.maxh2cdata.max(1);
        let Some(q) = rt.queue_mut(ci) else { return };
        let Some(w) = q.t.writer else { return };
        let limit = q.t.r2t_limit;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let (cid, len) = (slot.req.cid(), slot.req.plan.len);
        let out = &mut q.t.tx.bytes;
        let n = slot.t.r2t.send_r2ts(&w, cid, si, len, maxh2c, limit, out);
        bump(&rt.stats.r2ts, n as u64);
        self.mark_dirty(ci);
    }

    /// H2CData of `datal` bytes (or one that failed its data digest, `data` None):
    /// checks it continues an outstanding R2T window of the command its TTAG names,
    /// stores `data` (the bytes the framer held: all that were not received in place),
    /// and moves the command on when its data is complete.
    #[allow(clippy::too_many_arguments)]
    fn on_h2c(
        &mut self,
        rt: &mut Runtime<Self>,
        ci: u16,
        cid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        data: Option<&[u8]>,
    ) -> Result<(), ProtocolError> {
        bump(&rt.stats.h2c_pdus, 1);
        let Some(q) = rt.queue_mut(ci) else {
            return Ok(());
        };
        let waiting = q.slots.get(usize::from(ttag)).map(|s| {
            (
                s.state == ReqState::TransferringHostToController,
                s.req.cid(),
            )
        });
        match waiting {
            Some((true, scid)) if scid == cid => {}
            Some((true, scid)) => {
                return Err(ProtocolError {
                    fes: term_fes::INVALID_HEADER_FIELD,
                    fei: offset::COMMAND_ID,
                    reason: format!(
                        "H2CData for command {cid:#x} carries TTAG {ttag:#x} of command {scid:#x}"
                    ),
                });
            }
            _ => {
                return Err(ProtocolError {
                    fes: term_fes::INVALID_HEADER_FIELD,
                    fei: offset::TTAG,
                    reason: format!("H2CData with TTAG {ttag:#x} (command {cid:#x}) but no R2T outstanding for it"),
                });
            }
        }
        let Some(slot) = q.slots.get_mut(usize::from(ttag)) else {
            return Ok(());
        };
        slot.t.r2t.accept_h2c(cid, datao, datal)?;
        match data {
            // The bytes the framer held: any others were received in place (`direct`).
            Some(d) if slot.t.failed.is_none() => slot.req.write_data(datao as usize, d),
            Some(_) => {}
            None => slot.t.failed = Some(transient_transport_error()),
        }
        let len = slot.req.plan.len;
        if let Some(st) = slot.t.failed {
            if slot.t.r2t.drained() {
                // Never executed: the data that failed its digest reaches nothing.
                rt.data_failed(self, ci, ttag, st);
            }
        } else if slot.t.r2t.complete(len) {
            rt.data_ready(self, ci, ttag);
        } else {
            self.issue_r2ts(rt, ci, ttag);
        }
        Ok(())
    }

    /// Queues the controller-to-host data (if any) and the response of a finished
    /// command, then frees its slot.
    pub(super) fn send_c2h_and_response(&mut self, rt: &mut Runtime<Self>, ci: u16, si: u16) {
        let chunk = self.opts.c2h_chunk.max(1);
        let cqe = rt.fill_cqe(ci, si);
        let Some(q) = rt.queue_mut(ci) else { return };
        let (Some(w), Some(cqe)) = (q.t.writer, cqe) else {
            return rt.sent(self, ci, si);
        };
        let sqflow_disabled = q.ctx.sq_flow_disabled;
        let c = &mut q.t;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let mut c2h = 0u64;
        let mut resp = true;
        let mut err = None;
        let mut spare = None;
        let plan = slot.req.plan;
        let cid = slot.req.cid();
        if plan.dir == DataDir::CtrlToHost && slot.req.status.is_success() && plan.len > 0 {
            if let Some(b) = slot.buf.take() {
                let arena = b.slice.buf.clone();
                let base = b.slice.offset;
                // SAFETY: the backend operation that filled this buffer completed (or
                // the command ran synchronously), and the buffer stays out of the pool
                // until the last PDU using it is written, so nothing writes these bytes
                // while they are read here or queued for the socket.
                let data = unsafe { arena.slice(base, b.slice.len) }.unwrap_or(&[]);
                let total = u32::try_from(data.len()).unwrap_or(u32::MAX);
                let mut buf = Some(b);
                for p in data_pieces(0, total, chunk, sqflow_disabled) {
                    let piece = data.get(p.range()).unwrap_or(&[]);
                    // The last piece sent from the buffer itself takes the buffer
                    // along: a piece sent by reference (at least ZERO_COPY_MIN long)
                    // after which less than ZERO_COPY_MIN follows (at most one piece,
                    // copied: the pieces before the last are as long as this one).
                    let takes_buf = data.len().saturating_sub(p.range().end) < ZERO_COPY_MIN;
                    let by_ref = || {
                        let at = p.range().start;
                        if let Some(b) = buf.take_if(|_| takes_buf) {
                            return PoolData::last(b, at, piece.len())
                                .map_err(|b| spare = Some(b))
                                .ok();
                        }
                        DmaSlice::new(arena.clone(), base + at, piece.len()).map(PoolData::Before)
                    };
                    if let Err(e) = c.tx.push_data_pdu(&w, cid, 0, p, piece, by_ref) {
                        err = Some(e);
                        break;
                    }
                    c2h += 1;
                }
                // Not queued by reference: back to the pool with the slot.
                if let Some(b) = buf.take().or(spare.take()) {
                    slot.buf = Some(b);
                }
                // SQ flow control disabled: SUCCESS on the last C2HData replaces the
                // response capsule (as Linux nvmet does).
                resp = !(sqflow_disabled && c2h > 0);
            }
        }
        if resp {
            // Released with the responses around it, so that the host completes them
            // together (send_queue's module docs: deferred PDUs), reads of every size:
            // at 128 KiB QD 16 SPDK's perf sent one command a segment when each
            // response followed its own data, and its TCP input cost our target 2.3 µs
            // a command more than SPDK's (docs/bench-tcp.md). A response without data
            // goes at once: there is nothing to gather it behind.
            let to = if c2h > 0 {
                c.tx.deferred()
            } else {
                &mut c.tx.bytes
            };
            if let Err(e) = w.capsule_resp(&cqe, to) {
                err = Some(e);
            }
        }
        bump(&rt.stats.c2h_pdus, c2h);
        if resp {
            bump(&rt.stats.responses, 1);
        }
        self.mark_dirty(ci);
        rt.sent(self, ci, si);
        if let Some(e) = err {
            warn!("cannot encode a PDU: {e}");
            rt.kill(self, ci, "PDU encoding failed", true);
        }
    }
}
