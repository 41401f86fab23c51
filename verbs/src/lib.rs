//! A small RDMA verbs interface: what NVMe/RDMA needs and nothing more.
//!
//! The NVMe/RDMA transport (`nvmf_target::rdma`, `nvmf_initiator::transport::rdma`) is written once against these
//! traits. Providers implement them: [`soft`] in process (the loopback transport, CI),
//! and [`rdma`] on `rdma-sys` (libibverbs/librdmacm) for real NICs and soft-RoCE
//! (cargo feature `rdma`, on by default).
//!
//! Semantics follow ibverbs for a reliable-connected (RC) queue pair:
//! - Memory is registered once with a protection domain; a region has an `lkey` (local
//!   access) and an `rkey` (remote access) and access flags checked on every use.
//! - `post_send` takes a chain of work requests: SEND, SEND with invalidate, RDMA WRITE,
//!   RDMA READ. They execute in order; a SEND after an RDMA WRITE on the same QP is
//!   delivered after the written data is visible (RC ordering).
//! - Only signaled work requests produce a send completion on success; any failure
//!   produces an error completion, moves the QP to the error state, and flushes every
//!   outstanding work request with [`WcStatus::WrFlushError`].
//! - Receives complete on the receive CQ with the byte count; a SEND with invalidate
//!   reports the invalidated rkey and makes that region unusable remotely.
//! - A QP created with a [`SharedReceiveQueue`] (`ibv_create_srq`) has no receive queue
//!   of its own: a SEND arriving at it consumes the SRQ's oldest posted receive, and
//!   the receive completion (on the QP's receive CQ) names the QP in `qp_num`. With no
//!   receive posted the sender sees RNR as for a plain QP. An SRQ's receives belong to
//!   the SRQ: a QP entering the error state or being destroyed does not flush them.
//!
//! Ownership: a [`MemoryRegion`] keeps its [`DmaBuffer`] alive; a [`QueuePair`] keeps
//! its CQs, and its SRQ if any, alive. Dropping a QP disconnects it.

pub mod buffer;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod soft;

use std::sync::Arc;
use std::time::Duration;

pub use buffer::DmaBuffer;

bitflags::bitflags! {
    /// Access rights of a memory region (ibverbs `IBV_ACCESS_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Access: u32 {
        /// The local HCA may write (needed for RECV and RDMA READ sinks).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE into the region.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ from the region.
        const REMOTE_READ = 1 << 2;
    }
}

/// A scatter/gather element: `length` bytes at virtual address `addr` inside the
/// region whose local key is `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Deliver the gathered bytes into the peer's next posted receive.
    Send,
    /// SEND that also invalidates the peer's region with `rkey`.
    SendWithInvalidate { rkey: u32 },
    /// Write the gathered bytes to the peer's memory at `remote_addr` under `rkey`.
    RdmaWrite { remote_addr: u64, rkey: u32 },
    /// Read `sum(sge.length)` bytes from the peer's `remote_addr` under `rkey` into the SGEs.
    RdmaRead { remote_addr: u64, rkey: u32 },
}

/// A send-queue work request. `wr_id` comes back in its completion.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub sg_list: &'a [Sge],
    /// Produce a completion on success. Errors always complete.
    pub signaled: bool,
}

/// A receive-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

/// Completion status (subset of `ibv_wc_status` an RC QP can produce).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    Success,
    /// The received message is longer than the posted receive.
    LocalLengthError,
    /// A local SGE's key, bounds or access flags are wrong.
    LocalProtectionError,
    /// The peer refused an RDMA access: bad rkey, out of bounds, or missing rights.
    RemoteAccessError,
    /// The peer could not process the request (e.g. invalidating an unknown rkey).
    RemoteInvalidRequest,
    /// No receive was posted at the peer.
    RnrRetryExceeded,
    /// The peer is gone.
    RetryExceeded,
    /// Flushed because the QP entered the error state.
    WrFlushError,
    /// Any other `ibv_wc_status` a real device reports (local QP operation error, bad
    /// response, fatal error, ...), with its raw value. The soft provider never makes one.
    Other(u32),
}

/// What a completion completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (RECV) or transferred.
    pub byte_len: u32,
    /// For a RECV of a SEND with invalidate: the rkey that was invalidated.
    pub invalidated_rkey: Option<u32>,
    /// The QP the completion belongs to (a CQ can serve many QPs).
    pub qp_num: u32,
}

impl WorkCompletion {
    /// An all-zero completion, for pre-sizing poll arrays.
    pub const EMPTY: WorkCompletion = WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        invalidated_rkey: None,
        qp_num: 0,
    };
}

