//! Fabrics commands: Connect (admin and I/O queues), Property Get/Set, Disconnect.
//!
//! Connect decides which controller a queue belongs to. Its failures carry the exact
//! fabrics status and, for Invalid Parameters, the attribute and byte offset of the
//! offending field in completion dword 0 (IATTR/IPO), as the Linux host prints them.

use tracing::{info, warn};

use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::fabrics::{
    cap_crms, cap_css, connect_data_offset, connect_invalid_param_dw0, connect_offset, fctype, reg,
    Cap, ConnectCmd, ConnectData, Crto, PropertyGetCmd as PropertyGet,
    PropertySetCmd as PropertySet, CONNECT_DATA_LEN, FABRICS_OPCODE, NVME_VS_1_3,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Status};

use super::{DataDir, ExecCtx, Outcome, Plan, QueueCtx, Request};
use crate::controller::{Controller, QueueClaimError};
use crate::subsystem::ControllerModel;

/// CAP.TO and CRTO.CRWMT in 500 ms units: how long a host waits for CSTS.RDY.
const CAP_TIMEOUT_UNITS: u16 = 15;
/// Property attribute size field: 0 = 4 bytes, 1 = 8 bytes.
const PROP_SIZE_4: u8 = 0;
const PROP_SIZE_8: u8 = 1;
const PROP_SIZE_MASK: u8 = 0x7;

/// Parses the first command on an unconnected queue: it must be a Connect.
pub(super) fn parse_connect(req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    if cmd.opcode() != FABRICS_OPCODE || cmd.fctype() != fctype::CONNECT {
        warn!(
            opcode = cmd.opcode(),
            "command other than Connect on an unconnected queue"
        );
        return Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0));
    }
    Ok(Plan {
        dir: DataDir::HostToCtrl,
        len: CONNECT_DATA_LEN as u32,
    })
}

/// Parses a fabrics command on a connected queue.
pub(super) fn parse(q: &QueueCtx, req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    match cmd.fctype() {
        fctype::CONNECT => {
            // nvmet (nvmet_parse_fabrics_{admin,io}_cmd) and SPDK
            // (nvmf_ctrlr_process_fabrics_cmd) both answer Invalid Opcode: on a connected
            // queue Connect is not a command at all. nvmet adds DNR; so do we.
            warn!(qid = %q.qid, "Connect on an already connected queue");
            Err(Status::generic_dnr(generic::INVALID_OPCODE).at(FCTYPE_OFFSET, 0))
        }
        fctype::PROPERTY_GET | fctype::PROPERTY_SET if q.qid.is_admin() => Ok(Plan::NONE),
        fctype::DISCONNECT => Ok(Plan::NONE),
        fctype::AUTH_SEND | fctype::AUTH_RECEIVE => super::auth::parse(q, req),
        other => {
            warn!(qid = %q.qid, fctype = other, "unsupported fabrics command type");
            Err(Status::generic_dnr(generic::INVALID_OPCODE).at(FCTYPE_OFFSET, 0))
        }
    }
}

/// Byte offset of FCTYPE in a fabrics command.
const FCTYPE_OFFSET: u16 = 4;

pub(super) fn execute(q: &mut QueueCtx, ex: &mut ExecCtx, req: &mut Request) -> Outcome {
    let f = req.cmd().fctype();
    let result = match f {
        fctype::CONNECT => connect(q, ex, req),
        fctype::PROPERTY_GET => property_get(q, req),
        fctype::PROPERTY_SET => property_set(q, req),
        fctype::AUTH_SEND => super::auth::send(q, ex, req),
        fctype::AUTH_RECEIVE => super::auth::receive(q, ex, req),
        fctype::DISCONNECT => {
            info!(qid = %q.qid, "host sent Disconnect");
            q.disconnect = true;
            Ok(())
        }
        _ => Err(Status::generic_dnr(generic::INVALID_OPCODE).at(FCTYPE_OFFSET, 0)),
    };
    if let Err(s) = result {
        req.fail(s);
    }
    Outcome::Done
}

