//! Fabrics commands: Property Get/Set, Disconnect, and the dispatch of Connect
//! ([`super::connect`]) and authentication ([`super::auth`]).

use tracing::{info, warn};

use nvmf_common::wire::fabrics::{
    cap_crms, cap_css, fctype, reg, Cap, Crto, PropertyGetCmd as PropertyGet,
    PropertySetCmd as PropertySet, CONNECT_DATA_LEN, FABRICS_OPCODE, NVME_VS_1_3,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, Status};

use super::{DataDir, ExecCtx, Outcome, Plan, QueueCtx, Request};

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
        fctype::CONNECT => super::connect::connect(q, ex, req),
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
