//! Admin commands of an NVM controller: Identify, Get Log Page, Set/Get Features,
//! Keep Alive, Asynchronous Event Request, Abort.

use std::sync::Arc;

use tracing::{debug, warn};

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{self, cns, fid, num_queues_decode, num_queues_encode, opcode, sel};
use nvmf_common::wire::ana;
use nvmf_common::wire::identify::IDENTIFY_LEN;
use nvmf_common::wire::log::{
    fw_afi, lid, CmdEffectsLog, ErrorInfoEntry, FwSlotLog, CHANGED_NS_LIST_LEN,
    CMD_EFFECTS_LOG_LEN, ERROR_INFO_ENTRY_LEN, FW_SLOT_LOG_LEN,
};
use nvmf_common::wire::sqe::{self, Sqe};
use nvmf_common::wire::status::{cmd_specific, generic, Status};

use super::{identify, logs, DataDir, ExecCtx, Outcome, Plan, QueueCtx, Request};
use crate::controller::{Controller, AER_LIMIT, ERROR_LOG_ENTRIES};
use crate::target::Target;

/// Size of the 128-bit host identifier (Get Features Host Identifier with EXHID).
const HOST_ID_LEN: u32 = 16;
/// Size of the 64-bit host identifier.
const HOST_ID_LEN_64: u32 = 8;
/// The one firmware slot: active now and after the next reset.
const FW_SLOT: u8 = 1;
/// Abort completion dword 0 bit 0: the command was not aborted.
const ABORT_NOT_ABORTED: u32 = 1;
/// Get Features "supported capabilities" dword 0 bit 2: changeable.
const FEAT_CAP_CHANGEABLE: u32 = 1 << 2;
/// Volatile Write Cache feature, dword 11 bit 0: Volatile Write Cache Enable.
const WCE: u32 = 1 << 0;
/// Get Log Page Offset Type: cdw14 bit 23, i.e. bit 7 of SQE byte 58.
const LOG_OT_BYTE: u16 = sqe::offset::CDW14 + 2;
const LOG_OT_BIT: u8 = 7;

fn cdw10_invalid() -> Status {
    Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0)
}

fn invalid_opcode() -> Status {
    Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0)
}

fn to_host(len: u32) -> Plan {
    Plan {
        dir: DataDir::CtrlToHost,
        len,
    }
}

/// Data plan of Get Log Page: NUMD dwords.
pub(super) fn log_plan(cmd: &Sqe<[u8; 64]>) -> Plan {
    to_host(admin::log_numd(cmd).saturating_mul(4))
}

/// Data plan of Get/Set Features Host Identifier.
fn host_id_len(cmd: &Sqe<[u8; 64]>) -> u32 {
    if cmd.cdw11() & admin::HOST_ID_EXHID != 0 {
        HOST_ID_LEN
    } else {
        HOST_ID_LEN_64
    }
}

pub(super) fn parse(_ctrl: &Controller, _target: &Target, req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    match cmd.opcode() {
        opcode::IDENTIFY => Ok(to_host(IDENTIFY_LEN as u32)),
        opcode::GET_LOG_PAGE => Ok(log_plan(&cmd)),
        opcode::SET_FEATURES => match admin::feature_fid(&cmd) {
            fid::HOST_IDENTIFIER => Ok(Plan {
                dir: DataDir::HostToCtrl,
                len: host_id_len(&cmd),
            }),
            _ => Ok(Plan::NONE),
        },
        opcode::GET_FEATURES => match admin::feature_fid(&cmd) {
            fid::HOST_IDENTIFIER => Ok(to_host(host_id_len(&cmd))),
            _ => Ok(Plan::NONE),
        },
        opcode::KEEP_ALIVE | opcode::ASYNC_EVENT_REQUEST | opcode::ABORT => Ok(Plan::NONE),
        other => {
            debug!(opcode = other, "unsupported admin opcode");
            Err(invalid_opcode())
        }
    }
}

pub(super) fn execute(
    q: &mut QueueCtx,
    ctrl: &Arc<Controller>,
    ex: &mut ExecCtx,
    req: &mut Request,
    tag: u64,
) -> Outcome {
    let cmd_op = req.opcode();
    let r = match cmd_op {
        opcode::IDENTIFY => identify_cmd(ctrl, ex, req),
        opcode::GET_LOG_PAGE => get_log_page(ctrl, ex, req),
        opcode::SET_FEATURES => set_features(ctrl, req),
        opcode::GET_FEATURES => get_features(ctrl, req),
        opcode::KEEP_ALIVE => Ok(()),
        opcode::ABORT => {
            // Like nvmet: commands are never aborted; the host waits for them.
            req.dw0 = ABORT_NOT_ABORTED;
            Ok(())
        }
        opcode::ASYNC_EVENT_REQUEST => return hold_aer(q, req, tag),
        _ => Err(invalid_opcode()),
    };
    if let Err(s) = r {
        req.fail(s);
    }
    Outcome::Done
}

