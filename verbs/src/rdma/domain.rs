//! The verbs a protection domain offers ([`ProtectionDomain`] for [`RdmaPd`]):
//! registering memory and creating shared receive queues. Above the PD, its memory
//! regions and the SRQ, which all hold the PD they belong to.

use std::sync::Arc;

use super::pd::{RdmaMr, RdmaPd};
use super::srq::RdmaSrq;
use crate::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

impl ProtectionDomain for RdmaPd {
    fn register(
        &self,
        buf: Arc<DmaBuffer>,
        access: Access,
    ) -> Result<Arc<dyn MemoryRegion>, VerbsError> {
        let pd = self.me.upgrade().ok_or(VerbsError::InvalidArgument(
            "protection domain is being dropped",
        ))?;
        Ok(RdmaMr::register(&pd, buf, access)?)
    }

    fn create_srq(
        &self,
        caps: crate::SrqCaps,
    ) -> Result<Arc<dyn crate::SharedReceiveQueue>, VerbsError> {
        let pd = self.me.upgrade().ok_or(VerbsError::InvalidArgument(
            "protection domain is being dropped",
        ))?;
        Ok(RdmaSrq::new(&pd, caps)?)
    }
}
