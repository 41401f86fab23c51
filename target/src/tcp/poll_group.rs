//! A poll group: one thread that owns a set of NVMe/TCP connections.
//!
//! Everything a connection owns (socket, framer, slots, buffers, queue state) is
//! touched only by this thread; the listener hands connections over through a channel
//! and an eventfd. Each loop iteration: take new connections, read sockets and run
//! every complete PDU, reap backend completions, serve held AERs and timers, then issue
//! backend I/O and write each connection's PDUs of the iteration with one `writev`
//! (large read data straight from its pool buffer, see [`super::tx`]).
//!
//! Waiting follows `transport.poll_mode`: `poll` spins, `interrupt` sleeps in
//! `epoll_wait` (sockets, backend eventfds, the hand-over eventfd), `adaptive` spins
//! for 200 µs after the last work, then sleeps. While spinning, a group with at most
//! two connections (an admin and an I/O queue) reads each socket directly, one
//! non-blocking `read` per socket; with more it asks epoll which have data, one
//! `epoll_wait(0)` for all of them. A connection whose host does not read its
//! responses (more than `TX_HIGH_WATER` queued) is not read until it does.
//!
//! Slot life cycle (one slot per submission queue entry, `sqsize + 1` per queue once
//! connected, 1 before): `Free` → capsule arrives → (`WaitBuf` → a pool buffer) →
//! (`WaitData`: R2Ts sent, H2CData arriving) → `Executing` (backend) or `Held` (AER)
//! → C2HData / CapsuleResp queued → `Free`. A connection that fails stops taking
//! PDUs, closes its socket, tears its queue down, waits for its backend I/O and is
//! then freed.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, info, warn};

use nvmf_common::config::PollMode;
use nvmf_common::transport::tcp::negotiate::icresp_params;
use nvmf_common::transport::tcp::{
    encode_icresp, encode_term_req, ControllerConfig, FramerError, Negotiated, Pdu, PduReader,
    PduWriter, Role,
};
use nvmf_common::types::Qid;
use nvmf_common::verbs::DmaBuffer;
use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::fabrics::{cattr, fctype, ConnectCmd, FABRICS_OPCODE};
use nvmf_common::wire::sgl::{subtype, SglDescriptor};
use nvmf_common::wire::sqe::{self, SQE_LEN};
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_common::wire::tcp::{
    offset, pdu_type, term_fes, term_fes_name, DataPdu, CMD_HDR_LEN, DATA_HDR_LEN, HDR_LEN,
    MAX_TERM_DATA,
};

use super::pool::{BufferPool, PoolBuf};
use super::tx::{c2h_header, c2h_trailer, TxQueue, ZERO_COPY_MIN};
use super::{tag, tag_parts, TcpOptions};
use crate::backend::{BackendError, DmaSlice};
use crate::core::{self, DataDir, ExecCtx, Outcome, QueueCtx, Request};
use crate::params::PortInfo;
use crate::target::Target;

/// Bytes read from a socket per `read`.
const RX_BUF: usize = 256 * 1024;
/// Reads per connection per iteration when the socket keeps filling the buffer.
const READS_PER_CONN: usize = 4;
/// How long an adaptive poller spins without work before it sleeps.
const ADAPTIVE_SPIN: Duration = Duration::from_micros(200);
/// Longest sleep, so timers (keep-alive, stalls) run.
const MAX_SLEEP_MS: u16 = 20;
/// How often connections are checked for dead controllers, keep-alive and stalls.
const TIMER_PERIOD: Duration = Duration::from_millis(20);
/// How long a closed connection's socket is kept to drain what the host still sends
/// (so the kernel does not answer a termination request with a reset).
const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// Up to this many connections, a spinning group reads every socket each iteration
/// (one `read` each); beyond, it asks epoll which ones have data.
const DIRECT_READ_MAX: usize = 2;
/// A connection with more than this queued for the socket is not read until the
/// host takes some (its commands would only queue more).
const TX_HIGH_WATER: usize = 8 << 20;
/// Bytes of each PDU's start kept for termination requests and digest errors: the
/// longest header those read (a CapsuleCmd's).
const HDR_KEEP: usize = CMD_HDR_LEN;
/// A spinning group reads a connected admin queue's socket on every this many passes.
const ADMIN_READ_EVERY: u32 = 16;
/// Epoll events taken per wait.
const EPOLL_BATCH: usize = 64;
/// Epoll tokens: connections use `gen << 16 | index` (below 2^32).
const WAKE_TOKEN: u64 = 1 << 41;
/// On shutdown, how long commands already executing get to complete and be answered.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);
const BACKEND_TOKEN: u64 = 1 << 40;

/// A connection accepted by the listener.
pub struct NewConn {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub port: Arc<PortInfo>,
}

/// Data-path counters of a poll group (relaxed atomics, written by its thread only).
#[derive(Debug, Default)]
pub struct GroupStats {
    pub accepted: AtomicU64,
    pub closed: AtomicU64,
    /// Command capsules received.
    pub commands: AtomicU64,
    pub r2ts: AtomicU64,
    pub h2c_pdus: AtomicU64,
    pub c2h_pdus: AtomicU64,
    /// CapsuleResp PDUs sent.
    pub responses: AtomicU64,
    /// `read` / `write` system calls on sockets.
    pub socket_reads: AtomicU64,
    pub socket_writes: AtomicU64,
    /// Times the thread blocked in epoll_wait.
    pub sleeps: AtomicU64,
    /// Data digest errors (commands failed with Transient Transport Error).
    pub digest_errors: AtomicU64,
    /// Connections ended by a protocol error (C2HTermReq or a bad H2CTermReq).
    pub protocol_errors: AtomicU64,
    /// Pool buffers currently held by commands (a gauge).
    pub buffers_in_use: AtomicU64,
    /// Connections currently owned, including closed ones waiting for backend I/O.
    pub connections: AtomicU64,
}

/// A snapshot of [`GroupStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCounters {
    pub accepted: u64,
    pub closed: u64,
    pub commands: u64,
    pub r2ts: u64,
    pub h2c_pdus: u64,
    pub c2h_pdus: u64,
    pub responses: u64,
    pub socket_reads: u64,
    pub socket_writes: u64,
    pub sleeps: u64,
    pub digest_errors: u64,
    pub protocol_errors: u64,
    pub buffers_in_use: u64,
    pub connections: u64,
}

impl GroupCounters {
    /// Adds `o` field by field.
    pub fn add(&mut self, o: &GroupCounters) {
        self.accepted += o.accepted;
        self.closed += o.closed;
        self.commands += o.commands;
        self.r2ts += o.r2ts;
        self.h2c_pdus += o.h2c_pdus;
        self.c2h_pdus += o.c2h_pdus;
        self.responses += o.responses;
        self.socket_reads += o.socket_reads;
        self.socket_writes += o.socket_writes;
        self.sleeps += o.sleeps;
        self.digest_errors += o.digest_errors;
        self.protocol_errors += o.protocol_errors;
        self.buffers_in_use += o.buffers_in_use;
        self.connections += o.connections;
    }
}

