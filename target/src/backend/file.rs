//! Regular files and block devices, through one io_uring per channel.
//!
//! # Opening
//!
//! The size is the file's length, or `BLKGETSIZE64` for a block device, rounded down to
//! a whole number of blocks (with a warning). The logical block size is the device's
//! (`BLKSSZGET`) for block devices and 512 for files unless [`FileOptions::block_size`]
//! says otherwise. Two descriptors are kept: a buffered one, and an `O_DIRECT` one
//! unless [`FileOptions::buffered_io`] is set or the filesystem refuses `O_DIRECT`.
//!
//! # I/O
//!
//! Each [`Backend::open_channel`] creates an io_uring (256 entries) with both
//! descriptors registered and an eventfd registered for [`IoChannel::event_fd`]. An I/O
//! goes to the `O_DIRECT` descriptor when its file offset, length and buffer address
//! meet the direct I/O alignment (`statx(STATX_DIOALIGN)`, the logical block size for
//! block devices, 4096 when the kernel does not say); otherwise to the buffered one.
//! The kernel keeps the two coherent (direct I/O writes back and invalidates the page
//! cache over its range).
//!
//! * Read/Write → `IORING_OP_READ`/`WRITE`; a FUA write carries `RWF_DSYNC` (or is
//!   followed by an `fdatasync` if the kernel refuses the flag). Short transfers are
//!   resubmitted for the remainder; an `EINVAL` from the direct descriptor is retried on
//!   the buffered one.
//! * Flush → `fdatasync`.
//! * Write Zeroes → `fallocate(ZERO_RANGE)`, falling back to `PUNCH_HOLE` and then to
//!   writing a shared zero buffer in chunks when the filesystem says `EOPNOTSUPP`. The
//!   fallback happens inside the channel, and what works is remembered per backend.
//! * Deallocate → `fallocate(PUNCH_HOLE)`. Files: reported as supported and reading back
//!   zeroes (falling back to writing zeroes if holes are unsupported). Block devices:
//!   io_uring has no discard before 6.12 and a blocking `BLKDISCARD` would stall the
//!   serving thread, so Deallocate is reported unsupported and is best effort: a
//!   `PUNCH_HOLE` (the kernel's Write Zeroes with unmap, never a fallback that writes
//!   pages), and a no-op success where the device cannot do that (Deallocate is
//!   advisory).
//!
//! A channel never fails with `Busy` because the ring is full: operations wait in an
//! overflow queue and are issued as completions make room. Dropping a channel waits for
//! everything the kernel still holds, so no buffer is freed under an I/O.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use io_uring::{opcode, squeue, types, IoUring};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nvmf_verbs::DmaBuffer;

use super::spec::{check_block_size, OpenError};
use super::{
    Backend, BackendError, BackendInfo, CqeResult, DmaSlice, IoChannel, IoCompletion, IoOp,
};

/// Submission queue entries per channel (the completion queue has twice as many).
pub const RING_ENTRIES: u32 = 256;
/// Largest transfer issued in one SQE; longer ones continue as "short" transfers.
const MAX_IO: usize = 1 << 30;
/// Size of the shared zero buffer used when the filesystem cannot zero a range itself.
const ZERO_CHUNK: usize = 256 * 1024;
/// How often an `EAGAIN`/`EINTR` completion is retried before it is reported.
const MAX_RETRIES: u8 = 16;
/// Direct I/O alignment assumed for files when `statx` does not report one.
const FALLBACK_DIO_ALIGN: u32 = 4096;

/// Registered file indices.
const BUFFERED_IDX: u32 = 0;
const DIRECT_IDX: u32 = 1;

nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
nix::ioctl_read_bad!(blksszget, libc::BLKSSZGET, libc::c_int);

/// How to open a file backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOptions {
    /// Never use `O_DIRECT`.
    pub buffered_io: bool,
    /// Open read-only: writes complete with an error.
    pub read_only: bool,
    /// Logical block size; `None`: the device's for block devices, 512 for files.
    pub block_size: Option<u32>,
}

/// Direct I/O alignment: file offset and length, and buffer address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DioAlign {
    pub offset: u32,
    pub mem: u32,
}

/// How Write Zeroes is done; learned per backend as the filesystem refuses methods.
const ZERO_RANGE: u8 = 0;
const ZERO_PUNCH: u8 = 1;
const ZERO_WRITE: u8 = 2;

