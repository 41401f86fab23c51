//! Admin command set: opcodes, Identify CNS values, feature and log identifiers, and
//! SQE field helpers for Identify, Get Log Page, Get/Set Features, Asynchronous Event
//! Request and Abort (Linux `struct nvme_identify`, `struct nvme_get_log_page_command`,
//! `struct nvme_features`, `struct nvme_abort_cmd`).

use super::sqe::Sqe;

/// Admin command opcodes (Linux `enum nvme_admin_opcode`).
pub mod opcode {
    pub const DELETE_SQ: u8 = 0x00;
    pub const CREATE_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_CQ: u8 = 0x04;
    pub const CREATE_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const NS_MGMT: u8 = 0x0D;
    pub const FW_COMMIT: u8 = 0x10;
    pub const FW_DOWNLOAD: u8 = 0x11;
    pub const DEVICE_SELF_TEST: u8 = 0x14;
    pub const NS_ATTACH: u8 = 0x15;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const DIRECTIVE_SEND: u8 = 0x19;
    pub const DIRECTIVE_RECEIVE: u8 = 0x1A;
    pub const VIRTUALIZATION_MGMT: u8 = 0x1C;
    pub const NVME_MI_SEND: u8 = 0x1D;
    pub const NVME_MI_RECEIVE: u8 = 0x1E;
    pub const DOORBELL_BUFFER_CONFIG: u8 = 0x7C;
    pub const FABRICS: u8 = 0x7F;
    pub const FORMAT_NVM: u8 = 0x80;
    pub const SECURITY_SEND: u8 = 0x81;
    pub const SECURITY_RECEIVE: u8 = 0x82;
    pub const SANITIZE: u8 = 0x84;
    pub const GET_LBA_STATUS: u8 = 0x86;
    /// First vendor specific admin opcode.
    pub const VENDOR_START: u8 = 0xC0;
}

/// Identify Controller or Namespace Structure values (cdw10 7:0; Linux `NVME_ID_CNS_*`).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_ID_DESCRIPTOR_LIST: u8 = 0x03;
    /// NVM Set List.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O command set specific Identify Namespace.
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CS_CONTROLLER: u8 = 0x06;
    /// Active namespace ID list for an I/O command set.
    pub const CS_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O command set independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
    /// Allocated namespace ID list (Linux `NVME_ID_CNS_NS_PRESENT_LIST`).
    pub const ALLOCATED_NS_LIST: u8 = 0x10;
    /// Identify Namespace for an allocated NSID (Linux `NVME_ID_CNS_NS_PRESENT`).
    pub const ALLOCATED_NAMESPACE: u8 = 0x11;
    /// Controllers attached to a namespace (Linux `NVME_ID_CNS_CTRL_NS_LIST`).
    pub const NS_CONTROLLER_LIST: u8 = 0x12;
    /// Controllers in the NVM subsystem (Linux `NVME_ID_CNS_CTRL_LIST`).
    pub const CONTROLLER_LIST: u8 = 0x13;
    pub const PRIMARY_CONTROLLER_CAPS: u8 = 0x14;
    pub const SECONDARY_CONTROLLER_LIST: u8 = 0x15;
    pub const NS_GRANULARITY_LIST: u8 = 0x16;
    pub const UUID_LIST: u8 = 0x17;
    pub const DOMAIN_LIST: u8 = 0x18;
    pub const ENDURANCE_GROUP_LIST: u8 = 0x19;
    /// I/O command set data structure (which command set combinations are supported).
    pub const IO_COMMAND_SET: u8 = 0x1C;
}

/// Command Set Identifiers (Linux `NVME_CSI_*`).
pub mod csi {
    pub const NVM: u8 = 0x00;
    pub const KV: u8 = 0x01;
    pub const ZNS: u8 = 0x02;
}

/// Feature identifiers (Linux `NVME_FEAT_*`).
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MGMT: u8 = 0x02;
    pub const LBA_RANGE_TYPE: u8 = 0x03;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const INTERRUPT_VECTOR_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const AUTONOMOUS_POWER_STATE: u8 = 0x0C;
    pub const HOST_MEMORY_BUFFER: u8 = 0x0D;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_CONTROLLED_THERMAL_MGMT: u8 = 0x10;
    pub const NON_OPERATIONAL_POWER_STATE: u8 = 0x11;
    pub const READ_RECOVERY_LEVEL: u8 = 0x12;
    pub const PLM_CONFIG: u8 = 0x13;
    pub const PLM_WINDOW: u8 = 0x14;
    pub const HOST_BEHAVIOR: u8 = 0x16;
    pub const SANITIZE_CONFIG: u8 = 0x17;
    pub const SOFTWARE_PROGRESS_MARKER: u8 = 0x80;
    pub const HOST_IDENTIFIER: u8 = 0x81;
    pub const RESERVATION_NOTIFICATION_MASK: u8 = 0x82;
    pub const RESERVATION_PERSISTENCE: u8 = 0x83;
    pub const NS_WRITE_PROTECTION: u8 = 0x84;
    pub const VENDOR_START: u8 = 0xC0;
}

