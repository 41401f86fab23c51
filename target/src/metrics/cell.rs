//! [`IoCell`]: the per-command counters of one (subsystem, namespace, host, port, poll
//! group).
//!
//! Ownership: a cell is written by exactly one poll-group thread (the group is part of
//! its key), so every update is a relaxed load and store of a line no other core
//! writes: no read-modify-write, no lock, no allocation. Any thread may read it at any
//! time ([`IoCell::snapshot`]); a reader sees each counter whole (64-bit atomics), and
//! the counters of one command may appear a moment apart, which a scrape tolerates.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

// The single-writer counter helpers: here, below both the cells and the poll groups'
// counters (runtime/stats.rs re-exports them), so neither imports the other for them.

/// Adds `n` to a counter owned by the calling poll group.
#[inline]
pub fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Sets a gauge owned by the calling poll group.
#[inline]
pub fn set(a: &AtomicU64, v: u64) {
    a.store(v, Ordering::Relaxed);
}

/// Opcode classes: NVM Read, NVM Write, everything else (admin, fabrics, flush...).
pub const CLASS_READ: usize = 0;
pub const CLASS_WRITE: usize = 1;
pub const CLASS_OTHER: usize = 2;
pub const CLASSES: usize = 3;
/// Label values of the classes, in index order.
pub const CLASS_NAMES: [&str; CLASSES] = ["read", "write", "other"];

/// Latency buckets: bucket `i < LAT_FINITE` holds latencies below `2^i` µs (so the
/// last finite bound is 2^20 µs, about one second); bucket `LAT_FINITE` is +Inf.
/// Powers of two make the bucket a `leading_zeros`, not a search.
pub const LAT_FINITE: usize = 21;
pub const LAT_BUCKETS: usize = LAT_FINITE + 1;
const NS_PER_US: u64 = 1000;

/// Distinct error statuses one cell keeps apart; more land in the overflow entry.
pub const ERROR_SLOTS: usize = 15;
/// The status key of the overflow entry ("other statuses").
pub const ERROR_OVERFLOW: u16 = u16::MAX;

/// Upper bound of latency bucket `i`, in seconds (+Inf for the last).
pub fn bucket_bound_seconds(i: usize) -> f64 {
    if i >= LAT_FINITE {
        f64::INFINITY
    } else {
        (1u64 << i) as f64 * 1e-6
    }
}

/// The latency bucket of `ns`.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    let us = ns / NS_PER_US;
    ((u64::BITS - us.leading_zeros()) as usize).min(LAT_FINITE)
}

/// What a cell is about. Strings are copied once, when the cell is made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CellKey {
    pub subsystem: String,
    /// 0: commands that name no namespace (admin, fabrics, invalid NSIDs).
    pub nsid: u32,
    pub host: String,
    pub portid: u16,
    /// The poll group (its thread name).
    pub group: String,
}

#[derive(Default)]
struct ClassCounters {
    commands: AtomicU64,
    bytes: AtomicU64,
    latency_ns: AtomicU64,
    buckets: [AtomicU64; LAT_BUCKETS],
}

#[derive(Default)]
struct ErrorSlot {
    /// `(sct << 8 | sc) + 1`; 0 while the slot is unused. Written once, before its
    /// first count.
    status: AtomicU32,
    count: AtomicU64,
}

/// The counters of one key. Cache-line aligned so two groups' cells never share one.
#[repr(align(64))]
pub struct IoCell {
    pub key: CellKey,
    classes: [ClassCounters; CLASSES],
    errors: [ErrorSlot; ERROR_SLOTS + 1],
}

/// One opcode class of a [`CellSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSnapshot {
    pub commands: u64,
    pub bytes: u64,
    /// Sum of latencies (ns); with `commands`, the mean; over time, the queue depth.
    pub latency_ns: u64,
    /// Per bucket (not cumulative), [`LAT_BUCKETS`] entries.
    pub buckets: Vec<u64>,
}

impl ClassSnapshot {
    pub fn add(&mut self, o: &ClassSnapshot) {
        self.commands += o.commands;
        self.bytes += o.bytes;
        self.latency_ns += o.latency_ns;
        if self.buckets.len() < o.buckets.len() {
            self.buckets.resize(o.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
    }
}

/// A copy of an [`IoCell`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellSnapshot {
    pub key: CellKey,
    /// Read, write, other.
    pub classes: Vec<ClassSnapshot>,
    /// (status: `sct << 8 | sc`, or [`ERROR_OVERFLOW`]; count).
    pub errors: Vec<(u16, u64)>,
}

impl IoCell {
    pub fn new(key: CellKey) -> IoCell {
        IoCell {
            key,
            classes: Default::default(),
            errors: Default::default(),
        }
    }