/// What every channel of a file backend shares.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    size_bytes: u64,
    is_block_device: bool,
    buffered: File,
    direct: Option<(File, DioAlign)>,
    /// First Write Zeroes method to try.
    zero_mode: AtomicU8,
    /// First Deallocate method to try (ZERO_PUNCH or ZERO_WRITE).
    dealloc_mode: AtomicU8,
    /// Block devices only: punching holes does not work, Deallocate is a no-op.
    dealloc_noop: AtomicBool,
    /// `RWF_DSYNC` is accepted.
    dsync_ok: AtomicBool,
    /// The direct descriptor refused a transfer we believed aligned (EINVAL): the
    /// reported alignment is wrong, so everything goes buffered from then on.
    direct_disabled: AtomicBool,
    /// Source of zero-filling writes; never written after allocation.
    zero_buf: OnceLock<Option<DmaBuffer>>,
}

impl Shared {
    /// Whether an I/O of `len` bytes at file offset `pos` from address `addr` may use the
    /// `O_DIRECT` descriptor.
    fn direct_ok(&self, pos: u64, addr: *const u8, len: usize) -> bool {
        match &self.direct {
            Some(_) if self.direct_disabled.load(Ordering::Relaxed) => false,
            Some((_, a)) => {
                pos.is_multiple_of(u64::from(a.offset))
                    && len.is_multiple_of(a.offset as usize)
                    && (addr as usize).is_multiple_of(a.mem as usize)
            }
            None => false,
        }
    }

    fn disable_direct(&self) {
        if !self.direct_disabled.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                path = %self.path.display(),
                align = ?self.direct.as_ref().map(|(_, a)| *a),
                "O_DIRECT refused an aligned transfer (EINVAL); using buffered I/O from now on"
            );
        }
    }

    fn zero_buf(&self) -> Option<&DmaBuffer> {
        self.zero_buf
            .get_or_init(|| DmaBuffer::new(ZERO_CHUNK))
            .as_ref()
    }
}

/// A file or block device namespace.
#[derive(Debug)]
pub struct FileBackend {
    info: BackendInfo,
    shared: Arc<Shared>,
}

/// `statx(STATX_DIOALIGN)` of an open file: `None` if the kernel or filesystem does not
/// say, `Some(None)` if the file does not support direct I/O.
fn statx_dio_align(file: &File) -> Option<Option<DioAlign>> {
    // SAFETY: statx is a plain C struct of integers, for which all zeroes is valid.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty NUL-terminated path with AT_EMPTY_PATH (so the
    // descriptor itself is examined), and a writable statx buffer.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    if stx.stx_dio_offset_align == 0 {
        return Some(None);
    }
    Some(Some(DioAlign {
        offset: stx.stx_dio_offset_align,
        mem: stx.stx_dio_mem_align.max(1),
    }))
}

/// Size in bytes and logical block size of a block device.
fn block_device_geometry(path: &Path, file: &File) -> Result<(u64, u32), OpenError> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which is valid.
    unsafe { blkgetsize64(file.as_raw_fd(), &mut size) }.map_err(|e| OpenError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(e),
    })?;
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which is valid.
    unsafe { blksszget(file.as_raw_fd(), &mut lbs) }.map_err(|e| OpenError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(e),
    })?;
    let lbs = u32::try_from(lbs).unwrap_or(0);
    Ok((size, lbs))
}

