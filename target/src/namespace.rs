//! Namespaces: an NSID bound to a backend, and the instance numbers that key the
//! backend channels poll groups cache for them.
//!
//! A [`Namespace`] is owned by its subsystem (an `Arc` in its table) and by every
//! command running on it. It has a file below the subsystem's so that what builds
//! namespaces (a passthru device's rescans, say) does not import the subsystem, which
//! holds that device.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use nvmf_common::types::{Nqn, Nsid};

use crate::backend::Backend;
use crate::visibility::NsVisibility;

/// A namespace: an NSID bound to a backend.
pub struct Namespace {
    pub nsid: Nsid,
    pub backend: Arc<dyn Backend>,
    pub block_size: u32,
    pub block_size_shift: u32,
    pub nblocks: u64,
    pub uuid: [u8; 16],
    pub nguid: [u8; 16],
    /// Unique per namespace instance; backend channels are cached by it.
    pub instance: u64,
    /// ANA group (1..=128).
    pub anagrpid: u32,
    /// Reservations; kept across a replacement of the namespace (resize, reconfigure).
    pub resv: Arc<crate::resv::Reservation>,
    /// Which hosts see it (SPDK's masking); changed in place, see [`crate::visibility`].
    pub visibility: NsVisibility,
    /// QoS limits and per-group budgets; kept across a replacement, like `resv`.
    pub qos: Arc<crate::qos::NsQos>,
    /// Set when the namespace is removed: a command that found it but has not run yet
    /// (waiting for its data) gets Invalid Namespace instead of reaching the backend.
    removed: AtomicBool,
}

static NS_INSTANCE: AtomicU64 = AtomicU64::new(1);
/// Moves whenever a namespace instance stops being served (removed or replaced), so
/// that poll groups drop the backend channels they cached for it.
static NS_RETIRED_EPOCH: AtomicU64 = AtomicU64::new(0);

/// A fresh instance number: backend channel cache keys (namespaces, a passthru
/// subsystem's admin channel) never repeat.
pub(crate) fn next_instance() -> u64 {
    NS_INSTANCE.fetch_add(1, Ordering::Relaxed)
}

/// The current namespace retirement epoch (moved by [`retire_namespace`]).
pub fn ns_retired_epoch() -> u64 {
    NS_RETIRED_EPOCH.load(Ordering::Acquire)
}

/// Moves the retirement epoch: poll groups drop backend channels no longer served.
pub(crate) fn retire_namespace() {
    NS_RETIRED_EPOCH.fetch_add(1, Ordering::AcqRel);
}

impl Namespace {
    /// Binds `backend` to `nsid`. The block size must be a power of two ≥ 512.
    pub fn new(nsid: Nsid, backend: Arc<dyn Backend>, uuid: [u8; 16], nguid: [u8; 16]) -> Self {
        let info = backend.info();
        let block_size = info.block_size.max(512);
        let shift = block_size.trailing_zeros();
        Namespace {
            nsid,
            nblocks: info.size_bytes >> shift,
            block_size,
            block_size_shift: shift,
            backend,
            uuid,
            nguid,
            instance: next_instance(),
            anagrpid: nvmf_common::wire::ana::DEFAULT_GROUP,
            resv: Arc::new(crate::resv::Reservation::new(None)),
            visibility: NsVisibility::default(),
            qos: Arc::new(crate::qos::NsQos::default()),
            removed: AtomicBool::new(false),
        }
    }

    /// Whether the namespace was removed from its subsystem.
    #[inline]
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Marks it removed (its subsystem dropped it from its table).
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    /// The same namespace with its reservation state kept in `ptpl_file` (Persist
    /// Through Power Loss), restored from it if present.
    pub fn with_ptpl_file(mut self, ptpl_file: Option<std::path::PathBuf>) -> Self {
        if ptpl_file.is_some() {
            self.resv = Arc::new(crate::resv::Reservation::new(ptpl_file));
        }
        self
    }

    /// The same namespace with QoS `limits`.
    pub fn with_qos(self, limits: &crate::config::QosConfig) -> Self {
        self.qos.set(limits);
        self
    }

    /// The same namespace in ANA group `grpid`.
    pub fn with_anagrpid(mut self, grpid: u32) -> Self {
        self.anagrpid = grpid;
        self
    }

    /// The same namespace visible to every host, or (`auto_visible` false) to `hosts`.
    pub fn with_visibility(mut self, auto_visible: bool, hosts: &[Nqn]) -> Self {
        self.visibility = NsVisibility::new(auto_visible, hosts);
        self
    }

    /// Whether `host` sees the namespace.
    #[inline]
    pub fn visible_to(&self, host: &Nqn) -> bool {
        self.visibility.allows(host)
    }

    pub fn size_bytes(&self) -> u64 {
        self.nblocks << self.block_size_shift
    }
}
