//! Poll-group counters, one set and one naming for every transport, and what the
//! group's command watch ([`super::watch`]) publishes: time per request state and the
//! outstanding and stuck commands.
//!
//! Each counter is written by its poll group's thread only (a relaxed load and store,
//! no read-modify-write on the data path) and read by anyone through
//! [`GroupStats::snapshot`]. Counters that only one transport moves (R2Ts, doorbells)
//! stay 0 on the other; `ctl status` prints them under the same names for both.
//!
//! These are data only: the metrics registry holds a group's [`GroupStats`], and the
//! target holds the registry, so this file imports nothing of the runtime's logic.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::metrics::cell::{bucket_of, LAT_BUCKETS};
// The single-writer counter helpers live with the metrics cells, which use them
// too; the transports name them here.
pub use crate::metrics::cell::{bump, set};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Live counters of one poll group, and what its command watch last saw
        /// ([`super::watch`]).
        #[derive(Debug, Default)]
        pub struct GroupStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// Time spent per request state.
            pub states: StateTimes,
            /// Queues with outstanding commands and the stuck ones, published by the
            /// group's watch (a few times a second, never per I/O).
            pub watch: parking_lot::Mutex<WatchView>,
        }

        /// A snapshot of [`GroupStats`] (or the sum over several groups).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct GroupCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl GroupStats {
            pub fn snapshot(&self) -> GroupCounters {
                GroupCounters {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }

        impl GroupCounters {
            /// Adds `o` field by field (the maximum, for ages: [`MAX_FIELDS`]).
            pub fn add(&mut self, o: &GroupCounters) {
                $(
                    self.$name = if MAX_FIELDS.contains(&stringify!($name)) {
                        self.$name.max(o.$name)
                    } else {
                        self.$name + o.$name
                    };
                )*
            }

            /// Every counter by name, in declaration order (for `ctl status`).
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Queues (NVMe/TCP connections, NVMe/RDMA queue pairs) handed to the group.
    accepted,
    /// Queues that ended.
    closed,
    /// Queues the group holds, including ended ones still waiting for their I/O (gauge).
    queues,
    /// Command capsules received.
    commands,
    /// Responses sent.
    responses,
    /// Data buffers taken from the pool and not yet returned (gauge).
    buffers_in_use,
    /// Times the thread blocked waiting for work.
    sleeps,
    /// Nanoseconds spent in loop passes that found work (CPU busy).
    busy_ns,
    /// Nanoseconds spent in passes that found none, asleep or spinning (CPU idle).
    idle_ns,
    /// Commands answered after the shutdown began (they were already executing).
    drained,
    /// Capsules that arrived after shutdown began and were not executed.
    refused_at_shutdown,
    /// Connections ended by a protocol error (NVMe/TCP termination requests).
    protocol_errors,
    /// Data digest errors (the command completes with Transient Transport Error).
    digest_errors,
    /// NVMe/TCP: R2T PDUs sent.
    r2ts,
    /// NVMe/TCP: H2CData PDUs received.
    h2c_pdus,
    /// NVMe/TCP: C2HData PDUs sent.
    c2h_pdus,
    /// NVMe/TCP: `read` system calls on sockets.
    socket_reads,
    /// NVMe/TCP: `writev` system calls on sockets.
    socket_writes,
    /// NVMe/RDMA: `post_send` calls (doorbells).
    send_doorbells,
    /// NVMe/RDMA: send work requests posted.
    send_wrs,
    /// NVMe/RDMA: `post_recv` calls (doorbells).
    recv_doorbells,
    /// NVMe/RDMA: receives reposted.
    recv_wrs,
    /// NVMe/RDMA: bytes of command-capsule receive buffers registered (a gauge): the
    /// group's shared receive queue, or the sum over its queues without one.
    recv_buffer_bytes,
    /// NVMe/RDMA: receives posted to the group's shared receive queue (a gauge;
    /// `rdma.srq_depth` when no capsule is being served and none is lost).
    srq_receives_posted,
    /// Commands found outstanding longer than `transport.stuck_command_ms` (each
    /// counted once).
    stuck_commands,
    /// Age in ms of the oldest command outstanding now (a gauge; AERs not counted).
    oldest_command_ms,
    /// The oldest age in ms any command reached while outstanding (a high-water mark).
    longest_command_ms,
}

/// Counters that combine by maximum, not sum, over groups (ages).
pub const MAX_FIELDS: [&str; 2] = ["oldest_command_ms", "longest_command_ms"];

/// The clock [`mono_ns`] reads, calibrated on its first read (under a millisecond here,
/// at most a few hundred): a poll group's creation, before its thread serves anything.
static CLOCK: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();

/// Nanoseconds on the data path's monotonic clock, from an arbitrary origin. The data
/// path stamps commands with it: two integers subtract in a few instructions, where
/// `Instant::duration_since` takes dozens (normalising and checking a timespec).
///
/// It is the TSC scaled to nanoseconds (`quanta`, calibrated against the monotonic clock
/// at start), about 10 ns a read against 34 for `clock_gettime` through the vDSO on this
/// project's machines: one read per completed command is a measurable share of a 4 KiB
/// command at QD 128 (docs/bench-tcp.md). Without an invariant TSC it is the monotonic
/// clock itself. Only differences of its values mean anything: they are never compared
/// with [`std::time::Instant`] or the wall clock.
#[inline]
pub fn mono_ns() -> u64 {
    let clock = CLOCK.get_or_init(quanta::Clock::new);
    clock.delta_as_nanos(0, clock.raw())
}

/// The states whose time is measured, in [`STATE_NAMES`] order.
pub const WATCHED: usize = 4;
/// Label values of the measured states.
pub const STATE_NAMES: [&str; WATCHED] = [
    "need_buffer",
    "transferring_host_to_controller",
    "executing",
    "transferring_controller_to_host",
];

/// Time spent per request state: one latency histogram (the metrics' power-of-two
/// microsecond buckets) and a sum per measured state. Written by its group only.
#[derive(Debug, Default)]
pub struct StateTimes {
    buckets: [[AtomicU64; LAT_BUCKETS]; WATCHED],
    sum_ns: [AtomicU64; WATCHED],
}

/// A snapshot of one state's histogram.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHistogram {
    pub state: String,
    /// Per bucket (not cumulative).
    pub buckets: Vec<u64>,
    pub sum_ns: u64,
}

