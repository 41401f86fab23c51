//! The Identify Controller and Identify Namespace fields the host uses, parsed
//! from the raw structures: [`ControllerIdentity`] and [`NamespaceInfo`].

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::{cntrltype, flbas, IdentifyController, IdentifyNamespace};
use nvmf_common::wire::sqe::SQE_LEN;

use crate::error::Error;

/// Memory page size for CC.MPS = 0 (2^(12 + MPS)).
const PAGE_SHIFT_BASE: u32 = 12;
/// Bytes per IOCCSZ / IORCSZ unit.
const CAPSULE_SIZE_UNIT: u32 = 16;

/// The Identify Controller fields the host uses, parsed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ControllerIdentity {
    pub vid: u16,
    pub ssvid: u16,
    pub sn: String,
    pub mn: String,
    pub fr: String,
    pub rab: u8,
    pub ieee: [u8; 3],
    pub cmic: u8,
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    pub rtd3e: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub cntrltype: u8,
    pub oacs: u16,
    pub acl: u8,
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    pub elpe: u8,
    pub kas: u16,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    pub nn: u32,
    pub oncs: u16,
    pub fuses: u16,
    pub vwc: u8,
    pub sgls: u32,
    pub mnan: u32,
    pub subnqn: String,
    pub ioccsz: u32,
    pub iorcsz: u32,
    pub icdoff: u16,
    pub fcatt: u8,
    pub msdbd: u8,
    /// In-capsule data the I/O queues accept (IOCCSZ × 16 − 64 bytes).
    pub in_capsule_data: u32,
    /// Largest data transfer in bytes (2^MDTS pages); `None` = no limit.
    pub max_transfer: Option<u64>,
}

impl ControllerIdentity {
    /// Parses an Identify Controller structure; `mpsmin` (CAP.MPSMIN) is MDTS's unit.
    pub fn parse(data: &[u8], mpsmin: u8) -> Result<ControllerIdentity, Error> {
        let id = IdentifyController::new_checked(data)
            .map_err(|e| Error::Protocol(format!("Identify Controller data: {e}")))?;
        let ioccsz = id.ioccsz();
        let mdts = id.mdts();
        let page_shift = PAGE_SHIFT_BASE + u32::from(mpsmin);
        let max_transfer = (mdts != 0).then(|| {
            1u64.checked_shl(page_shift + u32::from(mdts))
                .unwrap_or(u64::MAX)
        });
        Ok(ControllerIdentity {
            vid: id.vid(),
            ssvid: id.ssvid(),
            sn: id.sn_string(),
            mn: id.mn_string(),
            fr: id.fr_string(),
            rab: id.rab(),
            ieee: id.ieee(),
            cmic: id.cmic(),
            mdts,
            cntlid: id.cntlid(),
            ver: id.ver(),
            rtd3e: id.rtd3e(),
            oaes: id.oaes(),
            ctratt: id.ctratt(),
            cntrltype: id.cntrltype(),
            oacs: id.oacs(),
            acl: id.acl(),
            aerl: id.aerl(),
            frmw: id.frmw(),
            lpa: id.lpa(),
            elpe: id.elpe(),
            kas: id.kas(),
            sqes: id.sqes(),
            cqes: id.cqes(),
            maxcmd: id.maxcmd(),
            nn: id.nn(),
            oncs: id.oncs(),
            fuses: id.fuses(),
            vwc: id.vwc(),
            sgls: id.sgls(),
            mnan: id.mnan(),
            subnqn: id.subnqn_str().unwrap_or_default().to_string(),
            ioccsz,
            iorcsz: id.iorcsz(),
            icdoff: id.icdoff(),
            fcatt: id.fcatt(),
            msdbd: id.msdbd(),
            in_capsule_data: ioccsz
                .saturating_mul(CAPSULE_SIZE_UNIT)
                .saturating_sub(SQE_LEN as u32),
            max_transfer,
        })
    }

    pub fn is_discovery(&self) -> bool {
        self.cntrltype == cntrltype::DISCOVERY
    }
}

/// One active namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: Nsid,
    /// Size in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    /// Logical block size in bytes (2^LBADS of the format in use).
    pub block_size: u32,
    /// Metadata bytes per block of the format in use (0 for all our targets).
    pub metadata_size: u16,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// From the Namespace Identification Descriptor list, when the target has one.
    pub uuid: Option<[u8; 16]>,
}

impl NamespaceInfo {
    /// Parses an Identify Namespace structure. `Ok(None)` for an inactive namespace
    /// (NSZE 0); an error for a format this host cannot use.
    pub fn parse(nsid: Nsid, data: &[u8]) -> Result<Option<NamespaceInfo>, Error> {
        let id = IdentifyNamespace::new_checked(data)
            .map_err(|e| Error::Protocol(format!("Identify Namespace {nsid} data: {e}")))?;
        if id.nsze() == 0 {
            return Ok(None);
        }
        let lbaf = id.current_lbaf();
        let block_size = lbaf.block_size().ok_or_else(|| {
            Error::Unsupported(format!(
                "namespace {nsid}: LBA data size 2^{} is outside 512 B..2 GiB",
                lbaf.ds
            ))
        })?;
        if lbaf.ms != 0 && id.flbas() & flbas::META_EXT != 0 {
            return Err(Error::Unsupported(format!(
                "namespace {nsid}: extended-LBA metadata ({} bytes per block)",
                lbaf.ms
            )));
        }
        Ok(Some(NamespaceInfo {
            nsid,
            nsze: id.nsze(),
            ncap: id.ncap(),
            nuse: id.nuse(),
            block_size,
            metadata_size: lbaf.ms,
            nguid: id.nguid(),
            eui64: id.eui64(),
            uuid: None,
        }))
    }

    /// Capacity in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.nsze.saturating_mul(u64::from(self.block_size))
    }
}