/// Errors returned synchronously by verbs calls (bad arguments, no resources, QP state).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("queue full: {0}")]
    QueueFull(&'static str),
    #[error("queue pair is in the error state")]
    QpError,
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("connection refused")]
    ConnectionRefused,
    /// The passive side rejected the connection with this private data.
    #[error("connection rejected by peer")]
    Rejected(Vec<u8>),
    #[error("no listener at {0}")]
    NoListener(String),
    #[error("address in use: {0}")]
    AddrInUse(String),
    #[error("timed out")]
    Timeout,
    #[error("provider error: {0}")]
    Provider(String),
    /// No RDMA device is usable for the request (none present, or none on that address).
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// The device cannot do what was asked (e.g. make a shared receive queue).
    #[error("not supported by the device: {0}")]
    Unsupported(&'static str),
}

/// A registered memory region.
pub trait MemoryRegion: Send + Sync {
    fn lkey(&self) -> u32;
    fn rkey(&self) -> u32;
    /// Virtual address of the first byte (what SGEs and keyed SGLs name).
    fn addr(&self) -> u64;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn buffer(&self) -> &Arc<DmaBuffer>;
}

/// A protection domain: the scope of memory keys.
pub trait ProtectionDomain: Send + Sync {
    /// Registers `buf` with `access`. The region keeps `buf` alive.
    fn register(
        &self,
        buf: Arc<DmaBuffer>,
        access: Access,
    ) -> Result<Arc<dyn MemoryRegion>, VerbsError>;
    /// Creates a shared receive queue in this domain (`ibv_create_srq`). Devices without
    /// SRQ support fail with [`VerbsError::Unsupported`].
    fn create_srq(&self, caps: SrqCaps) -> Result<Arc<dyn SharedReceiveQueue>, VerbsError> {
        let _ = caps;
        Err(VerbsError::Unsupported("shared receive queues"))
    }
}

/// Capacities requested for a shared receive queue (`ibv_srq_attr`; no limit event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqCaps {
    /// Receives the SRQ holds at most (`max_wr`).
    pub max_wr: u32,
    /// SGEs per receive (`max_sge`).
    pub max_sge: u32,
}

/// A shared receive queue (`ibv_srq`): receives posted once, consumed by SENDs arriving
/// at any QP created with it ([`QpInit::srq`]).
pub trait SharedReceiveQueue: Send + Sync {
    /// Posts a batch of receives with one doorbell (`ibv_post_srq_recv`). Posting
    /// beyond `max_wr` outstanding receives fails with [`VerbsError::QueueFull`].
    fn post_srq_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError>;
    /// The capacity granted (a device may round `max_wr` up, or clamp it).
    fn caps(&self) -> SrqCaps;
}

/// A completion queue. Several QPs may share one.
pub trait CompletionQueue: Send + Sync {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll(&self, out: &mut [WorkCompletion]) -> usize;
    /// Arms the completion channel: the next completion makes
    /// [`CompletionQueue::event_fd`] readable (one-shot). Poll once more after arming
    /// to catch completions that arrived before it.
    fn req_notify(&self);
    /// Blocks until the CQ may have completions or `timeout` passes (completion-channel
    /// mode). Spurious wake-ups are allowed; callers poll afterwards.
    fn wait(&self, timeout: Duration);
    /// A file descriptor that becomes readable when completions arrive, for callers that
    /// multiplex several event sources. Call [`CompletionQueue::ack_events`] after waking.
    fn event_fd(&self) -> std::os::fd::RawFd;
    /// Clears the readiness of [`CompletionQueue::event_fd`].
    fn ack_events(&self);
}

/// Capacities requested for a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
}

/// A reliable-connected queue pair.
pub trait QueuePair: Send + Sync {
    fn qp_num(&self) -> u32;
    /// Posts a chain of send work requests with one doorbell.
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), VerbsError>;
    /// Posts a batch of receives with one doorbell.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError>;
    /// Starts an orderly disconnect; outstanding work is flushed.
    fn disconnect(&self);
    /// True once the QP is in the error state or disconnected.
    fn is_dead(&self) -> bool;
    /// The protection domain the QP's memory belongs to.
    fn pd(&self) -> Arc<dyn ProtectionDomain>;
}

/// What a passive side needs to create the QP for an incoming connection.
pub struct QpInit {
    pub pd: Arc<dyn ProtectionDomain>,
    pub send_cq: Arc<dyn CompletionQueue>,
    pub recv_cq: Arc<dyn CompletionQueue>,
    pub caps: QpCaps,
    /// Take receives from this SRQ (`ibv_qp_init_attr.srq`) instead of a receive queue
    /// of the QP's own; `max_recv_wr`/`max_recv_sge` are then ignored and
    /// [`QueuePair::post_recv`] fails with [`VerbsError::InvalidArgument`].
    pub srq: Option<Arc<dyn SharedReceiveQueue>>,
}

