//! A poll group: one thread that owns a set of NVMe/RDMA queues.
//!
//! Everything a queue owns (slots, buffers, request state) is touched only by this
//! thread; the listener hands queues over through a channel and an eventfd. One CQ
//! serves every queue of the group. Each loop iteration: take new queues, poll the CQ,
//! reap backend completions, serve events and timers, then post batched work (all
//! sends of a queue with one doorbell, all receive reposts with one doorbell) and
//! issue backend I/O (one io_uring submit).
//!
//! Slot life cycle (one slot per receive buffer, `hsqsize + 1` per queue):
//! `Posted` → capsule arrives → (`Reading` → RDMA READ done) → `Executing` (backend)
//! or `Held` (AER) → `Sending` (response posted) → send completion → `Posted` again.
//! A queue that fails (error completion, disconnect, dead controller) stops taking
//! commands, waits for its in-flight RDMA and backend work, then is freed.
//!
//! Shutdown is graceful, like the NVMe/TCP side's: once the stop flag is set (the
//! listeners have stopped accepting), capsules that arrive are no longer executed and
//! get no answer, commands already past that point (reading data, executing, sending)
//! finish and are answered within [`SHUTDOWN_DRAIN`], then every queue is closed and
//! backend I/O still in flight is waited for before the buffers go away.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, info, warn};

use nvmf_common::config::PollMode;
use nvmf_common::verbs::{
    post_recv_slots, CompletionQueue, Device, DmaBuffer, MemoryRegion, ProtectionDomain, QueuePair,
    SendOp, SendWr, Sge, VerbsError, WcStatus, WorkCompletion,
};
use nvmf_common::wire::sgl::{subtype, SglDescriptor};
use nvmf_common::wire::sqe::{self, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

use super::pool::{BufferPool, PoolBuf};
use super::{verbs_wr_id, verbs_wr_id_parts, wr_id, wr_id_parts, wr_kind};
use crate::backend::{BackendError, DmaSlice};
use crate::core::{self, DataDir, ExecCtx, Outcome, QueueCtx, Request};
use crate::target::Target;

/// CQE size on the wire.
const CQE_LEN: usize = 16;
/// Completions taken per CQ poll.
const POLL_BATCH: usize = 64;
/// How long an adaptive poller spins without work before it sleeps.
const ADAPTIVE_SPIN: Duration = Duration::from_micros(200);
/// Longest sleep, so timers (keep-alive) run.
const MAX_SLEEP_MS: i32 = 50;
/// How often queues are checked for dead controllers and keep-alive expiry.
const TIMER_PERIOD: Duration = Duration::from_millis(20);
/// How long a completion of an unknown QP is kept for its queue to arrive.
const ORPHAN_TTL: Duration = Duration::from_secs(2);
/// Default data arena per poll group.
pub const DEFAULT_ARENA_BYTES: usize = 64 << 20;
/// On shutdown, how long commands already executing get to complete and be answered.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);
/// After the queues are closed, how long backend I/O still in flight is waited for.
const BACKEND_DRAIN: Duration = Duration::from_secs(10);
/// Pause between polls while draining.
const DRAIN_POLL: Duration = Duration::from_micros(100);

/// A queue ready to be served, built by the listener.
pub struct NewQueue {
    pub qp: Arc<dyn QueuePair>,
    pub ctx: QueueCtx,
    pub slots: u16,
    pub capsule_size: usize,
    pub recv_buf: Arc<DmaBuffer>,
    pub recv_mr: Arc<dyn MemoryRegion>,
    pub resp_buf: Arc<DmaBuffer>,
    pub resp_mr: Arc<dyn MemoryRegion>,
}

/// Data-path counters of a poll group (relaxed atomics, written by its thread only).
#[derive(Debug, Default)]
pub struct GroupStats {
    /// `post_send` calls (doorbells) and the work requests they carried.
    pub send_doorbells: AtomicU64,
    pub send_wrs: AtomicU64,
    /// `post_recv` calls and the receives they reposted.
    pub recv_doorbells: AtomicU64,
    pub recv_wrs: AtomicU64,
    /// Commands received and responses sent.
    pub commands: AtomicU64,
    /// Times the thread blocked waiting for work.
    pub sleeps: AtomicU64,
    /// Queues the group holds (gauge; dead ones until freed).
    pub queues: AtomicU64,
    /// Data buffers taken from the arena and not yet returned (gauge).
    pub bufs_in_use: AtomicU64,
    /// Commands answered during the shutdown drain.
    pub drained: AtomicU64,
    /// Capsules that arrived after shutdown began and were not executed.
    pub refused_at_shutdown: AtomicU64,
}

/// A snapshot of [`GroupStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounters {
    pub send_doorbells: u64,
    pub send_wrs: u64,
    pub recv_doorbells: u64,
    pub recv_wrs: u64,
    pub commands: u64,
    pub sleeps: u64,
    pub queues: u64,
    pub bufs_in_use: u64,
    pub drained: u64,
    pub refused_at_shutdown: u64,
}

