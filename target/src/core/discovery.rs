//! Discovery controllers: Identify Controller, the discovery log page (and the Supported
//! Log Pages and Feature Identifiers Supported logs, see `logs`), features for
//! keep-alive and event configuration, Keep Alive and Asynchronous Event Requests.

use std::sync::Arc;

use tracing::debug;

use crate::config::{AdrFam, PortTls, TrType};
use nvmf_common::types::{Nqn, DISCOVERY_NQN};
use nvmf_common::wire::admin::{self, cns, fid, opcode};
use nvmf_common::wire::identify::IDENTIFY_LEN;
use nvmf_common::wire::log::{
    adrfam, lid, rdma_cms, rdma_prtype, rdma_qptype, subtype, tcp_sectype, treq, trtype,
    DiscoveryLogEntry, DiscoveryLogHeader, DISC_LOG_ENTRY_LEN, DISC_LOG_HEADER_LEN,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, Status};

use super::{
    admin as nvm_admin, identify, logs, DataDir, ExecCtx, Outcome, Plan, QueueCtx, Request,
};
use crate::controller::Controller;
use crate::params::PortInfo;
use crate::target::Target;

/// CNTLID in discovery entries: the dynamic controller model.
const DYNAMIC_CNTLID: u16 = 0xFFFF;

pub(super) fn parse(_ctrl: &Controller, req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    match cmd.opcode() {
        opcode::IDENTIFY => Ok(Plan {
            dir: DataDir::CtrlToHost,
            len: IDENTIFY_LEN as u32,
        }),
        opcode::GET_LOG_PAGE => Ok(nvm_admin::log_plan(&cmd)),
        opcode::SET_FEATURES | opcode::GET_FEATURES => match admin::feature_fid(&cmd) {
            fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG => Ok(Plan::NONE),
            other => {
                debug!(
                    fid = other,
                    "feature not supported on a discovery controller"
                );
                Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0))
            }
        },
        opcode::KEEP_ALIVE | opcode::ASYNC_EVENT_REQUEST => Ok(Plan::NONE),
        other => {
            debug!(
                opcode = other,
                "opcode not supported on a discovery controller"
            );
            Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0))
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
    let r = match req.opcode() {
        opcode::IDENTIFY => {
            if admin::identify_cns(&req.cmd()) != cns::CONTROLLER {
                Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0))
            } else {
                let mut page = vec![0u8; IDENTIFY_LEN];
                identify::controller(ctrl, &ex.target, &mut page);
                req.write_data(0, &page);
                Ok(())
            }
        }
        opcode::GET_LOG_PAGE => {
            let cmd = req.cmd();
            match admin::log_lid(&cmd) {
                lid::DISCOVERY => {
                    let rae = admin::log_rae(&cmd);
                    let log = discovery_log(&ex.target, &ctrl.port, &ctrl.hostnqn);
                    ctrl.discovery_log_read(rae);
                    nvm_admin::serve_log(req, &log)
                }
                lid::SUPPORTED_LOGS => nvm_admin::serve_log(req, &logs::supported_logs(ctrl)),
                lid::FEATURES_SUPPORTED => {
                    nvm_admin::serve_log(req, &logs::features_supported(ctrl))
                }
                other => {
                    debug!(lid = other, "log page not served by a discovery controller");
                    Err(nvm_admin::invalid_log_page())
                }
            }
        }
        opcode::SET_FEATURES => nvm_admin::set_features(ctrl, req),
        opcode::GET_FEATURES => nvm_admin::get_features(ctrl, req),
        opcode::KEEP_ALIVE => Ok(()),
        opcode::ASYNC_EVENT_REQUEST => return nvm_admin::hold_aer(q, req, tag),
        _ => Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0)),
    };
    if let Err(s) = r {
        req.fail(s);
    }
    Outcome::Done
}

fn wire_trtype(t: TrType) -> u8 {
    match t {
        TrType::Rdma => trtype::RDMA,
        TrType::Tcp => trtype::TCP,
        TrType::Loopback => trtype::LOOP,
    }
}

fn wire_adrfam(f: AdrFam) -> u8 {
    match f {
        AdrFam::Ipv4 => adrfam::IPV4,
        AdrFam::Ipv6 => adrfam::IPV6,
        AdrFam::Ib => adrfam::IB,
        AdrFam::Loopback => adrfam::LOOP,
    }
}

/// One discovery log entry: where to connect (`trtype`..`traddr`) and what (`nqn`).
struct EntrySpec<'a> {
    trtype: TrType,
    adrfam: AdrFam,
    portid: u16,
    traddr: &'a str,
    trsvcid: &'a str,
    nqn: &'a str,
    subtype: u8,
    tls: PortTls,
}

