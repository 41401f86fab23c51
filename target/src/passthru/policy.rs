//! The admin allowed list of a passthru subsystem: for each admin command, whether
//! the target answers it itself, passes it to the device (unchanged, or with the
//! returned data rewritten), or refuses it without the device ever seeing it.
//!
//! Owns the decision only ([`route_admin`], [`opcode_fate`], [`feature_fate`]); the
//! effects and supported-log fix-ups (`logs`) and the executor (`exec`) follow it,
//! so the effects log a host reads and what happens to its commands never disagree.
//! Follows nvmet's `nvmet_parse_passthru_admin_cmd`; departures are listed in
//! `docs/peers.md` ("Passthru subsystems").

use crate::config::{PassthruAdminClass, PassthruConfig};
use nvmf_common::wire::admin::{self, cns, csi, fid, opcode};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::sqe::{self, fuse, Sqe, SQE_LEN};
use nvmf_common::wire::status::{cmd_specific, generic, Status};

/// Vendor specific feature identifiers run from C0h to FFh.
const FID_VENDOR_START: u8 = fid::VENDOR_START;
/// Error location of the FUSE bits: SQE byte 1, bits 1:0.
const FUSE_BIT: u8 = 0;
/// Error location of Identify CSI: SQE byte 47 (CDW11 bits 31:24), from bit 0.
const CSI_BIT: u8 = 0;

/// What the device's returned data needs before the host gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixup {
    /// Identify Controller: the fabric fields ours ([`super::identify::override_id_ctrl`]).
    IdCtrl,
    /// Identify Namespace: metadata formats, sharing, reservations, `clear_ids`.
    IdNs,
    /// I/O command set independent Identify Namespace: sharing, reservations, ANA.
    IdNsCsIndep,
    /// Namespace Identification Descriptor list: `clear_ids`.
    NsDescriptors,
    /// Commands Supported and Effects log: only what this list lets through.
    CmdEffects,
    /// Supported Log Pages log: the pages served here.
    SupportedLogs,
    /// Feature Identifiers Supported and Effects log: the features served here.
    FeaturesSupported,
}

/// How one admin command of a passthru controller is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRoute {
    /// The target core answers it as for any of its controllers (Keep Alive, AER,
    /// Abort, fabrics commands, per-controller features, the Changed NS list).
    Emulate,
    /// Sent to the device; its status and result come back unchanged. `rescan`:
    /// the command may change the namespaces or the controller (effects NIC, NCC or
    /// CCC), so the subsystem's namespace list and Identify data must be read again
    /// afterwards. (The kernel driver itself quiesces I/O for commands whose effects
    /// demand it, CSE, and rescans its own view.)
    Device { rescan: bool },
    /// Sent to the device unchanged; its data is rewritten before the host gets it.
    DeviceThen(Fixup),
    /// Set Features Host Behavior Support: the device is shared with the local host,
    /// so only a request equal to the device's current setting succeeds (nvmet).
    HostBehavior,
    /// Refused with this status; never reaches the device.
    Refuse(Status),
}

/// What an admin opcode is, before any field of the command is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpcodeFate {
    /// Answered by the target.
    Emulated,
    /// Decided by a field (Identify CNS, Get Log Page LID, Features FID).
    ByField,
    /// Passed when its class is allowed (`allow_admin`), refused otherwise.
    Class {
        class: PassthruAdminClass,
        rescan: bool,
    },
    /// Never passed: PCIe-side queue, doorbell, interrupt or virtualization
    /// management, and every opcode this list does not know.
    Never,
}

