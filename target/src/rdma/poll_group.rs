//! NVMe/RDMA on the shared transport runtime: what a poll group does with queue
//! pairs and its completion queue.
//!
//! The runtime ([`crate::runtime`]) owns queues, slots, buffers, timers, the idle
//! policy and the request life cycle; this transport owns each queue's QP, receive
//! and response buffers, and one CQ for the whole group. A slot is a receive buffer:
//! a capsule arrives in it, its in-capsule data is used in place, host data comes by
//! RDMA READ into a pool buffer of the group's registered arena, read data leaves by
//! RDMA WRITE chained unsignaled before the response SEND (with invalidate when the
//! host asked), and the slot's receive is reposted when the SEND completes. All sends
//! of a queue queued in one pass are posted with one doorbell, all reposts with one.
//!
//! With a shared receive queue ([`super::srq`], the default) capsules arrive in the
//! group's SRQ buffers instead: a receive completion is routed to its queue by
//! `qp_num`, takes a free command slot there, and its buffer is reposted to the SRQ
//! (one doorbell per pass for the whole group) when the slot is recycled.
//!
//! A failed work request (or the host's disconnect) ends the queue; its flushed work
//! requests complete with errors and settle their slots (RDMA transfers settle after
//! close), then the runtime frees the queue, and the SRQ buffers it held are reposted.

use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{EpollEvent, EpollFlags};
use tracing::{debug, info, warn};

use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::sqe::SQE_LEN;
use nvmf_verbs::{
    post_recv_slots, CompletionQueue, Device, DmaBuffer, MemoryRegion, ProtectionDomain, QueuePair,
    SendOp, SendWr, Sge, SharedReceiveQueue, VerbsError, WcStatus, WorkCompletion,
};

use super::srq::{GroupSrq, SrqSlots};
use super::{capsule_size, verbs_wr_id, verbs_wr_id_parts, wr_kind};
use crate::core::{DataDir, QueueCtx};
use crate::runtime::stats::bump;
use crate::runtime::{
    self, BufferPool, HostData, InCapsule, ReqState, Runtime, SglCarrier, Transport,
};
use crate::target::Target;

pub use crate::runtime::group::SHUTDOWN_DRAIN;
pub use crate::runtime::GroupCounters;

/// Completions taken per CQ poll.
const POLL_BATCH: usize = 64;
/// How long a completion of an unknown QP is kept for its queue to arrive.
const ORPHAN_TTL: Duration = Duration::from_secs(2);
/// Default data arena per poll group.
pub const DEFAULT_ARENA_BYTES: usize = 64 << 20;
/// Epoll token of the completion queue's event channel.
const CQ_TOKEN: u64 = 0;
/// CQ entries per entry of the largest queue a group may serve.
const CQ_ENTRIES_PER_QUEUE_ENTRY: u32 = 64;

/// A queue ready to be served, built by the listener.
pub struct NewQueue {
    pub qp: Arc<dyn QueuePair>,
    pub ctx: QueueCtx,
    pub slots: u16,
    pub capsule_size: usize,
    /// The queue's own receive buffers (one capsule per slot, all posted); `None` when
    /// its QP takes receives from the group's SRQ.
    pub recv: Option<(Arc<DmaBuffer>, Arc<dyn MemoryRegion>)>,
    pub resp_buf: Arc<DmaBuffer>,
    pub resp_mr: Arc<dyn MemoryRegion>,
}

/// What a listener needs from a group to create QPs on it: its CQ, and its SRQ when
/// it has one.
#[derive(Clone)]
pub struct GroupShared {
    pub cq: Arc<dyn CompletionQueue>,
    pub srq: Option<Arc<dyn SharedReceiveQueue>>,
}

/// What the listener needs to hand queues to a group.
pub type GroupHandle = runtime::GroupHandle<NewQueue, GroupShared>;

/// A send work request waiting for the queue's next doorbell.
#[derive(Clone, Copy)]
enum PendingSend {
    /// Response for `slot`, preceded by an RDMA WRITE (address, key, length) when set.
    Response {
        slot: u16,
        write: Option<(u64, u32, u32)>,
        invalidate: Option<u32>,
    },
    /// RDMA READ of host data into the slot's pool buffer.
    Read {
        slot: u16,
        addr: u64,
        key: u32,
        len: u32,
    },
}