/// Get Features Select values (cdw10 10:8).
pub mod sel {
    pub const CURRENT: u8 = 0;
    pub const DEFAULT: u8 = 1;
    pub const SAVED: u8 = 2;
    pub const SUPPORTED: u8 = 3;
}

/// Get Features with SEL = SUPPORTED: completion dw0 capability bits.
pub mod feature_caps {
    pub const SAVEABLE: u32 = 1 << 0;
    pub const NS_SPECIFIC: u32 = 1 << 1;
    pub const CHANGEABLE: u32 = 1 << 2;
}

/// SQE byte offsets of admin command fields (for error locations).
pub mod offset {
    /// Identify CNS (cdw10 7:0).
    pub const CNS: u16 = 40;
    /// Identify CNTID (cdw10 31:16).
    pub const CNTID: u16 = 42;
    /// Identify CNSSID / NVMSETID (cdw11 15:0).
    pub const CNSSID: u16 = 44;
    /// Identify CSI (cdw11 31:24).
    pub const CSI: u16 = 47;
    /// Get Log Page LID (cdw10 7:0).
    pub const LID: u16 = 40;
    /// Get Log Page LSP / RAE (cdw10 15:8).
    pub const LSP: u16 = 41;
    /// Get Log Page NUMDL (cdw10 31:16).
    pub const NUMDL: u16 = 42;
    /// Get Log Page NUMDU (cdw11 15:0).
    pub const NUMDU: u16 = 44;
    /// Get Log Page LSI (cdw11 31:16).
    pub const LSI: u16 = 46;
    /// Get Log Page LPOL (cdw12).
    pub const LPOL: u16 = 48;
    /// Get Log Page LPOU (cdw13).
    pub const LPOU: u16 = 52;
    /// Get Log Page CSI (cdw14 31:24).
    pub const LOG_CSI: u16 = 59;
    /// Features FID (cdw10 7:0).
    pub const FID: u16 = 40;
    /// Get Features SEL (cdw10 10:8, byte 41 bits 2:0).
    pub const SEL: u16 = 41;
    /// Set Features SV (cdw10 bit 31, byte 43 bit 7).
    pub const SV: u16 = 43;
    /// Features dword 11.
    pub const FEATURE_DW11: u16 = 44;
    /// Abort SQID (cdw10 15:0).
    pub const ABORT_SQID: u16 = 40;
    /// Abort CID (cdw10 31:16).
    pub const ABORT_CID: u16 = 42;
}

// ---- Identify ----

/// Identify CNS (cdw10 7:0).
pub fn identify_cns<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    sqe.cdw10() as u8
}

/// Identify controller identifier (cdw10 31:16).
pub fn identify_cntid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u16 {
    (sqe.cdw10() >> 16) as u16
}

/// Identify CNS specific identifier (cdw11 15:0; NVM set / endurance group / domain).
pub fn identify_cnssid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u16 {
    sqe.cdw11() as u16
}

/// Identify command set identifier (cdw11 31:24).
pub fn identify_csi<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    (sqe.cdw11() >> 24) as u8
}

/// Identify UUID index (cdw14 6:0).
pub fn identify_uuid_index<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    (sqe.cdw14() & 0x7F) as u8
}

/// Builds an Identify command's cdw10/cdw11.
pub fn set_identify<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, cns: u8, cntid: u16, csi: u8) {
    sqe.set_opcode(opcode::IDENTIFY);
    sqe.set_cdw10(u32::from(cns) | (u32::from(cntid) << 16));
    sqe.set_cdw11((sqe.cdw11() & 0x00FF_FFFF) | (u32::from(csi) << 24));
}

// ---- Get Log Page ----

const NUMD_LOW_SHIFT: u32 = 16;
const LSP_SHIFT: u32 = 8;
const LSP_MASK: u32 = 0x7F;
const RAE_BIT: u32 = 1 << 15;

/// Log page identifier (cdw10 7:0).
pub fn log_lid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    sqe.cdw10() as u8
}