fn invalid_param(in_data: bool, offset: u16, req: &mut Request) -> Status {
    req.dw0 = connect_invalid_param_dw0(in_data, offset);
    let st = Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_PARAMETERS);
    if in_data {
        st
    } else {
        st.at(offset, 0)
    }
}

fn connect(q: &mut QueueCtx, ex: &mut ExecCtx, req: &mut Request) -> Result<(), Status> {
    let mut raw = [0u8; 64];
    raw.copy_from_slice(&req.sqe);
    let cmd = ConnectCmd::new_unchecked(&raw[..]);
    let (recfmt, qid, sqsize, kato) = (cmd.recfmt(), cmd.qid(), cmd.sqsize(), cmd.kato());
    if recfmt != 0 {
        warn!(recfmt, "Connect with unsupported record format");
        return Err(
            Status::cmd_specific_dnr(cmd_specific::CONNECT_INCOMPATIBLE_FORMAT)
                .at(connect_offset::RECFMT, 0),
        );
    }
    // An SGL of any other length than 1024 bytes never gets here: `parse` refused it
    // with Data SGL Length Invalid (nvmet_check_transfer_len; SPDK refuses only a
    // shorter one, with Invalid Field).
    let mut data = vec![0u8; CONNECT_DATA_LEN];
    if !req.read_data(0, &mut data) {
        return Err(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0));
    }
    let d = ConnectData::new_unchecked(&data[..]);
    let subnqn = match Nqn::from_wire(d.subsysnqn_field()) {
        Ok(n) => n,
        Err(e) => {
            warn!("Connect with invalid subsystem NQN: {e}");
            return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
        }
    };
    let hostnqn = match Nqn::from_wire(d.hostnqn_field()) {
        Ok(n) => n,
        // Empty: admitted only by subsystems that allow any host (nvmet, SPDK).
        Err(nvmf_common::types::NqnError::Empty) => Nqn::empty_host(),
        // Not NUL-terminated within 224 bytes: SPDK refuses (nvmf_ctrlr_cmd_connect);
        // nvmet truncates at 255 and accepts; we refuse. Not UTF-8: both accept any
        // bytes; we refuse on purpose (an NQN is UTF-8, and a lossy copy could match
        // another host's controller).
        Err(e) => {
            warn!(%subnqn, "Connect with invalid host NQN: {e}");
            return Err(invalid_param(true, connect_data_offset::HOSTNQN, req));
        }
    };
    if let Some(bound) = q.bound_qid.filter(|b| b.0 != qid) {
        // NVMe/RDMA named the queue in its CM private data; the Connect must agree.
        warn!(%subnqn, %hostnqn, "Connect for qid {qid} on transport queue {bound}");
        return Err(invalid_param(false, connect_offset::QID, req));
    }
    let Some(subsys) = ex.target.find_subsystem(&subnqn) else {
        warn!(%subnqn, %hostnqn, "Connect to unknown subsystem");
        return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
    };
    if !ex.target.port_exports(q.port.portid, &subnqn) {
        // nvmet_find_get_subsys: only subsystems linked to the port are reachable.
        warn!(%subnqn, %hostnqn, portid = q.port.portid, "Connect to a subsystem this port does not export");
        return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
    }
    if !subsys.host_allowed(&hostnqn) {
        warn!(%subnqn, %hostnqn, "Connect by a host that is not allowed");
        req.dw0 = connect_invalid_param_dw0(true, connect_data_offset::HOSTNQN);
        return Err(Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_HOST));
    }
    if let Some(tls) = &q.tls {
        // The PSK authenticated the pair its identity names; a Connect for another
        // host or subsystem would borrow that authentication.
        if tls.hostnqn != hostnqn.as_str() {
            warn!(%subnqn, %hostnqn, identity = %tls.identity, "Connect by another host than the TLS PSK identity names");
            req.dw0 = connect_invalid_param_dw0(true, connect_data_offset::HOSTNQN);
            return Err(Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_HOST));
        }
        if tls.subnqn != subnqn.as_str() {
            warn!(%subnqn, %hostnqn, identity = %tls.identity, "Connect to another subsystem than the TLS PSK identity names");
            return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
        }
    }
    let params = ex.target.params.clone();
    let cntlid = Cntlid(d.cntlid());
    if Qid(qid).is_admin() {
        // SPDK refuses SQSIZE >= max_aq_depth (nvmet-tcp sets no admin limit, nvmet-rdma
        // refuses more than 32 entries in the CM request); we refuse as SPDK does.
        if sqsize == 0 || u32::from(sqsize) >= u32::from(params.max_admin_queue_size) {
            warn!(%subnqn, %hostnqn, sqsize, "admin Connect with invalid queue size");
            return Err(invalid_param(false, connect_offset::SQSIZE, req));
        }
        let wanted = match subsys.controller_model {
            // nvmet and SPDK refuse any CNTLID but 0xFFFF on a fabrics admin queue.
            ControllerModel::Dynamic if cntlid != Cntlid::DYNAMIC => {
                warn!(%subnqn, %hostnqn, %cntlid, "dynamic subsystem: Connect must ask for cntlid 0xFFFF");
                return Err(invalid_param(true, connect_data_offset::CNTLID, req));
            }
            // The static model is ours alone (neither nvmet nor SPDK has one): a
            // specific CNTLID outside the subsystem's range names no controller.
            ControllerModel::Static
                if cntlid != Cntlid::STATIC_ANY
                    && cntlid != Cntlid::DYNAMIC
                    && !subsys.cntlid_in_range(cntlid) =>
            {
                warn!(%subnqn, %hostnqn, %cntlid, "static subsystem: CNTLID outside the subsystem's range");
                return Err(invalid_param(true, connect_data_offset::CNTLID, req));
            }
            _ => cntlid,
        };
        let Some(id) = subsys.alloc_cntlid(wanted) else {
            // nvmet_alloc_ctrl: no free id (or, static, the one asked for is in use) is
            // Connect Controller Busy with DNR; SPDK says Internal Device Error.
            warn!(%subnqn, %hostnqn, %cntlid, "no controller id available");
            return Err(Status::cmd_specific_dnr(
                cmd_specific::CONNECT_CONTROLLER_BUSY,
            ));
        };
        // KATO 0 on an NVM subsystem: no keep-alive (nvmet and SPDK alike); on the
        // discovery subsystem the configured discovery KATO (nvmet's and SPDK's 120 s),
        // so a discovery session a host forgot ends. Other values are kept as asked.
        let requested = match kato {
            0 if subsys.is_discovery() => params.discovery_kato_ms,
            k => k,
        };
        let kato_ms = super::identify::kato_ms(requested);
        let ctrl = Controller::new(
            id,
            subsys.clone(),
            hostnqn.clone(),
            d.hostid(),
            kato_ms,
            params,
            q.port.clone(),
        );
        // Nothing below fails: the controller exists. Announced before it is
        // registered, so nothing ends it (HostDisconnected) before that.
        ctrl.announce(&ex.target.events);
        subsys.register_controller(&ctrl);
        ctrl.set_auth_policy(ex.target.hosts.policy_for(&subsys, &hostnqn));
        info!(%subnqn, %hostnqn, cntlid = %id, kato_ms, sqsize, "admin queue connected");
        q.install(Qid(qid), sqsize, cmd.cattr());
        req.dw0 = u32::from(id.0) | super::auth::on_connect(q, &ctrl, ex.now);
        q.ctrl = Some(ctrl);
        return Ok(());
    }
    // I/O queue: join the controller named by CNTLID. KATO is ignored here (nvmet and
    // SPDK read it on the admin queue only). Another host's NQN: nvmet refuses
    // (nvmet_ctrl_find_get), SPDK accepts any allowed host; we refuse.
    let ctrl = match subsys.controller(cntlid) {
        Some(c) if c.hostnqn == hostnqn && !c.is_dead() => c,
        _ => {
            warn!(%subnqn, %hostnqn, %cntlid, qid, "I/O Connect names an unknown controller");
            return Err(invalid_param(true, connect_data_offset::CNTLID, req));
        }
    };
    if ctrl.port.portid != q.port.portid {
        // A controller lives on one port, and its ANA state is that port's. nvmet
        // accepts an I/O queue on another port; SPDK refuses it with Invalid
        // Parameters at QID when ANA reporting is on (ours always is); we refuse.
        warn!(%subnqn, %cntlid, qid, portid = q.port.portid, ctrl_portid = ctrl.port.portid,
            "I/O Connect on another port than the controller's admin queue");
        return Err(invalid_param(false, connect_offset::QID, req));
    }
    if !ctrl.is_ready() {
        // nvmet accepts (and fails the queue's commands later); SPDK refuses with
        // Invalid Parameters at QID; we refuse with the status nvmet gives those
        // commands, Command Sequence Error.
        warn!(%subnqn, %cntlid, qid, "I/O Connect before the controller is enabled");
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    }
    // CAP.MQES is max_queue_size - 1, so this is nvmet's `sqsize > mqes` and SPDK's
    // `sqsize >= max_queue_depth`: SQSIZE = MQES is accepted.
    if sqsize == 0 || u32::from(sqsize) >= u32::from(params.max_queue_size) {
        warn!(%subnqn, %cntlid, qid, sqsize, "I/O Connect with invalid queue size");
        return Err(invalid_param(false, connect_offset::SQSIZE, req));
    }
    match ctrl.claim_io_queue(Qid(qid)) {
        Ok(()) => {}
        Err(QueueClaimError::OutOfRange) => {
            warn!(%subnqn, %cntlid, qid, "I/O Connect beyond the queue limit or to a discovery controller");
            return Err(invalid_param(false, connect_offset::QID, req));
        }
        Err(QueueClaimError::AlreadyConnected) => {
            // nvmet_install_queue: Command Sequence Error at QID; SPDK: Invalid Queue
            // Identifier. We answer as nvmet does.
            warn!(%subnqn, %cntlid, qid, "I/O queue already connected");
            return Err(
                Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR).at(connect_offset::QID, 0)
            );
        }
    }
    tracing::debug!(%subnqn, %cntlid, qid, sqsize, "I/O queue connected");
    q.install(Qid(qid), sqsize, cmd.cattr());
    req.dw0 = super::auth::on_connect(q, &ctrl, ex.now);
    q.ctrl = Some(ctrl);
    Ok(())
}