/// The transport part of a queue.
pub struct RdmaQueue {
    qp: Arc<dyn QueuePair>,
    qp_num: u32,
    capsule_size: usize,
    /// Where capsules arrive: the queue's own receive buffers, or the group's SRQ
    /// buffers (then `srq_slots` says which buffer each slot holds).
    recv_buf: Arc<DmaBuffer>,
    /// The registration of the queue's own receive buffers (none with an SRQ).
    recv_mr: Option<Arc<dyn MemoryRegion>>,
    srq_slots: Option<SrqSlots>,
    resp_buf: Arc<DmaBuffer>,
    resp_mr: Arc<dyn MemoryRegion>,
    reposts: Vec<u16>,
    sends: Vec<PendingSend>,
}

/// The NVMe/RDMA side of one poll group.
pub struct RdmaTransport {
    index: usize,
    cq: Arc<dyn CompletionQueue>,
    /// The group's shared receive queue (config `rdma.srq`, when the device has SRQs).
    srq: Option<GroupSrq>,
    /// Queues with capsules waiting for a free slot (SRQ only).
    backlogged: Vec<u16>,
    /// Bytes of the receive buffers of queues without an SRQ.
    queue_recv_bytes: usize,
    /// Queue indices with batched work to post.
    dirty: Vec<u16>,
    /// QP number → queue index, to route completions.
    by_qp: crate::fastmap::FastMap<u32, u16>,
    /// Completions of QPs the group does not know yet: the host may send its first
    /// capsule before the listener's hand-over reaches us. Replayed when the queue
    /// arrives; dropped after [`ORPHAN_TTL`] (those belong to queues already freed).
    orphans: Vec<(Instant, WorkCompletion)>,
    wc_buf: Vec<WorkCompletion>,
    sge_buf: Vec<Sge>,
}

/// Starts poll group `index`.
pub fn spawn(
    index: usize,
    target: Arc<Target>,
    device: Arc<dyn Device>,
    pd: Arc<dyn ProtectionDomain>,
    stop: Arc<AtomicBool>,
) -> Result<(GroupHandle, JoinHandle<()>), VerbsError> {
    let cq =
        device.create_cq(u32::from(target.params.max_queue_size) * CQ_ENTRIES_PER_QUEUE_ENTRY)?;
    let pool = BufferPool::new(DEFAULT_ARENA_BYTES, target.params.max_io_size)
        .ok_or(VerbsError::Provider("cannot allocate data arena".into()))?;
    let rdma = &target.params.rdma;
    let srq = if rdma.srq {
        match GroupSrq::new(pd.as_ref(), rdma.srq_depth, capsule_size(&target)) {
            Ok(s) => {
                info!(group = index, depth = rdma.srq_depth, bytes = s.bytes(), device = %device.name(),
                      "shared receive queue posted");
                Some(s)
            }
            Err(e) => {
                info!(group = index, device = %device.name(),
                      "no shared receive queue ({e}): receives per queue");
                None
            }
        }
    } else {
        None
    };
    let t = RdmaTransport {
        index,
        cq,
        srq,
        backlogged: Vec::new(),
        queue_recv_bytes: 0,
        dirty: Vec::new(),
        by_qp: crate::fastmap::FastMap::default(),
        orphans: Vec::new(),
        wc_buf: vec![WorkCompletion::EMPTY; POLL_BATCH],
        sge_buf: Vec::new(),
    };
    let mut registered = Ok(());
    let r = runtime::spawn(
        index,
        format!("nvmf-pg{index}"),
        target,
        t,
        pool,
        |t, pool, epoll| {
            if let Err(e) = pool.register(pd.as_ref()) {
                registered = Err(e);
                return Err(std::io::Error::other("cannot register the data arena"));
            }
            let raw = t.cq.event_fd();
            if raw < 0 {
                return Err(std::io::Error::other(
                    "the completion queue has no event descriptor",
                ));
            }
            // SAFETY: `raw` (checked above) is the completion channel of `t.cq`, which
            // the transport owns for the whole life of the group and its epoll set;
            // the borrow only lives for this registration call.
            let fd = unsafe { BorrowedFd::borrow_raw(raw) };
            epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, CQ_TOKEN))?;
            Ok(())
        },
        stop,
    );
    registered?;
    r.map_err(|e| VerbsError::Provider(format!("poll group {index}: {e}")))
}

