//! NVMe completion status: Status Code Type (SCT), Status Code (SC), Do Not Retry,
//! More, Command Retry Delay, plus where in the command the error was found.
//!
//! The 15-bit status field (CQE DW3 bits 31:17, i.e. Linux `le16 status >> 1`):
//! SC bits 7:0, SCT bits 10:8, CRD bits 12:11, M bit 13, DNR bit 14.

use std::fmt;

/// Status Code Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sct {
    Generic,
    CommandSpecific,
    MediaError,
    PathRelated,
    VendorSpecific,
    /// A value the spec reserves; kept so nothing is lost on parse.
    Reserved(u8),
}

impl Sct {
    pub const fn from_bits(v: u8) -> Sct {
        match v & 0x7 {
            0 => Sct::Generic,
            1 => Sct::CommandSpecific,
            2 => Sct::MediaError,
            3 => Sct::PathRelated,
            7 => Sct::VendorSpecific,
            other => Sct::Reserved(other),
        }
    }
    pub const fn bits(self) -> u8 {
        match self {
            Sct::Generic => 0,
            Sct::CommandSpecific => 1,
            Sct::MediaError => 2,
            Sct::PathRelated => 3,
            Sct::VendorSpecific => 7,
            Sct::Reserved(v) => v & 0x7,
        }
    }
}

/// Generic Command Status values (SCT 0), NVMe Base spec Figure "Generic Command Status".
pub mod generic {
    pub const SUCCESS: u8 = 0x00;
    pub const INVALID_OPCODE: u8 = 0x01;
    pub const INVALID_FIELD: u8 = 0x02;
    pub const CID_CONFLICT: u8 = 0x03;
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    pub const ABORTED_POWER_LOSS: u8 = 0x05;
    pub const INTERNAL_ERROR: u8 = 0x06;
    pub const ABORT_REQUESTED: u8 = 0x07;
    pub const ABORTED_SQ_DELETION: u8 = 0x08;
    pub const ABORTED_FUSED_FAIL: u8 = 0x09;
    pub const ABORTED_FUSED_MISSING: u8 = 0x0A;
    pub const INVALID_NAMESPACE: u8 = 0x0B;
    pub const COMMAND_SEQUENCE_ERROR: u8 = 0x0C;
    pub const INVALID_SGL_LAST_SEGMENT: u8 = 0x0D;
    pub const INVALID_SGL_COUNT: u8 = 0x0E;
    pub const DATA_SGL_LENGTH_INVALID: u8 = 0x0F;
    pub const METADATA_SGL_LENGTH_INVALID: u8 = 0x10;
    pub const SGL_DESCRIPTOR_TYPE_INVALID: u8 = 0x11;
    pub const INVALID_CMB_USE: u8 = 0x12;
    pub const PRP_OFFSET_INVALID: u8 = 0x13;
    pub const ATOMIC_WRITE_UNIT_EXCEEDED: u8 = 0x14;
    pub const OPERATION_DENIED: u8 = 0x15;
    pub const SGL_OFFSET_INVALID: u8 = 0x16;
    pub const HOST_ID_INCONSISTENT_FORMAT: u8 = 0x18;
    pub const KEEP_ALIVE_TIMER_EXPIRED: u8 = 0x19;
    pub const KEEP_ALIVE_TIMEOUT_INVALID: u8 = 0x1A;
    pub const ABORTED_PREEMPT_ABORT: u8 = 0x1B;
    pub const SANITIZE_FAILED: u8 = 0x1C;
    pub const SANITIZE_IN_PROGRESS: u8 = 0x1D;
    pub const SGL_DATA_BLOCK_GRANULARITY_INVALID: u8 = 0x1E;
    pub const NS_WRITE_PROTECTED: u8 = 0x20;
    pub const COMMAND_INTERRUPTED: u8 = 0x21;
    pub const TRANSIENT_TRANSPORT_ERROR: u8 = 0x22;
    // NVM command set generic status values.
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    pub const CAPACITY_EXCEEDED: u8 = 0x81;
    pub const NS_NOT_READY: u8 = 0x82;
    pub const RESERVATION_CONFLICT: u8 = 0x83;
    pub const FORMAT_IN_PROGRESS: u8 = 0x84;
}

