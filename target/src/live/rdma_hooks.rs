//! [`PortHooks`] for NVMe/RDMA and loopback ports: a port added while running gets a
//! listener on the [`RdmaServer`] of the verbs device its address belongs to (a new
//! server, with its own poll groups, when no port used that device yet); a removed
//! port loses its listener. Queues already connected through a removed port are ended
//! by the live change itself (their controllers are dropped with the port).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::TrType;
use nvmf_verbs::Device;

use super::PortHooks;
use crate::params::PortInfo;
use crate::rdma::poll_group::GroupCounters;
use crate::rdma::RdmaServer;
use crate::runtime::{PortError, PortServer};
use crate::target::Target;

/// Finds the verbs device that serves a port's address.
pub type DeviceResolver = dyn Fn(&Arc<PortInfo>) -> Result<Arc<dyn Device>, String> + Send + Sync;

/// The NVMe/RDMA (and loopback) side of a running target.
pub struct RdmaPorts {
    target: Arc<Target>,
    servers: Mutex<Vec<RdmaServer>>,
    resolve: Box<DeviceResolver>,
}

impl RdmaPorts {
    /// Takes over the servers started for the configured ports; `resolve` finds the
    /// device of a port added later.
    pub fn new(
        target: Arc<Target>,
        servers: Vec<RdmaServer>,
        resolve: Box<DeviceResolver>,
    ) -> RdmaPorts {
        RdmaPorts {
            target,
            servers: Mutex::new(servers),
            resolve,
        }
    }

    /// Data-path counters summed over every server's poll groups.
    pub fn counters(&self) -> GroupCounters {
        let mut t = GroupCounters::default();
        for s in self.servers.lock().iter() {
            t.add(&s.counters());
        }
        t
    }

    /// Graceful stop of every server (see [`RdmaServer::shutdown`]).
    pub fn shutdown(&self) {
        let servers = std::mem::take(&mut *self.servers.lock());
        for s in servers {
            let c = s.shutdown();
            if c.queues != 0 || c.buffers_in_use != 0 {
                tracing::warn!(
                    queues = c.queues,
                    buffers = c.buffers_in_use,
                    "NVMe/RDMA poll groups stopped with queues or buffers still held"
                );
            }
        }
    }
}

impl PortHooks for RdmaPorts {
    fn can_serve(&self, trtype: TrType) -> bool {
        matches!(trtype, TrType::Rdma | TrType::Loopback)
    }

    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        if !self.can_serve(port.trtype) {
            return Err(PortError::Unsupported {
                portid: port.portid,
                trtype: port.trtype.as_str(),
            });
        }
        let device = (self.resolve)(port).map_err(|reason| PortError::Address {
            portid: port.portid,
            reason,
        })?;
        let mut servers = self.servers.lock();
        let name = device.name();
        if let Some(s) = servers.iter().find(|s| s.device().name() == name) {
            return s.add_port(port);
        }
        let s = RdmaServer::start(self.target.clone(), device, std::slice::from_ref(port))?;
        let addr = s.port_addr(port.portid).unwrap_or_default();
        servers.push(s);
        Ok(addr)
    }

    fn remove_port(&self, portid: u16) {
        for s in self.servers.lock().iter() {
            if s.remove_port(portid) {
                return;
            }
        }
    }

    fn port_addr(&self, portid: u16) -> Option<String> {
        self.servers.lock().iter().find_map(|s| s.port_addr(portid))
    }

    fn counters(&self) -> Vec<(&'static str, GroupCounters)> {
        if self.servers.lock().is_empty() {
            return Vec::new();
        }
        // Verbs servers serve rdma and loopback ports alike.
        vec![("rdma", RdmaPorts::counters(self))]
    }
}

/// Every transport's ports: NVMe/TCP and verbs (RDMA, loopback) hooks by trtype.
pub struct TransportPorts {
    pub tcp: Arc<dyn PortHooks>,
    pub rdma: Arc<RdmaPorts>,
}

impl TransportPorts {
    fn for_trtype(&self, trtype: TrType) -> &dyn PortHooks {
        if self.rdma.can_serve(trtype) {
            self.rdma.as_ref()
        } else {
            self.tcp.as_ref()
        }
    }
}

impl PortHooks for TransportPorts {
    fn can_serve(&self, trtype: TrType) -> bool {
        self.for_trtype(trtype).can_serve(trtype)
    }

    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        self.for_trtype(port.trtype).add_port(port)
    }

    fn remove_port(&self, portid: u16) {
        // Port ids are unique across transports: only the one serving it acts.
        self.tcp.remove_port(portid);
        self.rdma.remove_port(portid);
    }

    fn port_addr(&self, portid: u16) -> Option<String> {
        self.tcp
            .port_addr(portid)
            .or_else(|| self.rdma.port_addr(portid))
    }

    fn counters(&self) -> Vec<(&'static str, GroupCounters)> {
        let mut v = self.tcp.counters();
        v.extend(PortHooks::counters(self.rdma.as_ref()));
        v
    }
}
