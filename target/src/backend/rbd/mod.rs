//! Ceph RBD images (`rbd:POOL/IMAGE`) through librbd's AIO API.
//!
//! # Opening
//!
//! [`RbdBackend::open`] creates one librados client (`client.<client_id>`, the
//! namespace's `ceph_conf` and `keyring` or librados' defaults), connects, and opens
//! the image head read-write. In a gateway of a group, an image whose namespace has
//! the group's `ceph_conf` and `client_id` and no client settings of its own is opened
//! on the group's client instead, so that fencing the gateway fences its writes
//! ([`shared`]). The namespace size is `rbd_get_size` rounded down to a
//! whole number of blocks (512-byte blocks unless the namespace says otherwise). The
//! Volatile Write Cache is reported from the client's `rbd_cache` setting
//! (`rados_conf_get`): with librbd's write-back cache on, a write completes once it is
//! in the client's memory and only Flush (or FUA) makes it durable.
//!
//! # Client options
//!
//! The client is configured before it connects, in this order, each later step
//! overriding the earlier: our defaults (`client_mount_timeout`), the Ceph
//! configuration file, the namespace's `ceph_options` (SPDK's `bdev_rbd_register_cluster
//! --config-param`), each with `rados_conf_set`, and its `keyring` last. librados
//! checks each option's name and parses its value there, so an unknown name or a bad
//! value fails the open (the start, SIGHUP or `ctl add-ns`) with an error naming the
//! option but not its value; [`check_ceph_options`] makes the same check without a
//! cluster for `check-config`. The configuration refuses `key` and `keyring` there:
//! the key stays in the keyring file the namespace names.
//!
//! # I/O
//!
//! Read → `rbd_aio_read`, Write → `rbd_aio_write` (FUA with the cache on: the write,
//! then `rbd_aio_flush`, before the command completes), Flush → `rbd_aio_flush`,
//! Write Zeroes → `rbd_aio_write_zeroes`, Deallocate → `rbd_aio_discard`. librbd may
//! skip discards smaller than an object's discard granularity, so deallocated blocks
//! are not promised to read back as zeroes (Write Zeroes is what zeroes). A fused
//! Compare and Write inside one 512-byte sector → `rbd_aio_compare_and_write` (one OSD
//! operation, atomic for every gateway of the image; `-EILSEQ` is a miscompare);
//! larger pairs are emulated by the target under its own range lock.
//!
//! # Ownership and ordering
//!
//! The backend and every channel share one [`ffi::Image`] (one cluster connection per
//! namespace, or the group's connection shared by its images: [`shared`]; librbd is
//! thread-safe per image). Each channel owns a completion mailbox
//! (lock-free queue + eventfd, exposed as [`IoChannel::event_fd`] so interrupt-mode poll
//! groups wake) and a slot table of operations in flight; librbd's callback thread only
//! pushes to the mailbox (see [`ffi`]). A channel's data buffers stay in its slot table
//! until their completion has been reaped. Dropping a channel (its namespace removed or
//! resized away, once the core saw no I/O in flight) waits, blocking its thread, up to
//! [`CHANNEL_DRAIN_TIMEOUT`] for what librbd still holds, and leaks what never comes
//! back, so librbd never writes into freed memory.
//!
//! # Errors
//!
//! librbd errors map to [`BackendError`] in [`map_errno`] and from there to NVMe status
//! in [`BackendError::status`]: `EBLOCKLISTED` → Fenced (a path error, retryable on
//! another path), `ENOENT` → Gone (Namespace Not Ready, DNR), `ETIMEDOUT` and
//! connection errors → Unavailable (Namespace Not Ready, retryable), `EROFS` →
//! Namespace Is Write Protected (DNR), `ENOSPC`/`EDQUOT` → Capacity Exceeded (DNR),
//! `EIO` and the rest → media errors (retryable).
//!
//! # A stalled cluster
//!
//! While an OSD does not answer (stopped, partitioned) librbd keeps operations queued
//! and retries them itself, by default for ever: nothing fails on the target side, and
//! the host's command timeout decides what a stall means. An operator who wants a
//! stalled OSD to fail commands instead sets `rados_osd_op_timeout` (seconds; 0, the
//! default, waits for ever) in the namespace's `ceph_options` (or the Ceph
//! configuration file): an operation the OSDs have not answered within that time
//! completes with `ETIMEDOUT`, which this backend answers with Namespace Not Ready
//! (retryable), so a host retries it or moves it to another gateway. Choose it below
//! the hosts' command timeout and above a normal OSD failover (peering takes seconds);
//! once the OSD answers again, new commands succeed (`tests/rbd.rs` shows both).
//! An image on a gateway group's client ([`shared`]) has the group's timeouts: the
//! lease, in seconds.
//!
//! # Resize
//!
//! `rbd resize` (growing the image) is noticed the way a grown backing file is: on
//! `nvmf-target ctl resize-ns` or SIGHUP, [`Backend::backing_size`] (`rbd_get_size`,
//! which refreshes the image header after librbd's watch saw the change) differs from
//! the served size, the namespace is reopened at the new size, and connected hosts get
//! a Namespace Attribute Changed event.
//!
//! # Exclusive lock (the decision for several gateways)
//!
//! This backend leaves the image's `exclusive-lock` feature to librbd and never takes,
//! breaks or blocklists on its own. With the feature on (the default for new images)
//! librbd acquires the lock on a client's first write and hands it over cooperatively
//! when another client asks: before giving it up it flushes its write-back cache, and
//! on taking it back it invalidates the cache, which is what keeps two gateways'
//! `rbd_cache`s coherent. So:
//!
//! * one gateway per image: the lock is taken once and costs nothing;
//! * several gateways (ANA + multipath, `tests/rbd_multipath.rs`): one gateway's
//!   group is optimized and the others non-optimized, so hosts write through one
//!   gateway and the lock moves only on failover; active/active writes through two
//!   gateways would bounce the lock between them;
//! * an image without `exclusive-lock` must not be exported by several gateways with
//!   `rbd_cache` on (nothing keeps the caches coherent): turn the cache off for such
//!   clients, or enable the feature.
//!
//! A gateway that another client fenced (the lock broken with blocklisting, `rbd lock
//! break` or a dead-client recovery) gets `EBLOCKLISTED` from then on; it answers with
//! a retryable path error so hosts move to the gateway that holds the lock. In a
//! gateway group the takeover of an ANA group fences the old owner's group client,
//! which is also its images' client ([`shared`]).

