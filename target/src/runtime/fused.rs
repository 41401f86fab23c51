//! Fused Compare and Write, and the writes that wait for a locked range.
//!
//! A host sends the pair as two adjacent submission queue entries: Compare with FUSE
//! 01b, then Write with FUSE 10b, same namespace and range (SPDK checks the same; a
//! mismatch fails both with Invalid Field). Capsules arrive in submission order on
//! every fabric, so the pair is linked when the second capsule is parsed
//! ([`link`]); each half then gets its data like any command and waits, held, for
//! the other. Once both are in place:
//!
//! 1. the range is locked across every poll group ([`crate::locks`]);
//! 2. once granted, the Compare runs (read, compare);
//! 3. on a match the Write runs under the same lock (moved to the write's slot, so a
//!    queue torn down meanwhile still releases it only when the write is done);
//! 4. when the Write completes, the Compare completes (success), then the Write with
//!    its own status (SPDK's `spdk_bdev_io_get_nvme_fused_status`: a failed write
//!    does not fail the compare), and the range is unlocked.
//!
//! A miscompare completes the Compare with Compare Failure and the Write with
//! Command Aborted due to Failed Fused Command, unlocking at once. A half that fails
//! on its own (parse, data transfer) aborts the other with Failed Fused Command; a
//! first half whose next command is not its second half, or a second half without a
//! first, is aborted with Missing Fused Command (SPDK's statuses; neither sets DNR).
//!
//! Any other write ([`crate::core::write_extent`]) that overlaps a locked range waits
//! in the group, held, and is tried again when the lock table changes.

use nvmf_common::wire::nvm;
use nvmf_common::wire::sqe::fuse;
use nvmf_common::wire::status::{generic, Status};

use super::queue::{self, queue_at, FuseLink, OpenFused, Queue, ReqState};
use super::{Runtime, Transport};
use crate::core;

fn aborted_failed() -> Status {
    Status::generic_retryable(generic::ABORTED_FUSED_FAIL)
}

fn aborted_missing() -> Status {
    Status::generic_retryable(generic::ABORTED_FUSED_MISSING)
}

/// What [`link`] leaves for the caller: a status for the new command (it completes
/// with it at once) and a waiting first half to complete now.
#[derive(Debug, Default)]
pub(super) struct Linked {
    pub fail: Option<Status>,
    pub complete: Option<u16>,
}

/// Links the command just parsed in slot `si` (FUSE `fu`, `refused` when parse
/// failed) with the queue's open first half. Called only when the command is fused or
/// a first half is open.
pub(super) fn link<T: Transport>(q: &mut Queue<T>, si: u16, fu: u8, refused: bool) -> Linked {
    let mut out = Linked::default();
    let open = std::mem::take(&mut q.open_fused);
    if fu == fuse::SECOND {
        match open {
            OpenFused::Waiting(f) if refused => out.complete = orphan(q, f, aborted_failed()),
            OpenFused::Waiting(f) => {
                if same_range(q, f, si) {
                    set_link(
                        q,
                        f,
                        FuseLink::First {
                            second: Some(si),
                            compared: false,
                            atomic: false,
                        },
                    );
                    set_link(q, si, FuseLink::Second { first: f });
                } else {
                    let invalid = Status::generic_dnr(generic::INVALID_FIELD);
                    out.complete = orphan(q, f, invalid);
                    out.fail = Some(invalid);
                }
            }
            OpenFused::Failed if !refused => out.fail = Some(aborted_failed()),
            OpenFused::None if !refused => out.fail = Some(aborted_missing()),
            _ => {}
        }
        return out;
    }
    if let OpenFused::Waiting(f) = open {
        out.complete = orphan(q, f, aborted_missing());
    }
    if fu == fuse::FIRST {
        if refused {
            q.open_fused = OpenFused::Failed;
        } else {
            q.open_fused = OpenFused::Waiting(si);
            set_link(
                q,
                si,
                FuseLink::First {
                    second: None,
                    compared: false,
                    atomic: false,
                },
            );
        }
    }
    out
}

