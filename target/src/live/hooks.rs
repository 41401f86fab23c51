//! [`PortHooks`] for NVMe/TCP: ports added while running get a listener on the
//! target's TCP server (started on first use), removed ones lose theirs.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::TrType;

use super::PortHooks;
use crate::params::PortInfo;
use crate::runtime::{PortError, PortServer};
use crate::target::Target;
use crate::tcp::{GroupCounters, TcpOptions, TcpServer};

/// The NVMe/TCP side of a running target.
pub struct TcpPorts {
    target: Arc<Target>,
    opts: TcpOptions,
    server: Mutex<Option<TcpServer>>,
}

impl TcpPorts {
    /// Serves the tcp ports of `ports` (none: the server starts with the first port
    /// added later).
    pub fn start(
        target: Arc<Target>,
        ports: &[Arc<PortInfo>],
        opts: TcpOptions,
    ) -> Result<TcpPorts, PortError> {
        let tcp: Vec<_> = ports
            .iter()
            .filter(|p| p.trtype == TrType::Tcp)
            .cloned()
            .collect();
        let server = if tcp.is_empty() {
            None
        } else {
            Some(TcpServer::start_with(target.clone(), &tcp, opts.clone())?)
        };
        Ok(TcpPorts {
            target,
            opts,
            server: Mutex::new(server),
        })
    }

    /// Bound addresses of every tcp port.
    pub fn local_addrs(&self) -> Vec<std::net::SocketAddr> {
        self.server
            .lock()
            .as_ref()
            .map(TcpServer::local_addrs)
            .unwrap_or_default()
    }

    /// Data-path counters of the poll groups.
    pub fn counters(&self) -> GroupCounters {
        self.server
            .lock()
            .as_ref()
            .map(PortServer::counters)
            .unwrap_or_default()
    }

    /// Stops listening and ends every connection (backend I/O in flight is waited for).
    pub fn shutdown(&self) {
        if let Some(s) = self.server.lock().take() {
            let _ = s.shutdown();
        }
    }
}

impl PortHooks for TcpPorts {
    fn can_serve(&self, trtype: TrType) -> bool {
        trtype == TrType::Tcp
    }

    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        if port.trtype != TrType::Tcp {
            return Err(PortError::Unsupported {
                portid: port.portid,
                trtype: port.trtype.as_str(),
            });
        }
        let mut g = self.server.lock();
        match g.as_ref() {
            Some(s) => s.add_port(port),
            None => {
                let s = TcpServer::start_with(
                    self.target.clone(),
                    std::slice::from_ref(port),
                    self.opts.clone(),
                )?;
                let addr = s.port_addr(port.portid).unwrap_or_default();
                *g = Some(s);
                Ok(addr)
            }
        }
    }

    fn remove_port(&self, portid: u16) {
        if let Some(s) = self.server.lock().as_ref() {
            s.remove_port(portid);
        }
    }

    fn port_addr(&self, portid: u16) -> Option<String> {
        self.server
            .lock()
            .as_ref()
            .and_then(|s| s.port_addr(portid))
    }

    fn counters(&self) -> Vec<(&'static str, GroupCounters)> {
        self.server
            .lock()
            .as_ref()
            .map(|s| vec![(TrType::Tcp.as_str(), s.counters())])
            .unwrap_or_default()
    }
}
