//! Reliable-connected queue pairs: work requests execute synchronously in the posting
//! thread, against the peer QP's receive queue and protection domain.
//!
//! Locks (all per object, never global): a QP's send lock serialises its `post_send`
//! calls and is held while a chain executes; the peer's receive-queue lock is taken
//! under it while a SEND is delivered; PD key tables and CQ queues are leaves, taken
//! briefly and never while waiting for anything else. No thread takes a send lock while
//! holding a receive-queue lock, so two QPs sending to each other cannot deadlock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::counters::bump;
use super::cq::{Cqe, Credits, Release, SoftCq};
use super::mr::{KeyCache, Seg, SoftPd};
use super::recv_ring::{RecvRing, MAX_SGE, MAX_WR};
use super::srq::SoftSrq;
use super::DevShared;
use crate::{
    Access, ProtectionDomain, QpCaps, QpInit, QueuePair, RecvWr, SendOp, SendWr, Sge, VerbsError,
    WcOpcode, WcStatus, WorkCompletion,
};

/// State guarded by the send lock. The scratch vectors hold the validated segments of
/// the work request being executed (they keep their capacity between posts); the key
/// caches keep the buffers those segments point into alive.
struct SqState {
    /// Send WRs ever posted (wrapping); minus the released count: slots in use.
    posted: u32,
    /// Unsignaled successful WRs since the last send completion: their slots are given
    /// back with the next completion on this queue.
    unsignaled: u32,
    local: Vec<Seg>,
    remote: Vec<Seg>,
    /// Regions of this QP's PD (local SGEs).
    local_keys: KeyCache,
    /// Regions of the peer's PD (rkeys, and the SGEs of the peer's receives).
    peer_keys: KeyCache,
}

impl SqState {
    /// Drops the segments of the finished work request, then what kept them valid.
    fn end_request(&mut self) {
        self.local.clear();
        self.remote.clear();
        self.local_keys.end_request();
        self.peer_keys.end_request();
    }
}

pub(super) struct SoftQp {
    num: u32,
    dev: Arc<DevShared>,
    pd: Arc<SoftPd>,
    send_cq: Arc<SoftCq>,
    recv_cq: Arc<SoftCq>,
    caps: QpCaps,
    dead: AtomicBool,
    /// Set once when the connection is established; weak so the pair is no cycle.
    peer: OnceLock<Weak<SoftQp>>,
    credits: Arc<Credits>,
    /// This QP's attachments to its send and receive CQs.
    send_attach: u32,
    recv_attach: u32,
    sq: Mutex<SqState>,
    /// The QP's own receive queue; empty (capacity 0) when it takes receives from `srq`.
    rq: Mutex<RecvRing>,
    srq: Option<Arc<SoftSrq>>,
}