/// Command Specific Status values (SCT 1).
pub mod cmd_specific {
    pub const COMPLETION_QUEUE_INVALID: u8 = 0x00;
    pub const INVALID_QUEUE_IDENTIFIER: u8 = 0x01;
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    pub const ABORT_COMMAND_LIMIT_EXCEEDED: u8 = 0x03;
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: u8 = 0x05;
    pub const INVALID_FIRMWARE_SLOT: u8 = 0x06;
    pub const INVALID_FIRMWARE_IMAGE: u8 = 0x07;
    pub const INVALID_INTERRUPT_VECTOR: u8 = 0x08;
    pub const INVALID_LOG_PAGE: u8 = 0x09;
    pub const INVALID_FORMAT: u8 = 0x0A;
    pub const FEATURE_ID_NOT_SAVEABLE: u8 = 0x0D;
    pub const FEATURE_NOT_CHANGEABLE: u8 = 0x0E;
    pub const FEATURE_NOT_NAMESPACE_SPECIFIC: u8 = 0x0F;
    // Fabrics command specific status values (Connect, Property Get/Set, ...).
    pub const CONNECT_INCOMPATIBLE_FORMAT: u8 = 0x80;
    pub const CONNECT_CONTROLLER_BUSY: u8 = 0x81;
    pub const CONNECT_INVALID_PARAMETERS: u8 = 0x82;
    pub const CONNECT_RESTART_DISCOVERY: u8 = 0x83;
    pub const CONNECT_INVALID_HOST: u8 = 0x84;
    pub const INVALID_QUEUE_TYPE: u8 = 0x85;
    pub const DISCOVER_RESTART: u8 = 0x90;
    pub const AUTH_REQUIRED: u8 = 0x91;
    // NVM command set command specific values.
    pub const CONFLICTING_ATTRIBUTES: u8 = 0x80;
    pub const INVALID_PROTECTION_INFORMATION: u8 = 0x81;
    pub const WRITE_TO_READ_ONLY_RANGE: u8 = 0x82;
    /// Copy: more source ranges than MSRC, a range longer than MSSRL, or more blocks
    /// in all than MCL (NVM Command Set, Linux `NVME_SC_CMD_SIZE_LIM_EXCEEDED`).
    pub const COMMAND_SIZE_LIMIT_EXCEEDED: u8 = 0x83;
}

/// Media and Data Integrity Error values (SCT 2).
pub mod media {
    pub const WRITE_FAULT: u8 = 0x80;
    pub const UNRECOVERED_READ_ERROR: u8 = 0x81;
    pub const END_TO_END_GUARD_CHECK: u8 = 0x82;
    pub const END_TO_END_APPLICATION_TAG_CHECK: u8 = 0x83;
    pub const END_TO_END_REFERENCE_TAG_CHECK: u8 = 0x84;
    pub const COMPARE_FAILURE: u8 = 0x85;
    pub const ACCESS_DENIED: u8 = 0x86;
    pub const DEALLOCATED_OR_UNWRITTEN_BLOCK: u8 = 0x87;
}

/// Path Related Status values (SCT 3).
pub mod path {
    pub const INTERNAL_PATH_ERROR: u8 = 0x00;
    pub const ASYMMETRIC_ACCESS_PERSISTENT_LOSS: u8 = 0x01;
    pub const ASYMMETRIC_ACCESS_INACCESSIBLE: u8 = 0x02;
    pub const ASYMMETRIC_ACCESS_TRANSITION: u8 = 0x03;
    pub const CONTROLLER_PATHING_ERROR: u8 = 0x60;
    pub const HOST_PATHING_ERROR: u8 = 0x70;
    /// The host aborted the command (Linux `NVME_SC_HOST_ABORTED_CMD`), e.g. on timeout.
    pub const COMMAND_ABORTED_BY_HOST: u8 = 0x71;
}

/// Where in a command (or its data) an error was found: the Error Information log's
/// Parameter Error Location (byte offset in the SQE, bit number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorLocation {
    pub byte: u16,
    pub bit: u8,
}

impl ErrorLocation {
    pub const fn new(byte: u16, bit: u8) -> Self {
        ErrorLocation { byte, bit }
    }
    /// The log page encoding: bits 7:0 byte, bits 10:8 bit.
    pub const fn to_field(self) -> u16 {
        (self.byte & 0xFF) | (((self.bit as u16) & 0x7) << 8)
    }
}