impl FileBackend {
    /// Opens a regular file or block device.
    pub fn open(path: &Path, opts: FileOptions) -> Result<FileBackend, OpenError> {
        let meta = std::fs::metadata(path).map_err(|e| OpenError::from_io(path, e))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            return Err(OpenError::Directory {
                path: path.to_path_buf(),
            });
        }
        let is_block_device = ft.is_block_device();
        if !ft.is_file() && !is_block_device {
            return Err(OpenError::NotFileOrBlockDevice {
                path: path.to_path_buf(),
            });
        }
        let open = |direct: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(!opts.read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let buffered = open(false).map_err(|e| OpenError::from_io(path, e))?;

        let what = path.display().to_string();
        let (raw_size, block_size) = if is_block_device {
            let (size, lbs) = block_device_geometry(path, &buffered)?;
            check_block_size(&what, lbs)?;
            let bs = opts.block_size.unwrap_or(lbs);
            check_block_size(&what, bs)?;
            if !bs.is_multiple_of(lbs) {
                return Err(OpenError::BlockSizeMismatch {
                    path: path.to_path_buf(),
                    block_size: bs,
                    device_block_size: lbs,
                });
            }
            (size, bs)
        } else {
            let size = buffered
                .metadata()
                .map_err(|e| OpenError::from_io(path, e))?
                .len();
            let bs = opts.block_size.unwrap_or(512);
            check_block_size(&what, bs)?;
            (size, bs)
        };
        if raw_size == 0 {
            return Err(OpenError::Empty {
                path: path.to_path_buf(),
            });
        }
        let bs64 = u64::from(block_size);
        if raw_size < bs64 {
            return Err(OpenError::TooSmall {
                path: path.to_path_buf(),
                size: raw_size,
                min: bs64,
            });
        }
        let size_bytes = raw_size - raw_size % bs64;
        if size_bytes != raw_size {
            tracing::warn!(
                path = %path.display(),
                size = raw_size,
                block_size,
                usable = size_bytes,
                "backing size is not a multiple of the block size; ignoring the last {} bytes",
                raw_size - size_bytes
            );
        }

        let direct = if opts.buffered_io {
            None
        } else {
            match open(true) {
                Ok(f) => {
                    let align = if is_block_device {
                        // The logical block size is always a valid direct I/O alignment.
                        let (_, lbs) = block_device_geometry(path, &f)?;
                        match statx_dio_align(&f) {
                            Some(Some(a)) => Some(a),
                            _ => Some(DioAlign {
                                offset: lbs,
                                mem: lbs,
                            }),
                        }
                    } else {
                        match statx_dio_align(&f) {
                            Some(a) => a,
                            None => Some(DioAlign {
                                offset: FALLBACK_DIO_ALIGN,
                                mem: FALLBACK_DIO_ALIGN,
                            }),
                        }
                    };
                    match align {
                        Some(a) => Some((f, a)),
                        None => {
                            tracing::info!(path = %path.display(), "filesystem does not support direct I/O; using buffered I/O");
                            None
                        }
                    }
                }
                Err(e) => {
                    tracing::info!(path = %path.display(), error = %e, "O_DIRECT open failed; using buffered I/O");
                    None
                }
            }
        };

        let kind = if is_block_device {
            "block device"
        } else {
            "file"
        };
        let mode = match &direct {
            Some(_) => "O_DIRECT",
            None => "buffered",
        };
        let ro = if opts.read_only { ", read-only" } else { "" };
        let info = BackendInfo {
            size_bytes,
            block_size,
            volatile_write_cache: true,
            supports_deallocate: !is_block_device,
            supports_write_zeroes: true,
            deallocated_reads_zero: !is_block_device,
            description: format!("{kind} {} ({mode}{ro})", path.display()),
        };
        Ok(FileBackend {
            info,
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                size_bytes,
                is_block_device,
                buffered,
                direct,
                zero_mode: AtomicU8::new(ZERO_RANGE),
                dealloc_mode: AtomicU8::new(ZERO_PUNCH),
                dealloc_noop: AtomicBool::new(false),
                dsync_ok: AtomicBool::new(true),
                direct_disabled: AtomicBool::new(false),
                zero_buf: OnceLock::new(),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    pub fn is_block_device(&self) -> bool {
        self.shared.is_block_device
    }

    /// Whether aligned I/O uses `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.shared.direct.is_some() && !self.shared.direct_disabled.load(Ordering::Relaxed)
    }

    /// The alignment direct I/O needs, when `O_DIRECT` is in use.
    pub fn dio_align(&self) -> Option<DioAlign> {
        self.shared.direct.as_ref().map(|(_, a)| *a)
    }

    /// Opens a channel with its concrete type (for its statistics).
    pub fn open_file_channel(&self) -> Result<FileChannel, BackendError> {
        FileChannel::new(self.shared.clone())
    }
}

impl Backend for FileBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        Ok(Box::new(self.open_file_channel()?))
    }

    fn sync(&self) -> Result<(), BackendError> {
        // One descriptor suffices: fdatasync covers the file, whichever descriptor
        // (buffered or O_DIRECT) wrote it.
        self.shared
            .buffered
            .sync_data()
            .map_err(|e| BackendError::Io(e.raw_os_error().unwrap_or(libc::EIO)))
    }
}