impl GroupStats {
    pub fn snapshot(&self) -> GroupCounters {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GroupCounters {
            accepted: r(&self.accepted),
            closed: r(&self.closed),
            commands: r(&self.commands),
            r2ts: r(&self.r2ts),
            h2c_pdus: r(&self.h2c_pdus),
            c2h_pdus: r(&self.c2h_pdus),
            responses: r(&self.responses),
            socket_reads: r(&self.socket_reads),
            socket_writes: r(&self.socket_writes),
            sleeps: r(&self.sleeps),
            digest_errors: r(&self.digest_errors),
            protocol_errors: r(&self.protocol_errors),
            buffers_in_use: r(&self.buffers_in_use),
            connections: r(&self.connections),
        }
    }
}

fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// What the listener needs to hand connections to a group.
#[derive(Clone)]
pub struct GroupHandle {
    pub index: usize,
    tx: Sender<NewConn>,
    wake: Arc<EventFd>,
    /// Set when a connection was handed over: the loop checks this flag, not the channel.
    pending: Arc<AtomicBool>,
    /// Connections owned by the group (for placement).
    pub load: Arc<AtomicUsize>,
    pub stats: Arc<GroupStats>,
}

impl GroupHandle {
    /// Hands over an accepted, non-blocking connection.
    pub fn add(&self, c: NewConn) -> bool {
        self.load.fetch_add(1, Ordering::Relaxed);
        let ok = self.tx.send(c).is_ok();
        if !ok {
            self.load.fetch_sub(1, Ordering::Relaxed);
        }
        self.pending.store(true, Ordering::Release);
        self.wake();
        ok
    }

    pub fn wake(&self) {
        let _ = self.wake.write(1);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    /// A command capsule is being parsed.
    Received,
    /// Waiting for a data buffer from the pool.
    WaitBuf,
    /// R2Ts sent; H2CData arriving.
    WaitData,
    /// Backend I/O in flight (or running right now).
    Executing,
    /// An Asynchronous Event Request waiting for an event.
    Held,
}

/// Where the host's data is, per the command's SGL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostData {
    None,
    /// In the capsule at `offset` from the start of its data.
    InCapsule {
        offset: usize,
        len: u32,
    },
    /// Moved by R2T/H2CData or C2HData.
    Transport {
        len: u32,
    },
}

struct Slot {
    state: SlotState,
    req: Request,
    buf: Option<PoolBuf>,
    /// Host-to-controller transfers: the next offset to ask for with an R2T.
    next_r2t: u32,
    /// Outstanding R2T windows: (next expected offset, end).
    windows: Vec<(u32, u32)>,
    /// Set when data of this command failed its digest: it completes with this status
    /// once its outstanding R2T windows are drained, and never executes.
    failed: Option<Status>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            state: SlotState::Free,
            req: Request::new(),
            buf: None,
            next_r2t: 0,
            windows: Vec::new(),
            failed: None,
        }
    }
}

struct Conn {
    gen: u16,
    sock: Option<TcpStream>,
    peer: SocketAddr,
    reader: Option<PduReader>,
    /// Present once the ICReq was answered.
    writer: Option<PduWriter>,
    /// R2Ts allowed outstanding per command.
    r2t_limit: usize,
    ctx: QueueCtx,
    /// Connect succeeded and the slots were sized for the queue.
    connected: bool,
    /// CATTR of the Connect being run, applied when it succeeds.
    connect_cattr: u8,
    sqflow_disabled: bool,
    slots: Vec<Slot>,
    free: Vec<u16>,
    /// In-capsule data, `icd_slot` bytes per slot (allocated on first use).
    icd: Option<Arc<DmaBuffer>>,
    /// The ICReq/ICResp outcome.
    neg: Option<Negotiated>,
    /// PDUs waiting to be written.
    tx: TxQueue,
    /// The epoll interest registered for the socket.
    interest: EpollFlags,
    /// The first bytes of the PDU being read (its header, for termination requests
    /// and data digest errors).
    hdr: [u8; MAX_TERM_DATA],
    hdr_len: usize,
    /// Last time bytes moved in either direction.
    last_progress: Instant,
    /// When the connection started waiting for the host (see `timers`).
    wait_start: Option<Instant>,
    dead: bool,
}

impl Conn {
    fn executing(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::Executing)
            .count()
    }

    /// Whether the host owes us something: an ICReq, the rest of a PDU, H2CData for
    /// an R2T, or reading what we sent.
    fn waiting_for_host(&self) -> bool {
        self.writer.is_none()
            || self.reader.as_ref().is_some_and(PduReader::has_partial_pdu)
            || self.tx.pending()
            || self.slots.iter().any(|s| s.state == SlotState::WaitData)
    }

    fn header(&self) -> &[u8] {
        self.hdr.get(..self.hdr_len).unwrap_or(&[])
    }
}

struct Group {
    index: usize,
    target: Arc<Target>,
    cfg: ControllerConfig,
    opts: TcpOptions,
    rx: Receiver<NewConn>,
    wake: Arc<EventFd>,
    pending: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    load: Arc<AtomicUsize>,
    epoll: Epoll,
    /// Connections not closed (for the choice between reading every socket and
    /// asking epoll which ones have data).
    live: usize,
    conns: Vec<Option<Conn>>,
    next_gen: u16,
    pool: BufferPool,
    ex: ExecCtx,
    mode: PollMode,
    /// Connections with PDUs to write.
    dirty: Vec<u16>,
    /// Commands waiting for a pool buffer: (connection, generation, slot).
    waiters: VecDeque<(u16, u16, u16)>,
    /// Sockets of closed connections, drained until the host closes or a deadline.
    closing: Vec<(TcpStream, Instant)>,
    backend_fds: Vec<RawFd>,
    rxbuf: Vec<u8>,
    /// Passes of `read_all` (for reading admin queues less often).
    spins: u32,
    events: Vec<EpollEvent>,
    stats: Arc<GroupStats>,
}

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
    let wake = Arc::new(
        EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?,
    );
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
    epoll
        .add(
            wake.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, WAKE_TOKEN),
        )
        .map_err(io::Error::from)?;
    let (tx, rx) = channel();
    let stats = Arc::new(GroupStats::default());
    let pending = Arc::new(AtomicBool::new(false));
    let load = Arc::new(AtomicUsize::new(0));
    let handle = GroupHandle {
        index,
        tx,
        wake: wake.clone(),
        pending: pending.clone(),
        load: load.clone(),
        stats: stats.clone(),
    };
    let mode = target.params.poll_mode;
    let group = Group {
        index,
        ex: ExecCtx::new(target.clone()),
        target,
        cfg,
        opts,
        rx,
        wake,
        pending,
        stop,
        load,
        epoll,
        live: 0,
        conns: Vec::new(),
        next_gen: 1,
        pool,
        mode,
        dirty: Vec::new(),
        waiters: VecDeque::new(),
        closing: Vec::new(),
        backend_fds: Vec::new(),
        rxbuf: vec![0u8; RX_BUF],
        spins: 0,
        events: vec![EpollEvent::empty(); EPOLL_BATCH],
        stats,
    };
    let thread = std::thread::Builder::new()
        .name(format!("nvmf-tcp-pg{index}"))
        .spawn(move || group.run())?;
    Ok((handle, thread))
}

/// Transient Transport Error: what a command whose data failed its digest completes with.
fn transient_transport_error() -> Status {
    Status::new(Sct::Generic, generic::TRANSIENT_TRANSPORT_ERROR)
}

fn sgl_type_invalid() -> Status {
    Status::generic(generic::SGL_DESCRIPTOR_TYPE_INVALID).at(sqe::offset::DPTR + 15, 4)
}

