//! A map worker: one thread, one NVMe I/O queue, any number of NBD connections.
//!
//! Owned by `map`. The loop reads requests from every connection (non-blocking),
//! turns each into NVMe commands ([`super::plan`]), keeps up to `depth` commands in
//! flight on its queue (one registered buffer per command slot, allocated once),
//! answers a request when its last command completes, and writes replies as the
//! sockets take them. While anything is in flight it spins briefly, then waits on the
//! queue in short slices; when idle it sleeps in `poll(2)` on the sockets and its wake
//! eventfd (new connection, stop). On stop it reads no more requests, finishes what is
//! in flight, sends those replies, and closes its connections.
//!
//! With a [`Recovery`], a broken queue (lost connection, command timeout) does not end
//! the worker: the commands in flight are retried on the reconnected controller's
//! queue, or their requests fail with EIO, per the retry policy; connections stay.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, warn};

use nvmf_common::types::Nsid;

use super::conn::{Conn, ReadState};
use super::engine::{Done, Engine};
use super::plan::{self, Geometry};
use super::proto::{self, Request};
use super::stream::Stream;
use crate::error::Error;
use crate::queue::{CommandAges, Completion, Queue};
use crate::requeue::{Generation, Recovery};
use crate::transport::Fabric;

/// How long the loop spins without progress before it blocks.
const SPIN_TIME: Duration = Duration::from_micros(200);
/// Longest block on the queue while commands are in flight (sockets are checked
/// between slices).
const QUEUE_WAIT_SLICE: Duration = Duration::from_micros(100);
/// Longest sleep in `poll(2)` when idle (housekeeping runs at least this often).
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How often command timeouts are checked.
const HOUSEKEEPING: Duration = Duration::from_millis(100);
/// Requests of one connection parsed and not yet answered before its socket is left
/// unread (back-pressure).
const MAX_CONN_INFLIGHT: usize = 256;
/// After a stop, how long replies may take to drain before connections are cut.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection that finished its handshake.
pub struct NewConn {
    pub stream: Stream,
    pub structured: bool,
}

/// What the acceptor uses to hand a worker connections.
pub struct WorkerHandle {
    pub tx: Sender<NewConn>,
    pub wake: EventFd,
    /// Connections handed to the worker and not yet closed (counted by the acceptor).
    pub conns: AtomicUsize,
}

impl WorkerHandle {
    pub fn new(tx: Sender<NewConn>) -> Result<WorkerHandle, Error> {
        let wake = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::Io(e.into()))?;
        Ok(WorkerHandle {
            tx,
            wake,
            conns: AtomicUsize::new(0),
        })
    }

    /// Wakes the worker from its idle `poll(2)`.
    pub fn notify(&self) {
        let _ = self.wake.write(1);
    }
}

/// The fixed facts of a worker.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    pub nsid: Nsid,
    pub geometry: Geometry,
    /// Commands in flight at most (≤ the queue's capacity).
    pub depth: usize,
}

/// What a worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub connections: u64,
    pub requests: u64,
    pub errors: u64,
    pub commands: u64,
    /// Commands reported stuck and the longest seen outstanding, on every queue
    /// the worker drove.
    pub ages: CommandAges,
}

struct Worker<'a> {
    cfg: WorkerConfig,
    handle: &'a WorkerHandle,
    engine: Engine,
    conns: Vec<Option<Conn>>,
    done: Vec<Done>,
    stats: WorkerStats,
}

/// Runs a worker on `q` until `stop` is set and its connections are drained. An
/// `Err` means the queue failed and `recovery` could not replace it (the caller stops
/// the server).
pub fn run(
    q: &mut Queue,
    fabric: &Arc<dyn Fabric>,
    cfg: WorkerConfig,
    handle: &WorkerHandle,
    rx: &Receiver<NewConn>,
    stop: &AtomicBool,
    recovery: Option<Recovery<'_>>,
) -> Result<WorkerStats, Error> {
    let depth = cfg.depth.min(q.capacity()).max(1);
    let mut w = Worker {
        cfg,
        handle,
        engine: Engine::new(fabric, cfg.nsid, cfg.geometry, depth)?,
        conns: Vec::new(),
        done: Vec::new(),
        stats: WorkerStats::default(),
    };
    let mut generation = Generation::default();
    let r = loop {
        match w.drive(q, rx, stop) {
            Err(e) if q.is_broken() || e.is_fatal() => {
                let Some(rc) = recovery else {
                    break Err(e);
                };
                let inflight = w.engine.inflight();
                warn!(qid = %q.qid(), inflight, "I/O queue lost ({e}); reconnecting");
                w.engine.lost(rc.retries(), &mut w.done);
                w.answer();
                match rc.source.replace(rc.index, generation) {
                    Ok((nq, g)) => {
                        w.stats.ages.merge(q.take_command_ages());
                        *q = nq;
                        generation = g;
                    }
                    Err(Error::Reconnecting(why)) => {
                        // fast_io_fail_tmo passed: everything waiting fails now, and
                        // requests read meanwhile fail on the broken queue at once,
                        // while the session goes on reconnecting.
                        w.engine.fail_all(&why, &mut w.done);
                        w.answer();
                        let _ = w.write_replies();
                    }
                    Err(e) => {
                        // Lost past ctrl-loss-tmo: what waited for a retry fails now.
                        w.engine.lost(false, &mut w.done);
                        w.answer();
                        let _ = w.write_replies();
                        break Err(e);
                    }
                }
            }
            other => break other,
        }
    };
    for c in w.conns.iter().flatten() {
        c.stream.shutdown();
    }
    handle.conns.store(0, Ordering::Relaxed);
    w.stats.commands = w.engine.commands();
    w.stats.ages.merge(q.take_command_ages());
    r.map(|()| w.stats)
}

