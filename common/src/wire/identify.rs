//! Identify data structures (4096 bytes each): Identify Controller (Linux
//! `struct nvme_id_ctrl`), Identify Namespace (`struct nvme_id_ns`), the NVM command
//! set specific controller / namespace structures (`struct nvme_id_ctrl_nvm`,
//! `struct nvme_id_ns_nvm`), the I/O command set independent namespace structure
//! (`struct nvme_id_ns_cs_indep`), namespace ID lists and namespace identification
//! descriptors.

use super::{get_bytes, get_bytes_n, get_u32, getters, set_padded, set_u32, setters, view};

/// The length of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

/// Copies `s` as ASCII into a space-padded field: bytes outside printable ASCII
/// become `?`, the string is truncated to the field.
fn set_ascii_padded(buf: &mut [u8], r: core::ops::Range<usize>, s: &str) {
    let ascii: Vec<u8> = s
        .bytes()
        .map(|b| if (0x20..=0x7E).contains(&b) { b } else { b'?' })
        .take(r.len())
        .collect();
    set_padded(buf, r, &ascii, b' ')
}

/// Copies `s` into a NUL-padded field, keeping at least one NUL.
fn set_nul_padded(buf: &mut [u8], r: core::ops::Range<usize>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(r.len().saturating_sub(1));
    set_padded(buf, r, &b[..n], 0)
}

