//! The admin-queue steps of bring-up and shutdown: fabrics Connect, Property
//! Get/Set, polling CSTS for RDY and SHST, and commands that return data.

use std::time::{Duration, Instant};

use nvmf_common::types::{Cntlid, Qid};
use nvmf_common::wire::fabrics::{cap_crms, reg, shst, Cap, Cc, Crto, Csts, CONNECT_IATTR_DATA};
use nvmf_common::wire::status::{cmd_specific, Sct};

use crate::command::{self, SqeBytes};
use crate::error::{check_status, Error};
use crate::queue::Queue;
use crate::transport::{DataDir, Fabric};

use super::ConnectOptions;

/// CAP.TO and CRTO's timeouts are in units of 500 ms.
pub(super) const CAP_TO_UNIT: Duration = Duration::from_millis(500);
/// How often CSTS is polled while waiting for RDY or SHST.
const CSTS_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long a normal shutdown may take before the host gives up waiting.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn low32(v: u64) -> u32 {
    (v & u64::from(u32::MAX)) as u32
}

/// Sends fabrics Connect for `qid` on `q` and returns the CNTLID from dw0.
pub(super) fn fabrics_connect(
    fabric: &dyn Fabric,
    q: &mut Queue,
    opts: &ConnectOptions,
    qid: Qid,
    depth: u16,
    cntlid: Cntlid,
) -> Result<Cntlid, Error> {
    let data = command::connect_data(opts.hostid, cntlid, &opts.subnqn, &opts.hostnqn);
    let buf = fabric.alloc(data.len())?;
    if !buf.write_at(0, &data) {
        return Err(Error::Protocol(
            "Connect data does not fit its buffer".into(),
        ));
    }
    let kato = if qid.is_admin() { opts.kato_ms } else { 0 };
    let sqe = command::connect(qid, depth - 1, kato);
    let c = q.execute(
        sqe,
        Some(&buf),
        DataDir::ToCtrl,
        opts.connect_timeout.max(opts.command_timeout),
    )?;
    if !c.status.is_success() {
        let mut what = format!("Connect (qid {qid}, {})", opts.subnqn);
        if c.status.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS,
        ) {
            // dw0: IATTR bit 16 says whether IPO (bits 15:0) points into the data.
            let in_data = c.dw0 & CONNECT_IATTR_DATA != 0;
            let ipo = (c.dw0 & 0xFFFF) as u16;
            what.push_str(&format!(
                "; invalid parameter at {} byte {ipo}",
                if in_data { "Connect data" } else { "command" }
            ));
        }
        return Err(Error::nvme(what, c.status));
    }
    super::auth::after_connect(fabric, q, opts, qid, c.dw0)?;
    Ok(Cntlid((c.dw0 & 0xFFFF) as u16))
}

/// Property Get; 8-byte registers come back in dw0 | dw1 << 32.
pub(super) fn prop_get(q: &mut Queue, offset: u32, t: Duration) -> Result<u64, Error> {
    let c = q.execute(command::property_get(offset), None, DataDir::None, t)?;
    check_status("Property Get", c.status)?;
    Ok(c.result_u64())
}

pub(super) fn prop_set(q: &mut Queue, offset: u32, cc: Cc, t: Duration) -> Result<(), Error> {
    let c = q.execute(
        command::property_set(offset, u64::from(cc.0)),
        None,
        DataDir::None,
        t,
    )?;
    check_status("Property Set", c.status)
}

/// How long CSTS.RDY may take after CC.EN=1, and the field that said so: CRTO.CRWMT
/// when CAP.CRMS.CRWMS says the controller has CRTO (NVMe 2.0; Linux
/// `nvme_enable_ctrl` reads it the same way; the host never sets CC.CRIME, so CRIMT
/// does not apply), else CAP.TO. At least one unit, and never under CAP.TO: a CRTO of
/// 0 from a controller that does not fill it must not turn into no wait at all.
pub(super) fn ready_timeout(
    q: &mut Queue,
    cap: Cap,
    t: Duration,
) -> Result<(Duration, &'static str), Error> {
    let cap_to = u32::from(cap.to().max(1));
    if cap.crms() & cap_crms::CRWMS == 0 {
        return Ok((CAP_TO_UNIT * cap_to, "CAP.TO"));
    }
    let crto = Crto(low32(prop_get(q, reg::CRTO, t)?));
    let units = u32::from(crto.crwmt()).max(cap_to);
    Ok((CAP_TO_UNIT * units, "CRTO.CRWMT"))
}

/// Polls CSTS until RDY=1, for at most [`ready_timeout`].
pub(super) fn wait_ready(q: &mut Queue, cap: Cap, t: Duration) -> Result<(), Error> {
    let (limit, field) = ready_timeout(q, cap, t)?;
    let start = Instant::now();
    loop {
        let csts = Csts(low32(prop_get(q, reg::CSTS, t)?));
        if csts.cfs() {
            return Err(Error::Protocol(
                "controller fatal status (CSTS.CFS) while enabling".into(),
            ));
        }
        if csts.rdy() {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(Error::Timeout(format!(
                "controller not ready (CSTS.RDY) after {limit:?} ({field})"
            )));
        }
        std::thread::sleep(CSTS_POLL_INTERVAL);
    }
}

/// Polls CSTS until SHST = shutdown complete, for at most [`SHUTDOWN_TIMEOUT`].
pub(super) fn wait_shutdown(q: &mut Queue, t: Duration) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        let csts = Csts(low32(prop_get(q, reg::CSTS, t)?));
        if csts.shst() == shst::COMPLETE {
            return Ok(());
        }
        if start.elapsed() >= SHUTDOWN_TIMEOUT {
            return Err(Error::Timeout(format!(
                "shutdown not complete (CSTS.SHST) after {SHUTDOWN_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(CSTS_POLL_INTERVAL);
    }
}

/// Executes a command that returns `len` bytes of data and copies them out.
pub(super) fn read_data(
    fabric: &dyn Fabric,
    q: &mut Queue,
    sqe: SqeBytes,
    len: usize,
    t: Duration,
) -> Result<Vec<u8>, Error> {
    let what = command::name(&sqe);
    let buf = fabric.alloc(len)?;
    let c = q.execute(sqe, Some(&buf), DataDir::FromCtrl, t)?;
    check_status(what, c.status)?;
    let mut out = vec![0u8; len];
    if !buf.read_at(0, &mut out) {
        return Err(Error::Protocol(format!("{what}: data buffer unreadable")));
    }
    Ok(out)
}