/// Counters of one channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileChannelStats {
    /// Read/write SQEs issued on the `O_DIRECT` descriptor.
    pub direct: u64,
    /// Read/write SQEs issued on the buffered descriptor.
    pub buffered: u64,
    /// SQEs issued again (short transfer, retry, fallback).
    pub resubmitted: u64,
}

/// A data transfer in progress.
struct Rw {
    offset: u64,
    buf: DmaSlice,
    write: bool,
    fua: bool,
    /// Bytes transferred so far.
    done: usize,
    /// May use the direct descriptor (cleared after it returned EINVAL).
    allow_direct: bool,
    /// The SQE in flight went to the direct descriptor.
    used_direct: bool,
    /// The SQE in flight carried RWF_DSYNC.
    used_dsync: bool,
    /// A FUA write had a part written without RWF_DSYNC: fdatasync at the end.
    need_sync: bool,
    /// The fdatasync of a FUA write is in flight.
    syncing: bool,
}

/// Write Zeroes or Deallocate in progress.
struct Zero {
    offset: u64,
    len: u64,
    dealloc: bool,
    stage: u8,
    /// Bytes written so far (ZERO_WRITE).
    done: u64,
    allow_direct: bool,
    used_direct: bool,
}

enum Op {
    Rw(Rw),
    Flush,
    Zero(Zero),
    /// Completes with this result without doing anything (through a NOP, so that
    /// completions always arrive by the ring and its eventfd).
    Nop(Result<(), BackendError>),
}

struct Pending {
    tag: u64,
    op: Op,
    retries: u8,
}

enum Next {
    Done(Result<(), BackendError>),
    /// Issue the (updated) operation again.
    Again,
}

/// errno → the error the host sees. `write`: the operation modifies the namespace.
fn map_errno(write: bool, errno: i32) -> BackendError {
    match errno {
        libc::ENOSPC | libc::EDQUOT => BackendError::NoSpace,
        libc::EOPNOTSUPP | libc::ENOSYS => BackendError::Unsupported,
        libc::EFAULT | libc::ENOMEM | libc::ENOBUFS | libc::EINVAL | libc::ECANCELED => {
            BackendError::Io(errno)
        }
        _ if write => BackendError::WriteIo(errno),
        _ => BackendError::ReadIo(errno),
    }
}

fn is_retryable(errno: i32) -> bool {
    errno == libc::EAGAIN || errno == libc::EINTR
}

fn refuses_method(errno: i32) -> bool {
    errno == libc::EOPNOTSUPP || errno == libc::ENOSYS || errno == libc::EINVAL
}

/// A per-thread io_uring channel of a [`FileBackend`].
pub struct FileChannel {
    shared: Arc<Shared>,
    ring: IoUring,
    eventfd: EventFd,
    slab: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Slab indices waiting for room in the SQ (or under the in-kernel limit).
    queued: VecDeque<usize>,
    /// SQEs pushed (submitted or not) whose CQE has not been reaped.
    in_kernel: usize,
    /// At most this many SQEs in the kernel, so the CQ can never overflow.
    kernel_cap: usize,
    /// Operations accepted and not yet handed out by `poll`.
    live: usize,
    cqes: Vec<(u64, i32)>,
    stats: FileChannelStats,
}