impl Transport for RdmaTransport {
    type Queue = RdmaQueue;
    type Slot = ();
    type NewQueue = NewQueue;
    type Shared = GroupShared;
    const NAME: &'static str = "NVMe/RDMA";
    const SGL: SglCarrier = SglCarrier::KeyedDataBlock;
    const TRANSFERS_SETTLE_AFTER_CLOSE: bool = true;
    const RECEIVE_BY_EVENTS: bool = false;

    fn in_capsule_buffer(q: &RdmaQueue) -> Option<&Arc<DmaBuffer>> {
        Some(&q.recv_buf)
    }

    fn describe_transfer(_s: &()) -> String {
        "the RDMA READ of the host's buffer to complete".to_string()
    }

    fn shared(&self) -> GroupShared {
        GroupShared {
            cq: self.cq.clone(),
            srq: self.srq.as_ref().map(|s| s.srq.clone()),
        }
    }

    fn add_queue(&mut self, rt: &mut Runtime<Self>, nq: NewQueue) {
        let qp_num = nq.qp.qp_num();
        let qid = nq.ctx.qid;
        let (recv_buf, recv_mr, srq_slots) = match (nq.recv, &self.srq) {
            (Some((buf, mr)), _) => (buf, Some(mr), None),
            (None, Some(srq)) => (srq.buf.clone(), None, Some(SrqSlots::new(nq.slots))),
            (None, None) => {
                warn!(group = self.index, %qid, "queue without receives in a group without an SRQ");
                nq.qp.disconnect();
                return;
            }
        };
        let own_recv_bytes = recv_mr.as_ref().map_or(0, |mr| mr.len());
        let q = RdmaQueue {
            qp: nq.qp,
            qp_num,
            capsule_size: nq.capsule_size,
            recv_buf,
            recv_mr,
            srq_slots,
            resp_buf: nq.resp_buf,
            resp_mr: nq.resp_mr,
            reposts: Vec::new(),
            sends: Vec::new(),
        };
        let qp = q.qp.clone();
        let Some(qi) = rt.add_queue(nq.ctx, nq.slots, q) else {
            warn!(group = self.index, %qid, "too many queues in the poll group");
            qp.disconnect();
            return;
        };
        debug!(group = self.index, %qid, qp = qp_num, slots = nq.slots, "queue added");
        self.by_qp.insert(qp_num, qi);
        self.queue_recv_bytes += own_recv_bytes;
        self.publish_recv_gauges(rt);
        if !self.orphans.is_empty() {
            self.expire_orphans(Instant::now());
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.orphans)
                .into_iter()
                .partition(|(_, wc)| wc.qp_num == qp_num);
            self.orphans = rest;
            for (_, wc) in mine {
                self.on_completion(rt, &wc);
            }
        }
    }

    fn poll(&mut self, rt: &mut Runtime<Self>, _spin: bool) -> usize {
        self.serve_backlogs(rt) + self.poll_cq(rt)
    }

    /// Requests a CQ event, then polls once more: a completion that raced with arming
    /// is seen here, not lost.
    fn arm(&mut self, rt: &mut Runtime<Self>) -> usize {
        self.cq.req_notify();
        self.poll_cq(rt)
    }

    fn on_event(&mut self, rt: &mut Runtime<Self>, token: u64, _events: EpollFlags) -> usize {
        if token != CQ_TOKEN {
            return 0;
        }
        self.cq.ack_events();
        self.poll_cq(rt).max(1)
    }

    fn fetch_data(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16) {
        let Some(q) = rt.queue_mut(qi) else { return };
        let Some(slot) = q.slots.get(usize::from(si)) else {
            return;
        };
        let HostData::Keyed { addr, key, .. } = slot.host else {
            return;
        };
        let len = slot.req.plan.len;
        q.t.sends.push(PendingSend::Read {
            slot: si,
            addr,
            key,
            len,
        });
        self.mark_dirty(qi);
    }

    fn send_response(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16) {
        let Some(cqe) = rt.fill_cqe(qi, si) else {
            return;
        };
        bump(&rt.stats.responses, 1);
        let Some(q) = rt.queue_mut(qi) else { return };
        let Some(slot) = q.slots.get(usize::from(si)) else {
            return;
        };
        q.t.resp_buf.write_at(usize::from(si) * CQE_LEN, &cqe);
        let (write, invalidate) = match slot.host {
            HostData::Keyed {
                addr,
                len,
                key,
                invalidate,
            } => {
                let write = (slot.req.plan.dir == DataDir::CtrlToHost
                    && slot.req.status.is_success()
                    && slot.buf.is_some())
                .then_some((addr, key, len));
                (write, invalidate.then_some(key))
            }
            _ => (None, None),
        };
        q.t.sends.push(PendingSend::Response {
            slot: si,
            write,
            invalidate,
        });
        self.mark_dirty(qi);
    }

    fn recycle(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16) {
        let Some(q) = rt.queue_mut(qi) else { return };
        match q.t.srq_slots.as_mut() {
            Some(slots) => {
                if let (Some(b), Some(srq)) = (slots.release(si), self.srq.as_mut()) {
                    srq.repost(b);
                }
                if slots.has_backlog() && !self.backlogged.contains(&qi) {
                    self.backlogged.push(qi);
                }
            }
            None => {
                q.t.reposts.push(si);
                self.mark_dirty(qi);
            }
        }
    }

    /// Posts every queue's batched sends (one doorbell) and receive reposts (one doorbell).
    fn flush(&mut self, rt: &mut Runtime<Self>) {
        let lkey = rt.pool.lkey();
        while let Some(qi) = self.dirty.pop() {
            let Some(q) = rt.queue_mut(qi) else { continue };
            if q.dead {
                q.t.reposts.clear();
                let unposted = std::mem::take(&mut q.t.sends);
                self.settle_unposted(rt, qi, &unposted);
                continue;
            }
            let (qp_num, qid) = (q.t.qp_num, q.ctx.qid);
            let (mut send, mut recv) = (None, None);
            let mut failed = None;
            if !q.t.sends.is_empty() {
                match post_sends(&mut q.t, &q.slots, lkey, &mut self.sge_buf) {
                    Ok(n) => send = Some(n),
                    Err(e) => failed = Some(e),
                }
            }
            if failed.is_none() && !q.t.reposts.is_empty() {
                recv = Some(q.t.reposts.len());
                if let Err(e) = post_recvs(&mut q.t) {
                    failed = Some(e);
                }
            }
            if let Some(n) = send {
                bump(&rt.stats.send_doorbells, 1);
                bump(&rt.stats.send_wrs, n as u64);
            }
            if let Some(n) = recv {
                bump(&rt.stats.recv_doorbells, 1);
                bump(&rt.stats.recv_wrs, n as u64);
            }
            if let Some(e) = failed {
                warn!(%qid, qp = qp_num, "post failed: {e}; closing the queue");
                let unposted = rt
                    .queue_mut(qi)
                    .map(|q| std::mem::take(&mut q.t.sends))
                    .unwrap_or_default();
                rt.kill(self, qi, "post failed", false);
                self.settle_unposted(rt, qi, &unposted);
            }
        }
        // The group's SRQ reposts, after every queue's sends: one doorbell.
        if let Some(srq) = self.srq.as_mut() {
            match srq.flush() {
                Ok(0) => {}
                Ok(n) => {
                    bump(&rt.stats.recv_doorbells, 1);
                    bump(&rt.stats.recv_wrs, n as u64);
                }
                // Not a queue's fault: the receives are lost to the group (logged).
                Err(e) => warn!(group = self.index, "SRQ repost failed: {e}"),
            }
        }
    }

    fn timers(&mut self, rt: &mut Runtime<Self>, now: Instant) {
        self.expire_orphans(now);
        self.publish_recv_gauges(rt);
        let gone: Vec<u16> = (0..rt.queue_slots() as u16)
            .filter(|&qi| rt.queue(qi).is_some_and(|q| !q.dead && q.t.qp.is_dead()))
            .collect();
        for qi in gone {
            rt.kill(self, qi, "host disconnected", false);
        }
    }

    fn close(&mut self, rt: &mut Runtime<Self>, qi: u16, why: &str, _linger: bool) {
        let Some(q) = rt.queue_mut(qi) else { return };
        info!(qid = %q.ctx.qid, qp = q.t.qp_num, "queue closed: {why}");
        q.t.qp.disconnect();
        q.t.reposts.clear();
        // Sends still queued stay: the queue is dirty, and `flush` settles their slots
        // (they will never be posted), which lets the runtime free the queue.
        if !q.t.sends.is_empty() {
            self.mark_dirty(qi);
        }
    }

    fn freed(&mut self, q: &runtime::Queue<Self>) {
        self.by_qp.remove(&q.t.qp_num);
        if let (Some(slots), Some(srq)) = (&q.t.srq_slots, self.srq.as_mut()) {
            for b in slots.held() {
                srq.repost(b);
            }
        }
        let own = q.t.recv_mr.as_ref().map_or(0, |mr| mr.len());
        self.queue_recv_bytes = self.queue_recv_bytes.saturating_sub(own);
    }
}

