//! The poll-group thread: one loop for every fabric.
//!
//! Each pass: take handed-over queues, receive (the transport's non-blocking pass, or
//! epoll when not spinning), reap backend completions, complete held AERs, retry
//! commands waiting for a buffer, run timers every [`TIMER_PERIOD`], then submit
//! backend I/O and let the transport flush.
//!
//! Waiting follows `transport.poll_mode`: `poll` spins, `interrupt` sleeps in
//! `epoll_wait` (the transport's descriptors, backend eventfds, the hand-over eventfd),
//! `adaptive` spins for [`ADAPTIVE_SPIN`] after the last work (yielding the CPU on a pass
//! that found nothing while it waits on one backend I/O: [`IdlePause`]), then sleeps; with
//! more backend I/O than that in flight it does not spin at all ([`adaptive_spins`]).
//!
//! Shutdown is graceful and the same on every fabric: once the stop flag is set (the
//! listeners have stopped accepting), capsules that arrive are not executed and get no
//! answer (`refused_at_shutdown`); commands already past that point (waiting for a
//! buffer or data, executing, sending) finish and are answered within
//! [`SHUTDOWN_DRAIN`] (`drained`); then every queue is closed, and backend I/O and
//! transport work still in flight are waited for ([`BACKEND_DRAIN`]) before the
//! buffers go away.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, info, warn};

use crate::config::PollMode;

use super::mailbox::{GroupHandle, Inbox};
use super::pool::BufferPool;
use super::queue::{Queue, ReqState};
use super::stats::{self, bump, GroupStats};
use super::Transport;
use crate::core::ExecCtx;
use crate::target::Target;

/// How long an adaptive poller spins without work before it sleeps.
pub const ADAPTIVE_SPIN: Duration = Duration::from_micros(200);
/// Backend I/O in flight at which an adaptive group's empty pass yields its CPU
/// ([`IdlePause`]); with more in flight it does not spin ([`adaptive_spins`]).
const YIELD_IN_FLIGHT: usize = 1;
/// Longest sleep, so timers (keep-alive, stalls) run.
const MAX_SLEEP_MS: u16 = 20;
/// Longest sleep while commands wait for QoS budget (the admission resolution).
const THROTTLED_SLEEP_MS: u16 = 1;
/// How often queues are checked for dead controllers, keep-alive and stalls.
pub const TIMER_PERIOD: Duration = Duration::from_millis(20);
/// On shutdown, how long commands already in flight get to complete and be answered.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);
/// After the queues are closed, how long backend I/O and transport work still in
/// flight are waited for.
pub const BACKEND_DRAIN: Duration = Duration::from_secs(10);
/// Pause between polls while draining.
const DRAIN_POLL: Duration = Duration::from_micros(100);
/// How often the command watch's sweep runs ([`super::watch`]: its resolution; the
/// bound is far larger).
pub const WATCH_PERIOD_NS: u64 = 250_000_000;
/// Epoll events taken per wait.
const EPOLL_BATCH: usize = 64;
/// Epoll token of the hand-over eventfd. Transports use tokens below 2^48.
const WAKE_TOKEN: u64 = 1 << 63;
/// Epoll tokens of backend eventfds: this bit | the descriptor.
const BACKEND_TOKEN: u64 = 1 << 62;
/// Mask of the descriptor in a backend token.
const BACKEND_FD_MASK: u64 = 0xFFFF_FFFF;

/// The handle of a group of transport `T`.
pub type Handle<T> = GroupHandle<<T as Transport>::NewQueue, <T as Transport>::Shared>;

/// When the held commands are next retried, and the retry pass's buffers (kept, so a
/// pass allocates nothing). The QoS throttle ([`super::throttle`]) uses it; it is here,
/// with the runtime that holds it, so this file does not import the throttle.
#[derive(Default)]
pub(crate) struct HeldPass {
    /// Monotonic time (ns) before which a pass does not retry (0: at once).
    pub(super) retry_at: u64,
    /// Slots that go on, of the queue being retried.
    pub(super) go: Vec<u16>,
    /// Namespaces whose first held command could not go, in the queue being retried.
    pub(super) blocked: Vec<u32>,
}

