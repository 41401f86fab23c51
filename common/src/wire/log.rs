//! Log pages: identifiers and views of the Error Information entry, SMART / Health
//! Information, Firmware Slot Information, Changed Namespace List, Commands Supported
//! and Effects, and the Discovery log page (Linux `struct nvme_error_slot`,
//! `struct nvme_smart_log`, `struct nvme_fw_slot_info_log`, `struct nvme_effects_log`,
//! `struct nvmf_disc_rsp_page_hdr`, `struct nvmf_disc_rsp_page_entry`).

use super::status::{ErrorLocation, Status};
use super::{field_to_string, get_bytes, get_bytes_n, get_u32, set_padded, set_u32, trim_field};
use super::{getters, setters, view};

/// Log page identifiers (Linux `NVME_LOG_*`).
pub mod lid {
    pub const SUPPORTED_LOGS: u8 = 0x00;
    pub const ERROR_INFO: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FW_SLOT: u8 = 0x03;
    pub const CHANGED_NS: u8 = 0x04;
    pub const CMD_EFFECTS: u8 = 0x05;
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    pub const TELEMETRY_HOST: u8 = 0x07;
    pub const TELEMETRY_CTRL: u8 = 0x08;
    pub const ENDURANCE_GROUP: u8 = 0x09;
    pub const ANA: u8 = 0x0C;
    pub const PERSISTENT_EVENT: u8 = 0x0D;
    pub const FEATURES_SUPPORTED: u8 = 0x12;
    pub const MI_CMD_EFFECTS: u8 = 0x13;
    pub const DISCOVERY: u8 = 0x70;
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
    pub const SANITIZE: u8 = 0x81;
}

// ---- Error Information ----

/// The length of one Error Information log entry.
pub const ERROR_INFO_ENTRY_LEN: usize = 64;

mod err_field {
    use core::ops::Range;
    pub const ERROR_COUNT: Range<usize> = 0..8;
    pub const SQID: Range<usize> = 8..10;
    pub const CMDID: Range<usize> = 10..12;
    pub const STATUS_FIELD: Range<usize> = 12..14;
    pub const PARAM_ERROR_LOCATION: Range<usize> = 14..16;
    pub const LBA: Range<usize> = 16..24;
    pub const NSID: Range<usize> = 24..28;
    pub const VS: Range<usize> = 28..29;
    pub const TRTYPE: Range<usize> = 29..30;
    pub const CSI: Range<usize> = 30..31;
    pub const OPCODE: Range<usize> = 31..32;
    pub const CS: Range<usize> = 32..40;
    pub const TRTYPE_SPEC_INFO: Range<usize> = 40..42;
    pub const LPV: Range<usize> = 63..64;
}

view!(
    /// A view of one 64-byte Error Information log entry.
    ErrorInfoEntry,
    ERROR_INFO_ENTRY_LEN
);

impl<T: AsRef<[u8]>> ErrorInfoEntry<T> {
    getters! {
        /// Error count (unique, increasing; 0 = entry unused).
        error_count: u64 = err_field::ERROR_COUNT,
        sqid: u16 = err_field::SQID,
        cmdid: u16 = err_field::CMDID,
        /// Bit 0 phase tag, bits 15:1 the status field.
        status_field: u16 = err_field::STATUS_FIELD,
        /// Bits 7:0 byte, 10:8 bit (see [`ErrorLocation::to_field`]).
        param_error_location: u16 = err_field::PARAM_ERROR_LOCATION,
        lba: u64 = err_field::LBA,
        nsid: u32 = err_field::NSID,
        /// Vendor specific information available (log page id, 0 = none).
        vs: u8 = err_field::VS,
        trtype: u8 = err_field::TRTYPE,
        csi: u8 = err_field::CSI,
        opcode: u8 = err_field::OPCODE,
        /// Command specific information.
        cs: u64 = err_field::CS,
        trtype_spec_info: u16 = err_field::TRTYPE_SPEC_INFO,
        /// Log page version.
        lpv: u8 = err_field::LPV,
    }

    /// The status (bits 15:1 of the status field).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_field() >> 1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ErrorInfoEntry<T> {
    setters! {
        set_error_count: u64 = err_field::ERROR_COUNT,
        set_sqid: u16 = err_field::SQID,
        set_cmdid: u16 = err_field::CMDID,
        set_status_field: u16 = err_field::STATUS_FIELD,
        set_param_error_location: u16 = err_field::PARAM_ERROR_LOCATION,
        set_lba: u64 = err_field::LBA,
        set_nsid: u32 = err_field::NSID,
        set_vs: u8 = err_field::VS,
        set_trtype: u8 = err_field::TRTYPE,
        set_csi: u8 = err_field::CSI,
        set_opcode: u8 = err_field::OPCODE,
        set_cs: u64 = err_field::CS,
        set_trtype_spec_info: u16 = err_field::TRTYPE_SPEC_INFO,
        set_lpv: u8 = err_field::LPV,
    }