impl RdmaTransport {
    fn mark_dirty(&mut self, qi: u16) {
        if !self.dirty.contains(&qi) {
            self.dirty.push(qi);
        }
    }

    /// Work requests of an ended queue that were never posted will never complete:
    /// their slots settle now (else the queue, and the SRQ buffers its slots hold,
    /// would wait for them forever).
    fn settle_unposted(&mut self, rt: &mut Runtime<Self>, qi: u16, unposted: &[PendingSend]) {
        for p in unposted {
            let (PendingSend::Response { slot, .. } | PendingSend::Read { slot, .. }) = *p;
            rt.settle(self, qi, slot);
        }
    }

    fn poll_cq(&mut self, rt: &mut Runtime<Self>) -> usize {
        let n = self.cq.poll(&mut self.wc_buf);
        for i in 0..n {
            let Some(wc) = self.wc_buf.get(i).copied() else {
                break;
            };
            if let (Some(srq), (wr_kind::SRQ_RECV, _)) =
                (self.srq.as_mut(), verbs_wr_id_parts(wc.wr_id))
            {
                srq.consumed();
            }
            self.on_completion(rt, &wc);
        }
        n
    }

    /// Publishes the bytes of receive buffers registered (the SRQ's and the queues')
    /// and the receives posted to the SRQ.
    fn publish_recv_gauges(&self, rt: &Runtime<Self>) {
        let srq = self.srq.as_ref().map_or(0, GroupSrq::bytes);
        runtime::stats::set(
            &rt.stats.recv_buffer_bytes,
            (srq + self.queue_recv_bytes) as u64,
        );
        let posted = self.srq.as_ref().map_or(0, GroupSrq::posted);
        runtime::stats::set(&rt.stats.srq_receives_posted, posted as u64);
    }

