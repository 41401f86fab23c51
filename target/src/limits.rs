//! The open-file limit. Every namespace keeps descriptors open for as long as it is
//! served: its backend, and in each poll group that has run I/O on it an io_uring
//! instance; every queue is a socket. The default soft limit (1,024) stops a target
//! with a few hundred namespaces, so it is raised to the hard limit at start, and
//! `check-config` compares what a configuration needs with the hard limit.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::config::Config;

/// Descriptors kept aside for sockets (queues), epoll, eventfds, the admin socket and
/// logs, on top of the namespaces' own.
pub const RESERVED_DESCRIPTORS: u64 = 1024;

/// Raises the soft open-file limit to the hard one; returns (soft, hard) after.
pub fn raise_nofile() -> Result<(u64, u64), String> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| format!("setrlimit: {e}"))?;
    }
    Ok((hard.max(soft), hard))
}

/// The hard open-file limit.
pub fn hard_nofile() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(_, h)| h)
}

/// About how many descriptors `cfg` keeps open when every namespace has seen I/O on
/// every poll group.
pub fn descriptors_needed(cfg: &Config) -> u64 {
    let namespaces: u64 = cfg
        .subsystems
        .iter()
        .map(|s| s.namespaces.len() as u64)
        .sum();
    let per_ns = 1 + cfg.transport.poll_groups as u64;
    namespaces * per_ns + RESERVED_DESCRIPTORS
}