// ---------------------------------------------------------------------------
// Identify Controller
// ---------------------------------------------------------------------------

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
        super::field_to_string(self.sn())
    }
    /// The model number without padding.
    pub fn mn_string(&self) -> String {
        super::field_to_string(self.mn())
    }
    /// The firmware revision without padding.
    pub fn fr_string(&self) -> String {
        super::field_to_string(self.fr())
    }
    /// The subsystem NQN up to its NUL (`None` if not UTF-8).
    pub fn subnqn_str(&self) -> Option<&str> {
        super::fabrics::nqn_str(self.subnqn())
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
        PowerStateDesc::new_unchecked(super::get_bytes_mut(self.buffer.as_mut(), psd_range(i)))
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

// ---- Power state descriptor ----

mod psd_field {
    use core::ops::Range;
    pub const MAX_POWER: Range<usize> = 0..2;
    pub const FLAGS: Range<usize> = 3..4;
    pub const ENTRY_LAT: Range<usize> = 4..8;
    pub const EXIT_LAT: Range<usize> = 8..12;
    pub const READ_TPUT: Range<usize> = 12..13;
    pub const READ_LAT: Range<usize> = 13..14;
    pub const WRITE_TPUT: Range<usize> = 14..15;
    pub const WRITE_LAT: Range<usize> = 15..16;
    pub const IDLE_POWER: Range<usize> = 16..18;
    pub const IDLE_SCALE: Range<usize> = 18..19;
    pub const ACTIVE_POWER: Range<usize> = 20..22;
    pub const ACTIVE_WORK_SCALE: Range<usize> = 22..23;
}

/// Power state descriptor flags (Linux `NVME_PS_FLAGS_*`).
pub mod ps_flags {
    pub const MAX_POWER_SCALE: u8 = 1 << 0;
    pub const NON_OP_STATE: u8 = 1 << 1;
}

view!(
    /// A view of one 32-byte power state descriptor (Linux `struct nvme_id_power_state`).
    PowerStateDesc,
    POWER_STATE_LEN
);

impl<T: AsRef<[u8]>> PowerStateDesc<T> {
    getters! {
        /// Maximum power, centiwatts (or 0.0001 W with MAX_POWER_SCALE).
        max_power: u16 = psd_field::MAX_POWER,
        flags: u8 = psd_field::FLAGS,
        /// Entry latency, microseconds.
        entry_lat: u32 = psd_field::ENTRY_LAT,
        /// Exit latency, microseconds.
        exit_lat: u32 = psd_field::EXIT_LAT,
        read_tput: u8 = psd_field::READ_TPUT,
        read_lat: u8 = psd_field::READ_LAT,
        write_tput: u8 = psd_field::WRITE_TPUT,
        write_lat: u8 = psd_field::WRITE_LAT,
        idle_power: u16 = psd_field::IDLE_POWER,
        idle_scale: u8 = psd_field::IDLE_SCALE,
        active_power: u16 = psd_field::ACTIVE_POWER,
        active_work_scale: u8 = psd_field::ACTIVE_WORK_SCALE,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PowerStateDesc<T> {
    setters! {
        set_max_power: u16 = psd_field::MAX_POWER,
        set_flags: u8 = psd_field::FLAGS,
        set_entry_lat: u32 = psd_field::ENTRY_LAT,
        set_exit_lat: u32 = psd_field::EXIT_LAT,
        set_read_tput: u8 = psd_field::READ_TPUT,
        set_read_lat: u8 = psd_field::READ_LAT,
        set_write_tput: u8 = psd_field::WRITE_TPUT,
        set_write_lat: u8 = psd_field::WRITE_LAT,
        set_idle_power: u16 = psd_field::IDLE_POWER,
        set_idle_scale: u8 = psd_field::IDLE_SCALE,
        set_active_power: u16 = psd_field::ACTIVE_POWER,
        set_active_work_scale: u8 = psd_field::ACTIVE_WORK_SCALE,
    }
}

// ---------------------------------------------------------------------------
// Identify Namespace
// ---------------------------------------------------------------------------

mod ns {
    use core::ops::Range;
    pub const NSZE: Range<usize> = 0..8;
    pub const NCAP: Range<usize> = 8..16;
    pub const NUSE: Range<usize> = 16..24;
    pub const NSFEAT: Range<usize> = 24..25;
    pub const NLBAF: Range<usize> = 25..26;
    pub const FLBAS: Range<usize> = 26..27;
    pub const MC: Range<usize> = 27..28;
    pub const DPC: Range<usize> = 28..29;
    pub const DPS: Range<usize> = 29..30;
    pub const NMIC: Range<usize> = 30..31;
    pub const RESCAP: Range<usize> = 31..32;
    pub const FPI: Range<usize> = 32..33;
    pub const DLFEAT: Range<usize> = 33..34;
    pub const NAWUN: Range<usize> = 34..36;
    pub const NAWUPF: Range<usize> = 36..38;
    pub const NACWU: Range<usize> = 38..40;
    pub const NABSN: Range<usize> = 40..42;
    pub const NABO: Range<usize> = 42..44;
    pub const NABSPF: Range<usize> = 44..46;
    pub const NOIOB: Range<usize> = 46..48;
    pub const NVMCAP: Range<usize> = 48..64;
    pub const NPWG: Range<usize> = 64..66;
    pub const NPWA: Range<usize> = 66..68;
    pub const NPDG: Range<usize> = 68..70;
    pub const NPDA: Range<usize> = 70..72;
    pub const NOWS: Range<usize> = 72..74;
    pub const MSSRL: Range<usize> = 74..76;
    pub const MCL: Range<usize> = 76..80;
    pub const MSRC: Range<usize> = 80..81;
    pub const NULBAF: Range<usize> = 81..82;
    pub const ANAGRPID: Range<usize> = 92..96;
    pub const NSATTR: Range<usize> = 99..100;
    pub const NVMSETID: Range<usize> = 100..102;
    pub const ENDGID: Range<usize> = 102..104;
    pub const NGUID: Range<usize> = 104..120;
    pub const EUI64: Range<usize> = 120..128;
    pub const LBAF: usize = 128;
    pub const VS: Range<usize> = 384..4096;
}

/// Number of LBA format slots in Identify Namespace.
pub const NUM_LBAF: usize = 64;
/// The length of one LBA format descriptor.
pub const LBAF_LEN: usize = 4;

/// One LBA format (Linux `struct nvme_lbaf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LbaFormat {
    /// Metadata size per block, bytes.
    pub ms: u16,
    /// LBA data size, log2 bytes (9 = 512, 12 = 4096; 0 = format not available).
    pub ds: u8,
    /// Relative performance, bits 1:0 ([`rp`]).
    pub rp: u8,
}

impl LbaFormat {
    /// A format with `1 << ds` byte blocks and no metadata.
    pub const fn new(ds: u8) -> Self {
        LbaFormat { ms: 0, ds, rp: 0 }
    }
    pub const fn to_bytes(self) -> [u8; LBAF_LEN] {
        let ms = self.ms.to_le_bytes();
        [ms[0], ms[1], self.ds, self.rp & 0x3]
    }
    pub const fn from_bytes(b: [u8; LBAF_LEN]) -> Self {
        LbaFormat {
            ms: u16::from_le_bytes([b[0], b[1]]),
            ds: b[2],
            rp: b[3] & 0x3,
        }
    }
    /// The block size in bytes, if `ds` is a plausible value (9..=31).
    pub const fn block_size(self) -> Option<u32> {
        if self.ds >= 9 && self.ds < 32 {
            Some(1u32 << self.ds)
        } else {
            None
        }
    }
}

/// Relative performance values (Linux `NVME_LBAF_RP_*`).
pub mod rp {
    pub const BEST: u8 = 0;
    pub const BETTER: u8 = 1;
    pub const GOOD: u8 = 2;
    pub const DEGRADED: u8 = 3;
}

/// Namespace features (NSFEAT; Linux `NVME_NS_FEAT_*`).
pub mod nsfeat {
    /// Thin provisioning.
    pub const THIN: u8 = 1 << 0;
    /// NAWUN, NAWUPF, NACWU are defined (Linux `NVME_NS_FEAT_ATOMICS`).
    pub const ATOMICS: u8 = 1 << 1;
    /// Deallocated or unwritten logical block error.
    pub const DAE: u8 = 1 << 2;
    /// NGUID / EUI64 never reused.
    pub const UIDREUSE: u8 = 1 << 3;
    /// NPWG, NPWA, NPDG, NPDA, NOWS are defined (Linux `NVME_NS_FEAT_IO_OPT`).
    pub const OPTPERF: u8 = 1 << 4;
}

/// Formatted LBA size (FLBAS): index bits 3:0 (low) and 6:5 (high), bit 4 extended
/// metadata (Linux `NVME_NS_FLBAS_*`).
pub mod flbas {
    pub const LBA_MASK: u8 = 0x0F;
    pub const META_EXT: u8 = 1 << 4;
    pub const LBA_UMASK: u8 = 0x60;
    pub const LBA_USHIFT: u8 = 1;
}

/// The LBA format index FLBAS selects (Linux `nvme_lbaf_index`).
pub const fn flbas_index(v: u8) -> u8 {
    (v & flbas::LBA_MASK) | ((v & flbas::LBA_UMASK) >> flbas::LBA_USHIFT)
}

/// FLBAS for format `index` (0..64) and extended metadata flag.
pub const fn flbas_encode(index: u8, meta_ext: bool) -> u8 {
    let low = index & flbas::LBA_MASK;
    let high = (index << flbas::LBA_USHIFT) & flbas::LBA_UMASK;
    low | high | if meta_ext { flbas::META_EXT } else { 0 }
}

/// Metadata capabilities (MC; Linux `NVME_MC_*`).
pub mod mc {
    pub const EXTENDED_LBA: u8 = 1 << 0;
    pub const METADATA_PTR: u8 = 1 << 1;
}

/// End-to-end data protection capabilities (DPC; Linux `NVME_NS_DPC_*`).
pub mod dpc {
    pub const PI_TYPE1: u8 = 1 << 0;
    pub const PI_TYPE2: u8 = 1 << 1;
    pub const PI_TYPE3: u8 = 1 << 2;
    pub const PI_FIRST: u8 = 1 << 3;
    pub const PI_LAST: u8 = 1 << 4;
}

/// End-to-end data protection type settings (DPS; Linux `NVME_NS_DPS_*`).
pub mod dps {
    pub const PI_MASK: u8 = 0x7;
    pub const PI_TYPE1: u8 = 1;
    pub const PI_TYPE2: u8 = 2;
    pub const PI_TYPE3: u8 = 3;
    pub const PI_FIRST: u8 = 1 << 3;
}

/// Namespace multi-path I/O and sharing capabilities (NMIC).
pub mod nmic {
    pub const SHARED: u8 = 1 << 0;
}

/// Reservation capabilities (RESCAP; Linux `enum nvme_pr_capabilities`).
pub mod rescap {
    pub const PTPL: u8 = 1 << 0;
    pub const WRITE_EXCLUSIVE: u8 = 1 << 1;
    pub const EXCLUSIVE_ACCESS: u8 = 1 << 2;
    pub const WRITE_EXCLUSIVE_REG_ONLY: u8 = 1 << 3;
    pub const EXCLUSIVE_ACCESS_REG_ONLY: u8 = 1 << 4;
    pub const WRITE_EXCLUSIVE_ALL_REGS: u8 = 1 << 5;
    pub const EXCLUSIVE_ACCESS_ALL_REGS: u8 = 1 << 6;
    pub const IEKEY: u8 = 1 << 7;
}

/// Deallocate logical block features (DLFEAT).
pub mod dlfeat {
    /// Bits 2:0: what a read of a deallocated block returns.
    pub const READ_BEHAVIOR_MASK: u8 = 0x7;
    pub const READ_NOT_REPORTED: u8 = 0;
    /// 001b: deallocated blocks read as zeroes.
    pub const READ_ZEROES: u8 = 1;
    /// 010b: deallocated blocks read as all ones.
    pub const READ_ONES: u8 = 2;
    /// Write Zeroes supports the Deallocate bit.
    pub const WRITE_ZEROES_DEAC: u8 = 1 << 3;
    /// Guard field of deallocated blocks is the CRC of the data.
    pub const GUARD_CRC: u8 = 1 << 4;
}

/// Namespace attributes (NSATTR; Linux `NVME_NS_ATTR_RO`).
pub mod nsattr {
    pub const WRITE_PROTECTED: u8 = 1 << 0;
}

view!(
    /// A view of the Identify Namespace data structure (CNS 00h).
    IdentifyNamespace,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNamespace<T> {
    getters! {
        /// Namespace size, blocks.
        nsze: u64 = ns::NSZE,
        /// Namespace capacity, blocks.
        ncap: u64 = ns::NCAP,
        /// Namespace utilization, blocks.
        nuse: u64 = ns::NUSE,
        nsfeat: u8 = ns::NSFEAT,
        /// Number of LBA formats (0-based).
        nlbaf: u8 = ns::NLBAF,
        flbas: u8 = ns::FLBAS,
        mc: u8 = ns::MC,
        dpc: u8 = ns::DPC,
        dps: u8 = ns::DPS,
        nmic: u8 = ns::NMIC,
        rescap: u8 = ns::RESCAP,
        /// Format progress indicator.
        fpi: u8 = ns::FPI,
        dlfeat: u8 = ns::DLFEAT,
        nawun: u16 = ns::NAWUN,
        nawupf: u16 = ns::NAWUPF,
        nacwu: u16 = ns::NACWU,
        nabsn: u16 = ns::NABSN,
        nabo: u16 = ns::NABO,
        nabspf: u16 = ns::NABSPF,
        /// Optimal I/O boundary, blocks.
        noiob: u16 = ns::NOIOB,
        /// NVM capacity, bytes.
        nvmcap: u128 = ns::NVMCAP,
        /// Preferred write granularity (0-based blocks).
        npwg: u16 = ns::NPWG,
        npwa: u16 = ns::NPWA,
        /// Preferred deallocate granularity (0-based blocks).
        npdg: u16 = ns::NPDG,
        npda: u16 = ns::NPDA,
        /// Optimal write size (0-based blocks).
        nows: u16 = ns::NOWS,
        /// Maximum single source range length (Copy).
        mssrl: u16 = ns::MSSRL,
        /// Maximum copy length.
        mcl: u32 = ns::MCL,
        /// Maximum source range count (0-based).
        msrc: u8 = ns::MSRC,
        /// Number of unique capability LBA formats.
        nulbaf: u8 = ns::NULBAF,
        anagrpid: u32 = ns::ANAGRPID,
        nsattr: u8 = ns::NSATTR,
        nvmsetid: u16 = ns::NVMSETID,
        endgid: u16 = ns::ENDGID,
    }

    /// Namespace globally unique identifier.
    pub fn nguid(&self) -> [u8; 16] {
        get_bytes_n(self.buffer.as_ref(), ns::NGUID)
    }
    /// IEEE extended unique identifier.
    pub fn eui64(&self) -> [u8; 8] {
        get_bytes_n(self.buffer.as_ref(), ns::EUI64)
    }
    /// LBA format `i` (0..64; the default value otherwise).
    pub fn lbaf(&self, i: usize) -> LbaFormat {
        match lbaf_range(i) {
            Some(r) => LbaFormat::from_bytes(get_bytes_n(self.buffer.as_ref(), r)),
            None => LbaFormat::default(),
        }
    }
    /// The LBA format FLBAS selects.
    pub fn current_lbaf(&self) -> LbaFormat {
        self.lbaf(usize::from(flbas_index(self.flbas())))
    }
    /// The vendor specific area (bytes 384..4096).
    pub fn vs(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ns::VS)
    }
}

fn lbaf_range(i: usize) -> Option<core::ops::Range<usize>> {
    (i < NUM_LBAF).then(|| {
        let o = ns::LBAF + i * LBAF_LEN;
        o..o + LBAF_LEN
    })
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNamespace<T> {
    setters! {
        set_nsze: u64 = ns::NSZE,
        set_ncap: u64 = ns::NCAP,
        set_nuse: u64 = ns::NUSE,
        set_nsfeat: u8 = ns::NSFEAT,
        set_nlbaf: u8 = ns::NLBAF,
        set_flbas: u8 = ns::FLBAS,
        set_mc: u8 = ns::MC,
        set_dpc: u8 = ns::DPC,
        set_dps: u8 = ns::DPS,
        set_nmic: u8 = ns::NMIC,
        set_rescap: u8 = ns::RESCAP,
        set_fpi: u8 = ns::FPI,
        set_dlfeat: u8 = ns::DLFEAT,
        set_nawun: u16 = ns::NAWUN,
        set_nawupf: u16 = ns::NAWUPF,
        set_nacwu: u16 = ns::NACWU,
        set_nabsn: u16 = ns::NABSN,
        set_nabo: u16 = ns::NABO,
        set_nabspf: u16 = ns::NABSPF,
        set_noiob: u16 = ns::NOIOB,
        set_nvmcap: u128 = ns::NVMCAP,
        set_npwg: u16 = ns::NPWG,
        set_npwa: u16 = ns::NPWA,
        set_npdg: u16 = ns::NPDG,
        set_npda: u16 = ns::NPDA,
        set_nows: u16 = ns::NOWS,
        set_mssrl: u16 = ns::MSSRL,
        set_mcl: u32 = ns::MCL,
        set_msrc: u8 = ns::MSRC,
        set_nulbaf: u8 = ns::NULBAF,
        set_anagrpid: u32 = ns::ANAGRPID,
        set_nsattr: u8 = ns::NSATTR,
        set_nvmsetid: u16 = ns::NVMSETID,
        set_endgid: u16 = ns::ENDGID,
    }

    pub fn set_nguid(&mut self, v: [u8; 16]) {
        set_padded(self.buffer.as_mut(), ns::NGUID, &v, 0)
    }
    pub fn set_eui64(&mut self, v: [u8; 8]) {
        set_padded(self.buffer.as_mut(), ns::EUI64, &v, 0)
    }
    /// Sets LBA format `i` (0..64); no-op otherwise.
    pub fn set_lbaf(&mut self, i: usize, f: LbaFormat) {
        if let Some(r) = lbaf_range(i) {
            set_padded(self.buffer.as_mut(), r, &f.to_bytes(), 0)
        }
    }
}

// ---------------------------------------------------------------------------
// I/O command set specific / independent structures
// ---------------------------------------------------------------------------

mod ctrl_nvm {
    use core::ops::Range;
    pub const VSL: Range<usize> = 0..1;
    pub const WZSL: Range<usize> = 1..2;
    pub const WUSL: Range<usize> = 2..3;
    pub const DMRL: Range<usize> = 3..4;
    pub const DMRSL: Range<usize> = 4..8;
    pub const DMSL: Range<usize> = 8..16;
}

view!(
    /// NVM command set specific Identify Controller (CNS 06h, CSI 00h; Linux
    /// `struct nvme_id_ctrl_nvm`).
    IdentifyCtrlNvm,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyCtrlNvm<T> {
    getters! {
        /// Verify size limit (log2 of CAP.MPSMIN units, 0 = no limit).
        vsl: u8 = ctrl_nvm::VSL,
        /// Write zeroes size limit.
        wzsl: u8 = ctrl_nvm::WZSL,
        /// Write uncorrectable size limit.
        wusl: u8 = ctrl_nvm::WUSL,
        /// Dataset management ranges limit.
        dmrl: u8 = ctrl_nvm::DMRL,
        /// Dataset management range size limit, blocks.
        dmrsl: u32 = ctrl_nvm::DMRSL,
        /// Dataset management size limit, blocks.
        dmsl: u64 = ctrl_nvm::DMSL,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyCtrlNvm<T> {
    setters! {
        set_vsl: u8 = ctrl_nvm::VSL,
        set_wzsl: u8 = ctrl_nvm::WZSL,
        set_wusl: u8 = ctrl_nvm::WUSL,
        set_dmrl: u8 = ctrl_nvm::DMRL,
        set_dmrsl: u32 = ctrl_nvm::DMRSL,
        set_dmsl: u64 = ctrl_nvm::DMSL,
    }
}

mod ns_nvm {
    use core::ops::Range;
    pub const LBSTM: Range<usize> = 0..8;
    pub const PIC: Range<usize> = 8..9;
    pub const ELBAF: usize = 12;
}

view!(
    /// NVM command set specific Identify Namespace (CNS 05h, CSI 00h; Linux
    /// `struct nvme_id_ns_nvm`).
    IdentifyNsNvm,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNsNvm<T> {
    getters! {
        /// Logical block storage tag mask.
        lbstm: u64 = ns_nvm::LBSTM,
        /// Protection information capabilities.
        pic: u8 = ns_nvm::PIC,
    }
    /// Extended LBA format `i` (0..64; 0 otherwise).
    pub fn elbaf(&self, i: usize) -> u32 {
        if i >= NUM_LBAF {
            return 0;
        }
        let o = ns_nvm::ELBAF + 4 * i;
        get_u32(self.buffer.as_ref(), o..o + 4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNsNvm<T> {
    setters! {
        set_lbstm: u64 = ns_nvm::LBSTM,
        set_pic: u8 = ns_nvm::PIC,
    }
    pub fn set_elbaf(&mut self, i: usize, v: u32) {
        if i < NUM_LBAF {
            let o = ns_nvm::ELBAF + 4 * i;
            set_u32(self.buffer.as_mut(), o..o + 4, v)
        }
    }
}

mod ns_indep {
    use core::ops::Range;
    pub const NSFEAT: Range<usize> = 0..1;
    pub const NMIC: Range<usize> = 1..2;
    pub const RESCAP: Range<usize> = 2..3;
    pub const FPI: Range<usize> = 3..4;
    pub const ANAGRPID: Range<usize> = 4..8;
    pub const NSATTR: Range<usize> = 8..9;
    pub const NVMSETID: Range<usize> = 10..12;
    pub const ENDGID: Range<usize> = 12..14;
    pub const NSTAT: Range<usize> = 14..15;
}

/// Namespace status (NSTAT; Linux `NVME_NSTAT_NRDY`).
pub mod nstat {
    pub const READY: u8 = 1 << 0;
}

view!(
    /// I/O command set independent Identify Namespace (CNS 08h; Linux
    /// `struct nvme_id_ns_cs_indep`).
    IdentifyNsCsIndep,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNsCsIndep<T> {
    getters! {
        nsfeat: u8 = ns_indep::NSFEAT,
        nmic: u8 = ns_indep::NMIC,
        rescap: u8 = ns_indep::RESCAP,
        fpi: u8 = ns_indep::FPI,
        anagrpid: u32 = ns_indep::ANAGRPID,
        nsattr: u8 = ns_indep::NSATTR,
        nvmsetid: u16 = ns_indep::NVMSETID,
        endgid: u16 = ns_indep::ENDGID,
        nstat: u8 = ns_indep::NSTAT,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNsCsIndep<T> {
    setters! {
        set_nsfeat: u8 = ns_indep::NSFEAT,
        set_nmic: u8 = ns_indep::NMIC,
        set_rescap: u8 = ns_indep::RESCAP,
        set_fpi: u8 = ns_indep::FPI,
        set_anagrpid: u32 = ns_indep::ANAGRPID,
        set_nsattr: u8 = ns_indep::NSATTR,
        set_nvmsetid: u16 = ns_indep::NVMSETID,
        set_endgid: u16 = ns_indep::ENDGID,
        set_nstat: u8 = ns_indep::NSTAT,
    }
}

// ---------------------------------------------------------------------------
// Namespace ID lists
// ---------------------------------------------------------------------------

/// The most NSIDs one namespace list (4096 bytes) holds.
pub const NS_LIST_MAX: usize = IDENTIFY_LEN / 4;

/// Writes a namespace ID list (Active / Allocated NS list) into `out`: the NSIDs in
/// iterator order (the caller passes them ascending and greater than the command's
/// NSID), then zeros. Stops when `out` is full. Returns the number written.
pub fn write_active_ns_list(out: &mut [u8], nsids: impl Iterator<Item = u32>) -> usize {
    out.fill(0);
    let mut n = 0;
    for (slot, id) in out.chunks_exact_mut(4).zip(nsids) {
        slot.copy_from_slice(&id.to_le_bytes());
        n += 1;
    }
    n
}

/// Reads a namespace ID list: the NSIDs up to the first zero.
pub fn parse_ns_list(data: &[u8]) -> Vec<u32> {
    data.chunks_exact(4)
        .map(|c| get_u32(c, 0..4))
        .take_while(|&id| id != 0)
        .collect()
}

// ---------------------------------------------------------------------------
// Namespace identification descriptors
// ---------------------------------------------------------------------------

/// Namespace identifier types (Linux `NVME_NIDT_*`).
pub mod nidt {
    pub const EUI64: u8 = 0x01;
    pub const NGUID: u8 = 0x02;
    pub const UUID: u8 = 0x03;
    pub const CSI: u8 = 0x04;
}

/// Namespace identifier lengths (Linux `NVME_NIDT_*_LEN`).
pub mod nidl {
    pub const EUI64: u8 = 8;
    pub const NGUID: u8 = 16;
    pub const UUID: u8 = 16;
    pub const CSI: u8 = 1;
}

/// The header length of a namespace identification descriptor (nidt, nidl, 2 reserved).
pub const NS_ID_DESC_HEADER_LEN: usize = 4;

/// A namespace identification descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NsIdDescriptor {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
    Uuid([u8; 16]),
    Csi(u8),
}

impl NsIdDescriptor {
    pub const fn nidt(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidt::EUI64,
            NsIdDescriptor::Nguid(_) => nidt::NGUID,
            NsIdDescriptor::Uuid(_) => nidt::UUID,
            NsIdDescriptor::Csi(_) => nidt::CSI,
        }
    }
    pub const fn nidl(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidl::EUI64,
            NsIdDescriptor::Nguid(_) => nidl::NGUID,
            NsIdDescriptor::Uuid(_) => nidl::UUID,
            NsIdDescriptor::Csi(_) => nidl::CSI,
        }
    }
    /// The identifier bytes.
    pub fn value(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(v) => v,
            NsIdDescriptor::Nguid(v) | NsIdDescriptor::Uuid(v) => v,
            NsIdDescriptor::Csi(v) => core::slice::from_ref(v),
        }
    }
    /// Header plus value length on the wire.
    pub fn wire_len(&self) -> usize {
        NS_ID_DESC_HEADER_LEN + usize::from(self.nidl())
    }
}

/// Writes namespace identification descriptors into `out` (normally 4096 bytes),
/// zero-filling the rest so the list ends with a zero NIDT. Descriptors that do not
/// fit are dropped. Returns the number of bytes written.
pub fn write_ns_id_descriptors(out: &mut [u8], descs: &[NsIdDescriptor]) -> usize {
    out.fill(0);
    let mut o = 0;
    for d in descs {
        let end = o + d.wire_len();
        let Some(dst) = out.get_mut(o..end) else {
            break;
        };
        dst[0] = d.nidt();
        dst[1] = d.nidl();
        dst[NS_ID_DESC_HEADER_LEN..].copy_from_slice(d.value());
        o = end;
    }
    o
}

/// Parses namespace identification descriptors, stopping at a zero NIDT or at a
/// descriptor that runs past the end. Unknown types and known types with a wrong
/// length are skipped. Never panics.
pub fn parse_ns_id_descriptors(data: &[u8]) -> Vec<NsIdDescriptor> {
    let mut v = Vec::new();
    let mut o = 0usize;
    while let Some(h) = data.get(o..o + NS_ID_DESC_HEADER_LEN) {
        let (t, l) = (h[0], usize::from(h[1]));
        if t == 0 {
            break;
        }
        let start = o + NS_ID_DESC_HEADER_LEN;
        let Some(val) = data.get(start..start + l) else {
            break;
        };
        let d = match (t, l) {
            (nidt::EUI64, 8) => <[u8; 8]>::try_from(val).ok().map(NsIdDescriptor::Eui64),
            (nidt::NGUID, 16) => <[u8; 16]>::try_from(val).ok().map(NsIdDescriptor::Nguid),
            (nidt::UUID, 16) => <[u8; 16]>::try_from(val).ok().map(NsIdDescriptor::Uuid),
            (nidt::CSI, 1) => val.first().copied().map(NsIdDescriptor::Csi),
            _ => None,
        };
        v.extend(d);
        o = start + l;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn id_ctrl_golden() {
        let mut c = IdentifyController::new_unchecked(vec![0u8; IDENTIFY_LEN]);
        c.set_vid(0x1B36);
        c.set_ssvid(0x1AF4);
        c.set_sn("SN123");
        c.set_mn("Model é");
        c.set_fr("1.0-long-revision");
        c.set_rab(6);
        c.set_ieee([0x01, 0x02, 0x03]);
        c.set_cmic(cmic::MULTI_CTRL);
        c.set_mdts(5);
        c.set_cntlid(0x0102);
        c.set_ver(0x0002_0000);
        c.set_oaes(oaes::NS_ATTR | oaes::DISCOVERY_LOG_CHANGE);
        c.set_ctratt(ctratt::HOST_ID_128);
        c.set_rrls(0x0A0B);
        c.set_cntrltype(cntrltype::IO);
        c.set_fguid([0xAB; 16]);
        c.set_crdt1(1);
        c.set_crdt3(3);
        c.set_mec(0x55);
        c.set_oacs(oacs::FW);
        c.set_acl(3);
        c.set_aerl(3);
        c.set_frmw(frmw::SLOT1_RO | (1 << frmw::NUM_SLOTS_SHIFT));
        c.set_lpa(lpa::CMD_EFFECTS | lpa::EXTENDED);
        c.set_elpe(63);
        c.set_wctemp(0x0157);
        c.set_cctemp(0x0175);
        c.set_tnvmcap(1 << 40);
        c.set_kas(10);
        c.set_anatt(10);
        c.set_anacap(anacap::OPTIMIZED);
        c.set_anagrpmax(0x20);
        c.set_pels(7);
        c.set_domainid(9);
        c.set_megcap(0x77);
        c.set_sqes(entry_size::SQES_64);
        c.set_cqes(entry_size::CQES_16);
        c.set_maxcmd(128);
        c.set_nn(1024);
        c.set_oncs(oncs::DSM | oncs::WRITE_ZEROES | oncs::COPY);
        c.set_fuses(fuses::COMPARE_AND_WRITE);
        c.set_vwc(vwc::PRESENT | vwc::FLUSH_BROADCAST_SUPPORTED);
        c.set_awun(0x11);
        c.set_icsvscc(1);
        c.set_acwu(0x22);
        c.set_ocfs(0x33);
        c.set_sgls(sgls::SUPPORTED | sgls::KEYED | sgls::SGL_OFFSET);
        c.set_mnan(0x44);
        c.set_maxdna(0x66);
        c.set_maxcna(0x88);
        c.set_oaqd(0x99);
        c.set_subnqn("nqn.2024-01.io.example:sub");
        c.set_ioccsz(260);
        c.set_iorcsz(1);
        c.set_icdoff(0);
        c.set_fcatt(fcatt::STATIC_CONTROLLER_MODEL);
        c.set_msdbd(1);
        c.set_ofcs(1);
        c.set_dctype(dctype::DDC);
        {
            let mut p = c.psd_mut(0);
            p.set_max_power(2500);
            p.set_flags(ps_flags::NON_OP_STATE);
            p.set_entry_lat(10);
            p.set_exit_lat(20);
            p.set_active_work_scale(2);
        }
        c.psd_mut(31).set_max_power(7);
        assert!(c.psd_mut(32).as_bytes().is_empty());
        let b = c.as_bytes();
        assert_eq!(&b[0..4], &[0x36, 0x1B, 0xF4, 0x1A]);
        assert_eq!(&b[4..24], b"SN123               ");
        assert_eq!(&b[24..33], b"Model ?? ");
        assert_eq!(&b[64..72], b"1.0-long");
        assert_eq!(&b[72..80], &[6, 1, 2, 3, 2, 5, 0x02, 0x01]);
        assert_eq!(&b[80..84], &[0, 0, 2, 0]);
        assert_eq!(&b[92..96], &[0, 1, 0, 0x80]);
        assert_eq!(&b[96..102], &[1, 0, 0, 0, 0x0B, 0x0A]);
        assert_eq!(b[111], 1);
        assert_eq!(&b[112..128], &[0xAB; 16]);
        assert_eq!(&b[128..134], &[1, 0, 0, 0, 3, 0]);
        assert_eq!(b[255], 0x55);
        assert_eq!(&b[256..264], &[4, 0, 3, 3, 3, 6, 63, 0]);
        assert_eq!(&b[266..270], &[0x57, 0x01, 0x75, 0x01]);
        assert_eq!(&b[280..296], &(1u128 << 40).to_le_bytes());
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(&b[342..348], &[10, 1, 0x20, 0, 0, 0]);
        assert_eq!(&b[352..358], &[7, 0, 0, 0, 9, 0]);
        assert_eq!(b[368], 0x77);
        assert_eq!(&b[512..520], &[0x66, 0x44, 128, 0, 0, 4, 0, 0]);
        assert_eq!(&b[520..530], &[0x0C, 0x01, 1, 0, 0, 0x07, 0x11, 0, 0, 0]);
        assert_eq!(&b[530..536], &[1, 0, 0x22, 0, 0x33, 0]);
        assert_eq!(&b[536..544], &[0x05, 0x00, 0x10, 0x00, 0x44, 0, 0, 0]);
        assert_eq!(b[544], 0x66);
        assert_eq!(&b[560..568], &[0x88, 0, 0, 0, 0x99, 0, 0, 0]);
        assert_eq!(&b[768..772], b"nqn.");
        assert_eq!(b[768 + 26], 0);
        // Linux: ioccsz @1792, iorcsz @1796, icdoff @1800, ctrattr @1802, msdbd @1803,
        // dctype @1806.
        assert_eq!(
            &b[1792..1807],
            &[4, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1]
        );
        assert_eq!(
            &b[2048..2060],
            &[0xC4, 0x09, 0, 2, 10, 0, 0, 0, 20, 0, 0, 0]
        );
        assert_eq!(b[2048 + 22], 2);
        assert_eq!(&b[2048 + 31 * 32..2048 + 31 * 32 + 2], &[7, 0]);

        let p = IdentifyController::new_checked(b).unwrap();
        assert_eq!(p.sn_string(), "SN123");
        assert_eq!(p.mn_string(), "Model ??");
        assert_eq!(p.fr_string(), "1.0-long");
        assert_eq!(p.subnqn_str(), Some("nqn.2024-01.io.example:sub"));
        assert_eq!(p.ieee(), [1, 2, 3]);
        assert_eq!(p.ioccsz(), 260);
        assert_eq!(p.dctype(), dctype::DDC);
        assert_eq!(p.psd(0).exit_lat(), 20);
        assert_eq!(p.psd(40).max_power(), 0);
        assert_eq!(p.tnvmcap(), 1 << 40);
        assert_eq!(p.vs().len(), 1024);
        assert_eq!(
            IdentifyController::new_checked(&b[..4095]).err(),
            Some(WireError::Truncated {
                need: 4096,
                have: 4095
            })
        );
    }

    #[test]
    fn id_ns_golden() {
        let mut n = IdentifyNamespace::new_unchecked(vec![0u8; IDENTIFY_LEN]);
        n.set_nsze(0x1_0000_0000);
        n.set_ncap(0x1_0000_0000);
        n.set_nuse(0x10);
        n.set_nsfeat(nsfeat::THIN | nsfeat::OPTPERF);
        n.set_nlbaf(1);
        n.set_flbas(flbas_encode(1, false));
        n.set_mc(mc::EXTENDED_LBA);
        n.set_dpc(dpc::PI_TYPE1);
        n.set_nmic(nmic::SHARED);
        n.set_rescap(rescap::PTPL);
        n.set_dlfeat(dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEAC);
        n.set_nawun(1);
        n.set_noiob(0x40);
        n.set_nvmcap(0x2000);
        n.set_npwg(7);
        n.set_nows(15);
        n.set_mssrl(0x100);
        n.set_mcl(0x1000);
        n.set_msrc(0x7F);
        n.set_anagrpid(1);
        n.set_nsattr(nsattr::WRITE_PROTECTED);
        n.set_nvmsetid(2);
        n.set_endgid(3);
        n.set_nguid([0x11; 16]);
        n.set_eui64([0x22; 8]);
        n.set_lbaf(0, LbaFormat::new(9));
        n.set_lbaf(
            1,
            LbaFormat {
                ms: 8,
                ds: 12,
                rp: rp::BETTER,
            },
        );
        n.set_lbaf(63, LbaFormat::new(16));
        n.set_lbaf(64, LbaFormat::new(17));
        let b = n.as_bytes();
        assert_eq!(&b[0..8], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&b[16..24], &[0x10, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..34], &[0x11, 1, 1, 1, 1, 0, 1, 1, 0, 0x09]);
        assert_eq!(&b[34..36], &[1, 0]);
        assert_eq!(&b[46..50], &[0x40, 0, 0x00, 0x20]);
        assert_eq!(&b[64..66], &[7, 0]);
        assert_eq!(&b[72..81], &[15, 0, 0, 1, 0, 0x10, 0, 0, 0x7F]);
        assert_eq!(&b[92..104], &[1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 3, 0]);
        assert_eq!(&b[104..120], &[0x11; 16]);
        assert_eq!(&b[120..128], &[0x22; 8]);
        assert_eq!(&b[128..136], &[0, 0, 9, 0, 8, 0, 12, 1]);
        assert_eq!(&b[380..384], &[0, 0, 16, 0]);
        assert!(b[384..].iter().all(|&x| x == 0));
        let p = IdentifyNamespace::new_checked(b).unwrap();
        assert_eq!(p.current_lbaf().block_size(), Some(4096));
        assert_eq!(p.lbaf(0).block_size(), Some(512));
        assert_eq!(p.lbaf(2), LbaFormat::default());
        assert_eq!(p.lbaf(64), LbaFormat::default());
        assert_eq!(p.nsze(), 0x1_0000_0000);
        assert_eq!(p.nvmcap(), 0x2000);
        assert_eq!(p.eui64(), [0x22; 8]);
    }

    #[test]
    fn flbas_index_math() {
        assert_eq!(flbas_index(0x10), 0);
        assert_eq!(flbas_index(0x0F), 15);
        assert_eq!(flbas_index(0x20), 16);
        assert_eq!(flbas_index(0x6F), 63);
        for i in 0..64u8 {
            assert_eq!(flbas_index(flbas_encode(i, true)), i);
            assert_ne!(flbas_encode(i, true) & flbas::META_EXT, 0);
        }
        assert_eq!(LbaFormat::from_bytes([0, 0, 0xFF, 0xFF]).rp, 3);
        assert_eq!(LbaFormat::new(0).block_size(), None);
    }

    #[test]
    fn cs_specific_structs() {
        let mut c = IdentifyCtrlNvm::new_unchecked(vec![0u8; IDENTIFY_LEN]);
        c.set_vsl(1);
        c.set_wzsl(2);
        c.set_wusl(3);
        c.set_dmrl(4);
        c.set_dmrsl(0x0506_0708);
        c.set_dmsl(0x0A);
        assert_eq!(
            &c.as_bytes()[..16],
            &[1, 2, 3, 4, 8, 7, 6, 5, 0x0A, 0, 0, 0, 0, 0, 0, 0]
        );
        let mut n = IdentifyNsNvm::new_unchecked(vec![0u8; IDENTIFY_LEN]);
        n.set_lbstm(1);
        n.set_pic(2);
        n.set_elbaf(1, 0x80);
        assert_eq!(
            &n.as_bytes()[8..20],
            &[2, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0]
        );
        assert_eq!(n.elbaf(1), 0x80);
        assert_eq!(n.elbaf(64), 0);
        let mut i = IdentifyNsCsIndep::new_unchecked(vec![0u8; IDENTIFY_LEN]);
        i.set_nsfeat(1);
        i.set_nmic(1);
        i.set_anagrpid(0x0102);
        i.set_nsattr(1);
        i.set_nvmsetid(3);
        i.set_endgid(4);
        i.set_nstat(nstat::READY);
        assert_eq!(
            &i.as_bytes()[..16],
            &[1, 1, 0, 0, 2, 1, 0, 0, 1, 0, 3, 0, 4, 0, 1, 0]
        );
    }

    #[test]
    fn ns_list() {
        let mut out = vec![0xFFu8; IDENTIFY_LEN];
        assert_eq!(write_active_ns_list(&mut out, [1u32, 2, 10].into_iter()), 3);
        assert_eq!(
            &out[..16],
            &[1, 0, 0, 0, 2, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(out[12..].iter().all(|&x| x == 0));
        assert_eq!(parse_ns_list(&out), vec![1, 2, 10]);
        assert_eq!(write_active_ns_list(&mut out, 1..=5000u32), NS_LIST_MAX);
        assert_eq!(parse_ns_list(&out).len(), NS_LIST_MAX);
        let mut small = [0u8; 6];
        assert_eq!(write_active_ns_list(&mut small, 1..=3u32), 1);
    }

    #[test]
    fn ns_id_descriptors() {
        let descs = [
            NsIdDescriptor::Eui64([1; 8]),
            NsIdDescriptor::Nguid([2; 16]),
            NsIdDescriptor::Uuid([3; 16]),
            NsIdDescriptor::Csi(0),
        ];
        let mut out = vec![0xEEu8; IDENTIFY_LEN];
        let n = write_ns_id_descriptors(&mut out, &descs);
        assert_eq!(n, 12 + 20 + 20 + 5);
        assert_eq!(&out[0..4], &[1, 8, 0, 0]);
        assert_eq!(&out[4..12], &[1; 8]);
        assert_eq!(&out[12..16], &[2, 16, 0, 0]);
        assert_eq!(&out[32..36], &[3, 16, 0, 0]);
        assert_eq!(&out[52..57], &[4, 1, 0, 0, 0]);
        assert!(out[57..].iter().all(|&x| x == 0));
        assert_eq!(parse_ns_id_descriptors(&out), descs.to_vec());
        // Too small: only what fits.
        let mut tiny = [0u8; 20];
        assert_eq!(write_ns_id_descriptors(&mut tiny, &descs), 12);
        assert_eq!(parse_ns_id_descriptors(&tiny), vec![descs[0]]);
    }

    #[test]
    fn ns_id_descriptor_parser_is_robust() {
        // Unknown type skipped, bad length skipped, truncated stops, no panic.
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&[0x7, 2, 0, 0]);
        b[6..10].copy_from_slice(&[nidt::EUI64, 4, 0, 0]);
        b[14..18].copy_from_slice(&[nidt::CSI, 1, 0, 0]);
        b[18] = 2;
        b[19..23].copy_from_slice(&[nidt::NGUID, 16, 0, 0]);
        assert_eq!(
            parse_ns_id_descriptors(&b[..30]),
            vec![NsIdDescriptor::Csi(2)]
        );
        assert_eq!(parse_ns_id_descriptors(&[]), vec![]);
        assert_eq!(parse_ns_id_descriptors(&[1, 0xFF, 0]), vec![]);
        for len in 0..b.len() {
            let _ = parse_ns_id_descriptors(&b[..len]);
        }
        let all = [0xFFu8; 300];
        let _ = parse_ns_id_descriptors(&all);
    }
}
