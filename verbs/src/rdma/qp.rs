//! Reliable-connected queue pairs created through rdma_cm (`rdma_create_qp`).
//!
//! A QP owns its rdma_cm id and that id's own event channel, so connection events
//! (DISCONNECTED, TIMEWAIT_EXIT, DEVICE_REMOVAL) of one queue never wait behind, or
//! affect, another. [`QueuePair::is_dead`] reads them without blocking, and, while the
//! QP still looks alive, asks the device for its state (`ibv_query_qp`): an error
//! completion moves a QP to the error state without any rdma_cm event.
//!
//! Tear-down: `disconnect` (or a peer's DISCONNECTED) calls `rdma_disconnect`, which
//! moves the QP to the error state so every outstanding work request completes with a
//! flush status on its CQ, and answers the peer's DREQ. Dropping the QP destroys it
//! (the device stops touching its buffers), gives back its CQ reservation, then
//! destroys the id and its channel; timewait is the kernel CM's business after that.
//! Owners drop the QP before the memory regions its work requests used.
//!
//! Posting converts the interface's work requests into `ibv_send_wr`/`ibv_recv_wr`
//! chains in per-QP scratch vectors, reused so the data path does not allocate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdma_sys::{
    ibv_post_recv, ibv_post_send, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr,
    ibv_qp_state, ibv_qp_type, ibv_query_qp, ibv_send_flags, ibv_send_wr, ibv_sge,
    rdma_cm_event_type, rdma_create_qp, rdma_destroy_qp, rdma_disconnect,
};

use super::convert::wr_fields;
use super::cq::{RdmaCq, CQS};
use super::device::DevShared;
use super::event::CmId;
use super::pd::{RdmaPd, PDS};
use super::post::{post_error, post_recv_chain, Scratch};
use super::srq::{RdmaSrq, SRQS};
use crate::{ProtectionDomain, QpCaps, QpInit, QueuePair, RecvWr, SendWr, VerbsError};

/// How often `is_dead` asks the device for a live QP's state at most.
const STATE_CHECK_EVERY: Duration = Duration::from_millis(10);

pub(super) struct RdmaQp {
    /// Declared first: dropped (destroying the id and its channel) after `Drop::drop`
    /// destroyed the QP.
    id: CmId,
    qp_num: u32,
    pd: Arc<RdmaPd>,
    send_cq: Arc<RdmaCq>,
    recv_cq: Arc<RdmaCq>,
    /// CQ entries reserved on (send CQ, recv CQ).
    reserved: (u32, u32),
    dead: AtomicBool,
    /// `rdma_disconnect` was called.
    disconnected: AtomicBool,
    /// Serialises reading the id's events.
    events: Mutex<()>,
    scratch: Mutex<Scratch>,
    /// The SRQ the QP takes its receives from, kept alive while the QP lives.
    srq: Option<Arc<RdmaSrq>>,
    /// When the device was last asked for the QP's state (`is_dead` callers may poll
    /// it on every wait; the query is a verbs command, so it is rate-limited).
    state_checked: Mutex<Option<Instant>>,
}

impl RdmaQp {
    /// Creates the RC QP of `id` from `init`, with capacities clamped to the device.
    /// On failure the id comes back, so the caller can still reject the connection.
    pub(super) fn create(
        dev: &Arc<DevShared>,
        id: CmId,
        init: &QpInit,
    ) -> Result<Arc<RdmaQp>, (VerbsError, CmId)> {
        let parts = match Self::resolve(dev, &id, init) {
            Ok(p) => p,
            Err(e) => return Err((e, id)),
        };
        let (pd, send_cq, recv_cq, srq) = parts;
        let mut caps = clamp_caps(init.caps, dev.ctx.limits.max_qp_wr, dev.ctx.limits.max_sge);
        // CQ room is reserved for `max_recv_wr` receive completions even with an SRQ:
        // the SRQ's receives may complete for any of its QPs, on any of their CQs.
        let reserved = match reserve_cqs(&send_cq, &recv_cq, caps) {
            Ok(r) => r,
            Err(e) => return Err((e, id)),
        };
        if srq.is_some() {
            // Receives come from the SRQ: the QP has no receive queue of its own.
            caps.max_recv_wr = 0;
            caps.max_recv_sge = 0;
        }
        let mut attr = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.raw,
            recv_cq: recv_cq.raw,
            srq: srq.as_ref().map_or(std::ptr::null_mut(), |s| s.raw),
            cap: ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: 0,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the id, PD, CQs and SRQ (if any) are live and of one context; `attr`
        // is valid.
        if unsafe { rdma_create_qp(id.raw, pd.raw, &mut attr) } != 0 {
            let e = super::event::os_error(&format!(
                "rdma_create_qp(send {} / recv {} WRs)",
                caps.max_send_wr, caps.max_recv_wr
            ));
            send_cq.release(reserved.0);
            recv_cq.release(reserved.1);
            return Err((e, id));
        }
        // SAFETY: rdma_create_qp succeeded, so `id.qp` is the new QP.
        let qp_num = unsafe { (*(*id.raw).qp).qp_num };
        Ok(Arc::new(RdmaQp {
            id,
            qp_num,
            pd,
            send_cq,
            recv_cq,
            reserved,
            dead: AtomicBool::new(false),
            disconnected: AtomicBool::new(false),
            events: Mutex::new(()),
            scratch: Mutex::new(Scratch::default()),
            srq,
            state_checked: Mutex::new(None),
        }))
    }