impl GroupStats {
    pub fn snapshot(&self) -> GroupCounters {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GroupCounters {
            send_doorbells: r(&self.send_doorbells),
            send_wrs: r(&self.send_wrs),
            recv_doorbells: r(&self.recv_doorbells),
            recv_wrs: r(&self.recv_wrs),
            commands: r(&self.commands),
            sleeps: r(&self.sleeps),
            queues: r(&self.queues),
            bufs_in_use: r(&self.bufs_in_use),
            drained: r(&self.drained),
            refused_at_shutdown: r(&self.refused_at_shutdown),
        }
    }
}

fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// What the listener needs to hand queues to a group.
#[derive(Clone)]
pub struct GroupHandle {
    pub index: usize,
    pub cq: Arc<dyn CompletionQueue>,
    tx: Sender<NewQueue>,
    wake: Arc<EventFd>,
    /// Set when a queue was handed over: the loop checks this flag, not the channel.
    pending: Arc<AtomicBool>,
    pub stats: Arc<GroupStats>,
}

impl GroupHandle {
    /// Hands over a queue whose receives are posted and whose QP is connected.
    pub fn add(&self, q: NewQueue) -> bool {
        let ok = self.tx.send(q).is_ok();
        self.pending.store(true, Ordering::Release);
        self.wake();
        ok
    }

    pub fn wake(&self) {
        let _ = self.wake.write(1);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// A receive is posted for this slot.
    Posted,
    /// Waiting for a data buffer from the pool.
    WaitBuf,
    /// RDMA READ of host data in flight.
    Reading,
    /// Backend I/O in flight.
    Executing,
    /// An Asynchronous Event Request waiting for an event.
    Held,
    /// Response (and read data) posted; waiting for the send completion.
    Sending,
    /// Not posted (queue dying).
    Idle,
}

/// Where the host's data is, per the command's SGL.
#[derive(Debug, Clone, Copy)]
enum HostData {
    None,
    InCapsule {
        offset: usize,
        len: u32,
    },
    Keyed {
        addr: u64,
        len: u32,
        key: u32,
        invalidate: bool,
    },
}

struct Slot {
    state: SlotState,
    req: Request,
    host: HostData,
    buf: Option<PoolBuf>,
}

/// A send work request waiting for the queue's next doorbell.
#[derive(Clone, Copy)]
enum PendingSend {
    /// Response for `slot`, preceded by an RDMA WRITE of `write_len` bytes when set.
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

struct Queue {
    gen: u16,
    qp: Arc<dyn QueuePair>,
    qp_num: u32,
    ctx: QueueCtx,
    slots: Vec<Slot>,
    capsule_size: usize,
    recv_buf: Arc<DmaBuffer>,
    recv_mr: Arc<dyn MemoryRegion>,
    resp_buf: Arc<DmaBuffer>,
    resp_mr: Arc<dyn MemoryRegion>,
    reposts: Vec<u16>,
    sends: Vec<PendingSend>,
    wait_buf: VecDeque<u16>,
    dead: bool,
}

impl Queue {
    fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| {
                matches!(
                    s.state,
                    SlotState::Reading | SlotState::Executing | SlotState::Sending
                )
            })
            .count()
    }
}

struct Group {
    index: usize,
    target: Arc<Target>,
    cq: Arc<dyn CompletionQueue>,
    rx: Receiver<NewQueue>,
    wake: Arc<EventFd>,
    pending: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    queues: Vec<Option<Queue>>,
    next_gen: u16,
    pool: BufferPool,
    ex: ExecCtx,
    mode: PollMode,
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
    stats: Arc<GroupStats>,
    /// Shutting down: new capsules are not executed.
    draining: bool,
}