/// A completion status as returned to a peer.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    pub sct: Sct,
    pub sc: u8,
    pub crd: u8,
    pub more: bool,
    pub dnr: bool,
    /// Not on the wire in the CQE; recorded in the Error Information log page.
    pub location: Option<ErrorLocation>,
}

const SC_MASK: u16 = 0xFF;
const SCT_SHIFT: u16 = 8;
const CRD_SHIFT: u16 = 11;
const MORE_BIT: u16 = 1 << 13;
const DNR_BIT: u16 = 1 << 14;

impl Status {
    /// Successful completion (DNR clear).
    pub const SUCCESS: Status = Status::build(Sct::Generic, generic::SUCCESS, false);

    /// The one place a status is assembled; every public constructor says what DNR is.
    const fn build(sct: Sct, sc: u8, dnr: bool) -> Status {
        Status {
            sct,
            sc,
            crd: 0,
            more: false,
            dnr,
            location: None,
        }
    }

    /// A status with Do Not Retry set: the same command would fail again (a malformed
    /// or unsupported command, a permanent condition), so the host must not retry it.
    pub const fn dnr(sct: Sct, sc: u8) -> Status {
        Status::build(sct, sc, true)
    }

    /// A status with Do Not Retry clear: the condition may be transient, so the host
    /// may retry the command (here or on another path).
    pub const fn retryable(sct: Sct, sc: u8) -> Status {
        Status::build(sct, sc, false)
    }

    /// A generic status (SCT 0) with Do Not Retry set; see [`Status::dnr`].
    pub const fn generic_dnr(sc: u8) -> Status {
        Status::dnr(Sct::Generic, sc)
    }

    /// A generic status (SCT 0) with Do Not Retry clear; see [`Status::retryable`].
    pub const fn generic_retryable(sc: u8) -> Status {
        Status::retryable(Sct::Generic, sc)
    }

    /// A command-specific status (SCT 1) with Do Not Retry set; see [`Status::dnr`].
    /// Used for the command-specific failures this crate reports (an unknown log
    /// page, a refused Connect, a feature that cannot be saved), which would fail
    /// again if the same command were resent.
    pub const fn cmd_specific_dnr(sc: u8) -> Status {
        Status::dnr(Sct::CommandSpecific, sc)
    }

    /// A media and data integrity error status (SCT 2) with Do Not Retry clear; see
    /// [`Status::retryable`]. Used for backend I/O failures and compare mismatches,
    /// which the host may retry (here or on another path).
    pub const fn media_retryable(sc: u8) -> Status {
        Status::retryable(Sct::MediaError, sc)
    }

    /// Records the byte (and bit) of the command that caused the error.
    pub const fn at(mut self, byte: u16, bit: u8) -> Status {
        self.location = Some(ErrorLocation::new(byte, bit));
        self
    }

    pub fn is_success(&self) -> bool {
        self.sct == Sct::Generic && self.sc == generic::SUCCESS
    }

    /// The 15-bit status field (without the phase tag).
    pub const fn to_field(&self) -> u16 {
        let mut v = (self.sc as u16) & SC_MASK;
        v |= (self.sct.bits() as u16) << SCT_SHIFT;
        v |= ((self.crd as u16) & 0x3) << CRD_SHIFT;
        if self.more {
            v |= MORE_BIT;
        }
        if self.dnr {
            v |= DNR_BIT;
        }
        v
    }

    /// Parses the 15-bit status field (without the phase tag).
    pub const fn from_field(v: u16) -> Status {
        Status {
            sct: Sct::from_bits(((v >> SCT_SHIFT) & 0x7) as u8),
            sc: (v & SC_MASK) as u8,
            crd: ((v >> CRD_SHIFT) & 0x3) as u8,
            more: v & MORE_BIT != 0,
            dnr: v & DNR_BIT != 0,
            location: None,
        }
    }

    /// True when SCT and SC match (ignoring DNR, More, CRD and location).
    pub fn is(&self, sct: Sct, sc: u8) -> bool {
        self.sct == sct && self.sc == sc
    }

