//! Benchmark counters, sharded per thread so the data path never bounces one cache line
//! between cores.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

const SHARDS: usize = 16;

/// A snapshot of a [`super::SoftDevice`]'s activity (sums over all threads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoftCounters {
    /// `post_send` calls (doorbells), including rejected ones.
    pub post_send_calls: u64,
    /// `post_recv` calls (doorbells), including rejected ones.
    pub post_recv_calls: u64,
    /// Send work requests accepted.
    pub send_wrs: u64,
    /// Receive work requests accepted.
    pub recv_wrs: u64,
    /// Completions pushed to any CQ of the device (successes, errors and flushes).
    pub completions: u64,
    /// Completions pushed while their CQ already held `entries` completions.
    pub cq_overflows: u64,
}

/// One thread group's counters, on its own cache lines.
#[derive(Default)]
#[repr(align(128))]
pub(super) struct Shard {
    pub(super) post_send_calls: AtomicU64,
    pub(super) post_recv_calls: AtomicU64,
    pub(super) send_wrs: AtomicU64,
    pub(super) recv_wrs: AtomicU64,
    pub(super) completions: AtomicU64,
    pub(super) cq_overflows: AtomicU64,
}

impl Shard {
    fn all(&self) -> [&AtomicU64; 6] {
        [
            &self.post_send_calls,
            &self.post_recv_calls,
            &self.send_wrs,
            &self.recv_wrs,
            &self.completions,
            &self.cq_overflows,
        ]
    }
}

/// Adds `n` to a counter of the calling thread's shard. A load and a store rather than
/// a locked read-modify-write: shards are handed out round-robin to threads, so a shard
/// has one writer unless more than 16 threads use one device at the same time (then
/// an increment may rarely be lost, which benchmark counters can afford).
pub(super) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

pub(super) struct Counters {
    shards: [Shard; SHARDS],
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD_INDEX: usize = NEXT_SHARD.fetch_add(1, Relaxed) % SHARDS;
}

impl Counters {
    pub(super) fn new() -> Self {
        Counters {
            shards: std::array::from_fn(|_| Shard::default()),
        }
    }

    /// The calling thread's shard.
    pub(super) fn shard(&self) -> &Shard {
        let i = SHARD_INDEX.try_with(|i| *i).unwrap_or(0);
        &self.shards[i % SHARDS]
    }

    pub(super) fn snapshot(&self) -> SoftCounters {
        let mut sum = [0u64; 6];
        for shard in &self.shards {
            for (acc, c) in sum.iter_mut().zip(shard.all()) {
                *acc = acc.wrapping_add(c.load(Relaxed));
            }
        }
        let [post_send_calls, post_recv_calls, send_wrs, recv_wrs, completions, cq_overflows] = sum;
        SoftCounters {
            post_send_calls,
            post_recv_calls,
            send_wrs,
            recv_wrs,
            completions,
            cq_overflows,
        }
    }

    pub(super) fn reset(&self) {
        for shard in &self.shards {
            for c in shard.all() {
                c.store(0, Relaxed);
            }
        }
    }
}
