//! NVMe/RDMA, controller side, written once against [`nvmf_common::verbs`].
//!
//! - [`listener`]: one thread per port takes rdma_cm connection requests, validates
//!   the NVMe/RDMA private data (reject with the NVMe/RDMA status otherwise), creates
//!   the queue's receive and response buffers, posts every receive, accepts, and
//!   hands the queue to a poll group.
//! - [`poll_group`]: one thread per group owns its queues, one completion queue and
//!   one registered data arena ([`pool`]). It drives each command: capsule received →
//!   parse → data by in-capsule offset or RDMA READ → execute (backend I/O) → RDMA
//!   WRITE of read data chained before the response SEND (with invalidate when the
//!   host asked) → receive reposted in a batch.
//!
//! The loopback transport is exactly this code on the software verbs provider.
//! (The design put transports in `nvmf-common`; the controller side lives here
//! because it is bound to the target's request state machine, like Linux
//! `drivers/nvme/target/rdma.c`. The shared wire pieces stay in `nvmf_common::wire::rdma`.)

#[cfg(feature = "rdma")]
pub mod devices;
pub mod listener;
pub mod poll_group;
pub mod pool;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tracing::info;

use nvmf_common::verbs::{Device, ProtectionDomain, VerbsError};

use crate::params::PortInfo;
use crate::target::Target;

/// Kinds of work requests, encoded in `wr_id`.
pub(crate) mod wr_kind {
    pub const RECV: u8 = 1;
    pub const SEND: u8 = 2;
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
}

/// Verbs `wr_id` = kind (8 bits) | slot (16); the queue is found by QP number.
#[inline]
pub(crate) fn verbs_wr_id(kind: u8, slot: u16) -> u64 {
    (u64::from(kind) << 48) | u64::from(slot)
}

#[inline]
pub(crate) fn verbs_wr_id_parts(id: u64) -> (u8, u16) {
    ((id >> 48) as u8, id as u16)
}

/// Backend tag = kind (8 bits) | queue generation (16) | queue index (16) | slot (16).
#[inline]
pub(crate) fn wr_id(kind: u8, gen: u16, queue: u16, slot: u16) -> u64 {
    (u64::from(kind) << 48) | (u64::from(gen) << 32) | (u64::from(queue) << 16) | u64::from(slot)
}

#[inline]
pub(crate) fn wr_id_parts(id: u64) -> (u8, u16, u16, u16) {
    (
        (id >> 48) as u8,
        (id >> 32) as u16,
        (id >> 16) as u16,
        id as u16,
    )
}

/// Ports grouped by the verbs device that serves them.
pub type DevicePorts = Vec<(Arc<dyn Device>, Vec<Arc<PortInfo>>)>;

/// The rdma_cm address a port listens on: `traddr:trsvcid`, or `loopback:PORTID`
/// for loopback ports, which have no network address.
pub fn listen_addr(port: &PortInfo) -> String {
    if port.traddr.is_empty() {
        format!("loopback:{}", port.portid)
    } else {
        format!("{}:{}", port.traddr, port.trsvcid)
    }
}

/// A running NVMe/RDMA service: listeners and poll groups. Dropping it stops them.
pub struct RdmaServer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    groups: Vec<poll_group::GroupHandle>,
}

impl RdmaServer {
    /// Starts poll groups and one listener per port on `device`.
    pub fn start(
        target: Arc<Target>,
        device: Arc<dyn Device>,
        ports: &[Arc<PortInfo>],
    ) -> Result<Self, VerbsError> {
        let stop = Arc::new(AtomicBool::new(false));
        let pd: Arc<dyn ProtectionDomain> = device.alloc_pd()?;
        let mut groups = Vec::new();
        let mut threads = Vec::new();
        for i in 0..target.params.poll_groups.max(1) {
            let (handle, thread) =
                poll_group::spawn(i, target.clone(), device.clone(), pd.clone(), stop.clone())?;
            groups.push(handle);
            threads.push(thread);
        }
        for port in ports {
            let l = device.listen(&listen_addr(port))?;
            info!(
                trtype = ?port.trtype, traddr = %port.traddr, trsvcid = %port.trsvcid,
                device = %device.name(), "listening"
            );
            threads.push(listener::spawn(
                l,
                target.clone(),
                port.clone(),
                pd.clone(),
                groups.clone(),
                stop.clone(),
            ));
        }
        Ok(RdmaServer {
            stop,
            threads,
            groups,
        })
    }

    /// Data-path counters summed over the poll groups.
    pub fn counters(&self) -> poll_group::GroupCounters {
        let mut t = poll_group::GroupCounters::default();
        for g in &self.groups {
            let c = g.stats.snapshot();
            t.send_doorbells += c.send_doorbells;
            t.send_wrs += c.send_wrs;
            t.recv_doorbells += c.recv_doorbells;
            t.recv_wrs += c.recv_wrs;
            t.commands += c.commands;
            t.sleeps += c.sleeps;
        }
        t
    }

    /// Stops listeners and poll groups and waits for them.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        for g in &self.groups {
            g.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