/// An incoming connection request (rdma_cm `RDMA_CM_EVENT_CONNECT_REQUEST`).
pub trait ConnectRequest: Send {
    /// The private data the active side sent (NVMe/RDMA CM request).
    fn private_data(&self) -> &[u8];
    /// How many RDMA READs the active side lets us have outstanding toward it
    /// (rdma_cm's `initiator_depth` as the passive side sees it); `None` when the
    /// provider sets no such limit (the software provider).
    fn initiator_depth(&self) -> Option<u8> {
        None
    }
    /// Creates the QP, runs `pre_post` on it (the caller posts its receives, so they
    /// are in place before the peer can send), then accepts, sending `private_data`
    /// (NVMe/RDMA CM accept). When any step fails the request is rejected with
    /// `reject_data` (NVMe/RDMA CM reject, e.g. NO_RESOURCES), so the peer learns why.
    fn accept(
        self: Box<Self>,
        init: QpInit,
        private_data: &[u8],
        reject_data: &[u8],
        pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
    ) -> Result<Arc<dyn QueuePair>, VerbsError>;
    /// Refuses the connection, sending `private_data` (NVMe/RDMA CM reject).
    fn reject(self: Box<Self>, private_data: &[u8]);
}

/// A listening endpoint.
pub trait Listener: Send + Sync {
    /// Waits up to `timeout` for the next connection request.
    fn next_request(&self, timeout: Duration) -> Option<Box<dyn ConnectRequest>>;
    /// The address it listens on, as given.
    fn local_addr(&self) -> String;
}

/// An RDMA device (or the software fabric): the root of every other object.
pub trait Device: Send + Sync {
    fn name(&self) -> String;
    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError>;
    fn create_cq(&self, entries: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError>;
    fn listen(&self, addr: &str) -> Result<Arc<dyn Listener>, VerbsError>;
    /// Connects to `addr` (active side), sending `private_data`; `pre_post` runs on the
    /// new QP before the connection is established so receives are posted in time.
    fn connect(
        &self,
        addr: &str,
        init: QpInit,
        private_data: &[u8],
        pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
        timeout: Duration,
    ) -> Result<(Arc<dyn QueuePair>, Vec<u8>), VerbsError>;
}

/// Posts one receive per entry of `slots`, each naming slot `i` of a ring of
/// `slot_len`-byte buffers in `mr` (slot `i` starts at `mr.addr() + i * slot_len`),
/// with one doorbell. `wr_id(i)` is the work request id of slot `i`.
pub fn post_recv_slots(
    qp: &dyn QueuePair,
    mr: &dyn MemoryRegion,
    slot_len: usize,
    slots: &[u16],
    wr_id: impl Fn(u16) -> u64,
) -> Result<(), VerbsError> {
    with_slot_wrs(mr, slot_len, slots, wr_id, |wrs| qp.post_recv(wrs))
}

/// [`post_recv_slots`] for a shared receive queue: one receive per slot of `mr`'s ring,
/// one doorbell.
pub fn post_srq_recv_slots(
    srq: &dyn SharedReceiveQueue,
    mr: &dyn MemoryRegion,
    slot_len: usize,
    slots: &[u16],
    wr_id: impl Fn(u16) -> u64,
) -> Result<(), VerbsError> {
    with_slot_wrs(mr, slot_len, slots, wr_id, |wrs| srq.post_srq_recv(wrs))
}

/// Builds the receive work requests naming `slots` of `mr`'s ring and hands them to `post`.
fn with_slot_wrs(
    mr: &dyn MemoryRegion,
    slot_len: usize,
    slots: &[u16],
    wr_id: impl Fn(u16) -> u64,
    post: impl FnOnce(&[RecvWr<'_>]) -> Result<(), VerbsError>,
) -> Result<(), VerbsError> {
    let length =
        u32::try_from(slot_len).map_err(|_| VerbsError::InvalidArgument("slot too large"))?;
    let sges: Vec<Sge> = slots
        .iter()
        .map(|&i| Sge {
            addr: mr.addr() + (usize::from(i) * slot_len) as u64,
            length,
            lkey: mr.lkey(),
        })
        .collect();
    let wrs: Vec<RecvWr<'_>> = slots
        .iter()
        .zip(sges.iter())
        .map(|(&i, sge)| RecvWr {
            wr_id: wr_id(i),
            sg_list: std::slice::from_ref(sge),
        })
        .collect();
    post(&wrs)
}
