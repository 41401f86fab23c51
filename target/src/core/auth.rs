//! Authentication Send / Receive and the gate in front of every other command
//! (DH-HMAC-CHAP, NVMe Base 2.x 8.3.5; Linux `fabrics-cmd-auth.c`).
//!
//! A Connect to a controller whose host has a key sets AUTHREQ.ATR in its response and
//! gives the queue a [`ControllerAuth`]. Until that queue has authenticated, every
//! command but Authentication Send/Receive and Disconnect completes with
//! Authentication Required (SCT 1h, SC 91h, DNR) — Property Get/Set included, as SPDK
//! (nvmet lets them through). A failed exchange ends the controller after the
//! response that reports it (after a short grace, so that response arrives first);
//! so does a transaction that stalls longer than `transport.auth_timeout_ms` (nvmet
//! uses the keep-alive timeout, too short for a host computing ffdhe8192 on a slow
//! CPU). Keep-alive does not expire the controller while its admin queue is
//! authenticating: the host cannot send Keep Alive before it is authenticated.
//!
//! A queue whose controller asks for no authentication refuses both commands with
//! Command Sequence Error (nvmet would run the exchange and fail it at the Reply).

use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use nvmf_common::auth::{ControllerAuth, ReceiveError, ReceiveEvent, SendEvent, MAX_TRANSFER_LEN};
use nvmf_common::wire::auth::{offset, AuthCmd, SECP_DHCHAP, SPSP_DHCHAP};
use nvmf_common::wire::fabrics::{authreq, fctype, FABRICS_OPCODE};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Status};

use super::{DataDir, ExecCtx, Plan, QueueCtx, Request};
use crate::controller::Controller;

/// After a failed exchange, how long the queue stays (refusing everything) before its
/// controller ends, so the response reporting the failure reaches the host before the
/// connection goes (nvmet ends it from a work item, too).
const FAILURE_GRACE: Duration = Duration::from_millis(500);

/// How long a transaction may wait for the host (`transport.auth_timeout_ms`).
fn timeout(ctrl: &Controller) -> Duration {
    Duration::from_millis(u64::from(ctrl.params.auth_timeout_ms))
}

/// After a successful Connect: the AUTHREQ bits of its response dword 0.
pub(super) fn on_connect(q: &mut QueueCtx, ctrl: &Controller, now: Instant) -> u32 {
    if ctrl.auth_policy().is_none() {
        return 0;
    }
    q.auth = Some(Box::new(ControllerAuth::new(
        ctrl.hostnqn.as_str(),
        ctrl.subsys.nqn.as_str(),
    )));
    q.auth_deadline = Some(now + timeout(ctrl));
    authreq::ATR
}

/// The status for a command that may not run yet, if any.
pub(super) fn gate(q: &QueueCtx, req: &Request) -> Option<Status> {
    let auth = q.auth.as_ref()?;
    if auth.is_authenticated() {
        return None;
    }
    let cmd = req.cmd();
    if cmd.opcode() == FABRICS_OPCODE
        && matches!(
            cmd.fctype(),
            fctype::AUTH_SEND | fctype::AUTH_RECEIVE | fctype::DISCONNECT
        )
    {
        return None;
    }
    debug!(qid = %q.qid, opcode = cmd.opcode(), "command before authentication");
    Some(Status::cmd_specific_dnr(cmd_specific::AUTH_REQUIRED))
}

/// Checks SECP, SPSP0/1 and the length; the plan moves TL (send) or AL (receive) bytes.
pub(super) fn parse(q: &QueueCtx, req: &Request) -> Result<Plan, Status> {
    let raw = req.sqe;
    let c = AuthCmd::new_unchecked(&raw[..]);
    let field = |at: u16| Status::generic_dnr(generic::INVALID_FIELD).at(at, 0);
    if q.auth.is_none() {
        debug!(qid = %q.qid, "authentication command; this controller asks for none");
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    }
    if c.secp() != SECP_DHCHAP {
        return Err(field(offset::SECP));
    }
    if c.spsp0() != SPSP_DHCHAP {
        return Err(field(offset::SPSP0));
    }
    if c.spsp1() != SPSP_DHCHAP {
        return Err(field(offset::SPSP1));
    }
    if c.is_empty() || c.len() > MAX_TRANSFER_LEN {
        warn!(qid = %q.qid, len = c.len(), "authentication transfer length out of range");
        return Err(field(offset::LEN));
    }
    let dir = if c.as_sqe().fctype() == fctype::AUTH_SEND {
        DataDir::HostToCtrl
    } else {
        DataDir::CtrlToHost
    };
    Ok(Plan { dir, len: c.len() })
}