mod ffi;
pub mod provision;
pub mod rados;
pub mod shared;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::options::{check_block_size, OpenError, RbdOptions, DEFAULT_BLOCK_SIZE};
use super::{Backend, BackendError, BackendInfo, CqeResult, IoChannel, IoCompletion, IoOp};

/// Ceph's errno for a client that was blocklisted (fenced) by the monitors: Linux's
/// `ESHUTDOWN`, 108.
pub const EBLOCKLISTED: i32 = libc::ESHUTDOWN;
/// How long `rados_connect` may wait for the monitors when the Ceph configuration does
/// not say (librados' own default is 300 s, too long to hold a SIGHUP or `ctl` reply).
const DEFAULT_MOUNT_TIMEOUT_SECS: &str = "30";
/// How long dropping a channel waits for operations librbd still holds.
pub const CHANNEL_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often that wait looks again.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// The value `rados_conf_get` gives for a true boolean option.
const CONF_TRUE: &str = "true";
/// The option that makes a stalled OSD fail operations (module docs).
const OSD_OP_TIMEOUT: &str = "rados_osd_op_timeout";

/// The namespace's `ceph_options` as the FFI takes them.
/// How a namespace's client reaches its cluster: our defaults, then `opts`.
fn cluster_params<'a>(
    opts: &'a RbdOptions,
    options: &'a [(&'a str, &'a str)],
) -> ffi::ClusterParams<'a> {
    ffi::ClusterParams {
        conf: opts.ceph_conf.as_deref(),
        client_id: opts.client_id.as_deref(),
        keyring: opts.keyring.as_deref(),
        defaults: &[("client_mount_timeout", DEFAULT_MOUNT_TIMEOUT_SECS)],
        options,
    }
}