    /// Drops completions of unknown QPs older than [`ORPHAN_TTL`] (their queues were
    /// freed), reposting the SRQ buffers they name.
    fn expire_orphans(&mut self, now: Instant) {
        let srq = &mut self.srq;
        self.orphans.retain(|(t, wc)| {
            let keep = now.duration_since(*t) < ORPHAN_TTL;
            if !keep {
                if let (Some(srq), (wr_kind::SRQ_RECV, b)) =
                    (srq.as_mut(), verbs_wr_id_parts(wc.wr_id))
                {
                    srq.repost(b);
                }
            }
            keep
        });
    }

    /// Gives capsules waiting in queues' backlogs the slots recycled since; returns
    /// how many.
    fn serve_backlogs(&mut self, rt: &mut Runtime<Self>) -> usize {
        let mut n = 0;
        while let Some(qi) = self.backlogged.pop() {
            while let Some(q) = rt.queue_mut(qi) {
                if q.dead {
                    break;
                }
                let Some((si, _, len)) = q.t.srq_slots.as_mut().and_then(SrqSlots::take_backlog)
                else {
                    break;
                };
                n += 1;
                self.on_capsule(rt, qi, si, len);
            }
        }
        n
    }

    /// A capsule arrived in SRQ buffer `b` for queue `qi`: it takes a free slot (or
    /// waits for one); a dead queue's buffer goes straight back.
    fn on_srq_capsule(&mut self, rt: &mut Runtime<Self>, qi: u16, b: u16, byte_len: u32) {
        let slot = match rt.queue_mut(qi) {
            Some(q) if !q.dead => q.t.srq_slots.as_mut().map(|s| s.take(b, byte_len)),
            _ => None,
        };
        match slot {
            Some(Some(si)) => self.on_capsule(rt, qi, si, byte_len),
            Some(None) => debug!(qid = %rt.qid(qi), buf = b, "capsule waits for a free slot"),
            None => {
                if let Some(srq) = self.srq.as_mut() {
                    srq.repost(b);
                }
            }
        }
    }

