//! `map`: one remote namespace exported locally as an NBD server.
//!
//! Owned by the host library. [`serve`] takes a connected [`Controller`]'s I/O queues
//! and serves namespace `nsid` to NBD clients (`nbd-client` → `/dev/nbdX`, qemu,
//! libnbd's tools, fio's nbd engine) on a Unix socket or a TCP address until
//! [`Stopper::trigger`] is called (the CLI calls it on SIGINT/SIGTERM); then it reads
//! no more requests, drains what is in flight, answers it, and closes the connections.
//!
//! - [`proto`]: the NBD wire format.
//! - [`handshake`]: fixed newstyle negotiation (one export, structured replies).
//! - [`plan`]: an NBD request → NVMe commands (split by MDTS, NLB).
//! - [`engine`]: block requests → NVMe commands in flight on one queue → answers.
//! - [`conn`]: one connection's input parsing and reply encoding.
//! - [`worker`]: one thread per I/O queue, serving any number of connections.
//! - [`stream`]: Unix and TCP listeners and streams.
//! - [`ublk`]: the same namespace as a ublk block device (`/dev/ublkbN`) instead.
//! - [`run`]: a whole mapping from a reconnecting session, NBD or ublk.
//!
//! Every connection may use the whole export at once (`NBD_FLAG_CAN_MULTI_CONN`): all
//! connections reach the same NVMe namespace through one controller, so a FLUSH on any
//! connection (an NVMe Flush) covers writes completed on every connection.

pub mod conn;
pub mod engine;
pub mod handshake;
pub mod plan;
pub mod proto;
pub mod run;
pub mod stream;
pub mod ublk;
pub mod worker;

// Run against the in-process target.
#[cfg(test)]
#[cfg(feature = "loopback")]
mod tests;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tracing::{debug, info, warn};

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::oncs;

use crate::controller::Controller;
use crate::error::Error;
use crate::namespace::max_blocks_per_command;
use crate::queue::Queue;

pub use handshake::Export;
pub use run::{serve_session, Endpoint, Ready, Served};
pub use stream::{Listen, Listener};
pub use worker::WorkerStats;

/// The largest READ or WRITE payload accepted (the protocol's common maximum).
pub const MAX_PAYLOAD: u32 = 32 * 1024 * 1024;
/// Largest data buffer per command slot: larger requests are split.
pub const MAX_SLOT_BYTES: u64 = 128 * 1024;
/// The preferred request size advertised (at least the block size).
pub const PREFERRED_BLOCK: u32 = 4096;
/// Time a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// What to export (where is the [`Listener`] given to [`serve`]).
#[derive(Debug, Clone)]
pub struct MapOptions {
    pub nsid: Nsid,
    /// The export's name (the default export `""` is served too).
    pub export_name: String,
    /// Commands in flight per I/O queue at most (`None`: the queue's capacity).
    pub depth: Option<usize>,
    /// While reconnecting after a lost connection, fail requests with EIO once this
    /// long has passed (`None`: they wait up to `ctrl_loss_tmo`).
    pub fast_io_fail: Option<Duration>,
}

/// Stops a running [`serve`] from any thread.
pub struct Stopper {
    flag: AtomicBool,
    fd: EventFd,
}

impl Stopper {
    pub fn new() -> Result<Stopper, Error> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| Error::Io(e.into()))?;
        Ok(Stopper {
            flag: AtomicBool::new(false),
            fd,
        })
    }

    /// Asks the server to drain and stop.
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = self.fd.write(1);
    }

    pub fn is_triggered(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Readable once triggered (for `poll(2)` beside other descriptors).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Sleeps up to `d`, returning early (true) when triggered.
    pub fn sleep(&self, d: Duration) -> bool {
        if !self.is_triggered() {
            let ms = u16::try_from(d.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(ms));
        }
        self.is_triggered()
    }

    /// Blocks until [`Stopper::trigger`] is called.
    pub fn wait(&self) {
        while !self.is_triggered() {
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::NONE);
        }
    }
}

