//! In-process software verbs provider: the "loopback" RDMA fabric.
//!
//! [`SoftDevice`] implements [`Device`] and, through it, every other verbs trait with
//! reliable-connected (RC) semantics, so an NVMe/RDMA target and host written against
//! the traits can run in one process (tests, CI, benchmarks).
//!
//! - **Fabric.** Each [`SoftDevice::new`] is an isolated fabric with its own listener
//!   namespace; [`SoftDevice::global`] is one process-wide instance. Listeners are
//!   registered by any address string. PDs, CQs and QPs of one device work together;
//!   objects of another device are refused with [`VerbsError::InvalidArgument`].
//! - **Memory.** Registration puts the buffer into the PD's key table (see the key
//!   layout in `mr.rs`); addresses are the buffer's real virtual addresses
//!   ([`DmaBuffer::addr`](crate::DmaBuffer::addr)). Every access checks key,
//!   generation, bounds (overflow-safe) and access rights. As with `ibv_reg_mr`,
//!   `REMOTE_WRITE` requires `LOCAL_WRITE`. Dropping the region deregisters it: its
//!   keys fail from then on. (Each QP caches a few recently used regions so lookups
//!   take no lock; a cache may hold a deregistered region's buffer, not its keys,
//!   until that QP's next post or its drop.)
//! - **Work requests** execute synchronously in the thread that posts them, in order;
//!   the completions they produce (the peer's receive completion, then the local send
//!   completion) are in their CQs when `post_send` returns. Errors follow ibverbs: the
//!   failing WR completes in error (even if unsignaled), the rest of the chain and
//!   every posted receive on both QPs are flushed with `WrFlushError`, and
//!   both QPs enter the error state (`post_*` then return [`VerbsError::QpError`]).
//!   Statuses: bad local key/bounds/rights → `LocalProtectionError`; bad rkey, bounds
//!   or remote rights → `RemoteAccessError`; no receive posted within the RNR timeout
//!   → `RnrRetryExceeded`; message longer than the receive → `LocalLengthError` on the
//!   receive and `RemoteInvalidRequest` at the sender; a receive SGE the receiver may
//!   not write → `LocalProtectionError` on the receive and `RemoteInvalidRequest` at
//!   the sender; invalidating an unknown rkey → `RemoteInvalidRequest`; peer gone →
//!   `RetryExceeded`.
//! - **Queue depth** follows hardware: a send WR holds a send-queue slot until the
//!   completion of it, or of a later WR of the same QP, has been *polled* (so unsignaled
//!   WRs are freed by the next signaled one); a receive holds its slot until its
//!   completion is polled. Posting beyond `max_send_wr`/`max_recv_wr` gives
//!   [`VerbsError::QueueFull`].
//! - **RNR retry.** A SEND that finds no receive posted waits (yielding) up to the
//!   device's RNR timeout ([`SoftDevice::set_rnr_timeout`], default 2 s) before
//!   failing with `RnrRetryExceeded`, like an RC QP with a finite `rnr_retry`. This
//!   covers the window between `accept` returning and the passive side posting its
//!   receives, during which the active side may already send.
//! - **Performance.** No global lock and no allocation on the data path; locks are per
//!   QP (send, receive), per CQ and per PD (only on key-cache misses); polling an empty
//!   CQ takes no lock; counters are per-thread shards. Measured with the
//!   `perf_command_write_response` test (one thread, command SEND + 4 KiB RDMA WRITE +
//!   response SEND, all completions polled): about 0.6 µs per I/O.
//! - **Completion channel.** A CQ's eventfd is written only after
//!   [`CompletionQueue::req_notify`] armed it (one-shot), so pollers that spin cause
//!   no system calls. A CQ holding more than `entries` completions keeps them all and
//!   counts the overflow ([`SoftCounters::cq_overflows`]).
//! - **Connections.** `connect` creates the QP, runs `pre_post`, queues the request
//!   and waits for `accept` (which creates and links the passive QP), `reject`, or the
//!   timeout (after which a late `accept` fails with [`VerbsError::Timeout`]). A
//!   request dropped unanswered, or pending when its listener is dropped, is refused
//!   ([`VerbsError::ConnectionRefused`]). Disconnecting or dropping either QP moves both
//!   to the error state and flushes their posted receives.
//! - **Shared receive queues** (`srq.rs`): a QP created with an SRQ takes each arriving
//!   SEND's receive from the SRQ's ring (oldest first, whichever QP it came for); the
//!   completion names the QP. Its receives are never flushed by a QP's error state.

mod cm;
mod counters;
mod cq;
mod domain;
mod mr;
mod qp;
mod recv_ring;
mod srq;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_conformance;
#[cfg(test)]
mod tests_threads;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::{CompletionQueue, Device, Listener, ProtectionDomain, QpInit, QueuePair, VerbsError};

pub use counters::SoftCounters;

/// NVMe/RDMA hosts ask for endless RNR retries (Linux and SPDK set `rnr_retry_count`
/// 7): a SEND that beats the target's receive repost waits for it. The soft provider
/// bounds the wait, long enough that a peer thread descheduled on a loaded machine is
/// not mistaken for a missing receive (100 ms was, under CI load).
const DEFAULT_RNR_TIMEOUT: Duration = Duration::from_secs(2);

/// The software RDMA device: an in-process fabric.
pub struct SoftDevice {
    shared: Arc<DevShared>,
}

