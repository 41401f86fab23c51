//! Identify data of a passthru subsystem: the device's, with what belongs to the
//! fabric controller replaced by ours, as Linux nvmet's passthru does
//! (`nvmet_passthru_override_id_ctrl`, `_id_ns`, `_id_descs`).
//!
//! Owns the rewriting of the 4096-byte structures the device returned; it never
//! talks to the device. Departures from nvmet, each for a reason given where it is
//! made: ANA and reservations cleared everywhere they show, NMIC shared, OACS and
//! SANICAP trimmed to the allowed list, OAES cleared, exact SQES/CQES, CTRATT host
//! identifier bits ours.

use crate::config::{PassthruAdminClass, PassthruConfig};
use nvmf_common::wire::fabrics::vs;
use nvmf_common::wire::identify::{
    cmic, cntrltype, ctratt, entry_size, fcatt, flbas, nmic, oacs, oncs, parse_ns_id_descriptors,
    sgls, write_ns_id_descriptors, IdentifyController, IdentifyNamespace, IdentifyNsCsIndep,
    LbaFormat, NsIdDescriptor, NUM_LBAF,
};

/// The oldest version a passthru controller reports (nvmet: "advertising 1.2.1"):
/// NVMe over Fabrics needs at least 1.2.1 of the base specification.
pub const MIN_VERSION: u32 = vs(1, 2, 1);
/// The page size MDTS counts in. The device's own CAP.MPSMIN is not visible through
/// the admin ioctl; 4 KiB is what nearly every controller has, and for one with a
/// larger minimum page this reads its MDTS as smaller than it is, never larger.
const MDTS_PAGE_SIZE: u32 = 4096;
/// MDTS 0: no limit.
const MDTS_UNLIMITED: u8 = 0;
/// One 16-byte unit of IOCCSZ / IORCSZ / ICDOFF.
const CAPSULE_UNIT: u32 = 16;
/// A command capsule's SQE, and a response capsule's CQE, in bytes.
const SQE_BYTES: u32 = 64;
const CQE_BYTES: u32 = 16;

/// What the fabric controller reports in place of the device's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricFields {
    pub cntlid: u16,
    pub subnqn: String,
    /// Largest transfer the target moves (bytes, a power of two).
    pub max_io_size: u32,
    /// Entries per I/O queue (MAXCMD).
    pub max_queue_size: u16,
    /// In-capsule data bytes per command (IOCCSZ - 64).
    pub in_capsule_data_size: u32,
    /// The port carries keyed SGL data block descriptors (RDMA).
    pub keyed_sgls: bool,
    pub msdbd: u8,
    pub static_model: bool,
    /// Asynchronous Event Request limit, 0-based (the target holds AERs itself).
    pub aerl: u8,
    /// Abort command limit, 0-based (the target answers Abort itself).
    pub acl: u8,
    /// Keep-alive granularity, 100 ms units (the target runs keep-alive itself).
    pub kas: u16,
}

/// The MDTS a passthru controller reports: the device's, capped by ours (both in
/// 4 KiB pages; 0 means no limit), as nvmet caps it by what its own path moves.
/// Ours is computed as [`crate::params::TargetParams::mdts`] does, so a 4 KiB
/// `max_io_size` (one page, which MDTS cannot express) gives 0 here as there.
pub fn capped_mdts(device_mdts: u8, max_io_size: u32) -> u8 {
    let ours = (max_io_size / MDTS_PAGE_SIZE).max(1).ilog2();
    let ours = u8::try_from(ours).unwrap_or(u8::MAX);
    if device_mdts == MDTS_UNLIMITED {
        ours
    } else {
        device_mdts.min(ours)
    }
}

/// The version a passthru controller reports (Identify VER and the VS property,
/// which must agree): the device's, or [`MIN_VERSION`] for an older one.
pub fn fabric_version(device_ver: u32) -> u32 {
    device_ver.max(MIN_VERSION)
}