/// What a finished [`serve`] did, summed over its workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    pub connections: u64,
    pub requests: u64,
    pub errors: u64,
    pub commands: u64,
    /// Commands reported stuck (see [`Queue::set_stuck_warn`]) and the longest a
    /// command was seen outstanding.
    pub ages: crate::queue::CommandAges,
}

/// The export as the handshake describes it, from the controller's facts.
pub fn export_for(ctrl: &Controller, o: &MapOptions) -> Result<(Export, plan::Geometry), Error> {
    let ns = ctrl.namespace(o.nsid)?;
    let bs = ns.block_size;
    let id = ctrl.id_ctrl();
    let mut flags = proto::tflags::HAS_FLAGS
        | proto::tflags::SEND_FLUSH
        | proto::tflags::SEND_FUA
        | proto::tflags::CAN_MULTI_CONN;
    if id.oncs & oncs::DSM != 0 {
        flags |= proto::tflags::SEND_TRIM;
    }
    if id.oncs & oncs::WRITE_ZEROES != 0 {
        flags |= proto::tflags::SEND_WRITE_ZEROES;
    }
    let by_mdts = max_blocks_per_command(ctrl.max_transfer(), bs);
    let by_slot = u32::try_from(MAX_SLOT_BYTES / u64::from(bs.max(1)))
        .unwrap_or(u32::MAX)
        .max(1);
    let geometry = plan::Geometry {
        block_size: bs,
        nsze: ns.nsze,
        chunk_blocks: by_mdts.min(by_slot),
        max_payload: MAX_PAYLOAD,
    };
    let export = Export {
        name: o.export_name.clone(),
        description: format!("NVMe namespace {} of {}", ns.nsid, id.subnqn),
        size: ns.size_bytes(),
        min_block: bs,
        preferred_block: PREFERRED_BLOCK.max(bs),
        max_payload: MAX_PAYLOAD,
        flags,
    };
    Ok((export, geometry))
}

/// Serves namespace `o.nsid` of `ctrl` over NBD on `listener` with one worker per
/// queue in `queues` until `stop` is triggered. The listener is bound by the caller,
/// so clients may connect as soon as it exists. An `Err` means a queue failed or the
/// listener broke.
pub fn serve(
    ctrl: &Controller,
    queues: &mut [Queue],
    listener: &Listener,
    o: &MapOptions,
    stop: &Stopper,
) -> Result<MapStats, Error> {
    let export = export_for(ctrl, o)?;
    serve_recovering(export, ctrl.fabric(), queues, listener, o, stop, None)
}