fn fill_entry(out: &mut [u8], spec: &EntrySpec<'_>, asqsz: u16) {
    let mut e = DiscoveryLogEntry::new_unchecked(out);
    e.set_trtype(wire_trtype(spec.trtype));
    e.set_adrfam(wire_adrfam(spec.adrfam));
    e.set_subtype(spec.subtype);
    // As nvmet: TCP ports say a secure channel is not required unless they are TLS
    // ports that require it; a TLS port's TSAS names TLS 1.3 (`nvme discover`
    // prints it as `sectype: tls1.3`).
    let secure = match (spec.trtype, spec.tls) {
        (TrType::Tcp, PortTls::Required) => treq::REQUIRED,
        (TrType::Tcp, _) => treq::NOT_REQUIRED,
        _ => treq::NOT_SPECIFIED,
    };
    // Connect's CATTR may disable SQ flow control on our ports (nvmet says so too);
    // what a referred port supports is not known here.
    let sqflow = if spec.subtype == subtype::REFERRAL {
        0
    } else {
        treq::DISABLE_SQFLOW
    };
    e.set_treq(secure | sqflow);
    e.set_portid(spec.portid);
    e.set_cntlid(DYNAMIC_CNTLID);
    e.set_asqsz(asqsz);
    e.set_trsvcid(spec.trsvcid);
    e.set_traddr(spec.traddr);
    e.set_subnqn(spec.nqn);
    if spec.trtype == TrType::Rdma {
        e.set_rdma_qptype(rdma_qptype::CONNECTED);
        e.set_rdma_prtype(rdma_prtype::NOT_SPECIFIED);
        e.set_rdma_cms(rdma_cms::RDMA_CM);
    }
    if spec.trtype == TrType::Tcp {
        e.set_tcp_sectype(if spec.tls.enabled() {
            tcp_sectype::TLS13
        } else {
            tcp_sectype::NONE
        });
    }
}

/// Builds the whole discovery log page for `host` whose discovery controller connected
/// through `conn_port` (as that connection saw it: the real local address when the
/// port listens on a wildcard), like nvmet's `nvmet_execute_disc_get_log_page`:
///
/// 1. the current discovery subsystem (subtype 3),
/// 2. every NVM subsystem the port exports now and `host` is allowed to use,
/// 3. the port's referrals (subtype 1).
///
/// The subsystem links and referrals are those of the port's current configuration
/// (they may have changed since the connection was made); NUMREC counts every entry,
/// whatever part of the page the host reads.
pub(crate) fn discovery_log(target: &Target, conn_port: &PortInfo, host: &Nqn) -> Vec<u8> {
    let current = target.port(conn_port.portid);
    let live: &PortInfo = current.as_deref().unwrap_or(conn_port);
    let port_adrfam = AdrFam::for_port(conn_port.trtype, &conn_port.traddr);
    let here = |nqn: &'static str, subtype: u8| EntrySpec {
        trtype: conn_port.trtype,
        adrfam: port_adrfam,
        portid: conn_port.portid,
        traddr: &conn_port.traddr,
        trsvcid: &conn_port.trsvcid,
        nqn,
        subtype,
        tls: live.tls,
    };
    let visible: Vec<Nqn> = live
        .subsystems
        .iter()
        .filter_map(|name| target.subsystem_by_name(name))
        .filter(|s| s.host_allowed(host))
        .map(|s| s.nqn.clone())
        .collect();
    let mut specs: Vec<EntrySpec<'_>> =
        Vec::with_capacity(1 + visible.len() + live.referrals.len());
    specs.push(here(DISCOVERY_NQN, subtype::CURRENT_DISCOVERY));
    for nqn in &visible {
        specs.push(EntrySpec {
            nqn: nqn.as_str(),
            ..here(DISCOVERY_NQN, subtype::NVME)
        });
    }
    for r in &live.referrals {
        specs.push(EntrySpec {
            trtype: r.trtype,
            adrfam: r.adrfam,
            portid: r.portid,
            traddr: &r.traddr,
            trsvcid: &r.trsvcid,
            nqn: DISCOVERY_NQN,
            subtype: subtype::REFERRAL,
            // What a referred port requires is not known here.
            tls: PortTls::Off,
        });
    }
    let mut log = vec![0u8; DISC_LOG_HEADER_LEN + specs.len() * DISC_LOG_ENTRY_LEN];
    let asqsz = target.params.max_admin_queue_size;
    let (head, entries) = log.split_at_mut(DISC_LOG_HEADER_LEN);
    let mut h = DiscoveryLogHeader::new_unchecked(head);
    h.set_genctr(target.genctr());
    h.set_numrec(specs.len() as u64);
    h.set_recfmt(0);
    for (slot, spec) in entries.chunks_mut(DISC_LOG_ENTRY_LEN).zip(&specs) {
        fill_entry(slot, spec, asqsz);
    }
    log
}
