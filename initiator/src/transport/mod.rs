//! Host-side capsule transports.
//!
//! A [`HostQueue`] is one NVMe queue pair over a fabric: it sends command capsules
//! (with their data: in-capsule, or described by a keyed SGL the target reads or
//! writes with RDMA) and returns response capsules. It knows nothing of command ids,
//! timeouts or NVMe semantics: [`crate::queue::Queue`] does that on top.
//!
//! Data buffers are [`IoBuf`]s allocated from the queue's fabric ([`Fabric::alloc`]),
//! registered once at allocation, never per I/O.

pub mod rdma;
pub mod tcp;

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{PollFlags, PollTimeout};
use nvmf_common::types::Qid;
use nvmf_verbs::{DmaBuffer, MemoryRegion};

/// Direction of a command's data, from the host's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDir {
    None,
    /// Host to controller (Write, Connect data, ...).
    ToCtrl,
    /// Controller to host (Read, Identify, Get Log Page, ...).
    FromCtrl,
}

/// Where an outstanding command is, as far as the host can tell (for the reports of
/// commands that take too long: [`crate::queue::Queue::outstanding_commands`]).
/// Ordered by progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommandPhase {
    /// Submitted but not yet handed to the fabric: not flushed, or still (partly) in
    /// the host's send buffer.
    Queued,
    /// The command capsule went out; the controller has not asked for or sent any
    /// data and has not answered. On RDMA the host cannot see the controller's data
    /// transfers, so every command sent and not answered is here.
    Sent,
    /// Data is moving: the controller asked for part of the write data (R2T) or sent
    /// part of the read data, and there is more to move.
    DataTransfer,
    /// Every byte of data moved (or there was none to move): only the response is
    /// missing.
    AwaitingResponse,
}

impl CommandPhase {
    /// The phase as logs and JSON name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandPhase::Queued => "queued",
            CommandPhase::Sent => "sent",
            CommandPhase::DataTransfer => "data-transfer",
            CommandPhase::AwaitingResponse => "awaiting-response",
        }
    }
}

impl std::fmt::Display for CommandPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A data buffer the fabric can move: registered memory with remote access keys.
#[derive(Clone)]
pub struct IoBuf {
    pub buf: Arc<DmaBuffer>,
    /// The registration; None on fabrics that need none (TCP).
    pub mr: Option<Arc<dyn MemoryRegion>>,
    pub offset: usize,
    pub len: usize,
}

impl IoBuf {
    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.buf.addr() + self.offset as u64
    }

    /// A sub-range of this buffer.
    pub fn slice(&self, offset: usize, len: usize) -> Option<IoBuf> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(IoBuf {
            buf: self.buf.clone(),
            mr: self.mr.clone(),
            offset: self.offset + offset,
            len,
        })
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        offset.checked_add(src.len()).is_some_and(|e| e <= self.len)
            && self.buf.write_at(self.offset + offset, src)
    }

    /// Copies bytes at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        offset.checked_add(dst.len()).is_some_and(|e| e <= self.len)
            && self.buf.read_at(self.offset + offset, dst)
    }

    /// Fills the whole buffer with `byte`.
    pub fn fill(&self, byte: u8) {
        self.buf.fill(self.offset, self.len, byte);
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({:#x}, {} bytes)", self.addr(), self.len)
    }
}

/// Transport failures. A queue that returned [`TransportError::Dead`] is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("connection refused: {0}")]
    Refused(String),
    #[error("connection rejected: {0}")]
    Rejected(String),
    #[error("queue is dead: {0}")]
    Dead(String),
    #[error("queue full")]
    Full,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("{0}")]
    Other(String),
}

/// Parameters for one queue's connection.
#[derive(Debug, Clone)]
pub struct QueueParams {
    pub qid: Qid,
    /// Queue entries (SQSIZE + 1).
    pub depth: u16,
    /// Bytes of in-capsule data the target accepts on this queue (0: none).
    pub in_capsule_data: u32,
    pub connect_timeout: Duration,
}

/// A fabric endpoint: makes queues to one target address and allocates buffers.
pub trait Fabric: Send + Sync {
    /// Connects one queue.
    fn connect_queue(&self, p: &QueueParams) -> Result<Box<dyn HostQueue>, TransportError>;
    /// Allocates a registered buffer of `len` bytes usable on every queue of this fabric.
    fn alloc(&self, len: usize) -> Result<IoBuf, TransportError>;
    /// "rdma", "tcp", "loopback".
    fn name(&self) -> &'static str;
    /// Keyed SGLs (RDMA) or not (TCP).
    fn keyed_sgls(&self) -> bool;
}

/// One connected queue. Used by one thread at a time.
/// `timeout` as poll(2) takes it: whole milliseconds, rounded up (a shorter block
/// would return before the wait it was asked for).
pub(crate) fn poll_timeout(timeout: Duration) -> PollTimeout {
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128);
    PollTimeout::try_from(ms as i32).unwrap_or(PollTimeout::MAX)
}

/// What a queue that has nothing to reap now would block on.
#[derive(Debug)]
pub enum WaitOn<'a> {
    /// Something is ready (buffered data, completions not yet taken, a dead queue):
    /// do not block.
    Now,
    /// This descriptor becoming ready for these events.
    Fd(BorrowedFd<'a>, PollFlags),
    /// Only the queue's own `wait` can tell (e.g. a verbs completion queue).
    Opaque,
}

pub trait HostQueue: Send {
    fn qid(&self) -> Qid;
    /// Entries: at most `depth - 1` commands may be outstanding.
    fn depth(&self) -> u16;
    /// Queues a command capsule. `sqe` is complete except DPTR, which the transport
    /// fills (in-capsule offset or keyed SGL for `data`). Sent at the latest on
    /// [`HostQueue::flush`]. `slot` is the command id, `< depth`: the transport may use
    /// it to index per-command resources.
    fn submit(
        &mut self,
        slot: u16,
        sqe: &[u8; 64],
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<(), TransportError>;
    /// Sends everything queued with one doorbell.
    fn flush(&mut self) -> Result<(), TransportError>;
    /// Appends received response capsules (16-byte CQEs) to `out`; returns how many.
    fn poll(&mut self, out: &mut Vec<[u8; 16]>) -> Result<usize, TransportError>;
    /// Blocks until a response may be ready or `timeout` passes.
    fn wait(&mut self, timeout: Duration);
    /// What [`HostQueue::wait`] would block on, so that a thread driving several
    /// queues can block on all of them in one call (see [`WaitOn`]).
    fn wait_on(&self) -> WaitOn<'_> {
        WaitOn::Opaque
    }
    /// Where the outstanding command in `slot` is, for reports of commands that take
    /// too long (never called per I/O). `None`: the transport cannot tell or has no
    /// such command; the queue then reports what it knows (queued until flushed, then
    /// sent).
    fn command_phase(&self, _slot: u16) -> Option<CommandPhase> {
        None
    }
    /// Disconnects (idempotent).
    fn close(&mut self);
}