    /// Accounts one finished command. Called only by the owning poll group, once per
    /// command: kept inline.
    #[inline(always)]
    pub fn record(&self, class: usize, bytes: u64, latency_ns: u64, error: Option<u16>) {
        let Some(c) = self.classes.get(class) else {
            return;
        };
        bump(&c.commands, 1);
        bump(&c.bytes, bytes);
        bump(&c.latency_ns, latency_ns);
        if let Some(b) = c.buckets.get(bucket_of(latency_ns)) {
            bump(b, 1);
        }
        if let Some(st) = error {
            self.record_error(st);
        }
    }

    /// Errors are rare: a short scan of the slots, claiming a free one on first sight.
    #[cold]
    fn record_error(&self, status: u16) {
        let want = u32::from(status) + 1;
        let (slots, overflow) = self.errors.split_at(ERROR_SLOTS);
        for s in slots {
            match s.status.load(Ordering::Relaxed) {
                0 => {
                    // Single writer: nobody else can claim it meanwhile. Release so a
                    // reader that sees the status sees a count that belongs to it.
                    s.status.store(want, Ordering::Release);
                    return bump(&s.count, 1);
                }
                v if v == want => return bump(&s.count, 1),
                _ => {}
            }
        }
        if let Some(o) = overflow.first() {
            bump(&o.count, 1);
        }
    }

    /// Commands and bytes of class `class` so far (zeros for an unknown class).
    pub fn totals(&self, class: usize) -> (u64, u64) {
        self.classes.get(class).map_or((0, 0), |c| {
            (
                c.commands.load(Ordering::Relaxed),
                c.bytes.load(Ordering::Relaxed),
            )
        })
    }

    pub fn snapshot(&self) -> CellSnapshot {
        let classes = self
            .classes
            .iter()
            .map(|c| ClassSnapshot {
                commands: c.commands.load(Ordering::Relaxed),
                bytes: c.bytes.load(Ordering::Relaxed),
                latency_ns: c.latency_ns.load(Ordering::Relaxed),
                buckets: c
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
            })
            .collect();
        let mut errors = Vec::new();
        for (i, s) in self.errors.iter().enumerate() {
            let count = s.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let status = if i >= ERROR_SLOTS {
                ERROR_OVERFLOW
            } else {
                match s.status.load(Ordering::Acquire) {
                    0 => continue,
                    v => (v - 1) as u16,
                }
            };
            errors.push((status, count));
        }
        CellSnapshot {
            key: self.key.clone(),
            classes,
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CellKey {
        CellKey {
            subsystem: "s".into(),
            nsid: 1,
            host: "h".into(),
            portid: 1,
            group: "g".into(),
        }
    }

    #[test]
    fn buckets_are_powers_of_two_microseconds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(999), 0);
        assert_eq!(bucket_of(1_000), 1);
        assert_eq!(bucket_of(3_999), 2);
        assert_eq!(bucket_of(4_000), 3);
        assert_eq!(bucket_of(u64::MAX), LAT_FINITE);
        assert!((bucket_bound_seconds(3) - 8e-6).abs() < 1e-12);
        assert!(bucket_bound_seconds(LAT_FINITE).is_infinite());
    }

    #[test]
    fn records_and_overflows_errors() {
        let c = IoCell::new(key());
        c.record(CLASS_READ, 4096, 5_000, None);
        c.record(CLASS_WRITE, 512, 1, Some(0x0002));
        for st in 0..(ERROR_SLOTS as u16 + 3) {
            c.record(CLASS_OTHER, 0, 0, Some(0x100 + st));
        }
        assert_eq!(c.totals(CLASS_READ), (1, 4096));
        // Failed commands count, their bytes do not.
        assert_eq!(c.totals(CLASS_WRITE), (1, 512));
        assert_eq!(c.totals(CLASSES), (0, 0));
        let s = c.snapshot();
        assert_eq!(s.classes[CLASS_READ].commands, 1);
        assert_eq!(s.classes[CLASS_READ].bytes, 4096);
        assert_eq!(s.classes[CLASS_READ].buckets[bucket_of(5_000)], 1);
        assert_eq!(s.classes[CLASS_OTHER].commands, ERROR_SLOTS as u64 + 3);
        assert_eq!(s.errors.first(), Some(&(0x0002, 1)));
        assert_eq!(s.errors.last(), Some(&(ERROR_OVERFLOW, 4)));
        assert_eq!(
            s.errors.iter().map(|e| e.1).sum::<u64>(),
            ERROR_SLOTS as u64 + 4
        );
    }
}
