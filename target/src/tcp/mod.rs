//! NVMe/TCP, controller side, around the sans-IO framer of
//! [`nvmf_common::transport::tcp`].
//!
//! - [`TcpServer`]: one listener thread accepts connections on every tcp port
//!   (non-blocking std sockets, `TCP_NODELAY`) and hands each to the least loaded
//!   poll group.
//! - [`poll_group`]: one thread per group (`transport.poll_groups`) owns its
//!   connections, an [`ExecCtx`](crate::core::ExecCtx) and a data buffer
//!   [`pool`]. It reads sockets (busy-polling, or epoll when idle, per
//!   `transport.poll_mode`), feeds the bytes to each connection's
//!   [`PduReader`](nvmf_common::transport::tcp::PduReader), and drives every command
//!   through the transport-independent core exactly as the NVMe/RDMA poll group does:
//!   capsule → SGL decode → `core::parse` → data (in-capsule, or R2T/H2CData into a
//!   pool buffer) → `core::execute` → backend I/O → C2HData and CapsuleResp. All PDUs
//!   produced for a connection in one loop iteration leave with one `writev`, large
//!   read data straight from its pool buffer ([`tx`]).
//!
//! Errors: a fatal framer error, or an H2CData PDU that names no transfer or falls
//! outside its R2T window, sends a C2HTermReq (FES/FEI), closes the socket and tears
//! the queue down; backend I/O still in flight for it completes before its buffers go
//! back to the pool. A data digest error fails only its command (Transient Transport
//! Error) and never lets its data reach the backend. A peer that closes, resets or
//! stops making progress with work outstanding ([`TcpOptions::stall_timeout`]) is
//! cleaned up the same way; other connections carry on.
//!
//! (Like [`crate::rdma`], the controller side lives in the target crate because it is
//! bound to the target's request state machine; the wire and framer live in
//! `nvmf-common`.)

pub mod poll_group;
pub mod pool;
pub mod tx;

#[cfg(test)]
mod tests;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, info, warn};

use nvmf_common::transport::tcp::ControllerConfig;

use crate::params::PortInfo;
use crate::target::Target;

pub use poll_group::{GroupCounters, GroupHandle};

/// Tuning of the NVMe/TCP transport beyond the config's `transport:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpOptions {
    /// Enable header digests when a host asks for them.
    pub header_digest: bool,
    /// Enable data digests when a host asks for them.
    pub data_digest: bool,
    /// CPDA: the alignment of H2C PDU data we ask for (0's based dwords).
    pub cpda: u8,
    /// MAXH2CDATA: the most data one H2CData PDU (and one R2T) carries.
    pub maxh2cdata: u32,
    /// Cap on R2Ts outstanding per command (the host's MAXR2T + 1 applies first).
    pub max_r2t_per_command: u32,
    /// The most data one C2HData PDU carries (a longer read is sent in chunks).
    pub c2h_chunk: u32,
    /// A connection with work outstanding (a partial PDU, an R2T not answered, a
    /// response the host does not read, no ICReq yet) that makes no progress for this
    /// long is closed.
    pub stall_timeout: Duration,
    /// Bytes of the data buffer arena of each poll group.
    pub arena_bytes: usize,
}

impl Default for TcpOptions {
    fn default() -> Self {
        let c = ControllerConfig::default();
        TcpOptions {
            header_digest: c.header_digest,
            data_digest: c.data_digest,
            cpda: c.cpda,
            maxh2cdata: c.maxh2cdata,
            max_r2t_per_command: 16,
            c2h_chunk: 128 * 1024,
            stall_timeout: Duration::from_secs(30),
            arena_bytes: 64 << 20,
        }
    }
}

impl TcpOptions {
    /// The framer configuration of every connection.
    pub fn controller_config(&self, target: &Target) -> ControllerConfig {
        ControllerConfig {
            header_digest: self.header_digest,
            data_digest: self.data_digest,
            cpda: self.cpda,
            maxh2cdata: self.maxh2cdata,
            max_icd: target.params.in_capsule_data_size,
        }
    }
}

/// Backend tag = queue generation (16 bits) | connection index (16) | slot (16).
#[inline]
pub(crate) fn tag(gen: u16, conn: u16, slot: u16) -> u64 {
    (u64::from(gen) << 32) | (u64::from(conn) << 16) | u64::from(slot)
}

#[inline]
pub(crate) fn tag_parts(t: u64) -> (u16, u16, u16) {
    ((t >> 32) as u16, (t >> 16) as u16, t as u16)
}

/// The socket address a tcp port listens on: `traddr` (an IP literal, brackets
/// allowed for IPv6) and `trsvcid` (a port number; 0 asks the OS for a free one).
pub fn listen_addr(port: &PortInfo) -> io::Result<SocketAddr> {
    let a = port.traddr.trim_matches(|c| c == '[' || c == ']');
    let ip: IpAddr = a.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "port {}: traddr {:?} is not an IP address",
                port.portid, port.traddr
            ),
        )
    })?;
    let p: u16 = port.trsvcid.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "port {}: trsvcid {:?} is not a port number",
                port.portid, port.trsvcid
            ),
        )
    })?;
    Ok(SocketAddr::new(ip, p))
}