impl FileChannel {
    fn new(shared: Arc<Shared>) -> Result<FileChannel, BackendError> {
        let errno = |e: std::io::Error| BackendError::Io(e.raw_os_error().unwrap_or(libc::EIO));
        let ring = IoUring::new(RING_ENTRIES).map_err(errno)?;
        let mut fds = vec![shared.buffered.as_raw_fd()];
        if let Some((f, _)) = &shared.direct {
            fds.push(f.as_raw_fd());
        }
        ring.submitter().register_files(&fds).map_err(errno)?;
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| BackendError::Io(e as i32))?;
        ring.submitter()
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(errno)?;
        let kernel_cap = ring.params().cq_entries() as usize;
        let depth = RING_ENTRIES as usize;
        Ok(FileChannel {
            shared,
            ring,
            eventfd,
            slab: Vec::with_capacity(depth),
            free: Vec::with_capacity(depth),
            queued: VecDeque::with_capacity(depth),
            in_kernel: 0,
            kernel_cap,
            live: 0,
            cqes: Vec::with_capacity(kernel_cap),
            stats: FileChannelStats::default(),
        })
    }

    pub fn stats(&self) -> FileChannelStats {
        self.stats
    }

    fn alloc(&mut self, p: Pending) -> usize {
        self.live += 1;
        match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(p);
                i
            }
            None => {
                self.slab.push(Some(p));
                self.slab.len() - 1
            }
        }
    }

    /// The SQE for the next step of `p`, tagged with slab index `idx`.
    /// For data transfers, also whether the SQE uses the direct descriptor.
    fn build(shared: &Shared, p: &mut Pending, idx: usize) -> (squeue::Entry, Option<bool>) {
        let ud = idx as u64;
        let fixed = |direct: bool| types::Fixed(if direct { DIRECT_IDX } else { BUFFERED_IDX });
        let fdatasync = || {
            opcode::Fsync::new(fixed(false))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(ud)
        };
        match &mut p.op {
            Op::Nop(_) => (opcode::Nop::new().build().user_data(ud), None),
            Op::Flush => (fdatasync(), None),
            Op::Rw(rw) if rw.syncing => (fdatasync(), None),
            Op::Rw(rw) => {
                let pos = rw.offset + rw.done as u64;
                let n = (rw.buf.len - rw.done).min(MAX_IO);
                // Validated at submit; a null pointer would only make the I/O fail.
                let addr = rw
                    .buf
                    .buf
                    .ptr_at(rw.buf.offset + rw.done, n)
                    .unwrap_or(std::ptr::null_mut());
                let direct = rw.allow_direct && shared.direct_ok(pos, addr, n);
                rw.used_direct = direct;
                let entry = if rw.write {
                    let dsync = rw.fua && shared.dsync_ok.load(Ordering::Relaxed);
                    rw.used_dsync = dsync;
                    if rw.fua && !dsync {
                        rw.need_sync = true;
                    }
                    opcode::Write::new(fixed(direct), addr, n as u32)
                        .offset(pos)
                        .rw_flags(if dsync { libc::RWF_DSYNC } else { 0 })
                        .build()
                        .user_data(ud)
                } else {
                    opcode::Read::new(fixed(direct), addr, n as u32)
                        .offset(pos)
                        .build()
                        .user_data(ud)
                };
                (entry, Some(direct))
            }
            Op::Zero(z) if z.stage == ZERO_RANGE || z.stage == ZERO_PUNCH => {
                let mode = if z.stage == ZERO_RANGE {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                };
                let entry = opcode::Fallocate::new(fixed(false), z.len)
                    .offset(z.offset)
                    .mode(mode)
                    .build()
                    .user_data(ud);
                (entry, None)
            }
            Op::Zero(z) => {
                let pos = z.offset + z.done;
                let n = (z.len - z.done).min(ZERO_CHUNK as u64) as usize;
                let addr = shared
                    .zero_buf()
                    .and_then(|b| b.ptr_at(0, n))
                    .unwrap_or(std::ptr::null_mut());
                let direct = z.allow_direct && shared.direct_ok(pos, addr, n);
                z.used_direct = direct;
                let entry = opcode::Write::new(fixed(direct), addr, n as u32)
                    .offset(pos)
                    .build()
                    .user_data(ud);
                (entry, Some(direct))
            }
        }
    }

    /// Pushes queued operations into the SQ while there is room.
    fn push_queued(&mut self) {
        while let Some(&idx) = self.queued.front() {
            if self.in_kernel >= self.kernel_cap {
                break;
            }
            let Some(p) = self.slab.get_mut(idx).and_then(|s| s.as_mut()) else {
                self.queued.pop_front();
                continue;
            };
            let (entry, direct) = Self::build(&self.shared, p, idx);
            // SAFETY: every pointer in the entry stays valid until its CQE is reaped: data
            // buffers are `DmaSlice`s held by the slab entry, the zero buffer belongs to
            // `shared`, which this channel holds, and `Drop` waits for all in-kernel SQEs
            // before either is released. The fixed file indices are registered.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_err() {
                break; // SQ full: submit, then continue.
            }
            self.queued.pop_front();
            self.in_kernel += 1;
            match direct {
                Some(true) => self.stats.direct += 1,
                Some(false) => self.stats.buffered += 1,
                None => {}
            }
        }
    }

    /// Takes the completion `res` of slab entry `idx`; returns what to hand out, if the
    /// operation is over.
    fn on_cqe(&mut self, idx: usize, res: i32) -> Option<IoCompletion> {
        let mut p = self.slab.get_mut(idx)?.take()?;
        let next = Self::advance(&self.shared, &mut p, res);
        match next {
            Next::Again => {
                self.stats.resubmitted += 1;
                self.slab[idx] = Some(p);
                self.queued.push_back(idx);
                None
            }
            Next::Done(r) => {
                self.free.push(idx);
                self.live -= 1;
                Some((p.tag, r.map(|()| CqeResult::NONE)))
            }
        }
    }

    fn advance(shared: &Shared, p: &mut Pending, res: i32) -> Next {
        if res < 0 && is_retryable(-res) && !matches!(p.op, Op::Nop(_)) {
            p.retries += 1;
            if p.retries <= MAX_RETRIES {
                return Next::Again;
            }
        }
        match &mut p.op {
            Op::Nop(r) => Next::Done(r.clone()),
            Op::Flush => {
                if res < 0 {
                    Next::Done(Err(map_errno(true, -res)))
                } else {
                    Next::Done(Ok(()))
                }
            }
            Op::Rw(rw) => {
                if rw.syncing {
                    return if res < 0 {
                        Next::Done(Err(map_errno(true, -res)))
                    } else {
                        Next::Done(Ok(()))
                    };
                }
                if res < 0 {
                    let e = -res;
                    if e == libc::EINVAL && rw.used_direct {
                        rw.allow_direct = false;
                        shared.disable_direct();
                        return Next::Again;
                    }
                    if rw.used_dsync && (e == libc::EOPNOTSUPP || e == libc::EINVAL) {
                        shared.dsync_ok.store(false, Ordering::Relaxed);
                        return Next::Again;
                    }
                    return Next::Done(Err(map_errno(rw.write, e)));
                }
                if res == 0 {
                    // End of file inside the namespace: the file shrank under us.
                    return Next::Done(Err(if rw.write {
                        BackendError::Short {
                            done: rw.done,
                            want: rw.buf.len,
                        }
                    } else {
                        BackendError::ReadIo(libc::ENODATA)
                    }));
                }
                rw.done += res as usize;
                if rw.done < rw.buf.len {
                    return Next::Again;
                }
                if rw.need_sync {
                    rw.syncing = true;
                    return Next::Again;
                }
                Next::Done(Ok(()))
            }
            Op::Zero(z) => {
                if res >= 0 {
                    if z.stage != ZERO_WRITE {
                        return Next::Done(Ok(()));
                    }
                    if res == 0 {
                        return Next::Done(Err(BackendError::Short {
                            done: z.done as usize,
                            want: z.len as usize,
                        }));
                    }
                    z.done += res as u64;
                    return if z.done < z.len {
                        Next::Again
                    } else {
                        Next::Done(Ok(()))
                    };
                }
                let e = -res;
                // Only a definite "not supported" is remembered; EINVAL may be about
                // this range alone.
                let remember = e != libc::EINVAL;
                match z.stage {
                    ZERO_RANGE if refuses_method(e) => {
                        if remember {
                            let _ = shared.zero_mode.compare_exchange(
                                ZERO_RANGE,
                                ZERO_PUNCH,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            );
                        }
                        z.stage = ZERO_PUNCH;
                        Next::Again
                    }
                    ZERO_PUNCH if refuses_method(e) => {
                        if z.dealloc && shared.is_block_device {
                            if remember {
                                shared.dealloc_noop.store(true, Ordering::Relaxed);
                            }
                            return Next::Done(Ok(()));
                        }
                        if remember {
                            let mode = if z.dealloc {
                                &shared.dealloc_mode
                            } else {
                                &shared.zero_mode
                            };
                            mode.store(ZERO_WRITE, Ordering::Relaxed);
                        }
                        z.stage = ZERO_WRITE;
                        Next::Again
                    }
                    ZERO_WRITE if e == libc::EINVAL && z.used_direct => {
                        z.allow_direct = false;
                        shared.disable_direct();
                        Next::Again
                    }
                    _ => Next::Done(Err(map_errno(true, e))),
                }
            }
        }
    }

    /// Reaps every available CQE, handing finished operations to `out`.
    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        if self.ring.completion().is_empty() {
            return;
        }
        // Clear the eventfd before reaping, so a CQE posted after this point signals it
        // again. EAGAIN (already clear) is fine.
        let _ = self.eventfd.read();
        self.cqes.clear();
        for cqe in self.ring.completion() {
            self.cqes.push((cqe.user_data(), cqe.result()));
        }
        self.in_kernel = self.in_kernel.saturating_sub(self.cqes.len());
        for i in 0..self.cqes.len() {
            let (ud, res) = self.cqes[i];
            if let Some(c) = self.on_cqe(ud as usize, res) {
                out.push(c);
            }
        }
    }
}

