//! A fabric server's poll groups as one thing: started together, summed for counters,
//! and stopped together (flag, wake, join), so each server only adds its listeners.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::mailbox::GroupHandle;
use super::GroupCounters;

/// The running poll groups of one server. Dropping it stops them.
pub struct PollGroups<N, S> {
    stop: Arc<AtomicBool>,
    handles: Vec<GroupHandle<N, S>>,
    threads: Vec<JoinHandle<()>>,
}

impl<N, S> PollGroups<N, S> {
    /// Starts `n` groups with `spawn(index, stop flag)`. On error the groups already
    /// started are stopped.
    pub fn start<E>(
        n: usize,
        mut spawn: impl FnMut(usize, Arc<AtomicBool>) -> Result<(GroupHandle<N, S>, JoinHandle<()>), E>,
    ) -> Result<Self, E> {
        let mut g = PollGroups {
            stop: Arc::new(AtomicBool::new(false)),
            handles: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let (h, t) = spawn(i, g.stop.clone())?;
            g.handles.push(h);
            g.threads.push(t);
        }
        Ok(g)
    }

    /// The groups' handles, for listeners to hand queues to.
    pub fn handles(&self) -> &[GroupHandle<N, S>] {
        &self.handles
    }

    /// Counters summed over the groups.
    pub fn counters(&self) -> GroupCounters {
        let mut t = GroupCounters::default();
        for g in &self.handles {
            t.add(&g.stats.snapshot());
        }
        t
    }

    /// Each group's counters, in group order (placement checks).
    pub fn per_group(&self) -> Vec<GroupCounters> {
        self.handles.iter().map(|g| g.stats.snapshot()).collect()
    }

    /// Stops every group gracefully (each drains, closes its queues and waits for its
    /// I/O) and waits for the threads. Call after the listeners have stopped.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for g in &self.handles {
            g.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl<N, S> Drop for PollGroups<N, S> {
    fn drop(&mut self) {
        self.stop();
    }
}
