//! Rewriting the device's "supported and effects" log pages so they describe the
//! passthru controller the host talks to: the Commands Supported and Effects log
//! (LID 05h), Supported Log Pages (00h) and Feature Identifiers Supported and
//! Effects (12h).
//!
//! Owns only the rewriting; what is supported comes from `policy`, so a host that
//! trusts these pages never sends a command the allowed list refuses. A host may read
//! any dword-aligned part of a page (LPO), so each function rewrites the window
//! `[offset, offset + len)` it is given, entry by entry; an entry only partly inside
//! the window cannot occur with the dword-aligned offsets the device accepts.

use crate::config::PassthruConfig;
use nvmf_common::wire::admin::opcode;
use nvmf_common::wire::log::{effects, lid};
use nvmf_common::wire::nvm::opcode as io;
use nvmf_common::wire::supported::{fis, lids, scope};

use super::policy::{feature_fate, opcode_fate, opcode_reaches_device, FeatureFate, OpcodeFate};

/// Bytes per entry of every page here.
const ENTRY: usize = 4;
/// Where the I/O command entries (IOCS) start in the Commands Supported and Effects
/// log; the admin ones (ACS) start at 0.
const IOCS_BASE: usize = 1024;

/// Applies `f(index, value)` to every whole entry of the 256-entry table at `base`
/// (one entry per opcode, LID or FID) that lies in
/// the window `buf` = page bytes `[offset, offset + buf.len())`.
fn patch_entries(buf: &mut [u8], offset: u64, base: usize, mut f: impl FnMut(u8, u32) -> u32) {
    for i in 0..=u8::MAX {
        let at = base + usize::from(i) * ENTRY;
        let Some(rel) = (at as u64).checked_sub(offset) else {
            continue;
        };
        let Ok(rel) = usize::try_from(rel) else {
            continue;
        };
        let Some(slot) = buf.get_mut(rel..rel + ENTRY) else {
            continue;
        };
        let mut b = [0u8; ENTRY];
        b.copy_from_slice(slot);
        slot.copy_from_slice(&f(i, u32::from_le_bytes(b)).to_le_bytes());
    }
}

/// The effects the target reports for a command it answers itself: supported,
/// controller scope (the values its own controllers report).
const EMULATED_ADMIN: u32 = effects::CSUPP | scope::CONTROLLER;
/// Identify, Get Log Page and Get/Set Features may name a namespace.
const BY_FIELD_ADMIN: u32 = effects::CSUPP | scope::NAMESPACE | scope::CONTROLLER;

/// Rewrites a window of the device's Commands Supported and Effects log: admin
/// commands the device never sees here are unsupported, those the target answers
/// are its own; reservation I/O commands are refused on passthru (as nvmet), the
/// other I/O entries are the device's.
pub fn fix_cmd_effects(buf: &mut [u8], offset: u64, cfg: &PassthruConfig) {
    patch_entries(buf, offset, 0, |op, v| match opcode_fate(op) {
        OpcodeFate::Emulated if op != opcode::FABRICS => EMULATED_ADMIN,
        // Supported whatever the device says: some CNS, LIDs and FIDs are answered
        // by the target, so the command works even on a device that omits it.
        OpcodeFate::ByField => v | BY_FIELD_ADMIN,
        _ if opcode_reaches_device(op, cfg) => v,
        _ => 0,
    });
    patch_entries(buf, offset, IOCS_BASE, |op, v| match op {
        io::RESERVATION_REGISTER
        | io::RESERVATION_REPORT
        | io::RESERVATION_ACQUIRE
        | io::RESERVATION_RELEASE => 0,
        _ => v,
    });
}

/// Rewrites a window of the device's Supported Log Pages: the Changed Namespace
/// List is the target's, ANA, reservation notification and discovery are not served.
pub fn fix_supported_logs(buf: &mut [u8], offset: u64) {
    patch_entries(buf, offset, 0, |l, v| match l {
        lid::CHANGED_NS | lid::CMD_EFFECTS | lid::SUPPORTED_LOGS | lid::FEATURES_SUPPORTED => {
            v | lids::LSUPP
        }
        lid::ANA | lid::RESERVATION_NOTIFICATION | lid::DISCOVERY => 0,
        _ => v,
    });
}

/// Rewrites a window of the device's Feature Identifiers Supported and Effects log:
/// features the target keeps are its own (controller scope), refused ones are
/// unsupported, vendor ones follow `allow_admin: [vendor]`.
pub fn fix_features_supported(buf: &mut [u8], offset: u64, cfg: &PassthruConfig) {
    use crate::config::PassthruAdminClass;
    patch_entries(buf, offset, 0, |f, v| match feature_fate(f) {
        FeatureFate::Emulated => fis::FSUPP | scope::CONTROLLER,
        FeatureFate::Device | FeatureFate::HostBehavior => v,
        FeatureFate::Vendor if cfg.allows(PassthruAdminClass::Vendor) => v,
        FeatureFate::Vendor | FeatureFate::Refused => 0,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_patching_respects_offsets() {
        // Entries 2 and 3 of a table, read from byte 8: entry i at 8 + 4 (i - 2).
        let mut window = [0xAAu8; 8];
        patch_entries(&mut window, 8, 0, |i, v| {
            assert!(i == 2 || i == 3);
            assert_eq!(v, 0xAAAA_AAAA);
            u32::from(i)
        });
        assert_eq!(window, [2, 0, 0, 0, 3, 0, 0, 0]);
        // A window past the table is left alone.
        let mut far = [0x55u8; 4];
        patch_entries(&mut far, 4096, 0, |_, _| 0);
        assert_eq!(far, [0x55; 4]);
    }
}
