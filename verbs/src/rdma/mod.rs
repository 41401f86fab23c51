//! Real RDMA verbs: libibverbs and librdmacm through `rdma-sys` (NICs, soft-RoCE,
//! iWARP). The only module of the project that touches `rdma-sys`; every `unsafe`
//! block in it says why it is sound.
//!
//! [`RdmaDevice`] implements [`Device`] and, through it, the other verbs traits with
//! the semantics [`crate`] describes, which here are the hardware's own:
//!
//! - **Device** ([`device`]): found by address through rdma_cm. A target opens the
//!   device of its listen address ([`RdmaDevice::for_local_addr`]), a host the device
//!   that routes to the target ([`RdmaDevice::for_remote_addr`]). Without an RDMA
//!   stack both fail with [`VerbsError::NoDevice`] and a message saying what to load.
//! - **Memory** ([`pd`]): `ibv_reg_mr` once per buffer, at set-up; the region keeps
//!   the buffer alive and deregisters on drop. On iWARP, locally writable regions
//!   are also remotely writable (RDMA READ sinks must be).
//! - **Completion queues** ([`cq`]): completion-channel or polling mode
//!   ([`CqMode`], [`RdmaDevice::set_cq_mode`]); grown with `ibv_resize_cq` as QPs
//!   join, and a QP that cannot fit is refused rather than risking a CQ overrun that
//!   would break every queue on it.
//! - **Queue pairs** ([`qp`]): RC, created by rdma_cm on the connection's id, each with
//!   its own event channel; DISCONNECTED and friends mark only that QP dead, and
//!   `rdma_disconnect` flushes its outstanding work with `WrFlushError`.
//! - **Connections** ([`cm`]): listen, accept with private data (after `pre_post`),
//!   reject with private data, connect; see that module for the event handling.
//!
//! - **Shared receive queues** ([`srq`]): `ibv_create_srq` on a PD (refused with
//!   [`VerbsError::Unsupported`] when the device reports no SRQs); QPs created with one
//!   (`ibv_qp_init_attr.srq` through `rdma_create_qp`) hold it.

mod cm;
mod convert;
mod cq;
mod device;
mod domain;
mod event;
mod pd;
mod post;
mod qp;
mod registry;
mod srq;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use super::{CompletionQueue, Device, Listener, ProtectionDomain, QpInit, QueuePair, VerbsError};

pub use device::{CqMode, Limits, RdmaDevice};

impl Device for RdmaDevice {
    fn name(&self) -> String {
        self.shared.ctx.name.clone()
    }

    fn alloc_pd(&self) -> Result<Arc<dyn ProtectionDomain>, VerbsError> {
        Ok(pd::RdmaPd::new(&self.shared)?)
    }

    fn create_cq(&self, entries: u32) -> Result<Arc<dyn CompletionQueue>, VerbsError> {
        Ok(cq::RdmaCq::new(&self.shared, entries)?)
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