    fn on_completion(&mut self, rt: &mut Runtime<Self>, wc: &WorkCompletion) {
        let (kind, si) = verbs_wr_id_parts(wc.wr_id);
        let Some(&qi) = self.by_qp.get(&wc.qp_num) else {
            self.orphans.push((Instant::now(), *wc));
            return;
        };
        if kind == wr_kind::SRQ_RECV && (wc.status != WcStatus::Success || rt.queue(qi).is_none()) {
            // The buffer goes back whatever happens to the queue.
            if let Some(srq) = self.srq.as_mut() {
                srq.repost(si);
            }
        }
        let Some(q) = rt.queue(qi) else { return };
        let state = q.slots.get(usize::from(si)).map(|s| s.state);
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushError && !q.dead {
                warn!(qid = %q.ctx.qid, qp = q.t.qp_num, status = ?wc.status, op = ?wc.opcode,
                      "RDMA error completion; closing the queue");
            }
            rt.kill(self, qi, "RDMA error completion", false);
            // Nothing more will complete for this work request: its slot settles.
            let settles = matches!(
                (kind, state),
                (wr_kind::READ, Some(ReqState::TransferringHostToController))
                    | (wr_kind::SEND, Some(ReqState::TransferringControllerToHost))
            );
            if settles {
                rt.settle(self, qi, si);
            }
            return;
        }
        match kind {
            wr_kind::RECV => self.on_capsule(rt, qi, si, wc.byte_len),
            wr_kind::SRQ_RECV => self.on_srq_capsule(rt, qi, si, wc.byte_len),
            wr_kind::READ if state == Some(ReqState::TransferringHostToController) => {
                rt.data_ready(self, qi, si)
            }
            wr_kind::SEND if state == Some(ReqState::TransferringControllerToHost) => {
                rt.sent(self, qi, si)
            }
            _ => {}
        }
    }

    fn on_capsule(&mut self, rt: &mut Runtime<Self>, qi: u16, si: u16, byte_len: u32) {
        let Some(q) = rt.queue(qi) else { return };
        if q.dead {
            return;
        }
        if (byte_len as usize) < SQE_LEN {
            warn!(qid = %q.ctx.qid, byte_len, "capsule shorter than an SQE; closing the queue");
            rt.kill(self, qi, "short capsule", false);
            return;
        }
        let base = match &q.t.srq_slots {
            None => usize::from(si) * q.t.capsule_size,
            Some(slots) => match slots.buf(si).and_then(|b| self.srq.as_ref()?.offset(b)) {
                Some(off) => off,
                None => return,
            },
        };
        let mut sqe_bytes = [0u8; SQE_LEN];
        q.t.recv_buf.read_at(base, &mut sqe_bytes);
        let icd = InCapsule::Registered {
            offset: base + SQE_LEN,
            len: byte_len as usize - SQE_LEN,
        };
        rt.capsule(self, qi, si, &sqe_bytes, icd);
    }
}

