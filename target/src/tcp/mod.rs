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

mod conn;
mod direct;
mod hot;
pub mod poll_group;
mod secure;
mod transport;
pub mod tx;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::config::TcpConfig;
use nvmf_common::transport::tcp::ControllerConfig;

use crate::params::PortInfo;
use crate::runtime::{PollGroups, PortError, PortServer};
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
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// Hand TLS keys to the kernel where it can take them.
    pub ktls: bool,
}

impl Default for TcpOptions {
    /// The defaults of the config's `tcp:` section.
    fn default() -> Self {
        TcpOptions::from(&TcpConfig::default())
    }
}

impl From<&TcpConfig> for TcpOptions {
    /// The config's `tcp:` section; CPDA stays 0 (Linux hosts only connect with 0).
    fn from(c: &TcpConfig) -> Self {
        TcpOptions {
            header_digest: c.header_digest,
            data_digest: c.data_digest,
            cpda: 0,
            maxh2cdata: c.maxh2cdata,
            max_r2t_per_command: c.max_r2t_per_command,
            c2h_chunk: c.c2h_chunk,
            stall_timeout: Duration::from_millis(c.stall_timeout_ms),
            // Validated to at most 16 GiB; a 32-bit host saturates rather than wraps.
            arena_bytes: usize::try_from(c.arena_bytes).unwrap_or(usize::MAX),
            tls_handshake_timeout: Duration::from_millis(c.tls_handshake_timeout_ms),
            ktls: c.ktls,
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

/// The socket address a tcp port listens on: `traddr` (an IP literal, brackets
/// allowed for IPv6) and `trsvcid` (a port number; 0 asks the OS for a free one).
pub fn listen_addr(port: &PortInfo) -> Result<SocketAddr, PortError> {
    let a = port.traddr.trim_matches(|c| c == '[' || c == ']');
    let bad = |reason: String| PortError::Address {
        portid: port.portid,
        reason,
    };
    let ip: IpAddr = a
        .parse()
        .map_err(|_| bad(format!("traddr {:?} is not an IP address", port.traddr)))?;
    let p: u16 = port
        .trsvcid
        .parse()
        .map_err(|_| bad(format!("trsvcid {:?} is not a port number", port.trsvcid)))?;
    Ok(SocketAddr::new(ip, p))
}

/// A running NVMe/TCP service: a listener thread and poll groups. Dropping it stops
/// them.
pub struct TcpServer {
    groups: PollGroups<poll_group::NewConn, ()>,
    /// The listener thread and its stop flag (it stops before the groups).
    listener: Option<JoinHandle<()>>,
    listener_stop: Arc<AtomicBool>,
    listener_wake: Arc<EventFd>,
    /// Bound address of each port, by port id, in the order the ports were added.
    addrs: Mutex<Vec<(u16, SocketAddr)>>,
    /// Ports added or removed while running go to the listener thread through here.
    listen_ctl: Sender<ListenCmd>,
}

/// A change of the listener set while running.
enum ListenCmd {
    Add(TcpListener, Arc<PortInfo>),
    /// Stop listening on the port; the sender is told when the socket is closed.
    Remove(u16, Sender<()>),
}

/// How long [`TcpServer::remove_port`] waits for the listener thread.
const LISTENER_ACK_TIMEOUT: Duration = Duration::from_secs(2);

impl TcpServer {
    /// Listens on every port of `ports` and starts `transport.poll_groups` poll groups.
    pub fn start(target: Arc<Target>, ports: &[Arc<PortInfo>]) -> Result<Self, PortError> {
        TcpServer::start_with(target, ports, TcpOptions::default())
    }

    /// [`TcpServer::start`] with explicit transport tuning.
    pub fn start_with(
        target: Arc<Target>,
        ports: &[Arc<PortInfo>],
        opts: TcpOptions,
    ) -> Result<Self, PortError> {
        let cfg = opts.controller_config(&target);
        cfg.validate().map_err(|e| start_error(e.to_string()))?;
        // Bind first: a port that cannot be had stops startup before any thread runs.
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for port in ports {
            let (l, local) = bind_port(port)?;
            addrs.push((port.portid, local));
            listeners.push(Some((l, port.clone())));
        }
        let epoll =
            Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| start_error(e.to_string()))?;
        let listener_wake = Arc::new(
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|e| start_error(e.to_string()))?,
        );
        epoll
            .add(
                listener_wake.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, WAKE_TOKEN),
            )
            .map_err(|e| start_error(e.to_string()))?;
        for (i, (l, _)) in listeners.iter().flatten().enumerate() {
            epoll
                .add(l.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(|e| start_error(e.to_string()))?;
        }
        let (ctl_tx, ctl_rx) = channel();

        let groups = PollGroups::start(target.params.poll_groups, |i, stop| {
            poll_group::spawn(i, target.clone(), cfg, opts.clone(), stop)
        })
        .map_err(|e| start_error(e.to_string()))?;
        let handles = groups.handles().to_vec();
        let secure = secure::Secure::new(
            target.clone(),
            opts.tls_handshake_timeout,
            opts.ktls,
            handles.clone(),
        );
        let listener_stop = Arc::new(AtomicBool::new(false));
        let stop = listener_stop.clone();
        let wake = listener_wake.clone();
        let t = std::thread::Builder::new()
            .name("nvmf-tcp-listen".into())
            .spawn(move || {
                listen_loop(
                    epoll,
                    wake,
                    Listeners {
                        open: listeners,
                        ctl: ctl_rx,
                    },
                    handles,
                    secure,
                    stop,
                )
            })
            .map_err(|e| start_error(e.to_string()))?;
        Ok(TcpServer {
            groups,
            listener: Some(t),
            listener_stop,
            listener_wake,
            addrs: Mutex::new(addrs),
            listen_ctl: ctl_tx,
        })
    }

    /// The addresses the listeners are bound to, in port order (the real port numbers
    /// when a port asked for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs.lock().iter().map(|(_, a)| *a).collect()
    }