/// Log specific field (cdw10 14:8).
pub fn log_lsp<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    ((sqe.cdw10() >> LSP_SHIFT) & LSP_MASK) as u8
}

/// Retain Asynchronous Event (cdw10 bit 15).
pub fn log_rae<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw10() & RAE_BIT != 0
}

/// The raw 0-based NUMD (NUMDU << 16 | NUMDL).
pub fn log_numd_raw<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    (sqe.cdw10() >> NUMD_LOW_SHIFT) | ((sqe.cdw11() & 0xFFFF) << 16)
}

/// Number of dwords to return (the 0-based NUMD + 1). The one value that does not fit
/// (0-based 0xFFFF_FFFF) saturates at `u32::MAX`.
pub fn log_numd<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    log_numd_raw(sqe).saturating_add(1)
}

/// Number of bytes to return ((NUMD + 1) * 4), exact.
pub fn log_len_bytes<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u64 {
    (u64::from(log_numd_raw(sqe)) + 1) * 4
}

/// Log specific identifier (cdw11 31:16).
pub fn log_lsi<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u16 {
    (sqe.cdw11() >> 16) as u16
}

/// Log page offset in bytes (LPOL cdw12 | LPOU cdw13 << 32).
pub fn log_offset<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u64 {
    u64::from(sqe.cdw12()) | (u64::from(sqe.cdw13()) << 32)
}

/// Log UUID index (cdw14 6:0).
pub fn log_uuid_index<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    (sqe.cdw14() & 0x7F) as u8
}

/// Offset Type (cdw14 bit 23): the offset is an index into a list, not bytes.
pub fn log_ot<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw14() & (1 << 23) != 0
}

/// Log command set identifier (cdw14 31:24).
pub fn log_csi<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    (sqe.cdw14() >> 24) as u8
}

/// Builds a Get Log Page command: `dwords` is the count to transfer (1..=2^32,
/// clamped to at least 1), `offset` in bytes.
pub fn set_get_log_page<T: AsRef<[u8]> + AsMut<[u8]>>(
    sqe: &mut Sqe<T>,
    lid: u8,
    lsp: u8,
    rae: bool,
    dwords: u32,
    offset: u64,
) {
    let numd = dwords.max(1) - 1;
    let mut cdw10 = u32::from(lid) | ((u32::from(lsp) & LSP_MASK) << LSP_SHIFT);
    if rae {
        cdw10 |= RAE_BIT;
    }
    cdw10 |= (numd & 0xFFFF) << NUMD_LOW_SHIFT;
    sqe.set_opcode(opcode::GET_LOG_PAGE);
    sqe.set_cdw10(cdw10);
    sqe.set_cdw11((sqe.cdw11() & 0xFFFF_0000) | (numd >> 16));
    sqe.set_cdw12(offset as u32);
    sqe.set_cdw13((offset >> 32) as u32);
}

// ---- Features ----

const FID_MASK: u32 = 0xFF;
const SEL_SHIFT: u32 = 8;
const SEL_MASK: u32 = 0x7;
const SV_BIT: u32 = 1 << 31;

/// Feature identifier (cdw10 7:0).
pub fn feature_fid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    (sqe.cdw10() & FID_MASK) as u8
}

/// Save (Set Features cdw10 bit 31).
pub fn feature_sv<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw10() & SV_BIT != 0
}

/// Select (Get Features cdw10 10:8, see [`sel`]).
pub fn feature_sel<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    ((sqe.cdw10() >> SEL_SHIFT) & SEL_MASK) as u8
}

/// Builds Get Features cdw10 (FID and SEL).
pub const fn get_features_cdw10(fid: u8, sel: u8) -> u32 {
    fid as u32 | (((sel as u32) & SEL_MASK) << SEL_SHIFT)
}

/// Builds Set Features cdw10 (FID and SV).
pub const fn set_features_cdw10(fid: u8, save: bool) -> u32 {
    fid as u32 | if save { SV_BIT } else { 0 }
}

/// Number of Queues dword (Set Features cdw11 / completion dw0): NSQR in 15:0,
/// NCQR in 31:16, both 0-based.
pub const fn num_queues_encode(nsqr: u16, ncqr: u16) -> u32 {
    nsqr as u32 | ((ncqr as u32) << 16)
}

/// Splits a Number of Queues dword into (NSQR, NCQR), both 0-based.
pub const fn num_queues_decode(dw: u32) -> (u16, u16) {
    (dw as u16, (dw >> 16) as u16)
}

/// Host Identifier feature: Enable Extended Host Identifier (cdw11 bit 0, 128-bit).
pub const HOST_ID_EXHID: u32 = 1 << 0;