/// CAP as this target reports it.
///
/// CRMS: CRWMS set, so a host that knows NVMe 2.0 reads CRTO (the Linux host does in
/// `nvme_enable_ctrl` whenever CAP.CRMS.CRWMS is set, whatever VS says); CRIMS clear,
/// as CC.CRIME is not implemented (a controller is ready at once, media and all), and
/// because the Linux host takes CRIMS as a sign to use the Command Set Independent
/// Identify Namespace, which we do not serve. SPDK sets CRWMS alone too (and VS 2.0);
/// nvmet sets neither. VS stays 1.3: Linux hosts after 6.12 (`nvme_scan_ns`: CRIMS, or
/// VS 2.0 or later) read a namespace through the Command Set Independent Identify
/// Namespace (CNS 08h), which we do not serve, and skip a namespace whose CNS 08h
/// fails; VS 2.0 would also promise what 2.0 makes mandatory. CRMS is reserved in
/// 1.3, so a 1.3 host ignores it.
/// `io_command_sets`: the controller serves other I/O command sets than NVM (a
/// passthru subsystem's zoned or key-value namespaces), so CAP.CSS also reports
/// "one or more I/O command sets" and the host may enable it with CC.CSS = 110b
/// (nvmet reports it for every controller; ours only where a namespace needs it).
pub(crate) fn cap_value(max_queue_size: u16, io_command_sets: bool) -> u64 {
    let css = if io_command_sets {
        cap_css::NVM | cap_css::CSI
    } else {
        cap_css::NVM
    };
    Cap::default()
        .with_mqes(max_queue_size.saturating_sub(1))
        .with_cqr(true)
        .with_to(CAP_TIMEOUT_UNITS as u8)
        .with_css(css)
        .with_crms(cap_crms::CRWMS)
        .0
}