/// Keeps an Asynchronous Event Request until an event arrives.
pub(super) fn hold_aer(q: &mut QueueCtx, req: &mut Request, tag: u64) -> Outcome {
    if q.held_aers.len() >= AER_LIMIT {
        warn!(qid = %q.qid, "Asynchronous Event Request limit exceeded");
        req.fail(Status::cmd_specific_dnr(
            cmd_specific::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED,
        ));
        return Outcome::Done;
    }
    q.held_aers.push(tag);
    Outcome::Held
}

fn identify_cmd(ctrl: &Arc<Controller>, ex: &ExecCtx, req: &mut Request) -> Result<(), Status> {
    let cmd = req.cmd();
    let cns_v = admin::identify_cns(&cmd);
    let nsid = cmd.nsid();
    let mut page = vec![0u8; IDENTIFY_LEN];
    match cns_v {
        cns::CONTROLLER => identify::controller(ctrl, &ex.target, &mut page),
        cns::NAMESPACE => {
            if nsid == 0 || (nsid > ctrl.max_nsid() && nsid != Nsid::BROADCAST.0) {
                return Err(
                    Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0)
                );
            }
            // An inactive NSID reads back as zeroes.
            if let Some(ns) = ctrl.namespace(Nsid(nsid)) {
                identify::namespace(&ns, ex.target.params.max_io_size, &mut page);
            }
        }
        cns::ACTIVE_NS_LIST => {
            if nsid >= Nsid::BROADCAST.0 - 1 {
                return Err(
                    Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0)
                );
            }
            let ids = ctrl.active_nsids();
            nvmf_common::wire::identify::write_active_ns_list(
                &mut page,
                ids.into_iter().filter(|&i| i > nsid),
            );
        }
        cns::NS_ID_DESCRIPTOR_LIST => {
            let ns = super::find_ns(ctrl, nsid)?;
            identify::ns_descriptors(&ns, &mut page);
        }
        cns::CS_CONTROLLER | cns::CS_NAMESPACE => {
            // NVM command set (CSI 0): the I/O command set specific structures are all
            // zero for a controller without PI, ZNS or extended LBA formats.
            if admin::identify_csi(&cmd) != 0 {
                return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW11, 24));
            }
            if cns_v == cns::CS_NAMESPACE {
                super::find_ns(ctrl, nsid)?;
            }
        }
        other => {
            debug!(cns = other, "unsupported Identify CNS");
            return Err(cdw10_invalid());
        }
    }
    req.write_data(0, &page);
    Ok(())
}

/// Serves `[offset, offset+len)` of a generated log page; bytes past its end are zero.
pub(super) fn serve_log(req: &mut Request, log: &[u8]) -> Result<(), Status> {
    let cmd = req.cmd();
    if admin::log_ot(&cmd) {
        // An index offset: no log page here supports one (IOS clear in LID 00h).
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(LOG_OT_BYTE, LOG_OT_BIT));
    }
    let offset = admin::log_offset(&cmd);
    if !offset.is_multiple_of(4) || offset > log.len() as u64 {
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW12, 0));
    }
    let start = offset as usize;
    let want = req.plan.len as usize;
    let avail = log.get(start..).unwrap_or(&[]);
    let n = avail.len().min(want);
    if let Some(head) = avail.get(..n) {
        req.write_data(0, head);
    }
    if n < want {
        if let Some(d) = &req.data {
            d.buf.fill(d.offset + n, want - n, 0);
        }
    }
    Ok(())
}

fn get_log_page(ctrl: &Arc<Controller>, ex: &ExecCtx, req: &mut Request) -> Result<(), Status> {
    let cmd = req.cmd();
    let lid_v = admin::log_lid(&cmd);
    let rae = admin::log_rae(&cmd);
    if !logs::log_served(ctrl, lid_v) {
        debug!(lid = lid_v, "unsupported log page");
        return Err(invalid_log_page());
    }
    let log = match lid_v {
        lid::SUPPORTED_LOGS => logs::supported_logs(ctrl),
        lid::ERROR_INFO => error_log(ctrl),
        lid::SMART => logs::smart_log(ctrl, &ex.target, cmd.nsid())?,
        lid::FW_SLOT => fw_slot_log(),
        lid::CHANGED_NS => {
            let list = ctrl.take_changed_ns(rae);
            let mut page = vec![0u8; CHANGED_NS_LIST_LEN];
            nvmf_common::wire::identify::write_active_ns_list(&mut page, list.into_iter());
            page
        }
        lid::CMD_EFFECTS => cmd_effects_log(),
        lid::FEATURES_SUPPORTED => logs::features_supported(ctrl),
        lid::MI_CMD_EFFECTS => logs::mi_cmd_effects(),
        lid::RESERVATION_NOTIFICATION => super::resv::notification_log(ctrl),
        lid::ANA => {
            let rgo = admin::log_lsp(&cmd) & ana::LSP_RGO != 0;
            ctrl.ana_log_read(rae);
            ana_log(ctrl, rgo)
        }
        // Listed in logs::NVM_LOGS but not built here: a bug, never a peer's doing.
        other => {
            warn!(lid = other, "log page listed as served has no builder");
            return Err(invalid_log_page());
        }
    };
    serve_log(req, &log)
}

