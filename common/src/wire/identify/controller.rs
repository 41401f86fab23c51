//! Identify Controller (CNS 01h; Linux `struct nvme_id_ctrl`): the field offsets,
//! the [`IdentifyController`] view and the named values of its fields.

use crate::wire::{get_bytes, get_bytes_mut, get_bytes_n, getters, set_padded, setters, view};

use super::{set_ascii_padded, set_nul_padded, PowerStateDesc, IDENTIFY_LEN};

mod ctrl {
    use core::ops::Range;
    pub const VID: Range<usize> = 0..2;
    pub const SSVID: Range<usize> = 2..4;
    pub const SN: Range<usize> = 4..24;
    pub const MN: Range<usize> = 24..64;
    pub const FR: Range<usize> = 64..72;
    pub const RAB: Range<usize> = 72..73;
    pub const IEEE: Range<usize> = 73..76;
    pub const CMIC: Range<usize> = 76..77;
    pub const MDTS: Range<usize> = 77..78;
    pub const CNTLID: Range<usize> = 78..80;
    pub const VER: Range<usize> = 80..84;
    pub const RTD3R: Range<usize> = 84..88;
    pub const RTD3E: Range<usize> = 88..92;
    pub const OAES: Range<usize> = 92..96;
    pub const CTRATT: Range<usize> = 96..100;
    pub const RRLS: Range<usize> = 100..102;
    pub const CNTRLTYPE: Range<usize> = 111..112;
    pub const FGUID: Range<usize> = 112..128;
    pub const CRDT1: Range<usize> = 128..130;
    pub const CRDT2: Range<usize> = 130..132;
    pub const CRDT3: Range<usize> = 132..134;
    pub const NVMSR: Range<usize> = 253..254;
    pub const VWCI: Range<usize> = 254..255;
    pub const MEC: Range<usize> = 255..256;
    pub const OACS: Range<usize> = 256..258;
    pub const ACL: Range<usize> = 258..259;
    pub const AERL: Range<usize> = 259..260;
    pub const FRMW: Range<usize> = 260..261;
    pub const LPA: Range<usize> = 261..262;
    pub const ELPE: Range<usize> = 262..263;
    pub const NPSS: Range<usize> = 263..264;
    pub const AVSCC: Range<usize> = 264..265;
    pub const APSTA: Range<usize> = 265..266;
    pub const WCTEMP: Range<usize> = 266..268;
    pub const CCTEMP: Range<usize> = 268..270;
    pub const MTFA: Range<usize> = 270..272;
    pub const HMPRE: Range<usize> = 272..276;
    pub const HMMIN: Range<usize> = 276..280;
    pub const TNVMCAP: Range<usize> = 280..296;
    pub const UNVMCAP: Range<usize> = 296..312;
    pub const RPMBS: Range<usize> = 312..316;
    pub const EDSTT: Range<usize> = 316..318;
    pub const DSTO: Range<usize> = 318..319;
    pub const FWUG: Range<usize> = 319..320;
    pub const KAS: Range<usize> = 320..322;
    pub const HCTMA: Range<usize> = 322..324;
    pub const MNTMT: Range<usize> = 324..326;
    pub const MXTMT: Range<usize> = 326..328;
    pub const SANICAP: Range<usize> = 328..332;
    pub const HMMINDS: Range<usize> = 332..336;
    pub const HMMAXD: Range<usize> = 336..338;
    pub const NVMSETIDMAX: Range<usize> = 338..340;
    pub const ENDGIDMAX: Range<usize> = 340..342;
    pub const ANATT: Range<usize> = 342..343;
    pub const ANACAP: Range<usize> = 343..344;
    pub const ANAGRPMAX: Range<usize> = 344..348;
    pub const NANAGRPID: Range<usize> = 348..352;
    pub const PELS: Range<usize> = 352..356;
    pub const DOMAINID: Range<usize> = 356..358;
    pub const MEGCAP: Range<usize> = 368..384;
    pub const SQES: Range<usize> = 512..513;
    pub const CQES: Range<usize> = 513..514;
    pub const MAXCMD: Range<usize> = 514..516;
    pub const NN: Range<usize> = 516..520;
    pub const ONCS: Range<usize> = 520..522;
    pub const FUSES: Range<usize> = 522..524;
    pub const FNA: Range<usize> = 524..525;
    pub const VWC: Range<usize> = 525..526;
    pub const AWUN: Range<usize> = 526..528;
    pub const AWUPF: Range<usize> = 528..530;
    pub const ICSVSCC: Range<usize> = 530..531;
    pub const NWPC: Range<usize> = 531..532;
    pub const ACWU: Range<usize> = 532..534;
    pub const OCFS: Range<usize> = 534..536;
    pub const SGLS: Range<usize> = 536..540;
    pub const MNAN: Range<usize> = 540..544;
    pub const MAXDNA: Range<usize> = 544..560;
    pub const MAXCNA: Range<usize> = 560..564;
    pub const OAQD: Range<usize> = 564..568;
    pub const SUBNQN: Range<usize> = 768..1024;
    pub const IOCCSZ: Range<usize> = 1792..1796;
    pub const IORCSZ: Range<usize> = 1796..1800;
    pub const ICDOFF: Range<usize> = 1800..1802;
    pub const FCATT: Range<usize> = 1802..1803;
    pub const MSDBD: Range<usize> = 1803..1804;
    pub const OFCS: Range<usize> = 1804..1806;
    pub const DCTYPE: Range<usize> = 1806..1807;
    pub const PSD: usize = 2048;
    pub const VS: Range<usize> = 3072..4096;
}