    /// Sets the status field from a status and phase tag; also the parameter error
    /// location when the status carries one (0xFFFF otherwise, "not applicable").
    pub fn set_status(&mut self, s: Status, phase: bool) {
        self.set_status_field((s.to_field() << 1) | u16::from(phase));
        let loc = s
            .location
            .map_or(PARAM_ERROR_LOCATION_NONE, ErrorLocation::to_field);
        self.set_param_error_location(loc);
    }
}

/// Parameter error location value meaning "not specific to a field".
pub const PARAM_ERROR_LOCATION_NONE: u16 = 0xFFFF;

// ---- SMART / Health Information ----

/// The length of the SMART / Health Information log page.
pub const SMART_LOG_LEN: usize = 512;

mod smart_field {
    use core::ops::Range;
    pub const CRITICAL_WARNING: Range<usize> = 0..1;
    pub const TEMPERATURE: Range<usize> = 1..3;
    pub const AVAIL_SPARE: Range<usize> = 3..4;
    pub const SPARE_THRESH: Range<usize> = 4..5;
    pub const PERCENT_USED: Range<usize> = 5..6;
    pub const ENDU_GRP_CRIT_WARN_SUMRY: Range<usize> = 6..7;
    pub const DATA_UNITS_READ: Range<usize> = 32..48;
    pub const DATA_UNITS_WRITTEN: Range<usize> = 48..64;
    pub const HOST_READS: Range<usize> = 64..80;
    pub const HOST_WRITES: Range<usize> = 80..96;
    pub const CTRL_BUSY_TIME: Range<usize> = 96..112;
    pub const POWER_CYCLES: Range<usize> = 112..128;
    pub const POWER_ON_HOURS: Range<usize> = 128..144;
    pub const UNSAFE_SHUTDOWNS: Range<usize> = 144..160;
    pub const MEDIA_ERRORS: Range<usize> = 160..176;
    pub const NUM_ERR_LOG_ENTRIES: Range<usize> = 176..192;
    pub const WARNING_TEMP_TIME: Range<usize> = 192..196;
    pub const CRITICAL_COMP_TIME: Range<usize> = 196..200;
    pub const TEMP_SENSOR: usize = 200;
    pub const THM_TEMP1_TRANS_COUNT: Range<usize> = 216..220;
    pub const THM_TEMP2_TRANS_COUNT: Range<usize> = 220..224;
    pub const THM_TEMP1_TOTAL_TIME: Range<usize> = 224..228;
    pub const THM_TEMP2_TOTAL_TIME: Range<usize> = 228..232;
}

/// Number of temperature sensor fields in the SMART log.
pub const SMART_TEMP_SENSORS: usize = 8;

/// SMART critical warning bits (Linux `NVME_SMART_CRIT_*`).
pub mod critical_warning {
    pub const SPARE: u8 = 1 << 0;
    pub const TEMPERATURE: u8 = 1 << 1;
    pub const RELIABILITY: u8 = 1 << 2;
    pub const MEDIA: u8 = 1 << 3;
    pub const VOLATILE_MEMORY: u8 = 1 << 4;
    pub const PMR_READ_ONLY: u8 = 1 << 5;
}

view!(
    /// A view of the 512-byte SMART / Health Information log page.
    SmartLog,
    SMART_LOG_LEN
);

impl<T: AsRef<[u8]>> SmartLog<T> {
    getters! {
        critical_warning: u8 = smart_field::CRITICAL_WARNING,
        /// Composite temperature in kelvins.
        temperature: u16 = smart_field::TEMPERATURE,
        /// Available spare, percent.
        avail_spare: u8 = smart_field::AVAIL_SPARE,
        spare_thresh: u8 = smart_field::SPARE_THRESH,
        percent_used: u8 = smart_field::PERCENT_USED,
        endu_grp_crit_warn_sumry: u8 = smart_field::ENDU_GRP_CRIT_WARN_SUMRY,
        /// Thousands of 512-byte units read.
        data_units_read: u128 = smart_field::DATA_UNITS_READ,
        /// Thousands of 512-byte units written.
        data_units_written: u128 = smart_field::DATA_UNITS_WRITTEN,
        host_reads: u128 = smart_field::HOST_READS,
        host_writes: u128 = smart_field::HOST_WRITES,
        /// Minutes.
        ctrl_busy_time: u128 = smart_field::CTRL_BUSY_TIME,
        power_cycles: u128 = smart_field::POWER_CYCLES,
        power_on_hours: u128 = smart_field::POWER_ON_HOURS,
        unsafe_shutdowns: u128 = smart_field::UNSAFE_SHUTDOWNS,
        media_errors: u128 = smart_field::MEDIA_ERRORS,
        num_err_log_entries: u128 = smart_field::NUM_ERR_LOG_ENTRIES,
        /// Minutes.
        warning_temp_time: u32 = smart_field::WARNING_TEMP_TIME,
        /// Minutes.
        critical_comp_time: u32 = smart_field::CRITICAL_COMP_TIME,
        thm_temp1_trans_count: u32 = smart_field::THM_TEMP1_TRANS_COUNT,
        thm_temp2_trans_count: u32 = smart_field::THM_TEMP2_TRANS_COUNT,
        thm_temp1_total_time: u32 = smart_field::THM_TEMP1_TOTAL_TIME,
        thm_temp2_total_time: u32 = smart_field::THM_TEMP2_TOTAL_TIME,
    }