fn option_pairs(options: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    options
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Checks `ceph_options` with librados, without a cluster (`check-config`): an unknown
/// name or a value librados cannot parse for the option gives an error naming it.
pub fn check_ceph_options(options: &BTreeMap<String, String>) -> Result<(), String> {
    ffi::check_options(&option_pairs(options)).map_err(|e| e.to_string())
}

/// An open RBD image shared by every thread serving its namespace.
pub struct RbdBackend {
    image: Arc<ffi::Image>,
    info: BackendInfo,
    spec: Arc<str>,
    /// The image's stripe unit (object size): compare-and-write is atomic inside one.
    cw_unit: Option<u64>,
}

impl RbdBackend {
    /// Opens `pool`/`image`: on the client [`shared::share_client`] registered when
    /// `opts` match it, else on a new client of its own.
    pub fn open(
        pool: &str,
        image: &str,
        opts: &RbdOptions,
        block_size: Option<u32>,
    ) -> Result<RbdBackend, OpenError> {
        let spec = format!("rbd:{pool}/{image}");
        let client = shared::client_for(&spec, opts);
        RbdBackend::open_with(pool, image, opts, block_size, client.as_ref())
    }

    /// Opens `pool`/`image` on `client`'s cluster handle (its `opts` are then not
    /// used), or with `None` connects a client of its own with `opts`.
    fn open_with(
        pool: &str,
        image: &str,
        opts: &RbdOptions,
        block_size: Option<u32>,
        client: Option<&Arc<ffi::Image>>,
    ) -> Result<RbdBackend, OpenError> {
        let spec = format!("rbd:{pool}/{image}");
        let block_size = block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
        check_block_size(&spec, block_size)?;
        let fail = |reason: String| OpenError::Rbd {
            spec: spec.clone(),
            reason,
        };
        let img = match client {
            Some(c) => ffi::Image::open_on(c, pool, image).map_err(|e| fail(e.to_string()))?,
            None => {
                let options = option_pairs(&opts.ceph_options);
                let params = cluster_params(opts, &options);
                ffi::Image::open(&params, pool, image).map_err(|e| fail(e.to_string()))?
            }
        };
        let raw = img.size().map_err(|e| fail(e.to_string()))?;
        let size_bytes = raw - raw % u64::from(block_size);
        if size_bytes == 0 {
            return Err(fail(format!(
                "image of {raw} bytes holds no whole {block_size}-byte block"
            )));
        }
        if size_bytes != raw {
            tracing::warn!(%spec, raw, size_bytes, "image size is not a whole number of blocks; serving the blocks that fit");
        }
        // Unreadable setting: assume the cache is on, so hosts keep flushing.
        let cache = img
            .conf_get("rbd_cache")
            .map(|v| v == CONF_TRUE)
            .unwrap_or(true);
        let info = BackendInfo {
            size_bytes,
            block_size,
            volatile_write_cache: cache,
            supports_deallocate: true,
            supports_write_zeroes: true,
            deallocated_reads_zero: false,
            description: format!(
                "{spec} (librbd, cache {})",
                if cache { "write-back" } else { "off" }
            ),
        };
        // Option names only (a value could be private); the two settings that change
        // how I/O behaves are shown as librados resolved them.
        let option_names: Vec<&str> = opts.ceph_options.keys().map(String::as_str).collect();
        let op_timeout = img.conf_get(OSD_OP_TIMEOUT).unwrap_or_default();
        tracing::info!(%spec, size_bytes, block_size, rbd_cache = cache,
            rados_osd_op_timeout = %op_timeout, ceph_options = ?option_names,
            group_client = img.shares_client(), "RBD image opened");
        // librbd runs a compare-and-write as one OSD operation (cmpext + write) only
        // inside one 512-byte sector of one stripe unit, and refuses anything larger
        // with EINVAL (Pacific's ImageCompareAndWriteRequest): pairs inside a sector go
        // to librbd, atomic for every gateway of the image; larger ones are emulated
        // under this target's range lock. Unreadable striping: always emulated.
        let cw_unit = img
            .stripe_unit()
            .ok()
            .filter(|&u| u > 0)
            .map(|u| u.min(RBD_CMPEXT_SECTOR));
        Ok(RbdBackend {
            image: Arc::new(img),
            info,
            spec: spec.into(),
            cw_unit,
        })
    }

    /// Whether the image was opened on another client's connection ([`shared`]).
    pub fn shares_client(&self) -> bool {
        self.image.shares_client()
    }
}

impl Backend for RbdBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        let mailbox = ffi::Completions::new()
            .map_err(|e| BackendError::Io(e.raw_os_error().unwrap_or(libc::EIO)))?;
        Ok(Box::new(RbdChannel {
            image: self.image.clone(),
            mailbox,
            size_bytes: self.info.size_bytes,
            flush_for_fua: self.info.volatile_write_cache,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            ready: Vec::new(),
            done: Vec::new(),
            spec: self.spec.clone(),
        }))
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.image
            .flush_blocking()
            .map_err(|e| map_errno(Kind::Flush, e.errno))
    }

    fn compare_and_write_unit(&self) -> Option<u64> {
        self.cw_unit
    }

    fn backing_size(&self) -> Option<u64> {
        match self.image.size() {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(spec = %self.spec, error = %e, "cannot read the image size");
                None
            }
        }
    }
}

