//! Completion queues with an eventfd completion channel.
//!
//! The queue is a `VecDeque` behind a short mutex. The eventfd is written only when the
//! CQ is armed ([`CompletionQueue::req_notify`]), and arming is one-shot, so a data
//! path whose consumers spin on `poll` makes no system call at all.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;

use super::counters::bump;
use super::DevShared;
use crate::verbs::{CompletionQueue, VerbsError, WorkCompletion};

/// Largest CQ the provider creates.
const MAX_CQE: u32 = 1 << 22;
/// Entries preallocated at creation (the queue grows beyond that if needed).
const PREALLOC_CQE: usize = 1 << 16;

/// Work-queue slots of a QP still held by work requests whose completions have not
/// been polled yet (as on hardware, a slot is reusable once the CQE of its work request
/// or of a later one on the same queue has been polled).
#[derive(Default)]
pub(super) struct Credits {
    pub(super) sq: AtomicU32,
    pub(super) rq: AtomicU32,
}

/// Slots to give back to a QP when the completion is polled.
pub(super) struct Release {
    pub(super) credits: Arc<Credits>,
    pub(super) slots: u32,
    pub(super) send: bool,
}

impl Release {
    fn apply(self) {
        let counter = if self.send {
            &self.credits.sq
        } else {
            &self.credits.rq
        };
        counter.fetch_sub(self.slots, Ordering::Release);
    }
}

/// A completion as stored in the queue.
pub(super) struct Cqe {
    pub(super) wc: WorkCompletion,
    pub(super) release: Option<Release>,
}

pub(super) struct SoftCq {
    dev: Arc<DevShared>,
    queue: Mutex<VecDeque<Cqe>>,
    /// `queue.len()`, published under the lock so empty polls skip the lock.
    pending: AtomicUsize,
    /// One-shot: the next push writes the eventfd.
    armed: AtomicBool,
    efd: EventFd,
    entries: usize,
}

impl SoftCq {
    pub(super) fn new(dev: &Arc<DevShared>, entries: u32) -> Result<Arc<SoftCq>, VerbsError> {
        if entries == 0 || entries > MAX_CQE {
            return Err(VerbsError::InvalidArgument(
                "CQ entries must be 1..=4194304",
            ));
        }
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| VerbsError::Provider(format!("eventfd: {e}")))?;
        let entries = entries as usize;
        let cq = Arc::new(SoftCq {
            dev: Arc::clone(dev),
            queue: Mutex::new(VecDeque::with_capacity(entries.min(PREALLOC_CQE))),
            pending: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            efd,
            entries,
        });
        dev.cqs.insert(&cq);
        Ok(cq)
    }

    pub(super) fn push(&self, cqe: Cqe) {
        self.push_iter(std::iter::once(cqe));
    }

    /// Appends completions in order under one lock acquisition. Never drops one: past
    /// `entries` the queue grows and the overflow counter records it.
    pub(super) fn push_iter(&self, cqes: impl IntoIterator<Item = Cqe>) {
        let mut pushed = 0u64;
        let mut overflowed = 0u64;
        {
            let mut q = self.queue.lock();
            for cqe in cqes {
                if q.len() >= self.entries {
                    overflowed += 1;
                }
                q.push_back(cqe);
                pushed += 1;
            }
            self.pending.store(q.len(), Ordering::Release);
        }
        if pushed == 0 {
            return;
        }
        let shard = self.dev.counters.shard();
        bump(&shard.completions, pushed);
        if overflowed > 0 {
            bump(&shard.cq_overflows, overflowed);
        }
        // Relaxed suffices: `req_notify` sets `armed` under the queue lock, so either it
        // ran before our critical section (we see it) or after (the arming thread sees
        // our completion when it re-checks the queue).
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
            // Fails only if the counter would overflow, when it is readable anyway.
            let _ = self.efd.write(1);
        }
    }

    fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }
}

impl Drop for SoftCq {
    fn drop(&mut self) {
        self.dev.cqs.remove(self);
    }
}

impl CompletionQueue for SoftCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        if out.is_empty() || !self.has_pending() {
            return 0;
        }
        let mut q = self.queue.lock();
        let n = out.len().min(q.len());
        for (slot, cqe) in out.iter_mut().zip(q.drain(..n)) {
            *slot = cqe.wc;
            if let Some(release) = cqe.release {
                release.apply();
            }
        }
        self.pending.store(q.len(), Ordering::Release);
        n
    }

    fn req_notify(&self) {
        let _q = self.queue.lock();
        self.armed.store(true, Ordering::Relaxed);
    }

    fn wait(&self, timeout: Duration) {
        if self.has_pending() {
            return;
        }
        self.req_notify();
        if self.has_pending() {
            return;
        }
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128);
        let timeout = PollTimeout::try_from(i32::try_from(ms).unwrap_or(i32::MAX))
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.efd.as_fd(), PollFlags::POLLIN)];
        // EINTR and timeouts are spurious wake-ups for the caller, who polls anyway.
        let _ = poll(&mut fds, timeout);
        self.ack_events();
    }

    fn event_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn ack_events(&self) {
        // Non-blocking: EAGAIN just means there was nothing to clear.
        let _ = self.efd.read();
    }
}
