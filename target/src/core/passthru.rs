//! Commands of a passthru subsystem's controllers ([`crate::passthru`]): admin
//! commands the allowed list sends to the device go to the subsystem's admin worker,
//! I/O commands of every command set go to the namespace's channel (io_uring NVMe
//! passthrough), both as backend operations the runtime completes like any other.
//!
//! The data of a passthru command is what the host's SGL describes, in the
//! direction bits 1:0 of the opcode name (NVMe Base "Opcodes"), as nvmet's passthru
//! takes the transfer length from the request: the target cannot know every command
//! set's sizes. The device checks the length against the command's own fields.

use std::sync::Arc;

use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, Status};

use super::{io::io_ns, DataDir, ExecCtx, Outcome, Plan, Request};
use crate::backend::PassthruCmd;
use crate::controller::Controller;
use crate::passthru::policy::{route_admin, AdminRoute};
use crate::passthru::serve::PassthruSubsystem;
use crate::passthru::FabricFields;

/// Bits 1:0 of an opcode: the direction of its data.
const XFER_MASK: u8 = 0b11;
const XFER_NONE: u8 = 0b00;
const XFER_TO_DEVICE: u8 = 0b01;
const XFER_FROM_DEVICE: u8 = 0b10;

/// The plan of a passthru command: the SGL's length, in the opcode's direction. A
/// bidirectional opcode (11b) is refused: one buffer cannot go both ways.
fn plan(opcode: u8, sgl_len: u32) -> Result<Plan, Status> {
    let dir = match opcode & XFER_MASK {
        XFER_NONE => return Ok(Plan::NONE),
        XFER_TO_DEVICE => DataDir::HostToCtrl,
        XFER_FROM_DEVICE => DataDir::CtrlToHost,
        _ => {
            return Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0));
        }
    };
    if sgl_len == 0 {
        return Ok(Plan::NONE);
    }
    Ok(Plan { dir, len: sgl_len })
}

/// Whether admin command `req` of a controller of `pt` goes to the device (or is
/// refused for it): `None` when the target answers it itself.
pub(super) fn parse_admin(
    pt: &PassthruSubsystem,
    req: &Request,
    sgl_len: u32,
) -> Option<Result<Plan, Status>> {
    let cmd = req.cmd();
    match route_admin(&cmd, &pt.cfg) {
        AdminRoute::Emulate => None,
        AdminRoute::Refuse(s) => {
            tracing::debug!(opcode = cmd.opcode(), status = %s, "passthru admin command refused");
            Some(Err(s))
        }
        _ => Some(plan(cmd.opcode(), sgl_len)),
    }
}

/// Whether `req` was routed to the device by [`parse_admin`].
pub(super) fn is_device_admin(pt: &PassthruSubsystem, req: &Request) -> bool {
    !matches!(
        route_admin(&req.cmd(), &pt.cfg),
        AdminRoute::Emulate | AdminRoute::Refuse(_)
    )
}

/// What the device's Identify data is rewritten with for `ctrl`.
fn fabric_fields(ctrl: &Controller) -> FabricFields {
    let p = &ctrl.params;
    FabricFields {
        cntlid: ctrl.cntlid.0,
        subnqn: ctrl.subsys.nqn.to_string(),
        max_io_size: p.max_io_size,
        max_queue_size: p.max_queue_size,
        in_capsule_data_size: p.in_capsule_data_size,
        keyed_sgls: ctrl.port.keyed_sgls,
        msdbd: ctrl.port.msdbd,
        static_model: matches!(
            ctrl.subsys.controller_model,
            crate::subsystem::ControllerModel::Static
        ),
        aerl: (crate::controller::AER_LIMIT - 1) as u8,
        acl: super::identify::ACL,
        kas: super::identify::KAS_100MS_UNITS,
    }
}

/// Hands admin command `req` to the subsystem's admin worker.
pub(super) fn execute_admin(
    pt: &Arc<PassthruSubsystem>,
    ctrl: &Controller,
    ex: &mut ExecCtx,
    req: &mut Request,
    tag: u64,
) -> Outcome {
    let cmd = PassthruCmd {
        sqe: req.sqe,
        buf: req.data.clone(),
        fabric: Some(Arc::new(fabric_fields(ctrl))),
    };
    match ex.submit_device_admin(pt, tag, cmd) {
        Ok(()) => {
            req.pending = 1;
            Outcome::Pending
        }
        Err(e) => {
            req.fail(e.status());
            Outcome::Done
        }
    }
}

/// An I/O command of a passthru subsystem: the namespace (visible to this host,
/// reachable on this path), then the SGL's data in the opcode's direction. Every
/// opcode of every command set passes; the device answers those it does not know.
pub(super) fn parse_io(ctrl: &Controller, req: &mut Request, sgl_len: u32) -> Result<Plan, Status> {
    let cmd = req.cmd();
    let ns = io_ns(ctrl, cmd.nsid())?;
    let plan = plan(cmd.opcode(), sgl_len)?;
    req.ns = Some(ns);
    Ok(plan)
}

/// Sends I/O command `req` to its namespace's device channel.
pub(super) fn execute_io(ex: &mut ExecCtx, req: &mut Request, tag: u64) -> Outcome {
    let Some(ns) = req.ns.clone().filter(|n| !n.is_removed()) else {
        req.fail(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
        return Outcome::Done;
    };
    let cmd = PassthruCmd {
        sqe: req.sqe,
        buf: req.data.clone(),
        fabric: None,
    };
    match ex.submit_passthru(&ns, tag, cmd) {
        Ok(()) => {
            req.pending = 1;
            Outcome::Pending
        }
        Err(e) => {
            req.fail(e.status());
            Outcome::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_follows_the_opcode_and_the_sgl() {
        assert_eq!(plan(0x02, 4096).unwrap().dir, DataDir::CtrlToHost);
        assert_eq!(
            plan(0x01, 512).unwrap(),
            Plan {
                dir: DataDir::HostToCtrl,
                len: 512
            }
        );
        // Zone Append (7Dh) writes; Zone Management Receive (7Ah) reads.
        assert_eq!(plan(0x7D, 8192).unwrap().dir, DataDir::HostToCtrl);
        assert_eq!(plan(0x7A, 8192).unwrap().dir, DataDir::CtrlToHost);
        // No data: whatever the SGL says, nothing moves, and parse's length check
        // then refuses a command whose SGL describes data.
        assert_eq!(plan(0x00, 0).unwrap(), Plan::NONE);
        assert_eq!(plan(0x00, 4096).unwrap(), Plan::NONE);
        let s = plan(0x03, 4096).unwrap_err();
        assert!(
            s.is(
                nvmf_common::wire::status::Sct::Generic,
                generic::INVALID_OPCODE
            ) && s.dnr
        );
    }
}