/// Everything transport-neutral a poll group owns: its queues and their request
/// slots, the data buffer pool, the backend channels ([`ExecCtx`]), the epoll set,
/// the buffer waiters and the counters.
pub struct Runtime<T: Transport> {
    pub index: usize,
    /// The group's name (its thread's), the `group` of its metrics.
    pub name: String,
    /// This pass's monotonic clock in ns ([`stats::mono_ns`]): commands that arrive in
    /// the pass are stamped with it.
    pub now_ns: u64,
    pub target: Arc<Target>,
    pub ex: ExecCtx,
    pub pool: BufferPool,
    pub stats: Arc<GroupStats>,
    pub(super) queues: Vec<Option<Queue<T>>>,
    pub(super) next_gen: u16,
    /// Commands waiting for a pool buffer, oldest first: (queue, generation, slot).
    pub(super) waiters: VecDeque<(u16, u16, u16)>,
    /// Queues holding commands for QoS: (queue, generation) ([`super::throttle`]).
    pub(super) held_queues: Vec<(u16, u16)>,
    /// When held commands are next retried, and the retry pass's buffers.
    pub(super) held_pass: HeldPass,
    /// The group's QoS budgets per limited namespace.
    pub(super) qos: crate::qos::QosGroup,
    /// This group's id in the target's range-lock table ([`crate::locks`]).
    pub(super) lock_uid: u64,
    /// Writes held because they overlap a locked range: (queue, generation, slot).
    pub(super) lock_waiters: Vec<(u16, u16, u16)>,
    /// The lock table's generation when `lock_waiters` were last tried.
    pub(super) lock_gen: u64,
    /// Fused pairs waiting for their range: (queue, generation, Compare's slot).
    pub(super) fused_pairs: Vec<(u16, u16, u16)>,
    /// Fused halves whose other half failed or never came, to complete.
    pub(super) fused_orphans: Vec<(u16, u16, u16)>,
    /// Shutting down: new capsules are not executed.
    pub(super) draining: bool,
    /// The group's stop flag: set when the shutdown begins.
    pub(super) stop: Arc<AtomicBool>,
    /// In-capsule data per slot (the target's in-capsule data size).
    pub(super) icd_slot: usize,
    /// When the command watch sweeps next ([`super::watch`]; the pass clock).
    pub(super) next_watch_ns: u64,
    epoll: Epoll,
    events: Vec<EpollEvent>,
    /// Backend eventfds watched, with the namespace instance whose channel owns each.
    backend_fds: Vec<(u64, RawFd)>,
    mode: PollMode,
    pub(super) load: Arc<std::sync::atomic::AtomicUsize>,
    wake: Arc<EventFd>,
}

/// Starts poll group `index` of transport `t` with a data arena of `arena_bytes`
/// (`prepare` may register it before the thread starts).
pub fn spawn<T: Transport>(
    index: usize,
    thread_name: String,
    target: Arc<Target>,
    mut t: T,
    mut pool: BufferPool,
    prepare: impl FnOnce(&mut T, &mut BufferPool, &Epoll) -> io::Result<()>,
    stop: Arc<AtomicBool>,
) -> io::Result<(Handle<T>, JoinHandle<()>)> {
    let wake = Arc::new(
        EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?,
    );
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
    epoll
        .add(
            wake.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, WAKE_TOKEN),
        )
        .map_err(io::Error::from)?;
    prepare(&mut t, &mut pool, &epoll)?;
    let (tx, rx) = channel();
    let inbox = Inbox {
        rx,
        wake,
        pending: Arc::new(AtomicBool::new(false)),
        load: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    };
    let stats = Arc::new(GroupStats::default());
    let name = target.metrics.add_group(thread_name.clone(), &stats);
    let handle = GroupHandle::new(index, tx, &inbox, stats.clone(), t.shared());
    let rt = Runtime {
        index,
        name,
        now_ns: stats::mono_ns(),
        ex: ExecCtx::new(target.clone()),
        icd_slot: target.params.in_capsule_data_size as usize,
        next_watch_ns: 0,
        mode: target.params.poll_mode,
        target,
        pool,
        stats,
        queues: Vec::new(),
        next_gen: 1,
        waiters: VecDeque::new(),
        held_queues: Vec::new(),
        held_pass: Default::default(),
        qos: crate::qos::QosGroup::default(),
        lock_uid: 0,
        lock_waiters: Vec::new(),
        lock_gen: 0,
        fused_pairs: Vec::new(),
        fused_orphans: Vec::new(),
        draining: false,
        stop: stop.clone(),
        epoll,
        events: vec![EpollEvent::empty(); EPOLL_BATCH],
        backend_fds: Vec::new(),
        load: inbox.load.clone(),
        wake: inbox.wake.clone(),
    };
    let mut rt = rt;
    rt.lock_uid = rt.target.locks.register(&rt.wake);
    let cpu = rt.target.params.cpus.as_ref().map(|l| l.for_index(index));
    let thread = std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            if let Some(cpu) = cpu {
                // The config check refused CPUs this process may not use; a failure
                // here (CPU taken offline since) leaves the group unpinned, not down.
                match nvmf_common::cpus::pin_current_thread(cpu) {
                    Ok(()) => info!(group = index, cpu, "poll group pinned"),
                    Err(e) => warn!(group = index, cpu, "cannot pin poll group: {e}"),
                }
            }
            run(rt, t, inbox, stop)
        })?;
    Ok((handle, thread))
}