/// OACS bits of the admin commands passed only when their class is allowed; the
/// others (Doorbell Buffer Config, Virtualization Management, NVMe-MI, Get LBA
/// Status, Lockdown) are never passed and always cleared.
const OACS_BY_CLASS: [(u16, PassthruAdminClass); 6] = [
    (oacs::SECURITY, PassthruAdminClass::Security),
    (oacs::FORMAT, PassthruAdminClass::Format),
    (oacs::FW, PassthruAdminClass::Firmware),
    (oacs::NS_MGMT, PassthruAdminClass::NsManagement),
    (oacs::SELF_TEST, PassthruAdminClass::SelfTest),
    (oacs::DIRECTIVES, PassthruAdminClass::Directives),
];

/// Rewrites the device's Identify Controller in place for the fabric controller.
pub fn override_id_ctrl(id: &mut [u8], fab: &FabricFields, cfg: &PassthruConfig) {
    let mut c = IdentifyController::new_unchecked(id);
    // Model, serial, firmware, vendor ids, capacities, ONCS, VWC, power states and
    // the rest stay the device's: that is what a passthru subsystem is for.
    c.set_cntlid(fab.cntlid);
    c.set_ver(fabric_version(c.ver()));
    c.set_mdts(capped_mdts(c.mdts(), fab.max_io_size));
    c.set_cntrltype(cntrltype::IO);
    // Reached through several ports and controllers (nvmet sets MULTI_CTRL); not an
    // SR-IOV function to the host, and no ANA: the device's ANA describes its own
    // PCIe ports, and ours is not served on passthru yet, so every ANA field goes.
    c.set_cmic(cmic::MULTI_PORT | cmic::MULTI_CTRL);
    c.set_anacap(0);
    c.set_anatt(0);
    c.set_anagrpmax(0);
    c.set_nanagrpid(0);
    // The target answers AER, Abort and Keep Alive itself (nvmet: aerl, acl, kas).
    c.set_aerl(fab.aerl);
    c.set_acl(fab.acl);
    c.set_kas(fab.kas);
    // Device events are not forwarded (nvmet neither, yet it keeps OAES): promise
    // none rather than events that never come.
    c.set_oaes(0);
    // 128-bit host identifiers and traffic-based keep-alive are the fabric
    // controller's; reservations are refused (see below), so no RHII; extended LBA
    // formats would send hosts to CNS 05h for PI formats that metadata-less fabric
    // I/O cannot use.
    let attrs =
        (c.ctratt() & !(ctratt::RHII | ctratt::ELBAS)) | ctratt::HOST_ID_128 | ctratt::TBKAS;
    c.set_ctratt(attrs);
    // No host memory buffer across a fabric (nvmet).
    c.set_hmpre(0);
    c.set_hmmin(0);
    c.set_hmminds(0);
    c.set_hmmaxd(0);
    // Capsules carry 64-byte SQEs and 16-byte CQEs exactly (nvmet: the minimum of
    // the device's and these, which is these for any conforming device).
    c.set_sqes(entry_size::SQES_64);
    c.set_cqes(entry_size::CQES_16);
    c.set_maxcmd(fab.max_queue_size);
    // Fused commands are refused (nvmet: "don't support fuse commands").
    c.set_fuses(0);
    // Reservations cannot tell fabric hosts apart on the device (nvmet).
    c.set_oncs(c.oncs() & !oncs::RESERVATIONS);
    // Only commands that can reach the device are announced.
    let mut admin = c.oacs();
    for (bit, class) in OACS_BY_CLASS {
        if !cfg.allows(class) {
            admin &= !bit;
        }
    }
    let passable = OACS_BY_CLASS.iter().fold(0u16, |acc, (bit, _)| acc | bit);
    c.set_oacs(admin & passable);
    if !cfg.allows(PassthruAdminClass::Sanitize) {
        c.set_sanicap(0);
    }
    // Fabrics fields: ours.
    let mut sgl = sgls::SUPPORTED;
    if fab.keyed_sgls {
        sgl |= sgls::KEYED;
    }
    if fab.in_capsule_data_size > 0 {
        sgl |= sgls::SGL_OFFSET;
    }
    c.set_sgls(sgl);
    c.set_subnqn(&fab.subnqn);
    c.set_ioccsz((SQE_BYTES + fab.in_capsule_data_size) / CAPSULE_UNIT);
    c.set_iorcsz(CQE_BYTES / CAPSULE_UNIT);
    c.set_icdoff(0);
    c.set_fcatt(if fab.static_model {
        fcatt::STATIC_CONTROLLER_MODEL
    } else {
        0
    });
    c.set_msdbd(fab.msdbd);
    c.set_ofcs(0);
    c.set_dctype(0);
}

