//! Ports, one API for every fabric: a server listens on ports, stops listening, reports
//! its poll groups' counters and shuts down gracefully, and every failure is a
//! [`PortError`]. The live-change hooks and the binary drive NVMe/TCP and NVMe/RDMA
//! servers through this alone.

use std::sync::Arc;

use super::GroupCounters;
use crate::params::PortInfo;

/// Why a port could not be served.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The port id is already served by this server.
    #[error("port {0} is already listening")]
    AlreadyListening(u16),
    /// `traddr`/`trsvcid` do not name an address this fabric can listen on.
    #[error("port {portid}: {reason}")]
    Address { portid: u16, reason: String },
    /// The address is valid but cannot be listened on (in use, no such device...).
    #[error("port {portid}: cannot listen on {addr}: {source}")]
    Listen {
        portid: u16,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The server cannot take the port (its threads are gone, resources exhausted).
    #[error("port {portid}: {reason}")]
    Server { portid: u16, reason: String },
    /// The server itself could not start (threads, memory, verbs resources).
    #[error("cannot start the {fabric} server: {reason}")]
    Start {
        fabric: &'static str,
        reason: String,
    },
    /// The fabric cannot serve ports of this transport type.
    #[error("port {portid}: {trtype} ports are not served here")]
    Unsupported { portid: u16, trtype: &'static str },
}

/// A running fabric server: its ports and poll groups.
pub trait PortServer: Send + Sync {
    /// Starts listening on another port while running; returns the address it listens
    /// on. Nothing changes when it fails.
    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError>;
    /// Stops listening on port `portid` (queues already connected stay; the caller ends
    /// their controllers). Returns whether the port was served.
    fn remove_port(&self, portid: u16) -> bool;
    /// The address port `portid` listens on.
    fn port_addr(&self, portid: u16) -> Option<String>;
    /// Poll-group counters summed over the server's groups.
    fn counters(&self) -> GroupCounters;
}