/// Byte offsets of a few Identify Controller fields (for tests and tracing).
pub mod ctrl_offset {
    pub const SUBNQN: usize = 768;
    pub const IOCCSZ: usize = 1792;
    pub const PSD: usize = 2048;
    pub const VS: usize = 3072;
}

/// Number of power state descriptors.
pub const NUM_POWER_STATES: usize = 32;
/// The length of one power state descriptor.
pub const POWER_STATE_LEN: usize = 32;

view!(
    /// A view of the Identify Controller data structure (CNS 01h).
    IdentifyController,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyController<T> {
    getters! {
        /// PCI vendor id.
        vid: u16 = ctrl::VID,
        /// PCI subsystem vendor id.
        ssvid: u16 = ctrl::SSVID,
        /// Recommended arbitration burst.
        rab: u8 = ctrl::RAB,
        /// Controller multi-path I/O and namespace sharing capabilities ([`cmic`]).
        cmic: u8 = ctrl::CMIC,
        /// Maximum data transfer size, log2 of units of CAP.MPSMIN (0 = no limit).
        mdts: u8 = ctrl::MDTS,
        cntlid: u16 = ctrl::CNTLID,
        /// Version (same encoding as the VS property).
        ver: u32 = ctrl::VER,
        rtd3r: u32 = ctrl::RTD3R,
        rtd3e: u32 = ctrl::RTD3E,
        /// Optional asynchronous events supported ([`oaes`]).
        oaes: u32 = ctrl::OAES,
        /// Controller attributes ([`ctratt`]).
        ctratt: u32 = ctrl::CTRATT,
        /// Read recovery levels supported.
        rrls: u16 = ctrl::RRLS,
        /// Controller type ([`cntrltype`]).
        cntrltype: u8 = ctrl::CNTRLTYPE,
        /// Command retry delay time 1, in 100 ms units.
        crdt1: u16 = ctrl::CRDT1,
        crdt2: u16 = ctrl::CRDT2,
        crdt3: u16 = ctrl::CRDT3,
        /// NVM subsystem report (NVMe-MI).
        nvmsr: u8 = ctrl::NVMSR,
        /// VPD write cycle information (NVMe-MI).
        vwci: u8 = ctrl::VWCI,
        /// Management endpoint capabilities (NVMe-MI).
        mec: u8 = ctrl::MEC,
        /// Optional admin command support ([`oacs`]).
        oacs: u16 = ctrl::OACS,
        /// Abort command limit (0-based).
        acl: u8 = ctrl::ACL,
        /// Asynchronous event request limit (0-based).
        aerl: u8 = ctrl::AERL,
        /// Firmware updates ([`frmw`]).
        frmw: u8 = ctrl::FRMW,
        /// Log page attributes ([`lpa`]).
        lpa: u8 = ctrl::LPA,
        /// Error log page entries (0-based).
        elpe: u8 = ctrl::ELPE,
        /// Number of power states supported (0-based).
        npss: u8 = ctrl::NPSS,
        avscc: u8 = ctrl::AVSCC,
        apsta: u8 = ctrl::APSTA,
        /// Warning composite temperature threshold, kelvins.
        wctemp: u16 = ctrl::WCTEMP,
        /// Critical composite temperature threshold, kelvins.
        cctemp: u16 = ctrl::CCTEMP,
        mtfa: u16 = ctrl::MTFA,
        hmpre: u32 = ctrl::HMPRE,
        hmmin: u32 = ctrl::HMMIN,
        /// Total NVM capacity, bytes.
        tnvmcap: u128 = ctrl::TNVMCAP,
        /// Unallocated NVM capacity, bytes.
        unvmcap: u128 = ctrl::UNVMCAP,
        rpmbs: u32 = ctrl::RPMBS,
        edstt: u16 = ctrl::EDSTT,
        dsto: u8 = ctrl::DSTO,
        fwug: u8 = ctrl::FWUG,
        /// Keep alive support: granularity in 100 ms units (0 = not supported).
        kas: u16 = ctrl::KAS,
        hctma: u16 = ctrl::HCTMA,
        mntmt: u16 = ctrl::MNTMT,
        mxtmt: u16 = ctrl::MXTMT,
        sanicap: u32 = ctrl::SANICAP,
        hmminds: u32 = ctrl::HMMINDS,
        hmmaxd: u16 = ctrl::HMMAXD,
        nvmsetidmax: u16 = ctrl::NVMSETIDMAX,
        endgidmax: u16 = ctrl::ENDGIDMAX,
        /// ANA transition time, seconds.
        anatt: u8 = ctrl::ANATT,
        /// ANA capabilities ([`anacap`]).
        anacap: u8 = ctrl::ANACAP,
        anagrpmax: u32 = ctrl::ANAGRPMAX,
        nanagrpid: u32 = ctrl::NANAGRPID,
        /// Persistent event log size, 64 KiB units.
        pels: u32 = ctrl::PELS,
        domainid: u16 = ctrl::DOMAINID,
        megcap: u128 = ctrl::MEGCAP,
        /// SQ entry size: bits 3:0 required, 7:4 maximum, log2 bytes ([`qes`]).
        sqes: u8 = ctrl::SQES,
        /// CQ entry size: bits 3:0 required, 7:4 maximum, log2 bytes ([`qes`]).
        cqes: u8 = ctrl::CQES,
        maxcmd: u16 = ctrl::MAXCMD,
        /// Number of namespaces (highest valid NSID).
        nn: u32 = ctrl::NN,
        /// Optional NVM command support ([`oncs`]).
        oncs: u16 = ctrl::ONCS,
        /// Fused operation support ([`fuses`]).
        fuses: u16 = ctrl::FUSES,
        /// Format NVM attributes.
        fna: u8 = ctrl::FNA,
        /// Volatile write cache ([`vwc`]).
        vwc: u8 = ctrl::VWC,
        awun: u16 = ctrl::AWUN,
        awupf: u16 = ctrl::AWUPF,
        /// I/O command set vendor specific command configuration (Linux `nvscc`).
        icsvscc: u8 = ctrl::ICSVSCC,
        nwpc: u8 = ctrl::NWPC,
        acwu: u16 = ctrl::ACWU,
        /// Optional copy formats supported.
        ocfs: u16 = ctrl::OCFS,
        /// SGL support ([`sgls`]).
        sgls: u32 = ctrl::SGLS,
        mnan: u32 = ctrl::MNAN,
        maxdna: u128 = ctrl::MAXDNA,
        maxcna: u32 = ctrl::MAXCNA,
        /// Optimal aggregated queue depth.
        oaqd: u32 = ctrl::OAQD,
        /// I/O queue command capsule supported size, 16-byte units (fabrics).
        ioccsz: u32 = ctrl::IOCCSZ,
        /// I/O queue response capsule supported size, 16-byte units (fabrics).
        iorcsz: u32 = ctrl::IORCSZ,
        /// In capsule data offset, 16-byte units (fabrics).
        icdoff: u16 = ctrl::ICDOFF,
        /// Fabrics controller attributes ([`fcatt`]; Linux `ctrattr`).
        fcatt: u8 = ctrl::FCATT,
        /// Maximum SGL data block descriptors (0 = no limit).
        msdbd: u8 = ctrl::MSDBD,
        /// Optional fabric commands supported.
        ofcs: u16 = ctrl::OFCS,
        /// Discovery controller type ([`dctype`]).
        dctype: u8 = ctrl::DCTYPE,
    }

    /// Serial number field (20 bytes, ASCII, space-padded).
    pub fn sn(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ctrl::SN)
    }
    /// Model number field (40 bytes, ASCII, space-padded).
    pub fn mn(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ctrl::MN)
    }
    /// Firmware revision field (8 bytes, ASCII, space-padded).
    pub fn fr(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ctrl::FR)
    }
    /// IEEE OUI identifier (3 bytes, least significant byte first).
    pub fn ieee(&self) -> [u8; 3] {
        get_bytes_n(self.buffer.as_ref(), ctrl::IEEE)
    }
    /// FRU globally unique identifier.
    pub fn fguid(&self) -> [u8; 16] {
        get_bytes_n(self.buffer.as_ref(), ctrl::FGUID)
    }
    /// NVM subsystem NQN field (256 bytes, NUL-padded UTF-8).
    pub fn subnqn(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ctrl::SUBNQN)
    }
    /// The serial number without padding.
    pub fn sn_string(&self) -> String {
        crate::wire::field_to_string(self.sn())
    }
    /// The model number without padding.
    pub fn mn_string(&self) -> String {
        crate::wire::field_to_string(self.mn())
    }
    /// The firmware revision without padding.
    pub fn fr_string(&self) -> String {
        crate::wire::field_to_string(self.fr())
    }
    /// The subsystem NQN up to its NUL (`None` if not UTF-8).
    pub fn subnqn_str(&self) -> Option<&str> {
        crate::wire::fabrics::nqn_str(self.subnqn())
    }
    /// Power state descriptor `i` (0..32; an empty view otherwise).
    pub fn psd(&self, i: usize) -> PowerStateDesc<&[u8]> {
        PowerStateDesc::new_unchecked(get_bytes(self.buffer.as_ref(), psd_range(i)))
    }
    /// The vendor specific area (bytes 3072..4096).
    pub fn vs(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ctrl::VS)
    }
}