/// Posts the queue's batched sends with one doorbell; returns the work requests posted.
fn post_sends(
    q: &mut RdmaQueue,
    slots: &[runtime::Slot<()>],
    pool_lkey: u32,
    sges: &mut Vec<Sge>,
) -> Result<usize, VerbsError> {
    const NO_SGE: Sge = Sge {
        addr: 0,
        length: 0,
        lkey: 0,
    };
    let buf_addr = |slot: u16| {
        slots
            .get(usize::from(slot))
            .and_then(|s| s.buf.as_ref())
            .map(|b| b.addr())
    };
    // Two SGE slots per pending entry: [data or read sink, response].
    sges.clear();
    for p in &q.sends {
        match *p {
            PendingSend::Response { slot, write, .. } => {
                sges.push(match (write, buf_addr(slot)) {
                    (Some((_, _, len)), Some(addr)) => Sge {
                        addr,
                        length: len,
                        lkey: pool_lkey,
                    },
                    _ => NO_SGE,
                });
                sges.push(Sge {
                    addr: q.resp_mr.addr() + (usize::from(slot) * CQE_LEN) as u64,
                    length: CQE_LEN as u32,
                    lkey: q.resp_mr.lkey(),
                });
            }
            PendingSend::Read { slot, len, .. } => {
                sges.push(Sge {
                    addr: buf_addr(slot).unwrap_or(0),
                    length: len,
                    lkey: pool_lkey,
                });
                sges.push(NO_SGE);
            }
        }
    }
    let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(q.sends.len() * 2);
    for (i, p) in q.sends.iter().enumerate() {
        let pair = sges.get(i * 2..i * 2 + 2).unwrap_or(&[]);
        let (Some(first), Some(second)) = (pair.first(), pair.get(1)) else {
            continue;
        };
        match *p {
            PendingSend::Response {
                slot,
                write,
                invalidate,
            } => {
                if let Some((addr, key, _)) = write {
                    wrs.push(SendWr {
                        wr_id: verbs_wr_id(wr_kind::WRITE, slot),
                        op: SendOp::RdmaWrite {
                            remote_addr: addr,
                            rkey: key,
                        },
                        sg_list: std::slice::from_ref(first),
                        signaled: false,
                    });
                }
                wrs.push(SendWr {
                    wr_id: verbs_wr_id(wr_kind::SEND, slot),
                    op: match invalidate {
                        Some(rkey) => SendOp::SendWithInvalidate { rkey },
                        None => SendOp::Send,
                    },
                    sg_list: std::slice::from_ref(second),
                    signaled: true,
                });
            }
            PendingSend::Read {
                slot, addr, key, ..
            } => wrs.push(SendWr {
                wr_id: verbs_wr_id(wr_kind::READ, slot),
                op: SendOp::RdmaRead {
                    remote_addr: addr,
                    rkey: key,
                },
                sg_list: std::slice::from_ref(first),
                signaled: true,
            }),
        }
    }
    let n = wrs.len();
    let r = q.qp.post_send(&wrs);
    drop(wrs);
    // On failure nothing was posted: the caller settles the entries' slots.
    if r.is_ok() {
        q.sends.clear();
    }
    r.map(|()| n)
}

fn post_recvs(q: &mut RdmaQueue) -> Result<(), VerbsError> {
    let Some(mr) = q.recv_mr.as_ref() else {
        q.reposts.clear();
        return Ok(());
    };
    let r = post_recv_slots(
        q.qp.as_ref(),
        mr.as_ref(),
        q.capsule_size,
        &q.reposts,
        |si| verbs_wr_id(wr_kind::RECV, si),
    );
    q.reposts.clear();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_roundtrip() {
        let id = verbs_wr_id(wr_kind::READ, 513);
        assert_eq!(verbs_wr_id_parts(id), (wr_kind::READ, 513));
    }
}