fn run<T: Transport>(
    mut rt: Runtime<T>,
    mut t: T,
    inbox: Inbox<T::NewQueue>,
    stop: Arc<AtomicBool>,
) {
    let mut reaped = Vec::with_capacity(EPOLL_BATCH);
    let start = Instant::now();
    let mut last_work = start;
    let mut last_timer = start;
    let mut prev_work = 1usize;
    // Busy/idle time: each pass is charged, at the start of the next, to busy when it
    // found work and to idle when not; time asleep in epoll is always idle. Plain
    // locals, published once per pass (a store each, no read-modify-write).
    let mut pass_start = stats::mono_ns();
    let mut busy_ns = 0u64;
    let mut idle_ns = 0u64;
    debug!(group = rt.index, mode = ?rt.mode, "{} poll group running", T::NAME);
    while !stop.load(Ordering::Acquire) {
        let mut work = 0usize;
        if inbox.has_new() {
            while let Some(nq) = inbox.next() {
                t.add_queue(&mut rt, nq);
                work += 1;
            }
        }
        let mut now = Instant::now();
        rt.ex.set_now(now);
        let now_ns = stats::mono_ns();
        rt.now_ns = now_ns;
        let pass_ns = now_ns.saturating_sub(pass_start);
        if prev_work > 0 {
            busy_ns += pass_ns;
        } else {
            idle_ns += pass_ns;
        }
        stats::set(&rt.stats.busy_ns, busy_ns);
        stats::set(&rt.stats.idle_ns, idle_ns);
        pass_start = now_ns;
        let spin = match rt.mode {
            PollMode::Poll => true,
            PollMode::Adaptive => {
                adaptive_spins(now.duration_since(last_work), || rt.ex.in_flight())
            }
            PollMode::Interrupt => false,
        };
        work += t.poll(&mut rt, spin);
        if !spin {
            // Block only when the previous pass and this one found nothing to do.
            let block = prev_work == 0 && work == 0;
            if block {
                work += t.arm(&mut rt);
            }
            if block && work == 0 {
                bump(&rt.stats.sleeps, 1);
                let sleep = if rt.has_held() || rt.locks_busy() {
                    THROTTLED_SLEEP_MS
                } else {
                    MAX_SLEEP_MS
                };
                work += rt.wait_events(&mut t, EpollTimeout::from(sleep));
                // The clock moved while asleep (timers, the adaptive spin window).
                let woke_ns = stats::mono_ns();
                idle_ns += woke_ns.saturating_sub(now_ns);
                pass_start = woke_ns;
                now = Instant::now();
            } else if T::RECEIVE_BY_EVENTS {
                work += rt.wait_events(&mut t, EpollTimeout::ZERO);
            }
        }
        work += rt.reap_backends(&mut t, &mut reaped);
        if rt.locks_busy() {
            work += rt.lock_pass(&mut t);
        }
        rt.serve_events(&mut t);
        if rt.has_held() {
            work += rt.retry_held(&mut t);
        }
        if !rt.waiters.is_empty() {
            rt.retry_waiters(&mut t);
        }
        if now.duration_since(last_timer) >= TIMER_PERIOD {
            last_timer = now;
            rt.timers(&mut t, now);
        }
        rt.ex.flush();
        t.flush(&mut rt);
        if work > 0 {
            last_work = now;
        } else if spin {
            IdlePause::of(rt.mode, || rt.ex.in_flight()).pause();
        }
        prev_work = work;
    }
    rt.drain(&mut t, &mut reaped);
    rt.shutdown_all(&mut t, &mut reaped);
    rt.target.locks.unregister(rt.lock_uid);
    t.shutdown(&mut rt);
    rt.publish_gauges();
    debug!(group = rt.index, "{} poll group stopped", T::NAME);
}