/// Starts poll group `index`.
pub fn spawn(
    index: usize,
    target: Arc<Target>,
    device: Arc<dyn Device>,
    pd: Arc<dyn ProtectionDomain>,
    stop: Arc<AtomicBool>,
) -> Result<(GroupHandle, JoinHandle<()>), VerbsError> {
    let cq = device.create_cq(u32::from(target.params.max_queue_size) * 64)?;
    let pool = BufferPool::new(pd.as_ref(), DEFAULT_ARENA_BYTES, target.params.max_io_size)?;
    let wake = Arc::new(
        EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| VerbsError::Provider(format!("eventfd: {e}")))?,
    );
    let (tx, rx) = channel();
    let stats = Arc::new(GroupStats::default());
    let pending = Arc::new(AtomicBool::new(false));
    let handle = GroupHandle {
        index,
        cq: cq.clone(),
        tx,
        wake: wake.clone(),
        pending: pending.clone(),
        stats: stats.clone(),
    };
    let mode = target.params.poll_mode;
    let group = Group {
        index,
        ex: ExecCtx::new(target.clone()),
        target,
        cq,
        rx,
        wake,
        pending,
        stop,
        queues: Vec::new(),
        next_gen: 1,
        pool,
        mode,
        dirty: Vec::new(),
        by_qp: crate::fastmap::FastMap::default(),
        orphans: Vec::new(),
        wc_buf: vec![WorkCompletion::EMPTY; POLL_BATCH],
        sge_buf: Vec::new(),
        stats,
        draining: false,
    };
    let thread = std::thread::Builder::new()
        .name(format!("nvmf-pg{index}"))
        .spawn(move || group.run())
        .map_err(|e| VerbsError::Provider(format!("spawn poll group: {e}")))?;
    Ok((handle, thread))
}

impl Group {
    fn run(mut self) {
        let mut reaped = Vec::with_capacity(POLL_BATCH);
        let mut last_work = Instant::now();
        let mut last_timer = Instant::now();
        debug!(group = self.index, "poll group running");
        while !self.stop.load(Ordering::Acquire) {
            let mut work = 0usize;
            if self.pending.load(Ordering::Acquire) {
                self.pending.store(false, Ordering::Release);
                while let Ok(nq) = self.rx.try_recv() {
                    self.add_queue(nq);
                    work += 1;
                }
            }
            let now = Instant::now();
            self.ex.now = now;
            let n = self.cq.poll(&mut self.wc_buf);
            for i in 0..n {
                let wc = self.wc_buf[i];
                self.on_completion(&wc);
            }
            work += n;
            if self.ex.in_flight() > 0 {
                self.ex.poll_backends(&mut reaped);
                work += reaped.len();
                for (tag, res) in reaped.drain(..) {
                    self.on_backend(tag, res);
                }
            }
            self.serve_events();
            if now.duration_since(last_timer) >= TIMER_PERIOD {
                last_timer = now;
                self.timers(now);
            }
            self.flush();
            if work > 0 {
                last_work = now;
                continue;
            }
            let idle = now.duration_since(last_work);
            match self.mode {
                PollMode::Poll => std::hint::spin_loop(),
                PollMode::Adaptive if idle < ADAPTIVE_SPIN => std::hint::spin_loop(),
                _ => self.sleep(),
            }
        }
        self.drain();
        self.shutdown_all();
        self.publish_gauges();
        debug!(group = self.index, "poll group stopped");
    }

    /// Blocks until the CQ, a backend, or the wake eventfd has something.
    fn sleep(&mut self) {
        bump(&self.stats.sleeps, 1);
        self.cq.req_notify();
        // A completion that raced with arming is seen here, not lost.
        let n = self.cq.poll(&mut self.wc_buf);
        if n > 0 {
            for i in 0..n {
                let wc = self.wc_buf[i];
                self.on_completion(&wc);
            }
            return;
        }
        let mut fds: Vec<RawFd> = vec![self.cq.event_fd(), self.wake.as_raw_fd()];
        fds.extend(self.ex.event_fds());
        let mut pfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `pfds` is a valid, initialised array of `pfds.len()` pollfd structs
        // that outlives the call; poll(2) only writes their `revents` fields.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, MAX_SLEEP_MS) };
        if rc > 0 {
            self.cq.ack_events();
            let _ = self.wake.read();
            for p in pfds.iter().skip(2) {
                if p.revents & libc::POLLIN != 0 {
                    drain_eventfd(p.fd);
                }
            }
        }
    }

