//! `rdma:`: tuning of the NVMe/RDMA transport (rdma and loopback ports; every field
//! optional).
//!
//! Shared receive queues: with `srq` (the default, as SPDK's), each poll group posts
//! its command-capsule receives once to one shared receive queue per device, so the
//! receive memory of a group is `srq_depth` capsules however many queues it serves
//! (nvmet's `use_srq`/`srq_size`, SPDK's `no_srq`/`max_srq_depth`). Without it, or when
//! the device cannot make an SRQ, each queue posts one receive per host SQ entry.

use serde::{Deserialize, Serialize};

/// NVMe/RDMA tuning (`rdma:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RdmaConfig {
    /// One shared receive queue per poll group (per device); false: receives per queue.
    pub srq: bool,
    /// Receives (command capsules) of each poll group's SRQ.
    pub srq_depth: u32,
}

/// Default `srq_depth` (nvmet's default `srq_size`).
pub const RDMA_DEFAULT_SRQ_DEPTH: u32 = 1024;
/// Bounds of `srq_depth`: at least a full admin queue's worth, at most what a
/// receive's 16-bit buffer index names.
pub const RDMA_SRQ_DEPTH_RANGE: (u32, u32) = (32, 32768);

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            srq: true,
            srq_depth: RDMA_DEFAULT_SRQ_DEPTH,
        }
    }
}
