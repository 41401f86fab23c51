//! NVMe/TCP on the shared transport runtime: what a poll group does with sockets.
//!
//! The runtime ([`crate::runtime`]) owns queues, slots, buffers, timers, the idle
//! policy and the request life cycle; this transport owns each connection's socket,
//! PDU framer ([`conn`](super::conn)) and send queue ([`super::tx`]). While spinning, a
//! group with at most two connections (an admin and an I/O queue) reads each socket
//! directly, one non-blocking `read` per socket; with more it reads its busiest I/O
//! connections directly and asks epoll about the rest, one `epoll_wait(0)` for all of
//! them, every pass or every few passes ([`super::hot`]). A connection whose host does not read
//! its responses (more than `TX_HIGH_WATER` queued) is not read until it does. All
//! PDUs produced for a connection in one pass leave with one `writev`.
//!
//! A connection that fails stops taking PDUs, gets one last write (its termination
//! request), closes its socket (drained for [`CLOSE_LINGER`] when the host should read
//! what we sent) and is torn down by the runtime.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{EpollEvent, EpollFlags, EpollTimeout};
use tracing::{debug, info, warn};

use nvmf_common::tls::{Socket, TlsPeer};
use nvmf_common::transport::tcp::{Connection, ControllerConfig, DIRECT_MIN};

use super::conn::{Conn, TcpSlot};
use super::direct;
use super::hot::HotSet;
pub use super::transport::TcpTransport;
use super::tx::{self, TxQueue};
use super::TcpOptions;
use crate::core::QueueCtx;
use crate::params::PortInfo;
use crate::runtime::stats::bump;
use crate::runtime::{self, BufferPool, ReqState, Runtime, SglCarrier, Transport};
use crate::target::Target;

pub use crate::runtime::GroupCounters;

/// Bytes read from a socket per `read`.
const RX_BUF: usize = 256 * 1024;
/// Reads per connection per pass when the socket keeps filling the buffer.
const READS_PER_CONN: usize = 4;
/// Reads per TLS connection per pass: each returns one record (16 KiB at most), so
/// a short read does not mean the socket is drained.
const TLS_READS_PER_CONN: usize = 32;
/// How long a closed connection's socket is kept to drain what the host still sends
/// (so the kernel does not answer a termination request with a reset).
const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// Pause between passes over lingering sockets at shutdown.
const CLOSE_POLL: Duration = Duration::from_millis(5);
/// Up to this many connections, a spinning group reads every socket each pass (one
/// `read` each); beyond, it asks epoll which ones have data (besides its hot set).
const DIRECT_READ_MAX: usize = super::hot::HOT_MAX;
/// A connection with more than this queued for the socket is not read until the
/// host takes some (its commands would only queue more).
pub(super) const TX_HIGH_WATER: usize = 8 << 20;
/// A spinning group reads a connected admin queue's socket on every this many passes.
const ADMIN_READ_EVERY: u32 = 16;

/// A connection accepted by the listener.
pub struct NewConn {
    pub stream: Socket,
    pub peer: SocketAddr,
    pub port: Arc<PortInfo>,
    /// The PSK identity of a TLS connection.
    pub tls: Option<Arc<TlsPeer>>,
}

/// What the listener needs to hand connections to a group.
pub type GroupHandle = runtime::GroupHandle<NewConn, ()>;

/// Starts poll group `index`.
pub fn spawn(
    index: usize,
    target: Arc<Target>,
    cfg: ControllerConfig,
    opts: TcpOptions,
    stop: Arc<AtomicBool>,
) -> io::Result<(GroupHandle, JoinHandle<()>)> {
    let pool = BufferPool::new(opts.arena_bytes, target.params.max_io_size).ok_or_else(|| {
        io::Error::new(io::ErrorKind::OutOfMemory, "cannot allocate the data arena")
    })?;
    let t = TcpTransport {
        index,
        cfg,
        opts,
        live: 0,
        dirty: Vec::new(),
        closing: Vec::new(),
        rxbuf: vec![0u8; RX_BUF],
        spins: 0,
        hot: HotSet::default(),
    };
    runtime::spawn(
        index,
        format!("nvmf-tcp-pg{index}"),
        target,
        t,
        pool,
        |_, _, _| Ok(()),
        stop,
    )
}