    fn add_queue(&mut self, nq: NewQueue) {
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let slots = (0..nq.slots)
            .map(|_| Slot {
                state: SlotState::Posted,
                req: Request::new(),
                host: HostData::None,
                buf: None,
            })
            .collect();
        let q = Queue {
            gen,
            qp_num: nq.qp.qp_num(),
            qp: nq.qp,
            ctx: nq.ctx,
            slots,
            capsule_size: nq.capsule_size,
            recv_buf: nq.recv_buf,
            recv_mr: nq.recv_mr,
            resp_buf: nq.resp_buf,
            resp_mr: nq.resp_mr,
            reposts: Vec::new(),
            sends: Vec::new(),
            wait_buf: VecDeque::new(),
            dead: false,
        };
        debug!(group = self.index, qid = %q.ctx.qid, qp = q.qp_num, slots = nq.slots, "queue added");
        let qp_num = q.qp_num;
        let qi = match self.queues.iter().position(Option::is_none) {
            Some(i) => {
                self.queues[i] = Some(q);
                i
            }
            None => {
                self.queues.push(Some(q));
                self.queues.len() - 1
            }
        };
        self.by_qp.insert(qp_num, qi as u16);
        if !self.orphans.is_empty() {
            let now = Instant::now();
            let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.orphans)
                .into_iter()
                .filter(|(t, _)| now.duration_since(*t) < ORPHAN_TTL)
                .partition(|(_, wc)| wc.qp_num == qp_num);
            self.orphans = rest;
            for (_, wc) in mine {
                self.on_completion(&wc);
            }
        }
    }

    fn queue_mut(&mut self, qi: u16, gen: u16) -> Option<&mut Queue> {
        match self.queues.get_mut(usize::from(qi)) {
            Some(Some(q)) if q.gen == gen => Some(q),
            _ => None,
        }
    }

    fn mark_dirty(&mut self, qi: u16) {
        if !self.dirty.contains(&qi) {
            self.dirty.push(qi);
        }
    }

    fn on_completion(&mut self, wc: &WorkCompletion) {
        let (kind, si) = verbs_wr_id_parts(wc.wr_id);
        let Some(&qi) = self.by_qp.get(&wc.qp_num) else {
            self.orphans.push((Instant::now(), *wc));
            return;
        };
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushError && !q.dead {
                warn!(qid = %q.ctx.qid, qp = q.qp_num, status = ?wc.status, op = ?wc.opcode,
                      "RDMA error completion; closing the queue");
            }
            self.settle_slot_after_error(qi, si, kind);
            self.kill_queue(qi, "RDMA error completion");
            return;
        }
        match kind {
            wr_kind::RECV => self.on_capsule(qi, si, wc.byte_len),
            wr_kind::READ => self.on_read_done(qi, si),
            wr_kind::SEND => self.on_send_done(qi, si),
            _ => {}
        }
    }

    /// A WR of `slot` failed or was flushed: nothing more will complete for it on the
    /// RDMA side, so its RDMA-owned state ends.
    fn settle_slot_after_error(&mut self, qi: u16, si: u16, kind: u8) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let done = matches!(
            (kind, slot.state),
            (wr_kind::READ, SlotState::Reading)
                | (wr_kind::SEND, SlotState::Sending)
                | (wr_kind::RECV, SlotState::Posted)
        );
        if done {
            slot.state = SlotState::Idle;
            slot.req.release();
            if let Some(b) = slot.buf.take() {
                self.pool.free(b);
            }
        }
    }

    fn on_capsule(&mut self, qi: u16, si: u16, byte_len: u32) {
        let target = self.target.clone();
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        if q.dead {
            return;
        }
        if self.draining {
            // Shutting down: no new commands (the queue closes once the drain ends).
            if let Some(slot) = q.slots.get_mut(usize::from(si)) {
                slot.state = SlotState::Idle;
            }
            bump(&self.stats.refused_at_shutdown, 1);
            return;
        }
        let cap = q.capsule_size;
        let base = usize::from(si) * cap;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if (byte_len as usize) < SQE_LEN {
            warn!(qid = %q.ctx.qid, byte_len, "capsule shorter than an SQE; closing the queue");
            slot.state = SlotState::Idle;
            self.kill_queue(qi, "short capsule");
            return;
        }
        bump(&self.stats.commands, 1);
        let mut sqe_bytes = [0u8; SQE_LEN];
        q.recv_buf.read_at(base, &mut sqe_bytes);
        slot.req.reset(&sqe_bytes);
        q.ctx.advance_sq_head();
        let icd_len = byte_len as usize - SQE_LEN;
        let (host, sgl_len) = match decode_sgl(&sqe_bytes, icd_len) {
            Ok(v) => v,
            Err(st) => {
                slot.req.fail(st);
                slot.host = HostData::None;
                return self.respond(qi, si);
            }
        };
        slot.host = host;
        if let Err(st) = core::parse(&q.ctx, &target, &mut slot.req, sgl_len) {
            slot.req.fail(st);
            return self.respond(qi, si);
        }
        let plan = slot.req.plan;
        match (plan.dir, host) {
            (DataDir::None, _) => self.execute(qi, si),
            (DataDir::HostToCtrl, HostData::InCapsule { offset, len }) => {
                slot.req.data =
                    DmaSlice::new(q.recv_buf.clone(), base + SQE_LEN + offset, len as usize);
                self.execute(qi, si)
            }
            (DataDir::HostToCtrl, HostData::Keyed { .. })
            | (DataDir::CtrlToHost, HostData::Keyed { .. }) => {
                slot.state = SlotState::WaitBuf;
                self.start_data(qi, si);
            }
            (DataDir::CtrlToHost, _) => {
                // Read data must go to a keyed buffer of the host.
                slot.req.fail(
                    Status::generic(generic::SGL_DESCRIPTOR_TYPE_INVALID)
                        .at(sqe::offset::DPTR + 15, 4),
                );
                self.respond(qi, si)
            }
            (DataDir::HostToCtrl, HostData::None) => {
                slot.req.fail(
                    Status::generic(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0),
                );
                self.respond(qi, si)
            }
        }
    }

    /// Gets a pool buffer for a keyed transfer, then reads host data or executes.
    fn start_data(&mut self, qi: u16, si: u16) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let len = slot.req.plan.len;
        let Some(buf) = self.pool.alloc(len) else {
            // Arena exhausted: retry when a buffer comes back.
            q.wait_buf.push_back(si);
            return;
        };
        slot.req.data = Some(buf.slice.clone());
        let dir = slot.req.plan.dir;
        let HostData::Keyed { addr, key, .. } = slot.host else {
            return;
        };
        if dir == DataDir::HostToCtrl {
            q.sends.push(PendingSend::Read {
                slot: si,
                addr,
                key,
                len,
            });
            slot.buf = Some(buf);
            slot.state = SlotState::Reading;
            self.mark_dirty(qi);
        } else {
            slot.buf = Some(buf);
            self.execute(qi, si);
        }
    }

    fn on_read_done(&mut self, qi: u16, si: u16) {
        let Some(Some(q)) = self.queues.get(usize::from(qi)) else {
            return;
        };
        if q.dead {
            self.settle_slot_after_error(qi, si, wr_kind::READ);
            self.maybe_free(qi);
            return;
        }
        self.execute(qi, si);
    }

    fn execute(&mut self, qi: u16, si: u16) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let tag = wr_id(0, q.gen, qi, si);
        slot.state = SlotState::Executing;
        match core::execute(&mut q.ctx, &mut self.ex, &mut slot.req, tag) {
            Outcome::Done => self.respond(qi, si),
            Outcome::Pending => {}
            Outcome::Held => slot.state = SlotState::Held,
        }
    }

    fn on_backend(&mut self, tag: u64, res: Result<(), BackendError>) {
        let (_, gen, qi, si) = wr_id_parts(tag);
        let Some(q) = self.queue_mut(qi, gen) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.state != SlotState::Executing {
            return;
        }
        if !core::io_done(&mut slot.req, res) {
            return;
        }
        if q.dead {
            slot.state = SlotState::Idle;
            slot.req.release();
            if let Some(b) = slot.buf.take() {
                self.pool.free(b);
            }
            self.maybe_free(qi);
            return;
        }
        self.respond(qi, si);
    }

    /// Queues the response (and read data) of a finished command.
    fn respond(&mut self, qi: u16, si: u16) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let mut cqe = [0u8; CQE_LEN];
        q.ctx.fill_cqe(&slot.req, &mut cqe);
        q.resp_buf.write_at(usize::from(si) * CQE_LEN, &cqe);
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
        slot.state = SlotState::Sending;
        q.sends.push(PendingSend::Response {
            slot: si,
            write,
            invalidate,
        });
        self.mark_dirty(qi);
    }

    fn on_send_done(&mut self, qi: u16, si: u16) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.state != SlotState::Sending {
            return;
        }
        slot.req.release();
        if let Some(b) = slot.buf.take() {
            self.pool.free(b);
        }
        if q.dead {
            slot.state = SlotState::Idle;
            self.maybe_free(qi);
            return;
        }
        slot.state = SlotState::Posted;
        q.reposts.push(si);
        if q.ctx.disconnect {
            self.kill_queue(qi, "host sent Disconnect");
            return;
        }
        self.mark_dirty(qi);
        self.retry_waiters();
    }

    /// Slots that waited for a pool buffer try again.
    fn retry_waiters(&mut self) {
        for qi in 0..self.queues.len() {
            let Some(Some(q)) = self.queues.get_mut(qi) else {
                continue;
            };
            let n = q.wait_buf.len();
            for _ in 0..n {
                let Some(Some(q)) = self.queues.get_mut(qi) else {
                    break;
                };
                let Some(si) = q.wait_buf.pop_front() else {
                    break;
                };
                self.start_data(qi as u16, si);
            }
        }
    }

    /// Completes held AERs of admin queues whose controller has events.
    fn serve_events(&mut self) {
        for qi in 0..self.queues.len() {
            while let Some(Some(q)) = self.queues.get_mut(qi) {
                if q.dead {
                    break;
                }
                let Some((tag, ev)) = q.ctx.next_aer_completion() else {
                    break;
                };
                let (_, _, _, si) = wr_id_parts(tag);
                if let Some(slot) = q.slots.get_mut(usize::from(si)) {
                    slot.req.dw0 = ev;
                }
                self.respond(qi as u16, si);
            }
        }
    }

    /// Makes the queue and buffer gauges visible.
    fn publish_gauges(&self) {
        let live = self.queues.iter().flatten().count() as u64;
        self.stats.queues.store(live, Ordering::Relaxed);
        self.stats
            .bufs_in_use
            .store(self.pool.in_use() as u64, Ordering::Relaxed);
    }

    fn timers(&mut self, now: Instant) {
        self.publish_gauges();
        let mut kill = Vec::new();
        for (qi, q) in self.queues.iter().enumerate() {
            let Some(q) = q else { continue };
            if q.dead {
                continue;
            }
            if q.qp.is_dead() {
                kill.push((qi as u16, "host disconnected"));
                continue;
            }
            if let Some(c) = &q.ctx.ctrl {
                if q.ctx.qid.is_admin() {
                    c.check_keep_alive(now);
                }
                if c.is_dead() {
                    kill.push((qi as u16, "controller is gone"));
                }
            }
        }
        for (qi, why) in kill {
            self.kill_queue(qi, why);
        }
    }

    /// Posts every queue's batched sends (one doorbell) and receive reposts (one doorbell).
    fn flush(&mut self) {
        self.ex.flush();
        while let Some(qi) = self.dirty.pop() {
            let lkey = self.pool.lkey();
            let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
                continue;
            };
            if q.dead {
                q.sends.clear();
                q.reposts.clear();
                continue;
            }
            let mut failed = None;
            if !q.sends.is_empty() {
                bump(&self.stats.send_doorbells, 1);
                match post_sends(q, lkey, &mut self.sge_buf) {
                    Ok(n) => bump(&self.stats.send_wrs, n as u64),
                    Err(e) => failed = Some(e),
                }
            }
            if failed.is_none() && !q.reposts.is_empty() {
                bump(&self.stats.recv_doorbells, 1);
                bump(&self.stats.recv_wrs, q.reposts.len() as u64);
                if let Err(e) = post_recvs(q) {
                    failed = Some(e);
                }
            }
            if let Some(e) = failed {
                warn!(qid = %q.ctx.qid, qp = q.qp_num, "post failed: {e}; closing the queue");
                self.kill_queue(qi, "post failed");
            }
        }
    }

    /// Ends a queue: no new commands; in-flight RDMA and backend work drains first.
    fn kill_queue(&mut self, qi: u16, why: &str) {
        let Some(Some(q)) = self.queues.get_mut(usize::from(qi)) else {
            return;
        };
        if !q.dead {
            q.dead = true;
            info!(qid = %q.ctx.qid, qp = q.qp_num, "queue closed: {why}");
            q.qp.disconnect();
            q.ctx.teardown();
            q.sends.clear();
            q.reposts.clear();
            for slot in &mut q.slots {
                if matches!(
                    slot.state,
                    SlotState::Posted | SlotState::Held | SlotState::WaitBuf | SlotState::Idle
                ) {
                    slot.state = SlotState::Idle;
                    slot.req.release();
                    if let Some(b) = slot.buf.take() {
                        self.pool.free(b);
                    }
                }
            }
            q.wait_buf.clear();
        }
        self.maybe_free(qi);
    }

    /// Frees a dead queue once nothing of it is in flight.
    fn maybe_free(&mut self, qi: u16) {
        let free = match self.queues.get(usize::from(qi)) {
            Some(Some(q)) => q.dead && q.in_flight() == 0,
            _ => false,
        };
        if free {
            if let Some(slot) = self.queues.get_mut(usize::from(qi)) {
                if let Some(q) = slot.take() {
                    self.by_qp.remove(&q.qp_num);
                    debug!(qid = %q.ctx.qid, qp = q.qp_num, "queue freed");
                }
            }
        }
    }

    /// Commands of live queues that are past the capsule: waiting for a buffer,
    /// reading host data, executing, or sending their response.
    fn commands_in_flight(&self) -> usize {
        self.queues
            .iter()
            .flatten()
            .filter(|q| !q.dead)
            .map(|q| {
                q.slots
                    .iter()
                    .filter(|s| {
                        matches!(
                            s.state,
                            SlotState::WaitBuf
                                | SlotState::Reading
                                | SlotState::Executing
                                | SlotState::Sending
                        )
                    })
                    .count()
            })
            .sum()
    }

    /// Graceful part of the shutdown: capsules arriving now are not executed; commands
    /// already in flight finish and their responses are sent, within [`SHUTDOWN_DRAIN`].
    fn drain(&mut self) {
        self.draining = true;
        let deadline = Instant::now() + SHUTDOWN_DRAIN;
        let mut reaped = Vec::new();
        let start = self.commands_in_flight();
        while self.commands_in_flight() > 0 && Instant::now() < deadline {
            self.ex.now = Instant::now();
            let n = self.cq.poll(&mut self.wc_buf);
            for i in 0..n {
                let wc = self.wc_buf[i];
                self.on_completion(&wc);
            }
            if self.ex.in_flight() > 0 {
                self.ex.poll_backends(&mut reaped);
                for (tag, res) in reaped.drain(..) {
                    self.on_backend(tag, res);
                }
            }
            self.retry_waiters();
            self.flush();
            if n == 0 {
                std::thread::sleep(DRAIN_POLL);
            }
        }
        let left = self.commands_in_flight();
        bump(&self.stats.drained, (start.saturating_sub(left)) as u64);
        if left > 0 {
            warn!(
                group = self.index,
                left, "shutdown drain timed out; closing queues with commands in flight"
            );
        } else if start > 0 {
            info!(
                group = self.index,
                answered = start,
                "commands in flight at shutdown answered"
            );
        }
    }

    fn shutdown_all(&mut self) {
        for qi in 0..self.queues.len() {
            self.kill_queue(qi as u16, "target shutting down");
        }
        // Backend I/O still in flight must finish before buffers go away; so must the
        // flushed work requests of the queues just closed.
        let mut reaped = Vec::new();
        let deadline = Instant::now() + BACKEND_DRAIN;
        while self.queues.iter().any(Option::is_some) && Instant::now() < deadline {
            let n = self.cq.poll(&mut self.wc_buf);
            for i in 0..n {
                let wc = self.wc_buf[i];
                self.on_completion(&wc);
            }
            if self.ex.in_flight() > 0 {
                self.ex.poll_backends(&mut reaped);
                for (tag, res) in reaped.drain(..) {
                    self.on_backend(tag, res);
                }
            }
            if n == 0 {
                std::thread::sleep(DRAIN_POLL);
            }
        }
    }
}

