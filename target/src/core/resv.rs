//! Reservation Register / Report / Acquire / Release, the reservation check in front of
//! I/O, the two reservation features (Notification Mask 82h, Persistence 83h) and the
//! Reservation Notification log page. The state lives in [`crate::resv`].
//!
//! Controllers of one host share its registration: they are told apart by the 128-bit
//! host identifier from Connect, which must not be zero (as the spec requires; the
//! extended report is the only one served, as in nvmet). Notices go to every
//! controller of the subsystem whose host identifier they name, unless the
//! namespace's notification mask suppresses that type. Preempt-and-abort behaves as
//! preempt: commands already past their check complete (nvmet waits for them too);
//! later ones from the preempted hosts get Reservation Conflict.

use std::sync::Arc;

use nvmf_common::wire::admin::{fid, sel};
use nvmf_common::wire::nvm::opcode;
use nvmf_common::wire::resv::{
    self, cdw10, encode_status_ext, keys, Access, KEYS_DATA_LEN, RELEASE_DATA_LEN, REPORT_EDS,
    STATUS_EXT_HDR_LEN,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, Status};

use super::{DataDir, Plan, Request};
use crate::controller::Controller;
use crate::namespace::Namespace;

/// Feature capability bits reported for the reservation features: changeable, per
/// namespace (SEL = 011b).
const FEAT_CAP_CHANGEABLE_NS: u32 = (1 << 2) | (1 << 1);

fn conflict() -> Status {
    Status::generic_dnr(generic::RESERVATION_CONFLICT).at(sqe::offset::OPCODE, 0)
}

/// The command group of an I/O opcode, for the reservation check.
pub(super) fn access(op: u8) -> Option<Access> {
    match op {
        // The spec's command groups: Verify reads, Copy writes (its destination).
        opcode::READ | opcode::COMPARE | opcode::VERIFY => Some(Access::Read),
        opcode::WRITE
        | opcode::WRITE_ZEROES
        | opcode::DATASET_MANAGEMENT
        | opcode::FLUSH
        | opcode::COPY => Some(Access::Write),
        _ => None,
    }
}

/// Reservation Conflict unless this controller's host may run `op` on `ns`.
#[inline]
pub(super) fn check(ctrl: &Controller, ns: &Namespace, op: u8) -> Result<(), Status> {
    match access(op) {
        Some(a) if !ns.resv.allows(&ctrl.hostid, a) => Err(conflict()),
        _ => Ok(()),
    }
}

/// Whether `op` is one of the four reservation commands.
pub(super) fn is_resv(op: u8) -> bool {
    matches!(
        op,
        opcode::RESERVATION_REGISTER
            | opcode::RESERVATION_REPORT
            | opcode::RESERVATION_ACQUIRE
            | opcode::RESERVATION_RELEASE
    )
}

/// The data a reservation command moves.
pub(super) fn plan(ctrl: &Controller, req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    if ctrl.hostid == [0; 16] {
        return Err(Status::generic_dnr(generic::HOST_ID_INCONSISTENT_FORMAT));
    }
    Ok(match cmd.opcode() {
        opcode::RESERVATION_REGISTER | opcode::RESERVATION_ACQUIRE => Plan {
            dir: DataDir::HostToCtrl,
            len: KEYS_DATA_LEN as u32,
        },
        opcode::RESERVATION_RELEASE => Plan {
            dir: DataDir::HostToCtrl,
            len: RELEASE_DATA_LEN as u32,
        },
        _ => {
            if cmd.cdw11() & REPORT_EDS == 0 {
                // 64-bit host identifiers: this target uses 128-bit ones (nvmet too).
                return Err(Status::generic_dnr(generic::HOST_ID_INCONSISTENT_FORMAT)
                    .at(sqe::offset::CDW11, 0));
            }
            let len = cmd.cdw10().saturating_add(1).saturating_mul(4);
            if (len as usize) < STATUS_EXT_HDR_LEN {
                return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0));
            }
            Plan {
                dir: DataDir::CtrlToHost,
                len,
            }
        }
    })
}