/// The fate of admin opcode `op`.
pub fn opcode_fate(op: u8) -> OpcodeFate {
    use PassthruAdminClass as C;
    let class = |class, rescan| OpcodeFate::Class { class, rescan };
    match op {
        opcode::FABRICS | opcode::KEEP_ALIVE | opcode::ASYNC_EVENT_REQUEST | opcode::ABORT => {
            OpcodeFate::Emulated
        }
        opcode::IDENTIFY | opcode::GET_LOG_PAGE | opcode::SET_FEATURES | opcode::GET_FEATURES => {
            OpcodeFate::ByField
        }
        opcode::NS_MGMT | opcode::NS_ATTACH => class(C::NsManagement, true),
        opcode::FORMAT_NVM => class(C::Format, true),
        // A committed image may activate at once and change the controller (CCC).
        opcode::FW_COMMIT => class(C::Firmware, true),
        opcode::FW_DOWNLOAD => class(C::Firmware, false),
        opcode::SANITIZE => class(C::Sanitize, true),
        opcode::SECURITY_SEND | opcode::SECURITY_RECEIVE => class(C::Security, false),
        opcode::DEVICE_SELF_TEST => class(C::SelfTest, false),
        opcode::DIRECTIVE_SEND | opcode::DIRECTIVE_RECEIVE => class(C::Directives, false),
        // Unknown effects: read everything again afterwards.
        op if op >= opcode::VENDOR_START => class(C::Vendor, true),
        _ => OpcodeFate::Never,
    }
}

/// What a feature identifier is, for Get and Set Features alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureFate {
    /// Per fabric controller: the target keeps it (nvmet emulates the same four).
    Emulated,
    /// The device's feature, passed through (nvmet's allowed list).
    Device,
    /// Host Behavior Support: Get passes, Set must match the device's setting.
    HostBehavior,
    /// Vendor specific: passed only when `vendor` is allowed.
    Vendor,
    /// Meaningless or harmful across a fabric: interrupts, host memory buffer,
    /// software progress, reservations (refused on passthru), write protection,
    /// and any identifier nvmet's list does not know.
    Refused,
}

/// The fate of feature `f`.
pub fn feature_fate(f: u8) -> FeatureFate {
    match f {
        fid::ASYNC_EVENT_CONFIG
        | fid::KEEP_ALIVE_TIMER
        | fid::NUMBER_OF_QUEUES
        | fid::HOST_IDENTIFIER => FeatureFate::Emulated,
        fid::HOST_BEHAVIOR => FeatureFate::HostBehavior,
        fid::ARBITRATION
        | fid::POWER_MGMT
        | fid::LBA_RANGE_TYPE
        | fid::TEMPERATURE_THRESHOLD
        | fid::ERROR_RECOVERY
        | fid::VOLATILE_WRITE_CACHE
        | fid::WRITE_ATOMICITY
        | fid::AUTONOMOUS_POWER_STATE
        | fid::TIMESTAMP
        | fid::HOST_CONTROLLED_THERMAL_MGMT
        | fid::NON_OPERATIONAL_POWER_STATE
        | fid::READ_RECOVERY_LEVEL
        | fid::PLM_CONFIG
        | fid::PLM_WINDOW
        | fid::SANITIZE_CONFIG => FeatureFate::Device,
        f if f >= FID_VENDOR_START => FeatureFate::Vendor,
        _ => FeatureFate::Refused,
    }
}

/// Invalid Command Opcode, at the opcode: the command does not exist here.
pub fn invalid_opcode() -> Status {
    Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0)
}

/// Invalid Field in Command at the FID (CDW10 7:0): Get/Set Features is supported,
/// this feature is not (as the target refuses any unsupported feature).
pub fn invalid_feature() -> Status {
    Status::generic_dnr(generic::INVALID_FIELD).at(admin::offset::FID, 0)
}

/// Invalid Log Page, at the LID.
pub fn invalid_log_page() -> Status {
    Status::cmd_specific_dnr(cmd_specific::INVALID_LOG_PAGE).at(admin::offset::LID, 0)
}

/// How admin command `cmd` is handled under `cfg`.
pub fn route_admin(cmd: &Sqe<[u8; SQE_LEN]>, cfg: &PassthruConfig) -> AdminRoute {
    // Fused operations are I/O commands (Compare and Write); an admin command with
    // FUSE set is malformed (nvmet refuses any flag but PSDT the same way). PSDT is
    // the fabric's SGL choice and never reaches the device.
    if cmd.fuse() != fuse::NORMAL {
        return AdminRoute::Refuse(
            Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::FLAGS, FUSE_BIT),
        );
    }
    match opcode_fate(cmd.opcode()) {
        OpcodeFate::Emulated => AdminRoute::Emulate,
        OpcodeFate::Class { class, rescan } if cfg.allows(class) => AdminRoute::Device { rescan },
        OpcodeFate::Class { .. } | OpcodeFate::Never => AdminRoute::Refuse(invalid_opcode()),
        OpcodeFate::ByField => match cmd.opcode() {
            opcode::IDENTIFY => identify_route(cmd),
            opcode::GET_LOG_PAGE => log_route(admin::log_lid(cmd)),
            set_or_get => features_route(
                admin::feature_fid(cmd),
                set_or_get == opcode::SET_FEATURES,
                cfg,
            ),
        },
    }
}