fn drain_eventfd(fd: RawFd) {
    let mut b = [0u8; 8];
    // SAFETY: reading 8 bytes into a valid stack buffer from an fd poll(2) reported
    // readable; a non-blocking eventfd returns EAGAIN otherwise, which is ignored.
    unsafe {
        libc::read(fd, b.as_mut_ptr().cast(), b.len());
    }
}

/// Interprets the command's SGL1: returns where the data is and its length.
fn decode_sgl(sqe_bytes: &[u8], icd_len: usize) -> Result<(HostData, u32), Status> {
    let dptr = sqe_bytes.get(24..40).unwrap_or(&[]);
    let desc = SglDescriptor::parse(dptr).map_err(|_| {
        Status::generic(generic::SGL_DESCRIPTOR_TYPE_INVALID).at(sqe::offset::DPTR + 15, 4)
    })?;
    match desc {
        SglDescriptor::KeyedDataBlock {
            addr,
            len,
            key,
            invalidate,
        } => {
            if len == 0 {
                Ok((HostData::None, 0))
            } else {
                Ok((
                    HostData::Keyed {
                        addr,
                        len,
                        key,
                        invalidate,
                    },
                    len,
                ))
            }
        }
        SglDescriptor::DataBlock {
            addr,
            len,
            subtype: st,
        } if st == subtype::OFFSET => {
            // In-capsule data: ADDR is the offset from the start of the in-capsule data.
            let end = addr.checked_add(u64::from(len));
            match end {
                Some(end) if end <= icd_len as u64 => Ok((
                    HostData::InCapsule {
                        offset: addr as usize,
                        len,
                    },
                    len,
                )),
                _ => {
                    debug!(addr, len, icd_len, "in-capsule SGL beyond the capsule");
                    Err(Status::generic(generic::SGL_OFFSET_INVALID).at(sqe::offset::DPTR, 0))
                }
            }
        }
        other => {
            debug!(?other, "unsupported SGL descriptor");
            Err(Status::generic(generic::SGL_DESCRIPTOR_TYPE_INVALID).at(sqe::offset::DPTR + 15, 4))
        }
    }
}