    /// The PD and CQs behind `init`, checked to be ours and on the id's device.
    #[allow(clippy::type_complexity)]
    fn resolve(
        dev: &Arc<DevShared>,
        id: &CmId,
        init: &QpInit,
    ) -> Result<(Arc<RdmaPd>, Arc<RdmaCq>, Arc<RdmaCq>, Option<Arc<RdmaSrq>>), VerbsError> {
        let pd = PDS.find(&init.pd).ok_or(VerbsError::InvalidArgument(
            "protection domain of another provider",
        ))?;
        let send_cq = CQS
            .find(&init.send_cq)
            .ok_or(VerbsError::InvalidArgument("send CQ of another provider"))?;
        let recv_cq = CQS.find(&init.recv_cq).ok_or(VerbsError::InvalidArgument(
            "receive CQ of another provider",
        ))?;
        let srq = match &init.srq {
            None => None,
            Some(s) => Some(
                SRQS.find(s)
                    .ok_or(VerbsError::InvalidArgument("SRQ of another provider"))?,
            ),
        };
        let ctx = dev.ctx.raw;
        if srq.as_ref().is_some_and(|s| s.pd.dev.ctx.raw != ctx) {
            return Err(VerbsError::InvalidArgument(
                "SRQ and connection are on different RDMA devices",
            ));
        }
        if pd.dev.ctx.raw != ctx
            || send_cq.ctx_raw() != ctx
            || recv_cq.ctx_raw() != ctx
            || id.verbs() != ctx
        {
            return Err(VerbsError::InvalidArgument(
                "protection domain, CQs and connection are on different RDMA devices",
            ));
        }
        Ok((pd, send_cq, recv_cq, srq))
    }

    /// The rdma_cm id of the connection.
    pub(super) fn cm_id(&self) -> &CmId {
        &self.id
    }

    fn raw_qp(&self) -> *mut rdma_sys::ibv_qp {
        // SAFETY: the id is live and its QP exists until `drop`.
        unsafe { (*self.id.raw).qp }
    }

    /// Reads the id's pending connection events without blocking.
    fn drain_events(&self) {
        let Some(_guard) = self.events.try_lock() else {
            return;
        };
        loop {
            let ev = match self.id.channel().next(None) {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(qp = self.qp_num, "rdma_cm channel: {e}; closing the queue");
                    self.dead.store(true, Ordering::Release);
                    return;
                }
            };
            use rdma_cm_event_type::*;
            match ev.kind {
                RDMA_CM_EVENT_ESTABLISHED | RDMA_CM_EVENT_TIMEWAIT_EXIT => {
                    tracing::debug!(qp = self.qp_num, event = ev.name(), "rdma_cm");
                }
                _ => {
                    tracing::debug!(
                        qp = self.qp_num,
                        event = ev.name(),
                        status = ev.status,
                        "connection ends"
                    );
                    self.dead.store(true, Ordering::Release);
                    // Answers the peer's DREQ and flushes our outstanding work.
                    self.disconnect_once();
                }
            }
        }
    }

    /// Whether the QP's state may be asked again (at most every [`STATE_CHECK_EVERY`]).
    fn state_check_due(&self) -> bool {
        let now = Instant::now();
        let mut last = self.state_checked.lock();
        let due = last.is_none_or(|t| now.duration_since(t) >= STATE_CHECK_EVERY);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Whether the device reports the QP in the error state (`ibv_query_qp`).
    fn in_error_state(&self) -> bool {
        // SAFETY: all-zero bytes are valid for these plain C structs (integers, NULL
        // pointers); they are out-parameters of the query below.
        let (mut attr, mut init): (ibv_qp_attr, ibv_qp_init_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        // SAFETY: the QP is live until `drop`; `attr` and `init` are valid out-parameters.
        let rc = unsafe { ibv_query_qp(self.raw_qp(), &mut attr, mask, &mut init) };
        rc == 0 && attr.qp_state == ibv_qp_state::IBV_QPS_ERR
    }

    fn disconnect_once(&self) {
        if !self.disconnected.swap(true, Ordering::AcqRel) {
            // SAFETY: the id is live. Failing (never connected, already gone) is fine.
            unsafe { rdma_disconnect(self.id.raw) };
        }
    }
}

/// Clamps requested capacities to the device's limits (at least one of each WR).
pub(super) fn clamp_caps(c: QpCaps, max_wr: u32, max_sge: u32) -> QpCaps {
    let wr = |v: u32| v.clamp(1, max_wr.max(1));
    let sge = |v: u32| v.clamp(1, max_sge.max(1));
    QpCaps {
        max_send_wr: wr(c.max_send_wr),
        max_recv_wr: wr(c.max_recv_wr),
        max_send_sge: sge(c.max_send_sge),
        max_recv_sge: sge(c.max_recv_sge),
    }
}

/// Reserves CQ room for every WR the QP can have outstanding.
fn reserve_cqs(
    send: &Arc<RdmaCq>,
    recv: &Arc<RdmaCq>,
    caps: QpCaps,
) -> Result<(u32, u32), VerbsError> {
    if Arc::ptr_eq(send, recv) {
        let n = caps.max_send_wr.saturating_add(caps.max_recv_wr);
        send.reserve(n)?;
        return Ok((n, 0));
    }
    send.reserve(caps.max_send_wr)?;
    if let Err(e) = recv.reserve(caps.max_recv_wr) {
        send.release(caps.max_send_wr);
        return Err(e);
    }
    Ok((caps.max_send_wr, caps.max_recv_wr))
}

impl Drop for RdmaQp {
    fn drop(&mut self) {
        self.disconnect_once();
        // SAFETY: the QP is live; after this the device no longer touches buffers of
        // its work requests. The id itself is destroyed when `self.id` drops.
        unsafe { rdma_destroy_qp(self.id.raw) };
        if Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.send_cq.release(self.reserved.0);
        } else {
            self.send_cq.release(self.reserved.0);
            self.recv_cq.release(self.reserved.1);
        }
    }
}