/// Whether an adaptive group spins this pass: for [`ADAPTIVE_SPIN`] after its last work,
/// and only while at most [`YIELD_IN_FLIGHT`] backend I/O is in flight. With more in
/// flight its next work is their completions, done by other threads (librbd's messenger
/// and completion threads, io_uring's workers) that may need this very CPU: it sleeps in
/// epoll until one comes (the backends' eventfds) or the fabric has work, as in
/// `interrupt` mode, and those threads run meanwhile. Spinning there held them off
/// until the scheduler's slice ended: with every RBD gateway thread on one CPU, 4 KiB
/// reads at QD 32 made 13.8K IOPS with a p99 of 21.6 ms spinning and 24.3K with 2.7 ms
/// not (docs/bench-rbd.md, session 33). `backend_in_flight` is asked only within the
/// spin window.
fn adaptive_spins(idle: Duration, backend_in_flight: impl FnOnce() -> usize) -> bool {
    idle < ADAPTIVE_SPIN && backend_in_flight() <= YIELD_IN_FLIGHT
}

/// What a spinning group does after a pass that found nothing, before the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdlePause {
    /// Ease the pipeline (`spin_loop`) and poll again.
    Spin,
    /// Give the CPU to whatever else is runnable on it (`sched_yield`), then poll again.
    Yield,
}

impl IdlePause {
    /// `poll` always spins: the group owns its CPU, as SPDK's reactor does. `adaptive`
    /// yields while exactly [`YIELD_IN_FLIGHT`] backend I/O is in flight: the group then
    /// has nothing to do until other threads finish it (librbd's messenger and completion
    /// threads, io_uring's workers), and those may need this very CPU; they run now rather
    /// than when the spin window or the scheduler's slice ends, and with nothing else
    /// runnable the yield returns at once. With more in flight an adaptive group does not
    /// spin at all ([`adaptive_spins`]); yielding on each of its empty passes instead cost
    /// RBD 4 KiB reads at QD 32 a quarter of their IOPS with every gateway thread on one
    /// CPU (the yields handed those threads the CPU once a completion, where sleeping
    /// hands it over until one is done). With nothing in flight it spins: the next work
    /// is a capsule from the fabric, and a system call a pass cost the loopback fabric's
    /// 1 µs round trip a fifth. (docs/bench-rbd.md, sessions 32 and 33.)
    ///
    /// `backend_in_flight` is asked only in `adaptive` mode (a sum over the channels).
    fn of(mode: PollMode, backend_in_flight: impl FnOnce() -> usize) -> Self {
        if mode == PollMode::Adaptive && backend_in_flight() == YIELD_IN_FLIGHT {
            IdlePause::Yield
        } else {
            IdlePause::Spin
        }
    }

    fn pause(self) {
        match self {
            IdlePause::Spin => std::hint::spin_loop(),
            IdlePause::Yield => std::thread::yield_now(),
        }
    }
}

impl<T: Transport> Runtime<T> {
    /// The group's epoll set, for transports to register their descriptors (tokens
    /// below 2^48).
    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    /// Whether the group is shutting down (new capsules are refused). The flag is read
    /// as well as the drain state, so a capsule that arrives in the pass during which
    /// the stop began is already refused.
    pub fn draining(&self) -> bool {
        self.draining || self.stop.load(Ordering::Relaxed)
    }