/// Device state shared by every object created from it.
struct DevShared {
    name: String,
    counters: counters::Counters,
    listeners: Mutex<HashMap<String, Arc<cm::ListenerShared>>>,
    cqs: Registry<cq::SoftCq>,
    pds: Registry<mr::SoftPd>,
    srqs: Registry<srq::SoftSrq>,
    next_qpn: AtomicU32,
    /// Sequence number behind memory keys (see `mr.rs`).
    key_seq: AtomicU32,
    rnr_timeout_ns: AtomicU64,
    /// False: `create_srq` fails as on a device reporting `max_srq` 0.
    srq_supported: std::sync::atomic::AtomicBool,
    random: RandomState,
}

impl DevShared {
    fn rnr_timeout(&self) -> Duration {
        Duration::from_nanos(self.rnr_timeout_ns.load(Ordering::Relaxed))
    }

    /// A random-ish value (for key salts).
    fn random_u32(&self) -> u32 {
        let mut h = self.random.build_hasher();
        h.write_u32(self.key_seq.fetch_add(1, Ordering::Relaxed));
        h.finish() as u32
    }
}

/// Finds the concrete object behind a trait object the device created. Control path
/// only (QP creation). Entries are weak and removed by the object's `Drop`; an address
/// cannot be reused while its entry exists, because the weak reference keeps the
/// allocation.
struct Registry<T> {
    map: Mutex<HashMap<usize, Weak<T>>>,
}

impl<T> Registry<T> {
    fn new() -> Self {
        Registry {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn insert(&self, obj: &Arc<T>) {
        let key = Arc::as_ptr(obj).cast::<()>().addr();
        self.map.lock().insert(key, Arc::downgrade(obj));
    }

    fn remove(&self, obj: &T) {
        let key = std::ptr::from_ref(obj).cast::<()>().addr();
        self.map.lock().remove(&key);
    }

    fn find<U: ?Sized>(&self, obj: &Arc<U>) -> Option<Arc<T>> {
        let ptr = Arc::as_ptr(obj).cast::<()>();
        let found = self.map.lock().get(&ptr.addr())?.upgrade()?;
        std::ptr::eq(Arc::as_ptr(&found).cast::<()>(), ptr).then_some(found)
    }
}

impl SoftDevice {
    /// A new, isolated fabric (its own listener namespace).
    pub fn new() -> Arc<SoftDevice> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self::with_name(format!("soft{n}"))
    }

    /// The process-wide fabric.
    pub fn global() -> Arc<SoftDevice> {
        static GLOBAL: OnceLock<Arc<SoftDevice>> = OnceLock::new();
        Arc::clone(GLOBAL.get_or_init(|| Self::with_name("soft-global".to_string())))
    }

    fn with_name(name: String) -> Arc<SoftDevice> {
        let random = RandomState::new();
        let seed = random.hash_one(&name) as u32;
        Arc::new(SoftDevice {
            shared: Arc::new(DevShared {
                name,
                counters: counters::Counters::new(),
                listeners: Mutex::new(HashMap::new()),
                cqs: Registry::new(),
                pds: Registry::new(),
                srqs: Registry::new(),
                next_qpn: AtomicU32::new(1),
                key_seq: AtomicU32::new(seed),
                rnr_timeout_ns: AtomicU64::new(DEFAULT_RNR_TIMEOUT.as_nanos() as u64),
                srq_supported: std::sync::atomic::AtomicBool::new(true),
                random,
            }),
        })
    }

    /// Activity since creation or the last [`SoftDevice::reset_counters`].
    pub fn counters(&self) -> SoftCounters {
        self.shared.counters.snapshot()
    }

    /// Zeroes the counters.
    pub fn reset_counters(&self) {
        self.shared.counters.reset();
    }

    /// How long a SEND waits for the peer to post a receive before failing with
    /// `RnrRetryExceeded` (zero: fail at once). Applies to subsequent sends.
    pub fn set_rnr_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.shared.rnr_timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// The current RNR timeout.
    pub fn rnr_timeout(&self) -> Duration {
        self.shared.rnr_timeout()
    }

    /// Whether shared receive queues can be created from now on (default true). False
    /// makes the device behave like one reporting `max_srq` 0: `create_srq` fails with
    /// [`VerbsError::Unsupported`], so callers' fallbacks can be tested.
    pub fn set_srq_supported(&self, supported: bool) {
        self.shared
            .srq_supported
            .store(supported, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftDevice")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl Device for SoftDevice {
    fn name(&self) -> String {
        self.shared.name.clone()
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        Ok(mr::SoftPd::new(&self.shared))
    }

    fn create_cq(&self, entries: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        Ok(cq::SoftCq::new(&self.shared, entries)?)
    }

    fn listen(&self, addr: &str) -> Result<Arc<dyn Listener>, VerbsError> {
        cm::listen(&self.shared, addr)
    }

    fn connect(
        &self,
        addr: &str,
        init: QpInit,
        private_data: &[u8],
        pre_post: &mut dyn FnMut(&dyn QueuePair) -> Result<(), VerbsError>,
        timeout: Duration,
    ) -> Result<(Arc<dyn QueuePair>, Vec<u8>), VerbsError> {
        cm::connect(&self.shared, addr, init, private_data, pre_post, timeout)
    }
}