impl QueuePair for RdmaQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), VerbsError> {
        if self.dead.load(Ordering::Acquire) {
            return Err(VerbsError::QpError);
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut guard = self.scratch.lock();
        let s = &mut *guard;
        s.sges.clear();
        s.send.clear();
        for wr in wrs {
            s.sges.extend(wr.sg_list.iter().map(|g| ibv_sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            }));
        }
        let mut first_sge = 0usize;
        for wr in wrs {
            let f = wr_fields(wr.op);
            let n = wr.sg_list.len();
            let num_sge =
                i32::try_from(n).map_err(|_| VerbsError::InvalidArgument("too many SGEs"))?;
            // SAFETY: all-zero is a valid ibv_send_wr (integers, NULL pointers, unions
            // of those); the fields the opcode needs are set below.
            let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
            w.wr_id = wr.wr_id;
            w.opcode = f.opcode;
            w.num_sge = num_sge;
            w.sg_list = if n == 0 {
                std::ptr::null_mut()
            } else {
                // In bounds: `first_sge + n <= s.sges.len()` by construction.
                s.sges[first_sge..].as_mut_ptr()
            };
            w.send_flags = if wr.signaled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            if let Some((remote_addr, rkey)) = f.rdma {
                w.wr.rdma = rdma_sys::rdma_t { remote_addr, rkey };
            }
            if let Some(rkey) = f.invalidate_rkey {
                w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            }
            s.send.push(w);
            first_sge += n;
        }
        let base = s.send.as_mut_ptr();
        let count = s.send.len();
        for i in 0..count.saturating_sub(1) {
            // SAFETY: `i + 1 < count`: both elements exist and the vector no longer grows.
            unsafe { (*base.add(i)).next = base.add(i + 1) };
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a well-formed chain of `count` WRs whose SGE arrays live in `s.sges`
        // until the call returns; the QP is live.
        let rc = unsafe { ibv_post_send(self.raw_qp(), base, &mut bad) };
        s.send.clear();
        s.sges.clear();
        if rc != 0 {
            return Err(post_error(rc, "send queue"));
        }
        Ok(())
    }

    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        if self.srq.is_some() {
            return Err(VerbsError::InvalidArgument(
                "the queue pair takes its receives from an SRQ",
            ));
        }
        if self.dead.load(Ordering::Acquire) {
            return Err(VerbsError::QpError);
        }
        let mut guard = self.scratch.lock();
        let qp = self.raw_qp();
        post_recv_chain(&mut guard, wrs, "receive queue", |chain, bad| {
            // SAFETY: `chain` is a well-formed chain of receive WRs whose SGEs live
            // until the call returns (see `post_recv_chain`); the QP is live.
            unsafe { ibv_post_recv(qp, chain, bad) }
        })
    }

    fn disconnect(&self) {
        self.dead.store(true, Ordering::Release);
        self.disconnect_once();
    }

    fn is_dead(&self) -> bool {
        if !self.dead.load(Ordering::Acquire) {
            self.drain_events();
        }
        if !self.dead.load(Ordering::Acquire) && self.state_check_due() && self.in_error_state() {
            // An error completion (ours, or a NAK the peer's error caused) moved the QP
            // to the error state without any rdma_cm event.
            self.dead.store(true, Ordering::Release);
        }
        self.dead.load(Ordering::Acquire)
    }

    fn pd(&self) -> Arc<dyn ProtectionDomain> {
        self.pd.clone()
    }
}
