//! Running one admin command of a passthru controller: route it (`policy`), give the
//! device a buffer of the size the command really moves, apply the fix-ups
//! (`identify`, `logs`), and hand back the completion.
//!
//! Owns the buffers between host and device. A device writes as much as the command
//! tells it, whatever buffer it was given, so for every command whose size the
//! target knows (Identify, Get Log Page, the passed features, and the opt-in classes
//! of `allow_admin` but vendor commands) the device gets a buffer of exactly that
//! size, and a host buffer of another size is refused before anything is sent.
//! Vendor commands move what the host's data length says: only the vendor knows
//! better. Blocking: runs on the control path.

use crate::config::PassthruConfig;
use nvmf_common::wire::admin::{self, fid, sel};
use nvmf_common::wire::identify::IDENTIFY_LEN;
use nvmf_common::wire::sqe::{self, Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

use super::device::{DataBuf, DeviceCompletion, NvmeController};
use super::identify::{self as fix_id, FabricFields};
use super::logs;
use super::policy::{route_admin, AdminRoute, Fixup};

/// Data of the features that move any (NVMe Base, "Feature Identifiers"): LBA Range
/// Type 4 KiB, Autonomous Power State Transition 256 bytes, Timestamp 8, Host
/// Behavior Support and Predictable Latency Mode Config 512.
const LBA_RANGE_TYPE_LEN: usize = 4096;
const APST_LEN: usize = 256;
const TIMESTAMP_LEN: usize = 8;
const HOST_BEHAVIOR_LEN: usize = 512;
const PLM_CONFIG_LEN: usize = 512;
/// Bytes per dword (NUMD counts dwords).
const DWORD: u64 = 4;
/// Namespace Management Select (CDW10 3:0): 0h create.
const NS_MGMT_SEL_MASK: u32 = 0xF;
const NS_MGMT_SEL_CREATE: u32 = 0;
/// Get Log Page Offset Type: CDW14 bit 23, i.e. SQE byte 58 bit 7.
const LOG_OT_BYTE: u16 = sqe::offset::CDW14 + 2;
const LOG_OT_BIT: u8 = 7;

/// What became of one admin command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOutcome {
    /// The target core answers it as for its other controllers.
    Emulate,
    /// Finished: this status and result go back to the host. `rescan`: the
    /// namespaces or the controller may have changed on the device.
    Complete {
        completion: DeviceCompletion,
        rescan: bool,
    },
}

/// What executing an admin command needs.
pub struct AdminCtx<'a> {
    pub dev: &'a dyn NvmeController,
    pub cfg: &'a PassthruConfig,
    pub fabric: &'a FabricFields,
}

fn finished(completion: DeviceCompletion) -> AdminOutcome {
    AdminOutcome::Complete {
        completion,
        rescan: false,
    }
}

fn refused(status: Status) -> AdminOutcome {
    finished(DeviceCompletion {
        status,
        dw0: 0,
        dw1: 0,
    })
}

/// Data SGL Length Invalid: the host's buffer is not what the command moves.
fn wrong_length() -> Status {
    Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0)
}

/// Sends `cmd` with `data`; a missing completion becomes the status that stands for it.
fn forward(
    dev: &dyn NvmeController,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
) -> DeviceCompletion {
    dev.admin(cmd, data).unwrap_or_else(|e| {
        tracing::warn!(device = %dev.name(), opcode = cmd.opcode(), error = %e, "passthru admin command failed");
        DeviceCompletion {
            status: e.status(),
            dw0: 0,
            dw1: 0,
        }
    })
}

/// Runs admin command `cmd` of a passthru controller with the host's `data`.
pub fn execute_admin(
    ctx: &AdminCtx<'_>,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
) -> AdminOutcome {
    match route_admin(cmd, ctx.cfg) {
        AdminRoute::Emulate => AdminOutcome::Emulate,
        AdminRoute::Refuse(s) => {
            tracing::debug!(opcode = cmd.opcode(), status = %s, "passthru admin command refused");
            refused(s)
        }
        AdminRoute::Device { rescan } => match sized(ctx, cmd, data) {
            Ok(c) => AdminOutcome::Complete {
                completion: c,
                rescan,
            },
            Err(s) => refused(s),
        },
        AdminRoute::DeviceThen(fixup) => match fixed(ctx, cmd, data, fixup) {
            Ok(c) => finished(c),
            Err(s) => refused(s),
        },
        AdminRoute::HostBehavior => match host_behavior(ctx.dev, cmd, data) {
            Ok(c) => finished(c),
            Err(s) => refused(s),
        },
    }
}