fn set_link<T: Transport>(q: &mut Queue<T>, si: u16, l: FuseLink) {
    if let Some(s) = q.slots.get_mut(usize::from(si)) {
        s.fuse = l;
    }
}

/// Both halves name the same namespace, starting LBA and block count.
fn same_range<T: Transport>(q: &Queue<T>, a: u16, b: u16) -> bool {
    let key = |si: u16| {
        q.slots.get(usize::from(si)).map(|s| {
            let c = s.req.cmd();
            (c.nsid(), nvm::rw_slba(&c), nvm::rw_nlb(&c))
        })
    };
    key(a).is_some() && key(a) == key(b)
}

/// Gives half `si` its final `status`; returns it when it is waiting, so the caller
/// completes it now (otherwise it completes when it reaches execution).
fn orphan<T: Transport>(q: &mut Queue<T>, si: u16, status: Status) -> Option<u16> {
    let s = q.slots.get_mut(usize::from(si))?;
    s.req.fail(status);
    s.fuse = FuseLink::Orphan;
    (s.state == ReqState::Held).then_some(si)
}

/// Whether `l` is the Compare of a linked pair not yet compared: its completion goes on
/// to the pair's next step ([`Runtime::finished`]).
#[inline]
pub(super) fn is_pair_compare(l: FuseLink) -> bool {
    matches!(
        l,
        FuseLink::First {
            second: Some(_),
            compared: false,
            ..
        }
    )
}

impl<T: Transport> Runtime<T> {
    /// A fused half whose data is in place reached execution: wait for the other
    /// half, or lock the range once both are here.
    pub(super) fn fused_ready(&mut self, t: &mut T, qi: u16, si: u16) {
        let now = self.now_ns;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let link = slot.fuse;
        if link == FuseLink::Orphan {
            slot.fuse = FuseLink::None;
            return self.complete(t, qi, si);
        }
        queue::enter(slot, ReqState::Held, now, &self.stats.states);
        let (first, second) = match link {
            FuseLink::First {
                second: Some(s), ..
            } => (si, s),
            FuseLink::Second { first } => (first, si),
            _ => return,
        };
        let both = [first, second].iter().all(|&x| {
            q.slots
                .get(usize::from(x))
                .is_some_and(|s| s.state == ReqState::Held)
        });
        if !both {
            return;
        }
        let Some(extent) = q
            .slots
            .get(usize::from(first))
            .and_then(|s| core::io_extent(&s.req))
        else {
            return;
        };
        let gen = q.gen;
        let id = self.target.locks.request(self.lock_uid, extent);
        if let Some(s) = q.slots.get_mut(usize::from(first)) {
            s.lock = Some(id);
        }
        self.fused_pairs.push((qi, gen, first));
        self.lock_pass(t);
    }

    /// Slot `si`'s command finished executing: a pair's Compare goes on to its Write,
    /// anything else completes.
    pub(super) fn finished(&mut self, t: &mut T, qi: u16, si: u16) {
        let link = self
            .queue(qi)
            .and_then(|q| q.slots.get(usize::from(si)))
            .map(|s| s.fuse);
        match link {
            Some(FuseLink::First {
                second: Some(second),
                compared: false,
                atomic,
            }) => self.fused_compared(t, qi, si, second, atomic),
            _ => self.complete(t, qi, si),
        }
    }