/// Invalid Log Page, at LID.
pub(super) fn invalid_log_page() -> Status {
    Status::cmd_specific_dnr(cmd_specific::INVALID_LOG_PAGE).at(sqe::offset::CDW10, 0)
}

/// The ANA log page for `ctrl`'s port: group 1 and every group holding a namespace of
/// its subsystem, with their namespaces (nvmet lists the groups in use).
fn ana_log(ctrl: &Controller, rgo: bool) -> Vec<u8> {
    let port = &ctrl.port.ana.0;
    let chgcnt = port.chgcnt();
    let mut by_group: std::collections::BTreeMap<u32, Vec<u32>> = std::collections::BTreeMap::new();
    by_group.insert(ana::DEFAULT_GROUP, Vec::new());
    // Only the namespaces its host sees, and the groups holding them.
    for ns in ctrl.namespaces() {
        by_group.entry(ns.anagrpid).or_default().push(ns.nsid.0);
    }
    let groups: Vec<ana::AnaGroupDesc> = by_group
        .into_iter()
        .map(|(grpid, mut nsids)| {
            nsids.sort_unstable();
            ana::AnaGroupDesc {
                grpid,
                chgcnt,
                state: port.state(grpid),
                nsids,
            }
        })
        .collect();
    ana::encode_log(chgcnt, &groups, rgo)
}

fn error_log(ctrl: &Controller) -> Vec<u8> {
    let mut page = vec![0u8; ERROR_INFO_ENTRY_LEN * ERROR_LOG_ENTRIES];
    for (rec, slot) in ctrl
        .errors()
        .iter()
        .zip(page.chunks_exact_mut(ERROR_INFO_ENTRY_LEN))
    {
        let mut e = ErrorInfoEntry::new_unchecked(slot);
        e.set_error_count(rec.error_count);
        e.set_sqid(rec.sqid);
        e.set_cmdid(rec.cid);
        // Status in bits 15:1 above a zero phase tag, as nvmet writes it; with the
        // parameter error location.
        e.set_status(rec.status, false);
        e.set_nsid(rec.nsid);
        e.set_lba(rec.lba);
        e.set_opcode(rec.opcode);
    }
    page
}

fn fw_slot_log() -> Vec<u8> {
    let mut page = vec![0u8; FW_SLOT_LOG_LEN];
    let mut f = FwSlotLog::new_unchecked(&mut page[..]);
    f.set_afi(fw_afi(FW_SLOT, 0));
    f.set_frs(usize::from(FW_SLOT), identify::firmware_revision());
    page
}

/// The Commands Supported and Effects log page, with each command's scope (CSP) as
/// NVMe 2.0 and LPA bit 5 ask: admin commands that may name a namespace (Get Log Page,
/// Identify, Get/Set Features) have namespace and controller scope, the others
/// controller scope (as SPDK reports); I/O commands namespace scope.
fn cmd_effects_log() -> Vec<u8> {
    use nvmf_common::wire::log::effects;
    use nvmf_common::wire::nvm::opcode as io;
    use nvmf_common::wire::supported::scope;
    let mut page = vec![0u8; CMD_EFFECTS_LOG_LEN];
    let mut l = CmdEffectsLog::new_unchecked(&mut page[..]);
    for op in [
        opcode::GET_LOG_PAGE,
        opcode::IDENTIFY,
        opcode::SET_FEATURES,
        opcode::GET_FEATURES,
    ] {
        l.set_acs(op, effects::CSUPP | scope::NAMESPACE | scope::CONTROLLER);
    }
    for op in [
        opcode::ABORT,
        opcode::ASYNC_EVENT_REQUEST,
        opcode::KEEP_ALIVE,
    ] {
        l.set_acs(op, effects::CSUPP | scope::CONTROLLER);
    }
    for op in [
        io::READ,
        io::COMPARE,
        io::FLUSH,
        io::VERIFY,
        io::RESERVATION_REGISTER,
        io::RESERVATION_REPORT,
        io::RESERVATION_ACQUIRE,
        io::RESERVATION_RELEASE,
    ] {
        l.set_iocs(op, effects::CSUPP | scope::NAMESPACE);
    }
    for op in [
        io::WRITE,
        io::WRITE_ZEROES,
        io::DATASET_MANAGEMENT,
        io::COPY,
    ] {
        l.set_iocs(op, effects::CSUPP | effects::LBCC | scope::NAMESPACE);
    }
    page
}

