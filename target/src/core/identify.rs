//! Identify data structures as this target reports them. The controller structure is
//! the checklist of what a fabrics controller must fill (Linux nvmet's
//! `nvmet_execute_identify_ctrl` reports the same set).

use nvmf_common::wire::ana;
use nvmf_common::wire::fabrics::NVME_VS_1_3;
use nvmf_common::wire::identify::{
    anacap, cmic, cntrltype, fuses, lpa, oaes, ocfs, oncs, rescap, sgls, IdentifyController,
    IdentifyNamespace, LbaFormat, NsIdDescriptor,
};

use crate::controller::{Controller, AER_LIMIT, ERROR_LOG_ENTRIES};
use crate::namespace::Namespace;
use crate::subsystem::ControllerModel;
use crate::target::Target;

/// IEEE OUI reported in Identify Controller (none registered: zero).
const IEEE_OUI: [u8; 3] = [0, 0, 0];
/// Recommended Arbitration Burst (2^6 commands), as nvmet reports.
const RAB: u8 = 6;
/// CMIC: multiple ports and multiple controllers may exist.
const CMIC_MULTI_PORT_CTRL: u8 = 0b011;
/// KAS: keep-alive granularity in 100 ms units.
pub(super) const KAS_100MS_UNITS: u16 = 1;
/// Abort Command Limit, 0-based: four Aborts outstanding (nvmet reports the same).
pub(super) const ACL: u8 = 3;
/// Milliseconds in one KAS unit.
const MS_PER_KAS_UNIT: u32 = 100;

/// The KATO (ms) a controller keeps for the `requested` one: rounded up to the KAS
/// granularity it reports, as SPDK rounds (nvmet rounds up to whole seconds), so a
/// 1 ms request does not end the association at once. 0 stays 0 (no keep-alive).
/// Never shortened: the host sends keep-alives at the interval it asked for and is not
/// told of a shorter one (nvmet and SPDK keep long values too).
pub(super) fn kato_ms(requested: u32) -> u32 {
    let unit = u32::from(KAS_100MS_UNITS) * MS_PER_KAS_UNIT;
    requested.div_ceil(unit).saturating_mul(unit)
}
/// SQES/CQES: required and maximum entry sizes as log2 (64-byte SQE, 16-byte CQE).
const SQES: u8 = (6 << 4) | 6;
const CQES: u8 = (4 << 4) | 4;
/// VWC bits 2:1 = 11b: Flush with NSID FFFFFFFFh is supported.
const VWC_BROADCAST_FLUSH: u8 = 0b110;
/// VWC bit 0: a volatile write cache is present.
const VWC_PRESENT: u8 = 0b001;
/// FRMW: one firmware slot, slot 1 read-only.
const FRMW_ONE_SLOT_RO: u8 = 0b11;
/// CTRATT: 128-bit host identifier, traffic-based keep-alive.
const CTRATT_HID128_TBKAS: u32 = (1 << 0) | (1 << 6);
/// NMIC: the namespace may be attached to several controllers.
const NMIC_SHARED: u8 = 1;
/// NSFEAT bit 0: thin provisioning (deallocate frees space).
const NSFEAT_THIN: u8 = 1;
/// DLFEAT: deallocated blocks read as zeroes (bits 2:0 = 001b); Write Zeroes may deallocate.
const DLFEAT_READ_ZEROES: u8 = 0x1 | 0x8;
/// FCATT bit 0: static controller model.
const FCATT_STATIC: u8 = 1;
/// SQE size and the 16-byte unit of IOCCSZ/IORCSZ.
const SQE_BYTES: u32 = 64;
const CAPSULE_UNIT: u32 = 16;
/// Power state 0: 25 W maximum (in centiwatts), as nvmet reports.
const PSD0_MAX_POWER_CW: u16 = 0x9c4;