/// Epoll token of a connection: `gen << 16 | index` (below 2^32).
fn conn_token(gen: u16, ci: u16) -> u64 {
    (u64::from(gen) << 16) | u64::from(ci)
}

impl Transport for TcpTransport {
    type Queue = Conn;
    type Slot = TcpSlot;
    type NewQueue = NewConn;
    type Shared = ();
    const NAME: &'static str = "NVMe/TCP";
    const SGL: SglCarrier = SglCarrier::TransportDataBlock;
    const TRANSFERS_SETTLE_AFTER_CLOSE: bool = false;
    const RECEIVE_BY_EVENTS: bool = true;

    fn shared(&self) {}

    fn add_queue(&mut self, rt: &mut Runtime<Self>, nc: NewConn) {
        let now = Instant::now();
        let conn = match Connection::controller(self.cfg, self.opts.stall_timeout, now) {
            Ok(c) => c,
            Err(e) => {
                warn!(peer = %nc.peer, "NVMe/TCP: cannot set up the framer: {e}");
                return;
            }
        };
        let peer = nc.peer;
        let conn = Conn {
            sock: Some(nc.stream),
            peer,
            conn: Some(conn),
            writer: None,
            r2t_limit: 1,
            free: vec![0],
            slots_known: 1,
            tx: TxQueue::default(),
            interest: EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP,
        };
        // Before Connect: one slot; the queue id and size come from the Connect.
        let mut ctx = QueueCtx::unbound(nc.port);
        ctx.tls = nc.tls;
        let Some(ci) = rt.add_queue(ctx, 1, conn) else {
            warn!(%peer, "NVMe/TCP: too many connections in poll group {}", self.index);
            return;
        };
        let Some(q) = rt.queue(ci) else { return };
        let token = conn_token(q.gen, ci);
        let added = q.t.sock.as_ref().map(|s| {
            rt.epoll().add(
                s.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP, token),
            )
        });
        if let Some(Err(e)) = added {
            warn!(%peer, "NVMe/TCP: epoll_ctl failed: {e}");
            rt.kill(self, ci, "cannot watch the socket", false);
            return;
        }
        self.live += 1;
        debug!(group = self.index, %peer, conn = ci, "NVMe/TCP connection added");
    }

    fn poll(&mut self, rt: &mut Runtime<Self>, spin: bool) -> usize {
        if !spin {
            return 0;
        }
        if self.live <= DIRECT_READ_MAX {
            self.read_all(rt)
        } else {
            self.read_many(rt)
        }
    }

    fn on_event(&mut self, rt: &mut Runtime<Self>, token: u64, fl: EpollFlags) -> usize {
        let (gen, ci) = ((token >> 16) as u16, token as u16);
        if rt.live_queue(ci, gen).is_none() {
            return 0;
        }
        if fl.intersects(EpollFlags::EPOLLOUT) {
            self.flush_tx(rt, ci);
        }
        if fl.intersects(
            EpollFlags::EPOLLIN
                | EpollFlags::EPOLLRDHUP
                | EpollFlags::EPOLLHUP
                | EpollFlags::EPOLLERR,
        ) {
            let got = self.service_read(rt, ci);
            if got > 0 {
                let io_queue = rt
                    .queue(ci)
                    .is_some_and(|q| q.connected && !q.ctx.qid.is_admin());
                if self.hot.epoll_data(ci, gen, io_queue) {
                    tracing::trace!(group = self.index, conn = ci, "read directly while busy");
                }
            }
            return got.max(1);
        }
        0
    }

    fn queue_connected(&mut self, rt: &mut Runtime<Self>, ci: u16) {
        let Some(q) = rt.queue_mut(ci) else { return };
        let depth = q.slots.len();
        let sqflow_disabled = q.ctx.sq_flow_disabled;
        let qid = q.ctx.qid;
        let c = &mut q.t;
        while c.slots_known < depth {
            c.free.push(c.slots_known as u16);
            c.slots_known += 1;
        }
        debug!(peer = %c.peer, %qid, depth, sqflow_disabled, "NVMe/TCP queue connected");
    }

    fn fetch_data(&mut self, rt: &mut Runtime<Self>, ci: u16, si: u16) {
        if let Some(slot) = rt.slot_mut(ci, si) {
            slot.t.reset();
        }
        self.issue_r2ts(rt, ci, si);
    }

    fn send_response(&mut self, rt: &mut Runtime<Self>, ci: u16, si: u16) {
        self.send_c2h_and_response(rt, ci, si);
    }

    fn describe_transfer(s: &TcpSlot) -> String {
        s.describe()
    }

    fn recycle(&mut self, rt: &mut Runtime<Self>, ci: u16, si: u16) {
        if let Some(q) = rt.queue_mut(ci) {
            q.t.free.push(si);
        }
    }

    /// Writes every dirty connection's PDUs (one `writev` each).
    fn flush(&mut self, rt: &mut Runtime<Self>) {
        let mut retry = Vec::new();
        while let Some(ci) = self.dirty.pop() {
            if !self.flush_tx(rt, ci) {
                retry.push(ci);
            }
        }
        // Connections the socket refused: again next pass (and on EPOLLOUT).
        self.dirty = retry;
    }

    fn timers(&mut self, rt: &mut Runtime<Self>, now: Instant) {
        let stall = self.opts.stall_timeout;
        let mut kill = Vec::new();
        for ci in 0..rt.queue_slots() {
            let ci = ci as u16;
            let Some(q) = rt.queue_mut(ci) else { continue };
            if q.dead {
                continue;
            }
            let waiting_data = q
                .slots
                .iter()
                .any(|s| s.state == ReqState::TransferringHostToController);
            let c = &mut q.t;
            let outstanding = waiting_data || c.tx.pending();
            let due = c
                .conn
                .as_mut()
                .and_then(|conn| conn.deadline(now, outstanding));
            if due.is_some_and(|d| now > d) {
                kill.push(ci);
            }
        }
        for ci in kill {
            let why = format!(
                "no progress from the host for {} ms with work outstanding",
                stall.as_millis()
            );
            rt.kill(self, ci, &why, true);
        }
        self.drain_closing(now);
    }

    /// What is queued (responses, a termination request) gets one last write, then the
    /// socket closes (after draining, when `linger`).
    fn close(&mut self, rt: &mut Runtime<Self>, ci: u16, why: &str, linger: bool) {
        let qid = rt.qid(ci);
        let Some(q) = rt.queue_mut(ci) else { return };
        let c = &mut q.t;
        let mut freed = Vec::new();
        if let Some(sock) = c.sock.as_mut() {
            while c.tx.pending() {
                let iov = c.tx.iovecs();
                let r = sock.write_vectored(&iov);
                drop(iov);
                match r {
                    Ok(0) => break,
                    Ok(n) => c.tx.advance(n, &mut freed),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
        c.tx.clear(&mut freed);
        c.tx = TxQueue::default();
        c.conn = None;
        info!(peer = %c.peer, %qid, "NVMe/TCP connection closed: {why}");
        let sock = c.sock.take();
        self.live = self.live.saturating_sub(1);
        if let Some(mut sock) = sock {
            let _ = rt.epoll().delete(sock.as_fd());
            let _ = sock.shutdown(Shutdown::Write);
            // What arrives after the close is discarded undecrypted.
            if let (true, Ok(raw)) = (linger, sock.tcp().try_clone()) {
                self.closing.push((raw, Instant::now()));
            }
        }
        for b in tx::released(freed) {
            rt.free_buf(b);
        }
    }

    /// Closed sockets are drained until their hosts close them (bounded by
    /// [`CLOSE_LINGER`]): closing a socket with unread bytes would reset it, and the
    /// host would lose the responses it had not read yet.
    fn shutdown(&mut self, _rt: &mut Runtime<Self>) {
        let start = Instant::now();
        while !self.closing.is_empty() && start.elapsed() < CLOSE_LINGER {
            self.drain_closing(Instant::now());
            std::thread::sleep(CLOSE_POLL);
        }
        self.closing.clear();
    }
}

impl TcpTransport {
    /// Sockets of closed connections: discard what arrives until the host closes.
    fn drain_closing(&mut self, now: Instant) {
        let mut b = [0u8; 4096];
        self.closing.retain(|(s, t)| {
            if now.duration_since(*t) > CLOSE_LINGER {
                return false;
            }
            loop {
                match (&*s).read(&mut b) {
                    Ok(0) => return false,
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return false,
                }
            }
        });
    }

    pub(super) fn mark_dirty(&mut self, ci: u16) {
        if !self.dirty.contains(&ci) {
            self.dirty.push(ci);
        }
    }

    /// Reads every live connection (spinning). Returns how many had data.
    fn read_all(&mut self, rt: &mut Runtime<Self>) -> usize {
        let mut n = 0;
        self.spins = self.spins.wrapping_add(1);
        // A connected admin queue carries few commands: it is read on every
        // ADMIN_READ_EVERY-th pass only, which saves a `read` per pass on the I/O path.
        let admin_turn = self.spins.is_multiple_of(ADMIN_READ_EVERY);
        for ci in 0..rt.queue_slots() {
            let ci = ci as u16;
            let read = rt.queue(ci).is_some_and(|q| {
                !q.dead
                    && q.t.tx.queued() <= TX_HIGH_WATER
                    && (admin_turn || !q.connected || !q.ctx.qid.is_admin())
            });
            if read {
                n += self.service_read(rt, ci);
            }
        }
        n
    }

    /// Many connections (spinning): reads the hot ones directly, then asks epoll about
    /// the others when it is due. Returns how many had data.
    fn read_many(&mut self, rt: &mut Runtime<Self>) -> usize {
        let mut n = 0;
        // From the last entry down: an entry that leaves takes the last one's place.
        for i in (0..self.hot.len()).rev() {
            let Some((ci, gen)) = self.hot.get(i) else {
                continue;
            };
            let Some(q) = rt.live_queue(ci, gen) else {
                self.hot.remove(i);
                continue;
            };
            // A host not reading its responses is not read either (as in read_all).
            if q.t.tx.queued() > TX_HIGH_WATER {
                continue;
            }
            let got = self.service_read(rt, ci);
            self.hot.read(i, got > 0);
            n += got;
        }
        if self.hot.epoll_due() {
            n += rt.wait_events(self, EpollTimeout::ZERO);
        }
        n
    }

    /// Reads what the socket has and runs the PDUs. Returns 1 if bytes arrived.
    fn service_read(&mut self, rt: &mut Runtime<Self>, ci: u16) -> usize {
        let mut rx = std::mem::take(&mut self.rxbuf);
        let mut got = 0;
        let now = rt.ex.now;
        let mut reads = 0;
        while let Some(q) = rt.queue_mut(ci) {
            if q.dead {
                break;
            }
            // The rest of a large H2CData PDU goes straight into its command's buffer.
            let wanted = q.t.conn.as_ref().and_then(|c| c.wants_in_place(DIRECT_MIN));
            let dst = wanted.and_then(|d| direct::socket_dst(rt, ci, &d));
            let Some(q) = rt.queue_mut(ci) else { break };
            let Some(sock) = q.t.sock.as_mut() else { break };
            let tls = sock.is_tls();
            let limit = if tls {
                TLS_READS_PER_CONN
            } else {
                READS_PER_CONN
            };
            // Decrypted bytes waiting in the TLS layer wake no epoll: take them now.
            if reads >= limit && !sock.buffered() {
                break;
            }
            reads += 1;
            let cap = q.t.conn.as_ref().map_or(rx.len(), |c| c.read_len(rx.len()));
            let (r, want) = match &dst {
                // SAFETY: the only borrow of `to`, ended by this read.
                Some(to) => (sock.read(unsafe { direct::dst_bytes(to) }), to.len),
                None => (sock.read(rx.get_mut(..cap).unwrap_or(&mut [])), cap),
            };
            bump(&rt.stats.socket_reads, 1);
            match r {
                Ok(0) => {
                    rt.kill(self, ci, "host closed the connection", false);
                    got = 1;
                    break;
                }
                Ok(n) => {
                    let conn = rt.queue_mut(ci).and_then(|q| q.t.conn.as_mut());
                    if let Some(conn) = conn {
                        conn.progress(now);
                        if let Some(to) = &dst {
                            // SAFETY: the read's borrow ended; this one ends with
                            // `placed`, which only digests the bytes.
                            let placed = unsafe { direct::dst_bytes(to) };
                            conn.placed(placed.get(..n).unwrap_or(&[]));
                        }
                    }
                    got = 1;
                    // With no input: the PDU the placed bytes completed, if they did.
                    let input = if dst.is_some() {
                        &[][..]
                    } else {
                        rx.get(..n).unwrap_or(&[])
                    };
                    self.on_bytes(rt, ci, input);
                    if n < want && !tls {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    rt.kill(self, ci, &format!("socket read failed: {e}"), false);
                    got = 1;
                    break;
                }
            }
        }
        self.rxbuf = rx;
        got
    }

    /// Writes what the connection has queued. False when bytes remain.
    fn flush_tx(&mut self, rt: &mut Runtime<Self>, ci: u16) -> bool {
        let now = rt.ex.now;
        let Some(q) = rt.queue_mut(ci) else {
            return true;
        };
        if q.dead {
            return true;
        }
        let c = &mut q.t;
        let Some(sock) = c.sock.as_mut() else {
            return true;
        };
        let mut failed = None;
        let mut freed = Vec::new();
        let mut writes = 0;
        while c.tx.pending() {
            let iov = c.tx.iovecs();
            let r = sock.write_vectored(&iov);
            drop(iov);
            writes += 1;
            match r {
                Ok(0) => {
                    failed = Some("socket write returned 0".to_string());
                    break;
                }
                Ok(n) => {
                    c.tx.advance(n, &mut freed);
                    if let Some(conn) = c.conn.as_mut() {
                        conn.progress(now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    failed = Some(format!("socket write failed: {e}"));
                    break;
                }
            }
        }
        let done = !c.tx.pending();
        // Read while the backlog is small (a host that does not read its responses
        // stops being read); wait for room to write while bytes wait.
        let mut want = EpollFlags::empty();
        if c.tx.queued() <= TX_HIGH_WATER {
            want |= EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        }
        if !done {
            want |= EpollFlags::EPOLLOUT;
        }
        let change = failed.is_none() && want != c.interest;
        let token = conn_token(q.gen, ci);
        bump(&rt.stats.socket_writes, writes);
        for b in tx::released(freed) {
            rt.free_buf(b);
        }
        if let Some(why) = failed {
            rt.kill(self, ci, &why, false);
            return true;
        }
        if change {
            let mut ev = EpollEvent::new(want, token);
            let ok = rt
                .queue(ci)
                .and_then(|q| q.t.sock.as_ref())
                .is_some_and(|s| rt.epoll().modify(s.as_fd(), &mut ev).is_ok());
            if let (true, Some(q)) = (ok, rt.queue_mut(ci)) {
                q.t.interest = want;
            }
        }
        done
    }
}