/// Authentication Send: feeds the message to the queue's state machine.
pub(super) fn send(q: &mut QueueCtx, ex: &mut ExecCtx, req: &mut Request) -> Result<(), Status> {
    let mut data = vec![0u8; req.plan.len as usize];
    if !req.read_data(0, &mut data) {
        return Err(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0));
    }
    let (Some(ctrl), Some(auth)) = (q.ctrl.clone(), q.auth.as_mut()) else {
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    };
    let negotiate = data.get(..2) == Some(&[0, 0][..]);
    if negotiate && q.qid.is_admin() {
        // A (re-)authentication of the admin queue reads the host's current keys;
        // the I/O queues then use them too.
        ctrl.set_auth_policy(ex.target.hosts.policy_for(&ctrl.subsys, &ctrl.hostnqn));
    }
    let ev = auth.on_send(&data, ctrl.auth_policy());
    let qid = q.qid;
    match ev {
        SendEvent::Negotiated { hash, group } => {
            debug!(%qid, cntlid = %ctrl.cntlid, %hash, %group, "DH-HMAC-CHAP negotiated")
        }
        SendEvent::HostAuthenticated { bidirectional } => info!(
            %qid, cntlid = %ctrl.cntlid, host = %ctrl.hostnqn, bidirectional,
            "host authenticated (DH-HMAC-CHAP)"
        ),
        SendEvent::Authenticated => {
            debug!(%qid, cntlid = %ctrl.cntlid, "controller authentication confirmed by the host")
        }
        SendEvent::Failing { reason, what } => warn!(
            %qid, cntlid = %ctrl.cntlid, host = %ctrl.hostnqn,
            "DH-HMAC-CHAP failed: {what} ({reason})"
        ),
        SendEvent::HostFailed { reason } => {
            warn!(
                %qid, cntlid = %ctrl.cntlid, host = %ctrl.hostnqn,
                "host abandoned DH-HMAC-CHAP (AUTH_Failure2: {reason})"
            );
            failed(ex, &ctrl);
        }
    }
    after(q, &ctrl, ex.now);
    Ok(())
}

/// Authentication Receive: the state machine's next message, AL bytes.
pub(super) fn receive(q: &mut QueueCtx, ex: &ExecCtx, req: &mut Request) -> Result<(), Status> {
    let al = req.plan.len as usize;
    let (Some(ctrl), Some(auth)) = (q.ctrl.clone(), q.auth.as_mut()) else {
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    };
    match auth.on_receive(al) {
        Ok((bytes, ev)) => {
            req.write_data(0, &bytes);
            if let ReceiveEvent::Failure1 { reason } = ev {
                warn!(qid = %q.qid, cntlid = %ctrl.cntlid, host = %ctrl.hostnqn, "AUTH_Failure1 sent: {reason}");
                failed(ex, &ctrl);
            }
        }
        Err(e @ ReceiveError::TooSmall { .. }) => {
            warn!(qid = %q.qid, "Authentication Receive: {e}");
            return Err(Status::generic_dnr(generic::INVALID_FIELD).at(offset::LEN, 0));
        }
    }
    after(q, &ctrl, ex.now);
    Ok(())
}

/// A failed exchange (either side refused the other): counted, and announced to
/// event subscribers.
fn failed(ex: &ExecCtx, ctrl: &Controller) {
    ex.target
        .metrics
        .event(crate::metrics::Event::AuthFailed, ctrl);
    ex.target
        .events
        .emit(crate::events::TargetEvent::AuthenticationFailed {
            subsystem: ctrl.subsys.nqn.to_string(),
            host: ctrl.hostnqn.to_string(),
            portid: ctrl.port.portid,
        });
}

/// Re-arms or clears the deadline: the transaction's, or the short one after which a
/// failed queue's controller ends ([`QueueCtx::auth_expired`]).
fn after(q: &mut QueueCtx, ctrl: &Controller, now: Instant) {
    let Some(auth) = &q.auth else { return };
    q.auth_deadline = if auth.must_end() {
        Some(now + FAILURE_GRACE)
    } else {
        auth.in_transaction().then(|| now + timeout(ctrl))
    };
}
