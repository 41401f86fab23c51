//! The verbs a protection domain offers ([`ProtectionDomain`] for [`SoftPd`]):
//! registering memory (the key table in [`super::mr`]) and creating shared receive
//! queues. Above the PD and the SRQ, which holds the PD it belongs to.

use std::sync::Arc;

use super::mr::SoftPd;
use super::srq::SoftSrq;
use crate::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

impl ProtectionDomain for SoftPd {
    fn create_srq(
        &self,
        caps: crate::SrqCaps,
    ) -> Result<Arc<dyn crate::SharedReceiveQueue>, VerbsError> {
        let pd = self.me.upgrade().ok_or(VerbsError::InvalidArgument(
            "protection domain is being dropped",
        ))?;
        Ok(SoftSrq::new(&self.dev, pd, caps)?)
    }

    fn register(
        &self,
        buf: Arc<DmaBuffer>,
        access: Access,
    ) -> Result<Arc<dyn MemoryRegion>, VerbsError> {
        self.register_region(buf, access)
    }
}
