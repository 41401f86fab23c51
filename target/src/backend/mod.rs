//! Namespace storage backends behind one trait.
//!
//! A [`Backend`] is shared by every thread that serves its namespace. Each serving
//! thread opens its own [`IoChannel`] (for files: its own io_uring), submits I/O tagged
//! with a `u64`, and reaps completions by polling; nothing blocks on the data path.
//! [`BackendError::status`] is the one place backend errors become NVMe status.
//!
//! Buffers are [`DmaSlice`]s of registered memory: the channel reads into or writes
//! from them directly (io_uring, O_DIRECT when aligned), and keeps the `Arc` until the
//! I/O completes, so a buffer can never be freed under an in-flight I/O.

pub mod fault;
pub mod file;
mod inline;
pub mod null;
pub mod options;
pub mod provision;
pub mod ram;
#[cfg(feature = "rbd")]
pub mod rbd;
pub(crate) mod ring_drain;
pub mod spec;

use std::os::fd::RawFd;

pub(crate) use inline::{InlineChannel, InlineExec};
use std::sync::Arc;

use nvmf_common::wire::status::{generic, media, path, Sct, Status};
use nvmf_verbs::DmaBuffer;

/// `len` bytes at `offset` of a registered buffer.
#[derive(Debug, Clone)]
pub struct DmaSlice {
    pub buf: Arc<DmaBuffer>,
    pub offset: usize,
    pub len: usize,
}

impl DmaSlice {
    /// The slice, if it lies inside the buffer.
    pub fn new(buf: Arc<DmaBuffer>, offset: usize, len: usize) -> Option<Self> {
        buf.ptr_at(offset, len)?;
        Some(DmaSlice { buf, offset, len })
    }
    pub fn ptr(&self) -> *mut u8 {
        // In bounds by construction; a null pointer would make the I/O fail, not corrupt.
        self.buf
            .ptr_at(self.offset, self.len)
            .unwrap_or(std::ptr::null_mut())
    }
}

/// What a backend is, as Identify Namespace and the Volatile Write Cache feature report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Capacity in bytes (a multiple of `block_size`).
    pub size_bytes: u64,
    /// Logical block size in bytes (512 or 4096 typically).
    pub block_size: u32,
    /// Writes may sit in a volatile cache until Flush (buffered files, most disks).
    pub volatile_write_cache: bool,
    /// Deallocate (TRIM) is implemented, not just accepted.
    pub supports_deallocate: bool,
    /// Write Zeroes is implemented natively (not by writing a zero buffer).
    pub supports_write_zeroes: bool,
    /// Deallocated blocks read back as zeroes.
    pub deallocated_reads_zero: bool,
    /// Human description: "file /path (O_DIRECT)", "ram", "null".
    pub description: String,
}

/// One operation. Offsets and lengths are in bytes and already range-checked by the
/// caller against [`BackendInfo::size_bytes`].
#[derive(Debug, Clone)]
pub enum IoOp {
    Read {
        offset: u64,
        buf: DmaSlice,
    },
    /// `fua`: the data must be durable when the write completes.
    Write {
        offset: u64,
        buf: DmaSlice,
        fua: bool,
    },
    Flush,
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    Deallocate {
        offset: u64,
        len: u64,
    },
}

/// [`IoChannel::submit_compare_and_write`]: write `buf` at `offset` only if the bytes
/// there equal `cmp` (same length), as one atomic operation of the backing store. Not
/// an [`IoOp`], so the operations of every command stay as small as they were.
#[derive(Debug, Clone)]
pub struct CompareAndWrite {
    pub offset: u64,
    pub cmp: DmaSlice,
    pub buf: DmaSlice,
}