/// Creates an unconnected QP from objects of `dev`.
pub(super) fn create(dev: &Arc<DevShared>, init: QpInit) -> Result<Arc<SoftQp>, VerbsError> {
    let pd = dev.pds.find(&init.pd).ok_or(VerbsError::InvalidArgument(
        "protection domain was not allocated by this soft device",
    ))?;
    let not_ours = VerbsError::InvalidArgument("CQ was not created by this soft device");
    let send_cq = dev.cqs.find(&init.send_cq).ok_or(not_ours.clone())?;
    let recv_cq = dev.cqs.find(&init.recv_cq).ok_or(not_ours)?;
    let srq = match &init.srq {
        None => None,
        Some(s) => {
            let srq = dev.srqs.find(s).ok_or(VerbsError::InvalidArgument(
                "SRQ was not created by this soft device",
            ))?;
            if !Arc::ptr_eq(&srq.pd, &pd) {
                return Err(VerbsError::InvalidArgument(
                    "SRQ and QP are in different protection domains",
                ));
            }
            Some(srq)
        }
    };
    let mut caps = init.caps;
    if srq.is_some() {
        // No receive queue of its own (ibverbs ignores these with an SRQ).
        caps.max_recv_wr = 0;
        caps.max_recv_sge = 0;
    }
    if caps.max_send_wr > MAX_WR || caps.max_recv_wr > MAX_WR {
        return Err(VerbsError::InvalidArgument(
            "max_send_wr/max_recv_wr above 65536",
        ));
    }
    if caps.max_send_sge > MAX_SGE || caps.max_recv_sge > MAX_SGE {
        return Err(VerbsError::InvalidArgument(
            "max_send_sge/max_recv_sge above 32",
        ));
    }
    let num = dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
    let credits = Arc::new(Credits::default());
    let send_attach = send_cq.attach(&credits);
    let recv_attach = match &srq {
        // Receive completions give their slots back to the SRQ.
        Some(srq) => recv_cq.attach(&srq.credits),
        None if Arc::ptr_eq(&send_cq, &recv_cq) => send_attach,
        None => recv_cq.attach(&credits),
    };
    Ok(Arc::new(SoftQp {
        num,
        dev: Arc::clone(dev),
        pd,
        send_cq,
        recv_cq,
        caps,
        dead: AtomicBool::new(false),
        peer: OnceLock::new(),
        credits,
        send_attach,
        recv_attach,
        sq: Mutex::new(SqState {
            posted: 0,
            unsignaled: 0,
            local: Vec::with_capacity(caps.max_send_sge as usize),
            remote: Vec::with_capacity(MAX_SGE as usize),
            local_keys: KeyCache::new(),
            peer_keys: KeyCache::new(),
        }),
        rq: Mutex::new(RecvRing::new(
            caps.max_recv_wr as usize,
            caps.max_recv_sge as usize,
        )),
        srq,
    }))
}

/// Links two fresh QPs into a connection.
pub(super) fn link(a: &Arc<SoftQp>, b: &Arc<SoftQp>) -> Result<(), VerbsError> {
    let already = VerbsError::InvalidArgument("queue pair is already connected");
    a.peer.set(Arc::downgrade(b)).map_err(|_| already.clone())?;
    b.peer.set(Arc::downgrade(a)).map_err(|_| already)
}

fn opcode_of(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
    }
}

/// Copies the bytes described by `src` into `dst`, in order. Returns false if `dst`
/// is shorter than `src`.
///
/// The caller keeps the buffers behind both lists alive (their key caches hold them).
fn copy_segs(src: &[Seg], dst: &[Seg]) -> bool {
    let mut dst_iter = dst.iter();
    let mut cur: Option<&Seg> = None;
    let mut cur_off = 0usize;
    for s in src {
        let mut done = 0usize;
        while done < s.len {
            let d = match cur {
                Some(d) if cur_off < d.len => d,
                _ => match dst_iter.next() {
                    Some(d) => {
                        cur = Some(d);
                        cur_off = 0;
                        continue;
                    }
                    None => return false,
                },
            };
            let n = (s.len - done).min(d.len - cur_off);
            // SAFETY: `s.ptr..s.ptr + s.len` and `d.ptr..d.ptr + d.len` were bounds-checked
            // against their `DmaBuffer`s by `DmaBuffer::ptr_at` when resolved, and the
            // key caches of the executing QP keep those buffers alive until the segments
            // are cleared; `done + n <= s.len` and `cur_off + n <= d.len`. `ptr::copy`
            // tolerates overlap (both sides may name the same buffer). Concurrent access
            // by the buffers' owners is excluded by the verbs rule `DmaBuffer` documents,
            // as for a NIC's DMA.
            unsafe { std::ptr::copy(s.ptr.add(done), d.ptr.add(cur_off), n) };
            done += n;
            cur_off += n;
        }
    }
    true
}

impl SoftQp {
    fn recv_cqe(
        &self,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        invalidated_rkey: Option<u32>,
    ) -> Cqe {
        Cqe {
            wc: WorkCompletion {
                wr_id,
                status,
                opcode: WcOpcode::Recv,
                byte_len,
                invalidated_rkey,
                qp_num: self.num,
            },
            release: Release {
                attach: self.recv_attach,
                slots: 1,
                send: false,
            },
        }
    }