    /// Temperature sensor `i` (0..8, i.e. sensors 1..=8), kelvins; 0 = not present.
    pub fn temp_sensor(&self, i: usize) -> u16 {
        if i >= SMART_TEMP_SENSORS {
            return 0;
        }
        let o = smart_field::TEMP_SENSOR + 2 * i;
        super::get_u16(self.buffer.as_ref(), o..o + 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SmartLog<T> {
    setters! {
        set_critical_warning: u8 = smart_field::CRITICAL_WARNING,
        set_temperature: u16 = smart_field::TEMPERATURE,
        set_avail_spare: u8 = smart_field::AVAIL_SPARE,
        set_spare_thresh: u8 = smart_field::SPARE_THRESH,
        set_percent_used: u8 = smart_field::PERCENT_USED,
        set_endu_grp_crit_warn_sumry: u8 = smart_field::ENDU_GRP_CRIT_WARN_SUMRY,
        set_data_units_read: u128 = smart_field::DATA_UNITS_READ,
        set_data_units_written: u128 = smart_field::DATA_UNITS_WRITTEN,
        set_host_reads: u128 = smart_field::HOST_READS,
        set_host_writes: u128 = smart_field::HOST_WRITES,
        set_ctrl_busy_time: u128 = smart_field::CTRL_BUSY_TIME,
        set_power_cycles: u128 = smart_field::POWER_CYCLES,
        set_power_on_hours: u128 = smart_field::POWER_ON_HOURS,
        set_unsafe_shutdowns: u128 = smart_field::UNSAFE_SHUTDOWNS,
        set_media_errors: u128 = smart_field::MEDIA_ERRORS,
        set_num_err_log_entries: u128 = smart_field::NUM_ERR_LOG_ENTRIES,
        set_warning_temp_time: u32 = smart_field::WARNING_TEMP_TIME,
        set_critical_comp_time: u32 = smart_field::CRITICAL_COMP_TIME,
        set_thm_temp1_trans_count: u32 = smart_field::THM_TEMP1_TRANS_COUNT,
        set_thm_temp2_trans_count: u32 = smart_field::THM_TEMP2_TRANS_COUNT,
        set_thm_temp1_total_time: u32 = smart_field::THM_TEMP1_TOTAL_TIME,
        set_thm_temp2_total_time: u32 = smart_field::THM_TEMP2_TOTAL_TIME,
    }

    /// Sets temperature sensor `i` (0..8); no-op otherwise.
    pub fn set_temp_sensor(&mut self, i: usize, kelvin: u16) {
        if i < SMART_TEMP_SENSORS {
            let o = smart_field::TEMP_SENSOR + 2 * i;
            super::set_u16(self.buffer.as_mut(), o..o + 2, kelvin)
        }
    }
}

// ---- Firmware Slot Information ----

/// The length of the Firmware Slot Information log page.
pub const FW_SLOT_LOG_LEN: usize = 512;
/// Number of firmware slots described (1..=7).
pub const FW_SLOTS: usize = 7;
const FRS_OFFSET: usize = 8;
const FRS_LEN: usize = 8;

view!(
    /// A view of the 512-byte Firmware Slot Information log page.
    FwSlotLog,
    FW_SLOT_LOG_LEN
);

impl<T: AsRef<[u8]>> FwSlotLog<T> {
    /// Active firmware info: bits 2:0 active slot, bits 6:4 slot active at next reset.
    pub fn afi(&self) -> u8 {
        super::get_u8(self.buffer.as_ref(), 0)
    }
    /// The firmware revision in slot `slot` (1..=7; zeros otherwise).
    pub fn frs(&self, slot: usize) -> [u8; 8] {
        match frs_range(slot) {
            Some(r) => get_bytes_n(self.buffer.as_ref(), r),
            None => [0; FRS_LEN],
        }
    }
    /// The firmware revision in slot `slot`, trimmed.
    pub fn frs_string(&self, slot: usize) -> String {
        field_to_string(&self.frs(slot))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FwSlotLog<T> {
    pub fn set_afi(&mut self, v: u8) {
        super::set_u8(self.buffer.as_mut(), 0, v)
    }
    /// Sets slot `slot` (1..=7): ASCII, space-padded; an empty revision is all zeros
    /// (the spec's "no valid firmware").
    pub fn set_frs(&mut self, slot: usize, rev: &str) {
        if let Some(r) = frs_range(slot) {
            let pad = if rev.is_empty() { 0 } else { b' ' };
            set_padded(self.buffer.as_mut(), r, rev.as_bytes(), pad)
        }
    }
}

fn frs_range(slot: usize) -> Option<core::ops::Range<usize>> {
    if (1..=FW_SLOTS).contains(&slot) {
        let o = FRS_OFFSET + FRS_LEN * (slot - 1);
        Some(o..o + FRS_LEN)
    } else {
        None
    }
}

/// AFI value: active slot `active` and (optionally) the slot to activate at next reset.
pub const fn fw_afi(active: u8, next: u8) -> u8 {
    (active & 0x7) | ((next & 0x7) << 4)
}

// ---- Changed Namespace List ----

/// The maximum number of namespace IDs in a Changed Namespace List.
pub const CHANGED_NS_LIST_MAX: usize = 1024;
/// The length of the Changed Namespace List log page.
pub const CHANGED_NS_LIST_LEN: usize = CHANGED_NS_LIST_MAX * 4;
/// The first entry when more than 1024 namespaces changed.
pub const CHANGED_NS_LIST_OVERFLOW: u32 = 0xFFFF_FFFF;

/// Writes a Changed Namespace List into `out` (normally 4096 bytes): the NSIDs, then
/// zeros; more NSIDs than fit in `out` (or than 1024) give the overflow marker.
/// Returns the number of entries written (1 for overflow).
pub fn write_changed_ns_list(out: &mut [u8], nsids: &[u32]) -> usize {
    out.fill(0);
    let cap = (out.len() / 4).min(CHANGED_NS_LIST_MAX);
    if nsids.len() > cap {
        set_u32(out, 0..4, CHANGED_NS_LIST_OVERFLOW);
        return 1;
    }
    for (i, &id) in nsids.iter().enumerate() {
        set_u32(out, i * 4..i * 4 + 4, id);
    }
    nsids.len()
}

/// Reads a Changed Namespace List: the NSIDs up to the first zero (at most 1024).
/// An overflowed list reads as `[CHANGED_NS_LIST_OVERFLOW]`.
pub fn parse_changed_ns_list(data: &[u8]) -> Vec<u32> {
    data.chunks_exact(4)
        .take(CHANGED_NS_LIST_MAX)
        .map(|c| get_u32(c, 0..4))
        .take_while(|&id| id != 0)
        .collect()
}

// ---- Commands Supported and Effects ----

/// The length of the Commands Supported and Effects log page.
pub const CMD_EFFECTS_LOG_LEN: usize = 4096;
const IOCS_OFFSET: usize = 1024;

/// Command effects bits (Linux `NVME_CMD_EFFECTS_*`).
pub mod effects {
    /// Command supported.
    pub const CSUPP: u32 = 1 << 0;
    /// Logical block content change.
    pub const LBCC: u32 = 1 << 1;
    /// Namespace capability change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace inventory change.
    pub const NIC: u32 = 1 << 3;
    /// Controller capability change.
    pub const CCC: u32 = 1 << 4;
    /// Command submission and execution relaxations (bits 15:14).
    pub const CSER_MASK: u32 = 0x3 << 14;
    /// Command submission and execution (bits 18:16).
    pub const CSE_MASK: u32 = 0x7 << 16;
    /// CSE: no other command to the same namespace while this one runs.
    pub const CSE_SINGLE_NS: u32 = 1 << 16;
    /// CSE: no other command to any namespace while this one runs.
    pub const CSE_SINGLE_CMD: u32 = 2 << 16;
    /// UUID selection supported.
    pub const UUID_SEL: u32 = 1 << 19;
    /// Command scope (bits 31:20; the bits are [`crate::wire::supported::scope`]).
    pub const CSP_MASK: u32 = 0xFFF << 20;
}

view!(
    /// A view of the 4096-byte Commands Supported and Effects log page.
    CmdEffectsLog,
    CMD_EFFECTS_LOG_LEN
);

impl<T: AsRef<[u8]>> CmdEffectsLog<T> {
    /// Admin command `opcode` effects.
    pub fn acs(&self, opcode: u8) -> u32 {
        let o = usize::from(opcode) * 4;
        get_u32(self.buffer.as_ref(), o..o + 4)
    }
    /// I/O command `opcode` effects.
    pub fn iocs(&self, opcode: u8) -> u32 {
        let o = IOCS_OFFSET + usize::from(opcode) * 4;
        get_u32(self.buffer.as_ref(), o..o + 4)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmdEffectsLog<T> {
    pub fn set_acs(&mut self, opcode: u8, v: u32) {
        let o = usize::from(opcode) * 4;
        set_u32(self.buffer.as_mut(), o..o + 4, v)
    }
    pub fn set_iocs(&mut self, opcode: u8, v: u32) {
        let o = IOCS_OFFSET + usize::from(opcode) * 4;
        set_u32(self.buffer.as_mut(), o..o + 4, v)
    }
}

// ---- Discovery log page ----

/// The length of the discovery log page header.
pub const DISC_LOG_HEADER_LEN: usize = 1024;
/// The length of one discovery log page entry.
pub const DISC_LOG_ENTRY_LEN: usize = 1024;

/// The length of a discovery log page with `numrec` entries.
pub const fn disc_log_len(numrec: usize) -> usize {
    DISC_LOG_HEADER_LEN + numrec * DISC_LOG_ENTRY_LEN
}

/// The byte offset of entry `i` in a discovery log page.
pub const fn disc_log_entry_offset(i: usize) -> usize {
    DISC_LOG_HEADER_LEN + i * DISC_LOG_ENTRY_LEN
}

mod disc_hdr_field {
    use core::ops::Range;
    pub const GENCTR: Range<usize> = 0..8;
    pub const NUMREC: Range<usize> = 8..16;
    pub const RECFMT: Range<usize> = 16..18;
}

view!(
    /// A view of the discovery log page header.
    DiscoveryLogHeader,
    DISC_LOG_HEADER_LEN
);

impl<T: AsRef<[u8]>> DiscoveryLogHeader<T> {
    getters! {
        /// Generation counter (changes whenever the log changes).
        genctr: u64 = disc_hdr_field::GENCTR,
        /// Number of records.
        numrec: u64 = disc_hdr_field::NUMREC,
        /// Record format (0).
        recfmt: u16 = disc_hdr_field::RECFMT,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DiscoveryLogHeader<T> {
    setters! {
        set_genctr: u64 = disc_hdr_field::GENCTR,
        set_numrec: u64 = disc_hdr_field::NUMREC,
        set_recfmt: u16 = disc_hdr_field::RECFMT,
    }
}

mod disc_entry_field {
    use core::ops::Range;
    pub const TRTYPE: Range<usize> = 0..1;
    pub const ADRFAM: Range<usize> = 1..2;
    pub const SUBTYPE: Range<usize> = 2..3;
    pub const TREQ: Range<usize> = 3..4;
    pub const PORTID: Range<usize> = 4..6;
    pub const CNTLID: Range<usize> = 6..8;
    pub const ASQSZ: Range<usize> = 8..10;
    pub const EFLAGS: Range<usize> = 10..12;
    pub const TRSVCID: Range<usize> = 32..64;
    pub const SUBNQN: Range<usize> = 256..512;
    pub const TRADDR: Range<usize> = 512..768;
    pub const TSAS: Range<usize> = 768..1024;
    pub const RDMA_QPTYPE: Range<usize> = 768..769;
    pub const RDMA_PRTYPE: Range<usize> = 769..770;
    pub const RDMA_CMS: Range<usize> = 770..771;
    pub const RDMA_PKEY: Range<usize> = 776..778;
    pub const TCP_SECTYPE: Range<usize> = 768..769;
}

/// Transport types (Linux `NVMF_TRTYPE_*`).
pub mod trtype {
    pub const PCI: u8 = 0;
    pub const RDMA: u8 = 1;
    pub const FC: u8 = 2;
    pub const TCP: u8 = 3;
    pub const LOOP: u8 = 254;
}

/// Address families (Linux `NVMF_ADDR_FAMILY_*`).
pub mod adrfam {
    pub const PCI: u8 = 0;
    pub const IPV4: u8 = 1;
    pub const IPV6: u8 = 2;
    pub const IB: u8 = 3;
    pub const FC: u8 = 4;
    pub const LOOP: u8 = 254;
}

/// Subsystem types (Linux `enum nvme_subsys_type`).
pub mod subtype {
    /// Referral to another discovery subsystem.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVME: u8 = 2;
    /// The discovery subsystem being queried.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport requirements (Linux `NVMF_TREQ_*`): bits 1:0 secure channel, bit 2
/// SQ flow control disable supported.
pub mod treq {
    pub const NOT_SPECIFIED: u8 = 0;
    pub const REQUIRED: u8 = 1;
    pub const NOT_REQUIRED: u8 = 2;
    pub const SECURE_CHANNEL_MASK: u8 = 0x3;
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
}

/// Entry flags (Linux `NVME_DISC_EFLAGS_*`).
pub mod eflags {
    /// Duplicate returned information.
    pub const DUPRETINFO: u16 = 1 << 0;
    /// Explicit persistent connection support for discovery.
    pub const EPCSD: u16 = 1 << 1;
    /// No CDC connectivity.
    pub const NCC: u16 = 1 << 2;
}

/// RDMA TSAS QP service types (Linux `NVMF_RDMA_QPTYPE_*`).
pub mod rdma_qptype {
    pub const CONNECTED: u8 = 1;
    pub const DATAGRAM: u8 = 2;
}

/// RDMA TSAS provider types (Linux `NVMF_RDMA_PRTYPE_*`).
pub mod rdma_prtype {
    pub const NOT_SPECIFIED: u8 = 1;
    pub const IB: u8 = 2;
    pub const ROCE: u8 = 3;
    pub const ROCEV2: u8 = 4;
    pub const IWARP: u8 = 5;
}

/// RDMA TSAS connection management services (Linux `NVMF_RDMA_CMS_*`).
pub mod rdma_cms {
    pub const RDMA_CM: u8 = 1;
}

/// TCP TSAS security types (Linux `NVMF_TCP_SECTYPE_*`).
pub mod tcp_sectype {
    pub const NONE: u8 = 0;
    pub const TLS12: u8 = 1;
    pub const TLS13: u8 = 2;
}

view!(
    /// A view of one 1024-byte discovery log page entry.
    DiscoveryLogEntry,
    DISC_LOG_ENTRY_LEN
);

impl<T: AsRef<[u8]>> DiscoveryLogEntry<T> {
    getters! {
        trtype: u8 = disc_entry_field::TRTYPE,
        adrfam: u8 = disc_entry_field::ADRFAM,
        subtype: u8 = disc_entry_field::SUBTYPE,
        treq: u8 = disc_entry_field::TREQ,
        portid: u16 = disc_entry_field::PORTID,
        cntlid: u16 = disc_entry_field::CNTLID,
        /// Admin max SQ size (1-based).
        asqsz: u16 = disc_entry_field::ASQSZ,
        eflags: u16 = disc_entry_field::EFLAGS,
        rdma_qptype: u8 = disc_entry_field::RDMA_QPTYPE,
        rdma_prtype: u8 = disc_entry_field::RDMA_PRTYPE,
        rdma_cms: u8 = disc_entry_field::RDMA_CMS,
        rdma_pkey: u16 = disc_entry_field::RDMA_PKEY,
        tcp_sectype: u8 = disc_entry_field::TCP_SECTYPE,
    }

    /// The raw 32-byte transport service id field.
    pub fn trsvcid_field(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), disc_entry_field::TRSVCID)
    }
    /// The raw 256-byte subsystem NQN field.
    pub fn subnqn_field(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), disc_entry_field::SUBNQN)
    }
    /// The raw 256-byte transport address field.
    pub fn traddr_field(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), disc_entry_field::TRADDR)
    }
    /// The raw 256-byte transport specific address subtype field.
    pub fn tsas(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), disc_entry_field::TSAS)
    }
    /// Transport service id without NUL / space padding.
    pub fn trsvcid(&self) -> String {
        field_to_string(self.trsvcid_field())
    }
    /// Subsystem NQN without NUL / space padding.
    pub fn subnqn(&self) -> String {
        field_to_string(self.subnqn_field())
    }
    /// Transport address without NUL / space padding.
    pub fn traddr(&self) -> String {
        field_to_string(self.traddr_field())
    }
    /// Transport service id bytes without padding.
    pub fn trsvcid_bytes(&self) -> &[u8] {
        trim_field(self.trsvcid_field())
    }
    /// Transport address bytes without padding.
    pub fn traddr_bytes(&self) -> &[u8] {
        trim_field(self.traddr_field())
    }
    /// Subsystem NQN bytes without padding.
    pub fn subnqn_bytes(&self) -> &[u8] {
        trim_field(self.subnqn_field())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DiscoveryLogEntry<T> {
    setters! {
        set_trtype: u8 = disc_entry_field::TRTYPE,
        set_adrfam: u8 = disc_entry_field::ADRFAM,
        set_subtype: u8 = disc_entry_field::SUBTYPE,
        set_treq: u8 = disc_entry_field::TREQ,
        set_portid: u16 = disc_entry_field::PORTID,
        set_cntlid: u16 = disc_entry_field::CNTLID,
        set_asqsz: u16 = disc_entry_field::ASQSZ,
        set_eflags: u16 = disc_entry_field::EFLAGS,
        set_rdma_qptype: u8 = disc_entry_field::RDMA_QPTYPE,
        set_rdma_prtype: u8 = disc_entry_field::RDMA_PRTYPE,
        set_rdma_cms: u8 = disc_entry_field::RDMA_CMS,
        set_rdma_pkey: u16 = disc_entry_field::RDMA_PKEY,
        set_tcp_sectype: u8 = disc_entry_field::TCP_SECTYPE,
    }

    /// Sets the transport service id, NUL-padded as Linux nvmet does (truncated to
    /// the field minus one byte to keep a NUL).
    pub fn set_trsvcid(&mut self, v: &str) {
        set_nul_terminated(self.buffer.as_mut(), disc_entry_field::TRSVCID, v)
    }
    /// Sets the subsystem NQN, NUL-padded.
    pub fn set_subnqn(&mut self, v: &str) {
        set_nul_terminated(self.buffer.as_mut(), disc_entry_field::SUBNQN, v)
    }
    /// Sets the transport address, NUL-padded.
    pub fn set_traddr(&mut self, v: &str) {
        set_nul_terminated(self.buffer.as_mut(), disc_entry_field::TRADDR, v)
    }
    /// Zeroes the whole TSAS field.
    pub fn clear_tsas(&mut self) {
        set_padded(self.buffer.as_mut(), disc_entry_field::TSAS, &[], 0)
    }
}

fn set_nul_terminated(buf: &mut [u8], r: core::ops::Range<usize>, v: &str) {
    let b = v.as_bytes();
    let n = b.len().min(r.len().saturating_sub(1));
    set_padded(buf, r, &b[..n], 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::status::{generic, Sct};
    use crate::wire::WireError;

    #[test]
    fn error_info_golden() {
        let mut e = ErrorInfoEntry::new_unchecked([0u8; ERROR_INFO_ENTRY_LEN]);
        e.set_error_count(0x0102_0304_0506_0708);
        e.set_sqid(1);
        e.set_cmdid(0xBEEF);
        e.set_status(Status::generic_dnr(generic::INVALID_FIELD).at(44, 3), true);
        e.set_lba(0x10);
        e.set_nsid(5);
        e.set_vs(0);
        e.set_trtype(trtype::RDMA);
        e.set_csi(0);
        e.set_opcode(0x02);
        e.set_cs(0xAA);
        e.set_trtype_spec_info(0x1234);
        e.set_lpv(1);
        let b = e.as_bytes();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[8..12], &[1, 0, 0xEF, 0xBE]);
        // 0x4002 << 1 | phase = 0x8005.
        assert_eq!(&b[12..14], &[0x05, 0x80]);
        assert_eq!(&b[14..16], &[0x2C, 0x03]);
        assert_eq!(&b[16..24], &[0x10, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[5, 0, 0, 0, 0, 1, 0, 2]);
        assert_eq!(&b[32..40], &[0xAA, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[40..42], &[0x34, 0x12]);
        assert_eq!(b[63], 1);
        let s = e.status();
        assert!(s.dnr && s.is(Sct::Generic, generic::INVALID_FIELD));
        assert!(ErrorInfoEntry::new_checked(&b[..63]).is_err());
        e.set_status(Status::SUCCESS, false);
        assert_eq!(e.param_error_location(), PARAM_ERROR_LOCATION_NONE);
    }

    #[test]
    fn smart_golden() {
        let mut s = SmartLog::new_unchecked(vec![0u8; SMART_LOG_LEN]);
        s.set_critical_warning(critical_warning::TEMPERATURE);
        s.set_temperature(300);
        s.set_avail_spare(100);
        s.set_spare_thresh(10);
        s.set_percent_used(3);
        s.set_data_units_read(0x0102_0304_0506_0708_090A_0B0C_0D0E_0F10);
        s.set_data_units_written(7);
        s.set_host_reads(1);
        s.set_host_writes(2);
        s.set_power_on_hours(9);
        s.set_num_err_log_entries(4);
        s.set_warning_temp_time(5);
        s.set_critical_comp_time(6);
        s.set_temp_sensor(0, 310);
        s.set_temp_sensor(7, 320);
        s.set_temp_sensor(8, 999);
        s.set_thm_temp2_total_time(0xAABB);
        let b = s.as_bytes();
        assert_eq!(&b[0..6], &[0x02, 0x2C, 0x01, 100, 10, 3]);
        assert_eq!(b[32], 0x10);
        assert_eq!(b[47], 0x01);
        assert_eq!(b[48], 7);
        assert_eq!(b[64], 1);
        assert_eq!(b[80], 2);
        assert_eq!(b[128], 9);
        assert_eq!(b[176], 4);
        assert_eq!(&b[192..200], &[5, 0, 0, 0, 6, 0, 0, 0]);
        assert_eq!(&b[200..202], &[0x36, 0x01]);
        assert_eq!(&b[214..216], &[0x40, 0x01]);
        assert_eq!(&b[228..232], &[0xBB, 0xAA, 0, 0]);
        assert!(b[232..].iter().all(|&x| x == 0));
        assert_eq!(
            s.data_units_read(),
            0x0102_0304_0506_0708_090A_0B0C_0D0E_0F10
        );
        assert_eq!(s.temp_sensor(7), 320);
        assert_eq!(s.temp_sensor(8), 0);
        assert_eq!(s.temperature(), 300);
    }

    #[test]
    fn fw_slot_golden() {
        let mut f = FwSlotLog::new_unchecked([0u8; FW_SLOT_LOG_LEN]);
        f.set_afi(fw_afi(1, 0));
        f.set_frs(1, "1.0");
        f.set_frs(7, "LASTSLOT9");
        f.set_frs(0, "bad");
        f.set_frs(8, "bad");
        let b = f.as_bytes();
        assert_eq!(b[0], 1);
        assert_eq!(&b[8..16], b"1.0     ");
        assert_eq!(&b[56..64], b"LASTSLOT");
        assert!(b[16..56].iter().all(|&x| x == 0));
        assert_eq!(f.frs_string(1), "1.0");
        assert_eq!(f.frs(0), [0; 8]);
        assert_eq!(fw_afi(2, 3), 0x32);
    }

    #[test]
    fn changed_ns_list() {
        let mut out = vec![0xFFu8; CHANGED_NS_LIST_LEN];
        assert_eq!(write_changed_ns_list(&mut out, &[1, 7]), 2);
        assert_eq!(&out[..12], &[1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse_changed_ns_list(&out), vec![1, 7]);
        let many: Vec<u32> = (1..=1025).collect();
        assert_eq!(write_changed_ns_list(&mut out, &many), 1);
        assert_eq!(&out[..8], &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
        assert_eq!(parse_changed_ns_list(&out), vec![CHANGED_NS_LIST_OVERFLOW]);
        let all: Vec<u32> = (1..=1024).collect();
        assert_eq!(write_changed_ns_list(&mut out, &all), 1024);
        assert_eq!(parse_changed_ns_list(&out).len(), 1024);
        assert_eq!(parse_changed_ns_list(&[1, 0, 0]), Vec::<u32>::new());
    }

    #[test]
    fn cmd_effects_golden() {
        let mut l = CmdEffectsLog::new_unchecked(vec![0u8; CMD_EFFECTS_LOG_LEN]);
        l.set_acs(0x06, effects::CSUPP);
        l.set_acs(0xFF, effects::CSUPP | effects::CCC);
        l.set_iocs(0x01, effects::CSUPP | effects::LBCC);
        l.set_iocs(0xFF, effects::CSE_SINGLE_CMD);
        let b = l.as_bytes();
        assert_eq!(&b[24..28], &[1, 0, 0, 0]);
        assert_eq!(&b[1020..1024], &[0x11, 0, 0, 0]);
        assert_eq!(&b[1028..1032], &[3, 0, 0, 0]);
        assert_eq!(&b[2044..2048], &[0, 0, 2, 0]);
        assert_eq!(l.iocs(0x01), 3);
        assert_eq!(l.acs(0x06), 1);
        assert_eq!(l.acs(0x07), 0);
    }

    #[test]
    fn discovery_layout() {
        let mut page = vec![0u8; disc_log_len(2)];
        {
            let mut h = DiscoveryLogHeader::new_unchecked(&mut page[..DISC_LOG_HEADER_LEN]);
            h.set_genctr(0x11);
            h.set_numrec(2);
            h.set_recfmt(0);
        }
        let off = disc_log_entry_offset(1);
        {
            let mut e = DiscoveryLogEntry::new_checked(&mut page[off..]).unwrap();
            e.set_trtype(trtype::RDMA);
            e.set_adrfam(adrfam::IPV4);
            e.set_subtype(subtype::NVME);
            e.set_treq(treq::NOT_SPECIFIED | treq::DISABLE_SQFLOW);
            e.set_portid(1);
            e.set_cntlid(0xFFFF);
            e.set_asqsz(32);
            e.set_eflags(eflags::EPCSD);
            e.set_trsvcid("4420");
            e.set_subnqn("nqn.2024-01.io.example:sub1");
            e.set_traddr("192.168.0.10");
            e.set_rdma_qptype(rdma_qptype::CONNECTED);
            e.set_rdma_prtype(rdma_prtype::NOT_SPECIFIED);
            e.set_rdma_cms(rdma_cms::RDMA_CM);
            e.set_rdma_pkey(0xFFFF);
        }
        assert_eq!(
            &page[0..18],
            &[0x11, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let e = &page[off..];
        assert_eq!(&e[0..12], &[1, 1, 2, 4, 1, 0, 0xFF, 0xFF, 32, 0, 2, 0]);
        assert_eq!(&e[32..37], b"4420\0");
        assert!(e[36..64].iter().all(|&x| x == 0));
        assert_eq!(&e[256..260], b"nqn.");
        assert_eq!(&e[512..524], b"192.168.0.10");
        assert_eq!(e[524], 0);
        assert_eq!(&e[768..771], &[1, 1, 1]);
        assert_eq!(&e[776..778], &[0xFF, 0xFF]);
        let p = DiscoveryLogEntry::new_checked(e).unwrap();
        assert_eq!(p.trsvcid(), "4420");
        assert_eq!(p.traddr(), "192.168.0.10");
        assert_eq!(p.subnqn(), "nqn.2024-01.io.example:sub1");
        assert_eq!(p.traddr_bytes(), b"192.168.0.10");
        assert_eq!(p.tsas().len(), 256);
        assert_eq!(p.tcp_sectype(), 1);
        let h = DiscoveryLogHeader::new_checked(&page[..]).unwrap();
        assert_eq!((h.genctr(), h.numrec(), h.recfmt()), (0x11, 2, 0));
        // Space-padded fields from other targets are trimmed too.
        let mut sp = DiscoveryLogEntry::new_unchecked(vec![0u8; DISC_LOG_ENTRY_LEN]);
        sp.as_bytes_mut()[32..64].copy_from_slice(&[b' '; 32]);
        sp.as_bytes_mut()[32..36].copy_from_slice(b"4420");
        assert_eq!(sp.trsvcid(), "4420");
        assert_eq!(
            DiscoveryLogEntry::new_checked(&page[off + 1..]).err(),
            Some(WireError::Truncated {
                need: 1024,
                have: 1023
            })
        );
    }
}