fn psd_range(i: usize) -> core::ops::Range<usize> {
    if i < NUM_POWER_STATES {
        let o = ctrl::PSD + i * POWER_STATE_LEN;
        o..o + POWER_STATE_LEN
    } else {
        0..0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyController<T> {
    setters! {
        set_vid: u16 = ctrl::VID,
        set_ssvid: u16 = ctrl::SSVID,
        set_rab: u8 = ctrl::RAB,
        set_cmic: u8 = ctrl::CMIC,
        set_mdts: u8 = ctrl::MDTS,
        set_cntlid: u16 = ctrl::CNTLID,
        set_ver: u32 = ctrl::VER,
        set_rtd3r: u32 = ctrl::RTD3R,
        set_rtd3e: u32 = ctrl::RTD3E,
        set_oaes: u32 = ctrl::OAES,
        set_ctratt: u32 = ctrl::CTRATT,
        set_rrls: u16 = ctrl::RRLS,
        set_cntrltype: u8 = ctrl::CNTRLTYPE,
        set_crdt1: u16 = ctrl::CRDT1,
        set_crdt2: u16 = ctrl::CRDT2,
        set_crdt3: u16 = ctrl::CRDT3,
        set_nvmsr: u8 = ctrl::NVMSR,
        set_vwci: u8 = ctrl::VWCI,
        set_mec: u8 = ctrl::MEC,
        set_oacs: u16 = ctrl::OACS,
        set_acl: u8 = ctrl::ACL,
        set_aerl: u8 = ctrl::AERL,
        set_frmw: u8 = ctrl::FRMW,
        set_lpa: u8 = ctrl::LPA,
        set_elpe: u8 = ctrl::ELPE,
        set_npss: u8 = ctrl::NPSS,
        set_avscc: u8 = ctrl::AVSCC,
        set_apsta: u8 = ctrl::APSTA,
        set_wctemp: u16 = ctrl::WCTEMP,
        set_cctemp: u16 = ctrl::CCTEMP,
        set_mtfa: u16 = ctrl::MTFA,
        set_hmpre: u32 = ctrl::HMPRE,
        set_hmmin: u32 = ctrl::HMMIN,
        set_tnvmcap: u128 = ctrl::TNVMCAP,
        set_unvmcap: u128 = ctrl::UNVMCAP,
        set_rpmbs: u32 = ctrl::RPMBS,
        set_edstt: u16 = ctrl::EDSTT,
        set_dsto: u8 = ctrl::DSTO,
        set_fwug: u8 = ctrl::FWUG,
        set_kas: u16 = ctrl::KAS,
        set_hctma: u16 = ctrl::HCTMA,
        set_mntmt: u16 = ctrl::MNTMT,
        set_mxtmt: u16 = ctrl::MXTMT,
        set_sanicap: u32 = ctrl::SANICAP,
        set_hmminds: u32 = ctrl::HMMINDS,
        set_hmmaxd: u16 = ctrl::HMMAXD,
        set_nvmsetidmax: u16 = ctrl::NVMSETIDMAX,
        set_endgidmax: u16 = ctrl::ENDGIDMAX,
        set_anatt: u8 = ctrl::ANATT,
        set_anacap: u8 = ctrl::ANACAP,
        set_anagrpmax: u32 = ctrl::ANAGRPMAX,
        set_nanagrpid: u32 = ctrl::NANAGRPID,
        set_pels: u32 = ctrl::PELS,
        set_domainid: u16 = ctrl::DOMAINID,
        set_megcap: u128 = ctrl::MEGCAP,
        set_sqes: u8 = ctrl::SQES,
        set_cqes: u8 = ctrl::CQES,
        set_maxcmd: u16 = ctrl::MAXCMD,
        set_nn: u32 = ctrl::NN,
        set_oncs: u16 = ctrl::ONCS,
        set_fuses: u16 = ctrl::FUSES,
        set_fna: u8 = ctrl::FNA,
        set_vwc: u8 = ctrl::VWC,
        set_awun: u16 = ctrl::AWUN,
        set_awupf: u16 = ctrl::AWUPF,
        set_icsvscc: u8 = ctrl::ICSVSCC,
        set_nwpc: u8 = ctrl::NWPC,
        set_acwu: u16 = ctrl::ACWU,
        set_ocfs: u16 = ctrl::OCFS,
        set_sgls: u32 = ctrl::SGLS,
        set_mnan: u32 = ctrl::MNAN,
        set_maxdna: u128 = ctrl::MAXDNA,
        set_maxcna: u32 = ctrl::MAXCNA,
        set_oaqd: u32 = ctrl::OAQD,
        set_ioccsz: u32 = ctrl::IOCCSZ,
        set_iorcsz: u32 = ctrl::IORCSZ,
        set_icdoff: u16 = ctrl::ICDOFF,
        set_fcatt: u8 = ctrl::FCATT,
        set_msdbd: u8 = ctrl::MSDBD,
        set_ofcs: u16 = ctrl::OFCS,
        set_dctype: u8 = ctrl::DCTYPE,
    }

    /// Sets the serial number: ASCII, space-padded, truncated to 20 bytes.
    pub fn set_sn(&mut self, s: &str) {
        set_ascii_padded(self.buffer.as_mut(), ctrl::SN, s)
    }
    /// Sets the model number: ASCII, space-padded, truncated to 40 bytes.
    pub fn set_mn(&mut self, s: &str) {
        set_ascii_padded(self.buffer.as_mut(), ctrl::MN, s)
    }
    /// Sets the firmware revision: ASCII, space-padded, truncated to 8 bytes.
    pub fn set_fr(&mut self, s: &str) {
        set_ascii_padded(self.buffer.as_mut(), ctrl::FR, s)
    }
    pub fn set_ieee(&mut self, v: [u8; 3]) {
        set_padded(self.buffer.as_mut(), ctrl::IEEE, &v, 0)
    }
    pub fn set_fguid(&mut self, v: [u8; 16]) {
        set_padded(self.buffer.as_mut(), ctrl::FGUID, &v, 0)
    }
    /// Sets the subsystem NQN, NUL-padded (truncated to 255 bytes).
    pub fn set_subnqn(&mut self, s: &str) {
        set_nul_padded(self.buffer.as_mut(), ctrl::SUBNQN, s)
    }
    /// Power state descriptor `i` (0..32), mutably (empty view otherwise).
    pub fn psd_mut(&mut self, i: usize) -> PowerStateDesc<&mut [u8]> {
        PowerStateDesc::new_unchecked(get_bytes_mut(self.buffer.as_mut(), psd_range(i)))
    }
}

/// Queue entry size byte (SQES / CQES): required (minimum) log2 size in bits 3:0,
/// maximum in bits 7:4.
pub const fn qes(min_log2: u8, max_log2: u8) -> u8 {
    (min_log2 & 0xF) | ((max_log2 & 0xF) << 4)
}

/// Queue entry size encodings.
pub mod entry_size {
    /// 64-byte SQEs only (SQES = 66h).
    pub const SQES_64: u8 = super::qes(6, 6);
    /// 16-byte CQEs only (CQES = 44h).
    pub const CQES_16: u8 = super::qes(4, 4);
}

/// CMIC bits (Linux `NVME_CTRL_CMIC_*`).
pub mod cmic {
    pub const MULTI_PORT: u8 = 1 << 0;
    pub const MULTI_CTRL: u8 = 1 << 1;
    pub const SRIOV: u8 = 1 << 2;
    pub const ANA: u8 = 1 << 3;
}

/// Optional asynchronous events supported (OAES).
pub mod oaes {
    pub const NS_ATTR: u32 = 1 << 8;
    pub const FW_ACTIVATION: u32 = 1 << 9;
    pub const ANA_CHANGE: u32 = 1 << 11;
    pub const PLEA: u32 = 1 << 12;
    pub const LBA_STATUS: u32 = 1 << 13;
    pub const EGEA: u32 = 1 << 14;
    pub const NORMAL_NVM_SUBSYSTEM_SHUTDOWN: u32 = 1 << 15;
    pub const ZONE_DESCRIPTOR_CHANGED: u32 = 1 << 27;
    pub const DISCOVERY_LOG_CHANGE: u32 = 1 << 31;
}

/// Controller attributes (CTRATT; Linux `NVME_CTRL_CTRATT_*` / `NVME_CTRL_ATTR_*`).
pub mod ctratt {
    pub const HOST_ID_128: u32 = 1 << 0;
    pub const NON_OP_PSP: u32 = 1 << 1;
    pub const NVM_SETS: u32 = 1 << 2;
    pub const READ_RECOVERY_LEVELS: u32 = 1 << 3;
    pub const ENDURANCE_GROUPS: u32 = 1 << 4;
    pub const PREDICTABLE_LATENCY: u32 = 1 << 5;
    /// Traffic based keep alive support.
    pub const TBKAS: u32 = 1 << 6;
    pub const NS_GRANULARITY: u32 = 1 << 7;
    pub const SQ_ASSOCIATIONS: u32 = 1 << 8;
    pub const UUID_LIST: u32 = 1 << 9;
    /// Multi-domain subsystem.
    pub const MDS: u32 = 1 << 10;
    pub const FIXED_CAPACITY_MGMT: u32 = 1 << 11;
    pub const VARIABLE_CAPACITY_MGMT: u32 = 1 << 12;
    pub const DELETE_ENDURANCE_GROUP: u32 = 1 << 13;
    pub const DELETE_NVM_SET: u32 = 1 << 14;
    /// Extended LBA formats supported.
    pub const ELBAS: u32 = 1 << 15;
    /// Reservations and host identifier interaction.
    pub const RHII: u32 = 1 << 18;
}

/// Controller types (CNTRLTYPE; Linux `enum nvme_ctrl_type`).
pub mod cntrltype {
    pub const NOT_REPORTED: u8 = 0;
    pub const IO: u8 = 1;
    pub const DISCOVERY: u8 = 2;
    pub const ADMIN: u8 = 3;
}

/// Optional admin command support (OACS; Linux `NVME_CTRL_OACS_*`).
pub mod oacs {
    pub const SECURITY: u16 = 1 << 0;
    pub const FORMAT: u16 = 1 << 1;
    pub const FW: u16 = 1 << 2;
    pub const NS_MGMT: u16 = 1 << 3;
    pub const SELF_TEST: u16 = 1 << 4;
    pub const DIRECTIVES: u16 = 1 << 5;
    pub const NVME_MI: u16 = 1 << 6;
    pub const VIRT_MGMT: u16 = 1 << 7;
    pub const DBBUF: u16 = 1 << 8;
    pub const GET_LBA_STATUS: u16 = 1 << 9;
    pub const CMD_FEATURE_LOCKDOWN: u16 = 1 << 10;
}

/// Firmware updates (FRMW).
pub mod frmw {
    /// Slot 1 is read only.
    pub const SLOT1_RO: u8 = 1 << 0;
    /// Number of firmware slots, bits 3:1.
    pub const NUM_SLOTS_SHIFT: u8 = 1;
    pub const NUM_SLOTS_MASK: u8 = 0x7 << 1;
    /// Activation without reset supported.
    pub const ACTIVATE_NO_RESET: u8 = 1 << 4;
}

/// Log page attributes (LPA; Linux `NVME_CTRL_LPA_*`).
pub mod lpa {
    pub const SMART_PER_NS: u8 = 1 << 0;
    /// Commands Supported and Effects log page supported.
    pub const CMD_EFFECTS: u8 = 1 << 1;
    /// Extended data for Get Log Page (NUMDU, LPO) supported.
    pub const EXTENDED: u8 = 1 << 2;
    pub const TELEMETRY: u8 = 1 << 3;
    pub const PERSISTENT_EVENT: u8 = 1 << 4;
    /// Miscellaneous log page support (NVMe 2.0; Linux
    /// `NVME_CTRL_LPA_LI0_LI5_LI12_LI13`): the Supported Log Pages, Feature Identifiers
    /// Supported and Effects and NVMe-MI Commands Supported and Effects log pages, and
    /// a command scope in the Commands Supported and Effects log page.
    pub const MISC: u8 = 1 << 5;
}

/// ANA capabilities (ANACAP).
pub mod anacap {
    pub const OPTIMIZED: u8 = 1 << 0;
    pub const NON_OPTIMIZED: u8 = 1 << 1;
    pub const INACCESSIBLE: u8 = 1 << 2;
    pub const PERSISTENT_LOSS: u8 = 1 << 3;
    pub const CHANGE: u8 = 1 << 4;
    pub const GRPID_NOT_CHANGED: u8 = 1 << 6;
    pub const NON_ZERO_GRPID: u8 = 1 << 7;
}

/// Optional NVM command support (ONCS; Linux `NVME_CTRL_ONCS_*`).
pub mod oncs {
    pub const COMPARE: u16 = 1 << 0;
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    pub const DSM: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
    pub const SAVE_SELECT: u16 = 1 << 4;
    pub const RESERVATIONS: u16 = 1 << 5;
    pub const TIMESTAMP: u16 = 1 << 6;
    pub const VERIFY: u16 = 1 << 7;
    pub const COPY: u16 = 1 << 8;
}

/// Optional Copy Formats Supported (OCFS).
pub mod ocfs {
    /// Source Range Entries Copy Descriptor Format 0h.
    pub const FORMAT_0: u16 = 1 << 0;
}

/// Fused operation support (FUSES).
pub mod fuses {
    pub const COMPARE_AND_WRITE: u16 = 1 << 0;
}

/// Volatile write cache (VWC; Linux `NVME_CTRL_VWC_PRESENT`).
pub mod vwc {
    pub const PRESENT: u8 = 1 << 0;
    /// Flush with NSID FFFFFFFFh behaviour, bits 2:1.
    pub const FLUSH_BROADCAST_MASK: u8 = 0x3 << 1;
    /// 10b: flush with broadcast NSID not supported.
    pub const FLUSH_BROADCAST_NOT_SUPPORTED: u8 = 0x2 << 1;
    /// 11b: flush with broadcast NSID supported.
    pub const FLUSH_BROADCAST_SUPPORTED: u8 = 0x3 << 1;
}

/// SGL support (SGLS; Linux `NVME_CTRL_SGLS_*`).
pub mod sgls {
    /// Bits 1:0: SGL support.
    pub const SUPPORT_MASK: u32 = 0x3;
    /// 01b: SGLs supported, no alignment or granularity requirement
    /// (Linux `NVME_CTRL_SGLS_BYTE_ALIGNED`).
    pub const SUPPORTED: u32 = 1;
    /// 10b: SGLs supported with dword alignment and granularity
    /// (Linux `NVME_CTRL_SGLS_DWORD_ALIGNED`).
    pub const SUPPORTED_DWORD_ALIGNED: u32 = 2;
    /// Keyed SGL data block descriptor supported (Linux `NVME_CTRL_SGLS_KSDBDS`).
    pub const KEYED: u32 = 1 << 2;
    /// Bits 15:8: SGL descriptor threshold.
    pub const SDT_SHIFT: u32 = 8;
    pub const SDT_MASK: u32 = 0xFF << 8;
    /// SGL bit bucket descriptor supported.
    pub const BITBUCKET: u32 = 1 << 16;
    /// Byte aligned contiguous physical buffer of metadata supported.
    pub const METADATA_BYTE_ALIGNED: u32 = 1 << 17;
    /// SGL length larger than the data to transfer supported.
    pub const OVERSIZED: u32 = 1 << 18;
    /// MPTR containing an SGL descriptor supported (Linux `NVME_CTRL_SGLS_MSDS`).
    pub const MPTR_SGL: u32 = 1 << 19;
    /// Address field as an offset supported (Linux `NVME_CTRL_SGLS_SAOS`).
    pub const SGL_OFFSET: u32 = 1 << 20;
    /// Transport SGL data block descriptor supported.
    pub const TRANSPORT: u32 = 1 << 21;
}

/// Fabrics controller attributes (FCATT).
pub mod fcatt {
    /// The NVM subsystem uses the static controller model (clear: dynamic).
    pub const STATIC_CONTROLLER_MODEL: u8 = 1 << 0;
}

/// Discovery controller type (DCTYPE; Linux `enum nvme_dctype`).
pub mod dctype {
    pub const NOT_REPORTED: u8 = 0;
    /// Direct discovery controller.
    pub const DDC: u8 = 1;
    /// Central discovery controller.
    pub const CDC: u8 = 2;
}
