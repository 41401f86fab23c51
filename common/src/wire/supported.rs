//! The NVMe 2.0 "supported and effects" log pages: Supported Log Pages (LID 00h: one
//! LID Supported and Effects dword per log page identifier), Feature Identifiers
//! Supported and Effects (LID 12h: one dword per feature identifier) and NVMe-MI
//! Commands Supported and Effects (LID 13h). Linux `struct nvme_supported_log`,
//! `struct nvme_supported_features_log`; libnvme
//! `struct nvme_mi_cmd_supported_effects_log`.
//!
//! Identify Controller LPA bit 5 ([`super::identify::lpa::MISC`]) promises all three,
//! plus a command scope (CSP, [`scope`]) in every supported entry of the Commands
//! Supported and Effects log page.

use super::{get_u32, set_u32, view};

/// Length of the Supported Log Pages log page: 256 dwords.
pub const SUPPORTED_LOGS_LEN: usize = 1024;
/// Length of the Feature Identifiers Supported and Effects log page: 256 dwords.
pub const FEATURES_SUPPORTED_LEN: usize = 1024;
/// Length of the NVMe-MI Commands Supported and Effects log page: 256 dwords, then
/// 3072 reserved bytes.
pub const MI_CMD_EFFECTS_LEN: usize = 4096;
/// Entries in each of the three pages.
pub const ENTRIES: usize = 256;
const ENTRY_LEN: usize = 4;

/// LID Supported and Effects bits (Supported Log Pages entries; Linux `NVME_LIDS_*`).
pub mod lids {
    /// LID Supported: the controller serves this log page.
    pub const LSUPP: u32 = 1 << 0;
    /// Index Offset Supported: Get Log Page with OT = 1 (an index, not a byte offset).
    pub const IOS: u32 = 1 << 1;
    /// LID Specific Parameter (bits 31:16).
    pub const LIDSP_SHIFT: u32 = 16;
    pub const LIDSP_MASK: u32 = 0xFFFF << LIDSP_SHIFT;
}

/// FID Supported and Effects bits (libnvme `NVME_FID_SUPPORTED_EFFECTS_*`).
pub mod fis {
    /// FID Supported: Get Features and/or Set Features accept this identifier.
    pub const FSUPP: u32 = 1 << 0;
    /// User Data Content Change: Set Features may change user data.
    pub const UDCC: u32 = 1 << 1;
    /// Namespace Capability Change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace Inventory Change.
    pub const NIC: u32 = 1 << 3;
    /// Controller Capability Change.
    pub const CCC: u32 = 1 << 4;
    /// UUID Selection Supported.
    pub const USS: u32 = 1 << 19;
    /// Feature Scope (FSP, bits 31:20; see [`super::scope`]).
    pub const FSP_MASK: u32 = 0xFFF << 20;
}

/// Scope bits, in place (bits 31:20): the Feature Scope (FSP) of a FID Supported and
/// Effects entry and the Command Scope (CSP) of a Commands Supported and Effects entry
/// share them (Linux `NVME_FIS_NSCPE`, `NVME_FIS_CSCPE`; SPDK `nscpe`, `cscpe`...).
pub mod scope {
    pub const NAMESPACE: u32 = 1 << 20;
    pub const CONTROLLER: u32 = 1 << 21;
    pub const NVM_SET: u32 = 1 << 22;
    pub const ENDURANCE_GROUP: u32 = 1 << 23;
    pub const DOMAIN: u32 = 1 << 24;
    pub const NVM_SUBSYSTEM: u32 = 1 << 25;
}

fn entry_range(i: u8) -> core::ops::Range<usize> {
    let o = usize::from(i) * ENTRY_LEN;
    o..o + ENTRY_LEN
}

view!(
    /// A view of the 1024-byte Supported Log Pages log page (LID 00h).
    SupportedLogs,
    SUPPORTED_LOGS_LEN
);