    /// The Compare of a pair finished (slot `first`, its Write in `second`; `atomic`:
    /// the backend ran both as one operation).
    pub(super) fn fused_compared(
        &mut self,
        t: &mut T,
        qi: u16,
        first: u16,
        second: u16,
        atomic: bool,
    ) {
        let now = self.now_ns;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let Some(f) = q.slots.get_mut(usize::from(first)) else {
            return;
        };
        let matched = f.req.status.is_success();
        let lock = f.lock.take();
        if matched && !atomic {
            f.fuse = FuseLink::First {
                second: Some(second),
                compared: true,
                atomic: false,
            };
            queue::enter(f, ReqState::Held, now, &self.stats.states);
            if let Some(s) = q.slots.get_mut(usize::from(second)) {
                s.lock = lock;
            }
            return self.run(t, qi, second);
        }
        f.fuse = FuseLink::None;
        if let Some(id) = lock {
            self.target.locks.release(id);
        }
        if let Some(s) = q.slots.get_mut(usize::from(second)) {
            s.fuse = FuseLink::None;
            // Written with the Compare (atomic), or aborted with it.
            if !matched {
                s.req.fail(aborted_failed());
            }
        }
        self.complete(t, qi, first);
        self.complete(t, qi, second);
    }

    /// A pair's range is granted: run its Compare, or, when the backend compares and
    /// writes atomically for all its clients (an RBD object: other gateways too) and
    /// the range lies in one such unit, both halves as that one operation.
    fn start_pair(&mut self, t: &mut T, qi: u16, first: u16) {
        let now = self.now_ns;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let tg = super::tag(q.gen, qi, first);
        let Some(FuseLink::First {
            second: Some(second),
            ..
        }) = q.slots.get(usize::from(first)).map(|s| s.fuse)
        else {
            return self.run(t, qi, first);
        };
        let data = q
            .slots
            .get(usize::from(second))
            .and_then(|s| s.req.data.clone());
        let unit = q
            .slots
            .get(usize::from(first))
            .and_then(|f| f.req.namespace())
            .and_then(|ns| ns.backend.compare_and_write_unit());
        let extent = q
            .slots
            .get(usize::from(first))
            .and_then(|f| core::io_extent(&f.req));
        let atomic = match (unit, extent, data) {
            (Some(u), Some(e), Some(d)) if e.end > e.start && e.start / u == (e.end - 1) / u => d,
            _ => return self.run(t, qi, first),
        };
        // The Write's data is in the backend's hands from now on: its slot counts as
        // executing, so a queue torn down meanwhile keeps its buffer until it is done.
        if let Some(s) = q.slots.get_mut(usize::from(second)) {
            queue::enter(s, ReqState::Executing, now, &self.stats.states);
        }
        let Some(f) = q.slots.get_mut(usize::from(first)) else {
            return;
        };
        f.fuse = FuseLink::First {
            second: Some(second),
            compared: false,
            atomic: true,
        };
        queue::enter(f, ReqState::Executing, now, &self.stats.states);
        if core::compare_and_write(&mut self.ex, &mut f.req, atomic, tg) != core::Outcome::Pending {
            self.finished(t, qi, first);
        }
    }

    /// Slot `si`, a fused half, completes: settle its other half. Called from
    /// [`Runtime::complete`] before the response goes out.
    pub(super) fn fused_completing(&mut self, t: &mut T, qi: u16, si: u16) {
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        if q.open_fused == OpenFused::Waiting(si) {
            q.open_fused = OpenFused::Failed;
        }
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let link = std::mem::take(&mut slot.fuse);
        let lock = slot.lock.take();
        if let Some(id) = lock {
            self.target.locks.release(id);
        }
        let other = match link {
            FuseLink::First {
                second: Some(s), ..
            } => s,
            FuseLink::Second { first } => first,
            _ => return,
        };
        let Some(o) = q.slots.get_mut(usize::from(other)) else {
            return;
        };
        match o.fuse {
            // The Write finished after a matching Compare: the Compare succeeded, and
            // its response goes first.
            FuseLink::First { compared: true, .. } if o.state == ReqState::Held => {
                o.fuse = FuseLink::None;
                self.complete(t, qi, other);
            }
            FuseLink::First { .. } | FuseLink::Second { .. } => {
                if let Some(done) = orphan(q, other, aborted_failed()) {
                    if let Some(o) = q.slots.get_mut(usize::from(done)) {
                        o.fuse = FuseLink::None;
                    }
                    self.complete(t, qi, done);
                }
            }
            _ => {}
        }
    }