/// Rewrites the device's Identify Namespace (CNS 00h) in place.
pub fn override_id_ns(id: &mut [u8], clear_ids: bool) {
    // An inactive NSID reads as zeroes, and must stay so: hosts take zeroes (NCAP
    // 0) for "no namespace here".
    if id.iter().all(|&b| b == 0) {
        return;
    }
    let mut n = IdentifyNamespace::new_unchecked(id);
    // Fabric I/O carries no separate metadata: formats with metadata go, and with
    // them extended LBAs, metadata capabilities and protection information (nvmet
    // clears the first three; PI without metadata means nothing, so DPC/DPS too).
    let count = usize::from(n.nlbaf()).saturating_add(1).min(NUM_LBAF);
    for i in 0..count {
        if n.lbaf(i).ms != 0 {
            n.set_lbaf(i, LbaFormat::default());
        }
    }
    n.set_flbas(n.flbas() & !flbas::META_EXT);
    n.set_mc(0);
    n.set_dpc(0);
    n.set_dps(0);
    // Several fabric controllers reach it: a Linux host refuses a namespace that
    // shows up on two controllers unshared ("Duplicate unshared namespace").
    n.set_nmic(n.nmic() | nmic::SHARED);
    // Reservations are refused and ANA is not served on passthru.
    n.set_rescap(0);
    n.set_anagrpid(0);
    if clear_ids {
        n.set_nguid([0; 16]);
        n.set_eui64([0; 8]);
    }
}

/// Rewrites the I/O command set independent Identify Namespace (CNS 08h) the way
/// [`override_id_ns`] does its fields: hosts of NVMe 2.0 controllers read NMIC,
/// RESCAP and ANAGRPID here instead.
pub fn override_id_ns_cs_indep(id: &mut [u8]) {
    if id.iter().all(|&b| b == 0) {
        return;
    }
    let mut n = IdentifyNsCsIndep::new_unchecked(id);
    n.set_nmic(n.nmic() | nmic::SHARED);
    n.set_rescap(0);
    n.set_anagrpid(0);
}

/// Rewrites the Namespace Identification Descriptor list (CNS 03h): with
/// `clear_ids` only the Command Set Identifier descriptor stays (nvmet), so a host
/// never matches the fabric namespace with the device seen locally.
pub fn override_ns_descriptors(list: &mut [u8], clear_ids: bool) {
    if !clear_ids {
        return;
    }
    let kept: Vec<NsIdDescriptor> = parse_ns_id_descriptors(list)
        .into_iter()
        .filter(|d| matches!(d, NsIdDescriptor::Csi(_)))
        .take(1)
        .collect();
    write_ns_id_descriptors(list, &kept);
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::fabrics::{NVME_VS_1_3, NVME_VS_1_4};

    #[test]
    fn mdts_is_capped_by_ours() {
        // 1 MiB = 256 pages = 2^8.
        assert_eq!(capped_mdts(9, 1 << 20), 8);
        assert_eq!(capped_mdts(5, 1 << 20), 5);
        assert_eq!(capped_mdts(MDTS_UNLIMITED, 1 << 20), 8);
        assert_eq!(capped_mdts(3, 1 << 15), 3);
        assert_eq!(capped_mdts(4, 1 << 15), 3);
    }

    #[test]
    fn version_is_at_least_1_2_1() {
        assert_eq!(fabric_version(vs(1, 1, 0)), MIN_VERSION);
        assert_eq!(fabric_version(NVME_VS_1_4), NVME_VS_1_4);
        assert!(fabric_version(NVME_VS_1_3) > MIN_VERSION);
    }
}