/// Posts the queue's batched sends with one doorbell; returns the work requests posted.
fn post_sends(q: &mut Queue, pool_lkey: u32, sges: &mut Vec<Sge>) -> Result<usize, VerbsError> {
    // Two SGE slots per pending entry: [data or read sink, response].
    sges.clear();
    for p in &q.sends {
        match *p {
            PendingSend::Response { slot, write, .. } => {
                let data = match (
                    write,
                    q.slots.get(usize::from(slot)).and_then(|s| s.buf.as_ref()),
                ) {
                    (Some((_, _, len)), Some(b)) => Sge {
                        addr: b.addr(),
                        length: len,
                        lkey: pool_lkey,
                    },
                    _ => Sge {
                        addr: 0,
                        length: 0,
                        lkey: 0,
                    },
                };
                sges.push(data);
                sges.push(Sge {
                    addr: q.resp_mr.addr() + (usize::from(slot) * CQE_LEN) as u64,
                    length: CQE_LEN as u32,
                    lkey: q.resp_mr.lkey(),
                });
            }
            PendingSend::Read { slot, len, .. } => {
                let addr = q
                    .slots
                    .get(usize::from(slot))
                    .and_then(|s| s.buf.as_ref())
                    .map(|b| b.addr())
                    .unwrap_or(0);
                sges.push(Sge {
                    addr,
                    length: len,
                    lkey: pool_lkey,
                });
                sges.push(Sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                });
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
    q.sends.clear();
    r.map(|()| n)
}

fn post_recvs(q: &mut Queue) -> Result<(), VerbsError> {
    let r = post_recv_slots(
        q.qp.as_ref(),
        q.recv_mr.as_ref(),
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

    fn sqe_with(desc: SglDescriptor) -> [u8; SQE_LEN] {
        let mut sqe = [0u8; SQE_LEN];
        desc.emit(&mut sqe[24..40]).unwrap();
        sqe
    }

    #[test]
    fn keyed_sgl_with_invalidate() {
        let sqe = sqe_with(SglDescriptor::keyed(0x1000, 4096, 0xABCD, true));
        match decode_sgl(&sqe, 0).unwrap() {
            (
                HostData::Keyed {
                    addr,
                    len,
                    key,
                    invalidate,
                },
                4096,
            ) => {
                assert_eq!((addr, len, key, invalidate), (0x1000, 4096, 0xABCD, true));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn null_keyed_sgl_means_no_data() {
        let sqe = sqe_with(SglDescriptor::keyed(0, 0, 0, false));
        assert!(matches!(decode_sgl(&sqe, 0).unwrap(), (HostData::None, 0)));
    }

    #[test]
    fn in_capsule_bounds() {
        let ok = sqe_with(SglDescriptor::in_capsule(0, 4096));
        assert!(matches!(
            decode_sgl(&ok, 4096).unwrap(),
            (
                HostData::InCapsule {
                    offset: 0,
                    len: 4096
                },
                4096
            )
        ));
        // Data past what arrived in the capsule.
        let st = decode_sgl(&ok, 4095).unwrap_err();
        assert!(st.is(
            nvmf_common::wire::status::Sct::Generic,
            generic::SGL_OFFSET_INVALID
        ));
        // Offset + length wrapping around 2^64.
        let wrap = sqe_with(SglDescriptor::DataBlock {
            addr: u64::MAX - 10,
            len: 4096,
            subtype: subtype::OFFSET,
        });
        let st = decode_sgl(&wrap, 8192).unwrap_err();
        assert!(st.is(
            nvmf_common::wire::status::Sct::Generic,
            generic::SGL_OFFSET_INVALID
        ));
    }

    #[test]
    fn unsupported_descriptor_types() {
        // A data block with an address (not an in-capsule offset) and a segment descriptor.
        for desc in [
            SglDescriptor::DataBlock {
                addr: 0x1000,
                len: 512,
                subtype: subtype::ADDRESS,
            },
            SglDescriptor::Other {
                desc_type: nvmf_common::wire::sgl::desc_type::SEGMENT,
                subtype: 0,
            },
        ] {
            let st = decode_sgl(&sqe_with(desc), 0).unwrap_err();
            assert!(
                st.is(
                    nvmf_common::wire::status::Sct::Generic,
                    generic::SGL_DESCRIPTOR_TYPE_INVALID
                ),
                "{desc:?}: {st}"
            );
        }
    }

    #[test]
    fn wr_ids_roundtrip() {
        let id = verbs_wr_id(wr_kind::READ, 513);
        assert_eq!(verbs_wr_id_parts(id), (wr_kind::READ, 513));
        let tag = wr_id(0, 7, 3, 99);
        assert_eq!(wr_id_parts(tag), (0, 7, 3, 99));
    }
}
