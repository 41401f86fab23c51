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

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use nvmf_verbs::DmaBuffer;

use super::options::{check_block_size, OpenError};
use super::{Backend, BackendError, BackendInfo, IoChannel};

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

mod channel;

pub use channel::{FileChannel, FileChannelStats};

#[cfg(test)]
mod tests;