/// Forwards a command the target passes unchanged, with a buffer of its real size.
fn sized(
    ctx: &AdminCtx<'_>,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
) -> Result<DeviceCompletion, Status> {
    use nvmf_common::wire::admin::opcode;
    match cmd.opcode() {
        opcode::IDENTIFY => Ok(bounced(ctx.dev, cmd, data, IDENTIFY_LEN, |_| ())),
        opcode::GET_LOG_PAGE => {
            check_log_len(cmd, &data)?;
            Ok(forward(ctx.dev, cmd, data))
        }
        opcode::GET_FEATURES | opcode::SET_FEATURES => {
            match feature_data_len(admin::feature_fid(cmd)) {
                // Vendor features: the host's length (passed only with `vendor` allowed).
                None => Ok(forward(ctx.dev, cmd, data)),
                Some(0) => Ok(forward(ctx.dev, cmd, DataBuf::None)),
                Some(n) if cmd.opcode() == opcode::GET_FEATURES => {
                    if admin::feature_sel(cmd) == sel::SUPPORTED {
                        // Capabilities come back in dword 0; no data moves.
                        return Ok(forward(ctx.dev, cmd, DataBuf::None));
                    }
                    Ok(bounced(ctx.dev, cmd, data, n, |_| ()))
                }
                Some(n) => match data {
                    DataBuf::ToDevice(b) if b.len() >= n => Ok(forward(
                        ctx.dev,
                        cmd,
                        DataBuf::ToDevice(b.get(..n).unwrap_or(b)),
                    )),
                    _ => Err(wrong_length()),
                },
            }
        }
        _ => match class_data_len(cmd) {
            None => Ok(forward(ctx.dev, cmd, data)),
            // A host buffer on a command without data never reaches the device.
            Some(0) => Ok(forward(ctx.dev, cmd, DataBuf::None)),
            Some(n) if data.len() as u64 == n => Ok(forward(ctx.dev, cmd, data)),
            Some(_) => Err(wrong_length()),
        },
    }
}

/// Bytes an opt-in admin command moves, from its own fields (NVMe Base): `Some(0)`
/// none, `None` unknown (vendor specific).
fn class_data_len(cmd: &Sqe<[u8; SQE_LEN]>) -> Option<u64> {
    use nvmf_common::wire::admin::opcode;
    // NUMD in CDW10 is 0-based dwords (Firmware Image Download, Directives).
    let numd = || (u64::from(cmd.cdw10()) + 1) * DWORD;
    match cmd.opcode() {
        opcode::FW_DOWNLOAD | opcode::DIRECTIVE_SEND | opcode::DIRECTIVE_RECEIVE => Some(numd()),
        // Security Send / Receive: Transfer Length / Allocation Length in bytes.
        opcode::SECURITY_SEND | opcode::SECURITY_RECEIVE => Some(u64::from(cmd.cdw11())),
        // Namespace Management: create (SEL 0h) sends a 4 KiB structure, delete none.
        opcode::NS_MGMT if cmd.cdw10() & NS_MGMT_SEL_MASK == NS_MGMT_SEL_CREATE => {
            Some(IDENTIFY_LEN as u64)
        }
        // Namespace Attachment sends a controller list of 4 KiB.
        opcode::NS_ATTACH => Some(IDENTIFY_LEN as u64),
        op if op >= opcode::VENDOR_START => None,
        // Format NVM, Sanitize, Firmware Commit, Device Self-test, Namespace delete.
        _ => Some(0),
    }
}

/// Bytes a feature's data structure has: `Some(0)` none, `None` unknown (vendor).
fn feature_data_len(f: u8) -> Option<usize> {
    match f {
        fid::LBA_RANGE_TYPE => Some(LBA_RANGE_TYPE_LEN),
        fid::AUTONOMOUS_POWER_STATE => Some(APST_LEN),
        fid::TIMESTAMP => Some(TIMESTAMP_LEN),
        fid::HOST_BEHAVIOR => Some(HOST_BEHAVIOR_LEN),
        fid::PLM_CONFIG => Some(PLM_CONFIG_LEN),
        f if f >= fid::VENDOR_START => None,
        _ => Some(0),
    }
}

/// Get Log Page moves exactly NUMD dwords.
fn check_log_len(cmd: &Sqe<[u8; SQE_LEN]>, data: &DataBuf<'_>) -> Result<(), Status> {
    match data {
        DataBuf::FromDevice(b) if b.len() as u64 == admin::log_len_bytes(cmd) => Ok(()),
        _ => Err(wrong_length()),
    }
}

