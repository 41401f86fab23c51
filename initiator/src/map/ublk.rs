//! `map --ublk`: one remote namespace as a Linux ublk block device (`/dev/ublkbN`).
//!
//! Owned by `map`. The ublk control and io_uring plumbing (ADD_DEV, SET_PARAMS,
//! START_DEV, FETCH_REQ / COMMIT_AND_FETCH_REQ) is libublk's. The device gets one ublk
//! queue per NVMe I/O queue and the NVMe queue's depth, the namespace's logical block
//! size, discard and write-zeroes limits, and a volatile write cache with FUA. Each
//! ublk queue thread owns one NVMe queue and runs a poll loop: new ublk commands
//! (non-blocking io_uring reap) → [`Engine`] → NVMe completions → ublk commits; when
//! nothing is in flight it blocks on the ublk ring. [`Stopper::trigger`] stops the
//! device (the kernel drains in-flight I/O first), then the device is deleted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::helpers::IoBuf as UblkBuf;
use libublk::io::{UblkDev, UblkIOCtx, UblkQueue};
use libublk::{sys, BufDesc, BufDescList, UblkError, UblkFlags, UblkIORes};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use nvmf_common::types::Nsid;

use super::engine::{Done, Engine};
use super::plan::{self, Geometry};
use super::proto::{cmd, cmd_flags, errno, Request, REQUEST_MAGIC};
use super::{MapOptions, MapStats, Stopper};
use crate::error::Error;
use crate::queue::{Completion, Queue};
use crate::reconnect::RetryPolicy;
use crate::requeue::{Generation, Requeue};
use crate::transport::Fabric;

/// ublk's sector: offsets and lengths in its I/O descriptors count 512-byte units.
const SECTOR_SHIFT: u32 = 9;
/// Largest I/O the kernel sends (its `max_sectors`); larger ones are split by the
/// block layer. Our commands are split further by MDTS.
pub const UBLK_IO_BUF_BYTES: u32 = 512 * 1024;
/// The op field of `ublksrv_io_desc.op_flags`.
const UBLK_OP_MASK: u32 = 0xff;
/// How long the loop spins without progress before it blocks.
const SPIN_TIME: Duration = Duration::from_micros(200);
/// Longest block on the NVMe queue while commands are in flight.
const QUEUE_WAIT_SLICE: Duration = Duration::from_micros(100);
/// How often command timeouts are checked.
const HOUSEKEEPING: Duration = Duration::from_millis(100);
/// Entries of the control ring of a thread that stops the device.
const CTRL_RING_DEPTH: u32 = 8;
/// The name ublk shows for the target.
const TARGET_NAME: &str = "nvmf";

/// The smallest logical block ublk takes (2^9).
const MIN_UBLK_BLOCK: u32 = 512;
/// Page size assumed when the system does not say.
const DEFAULT_PAGE_SIZE: u32 = 4096;

/// The page size, the largest logical block ublk takes.
fn page_size() -> u32 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(DEFAULT_PAGE_SIZE)
}

/// ublk takes logical blocks from 512 bytes to the page size (the kernel refuses
/// other `logical_bs_shift` values): a namespace formatted otherwise is refused
/// before any device is created, with what to do instead.
pub fn check_block_size(block_size: u32, page: u32) -> Result<(), Error> {
    if (MIN_UBLK_BLOCK..=page).contains(&block_size) {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "the namespace has {block_size}-byte blocks; a ublk device takes {MIN_UBLK_BLOCK} to \
         {page}-byte blocks (the page size): serve it over NBD instead (map --socket, mapd \
         --nbd-dir)"
    )))
}