fn identify_route(cmd: &Sqe<[u8; SQE_LEN]>) -> AdminRoute {
    let bad_csi = || {
        AdminRoute::Refuse(
            Status::generic_dnr(generic::INVALID_FIELD).at(admin::offset::CSI, CSI_BIT),
        )
    };
    match admin::identify_cns(cmd) {
        cns::CONTROLLER => AdminRoute::DeviceThen(Fixup::IdCtrl),
        cns::NAMESPACE => AdminRoute::DeviceThen(Fixup::IdNs),
        cns::NS_ID_DESCRIPTOR_LIST => AdminRoute::DeviceThen(Fixup::NsDescriptors),
        cns::CS_INDEPENDENT_NAMESPACE => AdminRoute::DeviceThen(Fixup::IdNsCsIndep),
        // The NVM set's namespace structure lists the PI and extended LBA formats that
        // metadata-less fabric I/O cannot use (nvmet passes only ZNS); zoned and
        // key-value namespaces are exported as they are.
        cns::CS_NAMESPACE => match admin::identify_csi(cmd) {
            csi::ZNS | csi::KV => AdminRoute::Device { rescan: false },
            _ => bad_csi(),
        },
        // Command set limits (VSL, WZSL, DMRSL; zone append size) are the device's.
        cns::CS_CONTROLLER => match admin::identify_csi(cmd) {
            csi::NVM | csi::ZNS | csi::KV => AdminRoute::Device { rescan: false },
            _ => bad_csi(),
        },
        // Lists, NVM sets, controller lists, UUID lists...: the device's (nvmet).
        _ => AdminRoute::Device { rescan: false },
    }
}

fn log_route(l: u8) -> AdminRoute {
    match l {
        // The target raises namespace-change events itself, so it keeps the list.
        lid::CHANGED_NS => AdminRoute::Emulate,
        lid::CMD_EFFECTS => AdminRoute::DeviceThen(Fixup::CmdEffects),
        lid::SUPPORTED_LOGS => AdminRoute::DeviceThen(Fixup::SupportedLogs),
        lid::FEATURES_SUPPORTED => AdminRoute::DeviceThen(Fixup::FeaturesSupported),
        // ANA is not served on passthru (CMIC.ANA clear), reservations are refused,
        // and an I/O controller has no discovery log.
        lid::ANA | lid::RESERVATION_NOTIFICATION | lid::DISCOVERY => {
            AdminRoute::Refuse(invalid_log_page())
        }
        // SMART, error, firmware slot, self-test, telemetry, ZNS and vendor logs are
        // the device's: passed (nvmet passes every log page).
        _ => AdminRoute::Device { rescan: false },
    }
}

fn features_route(f: u8, set: bool, cfg: &PassthruConfig) -> AdminRoute {
    match feature_fate(f) {
        FeatureFate::Emulated => AdminRoute::Emulate,
        FeatureFate::Device => AdminRoute::Device { rescan: false },
        FeatureFate::HostBehavior if set => AdminRoute::HostBehavior,
        FeatureFate::HostBehavior => AdminRoute::Device { rescan: false },
        FeatureFate::Vendor if cfg.allows(PassthruAdminClass::Vendor) => {
            AdminRoute::Device { rescan: false }
        }
        FeatureFate::Vendor | FeatureFate::Refused => AdminRoute::Refuse(invalid_feature()),
    }
}

/// Whether admin opcode `op` may reach the device in some form under `cfg` (for the
/// effects log: a command the device never sees is not supported here).
pub fn opcode_reaches_device(op: u8, cfg: &PassthruConfig) -> bool {
    match opcode_fate(op) {
        OpcodeFate::ByField => true,
        OpcodeFate::Class { class, .. } => cfg.allows(class),
        OpcodeFate::Emulated | OpcodeFate::Never => false,
    }
}