/// [`IoChannel::submit_passthru`]: one NVMe command sent to a device as the host
/// formed it (a passthru subsystem's I/O, or an admin command on the control path).
/// Only the opcode, NSID, CDW2, CDW3 and CDW10 to CDW15 of `sqe` reach the device;
/// the data travels in `buf`, in the direction bits 1:0 of the opcode name.
#[derive(Debug, Clone)]
pub struct PassthruCmd {
    pub sqe: [u8; 64],
    pub buf: Option<DmaSlice>,
    /// Admin commands: the submitting controller's fabric fields, which the device's
    /// Identify data is rewritten with. None for I/O commands.
    pub fabric: Option<Arc<crate::passthru::FabricFields>>,
}

/// A backend failure; [`BackendError::status`] maps it to what the host sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("I/O error on read: errno {0}")]
    ReadIo(i32),
    #[error("I/O error on write: errno {0}")]
    WriteIo(i32),
    #[error("I/O error: errno {0}")]
    Io(i32),
    #[error("no space left on the backing store")]
    NoSpace,
    #[error("range beyond the end of the backend")]
    OutOfRange,
    #[error("operation not supported by this backend")]
    Unsupported,
    #[error("submission queue full")]
    Busy,
    #[error("short transfer: {done} of {want} bytes")]
    Short { done: usize, want: usize },
    /// The backing store is gone for good (an RBD image removed: `ENOENT`).
    #[error("the backing store no longer exists")]
    Gone,
    /// The backing store cannot be reached for now (`ETIMEDOUT`, `ENOTCONN`...).
    #[error("the backing store is unreachable: errno {0}")]
    Unavailable(i32),
    /// This node was fenced off the backing store (Ceph's `EBLOCKLISTED`): nothing it
    /// sends will be accepted again, but another node (path) may still serve.
    #[error("this node has been fenced off the backing store (blocklisted)")]
    Fenced,
    /// The backing store refuses writes (`EROFS`: a read-only image or snapshot).
    #[error("the backing store is read-only")]
    ReadOnly,
    /// The backing store denied access (`EACCES`/`EPERM`: missing capabilities).
    #[error("access to the backing store denied: errno {0}")]
    AccessDenied(i32),
    /// A [`CompareAndWrite`] found other data: nothing was written.
    #[error("compare and write: the data differs")]
    Miscompare,
    /// A passthru device completed the command with an error status: the host gets
    /// that status and result as the device reported them.
    #[error("the device completed the command with {status}")]
    Device { status: Status, result: CqeResult },
}

impl BackendError {
    /// The NVMe status the host gets for this error.
    pub fn status(&self) -> Status {
        match self {
            BackendError::ReadIo(_) => Status::media_retryable(media::UNRECOVERED_READ_ERROR),
            BackendError::WriteIo(_) | BackendError::Short { .. } => {
                Status::media_retryable(media::WRITE_FAULT)
            }
            BackendError::Io(_) => Status::generic_retryable(generic::INTERNAL_ERROR),
            BackendError::NoSpace => Status::generic_dnr(generic::CAPACITY_EXCEEDED),
            BackendError::OutOfRange => Status::generic_dnr(generic::LBA_OUT_OF_RANGE),
            BackendError::Unsupported => Status::generic_dnr(generic::INVALID_OPCODE),
            // Transient: the host may retry.
            BackendError::Busy => Status::generic_retryable(generic::NS_NOT_READY),
            // "Will not become ready without administrative action": DNR.
            BackendError::Gone => Status::generic_dnr(generic::NS_NOT_READY),
            // The cluster may come back (an OSD restarting): retryable.
            BackendError::Unavailable(_) => Status::generic_retryable(generic::NS_NOT_READY),
            // Specific to this controller's node: a path error without DNR, so a
            // multipath host retries on another path (another gateway).
            BackendError::Fenced => Status::retryable(Sct::PathRelated, path::INTERNAL_PATH_ERROR),
            BackendError::ReadOnly => Status::generic_dnr(generic::NS_WRITE_PROTECTED),
            BackendError::AccessDenied(_) => Status::dnr(Sct::MediaError, media::ACCESS_DENIED),
            BackendError::Miscompare => Status::media_retryable(media::COMPARE_FAILURE),
            BackendError::Device { status, .. } => *status,
        }
    }
}