/// Firmware revision: the crate version, space-padded to 8 ASCII bytes by the setter.
pub(crate) fn firmware_revision() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Fills a 4096-byte Identify Controller structure for `ctrl`.
pub(super) fn controller(ctrl: &Controller, _target: &Target, out: &mut [u8]) {
    let p = &ctrl.params;
    let port = &ctrl.port;
    let discovery = ctrl.subsys.is_discovery();
    let mut id = IdentifyController::new_unchecked(out);
    id.set_sn(&ctrl.subsys.serial);
    id.set_mn(&ctrl.subsys.model);
    id.set_fr(firmware_revision());
    id.set_rab(RAB);
    id.set_ieee(IEEE_OUI);
    id.set_cmic(CMIC_MULTI_PORT_CTRL);
    id.set_mdts(p.mdts());
    id.set_cntlid(ctrl.cntlid.0);
    id.set_ver(NVME_VS_1_3);
    id.set_ctratt(CTRATT_HID128_TBKAS);
    id.set_cntrltype(if discovery {
        cntrltype::DISCOVERY
    } else {
        cntrltype::IO
    });
    id.set_oaes(if discovery {
        oaes::DISCOVERY_LOG_CHANGE
    } else {
        oaes::NS_ATTR | oaes::ANA_CHANGE
    });
    id.set_acl(ACL);
    id.set_aerl((AER_LIMIT - 1) as u8);
    id.set_frmw(FRMW_ONE_SLOT_RO);
    // A discovery controller serves neither the SMART nor the Commands Supported and
    // Effects log (nvmet and SPDK report only extended data there too).
    id.set_lpa(if discovery {
        lpa::EXTENDED
    } else {
        lpa::SMART_PER_NS | lpa::CMD_EFFECTS | lpa::EXTENDED | lpa::MISC
    });
    id.set_elpe((ERROR_LOG_ENTRIES - 1) as u8);
    id.set_npss(0);
    id.set_kas(KAS_100MS_UNITS);
    id.set_sqes(SQES);
    id.set_cqes(CQES);
    id.set_maxcmd(p.max_queue_size);
    id.set_subnqn(ctrl.subsys.nqn.as_str());
    // Fabrics: command capsule = SQE + in-capsule data, in 16-byte units; response
    // capsule = one CQE; in-capsule data starts right after the SQE; dynamic model.
    let icd = p.in_capsule_data_size;
    id.set_ioccsz((SQE_BYTES + icd) / CAPSULE_UNIT);
    id.set_iorcsz(1); // one 16-byte CQE
    id.set_icdoff(0);
    id.set_fcatt(match ctrl.subsys.controller_model {
        ControllerModel::Dynamic => 0,
        ControllerModel::Static => FCATT_STATIC,
    });
    id.set_msdbd(port.msdbd);
    let mut sgl = sgls::SUPPORTED;
    if port.keyed_sgls {
        sgl |= sgls::KEYED;
    }
    if icd > 0 {
        sgl |= sgls::SGL_OFFSET;
    }
    id.set_sgls(sgl);
    if !discovery {
        // ANA as nvmet reports it: every state, 128 groups, 10 s transition time.
        id.set_cmic(CMIC_MULTI_PORT_CTRL | cmic::ANA);
        id.set_anacap(
            anacap::OPTIMIZED
                | anacap::NON_OPTIMIZED
                | anacap::INACCESSIBLE
                | anacap::PERSISTENT_LOSS
                | anacap::CHANGE,
        );
        id.set_anatt(ana::ANATT_SECS);
        id.set_anagrpmax(ana::MAX_GROUPS);
        id.set_nanagrpid(ana::MAX_GROUPS);
        id.set_nn(ctrl.max_nsid());
        id.set_mnan(ctrl.max_nsid());
        id.set_oncs(
            oncs::COMPARE
                | oncs::DSM
                | oncs::WRITE_ZEROES
                | oncs::RESERVATIONS
                | oncs::VERIFY
                | oncs::COPY,
        );
        id.set_ocfs(ocfs::FORMAT_0);
        // Compare and Write, atomic against every other write to its range on every
        // backend (crate::locks); nvmet has no fused support, SPDK the same pair.
        id.set_fuses(fuses::COMPARE_AND_WRITE);
        // Truthful per backend: files and block devices sit on a volatile cache (the
        // page cache or the device's), RAM and null keep nothing to lose on a crash
        // beyond what they already lose.
        let present = if ctrl.volatile_write_cache_present() {
            VWC_PRESENT
        } else {
            0
        };
        id.set_vwc(VWC_BROADCAST_FLUSH | present);
        id.psd_mut(0).set_max_power(PSD0_MAX_POWER_CW);
    }
}

/// Fills a 4096-byte Identify Namespace structure; `max_io_size` (MDTS) bounds Copy.
pub(super) fn namespace(ns: &Namespace, max_io_size: u32, out: &mut [u8]) {
    let info = ns.backend.info();
    let mut id = IdentifyNamespace::new_unchecked(out);
    id.set_nsze(ns.nblocks);
    id.set_ncap(ns.nblocks);
    id.set_nuse(ns.nblocks);
    id.set_nsfeat(if info.supports_deallocate {
        NSFEAT_THIN
    } else {
        0
    });
    id.set_nlbaf(0);
    id.set_flbas(0);
    id.set_nmic(NMIC_SHARED);
    if info.deallocated_reads_zero {
        id.set_dlfeat(DLFEAT_READ_ZEROES);
    }
    let (mssrl, mcl, msrc) = super::copy::limits(ns, max_io_size);
    id.set_mssrl(mssrl);
    id.set_mcl(mcl);
    id.set_msrc(msrc);
    id.set_nguid(ns.nguid);
    id.set_anagrpid(ns.anagrpid);
    id.set_rescap(
        rescap::WRITE_EXCLUSIVE
            | rescap::EXCLUSIVE_ACCESS
            | rescap::WRITE_EXCLUSIVE_REG_ONLY
            | rescap::EXCLUSIVE_ACCESS_REG_ONLY
            | rescap::WRITE_EXCLUSIVE_ALL_REGS
            | rescap::EXCLUSIVE_ACCESS_ALL_REGS
            | rescap::IEKEY
            | if ns.resv.ptpl_capable() {
                rescap::PTPL
            } else {
                0
            },
    );
    id.set_lbaf(
        0,
        LbaFormat {
            ms: 0,
            ds: ns.block_size_shift as u8,
            rp: 0,
        },
    );
}

/// Fills the Namespace Identification Descriptor list (UUID, NGUID, CSI).
pub(super) fn ns_descriptors(ns: &Namespace, out: &mut [u8]) {
    nvmf_common::wire::identify::write_ns_id_descriptors(
        out,
        &[
            NsIdDescriptor::Uuid(ns.uuid),
            NsIdDescriptor::Nguid(ns.nguid),
            NsIdDescriptor::Csi(0),
        ],
    );
}