/// Interprets the command's SGL1 for NVMe/TCP: an in-capsule data block (sub type
/// OFFSET, within the `icd_len` bytes the capsule carried) or a transport data block
/// (R2T/H2CData, C2HData). Returns where the data is and its length.
fn decode_sgl(sqe_bytes: &[u8], icd_len: usize) -> Result<(HostData, u32), Status> {
    let dptr = sqe_bytes
        .get(usize::from(sqe::offset::DPTR)..usize::from(sqe::offset::DPTR) + 16)
        .unwrap_or(&[]);
    let desc = SglDescriptor::parse(dptr).map_err(|_| sgl_type_invalid())?;
    match desc {
        SglDescriptor::DataBlock {
            addr,
            len,
            subtype: st,
        } if st == subtype::OFFSET => {
            if len == 0 {
                return Ok((HostData::None, 0));
            }
            match addr.checked_add(u64::from(len)) {
                Some(end) if end <= icd_len as u64 => Ok((
                    HostData::InCapsule {
                        offset: addr as usize,
                        len,
                    },
                    len,
                )),
                _ => {
                    debug!(
                        addr,
                        len, icd_len, "in-capsule SGL beyond the capsule's data"
                    );
                    Err(Status::generic(generic::SGL_OFFSET_INVALID).at(sqe::offset::DPTR, 0))
                }
            }
        }
        SglDescriptor::TransportDataBlock { len } => {
            if len == 0 {
                Ok((HostData::None, 0))
            } else {
                Ok((HostData::Transport { len }, len))
            }
        }
        other => {
            debug!(?other, "SGL descriptor NVMe/TCP does not carry");
            Err(sgl_type_invalid())
        }
    }
}

impl Group {
    fn run(mut self) {
        let mut reaped = Vec::with_capacity(EPOLL_BATCH);
        let start = Instant::now();
        let mut last_work = start;
        let mut last_timer = start;
        let mut prev_work = 1usize;
        debug!(group = self.index, mode = ?self.mode, "NVMe/TCP poll group running");
        while !self.stop.load(Ordering::Acquire) {
            let mut work = 0usize;
            if self.pending.load(Ordering::Acquire) {
                self.pending.store(false, Ordering::Release);
                while let Ok(nc) = self.rx.try_recv() {
                    self.add_conn(nc);
                    work += 1;
                }
            }
            let now = Instant::now();
            self.ex.now = now;
            let spin = match self.mode {
                PollMode::Poll => true,
                PollMode::Adaptive => now.duration_since(last_work) < ADAPTIVE_SPIN,
                PollMode::Interrupt => false,
            };
            if spin && self.live <= DIRECT_READ_MAX {
                work += self.read_all();
            } else if spin {
                // Many sockets: one epoll_wait finds those with data.
                work += self.wait_and_read(EpollTimeout::ZERO);
            } else {
                // Block only when the previous iteration found nothing to do.
                let timeout = if prev_work == 0 && work == 0 {
                    EpollTimeout::from(MAX_SLEEP_MS)
                } else {
                    EpollTimeout::ZERO
                };
                work += self.wait_and_read(timeout);
            }
            if self.ex.in_flight() > 0 {
                self.ex.poll_backends(&mut reaped);
                work += reaped.len();
                for (t, res) in reaped.drain(..) {
                    self.on_backend(t, res);
                }
            }
            self.serve_events();
            if !self.waiters.is_empty() {
                self.retry_waiters();
            }
            let now = Instant::now();
            if now.duration_since(last_timer) >= TIMER_PERIOD {
                last_timer = now;
                self.timers(now);
            }
            self.flush();
            if work > 0 {
                last_work = now;
            } else if spin {
                std::hint::spin_loop();
            }
            prev_work = work;
        }
        self.shutdown_all();
        debug!(group = self.index, "NVMe/TCP poll group stopped");
    }

    // ---- connections ------------------------------------------------------------------

