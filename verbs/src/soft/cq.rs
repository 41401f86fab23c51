//! Completion queues with an eventfd completion channel.
//!
//! The queue is a `VecDeque` behind a short mutex. The eventfd is written only when the
//! CQ is armed ([`CompletionQueue::req_notify`]), and arming is one-shot, so a data
//! path whose consumers spin on `poll` makes no system call at all.
//!
//! Polling a completion gives its work-queue slots back to the QP (see [`Credits`]).
//! A completion names its QP's *attachment* to this CQ, a slot of a table kept under
//! the queue lock, so neither pushing nor polling touches a reference count.

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
use crate::{CompletionQueue, VerbsError, WorkCompletion};

/// Largest CQ the provider creates.
const MAX_CQE: u32 = 1 << 22;
/// Entries preallocated at creation (the queue grows beyond that if needed).
const PREALLOC_CQE: usize = 1 << 16;

/// Work-queue slots a QP got back. As on hardware, a slot is reusable once the
/// completion of its work request, or of a later one on the same queue, was polled.
/// The QP counts what it posted (under its own lock); these count what was released,
/// by pollers of the CQ that queue completes on (under that CQ's lock). A shared
/// receive queue's completions may go to several CQs (one per attached QP's receive
/// CQ), so releases are atomic adds.
#[derive(Default)]
pub(super) struct Credits {
    pub(super) sq_released: AtomicU32,
    pub(super) rq_released: AtomicU32,
}

/// Which queue of which attached QP a completion gives slots back to.
#[derive(Clone, Copy)]
pub(super) struct Release {
    pub(super) attach: u32,
    pub(super) slots: u32,
    pub(super) send: bool,
}

/// A completion as stored in the queue.
pub(super) struct Cqe {
    pub(super) wc: WorkCompletion,
    pub(super) release: Release,
}

struct Attached {
    credits: Arc<Credits>,
    /// Completions in the queue that name this attachment.
    pending: u32,
    /// False once the QP is gone; the slot is freed when `pending` reaches zero.
    live: bool,
}

struct Inner {
    queue: VecDeque<Cqe>,
    attached: Vec<Option<Attached>>,
    free: Vec<u32>,
}

impl Inner {
    fn release(&mut self, r: Release) {
        let Some(slot) = self.attached.get_mut(r.attach as usize) else {
            return;
        };
        let Some(a) = slot else { return };
        let counter = if r.send {
            &a.credits.sq_released
        } else {
            &a.credits.rq_released
        };
        // Atomic: an SRQ's credits are released by the pollers of several CQs.
        counter.fetch_add(r.slots, Ordering::Release);
        a.pending = a.pending.saturating_sub(1);
        if !a.live && a.pending == 0 {
            *slot = None;
            self.free.push(r.attach);
        }
    }
}

pub(super) struct SoftCq {
    dev: Arc<DevShared>,
    inner: Mutex<Inner>,
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
            inner: Mutex::new(Inner {
                queue: VecDeque::with_capacity(entries.min(PREALLOC_CQE)),
                attached: Vec::new(),
                free: Vec::new(),
            }),
            pending: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            efd,
            entries,
        });
        dev.cqs.insert(&cq);
        Ok(cq)
    }

    /// Registers a QP's credits; completions name the returned attachment.
    pub(super) fn attach(&self, credits: &Arc<Credits>) -> u32 {
        let mut inner = self.inner.lock();
        let entry = Attached {
            credits: Arc::clone(credits),
            pending: 0,
            live: true,
        };
        match inner.free.pop() {
            Some(idx) => {
                if let Some(slot) = inner.attached.get_mut(idx as usize) {
                    *slot = Some(entry);
                }
                idx
            }
            None => {
                inner.attached.push(Some(entry));
                u32::try_from(inner.attached.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    /// The QP is gone; its attachment goes once its last completion is polled.
    pub(super) fn detach(&self, attach: u32) {
        let mut inner = self.inner.lock();
        let Some(slot) = inner.attached.get_mut(attach as usize) else {
            return;
        };
        let Some(a) = slot else { return };
        a.live = false;
        if a.pending == 0 {
            *slot = None;
            inner.free.push(attach);
        }
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
            let mut inner = self.inner.lock();
            let inner = &mut *inner;
            for cqe in cqes {
                if let Some(Some(a)) = inner.attached.get_mut(cqe.release.attach as usize) {
                    a.pending += 1;
                }
                if inner.queue.len() >= self.entries {
                    overflowed += 1;
                }
                inner.queue.push_back(cqe);
                pushed += 1;
            }
            self.pending.store(inner.queue.len(), Ordering::Release);
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

    /// Live or draining QP attachments (for tests).
    #[cfg(test)]
    pub(super) fn attachments(&self) -> usize {
        self.inner.lock().attached.iter().flatten().count()
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
        let mut inner = self.inner.lock();
        let n = out.len().min(inner.queue.len());
        for slot in out.iter_mut().take(n) {
            let Some(cqe) = inner.queue.pop_front() else {
                break;
            };
            *slot = cqe.wc;
            inner.release(cqe.release);
        }
        self.pending.store(inner.queue.len(), Ordering::Release);
        n
    }

    fn req_notify(&self) {
        let _inner = self.inner.lock();
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
        let ms = timeout.as_nanos().div_ceil(1_000_000);
        let ms = i32::try_from(ms).unwrap_or(i32::MAX);
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
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
