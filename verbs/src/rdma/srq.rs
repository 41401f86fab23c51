//! Shared receive queues (`ibv_create_srq`, `ibv_post_srq_recv`).
//!
//! An SRQ belongs to a protection domain and keeps it alive; QPs created with it
//! (`ibv_qp_init_attr.srq`, through `rdma_create_qp`) keep the SRQ alive, so it is
//! destroyed (`ibv_destroy_srq`) only after every QP that used it. Its receives are
//! the device's: a QP that fails or is destroyed does not flush them. Posting builds
//! the `ibv_recv_wr` chain in scratch vectors under a mutex, reused so the data path
//! does not allocate.

use std::sync::Arc;

use parking_lot::Mutex;
use rdma_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_post_srq_recv, ibv_srq, ibv_srq_attr, ibv_srq_init_attr,
};

use super::pd::RdmaPd;
use super::post::{post_recv_chain, Scratch};
use super::registry::Registry;
use crate::{RecvWr, SharedReceiveQueue, SrqCaps, VerbsError};

/// Every live SRQ this provider made, to recognise them in [`crate::QpInit`].
pub(super) static SRQS: Registry<RdmaSrq> = Registry::new();

pub(super) struct RdmaSrq {
    pub(super) raw: *mut ibv_srq,
    pub(super) pd: Arc<RdmaPd>,
    caps: SrqCaps,
    scratch: Mutex<Scratch>,
}

// SAFETY: libibverbs SRQ handles may be used from any thread (posting is serialised by
// the provider's own lock and by our scratch mutex); the pointer is immutable.
unsafe impl Send for RdmaSrq {}
// SAFETY: see `Send`.
unsafe impl Sync for RdmaSrq {}

impl RdmaSrq {
    pub(super) fn new(pd: &Arc<RdmaPd>, caps: SrqCaps) -> Result<Arc<RdmaSrq>, VerbsError> {
        let limits = pd.dev.ctx.limits;
        if limits.max_srq == 0 || limits.max_srq_wr == 0 {
            return Err(VerbsError::Unsupported("shared receive queues"));
        }
        let max_wr = caps.max_wr.clamp(1, limits.max_srq_wr);
        let max_sge = caps.max_sge.clamp(1, limits.max_srq_sge.max(1));
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is live; `attr` is a valid in/out parameter for the call.
        let raw = unsafe { ibv_create_srq(pd.raw, &mut attr) };
        if raw.is_null() {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                    VerbsError::Unsupported("shared receive queues")
                }
                _ => VerbsError::Provider(format!(
                    "ibv_create_srq({max_wr} WRs) on {}: {err}",
                    pd.dev.ctx.name
                )),
            });
        }
        // The device writes back what it granted (at least what was asked).
        let srq = Arc::new(RdmaSrq {
            raw,
            pd: Arc::clone(pd),
            caps: SrqCaps {
                max_wr: max_wr.max(attr.attr.max_wr),
                max_sge,
            },
            scratch: Mutex::new(Scratch::default()),
        });
        SRQS.insert(&srq);
        Ok(srq)
    }
}

impl SharedReceiveQueue for RdmaSrq {
    fn post_srq_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        let mut guard = self.scratch.lock();
        let srq = self.raw;
        post_recv_chain(&mut guard, wrs, "shared receive queue", |chain, bad| {
            // SAFETY: `chain` is a well-formed chain of receive WRs whose SGEs live
            // until the call returns (see `post_recv_chain`); the SRQ is live.
            unsafe { ibv_post_srq_recv(srq, chain, bad) }
        })
    }

    fn caps(&self) -> SrqCaps {
        self.caps
    }
}

impl Drop for RdmaSrq {
    fn drop(&mut self) {
        SRQS.remove(self);
        // SAFETY: created in `new`, destroyed once; every QP created with it held an
        // `Arc` to it and is gone, so the device no longer uses it.
        let rc = unsafe { ibv_destroy_srq(self.raw) };
        if rc != 0 {
            tracing::warn!(device = %self.pd.dev.ctx.name, "ibv_destroy_srq failed: {rc}");
        }
    }
}