    /// A short human name for logs and CLI output.
    pub fn name(&self) -> &'static str {
        use cmd_specific as c;
        use generic as g;
        match (self.sct, self.sc) {
            (Sct::Generic, g::SUCCESS) => "Success",
            (Sct::Generic, g::INVALID_OPCODE) => "Invalid Command Opcode",
            (Sct::Generic, g::INVALID_FIELD) => "Invalid Field in Command",
            (Sct::Generic, g::CID_CONFLICT) => "Command ID Conflict",
            (Sct::Generic, g::DATA_TRANSFER_ERROR) => "Data Transfer Error",
            (Sct::Generic, g::INTERNAL_ERROR) => "Internal Error",
            (Sct::Generic, g::ABORT_REQUESTED) => "Command Abort Requested",
            (Sct::Generic, g::ABORTED_SQ_DELETION) => "Command Aborted due to SQ Deletion",
            (Sct::Generic, g::ABORTED_FUSED_FAIL) => "Command Aborted due to Failed Fused Command",
            (Sct::Generic, g::ABORTED_FUSED_MISSING) => {
                "Command Aborted due to Missing Fused Command"
            }
            (Sct::Generic, g::INVALID_NAMESPACE) => "Invalid Namespace or Format",
            (Sct::Generic, g::COMMAND_SEQUENCE_ERROR) => "Command Sequence Error",
            (Sct::Generic, g::DATA_SGL_LENGTH_INVALID) => "Data SGL Length Invalid",
            (Sct::Generic, g::SGL_DESCRIPTOR_TYPE_INVALID) => "SGL Descriptor Type Invalid",
            (Sct::Generic, g::SGL_OFFSET_INVALID) => "SGL Offset Invalid",
            (Sct::Generic, g::KEEP_ALIVE_TIMER_EXPIRED) => "Keep Alive Timer Expired",
            (Sct::Generic, g::KEEP_ALIVE_TIMEOUT_INVALID) => "Keep Alive Timeout Invalid",
            (Sct::Generic, g::LBA_OUT_OF_RANGE) => "LBA Out of Range",
            (Sct::Generic, g::CAPACITY_EXCEEDED) => "Capacity Exceeded",
            (Sct::Generic, g::NS_NOT_READY) => "Namespace Not Ready",
            (Sct::Generic, g::RESERVATION_CONFLICT) => "Reservation Conflict",
            (Sct::Generic, g::HOST_ID_INCONSISTENT_FORMAT) => "Host Identifier Inconsistent Format",
            (Sct::CommandSpecific, c::INVALID_QUEUE_IDENTIFIER) => "Invalid Queue Identifier",
            (Sct::CommandSpecific, c::INVALID_QUEUE_SIZE) => "Invalid Queue Size",
            (Sct::CommandSpecific, c::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED) => {
                "Asynchronous Event Request Limit Exceeded"
            }
            (Sct::CommandSpecific, c::INVALID_LOG_PAGE) => "Invalid Log Page",
            (Sct::CommandSpecific, c::FEATURE_ID_NOT_SAVEABLE) => "Feature Identifier Not Saveable",
            (Sct::CommandSpecific, c::CONNECT_INCOMPATIBLE_FORMAT) => "Connect Incompatible Format",
            (Sct::CommandSpecific, c::CONNECT_CONTROLLER_BUSY) => "Connect Controller Busy",
            (Sct::CommandSpecific, c::CONNECT_INVALID_PARAMETERS) => "Connect Invalid Parameters",
            (Sct::CommandSpecific, c::CONNECT_RESTART_DISCOVERY) => "Connect Restart Discovery",
            (Sct::CommandSpecific, c::CONNECT_INVALID_HOST) => "Connect Invalid Host",
            (Sct::CommandSpecific, c::INVALID_QUEUE_TYPE) => "Invalid Queue Type",
            (Sct::CommandSpecific, c::AUTH_REQUIRED) => "Authentication Required",
            (Sct::MediaError, media::WRITE_FAULT) => "Write Fault",
            (Sct::MediaError, media::UNRECOVERED_READ_ERROR) => "Unrecovered Read Error",
            (Sct::MediaError, media::COMPARE_FAILURE) => "Compare Failure",
            (Sct::MediaError, media::ACCESS_DENIED) => "Access Denied",
            (Sct::PathRelated, path::INTERNAL_PATH_ERROR) => "Internal Path Error",
            (Sct::PathRelated, path::ASYMMETRIC_ACCESS_PERSISTENT_LOSS) => {
                "Asymmetric Access Persistent Loss"
            }
            (Sct::PathRelated, path::ASYMMETRIC_ACCESS_INACCESSIBLE) => {
                "Asymmetric Access Inaccessible"
            }
            (Sct::PathRelated, path::ASYMMETRIC_ACCESS_TRANSITION) => {
                "Asymmetric Access Transition"
            }
            (Sct::PathRelated, path::CONTROLLER_PATHING_ERROR) => "Controller Pathing Error",
            (Sct::PathRelated, path::HOST_PATHING_ERROR) => "Host Pathing Error",
            (Sct::PathRelated, path::COMMAND_ABORTED_BY_HOST) => "Command Aborted By Host",

            _ => "Unknown Status",
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (sct {:#x} sc {:#04x}{}{})",
            self.name(),
            self.sct.bits(),
            self.sc,
            if self.dnr { " dnr" } else { "" },
            if self.more { " more" } else { "" }
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_layout_matches_linux() {
        // Linux NVME_SC_DNR = 0x4000, NVME_SC_INVALID_FIELD = 0x2,
        // NVME_SC_CONNECT_INVALID_HOST = 0x184, NVME_SC_LBA_RANGE = 0x80.
        assert_eq!(
            Status::generic_dnr(generic::INVALID_FIELD).to_field(),
            0x4002
        );
        assert_eq!(
            Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_HOST).to_field(),
            0x4184
        );
        assert_eq!(
            Status::media_retryable(media::COMPARE_FAILURE).to_field(),
            0x0285
        );
        let s = Status::from_field(0x6184);
        assert!(s.dnr && s.more);
        assert!(s.is(Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST));
        assert_eq!(
            Status::from_field(Status::SUCCESS.to_field()),
            Status::SUCCESS
        );
    }

    #[test]
    fn constructors_state_dnr() {
        let s = Status::dnr(Sct::Generic, generic::INVALID_FIELD);
        assert!(s.dnr);
        assert_eq!(s.to_field(), 0x4002);
        let s = Status::retryable(Sct::Generic, generic::NS_NOT_READY);
        assert!(!s.dnr);
        assert_eq!(s.to_field(), 0x0082);
        assert_eq!(
            Status::generic_dnr(generic::INVALID_OPCODE),
            Status::dnr(Sct::Generic, generic::INVALID_OPCODE)
        );
        assert_eq!(
            Status::generic_retryable(generic::INTERNAL_ERROR),
            Status::retryable(Sct::Generic, generic::INTERNAL_ERROR)
        );
        assert!(Status::generic_dnr(generic::INTERNAL_ERROR).dnr);
        assert!(!Status::generic_retryable(generic::INTERNAL_ERROR).dnr);
        let s = Status::cmd_specific_dnr(cmd_specific::INVALID_LOG_PAGE);
        assert_eq!(
            s,
            Status::dnr(Sct::CommandSpecific, cmd_specific::INVALID_LOG_PAGE)
        );
        assert!(s.dnr);
        assert_eq!(s.to_field(), 0x4109);
        let s = Status::media_retryable(media::UNRECOVERED_READ_ERROR);
        assert_eq!(
            s,
            Status::retryable(Sct::MediaError, media::UNRECOVERED_READ_ERROR)
        );
        assert!(!s.dnr);
        assert_eq!(s.to_field(), 0x0281);
        assert_eq!(Status::SUCCESS.to_field(), 0, "success has DNR clear");
        // A status read from the wire keeps the DNR bit it carried, both ways.
        assert!(Status::from_field(0x4002).dnr);
        assert!(!Status::from_field(0x0002).dnr);
        let s = Status::retryable(Sct::PathRelated, path::COMMAND_ABORTED_BY_HOST);
        assert_eq!(Status::from_field(s.to_field()), s);
        let s = Status::dnr(Sct::MediaError, media::WRITE_FAULT);
        assert_eq!(Status::from_field(s.to_field()), s);
    }

    #[test]
    fn error_location_field() {
        assert_eq!(ErrorLocation::new(44, 3).to_field(), 0x32C);
    }
}