/// [`serve`] with the export computed beforehand ([`export_for`]); a worker whose
/// queue breaks takes its queue of the reconnected controller from `requeue` (worker
/// `i` uses queue `i`) and goes on.
pub fn serve_recovering(
    (export, geometry): (Export, plan::Geometry),
    fabric: &Arc<dyn crate::transport::Fabric>,
    queues: &mut [Queue],
    listener: &Listener,
    o: &MapOptions,
    stop: &Stopper,
    requeue: Option<&dyn crate::requeue::Requeue>,
) -> Result<MapStats, Error> {
    if queues.is_empty() {
        return Err(Error::InvalidArgument(
            "map needs at least one I/O queue".into(),
        ));
    }
    let export = Arc::new(export);
    let fabric = fabric.clone();
    let mut handles = Vec::with_capacity(queues.len());
    let mut receivers = Vec::with_capacity(queues.len());
    for _ in 0..queues.len() {
        let (tx, rx) = mpsc::channel();
        handles.push(worker::WorkerHandle::new(tx)?);
        receivers.push(rx);
    }
    let handles = Arc::new(handles);
    listener.set_nonblocking(true)?;
    info!(export = %export.name, size = export.size, queues = queues.len(), "NBD server up");

    let results: Vec<Result<WorkerStats, Error>> = std::thread::scope(|s| {
        let mut joins = Vec::with_capacity(queues.len());
        for (i, (q, rx)) in queues.iter_mut().zip(receivers.drain(..)).enumerate() {
            let cfg = worker::WorkerConfig {
                nsid: o.nsid,
                geometry,
                depth: o.depth.unwrap_or(usize::MAX),
            };
            let handle = handles.get(i);
            let fabric = &fabric;
            let j = std::thread::Builder::new()
                .name(format!("nbd-worker{i}"))
                .spawn_scoped(s, move || {
                    let Some(handle) = handle else {
                        return Err(Error::Protocol("worker without a handle".into()));
                    };
                    let recovery =
                        requeue.map(|source| crate::requeue::Recovery { source, index: i });
                    let r = worker::run(q, fabric, cfg, handle, &rx, &stop.flag, recovery);
                    if let Err(e) = &r {
                        warn!(error = %e, "NBD worker failed; stopping the server");
                        stop.trigger();
                    }
                    r
                });
            joins.push(j);
        }
        let accepted = accept_loop(listener, &export, &handles, stop);
        if let Err(e) = &accepted {
            warn!(error = %e, "NBD listener failed; stopping the server");
        }
        stop.trigger();
        for h in handles.iter() {
            h.notify();
        }
        let mut out: Vec<Result<WorkerStats, Error>> = joins
            .into_iter()
            .map(|j| match j {
                Ok(j) => j
                    .join()
                    .unwrap_or_else(|_| Err(Error::Protocol("NBD worker panicked".into()))),
                Err(e) => Err(Error::Io(e)),
            })
            .collect();
        if let Err(e) = accepted {
            out.push(Err(e));
        }
        out
    });
    let mut stats = MapStats::default();
    let mut first_err = None;
    for r in results {
        match r {
            Ok(w) => {
                stats.connections += w.connections;
                stats.requests += w.requests;
                stats.errors += w.errors;
                stats.commands += w.commands;
                stats.ages.merge(w.ages);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Accepts connections until `stop`; each handshake runs on its own short-lived
/// thread, then the connection goes to the least busy worker.
fn accept_loop(
    listener: &Listener,
    export: &Arc<Export>,
    handles: &Arc<Vec<worker::WorkerHandle>>,
    stop: &Stopper,
) -> Result<(), Error> {
    while !stop.is_triggered() {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.fd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::Io(e.into())),
        }
        if stop.is_triggered() {
            break;
        }
        let stream = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE and friends: log and keep serving the connections we have.
                warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let export = export.clone();
        let handles = handles.clone();
        let spawned = std::thread::Builder::new()
            .name("nbd-handshake".into())
            .spawn(move || handshake_and_dispatch(stream, &export, &handles));
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start a handshake thread; connection dropped");
        }
    }
    Ok(())
}

fn handshake_and_dispatch(
    mut stream: stream::Stream,
    export: &Export,
    handles: &[worker::WorkerHandle],
) {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_timeouts(Some(HANDSHAKE_TIMEOUT)));
    if let Err(e) = setup {
        warn!(error = %e, "cannot set up the connection");
        return;
    }
    let structured = match handshake::negotiate(&mut stream, export) {
        Ok(handshake::Outcome::Transmission { structured }) => structured,
        Ok(handshake::Outcome::Closed) => {
            debug!("NBD client left during the handshake");
            return;
        }
        Err(e) => {
            debug!(error = %e, "NBD handshake failed");
            return;
        }
    };
    if let Err(e) = stream.set_timeouts(None) {
        warn!(error = %e, "cannot clear the handshake timeouts");
        return;
    }
    let Some(w) = handles
        .iter()
        .min_by_key(|h| h.conns.load(Ordering::Relaxed))
    else {
        return;
    };
    // Counted now so that connections arriving together spread over the workers.
    w.conns.fetch_add(1, Ordering::Relaxed);
    if w.tx.send(worker::NewConn { stream, structured }).is_ok() {
        w.notify();
    } else {
        w.conns.fetch_sub(1, Ordering::Relaxed);
    }
}