/// Host Identifier feature: EXHID (cdw11 bit 0).
pub fn host_id_exhid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw11() & HOST_ID_EXHID != 0
}

/// Volatile Write Cache feature: Write Cache Enable (cdw11 bit 0).
pub const VWC_WCE: u32 = 1 << 0;

/// Asynchronous Event Configuration feature bits (cdw11; Linux `NVME_AEN_CFG_*`).
pub mod aen_cfg {
    /// SMART / health critical warnings (bits 7:0).
    pub const SMART_MASK: u32 = 0xFF;
    pub const NS_ATTR: u32 = 1 << 8;
    pub const FW_ACTIVATION: u32 = 1 << 9;
    pub const TELEMETRY: u32 = 1 << 10;
    pub const ANA_CHANGE: u32 = 1 << 11;
    pub const PLEA: u32 = 1 << 12;
    pub const LBA_STATUS: u32 = 1 << 13;
    pub const EGEA: u32 = 1 << 14;
    pub const NORMAL_NVM_SUBSYSTEM_SHUTDOWN: u32 = 1 << 15;
    pub const DISCOVERY_LOG_CHANGE: u32 = 1 << 31;
}

// ---- Asynchronous Event Request ----

/// Asynchronous event types (completion dw0 2:0; Linux `NVME_AER_*`).
pub mod aer_type {
    pub const ERROR: u8 = 0;
    pub const SMART: u8 = 1;
    pub const NOTICE: u8 = 2;
    pub const IMMEDIATE: u8 = 3;
    pub const IO_CMD_SPECIFIC: u8 = 6;
    pub const VENDOR: u8 = 7;
}

/// Asynchronous event information for type NOTICE (Linux `NVME_AER_NOTICE_*`).
pub mod aer_notice {
    pub const NS_ATTR_CHANGED: u8 = 0x00;
    pub const FW_ACTIVATION_STARTING: u8 = 0x01;
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
    pub const ANA_CHANGE: u8 = 0x03;
    pub const PREDICTABLE_LATENCY_AGGREGATE: u8 = 0x04;
    pub const LBA_STATUS_ALERT: u8 = 0x05;
    pub const ENDURANCE_GROUP_AGGREGATE: u8 = 0x06;
    pub const DISCOVERY_LOG_CHANGE: u8 = 0xF0;
}

/// Asynchronous event information for type IO_CMD_SPECIFIC.
pub mod aer_io_cmd_specific {
    pub const RESERVATION_LOG_PAGE_AVAILABLE: u8 = 0x00;
    pub const SANITIZE_COMPLETED: u8 = 0x01;
}

/// Completion dw0 of an Asynchronous Event Request: type in 2:0, information in
/// 15:8, log page identifier in 23:16.
pub const fn aer_result(event_type: u8, info: u8, log_page: u8) -> u32 {
    (event_type as u32 & 0x7) | ((info as u32) << 8) | ((log_page as u32) << 16)
}

/// Splits an AER completion dw0 into (type, information, log page identifier).
pub const fn aer_result_parts(dw0: u32) -> (u8, u8, u8) {
    ((dw0 & 0x7) as u8, (dw0 >> 8) as u8, (dw0 >> 16) as u8)
}

// ---- Abort ----

/// Abort: submission queue identifier (cdw10 15:0).
pub fn abort_sqid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u16 {
    sqe.cdw10() as u16
}

/// Abort: command identifier (cdw10 31:16).
pub fn abort_cid<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u16 {
    (sqe.cdw10() >> 16) as u16
}