impl<T: AsRef<[u8]>> SupportedLogs<T> {
    /// The LID Supported and Effects dword of log page `lid` (see [`lids`]).
    pub fn lid(&self, lid: u8) -> u32 {
        get_u32(self.buffer.as_ref(), entry_range(lid))
    }
    /// Whether log page `lid` is supported (LSUPP).
    pub fn supported(&self, lid: u8) -> bool {
        self.lid(lid) & lids::LSUPP != 0
    }
    /// Every supported log page identifier, increasing.
    pub fn supported_lids(&self) -> Vec<u8> {
        (0..=u8::MAX).filter(|&l| self.supported(l)).collect()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SupportedLogs<T> {
    pub fn set_lid(&mut self, lid: u8, v: u32) {
        set_u32(self.buffer.as_mut(), entry_range(lid), v)
    }
}

view!(
    /// A view of the 1024-byte Feature Identifiers Supported and Effects log page
    /// (LID 12h).
    FeaturesSupported,
    FEATURES_SUPPORTED_LEN
);

impl<T: AsRef<[u8]>> FeaturesSupported<T> {
    /// The FID Supported and Effects dword of feature `fid` (see [`fis`], [`scope`]).
    pub fn fid(&self, fid: u8) -> u32 {
        get_u32(self.buffer.as_ref(), entry_range(fid))
    }
    /// Whether feature `fid` is supported (FSUPP).
    pub fn supported(&self, fid: u8) -> bool {
        self.fid(fid) & fis::FSUPP != 0
    }
    /// Every supported feature identifier, increasing.
    pub fn supported_fids(&self) -> Vec<u8> {
        (0..=u8::MAX).filter(|&f| self.supported(f)).collect()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FeaturesSupported<T> {
    pub fn set_fid(&mut self, fid: u8, v: u32) {
        set_u32(self.buffer.as_mut(), entry_range(fid), v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn supported_logs_golden() {
        let mut l = SupportedLogs::new_unchecked(vec![0u8; SUPPORTED_LOGS_LEN]);
        l.set_lid(0x00, lids::LSUPP);
        l.set_lid(
            0x0D,
            lids::LSUPP | lids::IOS | (0x1234 << lids::LIDSP_SHIFT),
        );
        l.set_lid(0xFF, lids::LSUPP);
        let b = l.as_bytes();
        assert_eq!(&b[0..4], &[1, 0, 0, 0]);
        assert_eq!(&b[52..56], &[3, 0, 0x34, 0x12]);
        assert_eq!(&b[1020..1024], &[1, 0, 0, 0]);
        assert_eq!(l.supported_lids(), vec![0x00, 0x0D, 0xFF]);
        assert_eq!(l.lid(0x0D) & lids::LIDSP_MASK, 0x1234 << 16);
        assert!(!l.supported(0x01));
        assert_eq!(
            SupportedLogs::new_checked(&b[..1023]).err(),
            Some(WireError::Truncated {
                need: 1024,
                have: 1023
            })
        );
    }

    #[test]
    fn features_supported_golden() {
        let mut f = FeaturesSupported::new_unchecked([0u8; FEATURES_SUPPORTED_LEN]);
        f.set_fid(0x07, fis::FSUPP | scope::CONTROLLER);
        f.set_fid(0x83, fis::FSUPP | fis::UDCC | fis::CCC | scope::NAMESPACE);
        f.set_fid(0x01, fis::USS | scope::NVM_SUBSYSTEM);
        let b = f.as_bytes();
        // libnvme: FSUPP bit 0, UDCC 1, CCC 4; FSP 31:20 with namespace scope at 0
        // and controller scope at 1 (Linux NVME_FIS_NSCPE = 1 << 20, CSCPE = 1 << 21).
        assert_eq!(&b[28..32], &[0x01, 0, 0x20, 0]);
        assert_eq!(&b[0x83 * 4..0x83 * 4 + 4], &[0x13, 0, 0x10, 0]);
        assert_eq!(&b[4..8], &[0, 0, 0x08, 0x02]);
        assert_eq!(f.supported_fids(), vec![0x07, 0x83]);
        assert_eq!(f.fid(0x83) & fis::FSP_MASK, scope::NAMESPACE);
        assert_eq!(
            scope::DOMAIN | scope::ENDURANCE_GROUP | scope::NVM_SET,
            0x1C << 20
        );
    }
}