    /// Pushes the send completion of `wr`, giving back its slot and those of the
    /// unsignaled WRs before it.
    fn complete_send(&self, sq: &mut SqState, wr: &SendWr<'_>, status: WcStatus, byte_len: u32) {
        let slots = sq.unsignaled + 1;
        sq.unsignaled = 0;
        self.send_cq.push(Cqe {
            wc: WorkCompletion {
                wr_id: wr.wr_id,
                status,
                opcode: opcode_of(wr.op),
                byte_len,
                invalidated_rkey: None,
                qp_num: self.num,
            },
            release: Release {
                attach: self.send_attach,
                slots,
                send: true,
            },
        });
    }

    /// Moves the QP to the error state and flushes its posted receives. Idempotent.
    fn enter_error(&self) {
        self.dead.store(true, Ordering::Release);
        let mut rq = self.rq.lock();
        if rq.len == 0 {
            return;
        }
        let flushed = std::iter::from_fn(|| rq.pop_front())
            .map(|id| self.recv_cqe(id, WcStatus::WrFlushError, 0, None));
        self.recv_cq.push_iter(flushed);
    }

    fn is_dead_now(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Where SENDs arriving at this QP find their receives: its SRQ's ring or its own.
    fn recv_ring(&self) -> &Mutex<RecvRing> {
        match &self.srq {
            Some(srq) => &srq.ring,
            None => &self.rq,
        }
    }

    /// Validates the local SGEs of a work request into `out`; returns the total length.
    fn gather(
        &self,
        keys: &mut KeyCache,
        out: &mut Vec<Seg>,
        sgl: &[Sge],
        need: Access,
    ) -> Result<u32, WcStatus> {
        let mut total = 0u64;
        for sge in sgl {
            let seg = self
                .pd
                .resolve(keys, sge.lkey, false, sge.addr, u64::from(sge.length), need)
                .ok_or(WcStatus::LocalProtectionError)?;
            total += u64::from(sge.length);
            if seg.len > 0 {
                out.push(seg);
            }
        }
        u32::try_from(total).map_err(|_| WcStatus::LocalLengthError)
    }

    fn execute(
        &self,
        sq: &mut SqState,
        peer: Option<&SoftQp>,
        wr: &SendWr<'_>,
    ) -> Result<u32, WcStatus> {
        let result = self.execute_inner(sq, peer, wr);
        sq.end_request();
        result
    }

    fn execute_inner(
        &self,
        sq: &mut SqState,
        peer: Option<&SoftQp>,
        wr: &SendWr<'_>,
    ) -> Result<u32, WcStatus> {
        let need = match wr.op {
            SendOp::RdmaRead { .. } => Access::LOCAL_WRITE,
            _ => Access::empty(),
        };
        let total = self.gather(&mut sq.local_keys, &mut sq.local, wr.sg_list, need)?;
        let peer = match peer {
            Some(p) if !p.is_dead_now() => p,
            _ => return Err(WcStatus::RetryExceeded),
        };
        match wr.op {
            SendOp::Send => peer.deliver(self, sq, total, None),
            SendOp::SendWithInvalidate { rkey } => peer.deliver(self, sq, total, Some(rkey)),
            SendOp::RdmaWrite { remote_addr, rkey } => {
                if total > 0 {
                    let dst = peer
                        .pd
                        .resolve(
                            &mut sq.peer_keys,
                            rkey,
                            true,
                            remote_addr,
                            u64::from(total),
                            Access::REMOTE_WRITE,
                        )
                        .ok_or(WcStatus::RemoteAccessError)?;
                    if !copy_segs(&sq.local, std::slice::from_ref(&dst)) {
                        return Err(WcStatus::RemoteAccessError);
                    }
                }
                Ok(total)
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                if total > 0 {
                    let src = peer
                        .pd
                        .resolve(
                            &mut sq.peer_keys,
                            rkey,
                            true,
                            remote_addr,
                            u64::from(total),
                            Access::REMOTE_READ,
                        )
                        .ok_or(WcStatus::RemoteAccessError)?;
                    if !copy_segs(std::slice::from_ref(&src), &sq.local) {
                        return Err(WcStatus::LocalProtectionError);
                    }
                }
                Ok(total)
            }
        }
    }

    /// Waits for a posted receive (RNR retry, bounded by the device's RNR timeout) and
    /// returns the locked receive queue holding at least one.
    fn wait_for_recv(&self, sender: &SoftQp) -> Result<MutexGuard<'_, RecvRing>, WcStatus> {
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            let rq = self.recv_ring().lock();
            if self.is_dead_now() {
                return Err(WcStatus::RetryExceeded);
            }
            if rq.len > 0 {
                return Ok(rq);
            }
            drop(rq);
            let now = Instant::now();
            let until = *deadline.get_or_insert_with(|| now.checked_add(self.dev.rnr_timeout()));
            if until.is_some_and(|until| now >= until) {
                return Err(WcStatus::RnrRetryExceeded);
            }
            if sender.is_dead_now() {
                return Err(WcStatus::WrFlushError);
            }
            std::thread::yield_now();
        }
    }

    /// Receiver side of a SEND: places the sender's gathered segments (`sq.local`,
    /// `total` bytes) into the oldest posted receive, checked against this QP's PD
    /// (through the sender's cache of it), and completes it on the receive CQ.
    fn deliver(
        &self,
        sender: &SoftQp,
        sq: &mut SqState,
        total: u32,
        invalidate: Option<u32>,
    ) -> Result<u32, WcStatus> {
        let SqState {
            local: src,
            remote: dst,
            peer_keys: keys,
            ..
        } = sq;
        let mut rq = self.wait_for_recv(sender)?;
        let Some((wr_id, sges)) = rq.front() else {
            return Err(WcStatus::RnrRetryExceeded);
        };
        let capacity: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let mut recv_error = None;
        if u64::from(total) > capacity {
            recv_error = Some(WcStatus::LocalLengthError);
        } else {
            let mut remaining = u64::from(total);
            for sge in sges {
                if remaining == 0 {
                    break;
                }
                if sge.length == 0 {
                    continue;
                }
                let Some(mut seg) = self.pd.resolve(
                    keys,
                    sge.lkey,
                    false,
                    sge.addr,
                    u64::from(sge.length),
                    Access::LOCAL_WRITE,
                ) else {
                    recv_error = Some(WcStatus::LocalProtectionError);
                    break;
                };
                let used = remaining.min(u64::from(sge.length));
                seg.len = usize::try_from(used).unwrap_or(seg.len);
                remaining -= used;
                dst.push(seg);
            }
        }
        if let Some(status) = recv_error {
            // The responder consumes the receive in error and NAKs the request.
            rq.pop_front();
            self.recv_cq.push(self.recv_cqe(wr_id, status, 0, None));
            return Err(WcStatus::RemoteInvalidRequest);
        }
        if let Some(rkey) = invalidate {
            if !self.pd.invalidate(rkey) {
                // The receive stays posted; the error state flushes it.
                return Err(WcStatus::RemoteInvalidRequest);
            }
        }
        if !copy_segs(src, dst) {
            rq.pop_front();
            self.recv_cq
                .push(self.recv_cqe(wr_id, WcStatus::LocalProtectionError, 0, None));
            return Err(WcStatus::RemoteInvalidRequest);
        }
        rq.pop_front();
        self.recv_cq
            .push(self.recv_cqe(wr_id, WcStatus::Success, total, invalidate));
        Ok(total)
    }
}