/// Abort completion dw0 bit 0: set when the command was NOT aborted.
pub const ABORT_NOT_ABORTED: u32 = 1 << 0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::log::lid;
    use crate::wire::sqe::SQE_LEN;

    fn sqe() -> Sqe<[u8; SQE_LEN]> {
        Sqe::new_unchecked([0u8; SQE_LEN])
    }

    #[test]
    fn identify_fields() {
        let mut s = sqe();
        set_identify(&mut s, cns::CS_CONTROLLER, 0x1234, csi::ZNS);
        let b = s.as_bytes();
        // Linux struct nvme_identify: cns @40, ctrlid @42, csi @47.
        assert_eq!(b[0], 0x06);
        assert_eq!(&b[40..48], &[0x06, 0, 0x34, 0x12, 0, 0, 0, 0x02]);
        assert_eq!(identify_cns(&s), cns::CS_CONTROLLER);
        assert_eq!(identify_cntid(&s), 0x1234);
        assert_eq!(identify_csi(&s), csi::ZNS);
        assert_eq!(identify_cnssid(&s), 0);
        s.set_cdw14(0xFF);
        assert_eq!(identify_uuid_index(&s), 0x7F);
    }

    #[test]
    fn get_log_page_fields() {
        let mut s = sqe();
        // 0x12345 dwords -> 0-based 0x12344: NUMDL 0x2344, NUMDU 0x0001.
        set_get_log_page(&mut s, lid::SMART, 0x05, true, 0x1_2345, 0x1_0000_0200);
        s.set_cdw11(s.cdw11() | (0xABCD << 16));
        let b = s.as_bytes();
        // Linux struct nvme_get_log_page_command: lid @40, lsp @41, numdl @42,
        // numdu @44, lsi @46, lpo @48.
        assert_eq!(
            &b[40..48],
            &[0x02, 0x85, 0x44, 0x23, 0x01, 0x00, 0xCD, 0xAB]
        );
        assert_eq!(&b[48..56], &[0x00, 0x02, 0, 0, 1, 0, 0, 0]);
        assert_eq!(log_lid(&s), lid::SMART);
        assert_eq!(log_lsp(&s), 5);
        assert!(log_rae(&s));
        assert_eq!(log_numd(&s), 0x1_2345);
        assert_eq!(log_len_bytes(&s), 0x1_2345 * 4);
        assert_eq!(log_lsi(&s), 0xABCD);
        assert_eq!(log_offset(&s), 0x1_0000_0200);
        s.set_cdw14(0x0280_0003);
        assert_eq!((log_csi(&s), log_ot(&s), log_uuid_index(&s)), (2, true, 3));
    }

    #[test]
    fn numd_math_without_overflow() {
        let mut s = sqe();
        assert_eq!(log_numd(&s), 1);
        assert_eq!(log_len_bytes(&s), 4);
        s.set_cdw10(0xFFFF_0000);
        s.set_cdw11(0x0000_FFFF);
        assert_eq!(log_numd_raw(&s), u32::MAX);
        assert_eq!(log_numd(&s), u32::MAX);
        assert_eq!(log_len_bytes(&s), 1u64 << 34);
        // 4096 bytes = 1024 dwords = NUMDL 1023.
        set_get_log_page(&mut s, lid::CMD_EFFECTS, 0, false, 1024, 0);
        assert_eq!(s.cdw10(), 0x03FF_0005);
        assert_eq!(s.cdw11() & 0xFFFF, 0);
        set_get_log_page(&mut s, lid::ERROR_INFO, 0, false, 0, 0);
        assert_eq!(log_numd(&s), 1);
    }

    #[test]
    fn features() {
        let mut s = sqe();
        s.set_cdw10(get_features_cdw10(fid::NUMBER_OF_QUEUES, sel::SUPPORTED));
        assert_eq!(s.cdw10(), 0x307);
        assert_eq!(feature_fid(&s), fid::NUMBER_OF_QUEUES);
        assert_eq!(feature_sel(&s), sel::SUPPORTED);
        assert!(!feature_sv(&s));
        s.set_cdw10(set_features_cdw10(fid::HOST_IDENTIFIER, true));
        assert_eq!(&s.as_bytes()[40..44], &[0x81, 0, 0, 0x80]);
        assert!(feature_sv(&s));
        s.set_cdw11(HOST_ID_EXHID);
        assert!(host_id_exhid(&s));
        assert_eq!(num_queues_encode(3, 7), 0x0007_0003);
        assert_eq!(num_queues_decode(0xFFFE_0001), (1, 0xFFFE));
    }

    #[test]
    fn aer_and_abort() {
        // Linux nvmet: NVME_AER_NOTICE | NVME_AER_NOTICE_NS_CHANGED << 8 | NVME_LOG_CHANGED_NS << 16
        assert_eq!(
            aer_result(
                aer_type::NOTICE,
                aer_notice::NS_ATTR_CHANGED,
                lid::CHANGED_NS
            ),
            0x0004_0002
        );
        assert_eq!(
            aer_result(
                aer_type::NOTICE,
                aer_notice::DISCOVERY_LOG_CHANGE,
                lid::DISCOVERY
            ),
            0x0070_F002
        );
        assert_eq!(aer_result_parts(0x0070_F002), (2, 0xF0, 0x70));
        assert_eq!(aen_cfg::DISCOVERY_LOG_CHANGE, 0x8000_0000);
        let mut s = sqe();
        s.set_opcode(opcode::ABORT);
        s.set_cdw10(0x0010_0002);
        assert_eq!((abort_sqid(&s), abort_cid(&s)), (2, 0x10));
    }
}