    /// Whether range locks need this group's attention this pass.
    #[inline]
    pub(super) fn locks_busy(&self) -> bool {
        self.target.locks.active()
            || !self.lock_waiters.is_empty()
            || !self.fused_pairs.is_empty()
            || !self.fused_orphans.is_empty()
    }

    /// Acknowledges lock requests no write of this group overlaps, starts the pairs
    /// whose range was granted, and retries writes held by a lock once the table
    /// changed. Returns the work done.
    pub(super) fn lock_pass(&mut self, t: &mut T) -> usize {
        let mut work = 0;
        for (qi, gen, si) in std::mem::take(&mut self.fused_orphans) {
            let waiting = self
                .live_queue(qi, gen)
                .and_then(|q| q.slots.get_mut(usize::from(si)))
                .filter(|s| s.state == ReqState::Held && s.fuse == FuseLink::Orphan)
                .map(|s| s.fuse = FuseLink::None)
                .is_some();
            if waiting {
                work += 1;
                self.complete(t, qi, si);
            }
        }
        if self.target.locks.active() {
            for (id, extent) in self.target.locks.pending_for(self.lock_uid) {
                if !self.writes_in_flight(&extent) {
                    self.target.locks.ack(id, self.lock_uid);
                }
            }
        }
        let mut i = 0;
        while let Some(&(qi, gen, first)) = self.fused_pairs.get(i) {
            let lock = self
                .live_queue(qi, gen)
                .and_then(|q| q.slots.get(usize::from(first)))
                .filter(|s| s.state == ReqState::Held)
                .and_then(|s| s.lock);
            let Some(id) = lock else {
                self.fused_pairs.swap_remove(i);
                continue;
            };
            if !self.target.locks.granted(id) {
                i += 1;
                continue;
            }
            self.fused_pairs.swap_remove(i);
            work += 1;
            self.start_pair(t, qi, first);
        }
        let gen = self.target.locks.gen();
        if gen != self.lock_gen && !self.lock_waiters.is_empty() {
            self.lock_gen = gen;
            for (qi, qgen, si) in std::mem::take(&mut self.lock_waiters) {
                let held = self
                    .live_queue(qi, qgen)
                    .and_then(|q| q.slots.get(usize::from(si)))
                    .is_some_and(|s| s.state == ReqState::Held && s.fuse == FuseLink::None);
                if held {
                    work += 1;
                    self.execute(t, qi, si);
                }
            }
        }
        work
    }

    /// Whether a write of this group that overlaps `extent` is with the backend.
    fn writes_in_flight(&self, extent: &crate::locks::Extent) -> bool {
        self.queues.iter().flatten().any(|q| {
            q.slots.iter().any(|s| {
                s.state == ReqState::Executing
                    && core::write_extent(&s.req).is_some_and(|e| e.overlaps(extent))
            })
        })
    }

    /// A write about to run overlaps a locked range: hold it until the table changes.
    /// Returns true when it was held.
    #[inline]
    pub(super) fn held_by_lock(&mut self, qi: u16, si: u16) -> bool {
        if !self.target.locks.active() {
            return false;
        }
        // Read before the check: a release between the two is then seen as a change.
        let table_gen = self.target.locks.gen();
        let now = self.now_ns;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return false;
        };
        let gen = q.gen;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return false;
        };
        let Some(extent) = core::write_extent(&slot.req) else {
            return false;
        };
        if !self.target.locks.blocks(&extent, None) {
            return false;
        }
        queue::enter(slot, ReqState::Held, now, &self.stats.states);
        if self.lock_waiters.is_empty() {
            self.lock_gen = table_gen;
        }
        self.lock_waiters.push((qi, gen, si));
        true
    }
}
