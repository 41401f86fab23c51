//! How listeners hand queues to a poll group: a channel, a flag the loop checks each
//! pass (cheaper than polling the channel), and an eventfd that wakes a sleeping group.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use nix::sys::eventfd::EventFd;

use super::stats::GroupStats;

/// What a listener needs to hand queues to one group.
pub struct GroupHandle<N, S> {
    pub index: usize,
    tx: Sender<N>,
    wake: Arc<EventFd>,
    /// Set when a queue was handed over.
    pending: Arc<AtomicBool>,
    /// Queues the group owns (for placement).
    pub load: Arc<AtomicUsize>,
    pub stats: Arc<GroupStats>,
    /// The transport's shared state (the group's CQ on RDMA).
    pub shared: S,
}

impl<N, S: Clone> Clone for GroupHandle<N, S> {
    fn clone(&self) -> Self {
        GroupHandle {
            index: self.index,
            tx: self.tx.clone(),
            wake: self.wake.clone(),
            pending: self.pending.clone(),
            load: self.load.clone(),
            stats: self.stats.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<N, S> GroupHandle<N, S> {
    pub(super) fn new(
        index: usize,
        tx: Sender<N>,
        inbox: &Inbox<N>,
        stats: Arc<GroupStats>,
        shared: S,
    ) -> Self {
        GroupHandle {
            index,
            tx,
            wake: inbox.wake.clone(),
            pending: inbox.pending.clone(),
            load: inbox.load.clone(),
            stats,
            shared,
        }
    }

    /// Hands over a queue; false when the group is gone.
    pub fn add(&self, q: N) -> bool {
        self.load.fetch_add(1, Ordering::Relaxed);
        let ok = self.tx.send(q).is_ok();
        if !ok {
            self.load.fetch_sub(1, Ordering::Relaxed);
        }
        self.pending.store(true, Ordering::Release);
        self.wake();
        ok
    }

    pub fn wake(&self) {
        let _ = self.wake.write(1);
    }
}

/// The group's side of the mailbox.
pub(super) struct Inbox<N> {
    pub rx: Receiver<N>,
    pub wake: Arc<EventFd>,
    pub pending: Arc<AtomicBool>,
    pub load: Arc<AtomicUsize>,
}

impl<N> Inbox<N> {
    /// Whether queues were handed over since the last look (clears the flag). One
    /// load on the data path; the channel is read only when it says so.
    pub fn has_new(&self) -> bool {
        if !self.pending.load(Ordering::Acquire) {
            return false;
        }
        self.pending.store(false, Ordering::Release);
        true
    }

    /// The next handed-over queue, if any.
    pub fn next(&self) -> Option<N> {
        self.rx.try_recv().ok()
    }
}