impl Worker<'_> {
    fn drive(
        &mut self,
        q: &mut Queue,
        rx: &Receiver<NewConn>,
        stop: &AtomicBool,
    ) -> Result<(), Error> {
        let mut comps: Vec<Completion> = Vec::with_capacity(self.cfg.depth.min(MAX_CONN_INFLIGHT));
        let mut payload: Vec<u8> = Vec::new();
        let mut idle_since: Option<Instant> = None;
        let mut next_housekeeping = Instant::now() + HOUSEKEEPING;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let mut progress = false;
            let stopping = stop.load(Ordering::Relaxed);
            while let Ok(nc) = rx.try_recv() {
                progress = true;
                if stopping {
                    nc.stream.shutdown();
                    self.handle.conns.fetch_sub(1, Ordering::Relaxed);
                    continue;
                }
                self.add_conn(nc);
            }
            if stopping && drain_deadline.is_none() {
                drain_deadline = Some(Instant::now() + DRAIN_TIMEOUT);
                for c in self.conns.iter_mut().flatten() {
                    c.reading = false;
                }
            }
            progress |= self.read_requests(&mut payload);
            if self.engine.submit(q, &mut self.done)? {
                q.flush()?;
            }
            comps.clear();
            let polled = q.poll(&mut comps);
            for c in &comps {
                self.engine.complete(c, &mut self.done);
            }
            self.answer();
            polled?;
            progress |= !comps.is_empty();
            progress |= self.write_replies();
            self.reap_conns();

            let now = Instant::now();
            if now >= next_housekeeping {
                next_housekeeping = now + HOUSEKEEPING;
                // Timed-out commands come back through the next poll as errors.
                let _ = q.expire(now);
                if q.is_broken() {
                    return Err(Error::Protocol(format!(
                        "I/O queue {} failed (timeout or protocol error)",
                        q.qid()
                    )));
                }
                if drain_deadline.is_some_and(|d| now >= d) {
                    warn!(
                        inflight = self.engine.inflight(),
                        "drain timed out: closing connections"
                    );
                    return Ok(());
                }
            }
            if stopping && self.conns.iter().all(Option::is_none) && self.engine.inflight() == 0 {
                return Ok(());
            }
            if progress {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < SPIN_TIME {
                // Spin for the next completion or request, but give the core away
                // meanwhile: the client and the target's threads may need it more.
                std::thread::yield_now();
                continue;
            }
            if self.engine.inflight() > 0 {
                q.wait(QUEUE_WAIT_SLICE);
                continue;
            }
            self.sleep();
        }
    }

    fn add_conn(&mut self, nc: NewConn) {
        if let Err(e) = nc.stream.set_nonblocking(true) {
            warn!(error = %e, "cannot make the connection non-blocking; dropped");
            self.handle.conns.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let c = Conn::new(nc.stream, nc.structured, self.cfg.geometry.max_payload);
        self.stats.connections += 1;
        match self.conns.iter().position(Option::is_none) {
            Some(i) => {
                if let Some(s) = self.conns.get_mut(i) {
                    *s = Some(c);
                }
            }
            None => self.conns.push(Some(c)),
        }
    }

    /// Reads and parses requests on every connection; true if anything arrived.
    fn read_requests(&mut self, payload: &mut Vec<u8>) -> bool {
        let mut progress = false;
        for ci in 0..self.conns.len() {
            while let Some(Some(c)) = self.conns.get_mut(ci) {
                if !c.reading || c.inflight >= MAX_CONN_INFLIGHT {
                    break;
                }
                let r = match c.next_request(payload) {
                    Ok(Some(r)) => r,
                    Ok(None) => match c.fill() {
                        Ok(ReadState::Data) => {
                            progress = true;
                            continue;
                        }
                        Ok(ReadState::Empty) => break,
                        Ok(ReadState::Eof) => {
                            progress = true;
                            c.reading = false;
                            break;
                        }
                        Err(e) => {
                            debug!(error = %e, "NBD connection read failed");
                            progress = true;
                            c.reading = false;
                            c.broken = true;
                            break;
                        }
                    },
                    Err(why) => {
                        warn!("NBD protocol error, closing the connection: {why}");
                        progress = true;
                        c.reading = false;
                        c.broken = true;
                        break;
                    }
                };
                progress = true;
                self.accept_request(ci, r, payload);
            }
        }
        progress
    }

    /// Validates a parsed request and hands it to the engine (or answers it at once).
    fn accept_request(&mut self, ci: usize, r: Request, payload: &mut Vec<u8>) {
        let Some(Some(c)) = self.conns.get_mut(ci) else {
            return;
        };
        let op = match plan::check(&r, &self.cfg.geometry) {
            Ok(Some(op)) => op,
            Ok(None) => {
                // NBD_CMD_DISC: no reply; finish what is in flight, then close.
                c.reading = false;
                return;
            }
            Err(e) => {
                debug!(
                    cmd = proto::cmd_name(r.kind),
                    kind = r.kind,
                    offset = r.offset,
                    length = r.length,
                    error = e,
                    "NBD request refused"
                );
                self.stats.requests += 1;
                self.stats.errors += 1;
                c.reply_err(r.kind, r.handle, e, "invalid request");
                return;
            }
        };
        c.inflight += 1;
        self.stats.requests += 1;
        // The payload vector goes with the request; a pooled one takes its place.
        let spare = self.engine.take_buf();
        let data = std::mem::replace(payload, spare);
        self.engine.start(ci as u64, &r, op, data);
    }

    /// Sends the replies of finished requests.
    fn answer(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        for d in done.drain(..) {
            if let Some(Some(c)) = usize::try_from(d.token)
                .ok()
                .and_then(|i| self.conns.get_mut(i))
            {
                c.inflight = c.inflight.saturating_sub(1);
                if !c.broken {
                    match &d.error {
                        None => c.reply_ok(d.kind, d.handle, d.offset, &d.data),
                        Some((e, why)) => {
                            self.stats.errors += 1;
                            debug!(
                                cmd = proto::cmd_name(d.kind),
                                offset = d.offset,
                                error = e,
                                "NBD request failed: {why}"
                            );
                            c.reply_err(d.kind, d.handle, *e, why);
                        }
                    }
                }
            }
            self.engine.recycle(d.data);
        }
        self.done = done;
    }

    /// Writes pending replies; true if any bytes went out or a connection broke.
    fn write_replies(&mut self) -> bool {
        let mut progress = false;
        for c in self.conns.iter_mut().flatten() {
            if !c.has_output() || c.broken {
                continue;
            }
            let before = c.has_output();
            if let Err(e) = c.flush_out() {
                debug!(error = %e, "NBD connection write failed");
                c.broken = true;
                c.reading = false;
                progress = true;
            } else if before && !c.has_output() {
                progress = true;
            }
        }
        progress
    }

    /// Closes and forgets finished connections.
    fn reap_conns(&mut self) {
        for slot in self.conns.iter_mut() {
            if slot.as_ref().is_some_and(Conn::finished) {
                if let Some(c) = slot.take() {
                    c.stream.shutdown();
                    self.handle.conns.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sleeps until a socket or the wake eventfd is ready, or [`IDLE_POLL`].
    fn sleep(&mut self) {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(self.conns.len() + 1);
        fds.push(PollFd::new(self.handle.wake.as_fd(), PollFlags::POLLIN));
        for c in self.conns.iter().flatten() {
            let mut ev = PollFlags::empty();
            if c.reading && c.inflight < MAX_CONN_INFLIGHT {
                ev |= PollFlags::POLLIN;
            }
            if c.has_output() && !c.broken {
                ev |= PollFlags::POLLOUT;
            }
            if !ev.is_empty() {
                fds.push(PollFd::new(c.stream.as_fd(), ev));
            }
        }
        let timeout = PollTimeout::try_from(IDLE_POLL).unwrap_or(PollTimeout::NONE);
        let _ = poll(&mut fds, timeout);
        drop(fds);
        let _ = self.handle.wake.read();
    }
}