/// The unit librbd's compare-and-write must stay inside (its sector size).
const RBD_CMPEXT_SECTOR: u64 = 512;

/// What an operation is, for error mapping and the FUA flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    /// A FUA write whose data is in librbd's cache: flush before completing.
    WriteThenFlush,
    Flush,
    WriteZeroes,
    Discard,
    CompareAndWrite,
}

/// Maps a librbd errno for an operation of `kind` (see the module docs).
fn map_errno(kind: Kind, errno: i32) -> BackendError {
    match errno {
        // librbd's compare-and-write: the data differs, nothing was written.
        libc::EILSEQ if kind == Kind::CompareAndWrite => BackendError::Miscompare,
        EBLOCKLISTED => BackendError::Fenced,
        libc::ENOENT => BackendError::Gone,
        // ETIMEDOUT: `rados_osd_op_timeout` passed, the namespace's own or, on a gateway
        // group's client (`shared`), the group's lease: retryable, so hosts retry.
        libc::ETIMEDOUT
        | libc::ENOTCONN
        | libc::ECONNREFUSED
        | libc::ECONNRESET
        | libc::EHOSTUNREACH => BackendError::Unavailable(errno),
        libc::EROFS => BackendError::ReadOnly,
        libc::EACCES | libc::EPERM => BackendError::AccessDenied(errno),
        libc::ENOSPC | libc::EDQUOT => BackendError::NoSpace,
        _ if kind == Kind::Read => BackendError::ReadIo(errno),
        _ => BackendError::WriteIo(errno),
    }
}

/// An operation in a channel slot.
struct Pending {
    tag: u64,
    kind: Kind,
    /// Bytes a read must return.
    len: usize,
    op: ffi::InFlight,
}

/// One thread's submission channel (see the module docs).
pub struct RbdChannel {
    image: Arc<ffi::Image>,
    mailbox: ffi::Completions,
    size_bytes: u64,
    flush_for_fua: bool,
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Operations librbd holds.
    live: usize,
    /// Finished without librbd (empty transfers, refused submissions).
    ready: Vec<IoCompletion>,
    done: Vec<ffi::Done>,
    spec: Arc<str>,
}

impl RbdChannel {
    fn alloc_slot(&mut self) -> usize {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.slots.push(None);
        self.slots.len() - 1
    }

    /// Hands `req` to librbd in `slot`; on refusal the slot is freed and the command
    /// completes with the mapped error on the next poll.
    fn issue(&mut self, slot: usize, tag: u64, kind: Kind, len: usize, req: ffi::Request) {
        match ffi::submit(&self.image, req, &self.mailbox, slot) {
            Ok(op) => {
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = Some(Pending { tag, kind, len, op });
                    self.live += 1;
                }
            }
            Err(errno) => {
                tracing::warn!(spec = %self.spec, errno, ?kind, "librbd refused an operation");
                self.free.push(slot);
                self.complete_later(tag, Err(map_errno(kind, errno)));
            }
        }
    }

    /// Queues a completion that did not go through librbd, and makes the eventfd
    /// readable so a sleeping poll group comes to reap it.
    fn complete_later(&mut self, tag: u64, r: Result<(), BackendError>) {
        self.ready.push((tag, r.map(|()| CqeResult::NONE)));
        self.mailbox.signal();
    }

    /// Handles librbd's report `d`; returns the completion to hand out, if any.
    fn on_done(&mut self, d: &ffi::Done) -> Option<IoCompletion> {
        let slot = d.slot();
        let p = self.slots.get_mut(slot)?.take()?;
        let (ret, _buf) = match p.op.finish(d) {
            Ok(r) => r,
            Err(op) => {
                // Not this slot's completion: keep it (cannot happen by construction).
                tracing::error!(spec = %self.spec, slot, "librbd completion does not match its slot");
                if let Some(s) = self.slots.get_mut(slot) {
                    *s = Some(Pending { op, ..p });
                }
                return None;
            }
        };
        self.live = self.live.saturating_sub(1);
        let result = if ret < 0 {
            let errno = i32::try_from(-ret).unwrap_or(libc::EIO);
            Err(map_errno(p.kind, errno))
        } else if p.kind == Kind::Read && usize::try_from(ret).ok() != Some(p.len) {
            Err(BackendError::Short {
                done: usize::try_from(ret).unwrap_or(0),
                want: p.len,
            })
        } else if p.kind == Kind::WriteThenFlush {
            // The data is in librbd's cache: FUA wants it on the OSDs first.
            self.issue(slot, p.tag, Kind::Flush, 0, ffi::Request::Flush);
            return None;
        } else {
            Ok(CqeResult::NONE)
        };
        self.free.push(slot);
        Some((p.tag, result))
    }
}