    /// Each poll group's counters, in group order (how connections were placed).
    pub fn group_counters(&self) -> Vec<GroupCounters> {
        self.groups.per_group()
    }

    /// The socket address port `portid` is bound to.
    pub fn socket_addr(&self, portid: u16) -> Option<SocketAddr> {
        self.addrs
            .lock()
            .iter()
            .find(|(id, _)| *id == portid)
            .map(|(_, a)| *a)
    }

    /// Graceful stop, as on every fabric: no new connections (the listener first),
    /// then each poll group stops taking commands, answers those in flight (within a
    /// bound), closes its connections and waits for backend I/O; waits for every
    /// thread. Returns the final counters (`queues` and `buffers_in_use` are 0 unless
    /// something leaked).
    pub fn shutdown(mut self) -> GroupCounters {
        self.stop_threads();
        PortServer::counters(&self)
    }

    fn stop_threads(&mut self) {
        // No new connections first, then the groups drain.
        self.listener_stop.store(true, Ordering::Release);
        let _ = self.listener_wake.write(1);
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
        self.groups.stop();
    }
}

impl PortServer for TcpServer {
    fn add_port(&self, port: &Arc<PortInfo>) -> Result<String, PortError> {
        if self.socket_addr(port.portid).is_some() {
            return Err(PortError::AlreadyListening(port.portid));
        }
        let (l, local) = bind_port(port)?;
        self.listen_ctl
            .send(ListenCmd::Add(l, port.clone()))
            .map_err(|_| PortError::Server {
                portid: port.portid,
                reason: "the NVMe/TCP listener has stopped".into(),
            })?;
        let _ = self.listener_wake.write(1);
        self.addrs.lock().push((port.portid, local));
        Ok(local.to_string())
    }

    fn remove_port(&self, portid: u16) -> bool {
        let known = {
            let mut a = self.addrs.lock();
            let before = a.len();
            a.retain(|(id, _)| *id != portid);
            a.len() != before
        };
        if !known {
            return false;
        }
        let (tx, rx) = channel();
        if self.listen_ctl.send(ListenCmd::Remove(portid, tx)).is_ok() {
            let _ = self.listener_wake.write(1);
            if rx.recv_timeout(LISTENER_ACK_TIMEOUT).is_err() {
                warn!(portid, "NVMe/TCP listener did not confirm closing the port");
            }
        }
        true
    }

