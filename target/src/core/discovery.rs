//! Discovery controllers: Identify Controller, the discovery log page, features for
//! keep-alive and event configuration, Keep Alive and Asynchronous Event Requests.

use std::sync::Arc;

use tracing::debug;

use nvmf_common::config::{AdrFam, TrType};
use nvmf_common::types::Nqn;
use nvmf_common::wire::admin::{self, cns, fid, opcode};
use nvmf_common::wire::identify::IDENTIFY_LEN;
use nvmf_common::wire::log::{
    adrfam, lid, rdma_cms, rdma_prtype, rdma_qptype, subtype, treq, trtype, DiscoveryLogEntry,
    DiscoveryLogHeader, DISC_LOG_ENTRY_LEN, DISC_LOG_HEADER_LEN,
};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Status};

use super::{admin as nvm_admin, identify, DataDir, ExecCtx, Outcome, Plan, QueueCtx, Request};
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
                Err(Status::generic(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0))
            }
        },
        opcode::KEEP_ALIVE | opcode::ASYNC_EVENT_REQUEST => Ok(Plan::NONE),
        other => {
            debug!(
                opcode = other,
                "opcode not supported on a discovery controller"
            );
            Err(Status::generic(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0))
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
                Err(Status::generic(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0))
            } else {
                let mut page = vec![0u8; IDENTIFY_LEN];
                identify::controller(ctrl, &ex.target, &mut page);
                req.write_data(0, &page);
                Ok(())
            }
        }
        opcode::GET_LOG_PAGE => {
            let cmd = req.cmd();
            if admin::log_lid(&cmd) != lid::DISCOVERY {
                Err(Status::cmd_specific(cmd_specific::INVALID_LOG_PAGE).at(sqe::offset::CDW10, 0))
            } else {
                let rae = admin::log_rae(&cmd);
                let log = discovery_log(&ex.target, &ctrl.port, &ctrl.hostnqn);
                ctrl.discovery_log_read(rae);
                nvm_admin::serve_log(req, &log)
            }
        }
        opcode::SET_FEATURES => nvm_admin::set_features(ctrl, req),
        opcode::GET_FEATURES => nvm_admin::get_features(ctrl, req),
        opcode::KEEP_ALIVE => Ok(()),
        opcode::ASYNC_EVENT_REQUEST => return nvm_admin::hold_aer(q, req, tag),
        _ => Err(Status::generic(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0)),
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

fn wire_adrfam(port: &PortInfo) -> u8 {
    match AdrFam::for_port(port.trtype, &port.traddr) {
        AdrFam::Ipv4 => adrfam::IPV4,
        AdrFam::Ipv6 => adrfam::IPV6,
        AdrFam::Ib => adrfam::IB,
        AdrFam::Loopback => adrfam::LOOP,
    }
}

fn fill_entry(out: &mut [u8], port: &PortInfo, nqn: &Nqn, sub: u8, asqsz: u16) {
    let mut e = DiscoveryLogEntry::new_unchecked(out);
    e.set_trtype(wire_trtype(port.trtype));
    e.set_adrfam(wire_adrfam(port));
    e.set_subtype(sub);
    e.set_treq(match port.trtype {
        TrType::Tcp => treq::NOT_REQUIRED,
        _ => treq::NOT_SPECIFIED,
    });
    e.set_portid(port.portid);
    e.set_cntlid(DYNAMIC_CNTLID);
    e.set_asqsz(asqsz);
    e.set_trsvcid(&port.trsvcid);
    e.set_traddr(&port.traddr);
    e.set_subnqn(nqn.as_str());
    if port.trtype == TrType::Rdma {
        e.set_rdma_qptype(rdma_qptype::CONNECTED);
        e.set_rdma_prtype(rdma_prtype::NOT_SPECIFIED);
        e.set_rdma_cms(rdma_cms::RDMA_CM);
    }
}

/// Builds the discovery log page for `host` arriving through `port`: every subsystem
/// exported on that port and visible to the host, then the current discovery subsystem.
pub(crate) fn discovery_log(target: &Target, port: &PortInfo, host: &Nqn) -> Vec<u8> {
    let mut visible: Vec<Nqn> = Vec::new();
    for name in &port.subsystems {
        if let Some(s) = target.subsystem_by_name(name) {
            if s.host_allowed(host) {
                visible.push(s.nqn.clone());
            }
        }
    }
    let numrec = visible.len() + 1;
    let mut log = vec![0u8; DISC_LOG_HEADER_LEN + numrec * DISC_LOG_ENTRY_LEN];
    let asqsz = target.params.max_admin_queue_size;
    {
        let (head, entries) = log.split_at_mut(DISC_LOG_HEADER_LEN);
        let mut h = DiscoveryLogHeader::new_unchecked(head);
        h.set_genctr(target.genctr());
        h.set_numrec(numrec as u64);
        h.set_recfmt(0);
        let mut chunks = entries.chunks_mut(DISC_LOG_ENTRY_LEN);
        for nqn in &visible {
            if let Some(slot) = chunks.next() {
                fill_entry(slot, port, nqn, subtype::NVME, asqsz);
            }
        }
        if let Some(slot) = chunks.next() {
            fill_entry(
                slot,
                port,
                &Nqn::discovery(),
                subtype::CURRENT_DISCOVERY,
                asqsz,
            );
        }
    }
    log
}