impl IoChannel for FileChannel {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        op.check_range(self.shared.size_bytes)?;
        let op = match op {
            IoOp::Read { buf, .. } | IoOp::Write { buf, .. } if buf.len == 0 => Op::Nop(Ok(())),
            IoOp::Read { offset, buf } => {
                buf.buf
                    .ptr_at(buf.offset, buf.len)
                    .ok_or(BackendError::Io(libc::EFAULT))?;
                Op::Rw(Rw {
                    offset,
                    buf,
                    write: false,
                    fua: false,
                    done: 0,
                    allow_direct: true,
                    used_direct: false,
                    used_dsync: false,
                    need_sync: false,
                    syncing: false,
                })
            }
            IoOp::Write { offset, buf, fua } => {
                buf.buf
                    .ptr_at(buf.offset, buf.len)
                    .ok_or(BackendError::Io(libc::EFAULT))?;
                Op::Rw(Rw {
                    offset,
                    buf,
                    write: true,
                    fua,
                    done: 0,
                    allow_direct: true,
                    used_direct: false,
                    used_dsync: false,
                    need_sync: false,
                    syncing: false,
                })
            }
            IoOp::Flush => Op::Flush,
            IoOp::WriteZeroes { len: 0, .. } | IoOp::Deallocate { len: 0, .. } => Op::Nop(Ok(())),
            IoOp::WriteZeroes { offset, len } => Op::Zero(Zero {
                offset,
                len,
                dealloc: false,
                stage: self.shared.zero_mode.load(Ordering::Relaxed),
                done: 0,
                allow_direct: true,
                used_direct: false,
            }),
            IoOp::Deallocate { offset, len } => {
                if self.shared.dealloc_noop.load(Ordering::Relaxed) {
                    Op::Nop(Ok(()))
                } else {
                    Op::Zero(Zero {
                        offset,
                        len,
                        dealloc: true,
                        stage: self.shared.dealloc_mode.load(Ordering::Relaxed),
                        done: 0,
                        allow_direct: true,
                        used_direct: false,
                    })
                }
            }
        };
        let idx = self.alloc(Pending {
            tag,
            op,
            retries: 0,
        });
        self.queued.push_back(idx);
        self.push_queued();
        Ok(())
    }

    fn flush(&mut self) {
        loop {
            self.push_queued();
            if self.ring.submission().is_empty() {
                break;
            }
            match self.ring.submit() {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // EAGAIN/EBUSY: transient; the entries stay queued for the next call.
                    if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) {
                        tracing::error!(path = %self.shared.path.display(), error = %e, "io_uring submit failed");
                    }
                    break;
                }
            }
            if self.queued.is_empty() || self.in_kernel >= self.kernel_cap {
                break;
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let before = out.len();
        self.reap(out);
        // Resubmissions and operations that waited for room go out now.
        if !self.queued.is_empty() {
            self.flush();
        }
        out.len() - before
    }

    fn in_flight(&self) -> usize {
        self.live
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.eventfd.as_raw_fd())
    }
}

impl Drop for FileChannel {
    fn drop(&mut self) {
        // Never pushed: the kernel has not seen these.
        self.queued.clear();
        while self.in_kernel > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // The kernel may still use the buffers: leak them rather than free
                    // memory it could write.
                    tracing::error!(path = %self.shared.path.display(), error = %e, in_flight = self.in_kernel, "cannot wait for in-flight I/O; leaking its buffers");
                    std::mem::forget(std::mem::take(&mut self.slab));
                    std::mem::forget(self.shared.clone());
                    return;
                }
            }
            let n = self.ring.completion().count();
            self.in_kernel = self.in_kernel.saturating_sub(n);
        }
    }
}

#[cfg(test)]
mod tests;