    /// Waits on epoll up to `timeout` and dispatches what is ready: the hand-over
    /// eventfd, backend eventfds, and the transport's descriptors. Returns the work.
    pub fn wait_events(&mut self, t: &mut T, timeout: EpollTimeout) -> usize {
        self.register_backend_fds();
        let n = match self.epoll.wait(&mut self.events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => {
                warn!(group = self.index, "epoll_wait failed: {e}");
                0
            }
        };
        let mut work = 0;
        for i in 0..n {
            let Some(ev) = self.events.get(i).copied() else {
                break;
            };
            let token = ev.data();
            if token == WAKE_TOKEN {
                // The flag in the mailbox says what arrived; this only woke us.
                let _ = self.wake.read();
                continue;
            }
            if token & BACKEND_TOKEN != 0 {
                // The channel clears its eventfd when reaped; drain it in case nothing
                // was in flight to reap, so a level-triggered wait does not spin.
                let mut b = [0u8; 8];
                let _ = nix::unistd::read((token & BACKEND_FD_MASK) as RawFd, &mut b);
                work += 1;
                continue;
            }
            work += t.on_event(self, token, ev.events());
        }
        work
    }

    /// Adds eventfds of backend channels opened since the last wait.
    fn register_backend_fds(&mut self) {
        let current = self.ex.event_fds();
        // Channels closed since: epoll dropped their descriptors when they closed, and a
        // new channel may get the same number.
        self.backend_fds.retain(|w| current.contains(w));
        for (id, fd) in current {
            if fd < 0 || self.backend_fds.contains(&(id, fd)) {
                continue;
            }
            // SAFETY: `fd` is the eventfd of a backend channel owned by `self.ex`;
            // channels stay open while they have I/O in flight and epoll drops a
            // descriptor by itself when it is closed, so the borrow only lives for
            // the registration call.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            let ev = EpollEvent::new(EpollFlags::EPOLLIN, BACKEND_TOKEN | fd as u64);
            let added = match self.epoll.add(bfd, ev) {
                // Still registered (the old channel's description lives on elsewhere).
                Err(nix::errno::Errno::EEXIST) => self.epoll.modify(bfd, &mut { ev }),
                r => r,
            };
            if let Err(e) = added {
                warn!(
                    group = self.index,
                    fd, "cannot watch a backend eventfd: {e}"
                );
            }
            self.backend_fds.push((id, fd));
        }
    }

    /// Reaps finished backend I/O and completes its commands. Returns how many.
    fn reap_backends(
        &mut self,
        t: &mut T,
        reaped: &mut Vec<crate::backend::IoCompletion>,
    ) -> usize {
        if self.ex.in_flight() == 0 {
            return 0;
        }
        self.ex.poll_backends(reaped);
        let n = reaped.len();
        for (tag, res) in reaped.drain(..) {
            self.on_backend(t, tag, res);
        }
        n
    }

    /// Keep-alive of admin queues, queues of dead controllers, then the transport's
    /// own checks.
    fn timers(&mut self, t: &mut T, now: Instant) {
        self.publish_gauges();
        let mut kill = Vec::new();
        for (qi, q) in self.queues.iter().enumerate() {
            let Some(q) = q else { continue };
            if q.dead {
                continue;
            }
            if let Some(ctrl) = &q.ctx.ctrl {
                if q.ctx.qid.is_admin() {
                    if q.ctx.keep_alive_paused() {
                        ctrl.touch(now);
                    } else if ctrl.check_keep_alive(now) {
                        self.target
                            .metrics
                            .event(crate::metrics::Event::KeepAliveExpired, ctrl);
                    }
                }
                if let Some(why) = q.ctx.auth_expired(now) {
                    ctrl.fatal(&format!("qid {}: {why}", q.ctx.qid));
                }
                if ctrl.is_dead() {
                    kill.push(qi as u16);
                }
            }
        }
        for qi in kill {
            self.kill(t, qi, "controller is gone", true);
        }
        t.timers(self, now);
        if self.qos.is_active() {
            self.qos.rebalance(self.now_ns);
        }
        if self.now_ns >= self.next_watch_ns {
            self.next_watch_ns = self.now_ns.saturating_add(WATCH_PERIOD_NS);
            self.watch(self.now_ns);
        }
    }

