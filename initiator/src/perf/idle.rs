//! When a perf polling loop stops spinning and blocks: how long it spins after the last
//! completion ([`IdleSpin`]), and how it blocks ([`wait_all`] on every queue's socket at
//! once, or one queue's own `wait` for [`WAIT_SLICE`]). Used by [`super::job::run_job`]
//! and by the threads that step several jobs ([`super::threads`]).

use std::time::{Duration, Instant};

use nix::poll::PollFd;

use super::job::{JobRunner, HOUSEKEEPING};
use crate::ioqueue::IoQueue;
use crate::transport::{poll_timeout, WaitOn};

/// How long the loop polls without a completion before it blocks in `wait`. While
/// I/O is in flight an answer normally comes within microseconds and a blocking
/// wake-up costs far more (tens of µs to a scheduler tick on these VMs), so spin;
/// block only when the target has gone quiet.
pub(super) const SPIN_TIME: Duration = Duration::from_millis(1);
/// The longest block in `wait` between polls, for a queue that can only be waited on
/// alone ([`WaitOn::Opaque`]).
pub(super) const WAIT_SLICE: Duration = Duration::from_millis(1);
/// The longest block when every queue of a thread can be waited on at once: any answer
/// wakes the thread, so only the clock-driven checks (every [`HOUSEKEEPING`]) bound it.
/// A host that sleeps beside others (a throttled neighbour, `--idle-spin 0`) then wakes
/// about a hundred times a second, not once per [`WAIT_SLICE`] per queue.
pub(super) const WAIT_ALL: Duration = HOUSEKEEPING;
/// A polling loop's idle time: it spins for its spin time ([`SPIN_TIME`] by default,
/// perf's `--idle-spin`) after the last completion, then blocks; while spinning it reads
/// the clock once in [`IDLE_CLOCK_EVERY`] passes.
pub(super) struct IdleSpin {
    spin: Duration,
    since: Option<Instant>,
    passes: u32,
}

impl IdleSpin {
    /// A loop that spins for `spin` before it blocks (zero: blocks at once).
    pub(super) fn new(spin: Duration) -> IdleSpin {
        IdleSpin {
            spin,
            since: None,
            passes: 0,
        }
    }

    /// A pass that did work.
    pub(super) fn busy(&mut self) {
        self.since = None;
        self.passes = 0;
    }

    /// A pass that did nothing: whether the loop has spun long enough to block (the
    /// spin starts over after it).
    pub(super) fn idle(&mut self) -> bool {
        if self.spin.is_zero() {
            return true;
        }
        self.passes = self.passes.wrapping_add(1);
        if self.since.is_some() && !self.passes.is_multiple_of(IDLE_CLOCK_EVERY) {
            return false;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) < self.spin {
            return false;
        }
        self.busy();
        true
    }
}

/// A queue polled empty reads the clock (for housekeeping) once in this many polls: a
/// spinning loop otherwise spends a good part of each pass in `clock_gettime`.
pub(super) const IDLE_CLOCK_EVERY: u32 = 32;
/// Blocks until one of `runners`' queues may have something or `timeout` passes,
/// when every queue can say what it would block on; returns at once when one has
/// something already. `false`: some queue can only be waited on alone (the caller then
/// waits on one queue at a time).
pub(super) fn wait_all<Q: IoQueue>(runners: &[JobRunner<'_, Q>], timeout: Duration) -> bool {
    let mut fds = Vec::with_capacity(runners.len());
    for r in runners {
        match r.wait_on() {
            WaitOn::Now => return true,
            WaitOn::Fd(fd, ev) => fds.push(PollFd::new(fd, ev)),
            WaitOn::Opaque => return false,
        }
    }
    // An error (EINTR) only ends the block early: the next pass polls every queue.
    let _ = nix::poll::poll(&mut fds, poll_timeout(timeout));
    true
}
