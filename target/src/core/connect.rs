//! The fabrics Connect command, in the stages nvmet also keeps apart: read the
//! command and its data ([`ConnectRequest::read`]), admit the host to the subsystem
//! on this port ([`admit`]), then create a controller for an admin queue
//! ([`connect_admin`]) or join an existing one for an I/O queue ([`connect_io`]).
//!
//! Every refusal carries the exact fabrics status and, for Invalid Parameters, the
//! attribute and byte offset of the offending field in completion dword 0
//! (IATTR/IPO), as the Linux host prints them. Where nvmet and SPDK differ, the
//! comment at the check says which one we follow.

use std::sync::Arc;

use tracing::{info, warn};

use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::fabrics::{
    connect_data_offset, connect_invalid_param_dw0, connect_offset, ConnectCmd, ConnectData,
    CONNECT_DATA_LEN,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Status};

use super::{ExecCtx, QueueCtx, Request};
use crate::controller::{Controller, QueueClaimError};
use crate::subsystem::{ControllerModel, Subsystem};

/// Connect Invalid Parameters naming the field at `offset` (in the data when
/// `in_data`, else in the SQE) in dword 0, as the host reports it.
fn invalid_param(in_data: bool, offset: u16, req: &mut Request) -> Status {
    req.dw0 = connect_invalid_param_dw0(in_data, offset);
    let st = Status::cmd_specific_dnr(cmd_specific::CONNECT_INVALID_PARAMETERS);
    if in_data {
        st
    } else {
        st.at(offset, 0)
    }
}

/// What a Connect command and its data ask for.
struct ConnectRequest {
    qid: u16,
    sqsize: u16,
    kato: u32,
    cattr: u8,
    cntlid: Cntlid,
    hostid: [u8; 16],
    subnqn: Nqn,
    hostnqn: Nqn,
}

impl ConnectRequest {
    /// Reads the command and its 1024 bytes of data; refuses a record format, NQN
    /// or queue id that cannot be served.
    fn read(q: &QueueCtx, req: &mut Request) -> Result<Self, Status> {
        let mut raw = [0u8; 64];
        raw.copy_from_slice(&req.sqe);
        let cmd = ConnectCmd::new_unchecked(&raw[..]);
        if cmd.recfmt() != 0 {
            warn!(
                recfmt = cmd.recfmt(),
                "Connect with unsupported record format"
            );
            return Err(
                Status::cmd_specific_dnr(cmd_specific::CONNECT_INCOMPATIBLE_FORMAT)
                    .at(connect_offset::RECFMT, 0),
            );
        }
        // An SGL of any other length than 1024 bytes never gets here: `parse` refused
        // it with Data SGL Length Invalid (nvmet_check_transfer_len; SPDK refuses only
        // a shorter one, with Invalid Field).
        let mut data = vec![0u8; CONNECT_DATA_LEN];
        if !req.read_data(0, &mut data) {
            return Err(
                Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0)
            );
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
        let qid = cmd.qid();
        if let Some(bound) = q.bound_qid.filter(|b| b.0 != qid) {
            // NVMe/RDMA named the queue in its CM private data; the Connect must agree.
            warn!(%subnqn, %hostnqn, "Connect for qid {qid} on transport queue {bound}");
            return Err(invalid_param(false, connect_offset::QID, req));
        }
        Ok(ConnectRequest {
            qid,
            sqsize: cmd.sqsize(),
            kato: cmd.kato(),
            cattr: cmd.cattr(),
            cntlid: Cntlid(d.cntlid()),
            hostid: d.hostid(),
            subnqn,
            hostnqn,
        })
    }
}

