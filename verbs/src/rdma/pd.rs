//! Protection domains and memory regions (`ibv_alloc_pd`, `ibv_reg_mr`).
//!
//! Registration pins the buffer and is done once, when the owner sets up (queue
//! buffers at connect, the data arena at start), never per I/O. A region keeps its
//! [`DmaBuffer`] and its PD alive; dropping it deregisters it. QPs hold their PD too,
//! so a PD is deallocated only after every region and QP in it is gone.

use std::sync::{Arc, Weak};

use rdma_sys::{ibv_alloc_pd, ibv_dealloc_pd, ibv_dereg_mr, ibv_mr, ibv_pd, ibv_reg_mr};

use super::convert::ibv_access;
use super::device::DevShared;
use super::registry::Registry;
use crate::{Access, DmaBuffer, MemoryRegion, VerbsError};

/// Every live PD this provider made, to recognise them in [`crate::QpInit`].
pub(super) static PDS: Registry<RdmaPd> = Registry::new();

pub(super) struct RdmaPd {
    pub(super) raw: *mut ibv_pd,
    pub(super) dev: Arc<DevShared>,
    /// Itself, so regions can hold the PD.
    pub(super) me: Weak<RdmaPd>,
}

// SAFETY: libibverbs PDs are thread-safe handles; the pointer is immutable.
unsafe impl Send for RdmaPd {}
// SAFETY: see `Send`.
unsafe impl Sync for RdmaPd {}

impl RdmaPd {
    pub(super) fn new(dev: &Arc<DevShared>) -> Result<Arc<RdmaPd>, VerbsError> {
        // SAFETY: the context is live for the process.
        let raw = unsafe { ibv_alloc_pd(dev.ctx.raw) };
        if raw.is_null() {
            return Err(super::event::os_error(&format!(
                "ibv_alloc_pd({})",
                dev.ctx.name
            )));
        }
        let pd = Arc::new_cyclic(|me| RdmaPd {
            raw,
            dev: Arc::clone(dev),
            me: me.clone(),
        });
        PDS.insert(&pd);
        Ok(pd)
    }
}

impl Drop for RdmaPd {
    fn drop(&mut self) {
        PDS.remove(self);
        // SAFETY: no region or QP of this PD is left (each holds an `Arc` to it).
        let rc = unsafe { ibv_dealloc_pd(self.raw) };
        if rc != 0 {
            tracing::warn!(device = %self.dev.ctx.name, "ibv_dealloc_pd failed: {rc}");
        }
    }
}

pub(super) struct RdmaMr {
    raw: *mut ibv_mr,
    lkey: u32,
    rkey: u32,
    buf: Arc<DmaBuffer>,
    _pd: Arc<RdmaPd>,
}

// SAFETY: an MR handle is immutable after registration; libibverbs allows
// deregistration from any thread.
unsafe impl Send for RdmaMr {}
// SAFETY: see `Send`.
unsafe impl Sync for RdmaMr {}

impl RdmaMr {
    pub(super) fn register(
        pd: &Arc<RdmaPd>,
        buf: Arc<DmaBuffer>,
        access: Access,
    ) -> Result<Arc<RdmaMr>, VerbsError> {
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            return Err(VerbsError::InvalidArgument(
                "REMOTE_WRITE access requires LOCAL_WRITE",
            ));
        }
        let bits = ibv_access(access, pd.dev.ctx.iwarp);
        let flags = i32::try_from(bits).map_err(|_| VerbsError::InvalidArgument("access flags"))?;
        // SAFETY: the PD is live; `buf` is a live allocation of `buf.len()` bytes that
        // the region keeps alive until it is deregistered in `drop`.
        let raw = unsafe { ibv_reg_mr(pd.raw, buf.as_ptr().cast(), buf.len(), flags) };
        if raw.is_null() {
            return Err(VerbsError::Provider(format!(
                "ibv_reg_mr of {} bytes on {}: {} (pinned memory is limited by \
                 RLIMIT_MEMLOCK: `ulimit -l unlimited`, or run as root)",
                buf.len(),
                pd.dev.ctx.name,
                super::event::errno_text()
            )));
        }
        // SAFETY: a successful registration returns a valid ibv_mr.
        let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
        Ok(Arc::new(RdmaMr {
            raw,
            lkey,
            rkey,
            buf,
            _pd: Arc::clone(pd),
        }))
    }
}

impl Drop for RdmaMr {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once. QPs that could still
        // access it are destroyed first by their owners (queues drop the QP first).
        let rc = unsafe { ibv_dereg_mr(self.raw) };
        if rc != 0 {
            tracing::warn!("ibv_dereg_mr failed: {rc}");
        }
    }
}

impl MemoryRegion for RdmaMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn addr(&self) -> u64 {
        self.buf.addr()
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn buffer(&self) -> &Arc<DmaBuffer> {
        &self.buf
    }
}