/// Runs a controller-to-host command into a device buffer of `len` bytes, applies
/// `fix` on success, then copies what fits into the host's buffer.
fn bounced(
    dev: &dyn NvmeController,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
    len: usize,
    fix: impl FnOnce(&mut [u8]),
) -> DeviceCompletion {
    let mut page = vec![0u8; len];
    let c = forward(dev, cmd, DataBuf::FromDevice(&mut page));
    if c.status.is_success() {
        fix(&mut page);
    }
    if let DataBuf::FromDevice(out) = data {
        let n = out.len().min(page.len());
        if let (Some(dst), Some(src)) = (out.get_mut(..n), page.get(..n)) {
            dst.copy_from_slice(src);
        }
    }
    c
}

/// Forwards a command whose returned data the target rewrites.
fn fixed(
    ctx: &AdminCtx<'_>,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
    fixup: Fixup,
) -> Result<DeviceCompletion, Status> {
    let (cfg, fabric, dev) = (ctx.cfg, ctx.fabric, ctx.dev);
    let clear_ids = cfg.clear_ids;
    match fixup {
        Fixup::IdCtrl => Ok(bounced(dev, cmd, data, IDENTIFY_LEN, |p| {
            fix_id::override_id_ctrl(p, fabric, cfg)
        })),
        Fixup::IdNs => Ok(bounced(dev, cmd, data, IDENTIFY_LEN, |p| {
            fix_id::override_id_ns(p, clear_ids)
        })),
        Fixup::IdNsCsIndep => Ok(bounced(
            dev,
            cmd,
            data,
            IDENTIFY_LEN,
            fix_id::override_id_ns_cs_indep,
        )),
        Fixup::NsDescriptors => Ok(bounced(dev, cmd, data, IDENTIFY_LEN, |p| {
            fix_id::override_ns_descriptors(p, clear_ids)
        })),
        Fixup::CmdEffects | Fixup::SupportedLogs | Fixup::FeaturesSupported => {
            fixed_log(ctx, cmd, data, fixup)
        }
    }
}

fn fixed_log(
    ctx: &AdminCtx<'_>,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
    fixup: Fixup,
) -> Result<DeviceCompletion, Status> {
    // An index offset names list entries, not bytes: the window could not be placed
    // (the regular target refuses it on these pages too).
    if admin::log_ot(cmd) {
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(LOG_OT_BYTE, LOG_OT_BIT));
    }
    check_log_len(cmd, &data)?;
    let DataBuf::FromDevice(buf) = data else {
        return Err(wrong_length());
    };
    let c = forward(ctx.dev, cmd, DataBuf::FromDevice(&mut *buf));
    if c.status.is_success() {
        let offset = admin::log_offset(cmd);
        match fixup {
            Fixup::CmdEffects => logs::fix_cmd_effects(buf, offset, ctx.cfg),
            Fixup::SupportedLogs => logs::fix_supported_logs(buf, offset),
            _ => logs::fix_features_supported(buf, offset, ctx.cfg),
        }
    }
    Ok(c)
}

/// Set Features Host Behavior Support succeeds only when it asks for what the device
/// already has: the local host shares the device and set it for itself (nvmet's
/// `nvmet_passthru_set_host_behaviour`). Nothing is set on the device.
fn host_behavior(
    dev: &dyn NvmeController,
    cmd: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
) -> Result<DeviceCompletion, Status> {
    let wanted = match data {
        DataBuf::ToDevice(b) => b.get(..HOST_BEHAVIOR_LEN).ok_or_else(wrong_length)?,
        _ => return Err(wrong_length()),
    };
    let mut get = Sqe::new_unchecked([0u8; SQE_LEN]);
    get.set_opcode(admin::opcode::GET_FEATURES);
    get.set_nsid(cmd.nsid());
    get.set_cdw10(admin::get_features_cdw10(fid::HOST_BEHAVIOR, sel::CURRENT));
    let mut current = vec![0u8; HOST_BEHAVIOR_LEN];
    let c = forward(dev, &get, DataBuf::FromDevice(&mut current));
    if !c.status.is_success() {
        return Ok(c);
    }
    if current != wanted {
        tracing::warn!(device = %dev.name(), "a host asked for another Host Behavior than the device's own; refused");
        // The same request fails again while the device keeps its setting.
        return Err(Status::generic_dnr(generic::INTERNAL_ERROR));
    }
    Ok(DeviceCompletion::success(0))
}
