//! Several paths to one subsystem in use at once, as the Linux host's native multipath
//! (issue 14): a controller per path, every path connected, each command sent down the
//! path the I/O policy picks among those whose ANA groups are optimized (non-optimized
//! ones only when no optimized one is left; inaccessible, persistent-loss and changing
//! ones never).
//!
//! Ownership: a [`PathSet`] (shared, behind an `Arc`) owns the controllers, their spare
//! I/O queues, the paths' ANA states and the threads that reconnect lost paths and
//! re-read ANA logs. Each I/O thread owns a [`PathQueues`]: one queue per path and a
//! copy of every command it has in flight, so that a command whose path fails (a lost
//! connection, a command timeout, a path-related status without DNR) is sent again down
//! another path instead of failing. A lost path is reconnected in the background with
//! the reconnect delay and back-off until `ctrl-loss-tmo`; once back (or once its ANA
//! state is optimized again) it rejoins: every thread takes its new queue at its next
//! housekeeping pass. Commands wait only while no path at all is usable, and fail once
//! that has lasted `ctrl-loss-tmo`.

mod queues;
mod set;

use std::fmt;
use std::str::FromStr;

pub use crate::reconnect::path_state;
pub use queues::PathQueues;
pub use set::{PathLink, PathSet};

/// How a command's path is chosen (the Linux host's `iopolicy` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoPolicy {
    /// The first usable path, as long as it stays usable (Linux's default; on one NUMA
    /// node the nearest path is the first).
    #[default]
    Numa,
    /// Each command to the next usable path in turn.
    RoundRobin,
    /// The usable path with the fewest commands outstanding (from every thread).
    QueueDepth,
}

impl IoPolicy {
    pub const NAMES: [&'static str; 3] = ["numa", "round-robin", "queue-depth"];
}

impl FromStr for IoPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<IoPolicy, String> {
        match s {
            "numa" => Ok(IoPolicy::Numa),
            "round-robin" => Ok(IoPolicy::RoundRobin),
            "queue-depth" => Ok(IoPolicy::QueueDepth),
            other => Err(format!(
                "unknown I/O policy {other:?} (numa, round-robin or queue-depth)"
            )),
        }
    }
}

impl fmt::Display for IoPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoPolicy::Numa => "numa",
            IoPolicy::RoundRobin => "round-robin",
            IoPolicy::QueueDepth => "queue-depth",
        })
    }
}

/// How usable a path is for I/O, from its ANA log page and its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum PathState {
    /// Not connected, or a group of the namespace is inaccessible, in persistent loss
    /// or changing here.
    Unusable = 0,
    NonOptimized = 1,
    Optimized = 2,
}

impl PathState {
    fn from_u8(v: u8) -> PathState {
        match v {
            2 => PathState::Optimized,
            1 => PathState::NonOptimized,
            _ => PathState::Unusable,
        }
    }
}
