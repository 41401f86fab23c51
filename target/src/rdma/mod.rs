//! NVMe/RDMA, controller side, written once against [`nvmf_verbs`].
//!
//! - [`listener`]: one thread per port takes rdma_cm connection requests, validates
//!   the NVMe/RDMA private data (reject with the NVMe/RDMA status otherwise), creates
//!   the queue's response buffers and, when its group has no shared receive queue,
//!   its receive buffers (posting every receive), accepts, and hands the queue to a
//!   poll group.
//! - [`poll_group`]: one thread per group owns its queues, one completion queue and
//!   one registered data arena ([`pool`]), and, unless the config's `rdma.srq` is off
//!   or the device cannot, one shared receive queue ([`srq`]) for every queue's
//!   command capsules. It drives each command: capsule received →
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
pub mod srq;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tracing::info;

use nvmf_verbs::{Device, ProtectionDomain, VerbsError};

use crate::params::PortInfo;
use crate::runtime::{PollGroups, PortError, PortServer};
use crate::target::Target;

/// Kinds of work requests, encoded in `wr_id`.
pub(crate) mod wr_kind {
    pub const RECV: u8 = 1;
    pub const SEND: u8 = 2;
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
    /// A receive of the group's shared receive queue; the slot field is its buffer.
    pub const SRQ_RECV: u8 = 5;
}

/// Bytes of one command capsule receive buffer: the SQE and the in-capsule data.
pub(crate) fn capsule_size(target: &Target) -> usize {
    nvmf_common::wire::sqe::SQE_LEN + target.params.in_capsule_data_size as usize
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
    groups: PollGroups<poll_group::NewQueue, poll_group::GroupShared>,
    target: Arc<Target>,
    device: Arc<dyn Device>,
    pd: Arc<dyn ProtectionDomain>,
    /// One listener per port, added and removed while running.
    listeners: Mutex<Vec<PortListener>>,
}

/// The listener thread of one port.
struct PortListener {
    portid: u16,
    addr: String,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl PortListener {
    /// Stops accepting on the port and waits for the thread (the rdma_cm listener is
    /// released with it, so the address can be listened on again).
    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
    }
}

impl RdmaServer {
    /// Starts poll groups and one listener per port on `device`.
    pub fn start(
        target: Arc<Target>,
        device: Arc<dyn Device>,
        ports: &[Arc<PortInfo>],
    ) -> Result<Self, PortError> {
        let failed = |e: VerbsError| PortError::Start {
            fabric: "NVMe/RDMA",
            reason: e.to_string(),
        };
        let pd: Arc<dyn ProtectionDomain> = device.alloc_pd().map_err(failed)?;
        let groups = PollGroups::start(target.params.poll_groups, |i, stop| {
            poll_group::spawn(i, target.clone(), device.clone(), pd.clone(), stop)
        })
        .map_err(failed)?;
        let server = RdmaServer {
            groups,
            target: target.clone(),
            device: device.clone(),
            pd,
            listeners: Mutex::new(Vec::new()),
        };
        for port in ports {
            server.add_port(port)?;
        }
        Ok(server)
    }

    /// The verbs device the server runs on.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// Whether the server listens on no port.
    pub fn is_idle(&self) -> bool {
        self.listeners.lock().is_empty()
    }

    /// Graceful stop: no new connections (listeners first), then each poll group stops
    /// taking commands, lets those in flight finish and answers them (within a bound),
    /// closes its queues and waits for backend I/O; waits for every thread. Returns
    /// the final counters (`queues` and `buffers_in_use` are 0 unless something leaked).
    pub fn shutdown(mut self) -> poll_group::GroupCounters {
        self.stop_threads();
        PortServer::counters(&self)
    }

    fn stop_threads(&mut self) {
        for l in self.listeners.get_mut().drain(..) {
            l.stop();
        }
        self.groups.stop();
    }
}

impl PortServer for RdmaServer {
    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        let mut ls = self.listeners.lock();
        let addr = listen_addr(port);
        if ls.iter().any(|l| l.portid == port.portid) {
            return Err(PortError::AlreadyListening(port.portid));
        }
        let l = self.device.listen(&addr).map_err(|e| PortError::Listen {
            portid: port.portid,
            addr: addr.clone(),
            source: std::io::Error::other(e),
        })?;
        info!(
            trtype = ?port.trtype, traddr = %port.traddr, trsvcid = %port.trsvcid,
            device = %self.device.name(), "listening"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let thread = listener::spawn(
            l,
            self.target.clone(),
            port.clone(),
            self.pd.clone(),
            self.groups.handles().to_vec(),
            stop.clone(),
        );
        ls.push(PortListener {
            portid: port.portid,
            addr: addr.clone(),
            stop,
            thread,
        });
        Ok(addr)
    }

    fn remove_port(&self, portid: u16) -> bool {
        let l = {
            let mut ls = self.listeners.lock();
            let i = ls.iter().position(|l| l.portid == portid);
            i.map(|i| ls.remove(i))
        };
        match l {
            Some(l) => {
                l.stop();
                info!(portid, "stopped listening");
                true
            }
            None => false,
        }
    }

    fn port_addr(&self, portid: u16) -> Option<String> {
        self.listeners
            .lock()
            .iter()
            .find(|l| l.portid == portid)
            .map(|l| l.addr.clone())
    }

    fn counters(&self) -> poll_group::GroupCounters {
        self.groups.counters()
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}