/// Completion dwords 0 and 1 an operation hands back to the host unchanged: a
/// passthru command's result (a Zone Append's LBA, a vendor command's answer); zero
/// for every operation of the block path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CqeResult {
    pub dw0: u32,
    pub dw1: u32,
}

impl CqeResult {
    /// No result: what every operation but a passthru command completes with.
    pub const NONE: CqeResult = CqeResult { dw0: 0, dw1: 0 };
}

/// The outcome of one operation.
pub type IoResult = Result<CqeResult, BackendError>;

/// A completed I/O: the tag given at submit and its outcome.
pub type IoCompletion = (u64, IoResult);

/// A storage backend shared by all threads.
pub trait Backend: Send + Sync {
    fn info(&self) -> &BackendInfo;
    /// Opens a per-thread submission channel.
    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError>;
    /// Makes every completed write durable (`fdatasync` for files and block devices),
    /// blocking: for shutdown (SIGTERM, CC.SHN), never on the data path. Backends
    /// without a volatile cache have nothing to do.
    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }
    /// The backing store's current size in bytes when it can change under the namespace
    /// and the backend knows it without reopening (RBD images); `None` otherwise (files
    /// are measured by path, RAM and null cannot grow). Blocking: for the control plane
    /// (`ctl resize-ns`, SIGHUP), never the data path.
    fn backing_size(&self) -> Option<u64> {
        None
    }
    /// The alignment unit inside which the backing store runs a
    /// [`CompareAndWrite`] atomically for every client of it (RBD: an object,
    /// so gateways of one image are atomic against each other); `None`: the target
    /// emulates Compare and Write under its own range lock ([`crate::locks`]).
    fn compare_and_write_unit(&self) -> Option<u64> {
        None
    }
}

/// A per-thread, non-blocking I/O channel.
pub trait IoChannel: Send {
    /// Queues `op`; it is issued at the latest on the next [`IoChannel::flush`].
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError>;
    /// Issues every queued operation (one system call for io_uring).
    fn flush(&mut self);
    /// Appends finished I/O to `out`; returns how many were appended.
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize;
    /// Operations submitted and not yet reaped.
    fn in_flight(&self) -> usize;
    /// Readable when completions are ready, for blocking waits (None: completes inline).
    fn event_fd(&self) -> Option<RawFd>;
    /// Queues a [`CompareAndWrite`]; a difference completes with
    /// [`BackendError::Miscompare`]. Only backends with a
    /// [`Backend::compare_and_write_unit`] take it.
    fn submit_compare_and_write(
        &mut self,
        _tag: u64,
        _op: CompareAndWrite,
    ) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }
    /// Queues a [`PassthruCmd`]; it completes with the device's result dwords, or
    /// with [`BackendError::Device`] carrying the device's error status. Only the
    /// channels of passthru namespaces (and of a passthru controller's admin
    /// commands) take it.
    fn submit_passthru(&mut self, _tag: u64, _cmd: PassthruCmd) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }
}

impl IoOp {
    /// Bytes the operation covers past its offset (0 for Flush).
    pub fn range(&self) -> Option<(u64, u64)> {
        match self {
            IoOp::Read { offset, buf } | IoOp::Write { offset, buf, .. } => {
                Some((*offset, buf.len as u64))
            }
            IoOp::WriteZeroes { offset, len } | IoOp::Deallocate { offset, len } => {
                Some((*offset, *len))
            }
            IoOp::Flush => None,
        }
    }

    /// `Err(OutOfRange)` unless the operation lies inside `0..size_bytes`. Backends call
    /// this even though the caller range-checks, because memory safety depends on it.
    pub fn check_range(&self, size_bytes: u64) -> Result<(), BackendError> {
        match self.range() {
            Some((offset, len)) => match offset.checked_add(len) {
                Some(end) if end <= size_bytes => Ok(()),
                _ => Err(BackendError::OutOfRange),
            },
            None => Ok(()),
        }
    }
}
