//! The state of one poll group's NVMe/TCP transport, apart from the code that runs
//! it: the poll loop ([`super::poll_group`]), the PDU handlers ([`super::conn`]) and
//! in-place receive ([`super::direct`]) all implement methods on [`TcpTransport`], so
//! the type lives below all three (none of them imports another for it).

use std::net::TcpStream;
use std::time::Instant;

use nvmf_common::transport::tcp::ControllerConfig;

use super::hot::HotSet;
use super::TcpOptions;

/// The NVMe/TCP side of one poll group.
pub struct TcpTransport {
    pub(super) index: usize,
    pub(super) cfg: ControllerConfig,
    pub(super) opts: TcpOptions,
    /// Connections not closed (for the choice between reading every socket and
    /// asking epoll which ones have data).
    pub(super) live: usize,
    /// Connections with PDUs to write.
    pub(super) dirty: Vec<u16>,
    /// Sockets of closed connections, drained until the host closes or a deadline.
    pub(super) closing: Vec<(TcpStream, Instant)>,
    pub(super) rxbuf: Vec<u8>,
    /// Passes of `read_all` (for reading admin queues less often).
    pub(super) spins: u32,
    /// With many connections: the busy ones read directly.
    pub(super) hot: HotSet,
}