    fn port_addr(&self, portid: u16) -> Option<String> {
        self.socket_addr(portid).map(|a| a.to_string())
    }

    fn counters(&self) -> GroupCounters {
        self.groups.counters()
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

const WAKE_TOKEN: u64 = u64::MAX;

fn start_error(reason: String) -> PortError {
    PortError::Start {
        fabric: "NVMe/TCP",
        reason,
    }
}

/// Binds a non-blocking listener for `port`.
fn bind_port(port: &PortInfo) -> Result<(TcpListener, SocketAddr), PortError> {
    let want = listen_addr(port)?;
    let failed = |source: io::Error| PortError::Listen {
        portid: port.portid,
        addr: want.to_string(),
        source,
    };
    let l = TcpListener::bind(want).map_err(failed)?;
    l.set_nonblocking(true).map_err(failed)?;
    let local = l.local_addr().map_err(failed)?;
    info!(portid = port.portid, addr = %local, "NVMe/TCP listening");
    Ok((l, local))
}

/// The listener thread's sockets (epoll token = index) and its command channel.
struct Listeners {
    open: Vec<Option<(TcpListener, Arc<PortInfo>)>>,
    ctl: Receiver<ListenCmd>,
}

impl Listeners {
    /// Applies port additions and removals sent by [`TcpServer`].
    fn apply(&mut self, epoll: &Epoll) {
        while let Ok(cmd) = self.ctl.try_recv() {
            match cmd {
                ListenCmd::Add(l, port) => {
                    let token = self.open.len() as u64;
                    match epoll.add(l.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token)) {
                        Ok(()) => self.open.push(Some((l, port))),
                        Err(e) => warn!(
                            portid = port.portid,
                            "NVMe/TCP: cannot watch the new listener: {e}"
                        ),
                    }
                }
                ListenCmd::Remove(portid, ack) => {
                    for slot in &mut self.open {
                        if slot.as_ref().is_some_and(|(_, p)| p.portid == portid) {
                            if let Some((l, _)) = slot.take() {
                                let _ = epoll.delete(l.as_fd());
                                info!(portid, "NVMe/TCP port closed");
                            }
                        }
                    }
                    let _ = ack.send(());
                }
            }
        }
    }
}

/// Accepts connections and hands them to the least loaded poll group (ties: round
/// robin). The queue a connection serves is only known at its Connect, so admin and
/// I/O queues are spread alike.
fn listen_loop(
    epoll: Epoll,
    wake: Arc<EventFd>,
    mut listeners: Listeners,
    groups: Vec<GroupHandle>,
    secure: secure::Secure,
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
                listeners.apply(&epoll);
                continue;
            }
            let Some(Some((l, port))) = listeners.open.get(ev.data() as usize) else {
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
                        let port_seen = connection_port(port, &stream);
                        if port.tls.enabled() {
                            debug!(%peer, port = port.portid, "NVMe/TCP connection accepted on a TLS port");
                            secure.admit(stream, peer, port_seen);
                            continue;
                        }
                        let Some(g) = pick_group(&groups, &mut rr) else {
                            return;
                        };
                        debug!(%peer, port = port.portid, group = g.index, "NVMe/TCP connection accepted");
                        let nc = poll_group::NewConn {
                            stream: stream.into(),
                            peer,
                            port: port_seen,
                            tls: None,
                        };
                        if !g.add(nc) {
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

/// The port as one connection sees it: a wildcard listener (0.0.0.0, ::) or an
/// OS-chosen port number is reported in discovery with the address the host used.
fn connection_port(port: &Arc<PortInfo>, stream: &std::net::TcpStream) -> Arc<PortInfo> {
    match stream.local_addr() {
        Ok(local) if port.is_wildcard() || port.trsvcid.parse::<u16>() == Ok(0) => {
            Arc::new(port.as_seen_at(local))
        }
        _ => port.clone(),
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
