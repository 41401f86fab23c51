//! Poll-group counters, one set and one naming for every transport.
//!
//! Each counter is written by its poll group's thread only (a relaxed load and store,
//! no read-modify-write on the data path) and read by anyone through
//! [`GroupStats::snapshot`]. Counters that only one transport moves (R2Ts, doorbells)
//! stay 0 on the other; `ctl status` prints them under the same names for both.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Live counters of one poll group, and what its command watch last saw
        /// ([`super::watch`]).
        #[derive(Debug, Default)]
        pub struct GroupStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// Time spent per request state.
            pub states: super::watch::StateTimes,
            /// Queues with outstanding commands and the stuck ones, published by the
            /// group's watch (a few times a second, never per I/O).
            pub watch: parking_lot::Mutex<super::watch::WatchView>,
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

/// Nanoseconds on the monotonic clock (the one [`std::time::Instant`] reads). The data
/// path stamps commands with it: two integers subtract in a few instructions, where
/// `Instant::duration_since` takes dozens (normalising and checking a timespec).
#[inline]
pub fn mono_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    const NS_PER_SEC: i64 = 1_000_000_000;
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => u64::try_from(t.tv_sec() * NS_PER_SEC + t.tv_nsec()).unwrap_or(0),
        // Cannot fail for CLOCK_MONOTONIC on Linux; 0 only makes one latency wrong.
        Err(_) => 0,
    }
}

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