/// A running NVMe/TCP service: a listener thread and poll groups. Dropping it stops
/// them.
pub struct TcpServer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    groups: Vec<GroupHandle>,
    listener_wake: Arc<EventFd>,
    addrs: Vec<SocketAddr>,
}

impl TcpServer {
    /// Listens on every port of `ports` and starts `transport.poll_groups` poll groups.
    pub fn start(target: Arc<Target>, ports: &[Arc<PortInfo>]) -> io::Result<Self> {
        TcpServer::start_with(target, ports, TcpOptions::default())
    }

    /// [`TcpServer::start`] with explicit transport tuning.
    pub fn start_with(
        target: Arc<Target>,
        ports: &[Arc<PortInfo>],
        opts: TcpOptions,
    ) -> io::Result<Self> {
        let cfg = opts.controller_config(&target);
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("NVMe/TCP: {e}")))?;
        // Bind first: a port that cannot be had stops startup before any thread runs.
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for port in ports {
            let want = listen_addr(port)?;
            let l = TcpListener::bind(want).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("port {}: cannot listen on {want}: {e}", port.portid),
                )
            })?;
            l.set_nonblocking(true)?;
            let local = l.local_addr()?;
            info!(portid = port.portid, addr = %local, "NVMe/TCP listening");
            addrs.push(local);
            listeners.push((l, port.clone()));
        }
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
        let listener_wake = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(io::Error::from)?,
        );
        epoll
            .add(
                listener_wake.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, WAKE_TOKEN),
            )
            .map_err(io::Error::from)?;
        for (i, (l, _)) in listeners.iter().enumerate() {
            epoll
                .add(l.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(io::Error::from)?;
        }

        let stop = Arc::new(AtomicBool::new(false));
        let mut server = TcpServer {
            stop: stop.clone(),
            threads: Vec::new(),
            groups: Vec::new(),
            listener_wake: listener_wake.clone(),
            addrs,
        };
        for i in 0..target.params.poll_groups.max(1) {
            // On error, dropping `server` stops the groups already started.
            let (handle, thread) =
                poll_group::spawn(i, target.clone(), cfg, opts.clone(), stop.clone())?;
            server.groups.push(handle);
            server.threads.push(thread);
        }
        let groups = server.groups.clone();
        let wake = listener_wake;
        let t = std::thread::Builder::new()
            .name("nvmf-tcp-listen".into())
            .spawn(move || listen_loop(epoll, wake, listeners, groups, stop))?;
        server.threads.push(t);
        Ok(server)
    }

    /// The addresses the listeners are bound to, in port order (the real port numbers
    /// when a port asked for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// Data-path counters summed over the poll groups.
    pub fn counters(&self) -> GroupCounters {
        let mut t = GroupCounters::default();
        for g in &self.groups {
            t.add(&g.stats.snapshot());
        }
        t
    }

    /// Stops the listener and poll groups and waits for them (connections are closed,
    /// backend I/O in flight is waited for).
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.listener_wake.write(1);
        for g in &self.groups {
            g.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

const WAKE_TOKEN: u64 = u64::MAX;

/// Accepts connections and hands them to the least loaded poll group (ties: round
/// robin). The queue a connection serves is only known at its Connect, so admin and
/// I/O queues are spread alike.
fn listen_loop(
    epoll: Epoll,
    wake: Arc<EventFd>,
    listeners: Vec<(TcpListener, Arc<PortInfo>)>,
    groups: Vec<GroupHandle>,
    stop: Arc<AtomicBool>,
) {
    let mut events = [EpollEvent::empty(); 16];
    let mut rr = 0usize;
    while !stop.load(Ordering::Acquire) {
        let n = match epoll.wait(&mut events, EpollTimeout::from(200u16)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                warn!("NVMe/TCP listener: epoll_wait failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        for ev in events.iter().take(n) {
            if ev.data() == WAKE_TOKEN {
                let _ = wake.read();
                continue;
            }
            let Some((l, port)) = listeners.get(ev.data() as usize) else {
                continue;
            };
            loop {
                match l.accept() {
                    Ok((stream, peer)) => {
                        if let Err(e) = stream
                            .set_nodelay(true)
                            .and_then(|()| stream.set_nonblocking(true))
                        {
                            warn!(%peer, "NVMe/TCP: cannot set up the socket: {e}");
                            continue;
                        }
                        let Some(g) = pick_group(&groups, &mut rr) else {
                            return;
                        };
                        debug!(%peer, port = port.portid, group = g.index, "NVMe/TCP connection accepted");
                        if !g.add(poll_group::NewConn {
                            stream,
                            peer,
                            port: port.clone(),
                        }) {
                            warn!(%peer, "NVMe/TCP: poll group is gone; dropping the connection");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE, ENOBUFS...: back off instead of spinning.
                        warn!(port = port.portid, "NVMe/TCP accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                        break;
                    }
                }
            }
        }
    }
}

fn pick_group<'a>(groups: &'a [GroupHandle], rr: &mut usize) -> Option<&'a GroupHandle> {
    let n = groups.len();
    if n == 0 {
        return None;
    }
    let start = *rr % n;
    *rr = rr.wrapping_add(1);
    (0..n)
        .filter_map(|k| groups.get((start + k) % n))
        .min_by_key(|g| g.load.load(Ordering::Relaxed))
}