pub(super) fn set_features(ctrl: &Arc<Controller>, req: &mut Request) -> Result<(), Status> {
    let cmd = req.cmd();
    let f = admin::feature_fid(&cmd);
    if admin::feature_sv(&cmd) {
        return Err(
            Status::cmd_specific_dnr(cmd_specific::FEATURE_ID_NOT_SAVEABLE)
                .at(sqe::offset::CDW10, 31),
        );
    }
    let cdw11 = cmd.cdw11();
    match f {
        fid::NUMBER_OF_QUEUES if !ctrl.subsys.is_discovery() => {
            let (nsqr, ncqr) = num_queues_decode(cdw11);
            if nsqr == u16::MAX || ncqr == u16::MAX {
                return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW11, 0));
            }
            let want = nsqr.min(ncqr).saturating_add(1);
            let n = ctrl.grant_io_queues(want);
            req.dw0 = num_queues_encode(n - 1, n - 1);
            Ok(())
        }
        fid::ASYNC_EVENT_CONFIG => {
            ctrl.set_async_event_config(cdw11);
            Ok(())
        }
        fid::KEEP_ALIVE_TIMER => {
            let kato = super::identify::kato_ms(cdw11);
            ctrl.set_kato_ms(kato);
            req.dw0 = kato;
            Ok(())
        }
        fid::VOLATILE_WRITE_CACHE if !ctrl.subsys.is_discovery() => {
            let wce = cdw11 & WCE != 0;
            if wce && !ctrl.volatile_write_cache_present() {
                // No cache to enable (Identify Controller VWC bit 0 is clear).
                return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW11, 0));
            }
            ctrl.set_volatile_write_cache(wce);
            Ok(())
        }
        fid::RESERVATION_NOTIFICATION_MASK | fid::RESERVATION_PERSISTENCE
            if !ctrl.subsys.is_discovery() =>
        {
            super::resv::set_feature(ctrl, req, f)
        }
        fid::HOST_IDENTIFIER => {
            // On fabrics the host identifier is set by Connect (as in nvmet).
            Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR))
        }
        other => {
            debug!(fid = other, "Set Features of an unsupported feature");
            Err(cdw10_invalid())
        }
    }
}

pub(super) fn get_features(ctrl: &Arc<Controller>, req: &mut Request) -> Result<(), Status> {
    let cmd = req.cmd();
    let f = admin::feature_fid(&cmd);
    let select = admin::feature_sel(&cmd);
    if matches!(
        f,
        fid::RESERVATION_NOTIFICATION_MASK | fid::RESERVATION_PERSISTENCE
    ) && !ctrl.subsys.is_discovery()
    {
        return super::resv::get_feature(ctrl, req, f, select);
    }
    let feats = ctrl.features();
    // The features the Feature Identifiers Supported log lists (the reservation ones
    // were served above).
    if !logs::feature_served(f, ctrl.subsys.is_discovery()) {
        debug!(fid = f, "Get Features of an unsupported feature");
        return Err(cdw10_invalid());
    }
    if select == sel::SUPPORTED {
        req.dw0 = if f == fid::HOST_IDENTIFIER {
            0
        } else {
            FEAT_CAP_CHANGEABLE
        };
        return Ok(());
    }
    if select > sel::SUPPORTED {
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 8));
    }
    let default = select == sel::DEFAULT;
    req.dw0 = match f {
        fid::NUMBER_OF_QUEUES => {
            let n = if default {
                ctrl.params.max_io_queues
            } else {
                ctrl.io_queues_granted()
            }
            .max(1);
            num_queues_encode(n - 1, n - 1)
        }
        fid::ASYNC_EVENT_CONFIG => {
            if default {
                0
            } else {
                feats.async_event_config
            }
        }
        fid::KEEP_ALIVE_TIMER => {
            if default {
                0
            } else {
                ctrl.kato_ms()
            }
        }
        fid::VOLATILE_WRITE_CACHE => u32::from(
            (default || feats.volatile_write_cache) && ctrl.volatile_write_cache_present(),
        ),
        _ => {
            let id = feats.host_id;
            let n = req.plan.len as usize;
            req.write_data(0, id.get(..n).unwrap_or(&id));
            0
        }
    };
    Ok(())
}