impl StateTimes {
    /// `ns` spent in the measured state `i` (its index in [`STATE_NAMES`]; the watch
    /// maps request states to it, so this file needs no request type).
    #[inline]
    pub fn record(&self, i: usize, ns: u64) {
        let Some(b) = self.buckets.get(i) else {
            return;
        };
        // Most transitions happen in the pass the state began (the pass clock has not
        // moved): the first bucket, nothing to add to the sum.
        if ns == 0 {
            if let Some(b0) = b.first() {
                bump(b0, 1);
            }
            return;
        }
        if let (Some(b), Some(s)) = (b.get(bucket_of(ns)), self.sum_ns.get(i)) {
            bump(b, 1);
            bump(s, ns);
        }
    }

    pub fn snapshot(&self) -> Vec<StateHistogram> {
        STATE_NAMES
            .iter()
            .zip(self.buckets.iter().zip(&self.sum_ns))
            .map(|(name, (b, s))| StateHistogram {
                state: (*name).to_string(),
                buckets: b.iter().map(|x| x.load(Ordering::Relaxed)).collect(),
                sum_ns: s.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// One queue with outstanding commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueAge {
    pub group: String,
    pub subsystem: String,
    pub host: String,
    pub cntlid: u16,
    pub qid: u16,
    /// The queue ended; commands of it still wait for the backend.
    pub ended: bool,
    pub outstanding: usize,
    pub oldest_ms: u64,
}

/// A command outstanding longer than the bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StuckCommand {
    pub group: String,
    pub subsystem: String,
    pub host: String,
    pub cntlid: u16,
    pub qid: u16,
    pub cid: u16,
    pub opcode: u8,
    pub nsid: u32,
    pub state: String,
    /// Time in its current state.
    pub state_ms: u64,
    /// Time since its capsule arrived.
    pub age_ms: u64,
    pub waiting_for: String,
}

/// What a group's last sweep saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchView {
    pub queues: Vec<QueueAge>,
    pub stuck: Vec<StuckCommand>,
}

impl std::fmt::Display for StuckCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "subsystem {} host {} cntlid {} qid {} cid {:#06x} opcode {:#04x} nsid {}: {} for {} ms (outstanding {} ms), waiting for {}",
            self.subsystem,
            self.host,
            self.cntlid,
            self.qid,
            self.cid,
            self.opcode,
            self.nsid,
            self.state,
            self.state_ms,
            self.age_ms,
            self.waiting_for
        )
    }
}

#[cfg(test)]
mod tests {
    use super::mono_ns;
    use std::time::{Duration, Instant};

    /// The TSC clock counts nanoseconds: over a sleep it agrees with the monotonic clock
    /// read around it (calibration error is parts per million; the bounds allow 1%).
    #[test]
    fn mono_ns_counts_nanoseconds() {
        const SLEEP: Duration = Duration::from_millis(50);
        let _ = mono_ns();
        let outer_start = Instant::now();
        let start = mono_ns();
        std::thread::sleep(SLEEP);
        let end = mono_ns();
        let outer = u64::try_from(outer_start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let inner = end - start;
        let sleep_ns = u64::try_from(SLEEP.as_nanos()).unwrap_or(u64::MAX);
        assert!(
            inner >= sleep_ns - sleep_ns / 100,
            "{inner} ns over a {SLEEP:?} sleep"
        );
        assert!(inner <= outer + outer / 100, "{inner} ns within {outer} ns");
    }
}