/// CRTO as this target reports it: CRWMT equal to CAP.TO (as SPDK; the Linux host
/// warns about a CRWMT below CAP.TO and then keeps CAP.TO), CRIMT 0 (CRIMS is clear).
pub(crate) fn crto_value() -> u32 {
    Crto::default().with_crwmt(CAP_TIMEOUT_UNITS).0
}

fn property_get(q: &QueueCtx, req: &mut Request) -> Result<(), Status> {
    let Some(ctrl) = q.ctrl.clone() else {
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    };
    let (attrib, offset) = {
        let p = PropertyGet::new_unchecked(&req.sqe[..]);
        (p.attrib() & PROP_SIZE_MASK, p.offset())
    };
    let value: u64 = match (offset, attrib) {
        (reg::CAP, PROP_SIZE_8) => {
            cap_value(ctrl.params.max_queue_size, ctrl.subsys.passthru().is_some())
        }
        // A passthru controller reports its device's version, as its Identify does.
        (reg::VS, PROP_SIZE_4) => {
            u64::from(ctrl.subsys.passthru().map_or(NVME_VS_1_3, |p| p.version))
        }
        (reg::CC, PROP_SIZE_4) => u64::from(ctrl.cc().0),
        (reg::CSTS, PROP_SIZE_4) => u64::from(ctrl.csts().0),
        (reg::CRTO, PROP_SIZE_4) => u64::from(crto_value()),
        (reg::CAP | reg::VS | reg::CC | reg::CSTS | reg::CRTO, _) => {
            return Err(Status::generic_dnr(generic::INVALID_FIELD).at(PROP_ATTRIB_OFFSET, 0))
        }
        _ => {
            warn!(offset, "Property Get of an unsupported register");
            return Err(Status::generic_dnr(generic::INVALID_FIELD).at(PROP_OFFSET_OFFSET, 0));
        }
    };
    req.dw0 = value as u32;
    req.dw1 = (value >> 32) as u32;
    Ok(())
}

fn property_set(q: &QueueCtx, req: &mut Request) -> Result<(), Status> {
    let Some(ctrl) = q.ctrl.clone() else {
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    };
    let (attrib, offset, value) = {
        let p = PropertySet::new_unchecked(&req.sqe[..]);
        (p.attrib() & PROP_SIZE_MASK, p.offset(), p.value())
    };
    match (offset, attrib) {
        (reg::CC, PROP_SIZE_4) => {
            let st = ctrl.write_cc(nvmf_common::wire::fabrics::Cc(value as u32));
            if st.is_success() {
                Ok(())
            } else {
                Err(st)
            }
        }
        (reg::CC, _) => Err(Status::generic_dnr(generic::INVALID_FIELD).at(PROP_ATTRIB_OFFSET, 0)),
        _ => {
            warn!(
                offset,
                "Property Set of a read-only or unsupported register"
            );
            Err(Status::generic_dnr(generic::INVALID_FIELD).at(PROP_OFFSET_OFFSET, 0))
        }
    }
}

/// Byte offsets of Property Get/Set fields for error locations.
const PROP_ATTRIB_OFFSET: u16 = 40;
const PROP_OFFSET_OFFSET: u16 = 44;
