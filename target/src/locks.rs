//! LBA range locks across poll groups, for fused Compare and Write.
//!
//! A fused Compare and Write must be atomic against every other write to its range,
//! whichever poll group (thread, fabric) issues it. Poll groups never share a lock on
//! the data path, so the range is locked the way SPDK's bdev layer locks one
//! (`bdev_lock_lba_range`): by asking every group.
//!
//! Ownership and ordering:
//! - Every poll group registers here when it starts ([`RangeLocks::register`], with
//!   the eventfd that wakes it) and leaves when it stops.
//! - A group that wants a range adds an entry ([`RangeLocks::request`]) naming the
//!   groups registered at that moment, bumps the generation and wakes them all.
//! - Each named group, in its own loop, acknowledges the entry once none of *its*
//!   writes that overlap the range is in flight ([`RangeLocks::pending_for`],
//!   [`RangeLocks::ack`]). From the moment it has seen the entry it starts no
//!   overlapping write ([`RangeLocks::blocks`] at execution): those wait in the group
//!   until the entry is gone. A write it started before it saw the entry is one it
//!   waits for before acknowledging, so no write can slip between the two.
//! - The entry is granted when every named group acknowledged and no earlier entry
//!   overlapping it is still held (entries of one range are granted in request order).
//!   Groups registered later never had a write in flight before the entry existed;
//!   a group that stopped counts as having acknowledged.
//! - The holder releases the entry once its write completed ([`RangeLocks::release`]);
//!   every group is woken to retry the writes it held.
//!
//! On the data path a write costs one relaxed load ([`RangeLocks::active`]) while no
//! range is locked; the table's mutex is taken only while one is.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use nix::sys::eventfd::EventFd;

/// Identifies one lock request.
pub type LockId = u64;

/// A byte range of one namespace instance, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub ns: u64,
    pub start: u64,
    pub end: u64,
}

impl Extent {
    /// Every byte of namespace instance `ns` (a write whose range is in its data, as
    /// Dataset Management's and Copy's are, counts as touching all of it).
    pub fn whole(ns: u64) -> Extent {
        Extent {
            ns,
            start: 0,
            end: u64::MAX,
        }
    }

    pub fn overlaps(&self, o: &Extent) -> bool {
        self.ns == o.ns && self.start < o.end && o.start < self.end
    }
}

struct Entry {
    id: LockId,
    extent: Extent,
    /// Groups that must acknowledge (registered when the entry was made).
    needed: Vec<u64>,
    acked: Vec<u64>,
    /// The requesting group, woken when the entry may be granted.
    owner: u64,
}

struct Group {
    uid: u64,
    wake: Weak<EventFd>,
}

#[derive(Default)]
struct Inner {
    next_id: LockId,
    next_uid: u64,
    entries: Vec<Entry>,
    groups: Vec<Group>,
}

/// The target's range-lock table ([`crate::target::Target::locks`]).
#[derive(Default)]
pub struct RangeLocks {
    /// Entries in the table (held or waiting).
    active: AtomicUsize,
    /// Bumped on every change of the table.
    gen: AtomicU64,
    inner: Mutex<Inner>,
}