/// The ublk device parameters for a namespace.
fn params(g: &Geometry, size: u64) -> sys::ublk_params {
    let bs_shift = g.block_size.max(1).trailing_zeros() as u8;
    let to_sectors = |bytes: u64| u32::try_from(bytes >> SECTOR_SHIFT).unwrap_or(u32::MAX);
    sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_DISCARD,
        basic: sys::ublk_param_basic {
            attrs: sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA,
            logical_bs_shift: bs_shift,
            physical_bs_shift: bs_shift,
            io_opt_shift: bs_shift,
            io_min_shift: bs_shift,
            max_sectors: UBLK_IO_BUF_BYTES >> SECTOR_SHIFT,
            dev_sectors: size >> SECTOR_SHIFT,
            ..Default::default()
        },
        discard: sys::ublk_param_discard {
            discard_granularity: g.block_size,
            max_discard_sectors: to_sectors(u64::from(u32::MAX) * u64::from(g.block_size)),
            max_write_zeroes_sectors: to_sectors(
                u64::from(crate::command::MAX_NLB) * u64::from(g.block_size),
            ),
            max_discard_segments: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The NBD-shaped request for a ublk I/O descriptor (so [`plan`] validates and splits
/// it like any other), or the errno to fail it with.
fn request_for(tag: u16, iod: &sys::ublksrv_io_desc) -> Result<Request, u32> {
    let op = iod.op_flags & UBLK_OP_MASK;
    let kind = match op {
        sys::UBLK_IO_OP_READ => cmd::READ,
        sys::UBLK_IO_OP_WRITE => cmd::WRITE,
        sys::UBLK_IO_OP_FLUSH => cmd::FLUSH,
        sys::UBLK_IO_OP_DISCARD => cmd::TRIM,
        sys::UBLK_IO_OP_WRITE_ZEROES => cmd::WRITE_ZEROES,
        _ => return Err(errno::ENOTSUP),
    };
    let mut flags = 0;
    if iod.op_flags & sys::UBLK_IO_F_FUA != 0 {
        flags |= cmd_flags::FUA;
    }
    if iod.op_flags & sys::UBLK_IO_F_NOUNMAP != 0 {
        flags |= cmd_flags::NO_HOLE;
    }
    if kind == cmd::FLUSH {
        // A flush has no range: the block layer leaves its sector at -1.
        return Ok(Request {
            magic: REQUEST_MAGIC,
            flags: 0,
            kind,
            handle: u64::from(tag),
            offset: 0,
            length: 0,
        });
    }
    let length = u64::from(iod.nr_sectors) << SECTOR_SHIFT;
    Ok(Request {
        magic: REQUEST_MAGIC,
        flags,
        kind,
        handle: u64::from(tag),
        offset: iod
            .start_sector
            .checked_mul(1 << SECTOR_SHIFT)
            .ok_or(errno::EINVAL)?,
        length: u32::try_from(length).map_err(|_| errno::EINVAL)?,
    })
}

fn ublk_error(what: &str, e: UblkError) -> Error {
    Error::Io(std::io::Error::other(format!("ublk {what}: {e}")))
}

/// What each ublk queue thread needs.
#[derive(Clone)]
struct QueueCtx {
    queues: Arc<Mutex<Vec<Option<Queue>>>>,
    fabric: Arc<dyn Fabric>,
    nsid: Nsid,
    geometry: Geometry,
    stats: Arc<Mutex<(MapStats, Option<Error>)>>,
    ctrl: Arc<UblkCtrl>,
    /// Where a queue thread whose NVMe queue broke gets the reconnected
    /// controller's queue (its queue id - 1 is its index); None: the device stops.
    requeue: Option<Arc<dyn Requeue + Send + Sync>>,
}

/// Creates the ublk device for namespace `o.nsid` with one ublk queue per queue in
/// `queues`, calls `on_ready` with its block device path once it is live, and serves
/// it until `stop` is triggered. The device is deleted before returning. With
/// `requeue`, a queue whose connection is lost takes the reconnected controller's
/// queue and the device stays up.
pub fn serve_ublk(
    (export, geometry): (super::Export, Geometry),
    fabric: &Arc<dyn Fabric>,
    queues: Vec<Queue>,
    o: &MapOptions,
    stop: &Stopper,
    requeue: Option<Arc<dyn Requeue + Send + Sync>>,
    on_ready: impl FnOnce(&str, u16, u16) + Send + Sync + 'static,
) -> Result<MapStats, Error> {
    check_block_size(geometry.block_size, page_size())?;
    let nr_queues = u16::try_from(queues.len())
        .map_err(|_| Error::InvalidArgument("too many queues for ublk".into()))?;
    if nr_queues == 0 {
        return Err(Error::InvalidArgument(
            "map --ublk needs at least one I/O queue".into(),
        ));
    }
    let depth = queues
        .iter()
        .map(Queue::capacity)
        .min()
        .unwrap_or(1)
        .min(o.depth.unwrap_or(usize::MAX));
    let depth = u16::try_from(depth).unwrap_or(u16::MAX).max(1);
    let uctrl = UblkCtrlBuilder::default()
        .name(TARGET_NAME)
        .id(-1)
        .nr_queues(nr_queues)
        .depth(depth)
        .io_buf_bytes(UBLK_IO_BUF_BYTES)
        .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
        .build()
        .map_err(|e| {
            ublk_error(
                "add device (is the ublk_drv module loaded? `modprobe ublk_drv`)",
                e,
            )
        })?;
    let uctrl = Arc::new(uctrl);
    let ctx = QueueCtx {
        queues: Arc::new(Mutex::new(queues.into_iter().map(Some).collect())),
        fabric: fabric.clone(),
        nsid: o.nsid,
        geometry,
        stats: Arc::new(Mutex::new((MapStats::default(), None))),
        ctrl: uctrl.clone(),
        requeue,
    };
    let size = export.size;
    let result = std::thread::scope(|s| {
        // Stops the device when asked; the queue threads then see their queues go down.
        let killer = uctrl.clone();
        s.spawn(move || {
            stop.wait();
            kill(&killer);
        });
        let q_ctx = ctx.clone();
        let r = uctrl.run_target(
            move |dev: &mut UblkDev| {
                dev.set_default_params(size);
                dev.tgt.params = params(&geometry, size);
                Ok(())
            },
            move |qid: u16, dev: &UblkDev| run_queue(qid, dev, &q_ctx),
            move |c: &UblkCtrl| on_ready(&c.get_bdev_path(), nr_queues, depth),
        );
        // A queue that failed (or run_target itself) also ends the killer thread.
        stop.trigger();
        r
    });
    if let Err(e) = uctrl.del_dev() {
        warn!(error = %e, "ublk delete device");
    }
    let (stats, err) = std::mem::take(&mut *ctx.stats.lock());
    result.map_err(|e| ublk_error("run", e))?;
    match err {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Stops the device (STOP_DEV: the kernel drains in-flight I/O, then the queues go
/// down). libublk sends control commands on a per-thread ring: this thread gets one.
fn kill(ctrl: &UblkCtrl) {
    let ring = libublk::ublk_init_ctrl_task_ring(|r| {
        if r.is_none() {
            let ring = io_uring::IoUring::<io_uring::squeue::Entry128>::builder()
                .build(CTRL_RING_DEPTH)
                .map_err(UblkError::IOError)?;
            *r = Some(ring);
        }
        Ok(())
    });
    if let Err(e) = ring.and_then(|()| ctrl.kill_dev()) {
        warn!(error = %e, "ublk stop device");
    }
}

/// One ublk queue thread.
fn run_queue(qid: u16, dev: &UblkDev, ctx: &QueueCtx) {
    let q = ctx
        .queues
        .lock()
        .get_mut(usize::from(qid))
        .and_then(Option::take);
    let r = match q {
        Some(mut q) => serve_queue(qid, dev, ctx, &mut q),
        None => Err(Error::Protocol(format!(
            "no NVMe queue for ublk queue {qid}"
        ))),
    };
    let mut st = ctx.stats.lock();
    match r {
        Ok(w) => {
            st.0.requests += w.requests;
            st.0.errors += w.errors;
            st.0.commands += w.commands;
            st.0.ages.merge(w.ages);
        }
        Err(e) => {
            warn!(qid, error = %e, "ublk queue failed; stopping the device");
            st.1.get_or_insert(e);
            drop(st);
            kill(&ctx.ctrl);
        }
    }
}

/// What one ublk queue thread keeps across NVMe queues (a reconnect swaps only the
/// NVMe queue).
struct QueueState<'a> {
    qid: u16,
    uq: UblkQueue<'a>,
    bufs: Vec<UblkBuf<u8>>,
    engine: Engine,
    stats: MapStats,
    tags: Vec<u16>,
    done: Vec<Done>,
    comps: Vec<Completion>,
}

fn serve_queue(qid: u16, dev: &UblkDev, ctx: &QueueCtx, nq: &mut Queue) -> Result<MapStats, Error> {
    let depth = usize::from(dev.dev_info.queue_depth);
    let engine = Engine::new(
        &ctx.fabric,
        ctx.nsid,
        ctx.geometry,
        depth.min(nq.capacity()),
    )?;
    let bufs: Vec<UblkBuf<u8>> = dev.alloc_queue_io_bufs();
    let uq = UblkQueue::new(qid, dev)
        .map_err(|e| ublk_error("queue", e))?
        .submit_fetch_commands_unified(BufDescList::Slices(Some(&bufs)))
        .map_err(|e| ublk_error("fetch commands", e))?;
    let mut st = QueueState {
        qid,
        uq,
        bufs,
        engine,
        stats: MapStats::default(),
        tags: Vec::with_capacity(depth),
        done: Vec::with_capacity(depth),
        comps: Vec::with_capacity(depth),
    };
    let mut generation = Generation::default();
    loop {
        let e = match pump(&mut st, ctx, nq) {
            Ok(()) => break,
            Err(e) => e,
        };
        // A lost connection (or a timed-out command) with a session to reconnect:
        // the device stays up; its requests in flight wait for the new queue (or
        // fail with EIO when the policy says so), as with NBD.
        let Some(rq) = ctx
            .requeue
            .as_ref()
            .filter(|_| nq.is_broken() || e.is_fatal())
        else {
            return Err(e);
        };
        let retry = rq.retry_policy() == RetryPolicy::Retry;
        warn!(
            qid,
            inflight = st.engine.inflight(),
            "I/O queue lost ({e}); reconnecting"
        );
        st.engine.lost(retry, &mut st.done);
        commit_done(&mut st)?;
        match rq.replace(usize::from(qid), generation) {
            Ok((q, g)) => {
                st.stats.ages.merge(nq.take_command_ages());
                *nq = q;
                generation = g;
                info!(qid, "ublk queue back on the reconnected controller");
            }
            Err(Error::Reconnecting(why)) => {
                // fast_io_fail_tmo passed: what waits fails now; the device stays up
                // and reconnecting goes on.
                st.engine.fail_all(&why, &mut st.done);
                commit_done(&mut st)?;
            }
            Err(e) => {
                // Lost past ctrl-loss-tmo: what waited for a retry fails now.
                st.engine.lost(false, &mut st.done);
                commit_done(&mut st)?;
                return Err(e);
            }
        }
    }
    st.stats.commands = st.engine.commands();
    st.stats.ages.merge(nq.take_command_ages());
    Ok(st.stats)
}

/// Moves requests between the ublk queue and `nq` until the ublk queue goes down
/// (`Ok`) or `nq` fails (`Err`).
fn pump(st: &mut QueueState<'_>, ctx: &QueueCtx, nq: &mut Queue) -> Result<(), Error> {
    let mut idle_since: Option<Instant> = None;
    let mut next_housekeeping = Instant::now() + HOUSEKEEPING;
    loop {
        // Block on the ublk ring only when nothing waits for the NVMe queue.
        let block =
            st.engine.pending() == 0 && idle_since.is_some_and(|t| t.elapsed() >= SPIN_TIME);
        let tags = &mut st.tags;
        let reaped = st.uq.flush_and_wake_io_tasks(
            |data, cqe, _last| {
                let is_cmd = data & libublk::UblkUringData::Target as u64 == 0;
                if is_cmd && cqe.result() == sys::UBLK_IO_RES_OK as i32 {
                    if let Ok(tag) = u16::try_from(UblkIOCtx::user_data_to_tag(data)) {
                        tags.push(tag);
                    }
                }
            },
            usize::from(block),
        );
        match reaped {
            Ok(_) => {}
            Err(UblkError::QueueIsDown) => return Ok(()),
            Err(e) => return Err(ublk_error("reap", e)),
        }
        let mut progress = !st.tags.is_empty();
        let tags: Vec<u16> = st.tags.drain(..).collect();
        for tag in tags {
            let req = request_for(tag, st.uq.get_iod(tag)).and_then(|r| {
                plan::check(&r, &ctx.geometry)
                    .and_then(|op| op.ok_or(errno::EINVAL))
                    .map(|op| (r, op))
            });
            st.stats.requests += 1;
            match req {
                Ok((r, op)) => {
                    let mut data = st.engine.take_buf();
                    if r.kind == cmd::WRITE {
                        let src = st
                            .bufs
                            .get(usize::from(tag))
                            .and_then(|b| b.as_slice().get(..r.length as usize));
                        match src {
                            Some(s) => data.extend_from_slice(s),
                            None => {
                                st.stats.errors += 1;
                                commit(&st.uq, &st.bufs, tag, -(errno::EINVAL as i32))?;
                                continue;
                            }
                        }
                    }
                    st.engine.start(u64::from(tag), &r, op, data);
                }
                Err(e) => {
                    st.stats.errors += 1;
                    commit(&st.uq, &st.bufs, tag, -(e as i32))?;
                }
            }
        }
        if st.engine.submit(nq, &mut st.done)? {
            nq.flush()?;
        }
        st.comps.clear();
        let polled = nq.poll(&mut st.comps);
        for c in &st.comps {
            st.engine.complete(c, &mut st.done);
        }
        progress |= !st.comps.is_empty() || !st.done.is_empty();
        commit_done(st)?;
        polled?;
        let now = Instant::now();
        if now >= next_housekeeping {
            next_housekeeping = now + HOUSEKEEPING;
            let _ = nq.expire(now);
            if nq.is_broken() {
                return Err(Error::Protocol(format!(
                    "I/O queue {} failed (timeout or protocol error)",
                    nq.qid()
                )));
            }
        }
        if progress {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert(now);
        if now.duration_since(since) < SPIN_TIME {
            // Spin politely: the target and the kernel's submitters may need this core.
            std::thread::yield_now();
        } else if st.engine.inflight() > 0 {
            nq.wait(QUEUE_WAIT_SLICE);
        }
    }
}

/// Answers the kernel for every finished request: its bytes, or a negative errno.
fn commit_done(st: &mut QueueState<'_>) -> Result<(), Error> {
    for d in std::mem::take(&mut st.done) {
        let tag = u16::try_from(d.token).unwrap_or(u16::MAX);
        let res = match &d.error {
            None => {
                if d.kind == cmd::READ {
                    if let Some(dst) = st
                        .bufs
                        .get_mut(usize::from(tag))
                        .and_then(|b| b.as_mut_slice().get_mut(..d.data.len()))
                    {
                        dst.copy_from_slice(&d.data);
                    }
                }
                i32::try_from(d.data.len()).unwrap_or(i32::MAX)
            }
            Some((e, why)) => {
                st.stats.errors += 1;
                debug!(qid = st.qid, tag, error = e, "ublk I/O failed: {why}");
                -(*e as i32)
            }
        };
        let res = if d.kind == cmd::WRITE && d.error.is_none() {
            // A write completes with the bytes it moved.
            i32::try_from(st.uq.get_iod(tag).nr_sectors << SECTOR_SHIFT).unwrap_or(i32::MAX)
        } else {
            res
        };
        commit(&st.uq, &st.bufs, tag, res)?;
        st.engine.recycle(d.data);
    }
    Ok(())
}

/// Completes ublk command `tag` with `res` (bytes, or a negative errno) and fetches
/// the next one.
fn commit(uq: &UblkQueue<'_>, bufs: &[UblkBuf<u8>], tag: u16, res: i32) -> Result<(), Error> {
    let buf = bufs
        .get(usize::from(tag))
        .map(|b| b.as_slice())
        .unwrap_or(&[]);
    uq.complete_io_cmd_unified(tag, BufDesc::Slice(buf), Ok(UblkIORes::Result(res)))
        .map_err(|e| ublk_error("commit", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_become_requests() {
        let iod = |op_flags: u32, nr_sectors: u32, start_sector: u64| sys::ublksrv_io_desc {
            op_flags,
            nr_sectors,
            start_sector,
            addr: 0,
        };
        let r = request_for(3, &iod(sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_F_FUA, 8, 16)).unwrap();
        assert_eq!(
            (r.kind, r.flags, r.handle, r.offset, r.length),
            (cmd::WRITE, cmd_flags::FUA, 3, 8192, 4096)
        );
        let r = request_for(
            0,
            &iod(sys::UBLK_IO_OP_WRITE_ZEROES | sys::UBLK_IO_F_NOUNMAP, 1, 0),
        )
        .unwrap();
        assert_eq!((r.kind, r.flags), (cmd::WRITE_ZEROES, cmd_flags::NO_HOLE));
        assert_eq!(
            request_for(0, &iod(sys::UBLK_IO_OP_DISCARD, 1, 0))
                .unwrap()
                .kind,
            cmd::TRIM
        );
        assert_eq!(
            request_for(0, &iod(sys::UBLK_IO_OP_ZONE_OPEN, 0, 0)),
            Err(errno::ENOTSUP)
        );
        assert_eq!(
            request_for(0, &iod(sys::UBLK_IO_OP_READ, 1, u64::MAX)),
            Err(errno::EINVAL)
        );
        // The block layer's flush request carries sector -1.
        let r = request_for(5, &iod(sys::UBLK_IO_OP_FLUSH, 0, u64::MAX)).unwrap();
        assert_eq!((r.kind, r.offset, r.length), (cmd::FLUSH, 0, 0));
    }

    #[test]
    fn block_sizes_ublk_cannot_take_are_refused_by_name() {
        assert!(check_block_size(512, 4096).is_ok());
        assert!(check_block_size(4096, 4096).is_ok());
        let e = check_block_size(8192, 4096).err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.contains("8192-byte blocks") && e.contains("512 to 4096") && e.contains("NBD"),
            "{e}"
        );
        assert!(check_block_size(8192, 65536).is_ok());
    }

    #[test]
    fn device_parameters() {
        let g = Geometry {
            block_size: 4096,
            nsze: 1000,
            chunk_blocks: 32,
            max_payload: 1 << 25,
        };
        let p = params(&g, 4096 * 1000);
        assert_eq!(p.basic.logical_bs_shift, 12);
        assert_eq!(p.basic.dev_sectors, 8000);
        assert_eq!(p.basic.max_sectors, 1024);
        assert_eq!(p.discard.discard_granularity, 4096);
        assert_eq!(p.discard.max_write_zeroes_sectors, 65536 * 8);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_FUA, 0);
    }
}