    fn add_conn(&mut self, nc: NewConn) {
        bump(&self.stats.accepted, 1);
        let reader = match PduReader::controller(self.cfg) {
            Ok(r) => r,
            Err(e) => {
                warn!(peer = %nc.peer, "NVMe/TCP: cannot set up the framer: {e}");
                self.load.fetch_sub(1, Ordering::Relaxed);
                return;
            }
        };
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let ci = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let Ok(ci16) = u16::try_from(ci) else {
            warn!(peer = %nc.peer, "NVMe/TCP: too many connections in poll group {}", self.index);
            self.load.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        let ev = EpollEvent::new(
            EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP,
            conn_token(gen, ci16),
        );
        if let Err(e) = self.epoll.add(nc.stream.as_fd(), ev) {
            warn!(peer = %nc.peer, "NVMe/TCP: epoll_ctl failed: {e}");
            self.load.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        self.live += 1;
        let now = Instant::now();
        // Before Connect: one slot, the queue id and size come from the Connect.
        let ctx = QueueCtx::new(Qid(0), 0, nc.port);
        let conn = Conn {
            gen,
            sock: Some(nc.stream),
            peer: nc.peer,
            reader: Some(reader),
            writer: None,
            r2t_limit: 1,
            ctx,
            connected: false,
            connect_cattr: 0,
            sqflow_disabled: false,
            slots: vec![Slot::new()],
            free: vec![0],
            icd: None,
            neg: None,
            tx: TxQueue::default(),
            interest: EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP,
            hdr: [0; MAX_TERM_DATA],
            hdr_len: 0,
            last_progress: now,
            wait_start: None,
            dead: false,
        };
        debug!(group = self.index, peer = %conn.peer, conn = ci, "NVMe/TCP connection added");
        if let Some(slot) = self.conns.get_mut(ci) {
            *slot = Some(conn);
        }
        bump(&self.stats.connections, 1);
    }

    fn conn_mut(&mut self, ci: u16) -> Option<&mut Conn> {
        match self.conns.get_mut(usize::from(ci)) {
            Some(Some(c)) => Some(c),
            _ => None,
        }
    }

    fn mark_dirty(&mut self, ci: u16) {
        if !self.dirty.contains(&ci) {
            self.dirty.push(ci);
        }
    }

    /// Reads every live connection (spinning). Returns how many had data.
    fn read_all(&mut self) -> usize {
        let mut n = 0;
        self.spins = self.spins.wrapping_add(1);
        // A connected admin queue carries few commands: it is read on every
        // ADMIN_READ_EVERY-th pass only, which saves a `read` per pass on the I/O path.
        let admin_turn = self.spins.is_multiple_of(ADMIN_READ_EVERY);
        for ci in 0..self.conns.len() {
            let live = matches!(
                self.conns.get(ci),
                Some(Some(c)) if !c.dead && c.tx.queued() <= TX_HIGH_WATER
                    && (admin_turn || !c.connected || !c.ctx.qid.is_admin())
            );
            if live {
                n += self.service_read(ci as u16);
            }
        }
        n
    }

    /// Waits on epoll (sockets, backends, the wake eventfd) and serves what is ready.
    fn wait_and_read(&mut self, timeout: EpollTimeout) -> usize {
        self.register_backend_fds();
        if timeout != EpollTimeout::ZERO {
            bump(&self.stats.sleeps, 1);
        }
        let n = match self.epoll.wait(&mut self.events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => {
                warn!(group = self.index, "epoll_wait failed: {e}");
                0
            }
        };
        let mut work = 0;
        for i in 0..n {
            let Some(ev) = self.events.get(i).copied() else {
                break;
            };
            let token = ev.data();
            if token == WAKE_TOKEN {
                let _ = self.wake.read();
                continue;
            }
            if token & BACKEND_TOKEN != 0 {
                // The channel clears its eventfd when reaped; drain it in case nothing
                // was in flight to reap, so a level-triggered wait does not spin.
                let mut b = [0u8; 8];
                let _ = nix::unistd::read((token & 0xFFFF_FFFF) as RawFd, &mut b);
                work += 1;
                continue;
            }
            let (gen, ci) = ((token >> 16) as u16, token as u16);
            let ok =
                matches!(self.conns.get(usize::from(ci)), Some(Some(c)) if c.gen == gen && !c.dead);
            if !ok {
                continue;
            }
            let fl = ev.events();
            if fl.intersects(EpollFlags::EPOLLOUT) {
                self.flush_tx(ci);
            }
            if fl.intersects(
                EpollFlags::EPOLLIN
                    | EpollFlags::EPOLLRDHUP
                    | EpollFlags::EPOLLHUP
                    | EpollFlags::EPOLLERR,
            ) {
                work += self.service_read(ci).max(1);
            }
        }
        work
    }

    /// Adds eventfds of backend channels opened since the last wait.
    fn register_backend_fds(&mut self) {
        for fd in self.ex.event_fds() {
            if self.backend_fds.contains(&fd) || fd < 0 {
                continue;
            }
            // SAFETY: `fd` is the eventfd of a backend channel owned by `self.ex`;
            // channels are never closed while the group runs, so the descriptor stays
            // open for as long as it is registered (epoll drops it when it closes).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            let ev = EpollEvent::new(EpollFlags::EPOLLIN, BACKEND_TOKEN | fd as u64);
            if let Err(e) = self.epoll.add(bfd, ev) {
                warn!(
                    group = self.index,
                    fd, "cannot watch a backend eventfd: {e}"
                );
            }
            self.backend_fds.push(fd);
        }
    }

    /// Reads what the socket has and runs the PDUs. Returns 1 if bytes arrived.
    fn service_read(&mut self, ci: u16) -> usize {
        let mut rx = std::mem::take(&mut self.rxbuf);
        let mut got = 0;
        for _ in 0..READS_PER_CONN {
            let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
                break;
            };
            if c.dead {
                break;
            }
            let Some(sock) = c.sock.as_ref() else { break };
            let r = (&*sock).read(&mut rx);
            bump(&self.stats.socket_reads, 1);
            match r {
                Ok(0) => {
                    self.kill(ci, "host closed the connection", false);
                    got = 1;
                    break;
                }
                Ok(n) => {
                    c.last_progress = self.ex.now;
                    got = 1;
                    self.on_bytes(ci, rx.get(..n).unwrap_or(&[]));
                    if n < rx.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.kill(ci, &format!("socket read failed: {e}"), false);
                    got = 1;
                    break;
                }
            }
        }
        self.rxbuf = rx;
        got
    }

    /// Feeds bytes to the connection's framer and runs each complete PDU.
    fn on_bytes(&mut self, ci: u16, mut input: &[u8]) {
        let Some(mut reader) = self.conn_mut(ci).and_then(|c| c.reader.take()) else {
            return;
        };
        loop {
            // A PDU that lies whole in `input` is checked and handled where it is.
            let (used, out) = reader.read(input);
            if let Some(c) = self.conn_mut(ci) {
                let room = HDR_KEEP.saturating_sub(c.hdr_len);
                let take = used.min(room);
                if let (Some(dst), Some(src)) = (
                    c.hdr.get_mut(c.hdr_len..c.hdr_len + take),
                    input.get(..take),
                ) {
                    dst.copy_from_slice(src);
                    c.hdr_len += take;
                }
            }
            input = input.get(used..).unwrap_or(&[]);
            match out {
                None => break,
                Some(Ok(Pdu::IcReq(_))) => {
                    let n = reader.negotiated();
                    self.on_icreq(ci, n);
                }
                Some(Ok(pdu)) => self.on_pdu(ci, pdu),
                Some(Err(e)) if !e.is_fatal() => self.on_digest_error(ci, e),
                Some(Err(e)) => {
                    self.framer_fatal(ci, &reader, e);
                    return;
                }
            }
            let Some(c) = self.conn_mut(ci) else { return };
            c.hdr_len = 0;
            if c.dead {
                return;
            }
            if input.is_empty() {
                break;
            }
        }
        if let Some(c) = self.conn_mut(ci) {
            if !c.dead {
                c.reader = Some(reader);
            }
        }
    }

    /// A fatal framer error: send its termination request (if it has one) and close.
    fn framer_fatal(&mut self, ci: u16, reader: &PduReader, e: FramerError) {
        bump(&self.stats.protocol_errors, 1);
        let Some(c) = self.conn_mut(ci) else { return };
        let start = c.tx.bytes.len();
        let sent = reader.termination_request(&mut c.tx.bytes);
        match e.fes() {
            Some(fes) if sent => warn!(
                peer = %c.peer, qid = %c.ctx.qid,
                "NVMe/TCP protocol error: {e}; sending C2HTermReq FES {fes:#x} ({}) FEI {:#x} ({} bytes)",
                term_fes_name(fes), e.fei(), c.tx.bytes.len() - start
            ),
            _ => warn!(peer = %c.peer, qid = %c.ctx.qid, "NVMe/TCP protocol error: {e}; closing"),
        }
        self.kill(ci, "protocol error", true);
    }

    /// An error this transport finds in a PDU the framer accepted (an H2CData naming
    /// no transfer or outside its R2T window): C2HTermReq with the PDU's header, close.
    fn fatal_term(&mut self, ci: u16, fes: u16, fei: u32, hlen: usize, reason: &str) {
        bump(&self.stats.protocol_errors, 1);
        let Some(c) = self.conn_mut(ci) else { return };
        let hdr: Vec<u8> = c.header().get(..hlen).unwrap_or(c.header()).to_vec();
        encode_term_req(Role::Controller, fes, fei, &hdr, &mut c.tx.bytes);
        warn!(
            peer = %c.peer, qid = %c.ctx.qid,
            "NVMe/TCP protocol error: {reason}; sending C2HTermReq FES {fes:#x} ({}) FEI {fei:#x}",
            term_fes_name(fes)
        );
        self.kill(ci, "protocol error", true);
    }

    fn on_icreq(&mut self, ci: u16, n: Option<Negotiated>) {
        let opts_cap = self.opts.max_r2t_per_command.max(1);
        let Some(c) = self.conn_mut(ci) else { return };
        let Some(n) = n else {
            self.kill(ci, "ICReq without negotiated parameters", false);
            return;
        };
        encode_icresp(&icresp_params(&n), &mut c.tx.bytes);
        c.writer = Some(PduWriter::new(Role::Controller, &n));
        c.neg = Some(n);
        c.r2t_limit = n.maxr2t.saturating_add(1).min(opts_cap) as usize;
        debug!(
            peer = %c.peer, hdgst = n.header_digest, ddgst = n.data_digest, hpda = n.hpda,
            maxr2t = n.maxr2t, maxh2cdata = n.maxh2cdata, "NVMe/TCP connection initialized"
        );
        self.mark_dirty(ci);
    }

    fn on_pdu(&mut self, ci: u16, pdu: Pdu<'_>) {
        match pdu {
            Pdu::CapsuleCmd { sqe, data } => self.on_capsule(ci, &sqe, data),
            Pdu::H2CData {
                cid,
                ttag,
                datao,
                data,
                ..
            } => {
                let datal = u32::try_from(data.len()).unwrap_or(u32::MAX);
                self.on_h2c(ci, cid, ttag, datao, datal, Some(data));
            }
            Pdu::H2CTermReq { fes, fei, .. } => {
                if let Some(c) = self.conn_mut(ci) {
                    warn!(
                        peer = %c.peer, qid = %c.ctx.qid,
                        "host terminated the NVMe/TCP connection: FES {fes:#x} ({}) FEI {fei:#x}",
                        term_fes_name(fes)
                    );
                }
                self.kill(ci, "host sent H2CTermReq", false);
            }
            other => {
                // The controller framer never yields controller-to-host PDUs.
                let t = other.pdu_type();
                self.fatal_term(
                    ci,
                    term_fes::INVALID_HEADER_FIELD,
                    offset::TYPE,
                    HDR_LEN,
                    &format!("unexpected PDU type {t:#x}"),
                );
            }
        }
    }

    /// A data digest error: the PDU's command fails with Transient Transport Error
    /// and its data is dropped.
    fn on_digest_error(&mut self, ci: u16, e: FramerError) {
        bump(&self.stats.digest_errors, 1);
        let FramerError::DataDigest { pdu_type: t, .. } = e else {
            return;
        };
        let Some(c) = self.conn_mut(ci) else { return };
        warn!(peer = %c.peer, qid = %c.ctx.qid, "NVMe/TCP: {e}; failing the command");
        match t {
            pdu_type::CMD => {
                let mut sqe_bytes = [0u8; SQE_LEN];
                let Some(src) = c.header().get(HDR_LEN..CMD_HDR_LEN) else {
                    self.kill(ci, "data digest error without a header", false);
                    return;
                };
                sqe_bytes.copy_from_slice(src);
                self.respond_unslotted(ci, &sqe_bytes, transient_transport_error());
            }
            pdu_type::H2C_DATA => {
                let Some(h) = c.header().get(..DATA_HDR_LEN) else {
                    self.kill(ci, "data digest error without a header", false);
                    return;
                };
                let d = DataPdu::new_unchecked(h);
                let (cid, ttag, datao, datal) =
                    (d.command_id(), d.ttag(), d.data_offset(), d.data_length());
                self.on_h2c(ci, cid, ttag, datao, datal, None);
            }
            _ => self.kill(ci, "data digest error on an unexpected PDU", false),
        }
    }

    /// Answers a command that gets no slot (its capsule failed the data digest).
    fn respond_unslotted(&mut self, ci: u16, sqe_bytes: &[u8; SQE_LEN], status: Status) {
        let Some(c) = self.conn_mut(ci) else { return };
        let Some(w) = c.writer else { return };
        let mut req = Request::new();
        req.reset(sqe_bytes);
        req.fail(status);
        c.ctx.advance_sq_head();
        let mut cqe = [0u8; CQE_LEN];
        c.ctx.fill_cqe(&req, &mut cqe);
        if w.capsule_resp(&cqe, &mut c.tx.bytes).is_ok() {
            bump(&self.stats.responses, 1);
        }
        self.mark_dirty(ci);
    }

    // ---- commands -------------------------------------------------------------------

    fn on_capsule(&mut self, ci: u16, sqe_bytes: &[u8; SQE_LEN], data: &[u8]) {
        let target = self.target.clone();
        let icd_slot = self.cfg.max_icd as usize;
        bump(&self.stats.commands, 1);
        let Some(c) = self.conn_mut(ci) else { return };
        if c.dead {
            return;
        }
        let Some(si) = c.free.pop() else {
            warn!(
                peer = %c.peer, qid = %c.ctx.qid, slots = c.slots.len(),
                "host sent more commands than its queue holds; closing the connection"
            );
            self.kill(ci, "submission queue overrun", false);
            return;
        };
        let Conn {
            ctx,
            slots,
            icd,
            connect_cattr,
            ..
        } = c;
        let nslots = slots.len();
        let c_gen = c.gen;
        let Some(slot) = slots.get_mut(usize::from(si)) else {
            return;
        };
        slot.state = SlotState::Received;
        slot.req.reset(sqe_bytes);
        slot.failed = None;
        slot.windows.clear();
        slot.next_r2t = 0;
        if ctx.ctrl.is_none() {
            // The queue this connection serves is named by its Connect.
            let cc = ConnectCmd::new_unchecked(&sqe_bytes[..]);
            let s = cc.as_sqe();
            if s.opcode() == FABRICS_OPCODE && s.fctype() == fctype::CONNECT {
                ctx.qid = Qid(cc.qid());
                ctx.sqsize = cc.sqsize();
                *connect_cattr = cc.cattr();
            }
        }
        ctx.advance_sq_head();
        let decoded = decode_sgl(sqe_bytes, data.len());
        let parsed = match decoded {
            Ok((host, len)) => core::parse(ctx, &target, &mut slot.req, len).map(|()| host),
            // A command without data needs no SGL (SPDK reads the SGL only when the
            // command moves data): an SGL we cannot use fails only commands with data.
            Err(sgl_st) => match core::parse(ctx, &target, &mut slot.req, 0) {
                Ok(()) => Ok(HostData::None),
                Err(st) if st.is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID) => Err(sgl_st),
                Err(st) => Err(st),
            },
        };
        let host = match parsed {
            Ok(h) => h,
            Err(st) => {
                slot.req.fail(st);
                self.complete(ci, si);
                self.after_connect(ci);
                return;
            }
        };
        let plan = slot.req.plan;
        match (plan.dir, host) {
            (_, _) if plan.len == 0 => self.execute(ci, si),
            (DataDir::HostToCtrl, HostData::InCapsule { offset: off, len }) => {
                let need = nslots * icd_slot;
                if icd.as_ref().is_none_or(|b| b.len() < need) {
                    *icd = DmaBuffer::new(need).map(Arc::new);
                }
                let base = usize::from(si) * icd_slot;
                let src = data.get(off..off + len as usize);
                let dst = icd
                    .as_ref()
                    .and_then(|b| DmaSlice::new(b.clone(), base, len as usize));
                match (src, dst) {
                    (Some(src), Some(dst)) if dst.buf.write_at(base, src) => {
                        slot.req.data = Some(dst);
                        self.execute(ci, si);
                    }
                    _ => {
                        warn!("no memory for in-capsule data");
                        slot.req
                            .fail(Status::new(Sct::Generic, generic::INTERNAL_ERROR));
                        self.complete(ci, si);
                    }
                }
            }
            (DataDir::HostToCtrl | DataDir::CtrlToHost, HostData::Transport { .. }) => {
                slot.state = SlotState::WaitBuf;
                if self.waiters.is_empty() {
                    self.start_data(ci, si);
                } else {
                    // Buffers go to commands in arrival order.
                    let gen = c_gen;
                    self.waiters.push_back((ci, gen, si));
                }
            }
            (DataDir::CtrlToHost, _) => {
                // Read data travels in C2HData PDUs: the SGL must be a transport one.
                slot.req.fail(sgl_type_invalid());
                self.complete(ci, si);
            }
            (DataDir::HostToCtrl | DataDir::None, _) => {
                slot.req.fail(
                    Status::generic(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0),
                );
                self.complete(ci, si);
            }
        }
        self.after_connect(ci);
    }

