//! DH-HMAC-CHAP on one queue, right after its Connect asked for it (AUTHREQ.ATR):
//! Negotiate → Challenge → Reply → Success1 (→ Success2), each an Authentication
//! Send or Receive on that queue, as the Linux host does. A failure sends
//! AUTH_Failure2 when the controller still waits for one and names what failed.

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use tracing::{debug, info};

use nvmf_common::auth::{HostAuth, HostKeys};
use nvmf_common::types::Qid;
use nvmf_common::wire::fabrics::authreq;

use super::options::ConnectOptions;
use crate::command;
use crate::error::Error;
use crate::queue::Queue;
use crate::transport::{DataDir, Fabric};

/// Allocation length of each Authentication Receive (the Linux host's buffer).
const RECEIVE_LEN: usize = 4096;

/// Transaction identifiers, per process (the Linux host counts per controller).
fn next_tid() -> u16 {
    static TID: AtomicU16 = AtomicU16::new(1);
    TID.fetch_add(1, Ordering::Relaxed)
}

/// Decides from a Connect's dword 0 whether to authenticate, and does.
pub(super) fn after_connect(
    fabric: &dyn Fabric,
    q: &mut Queue,
    opts: &ConnectOptions,
    qid: Qid,
    dw0: u32,
) -> Result<(), Error> {
    if dw0 & authreq::ASCR != 0 {
        return Err(Error::Unsupported(
            "the controller requires secure channel concatenation (TLS after DH-HMAC-CHAP)".into(),
        ));
    }
    let wants = dw0 & authreq::ATR != 0;
    match (&opts.dhchap, wants) {
        (None, true) => Err(Error::Auth(format!(
            "qid {qid}: the controller requires DH-HMAC-CHAP authentication; give --dhchap-secret"
        ))),
        (Some(k), false) if k.ctrl_key.is_some() => Err(Error::Auth(format!(
            "qid {qid}: --dhchap-ctrl-secret asks the controller to authenticate, but it did not ask for authentication"
        ))),
        (Some(_), false) => {
            debug!(%qid, "controller asks for no authentication; the secret is not used");
            Ok(())
        }
        (None, false) => Ok(()),
        (Some(keys), true) => authenticate(fabric, q, opts, qid, keys),
    }
}

/// Runs one DH-HMAC-CHAP transaction on `q` (also a re-authentication).
pub fn authenticate(
    fabric: &dyn Fabric,
    q: &mut Queue,
    opts: &ConnectOptions,
    qid: Qid,
    keys: &HostKeys,
) -> Result<(), Error> {
    let t = opts.command_timeout;
    let mut h = HostAuth::new(
        keys.clone(),
        opts.hostnqn.as_str(),
        opts.subnqn.as_str(),
        next_tid(),
    );
    send(fabric, q, &h.negotiate(), t)?;
    let challenge = receive(fabric, q, t)?;
    let reply = match h.on_challenge(&challenge) {
        Ok(r) => r,
        Err(e) => return fail(fabric, q, &h, qid, e, t),
    };
    send(fabric, q, &reply, t)?;
    let success1 = receive(fabric, q, t)?;
    match h.on_success1(&success1) {
        Ok(Some(success2)) => send(fabric, q, &success2, t)?,
        Ok(None) => {}
        Err(e) => return fail(fabric, q, &h, qid, e, t),
    }
    if let Some((hash, group)) = h.chosen() {
        let bidirectional = keys.ctrl_key.is_some();
        if qid.is_admin() {
            info!(%qid, %hash, %group, bidirectional, "authenticated (DH-HMAC-CHAP)");
        } else {
            debug!(%qid, %hash, %group, bidirectional, "authenticated (DH-HMAC-CHAP)");
        }
    }
    Ok(())
}

fn fail(
    fabric: &dyn Fabric,
    q: &mut Queue,
    h: &HostAuth,
    qid: Qid,
    e: nvmf_common::auth::HostAuthError,
    t: Duration,
) -> Result<(), Error> {
    if e.needs_failure2() {
        // Best effort: the controller ends the association either way.
        let _ = send(fabric, q, &h.failure2(&e), t);
    }
    Err(Error::Auth(format!("qid {qid}: {e}")))
}

fn send(fabric: &dyn Fabric, q: &mut Queue, msg: &[u8], t: Duration) -> Result<(), Error> {
    let buf = fabric.alloc(msg.len())?;
    if !buf.write_at(0, msg) {
        return Err(Error::Protocol(
            "authentication message does not fit its buffer".into(),
        ));
    }
    let c = q.execute(
        command::auth(true, msg.len() as u32),
        Some(&buf),
        DataDir::ToCtrl,
        t,
    )?;
    if !c.status.is_success() {
        return Err(Error::nvme("Authentication Send", c.status));
    }
    Ok(())
}

fn receive(fabric: &dyn Fabric, q: &mut Queue, t: Duration) -> Result<Vec<u8>, Error> {
    let buf = fabric.alloc(RECEIVE_LEN)?;
    let c = q.execute(
        command::auth(false, RECEIVE_LEN as u32),
        Some(&buf),
        DataDir::FromCtrl,
        t,
    )?;
    if !c.status.is_success() {
        return Err(Error::nvme("Authentication Receive", c.status));
    }
    let mut out = vec![0u8; RECEIVE_LEN];
    if !buf.read_at(0, &mut out) {
        return Err(Error::Protocol(
            "Authentication Receive: data buffer unreadable".into(),
        ));
    }
    Ok(out)
}