    /// Makes the queue and buffer gauges visible.
    pub(super) fn publish_gauges(&self) {
        let live = self.queues.iter().flatten().count() as u64;
        stats::set(&self.stats.queues, live);
        stats::set(&self.stats.buffers_in_use, self.pool.in_use() as u64);
    }

    /// Commands of live queues past their capsule: waiting for a buffer or data,
    /// executing, or sending their response.
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
                            ReqState::NeedBuffer
                                | ReqState::Throttled
                                | ReqState::TransferringHostToController
                                | ReqState::Executing
                                | ReqState::TransferringControllerToHost
                        )
                    })
                    .count()
            })
            .sum()
    }

    /// Graceful part of the shutdown: capsules arriving now are not executed; commands
    /// already in flight finish and their responses are sent, within [`SHUTDOWN_DRAIN`].
    fn drain(&mut self, t: &mut T, reaped: &mut Vec<crate::backend::IoCompletion>) {
        self.draining = true;
        let deadline = Instant::now() + SHUTDOWN_DRAIN;
        let start = self.commands_in_flight();
        while self.commands_in_flight() > 0 && Instant::now() < deadline {
            self.ex.set_now(Instant::now());
            let mut n = t.poll(self, true);
            n += self.reap_backends(t, reaped);
            // Held commands go on without their budget: they are answered in the drain.
            self.now_ns = super::stats::mono_ns();
            n += self.retry_held(t);
            self.retry_waiters(t);
            self.ex.flush();
            t.flush(self);
            if n == 0 {
                std::thread::sleep(DRAIN_POLL);
            }
        }
        let left = self.commands_in_flight();
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

    /// Closes every queue, then waits for backend I/O and transport work still in
    /// flight (their buffers must not go away under them).
    fn shutdown_all(&mut self, t: &mut T, reaped: &mut Vec<crate::backend::IoCompletion>) {
        t.flush(self);
        for qi in 0..self.queues.len() {
            // Linger: hosts read the last responses before the connection goes.
            self.kill(t, qi as u16, "target shutting down", true);
        }
        let deadline = Instant::now() + BACKEND_DRAIN;
        while self.queues.iter().any(Option::is_some) && Instant::now() < deadline {
            let mut n = t.poll(self, true);
            n += self.reap_backends(t, reaped);
            if n == 0 {
                std::thread::sleep(DRAIN_POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_pass_yields_only_when_adaptive_and_waiting_on_one_backend_io() {
        assert_eq!(IdlePause::of(PollMode::Adaptive, || 1), IdlePause::Yield);
        // Nothing in flight: the next work comes from the fabric.
        assert_eq!(IdlePause::of(PollMode::Adaptive, || 0), IdlePause::Spin);
        // Several in flight: an adaptive group does not spin then (`adaptive_spins`);
        // asked anyway, it does not yield.
        assert_eq!(IdlePause::of(PollMode::Adaptive, || 2), IdlePause::Spin);
        assert_eq!(IdlePause::of(PollMode::Adaptive, || 32), IdlePause::Spin);
        assert_eq!(IdlePause::of(PollMode::Poll, || 1), IdlePause::Spin);
        assert_eq!(IdlePause::of(PollMode::Poll, || 0), IdlePause::Spin);
        // Interrupt mode never spins; asked anyway, it does not yield either.
        assert_eq!(IdlePause::of(PollMode::Interrupt, || 1), IdlePause::Spin);
    }

    #[test]
    fn adaptive_group_spins_only_in_its_window_and_with_at_most_one_backend_io() {
        let inside = ADAPTIVE_SPIN / 2;
        assert!(adaptive_spins(inside, || 0));
        assert!(adaptive_spins(inside, || YIELD_IN_FLIGHT));
        // Several in flight: it sleeps until a completion or the fabric wakes it.
        assert!(!adaptive_spins(inside, || YIELD_IN_FLIGHT + 1));
        assert!(!adaptive_spins(inside, || 32));
        // Past the window it sleeps whatever is in flight, and does not ask.
        assert!(!adaptive_spins(ADAPTIVE_SPIN, || unreachable!()));
        assert!(!adaptive_spins(ADAPTIVE_SPIN * 2, || unreachable!()));
    }
}