    /// Once the Connect succeeded: size the slots for the queue and apply CATTR.
    fn after_connect(&mut self, ci: u16) {
        let Some(c) = self.conn_mut(ci) else { return };
        if c.connected || c.dead || c.ctx.ctrl.is_none() {
            return;
        }
        c.connected = true;
        c.sqflow_disabled = c.connect_cattr & cattr::DISABLE_SQFLOW != 0;
        let depth = usize::from(c.ctx.sqsize) + 1;
        while c.slots.len() < depth {
            c.free.push(c.slots.len() as u16);
            c.slots.push(Slot::new());
        }
        // Sized again on first use.
        c.icd = None;
        debug!(
            peer = %c.peer, qid = %c.ctx.qid, depth, sqflow_disabled = c.sqflow_disabled,
            "NVMe/TCP queue connected"
        );
    }

    /// Gets a pool buffer for a transport transfer, then sends R2Ts or executes.
    fn start_data(&mut self, ci: u16, si: u16) {
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return;
        };
        let gen = c.gen;
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        let len = slot.req.plan.len;
        let Some(buf) = self.pool.alloc(len) else {
            if len > self.target.params.max_io_size {
                // Cannot be had at all (parse refuses these; never wait forever).
                slot.req
                    .fail(Status::generic(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0));
                self.complete(ci, si);
                return;
            }
            slot.state = SlotState::WaitBuf;
            self.waiters.push_back((ci, gen, si));
            return;
        };
        bump(&self.stats.buffers_in_use, 1);
        slot.req.data = Some(buf.slice.clone());
        slot.buf = Some(buf);
        if slot.req.plan.dir == DataDir::HostToCtrl {
            slot.state = SlotState::WaitData;
            self.issue_r2ts(ci, si);
        } else {
            self.execute(ci, si);
        }
    }

    /// Sends R2Ts for the command's next windows, up to the R2T limit.
    fn issue_r2ts(&mut self, ci: u16, si: u16) {
        let maxh2c = self.cfg.maxh2cdata.max(1);
        let Some(c) = self.conn_mut(ci) else { return };
        let Some(w) = c.writer else { return };
        let limit = c.r2t_limit;
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        let len = slot.req.plan.len;
        let cid = slot.req.cid();
        let mut n = 0;
        while slot.windows.len() < limit && slot.next_r2t < len {
            let off = slot.next_r2t;
            let l = (len - off).min(maxh2c);
            if w.r2t(cid, si, off, l, &mut c.tx.bytes).is_err() {
                break;
            }
            slot.windows.push((off, off + l));
            slot.next_r2t = off + l;
            n += 1;
        }
        bump(&self.stats.r2ts, n);
        self.mark_dirty(ci);
    }

    /// H2CData (or one that failed its data digest, `data` None): checks it continues
    /// an outstanding R2T window of the command its TTAG names, stores the data, and
    /// moves the command on when its data is complete.
    fn on_h2c(
        &mut self,
        ci: u16,
        cid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        data: Option<&[u8]>,
    ) {
        bump(&self.stats.h2c_pdus, 1);
        let Some(c) = self.conn_mut(ci) else { return };
        let waiting = c
            .slots
            .get(usize::from(ttag))
            .map(|s| (s.state == SlotState::WaitData, s.req.cid()));
        match waiting {
            Some((true, scid)) if scid == cid => {}
            Some((true, scid)) => {
                return self.fatal_term(
                    ci,
                    term_fes::INVALID_HEADER_FIELD,
                    offset::COMMAND_ID,
                    DATA_HDR_LEN,
                    &format!(
                        "H2CData for command {cid:#x} carries TTAG {ttag:#x} of command {scid:#x}"
                    ),
                );
            }
            _ => {
                return self.fatal_term(
                    ci,
                    term_fes::INVALID_HEADER_FIELD,
                    offset::TTAG,
                    DATA_HDR_LEN,
                    &format!("H2CData with TTAG {ttag:#x} (command {cid:#x}) but no R2T outstanding for it"),
                );
            }
        }
        if datal == 0 {
            return self.fatal_term(
                ci,
                term_fes::INVALID_HEADER_FIELD,
                offset::DATA_LENGTH,
                DATA_HDR_LEN,
                &format!("H2CData for command {cid:#x} without data"),
            );
        }
        let Some(slot) = c.slots.get_mut(usize::from(ttag)) else {
            return;
        };
        let end = datao.checked_add(datal);
        let win = slot.windows.iter().position(|w| w.0 == datao);
        let (wi, end) = match (win, end) {
            (Some(wi), Some(end)) if slot.windows.get(wi).is_some_and(|w| end <= w.1) => (wi, end),
            _ => {
                let windows = format!("{:?}", slot.windows);
                return self.fatal_term(
                    ci,
                    term_fes::DATA_OUT_OF_RANGE,
                    0,
                    DATA_HDR_LEN,
                    &format!(
                        "H2CData for command {cid:#x} at offset {datao} length {datal} is not the next data of an R2T window (outstanding [offset, end): {windows})"
                    ),
                );
            }
        };
        match data {
            Some(d) if slot.failed.is_none() => slot.req.write_data(datao as usize, d),
            Some(_) => {}
            None => slot.failed = Some(transient_transport_error()),
        }
        if let Some(w) = slot.windows.get_mut(wi) {
            w.0 = end;
            if w.0 >= w.1 {
                slot.windows.remove(wi);
            }
        }
        let len = slot.req.plan.len;
        if let Some(st) = slot.failed {
            if slot.windows.is_empty() {
                // Never executed: the data that failed its digest reaches nothing.
                slot.req.fail(st);
                self.complete(ci, ttag);
            }
        } else if slot.windows.is_empty() && slot.next_r2t >= len {
            self.execute(ci, ttag);
        } else {
            self.issue_r2ts(ci, ttag);
        }
    }

    fn execute(&mut self, ci: u16, si: u16) {
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return;
        };
        let t = tag(c.gen, ci, si);
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        slot.state = SlotState::Executing;
        match core::execute(&mut c.ctx, &mut self.ex, &mut slot.req, t) {
            Outcome::Done => self.complete(ci, si),
            Outcome::Pending => {}
            Outcome::Held => slot.state = SlotState::Held,
        }
    }

    fn on_backend(&mut self, t: u64, res: Result<(), BackendError>) {
        let (gen, ci, si) = tag_parts(t);
        let Some(c) = self.conn_mut(ci) else { return };
        if c.gen != gen {
            return;
        }
        let dead = c.dead;
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.state != SlotState::Executing {
            return;
        }
        if !core::io_done(&mut slot.req, res) {
            return;
        }
        if dead {
            self.release_slot(ci, si);
            self.maybe_free(ci);
            return;
        }
        self.complete(ci, si);
    }

    /// Queues the controller-to-host data (if any) and the response of a finished
    /// command, then frees its slot.
    fn complete(&mut self, ci: u16, si: u16) {
        let chunk = self.opts.c2h_chunk.max(1) as usize;
        let Some(c) = self.conn_mut(ci) else { return };
        if c.dead {
            self.release_slot(ci, si);
            self.maybe_free(ci);
            return;
        }
        let (Some(w), Some(neg)) = (c.writer, c.neg) else {
            self.release_slot(ci, si);
            return;
        };
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        let mut c2h = 0u64;
        let mut resp = true;
        let mut err = None;
        let mut spare = None;
        let plan = slot.req.plan;
        let cid = slot.req.cid();
        if plan.dir == DataDir::CtrlToHost && slot.req.status.is_success() && plan.len > 0 {
            if let Some(b) = slot.buf.take() {
                let arena = b.slice.buf.clone();
                let base = b.slice.offset;
                // SAFETY: the backend operation that filled this buffer completed (or
                // the command ran synchronously), and the buffer stays out of the pool
                // until the last PDU using it is written, so nothing writes these bytes
                // while they are read here or queued for the socket.
                let data = unsafe { arena.slice(base, b.slice.len) }.unwrap_or(&[]);
                let total = data.len();
                // The last chunk sent from the buffer itself takes the buffer along.
                let last_zc = data.chunks(chunk).rposition(|p| p.len() >= ZERO_COPY_MIN);
                let mut buf = Some(b);
                let mut off = 0usize;
                for (i, piece) in data.chunks(chunk).enumerate() {
                    let last = off + piece.len() >= total;
                    let success = last && c.sqflow_disabled;
                    if piece.len() >= ZERO_COPY_MIN {
                        c2h_header(&neg, cid, off as u32, piece, last, success, &mut c.tx.bytes);
                        let seg = DmaSlice::new(arena.clone(), base + off, piece.len());
                        let release = if Some(i) == last_zc { buf.take() } else { None };
                        match seg {
                            Some(seg) => c.tx.push_data(seg, release),
                            None => {
                                spare = release;
                                err = Some(nvmf_common::wire::WireError::Invalid(
                                    "C2H data outside its buffer",
                                ));
                                break;
                            }
                        }
                        c2h_trailer(&neg, piece, &mut c.tx.bytes);
                    } else if let Err(e) =
                        w.c2h_data(cid, off as u32, piece, last, success, &mut c.tx.bytes)
                    {
                        err = Some(e);
                        break;
                    }
                    off += piece.len();
                    c2h += 1;
                }
                // Not queued by reference: back to the pool with the slot.
                if let Some(b) = buf.take().or(spare.take()) {
                    slot.buf = Some(b);
                }
                // SQ flow control disabled: SUCCESS on the last C2HData replaces the
                // response capsule (as Linux nvmet does).
                resp = !(c.sqflow_disabled && c2h > 0);
            }
        }
        if resp {
            let mut cqe = [0u8; CQE_LEN];
            c.ctx.fill_cqe(&slot.req, &mut cqe);
            if let Err(e) = w.capsule_resp(&cqe, &mut c.tx.bytes) {
                err = Some(e);
            }
        }
        let disconnect = c.ctx.disconnect;
        bump(&self.stats.c2h_pdus, c2h);
        if resp {
            bump(&self.stats.responses, 1);
        }
        self.release_slot(ci, si);
        self.mark_dirty(ci);
        if let Some(e) = err {
            warn!("cannot encode a PDU: {e}");
            self.kill(ci, "PDU encoding failed", true);
        } else if disconnect {
            self.kill(ci, "host sent Disconnect", true);
        }
    }

    /// Returns a slot (and its pool buffer) for reuse.
    fn release_slot(&mut self, ci: u16, si: u16) {
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return;
        };
        let Some(slot) = c.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.state == SlotState::Free && slot.buf.is_none() {
            return;
        }
        slot.req.release();
        slot.windows.clear();
        slot.failed = None;
        if let Some(b) = slot.buf.take() {
            self.pool.free(b);
            let s = &self.stats.buffers_in_use;
            s.store(
                s.load(Ordering::Relaxed).saturating_sub(1),
                Ordering::Relaxed,
            );
        }
        if slot.state != SlotState::Free {
            slot.state = SlotState::Free;
            c.free.push(si);
        }
    }

    /// Commands that waited for a pool buffer try again, oldest first.
    fn retry_waiters(&mut self) {
        for _ in 0..self.waiters.len() {
            let Some((ci, gen, si)) = self.waiters.pop_front() else {
                break;
            };
            let ok = matches!(
                self.conns.get(usize::from(ci)),
                Some(Some(c)) if c.gen == gen && !c.dead
                    && c.slots.get(usize::from(si)).is_some_and(|s| s.state == SlotState::WaitBuf)
            );
            if ok {
                let before = self.waiters.len();
                self.start_data(ci, si);
                if self.waiters.len() > before {
                    // Still no buffer: it stays first in line, the rest keep waiting.
                    if let Some(w) = self.waiters.pop_back() {
                        self.waiters.push_front(w);
                    }
                    break;
                }
            }
        }
    }

    /// Completes held AERs of admin queues whose controller has events.
    fn serve_events(&mut self) {
        for ci in 0..self.conns.len() {
            while let Some(Some(c)) = self.conns.get_mut(ci) {
                if c.dead {
                    break;
                }
                let Some((t, ev)) = c.ctx.next_aer_completion() else {
                    break;
                };
                let (_, _, si) = tag_parts(t);
                match c.slots.get_mut(usize::from(si)) {
                    Some(slot) if slot.state == SlotState::Held => {
                        slot.req.dw0 = ev;
                        self.complete(ci as u16, si);
                    }
                    _ => warn!(qid = %c.ctx.qid, "held AER tag {t:#x} names no held command"),
                }
            }
        }
    }

    fn timers(&mut self, now: Instant) {
        let stall = self.opts.stall_timeout;
        let mut kill = Vec::new();
        for (ci, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            if c.dead {
                continue;
            }
            if let Some(ctrl) = &c.ctx.ctrl {
                if c.ctx.qid.is_admin() {
                    ctrl.check_keep_alive(now);
                }
                if ctrl.is_dead() {
                    kill.push((ci as u16, "controller is gone".to_string()));
                    continue;
                }
            }
            if c.waiting_for_host() {
                let since = *c.wait_start.get_or_insert(now);
                let since = since.max(c.last_progress);
                if now.duration_since(since) > stall {
                    kill.push((
                        ci as u16,
                        format!(
                            "no progress from the host for {} ms with work outstanding",
                            stall.as_millis()
                        ),
                    ));
                }
            } else {
                c.wait_start = None;
            }
        }
        for (ci, why) in kill {
            self.kill(ci, &why, true);
        }
        // Sockets of closed connections: discard what arrives until the host closes.
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

    // ---- output -----------------------------------------------------------------------

    /// Issues backend I/O, then writes every dirty connection's PDUs (one `write` each).
    fn flush(&mut self) {
        self.ex.flush();
        let mut retry = Vec::new();
        while let Some(ci) = self.dirty.pop() {
            if !self.flush_tx(ci) {
                retry.push(ci);
            }
        }
        // Connections the socket refused: again next iteration (and on EPOLLOUT).
        self.dirty = retry;
    }

    /// Writes what the connection has queued. False when bytes remain.
    fn flush_tx(&mut self, ci: u16) -> bool {
        let now = self.ex.now;
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return true;
        };
        if c.dead {
            return true;
        }
        let Some(sock) = c.sock.as_ref() else {
            return true;
        };
        let mut failed = None;
        let mut freed = Vec::new();
        while c.tx.pending() {
            let iov = c.tx.iovecs();
            let r = (&*sock).write_vectored(&iov);
            drop(iov);
            bump(&self.stats.socket_writes, 1);
            match r {
                Ok(0) => {
                    failed = Some("socket write returned 0".to_string());
                    break;
                }
                Ok(n) => {
                    c.tx.advance(n, &mut freed);
                    c.last_progress = now;
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
        for b in freed {
            self.pool.free(b);
            let s = &self.stats.buffers_in_use;
            s.store(
                s.load(Ordering::Relaxed).saturating_sub(1),
                Ordering::Relaxed,
            );
        }
        if let Some(why) = failed {
            self.kill(ci, &why, false);
            return true;
        }
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return true;
        };
        let Some(sock) = c.sock.as_ref() else {
            return true;
        };
        // Read while the backlog is small (a host that does not read its responses
        // stops being read); wait for room to write while bytes wait.
        let mut want = EpollFlags::empty();
        if c.tx.queued() <= TX_HIGH_WATER {
            want |= EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        }
        if !done {
            want |= EpollFlags::EPOLLOUT;
        }
        if want != c.interest {
            let mut ev = EpollEvent::new(want, conn_token(c.gen, ci));
            if self.epoll.modify(sock.as_fd(), &mut ev).is_ok() {
                c.interest = want;
            }
        }
        done
    }

    // ---- teardown ---------------------------------------------------------------------

    /// Ends a connection: what is queued (responses, a termination request) gets one
    /// last write, the socket closes (after draining, when `linger`), the queue is torn
    /// down, and slots not waiting for the backend are released. The connection is
    /// freed once its backend I/O completed.
    fn kill(&mut self, ci: u16, why: &str, linger: bool) {
        let Some(Some(c)) = self.conns.get_mut(usize::from(ci)) else {
            return;
        };
        if c.dead {
            return;
        }
        let mut freed = Vec::new();
        if let Some(sock) = c.sock.as_ref() {
            while c.tx.pending() {
                let iov = c.tx.iovecs();
                let r = (&*sock).write_vectored(&iov);
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
        c.dead = true;
        self.live = self.live.saturating_sub(1);
        info!(peer = %c.peer, qid = %c.ctx.qid, "NVMe/TCP connection closed: {why}");
        c.ctx.teardown();
        c.reader = None;
        c.tx = TxQueue::default();
        c.icd = None;
        if let Some(sock) = c.sock.take() {
            let _ = self.epoll.delete(sock.as_fd());
            let _ = sock.shutdown(Shutdown::Write);
            if linger {
                self.closing.push((sock, Instant::now()));
            }
        }
        bump(&self.stats.closed, 1);
        for b in freed {
            self.pool.free(b);
            let s = &self.stats.buffers_in_use;
            s.store(
                s.load(Ordering::Relaxed).saturating_sub(1),
                Ordering::Relaxed,
            );
        }
        let n = match self.conns.get(usize::from(ci)) {
            Some(Some(c)) => c.slots.len(),
            _ => 0,
        };
        for si in 0..n {
            let executing = matches!(
                self.conns.get(usize::from(ci)),
                Some(Some(c)) if c.slots.get(si).is_some_and(|s| s.state == SlotState::Executing)
            );
            if !executing {
                self.release_slot(ci, si as u16);
            }
        }
        self.maybe_free(ci);
    }

    /// Frees a dead connection once none of its backend I/O is in flight.
    fn maybe_free(&mut self, ci: u16) {
        let free = match self.conns.get(usize::from(ci)) {
            Some(Some(c)) => c.dead && c.executing() == 0,
            _ => false,
        };
        if free {
            if let Some(slot) = self.conns.get_mut(usize::from(ci)) {
                if let Some(c) = slot.take() {
                    debug!(peer = %c.peer, qid = %c.ctx.qid, "NVMe/TCP connection freed");
                    self.load.fetch_sub(1, Ordering::Relaxed);
                    let s = &self.stats.connections;
                    s.store(
                        s.load(Ordering::Relaxed).saturating_sub(1),
                        Ordering::Relaxed,
                    );
                }
            }
        }
    }

    fn shutdown_all(&mut self) {
        // Graceful: sockets are no longer read (no new commands); commands whose backend
        // I/O is in flight complete and their responses are written, within a deadline.
        let mut reaped = Vec::new();
        let deadline = Instant::now() + SHUTDOWN_DRAIN;
        while self.ex.in_flight() > 0 && Instant::now() < deadline {
            self.ex.now = Instant::now();
            self.ex.poll_backends(&mut reaped);
            for (t, res) in reaped.drain(..) {
                self.on_backend(t, res);
            }
            self.flush();
            std::thread::sleep(Duration::from_micros(100));
        }
        self.flush();
        for ci in 0..self.conns.len() {
            self.kill(ci as u16, "target shutting down", false);
        }
        // Backend I/O still in flight must finish before buffers go away.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.ex.in_flight() > 0 && Instant::now() < deadline {
            self.ex.poll_backends(&mut reaped);
            for (t, res) in reaped.drain(..) {
                self.on_backend(t, res);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        self.closing.clear();
    }
}

fn conn_token(gen: u16, ci: u16) -> u64 {
    (u64::from(gen) << 16) | u64::from(ci)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn sqe_with(desc: SglDescriptor) -> [u8; SQE_LEN] {
        let mut s = [0u8; SQE_LEN];
        desc.emit(&mut s[24..40]).unwrap();
        s
    }

    #[test]
    fn sgl_decoding() {
        let icd = sqe_with(SglDescriptor::in_capsule(0, 4096));
        assert_eq!(
            decode_sgl(&icd, 4096).unwrap(),
            (
                HostData::InCapsule {
                    offset: 0,
                    len: 4096
                },
                4096
            )
        );
        let st = decode_sgl(&icd, 4095).unwrap_err();
        assert!(st.is(Sct::Generic, generic::SGL_OFFSET_INVALID));
        let wrap = sqe_with(SglDescriptor::DataBlock {
            addr: u64::MAX - 10,
            len: 4096,
            subtype: subtype::OFFSET,
        });
        assert!(decode_sgl(&wrap, 8192).is_err());
        let t = sqe_with(SglDescriptor::TransportDataBlock { len: 131072 });
        assert_eq!(
            decode_sgl(&t, 0).unwrap(),
            (HostData::Transport { len: 131072 }, 131072)
        );
        let none = sqe_with(SglDescriptor::TransportDataBlock { len: 0 });
        assert_eq!(decode_sgl(&none, 0).unwrap(), (HostData::None, 0));
        for bad in [
            SglDescriptor::keyed(0x1000, 4096, 7, false),
            SglDescriptor::DataBlock {
                addr: 0x1000,
                len: 512,
                subtype: subtype::ADDRESS,
            },
        ] {
            let st = decode_sgl(&sqe_with(bad), 8192).unwrap_err();
            assert!(
                st.is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tags_roundtrip() {
        assert_eq!(tag_parts(tag(0xBEEF, 513, 4095)), (0xBEEF, 513, 4095));
        assert!(conn_token(u16::MAX, u16::MAX) < BACKEND_TOKEN);
    }
}