/// Runs a parsed reservation command (its data is in `req.data`).
pub(super) fn execute(ctrl: &Arc<Controller>, req: &mut Request) -> Result<(), Status> {
    let cmd = req.cmd();
    let Some(ns) = req.ns.clone() else {
        return Err(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
    };
    let c10 = cmd.cdw10();
    let action = (c10 & cdw10::ACTION_MASK) as u8;
    let iekey = c10 & cdw10::IEKEY != 0;
    let rtype = (c10 >> cdw10::RTYPE_SHIFT) as u8;
    let host = ctrl.hostid;
    let mut data = vec![0u8; req.plan.len as usize];
    if req.plan.dir == DataDir::HostToCtrl && !req.read_data(0, &mut data) {
        return Err(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0));
    }
    let (crkey, other) = keys(&data).unwrap_or_default();
    let out = match cmd.opcode() {
        opcode::RESERVATION_REGISTER => {
            let cptpl = (c10 >> cdw10::CPTPL_SHIFT) as u8;
            ns.resv
                .register(&host, action, iekey, crkey, other, cptpl)?
        }
        opcode::RESERVATION_ACQUIRE | opcode::RESERVATION_RELEASE if iekey => {
            // IEKEY is defined for Register only (nvmet and SPDK refuse it here).
            return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 3));
        }
        opcode::RESERVATION_ACQUIRE => ns.resv.acquire(&host, action, rtype, crkey, other)?,
        opcode::RESERVATION_RELEASE => ns.resv.release(&host, action, rtype, crkey)?,
        _ => {
            let (gen, t, ptpls, regs) = ns.resv.report();
            let page = encode_status_ext(gen, t, ptpls, &regs, req.plan.len as usize);
            req.write_data(0, &page);
            return Ok(());
        }
    };
    let mask = ns.resv.notify_mask();
    for (h, ltype) in out.notices {
        if mask & (1 << ltype) != 0 {
            continue;
        }
        for c in ctrl.subsys.controllers() {
            // A host that does not see the namespace gets no notice of it.
            if c.hostid == h && ns.visible_to(&c.hostnqn) {
                c.reservation_notice(ltype, ns.nsid.0);
            }
        }
    }
    Ok(())
}

/// Set Features 82h / 83h for one namespace (or every one, with NSID FFFFFFFFh).
pub(super) fn set_feature(ctrl: &Controller, req: &mut Request, f: u8) -> Result<(), Status> {
    let cmd = req.cmd();
    let v = cmd.cdw11();
    let nss = namespaces(ctrl, cmd.nsid())?;
    for ns in &nss {
        match f {
            fid::RESERVATION_NOTIFICATION_MASK => ns.resv.set_notify_mask(v)?,
            _ => ns.resv.set_ptpl(v & 1 != 0)?,
        }
    }
    req.dw0 = v;
    Ok(())
}

/// Get Features 82h / 83h of one namespace.
pub(super) fn get_feature(
    ctrl: &Controller,
    req: &mut Request,
    f: u8,
    select: u8,
) -> Result<(), Status> {
    let ns = super::find_ns(ctrl, req.cmd().nsid())?;
    req.dw0 = match select {
        sel::SUPPORTED => FEAT_CAP_CHANGEABLE_NS,
        sel::DEFAULT => 0,
        _ if f == fid::RESERVATION_NOTIFICATION_MASK => ns.resv.notify_mask(),
        _ => u32::from(ns.resv.ptpl()),
    };
    Ok(())
}

fn namespaces(ctrl: &Controller, nsid: u32) -> Result<Vec<Arc<Namespace>>, Status> {
    if nsid == nvmf_common::types::Nsid::BROADCAST.0 {
        return Ok(ctrl.namespaces());
    }
    super::find_ns(ctrl, nsid).map(|n| vec![n])
}

/// The Reservation Notification log page: the oldest pending notice, or an empty page.
pub(super) fn notification_log(ctrl: &Controller) -> Vec<u8> {
    loop {
        let (count, ltype, left, nsid) = ctrl.take_reservation_notice();
        // A notice queued before its namespace was hidden from this host is dropped.
        if nsid == 0 || ctrl.namespace(nvmf_common::types::Nsid(nsid)).is_some() {
            return resv::encode_notification(count, ltype, left, nsid);
        }
    }
}