/// The subsystem `c` names, if this port exports it to this host (and, on a TLS
/// connection, if it is the pair the PSK identity names).
fn admit(
    q: &QueueCtx,
    ex: &ExecCtx,
    c: &ConnectRequest,
    req: &mut Request,
) -> Result<Arc<Subsystem>, Status> {
    let (subnqn, hostnqn) = (&c.subnqn, &c.hostnqn);
    let Some(subsys) = ex.target.find_subsystem(subnqn) else {
        warn!(%subnqn, %hostnqn, "Connect to unknown subsystem");
        return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
    };
    if !ex.target.port_exports(q.port.portid, subnqn) {
        // nvmet_find_get_subsys: only subsystems linked to the port are reachable.
        warn!(%subnqn, %hostnqn, portid = q.port.portid, "Connect to a subsystem this port does not export");
        return Err(invalid_param(true, connect_data_offset::SUBSYSNQN, req));
    }
    if !subsys.host_allowed(hostnqn) {
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
    Ok(subsys)
}

/// Runs a Connect on queue `q`: a new controller for an admin queue, or an I/O
/// queue of an existing one.
pub(super) fn connect(q: &mut QueueCtx, ex: &mut ExecCtx, req: &mut Request) -> Result<(), Status> {
    let c = ConnectRequest::read(q, req)?;
    let subsys = admit(q, ex, &c, req)?;
    if Qid(c.qid).is_admin() {
        connect_admin(q, ex, req, &c, subsys)
    } else {
        connect_io(q, ex, req, &c, &subsys)
    }
}

/// The controller id an admin Connect asks for, if the subsystem's model allows it.
fn wanted_cntlid(
    subsys: &Subsystem,
    c: &ConnectRequest,
    req: &mut Request,
) -> Result<Cntlid, Status> {
    let (subnqn, hostnqn, cntlid) = (&c.subnqn, &c.hostnqn, c.cntlid);
    match subsys.controller_model {
        // nvmet and SPDK refuse any CNTLID but 0xFFFF on a fabrics admin queue.
        ControllerModel::Dynamic if cntlid != Cntlid::DYNAMIC => {
            warn!(%subnqn, %hostnqn, %cntlid, "dynamic subsystem: Connect must ask for cntlid 0xFFFF");
            Err(invalid_param(true, connect_data_offset::CNTLID, req))
        }
        // The static model is ours alone (neither nvmet nor SPDK has one): a specific
        // CNTLID outside the subsystem's range names no controller.
        ControllerModel::Static
            if cntlid != Cntlid::STATIC_ANY
                && cntlid != Cntlid::DYNAMIC
                && !subsys.cntlid_in_range(cntlid) =>
        {
            warn!(%subnqn, %hostnqn, %cntlid, "static subsystem: CNTLID outside the subsystem's range");
            Err(invalid_param(true, connect_data_offset::CNTLID, req))
        }
        _ => Ok(cntlid),
    }
}

/// An admin queue: a new controller of `subsys` for the host.
fn connect_admin(
    q: &mut QueueCtx,
    ex: &mut ExecCtx,
    req: &mut Request,
    c: &ConnectRequest,
    subsys: Arc<Subsystem>,
) -> Result<(), Status> {
    let (subnqn, hostnqn, sqsize) = (&c.subnqn, &c.hostnqn, c.sqsize);
    let params = ex.target.params.clone();
    // SPDK refuses SQSIZE >= max_aq_depth (nvmet-tcp sets no admin limit, nvmet-rdma
    // refuses more than 32 entries in the CM request); we refuse as SPDK does.
    if sqsize == 0 || u32::from(sqsize) >= u32::from(params.max_admin_queue_size) {
        warn!(%subnqn, %hostnqn, sqsize, "admin Connect with invalid queue size");
        return Err(invalid_param(false, connect_offset::SQSIZE, req));
    }
    let wanted = wanted_cntlid(&subsys, c, req)?;
    let Some(id) = subsys.alloc_cntlid(wanted) else {
        // nvmet_alloc_ctrl: no free id (or, static, the one asked for is in use) is
        // Connect Controller Busy with DNR; SPDK says Internal Device Error.
        warn!(%subnqn, %hostnqn, cntlid = %c.cntlid, "no controller id available");
        return Err(Status::cmd_specific_dnr(
            cmd_specific::CONNECT_CONTROLLER_BUSY,
        ));
    };
    // KATO 0 on an NVM subsystem: no keep-alive (nvmet and SPDK alike); on the
    // discovery subsystem the configured discovery KATO (nvmet's and SPDK's 120 s), so
    // a discovery session a host forgot ends. Other values are kept as asked.
    let requested = match c.kato {
        0 if subsys.is_discovery() => params.discovery_kato_ms,
        k => k,
    };
    let kato_ms = super::identify::kato_ms(requested);
    let ctrl = Controller::new(
        id,
        subsys.clone(),
        hostnqn.clone(),
        c.hostid,
        kato_ms,
        params,
        q.port.clone(),
    );
    // Nothing below fails: the controller exists. Announced before it is registered,
    // so nothing ends it (HostDisconnected) before that.
    ctrl.announce(&ex.target.events);
    subsys.register_controller(&ctrl);
    ctrl.set_auth_policy(ex.target.hosts.policy_for(&subsys, hostnqn));
    info!(%subnqn, %hostnqn, cntlid = %id, kato_ms, sqsize, "admin queue connected");
    q.install(Qid(c.qid), sqsize, c.cattr);
    req.dw0 = u32::from(id.0) | super::auth::on_connect(q, &ctrl, ex.now);
    q.ctrl = Some(ctrl);
    Ok(())
}

/// An I/O queue: joins the controller named by CNTLID. KATO is ignored here (nvmet
/// and SPDK read it on the admin queue only). Another host's NQN: nvmet refuses
/// (nvmet_ctrl_find_get), SPDK accepts any allowed host; we refuse.
fn connect_io(
    q: &mut QueueCtx,
    ex: &mut ExecCtx,
    req: &mut Request,
    c: &ConnectRequest,
    subsys: &Subsystem,
) -> Result<(), Status> {
    let (subnqn, hostnqn, cntlid, qid, sqsize) = (&c.subnqn, &c.hostnqn, c.cntlid, c.qid, c.sqsize);
    let ctrl = match subsys.controller(cntlid) {
        Some(ctrl) if ctrl.hostnqn == *hostnqn && !ctrl.is_dead() => ctrl,
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
    if sqsize == 0 || u32::from(sqsize) >= u32::from(ex.target.params.max_queue_size) {
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
    q.install(Qid(qid), sqsize, c.cattr);
    req.dw0 = super::auth::on_connect(q, &ctrl, ex.now);
    q.ctrl = Some(ctrl);
    Ok(())
}