impl IoChannel for RbdChannel {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        op.check_range(self.size_bytes)?;
        let (kind, len, req) = match op {
            IoOp::Read { buf, .. } | IoOp::Write { buf, .. } if buf.len == 0 => {
                self.complete_later(tag, Ok(()));
                return Ok(());
            }
            IoOp::WriteZeroes { len: 0, .. } | IoOp::Deallocate { len: 0, .. } => {
                self.complete_later(tag, Ok(()));
                return Ok(());
            }
            IoOp::Read { offset, buf } => (Kind::Read, buf.len, ffi::Request::Read { offset, buf }),
            IoOp::Write { offset, buf, fua } => {
                let kind = if fua && self.flush_for_fua {
                    Kind::WriteThenFlush
                } else {
                    Kind::Write
                };
                (kind, buf.len, ffi::Request::Write { offset, buf })
            }
            IoOp::Flush => (Kind::Flush, 0, ffi::Request::Flush),
            IoOp::WriteZeroes { offset, len } => (
                Kind::WriteZeroes,
                0,
                ffi::Request::WriteZeroes { offset, len },
            ),
            IoOp::Deallocate { offset, len } => {
                (Kind::Discard, 0, ffi::Request::Discard { offset, len })
            }
        };
        let slot = self.alloc_slot();
        self.issue(slot, tag, kind, len, req);
        Ok(())
    }

    /// librbd takes each operation at submit: nothing is batched.
    fn flush(&mut self) {}

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let before = out.len();
        out.append(&mut self.ready);
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        self.mailbox.drain(&mut done);
        for d in &done {
            if let Some(c) = self.on_done(d) {
                out.push(c);
            }
        }
        self.done = done;
        // A FUA flush refused at issue lands in `ready`.
        out.append(&mut self.ready);
        out.len() - before
    }

    fn in_flight(&self) -> usize {
        self.live + self.ready.len()
    }

    fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.mailbox.event_fd())
    }

    fn submit_compare_and_write(
        &mut self,
        tag: u64,
        op: crate::backend::CompareAndWrite,
    ) -> Result<(), BackendError> {
        let crate::backend::CompareAndWrite { offset, cmp, buf } = op;
        let len = cmp.len.max(buf.len) as u64;
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.size_bytes)
        {
            return Err(BackendError::OutOfRange);
        }
        let slot = self.alloc_slot();
        let req = ffi::Request::CompareAndWrite { offset, cmp, buf };
        self.issue(slot, tag, Kind::CompareAndWrite, 0, req);
        Ok(())
    }
}

impl Drop for RbdChannel {
    fn drop(&mut self) {
        if self.live == 0 {
            return;
        }
        let deadline = Instant::now() + CHANNEL_DRAIN_TIMEOUT;
        let mut sink = Vec::new();
        while self.live > 0 {
            sink.clear();
            self.poll(&mut sink);
            if self.live == 0 {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                // Each unfinished InFlight leaks its buffer and image reference on drop.
                tracing::error!(spec = %self.spec, in_flight = self.live, "librbd still holds I/O after the drain timeout; leaking its buffers");
                return;
            }
            self.mailbox.wait(DRAIN_POLL.min(deadline - now));
        }
    }
}