impl RangeLocks {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the table leaves it consistent (no partial updates).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any range is locked or waiting (one relaxed load: the data path's check).
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    /// The table's generation: changes whenever an entry comes or goes.
    pub fn gen(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    fn changed(&self, inner: &Inner) {
        self.active.store(inner.entries.len(), Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// A poll group joins; returns its id.
    pub fn register(&self, wake: &Arc<EventFd>) -> u64 {
        let mut inner = self.lock();
        inner.next_uid += 1;
        let uid = inner.next_uid;
        inner.groups.push(Group {
            uid,
            wake: Arc::downgrade(wake),
        });
        uid
    }

    /// A poll group stops: it has no writes left, so it acknowledges everything.
    pub fn unregister(&self, uid: u64) {
        let mut inner = self.lock();
        inner.groups.retain(|g| g.uid != uid);
        for e in &mut inner.entries {
            e.needed.retain(|&g| g != uid);
        }
        let owners: Vec<u64> = inner.entries.iter().map(|e| e.owner).collect();
        wake(&inner, |g| owners.contains(&g));
        self.changed(&inner);
    }

    /// Group `owner` asks for `extent`; every group is woken to acknowledge.
    pub fn request(&self, owner: u64, extent: Extent) -> LockId {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        let needed = inner.groups.iter().map(|g| g.uid).collect();
        inner.entries.push(Entry {
            id,
            extent,
            needed,
            acked: Vec::new(),
            owner,
        });
        self.changed(&inner);
        wake(&inner, |_| true);
        id
    }

    /// Ends entry `id` (held or still waiting); every group may retry held writes.
    pub fn release(&self, id: LockId) {
        let mut inner = self.lock();
        let before = inner.entries.len();
        inner.entries.retain(|e| e.id != id);
        if inner.entries.len() != before {
            self.changed(&inner);
            wake(&inner, |_| true);
        }
    }

    /// Whether entry `id` is granted: every group it named acknowledged, and no
    /// earlier overlapping entry remains.
    pub fn granted(&self, id: LockId) -> bool {
        let inner = self.lock();
        let Some(e) = inner.entries.iter().find(|e| e.id == id) else {
            return false;
        };
        e.needed.iter().all(|g| e.acked.contains(g))
            && !inner
                .entries
                .iter()
                .any(|o| o.id < id && o.extent.overlaps(&e.extent))
    }

    /// Entries group `uid` has not acknowledged yet: (id, extent).
    pub fn pending_for(&self, uid: u64) -> Vec<(LockId, Extent)> {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .filter(|e| e.needed.contains(&uid) && !e.acked.contains(&uid))
            .map(|e| (e.id, e.extent))
            .collect()
    }

    /// Group `uid` has no write overlapping entry `id` in flight and will start none.
    pub fn ack(&self, id: LockId, uid: u64) {
        let mut inner = self.lock();
        let Some(e) = inner.entries.iter_mut().find(|e| e.id == id) else {
            return;
        };
        if !e.acked.contains(&uid) {
            e.acked.push(uid);
        }
        let owner = e.owner;
        if e.needed.iter().all(|g| e.acked.contains(g)) {
            wake(&inner, |g| g == owner);
        }
    }

    /// Whether a write to `extent` must wait: an entry other than `own` overlaps it.
    pub fn blocks(&self, extent: &Extent, own: Option<LockId>) -> bool {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .any(|e| Some(e.id) != own && e.extent.overlaps(extent))
    }
}

/// Wakes the registered groups `which` selects.
fn wake(inner: &Inner, which: impl Fn(u64) -> bool) {
    for g in &inner.groups {
        if which(g.uid) {
            if let Some(fd) = g.wake.upgrade() {
                // A full counter already means "wake up": nothing is lost.
                let _ = fd.write(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::eventfd::EfdFlags;

    fn efd() -> Arc<EventFd> {
        Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn ext(start: u64, end: u64) -> Extent {
        Extent { ns: 7, start, end }
    }

    #[test]
    fn granted_once_every_group_acked_and_in_request_order() {
        let l = RangeLocks::default();
        let (fa, fb) = (efd(), efd());
        let (a, b) = (l.register(&fa), l.register(&fb));
        assert!(!l.active());
        let first = l.request(a, ext(0, 4096));
        assert!(l.active());
        assert!(!l.granted(first), "no group acknowledged yet");
        assert!(l.blocks(&ext(1024, 2048), None));
        assert!(
            !l.blocks(&ext(1024, 2048), Some(first)),
            "its own write passes"
        );
        assert!(
            !l.blocks(&ext(4096, 8192), None),
            "a range beside it passes"
        );
        assert!(
            !l.blocks(
                &Extent {
                    ns: 8,
                    start: 0,
                    end: 10
                },
                None
            ),
            "another namespace passes"
        );
        l.ack(first, a);
        assert!(!l.granted(first));
        // A second request on an overlapping range waits for the first to end.
        let second = l.request(b, ext(2048, 6144));
        for (id, _) in l.pending_for(a) {
            l.ack(id, a);
        }
        for (id, _) in l.pending_for(b) {
            l.ack(id, b);
        }
        assert!(l.granted(first));
        assert!(!l.granted(second), "an earlier overlapping entry is held");
        l.release(first);
        assert!(l.granted(second));
        l.release(second);
        assert!(!l.active());
    }

    #[test]
    fn a_stopped_group_counts_as_acknowledged_and_later_groups_are_not_asked() {
        let l = RangeLocks::default();
        let (fa, fb) = (efd(), efd());
        let (a, b) = (l.register(&fa), l.register(&fb));
        let id = l.request(a, ext(0, 512));
        let fc = efd();
        let c = l.register(&fc);
        assert!(l.pending_for(c).is_empty(), "registered after the request");
        l.ack(id, a);
        l.unregister(b);
        assert!(l.granted(id));
        assert!(Extent::whole(7).overlaps(&ext(u64::MAX - 2, u64::MAX)));
    }
}