impl QueuePair for SoftQp {
    fn qp_num(&self) -> u32 {
        self.num
    }

    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), VerbsError> {
        let shard = self.dev.counters.shard();
        bump(&shard.post_send_calls, 1);
        let max_sge = self.caps.max_send_sge as usize;
        if wrs.iter().any(|wr| wr.sg_list.len() > max_sge) {
            return Err(VerbsError::InvalidArgument(
                "more SGEs in a send work request than max_send_sge",
            ));
        }
        let Some(peer) = self.peer.get() else {
            if self.is_dead_now() {
                return Err(VerbsError::QpError);
            }
            return Err(VerbsError::InvalidArgument("queue pair is not connected"));
        };
        let mut sq = self.sq.lock();
        if self.is_dead_now() {
            return Err(VerbsError::QpError);
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let n = u32::try_from(wrs.len()).map_err(|_| VerbsError::QueueFull("send queue"))?;
        let released = self.credits.sq_released.load(Ordering::Acquire);
        let outstanding = sq.posted.wrapping_sub(released);
        if u64::from(outstanding) + u64::from(n) > u64::from(self.caps.max_send_wr) {
            return Err(VerbsError::QueueFull("send queue"));
        }
        sq.posted = sq.posted.wrapping_add(n);
        bump(&shard.send_wrs, u64::from(n));

        let peer = peer.upgrade();
        let mut failed = false;
        for wr in wrs {
            // A concurrent disconnect (by the peer) flushes what is left of the chain.
            if !failed && self.is_dead_now() {
                failed = true;
            }
            if failed {
                self.complete_send(&mut sq, wr, WcStatus::WrFlushError, 0);
                continue;
            }
            match self.execute(&mut sq, peer.as_deref(), wr) {
                Ok(len) if wr.signaled => self.complete_send(&mut sq, wr, WcStatus::Success, len),
                Ok(_) => sq.unsignaled += 1,
                Err(status) => {
                    self.complete_send(&mut sq, wr, status, 0);
                    failed = true;
                }
            }
        }
        if failed {
            self.enter_error();
            if let Some(peer) = &peer {
                peer.enter_error();
            }
        }
        Ok(())
    }

    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        if self.srq.is_some() {
            return Err(VerbsError::InvalidArgument(
                "the queue pair takes its receives from an SRQ",
            ));
        }
        let shard = self.dev.counters.shard();
        bump(&shard.post_recv_calls, 1);
        let max_sge = self.caps.max_recv_sge as usize;
        if wrs.iter().any(|wr| wr.sg_list.len() > max_sge) {
            return Err(VerbsError::InvalidArgument(
                "more SGEs in a receive work request than max_recv_sge",
            ));
        }
        let mut rq = self.rq.lock();
        if self.is_dead_now() {
            return Err(VerbsError::QpError);
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let n = u32::try_from(wrs.len()).map_err(|_| VerbsError::QueueFull("receive queue"))?;
        let released = self.credits.rq_released.load(Ordering::Acquire);
        let outstanding = rq.posted.wrapping_sub(released);
        if u64::from(outstanding) + u64::from(n) > u64::from(self.caps.max_recv_wr) {
            return Err(VerbsError::QueueFull("receive queue"));
        }
        for wr in wrs {
            if !rq.push(wr.wr_id, wr.sg_list) {
                // Unreachable: the credits never undercount the ring.
                return Err(VerbsError::QueueFull("receive queue"));
            }
            rq.posted = rq.posted.wrapping_add(1);
        }
        bump(&shard.recv_wrs, u64::from(n));
        Ok(())
    }

    fn disconnect(&self) {
        self.enter_error();
        if let Some(peer) = self.peer.get().and_then(Weak::upgrade) {
            peer.enter_error();
        }
    }

    fn is_dead(&self) -> bool {
        self.is_dead_now()
    }

    fn pd(&self) -> Arc<dyn ProtectionDomain> {
        self.pd.clone()
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.disconnect();
        self.send_cq.detach(self.send_attach);
        if self.recv_attach != self.send_attach || !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.detach(self.recv_attach);
        }
    }
}
