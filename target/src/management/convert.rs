//! The API's messages and the operation model: requests to [`Op`]s (checking each
//! field, so an InvalidArgument names the API's field), [`Op`]s back to requests
//! (`ctl --server`), refusals to status codes and back, and the views.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tonic::{Code, Status};

use crate::config::{AnaState, TrType};
use nvmf_common::types::Nqn;

use super::proto as pb;
use crate::events::{NamespaceChange, Stamped, TargetEvent};
use crate::live::status::{ControllerStatus, StatusView};
use crate::live::{Create, Op, Refusal, RefusalKind};
use crate::metrics::Snapshot;

/// A refusal as the status code the .proto documents.
pub fn status_of(r: &Refusal) -> Status {
    let code = match r.kind {
        RefusalKind::InvalidArgument => Code::InvalidArgument,
        RefusalKind::NotFound => Code::NotFound,
        RefusalKind::AlreadyExists => Code::AlreadyExists,
        RefusalKind::FailedPrecondition => Code::FailedPrecondition,
        RefusalKind::Aborted => Code::Aborted,
        RefusalKind::Unavailable => Code::Unavailable,
    };
    Status::new(code, r.message.clone())
}

/// The refusal kind a status code stands for (None: not a refusal of ours).
pub fn refusal_of(code: Code) -> Option<RefusalKind> {
    Some(match code {
        Code::InvalidArgument => RefusalKind::InvalidArgument,
        Code::NotFound => RefusalKind::NotFound,
        Code::AlreadyExists => RefusalKind::AlreadyExists,
        Code::FailedPrecondition => RefusalKind::FailedPrecondition,
        Code::Aborted => RefusalKind::Aborted,
        Code::Unavailable => RefusalKind::Unavailable,
        _ => return None,
    })
}

fn invalid(field: &str, why: impl std::fmt::Display) -> Status {
    status_of(&Refusal::invalid(field, why))
}

/// A subsystem or host NQN field.
fn nqn(field: &str, v: &str) -> Result<String, Status> {
    Nqn::new(v).map_err(|e| invalid(field, e))?;
    Ok(v.to_string())
}

fn portid(v: u32) -> Result<u16, Status> {
    u16::try_from(v).map_err(|_| invalid("portid", format!("{v} is not in 0..={}", u16::MAX)))
}

/// An NSID that must name a namespace (0 and the broadcast value never do).
fn nsid(v: u32) -> Result<u32, Status> {
    let max = crate::subsystem::MAX_NAMESPACES;
    if (1..=max).contains(&v) {
        Ok(v)
    } else {
        Err(invalid("nsid", format!("{v} is not in 1..={max}")))
    }
}

/// An optional string field: empty means not given.
fn given(v: String) -> Option<String> {
    (!v.is_empty()).then_some(v)
}

/// A key file path on the target: absolute (the API has no working directory).
fn key_path(field: &str, v: String) -> Result<Option<PathBuf>, Status> {
    match given(v) {
        None => Ok(None),
        Some(p) if p.starts_with('/') => Ok(Some(PathBuf::from(p))),
        Some(p) => Err(invalid(field, format!("{p:?} is not an absolute path"))),
    }
}

fn ana_state(v: i32) -> Result<AnaState, Status> {
    match pb::AnaState::try_from(v) {
        Ok(pb::AnaState::Optimized) => Ok(AnaState::Optimized),
        Ok(pb::AnaState::NonOptimized) => Ok(AnaState::NonOptimized),
        Ok(pb::AnaState::Inaccessible) => Ok(AnaState::Inaccessible),
        Ok(pb::AnaState::PersistentLoss) => Ok(AnaState::PersistentLoss),
        Ok(pb::AnaState::Change) => Ok(AnaState::Change),
        Ok(pb::AnaState::Unspecified) | Err(_) => Err(invalid(
            "state",
            format!("{v} is not an ANA state (ANA_STATE_OPTIMIZED .. ANA_STATE_CHANGE)"),
        )),
    }
}

fn pb_ana_state(s: AnaState) -> pb::AnaState {
    match s {
        AnaState::Optimized => pb::AnaState::Optimized,
        AnaState::NonOptimized => pb::AnaState::NonOptimized,
        AnaState::Inaccessible => pb::AnaState::Inaccessible,
        AnaState::PersistentLoss => pb::AnaState::PersistentLoss,
        AnaState::Change => pb::AnaState::Change,
    }
}

pub fn add_namespace(r: pb::AddNamespaceRequest) -> Result<Op, Status> {
    if r.device_path.is_empty() {
        return Err(invalid("device_path", "empty"));
    }
    Ok(Op::AddNs {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        device_path: r.device_path,
        nsid: if r.nsid == 0 {
            None
        } else {
            Some(nsid(r.nsid)?)
        },
        ceph_conf: given(r.ceph_conf).map(PathBuf::from),
        client_id: given(r.client_id),
        keyring: given(r.keyring).map(PathBuf::from),
        ceph_options: r.ceph_options.into_iter().collect(),
        create: create(r.create_size, r.reuse, r.rbd_features, r.rbd_data_pool)?,
        auto_visible: !r.no_auto_visible,
    })
}

/// AddNamespaceHost (`add`) or RemoveNamespaceHost.
pub fn namespace_host(r: pb::NamespaceHostRef, add: bool) -> Result<Op, Status> {
    let (nqn, nsid) = (nqn("subsystem_nqn", &r.subsystem_nqn)?, nsid(r.nsid)?);
    let host = crate::config::visibility::check_host(&r.host_nqn)
        .map_err(|e| invalid("host_nqn", e))?
        .to_string();
    Ok(if add {
        Op::NsAddHost { nqn, nsid, host }
    } else {
        Op::NsRemoveHost { nqn, nsid, host }
    })
}

/// The provisioning fields of an AddNamespace: all but create_size need it.
fn create(size: u64, reuse: bool, features: String, data_pool: String) -> Result<Create, Status> {
    if size == 0 {
        for (field, given) in [
            ("reuse", reuse),
            ("rbd_features", !features.is_empty()),
            ("rbd_data_pool", !data_pool.is_empty()),
        ] {
            if given {
                return Err(invalid(field, "only with create_size"));
            }
        }
    }
    Ok(Create {
        size: (size != 0).then_some(size),
        reuse,
        rbd_features: given(features),
        rbd_data_pool: given(data_pool),
    })
}

pub fn remove_namespace(r: pb::RemoveNamespaceRequest) -> Result<Op, Status> {
    Ok(Op::RemoveNs {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        nsid: nsid(r.nsid)?,
        delete_backing: r.delete_backing,
    })
}

pub fn resize_namespace(r: pb::ResizeNamespaceRequest) -> Result<Op, Status> {
    Ok(Op::ResizeNs {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        nsid: nsid(r.nsid)?,
        size: (r.size != 0).then_some(r.size),
    })
}

pub fn add_subsystem(r: pb::AddSubsystemRequest) -> Result<Op, Status> {
    // A new subsystem's NQN must be well formed (references need only name one).
    Nqn::new(r.subsystem_nqn.as_str())
        .map_err(|e| e.to_string())
        .and_then(|n| n.check_format())
        .map_err(|e| invalid("subsystem_nqn", e))?;
    Ok(Op::AddSubsystem {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        allow_any_host: r.allow_any_host,
        serial: given(r.serial),
        model: given(r.model),
        passthru_device: given(r.passthru_device).map(std::path::PathBuf::from),
        clear_ids: r.clear_ids,
    })
}

pub fn remove_subsystem(r: pb::SubsystemRef) -> Result<Op, Status> {
    Ok(Op::RemoveSubsystem {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
    })
}

pub fn add_host(r: pb::HostRef) -> Result<Op, Status> {
    Ok(Op::AddHost {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        host: nqn("host_nqn", &r.host_nqn)?,
    })
}

pub fn remove_host(r: pb::HostRef) -> Result<Op, Status> {
    Ok(Op::RemoveHost {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        host: nqn("host_nqn", &r.host_nqn)?,
    })
}

pub fn set_host_key(r: pb::SetHostKeyRequest) -> Result<Op, Status> {
    Ok(Op::SetHostKey {
        host: nqn("host_nqn", &r.host_nqn)?,
        key_file: key_path("dhchap_key_file", r.dhchap_key_file)?,
        ctrl_key_file: key_path("dhchap_ctrl_key_file", r.dhchap_ctrl_key_file)?,
        clear_ctrl_key: r.clear_ctrl_key,
    })
}

pub fn add_port(r: pb::AddPortRequest) -> Result<Op, Status> {
    Ok(Op::AddPort {
        portid: portid(r.portid)?,
        trtype: r
            .trtype
            .parse::<TrType>()
            .map_err(|e| invalid("trtype", e))?,
        traddr: r.traddr,
        trsvcid: r.trsvcid,
    })
}

pub fn remove_port(r: pb::PortRef) -> Result<Op, Status> {
    Ok(Op::RemovePort {
        portid: portid(r.portid)?,
    })
}

pub fn link(r: pb::PortLink, link: bool) -> Result<Op, Status> {
    let (portid, nqn) = (portid(r.portid)?, nqn("subsystem_nqn", &r.subsystem_nqn)?);
    Ok(if link {
        Op::LinkSubsystem { portid, nqn }
    } else {
        Op::UnlinkSubsystem { portid, nqn }
    })
}

pub fn set_ana_state(r: pb::SetAnaStateRequest) -> Result<Op, Status> {
    Ok(Op::SetAna {
        portid: portid(r.portid)?,
        grpid: r.grpid,
        state: ana_state(r.state)?,
    })
}

pub fn set_namespace_qos(r: pb::SetNamespaceQosRequest) -> Result<Op, Status> {
    Ok(Op::SetQos {
        nqn: nqn("subsystem_nqn", &r.subsystem_nqn)?,
        nsid: nsid(r.nsid)?,
        rw_ios: r.rw_ios_per_sec,
        r_ios: r.r_ios_per_sec,
        w_ios: r.w_ios_per_sec,
        rw_bytes: r.rw_bytes_per_sec,
        r_bytes: r.r_bytes_per_sec,
        w_bytes: r.w_bytes_per_sec,
    })
}

/// One remote call, built from an [`Op`] (the client's half of the mapping above).
pub enum Call {
    AddNamespace(pb::AddNamespaceRequest),
    RemoveNamespace(pb::RemoveNamespaceRequest),
    ResizeNamespace(pb::ResizeNamespaceRequest),
    AddSubsystem(pb::AddSubsystemRequest),
    RemoveSubsystem(pb::SubsystemRef),
    AddHost(pb::HostRef),
    RemoveHost(pb::HostRef),
    SetHostKey(pb::SetHostKeyRequest),
    AddPort(pb::AddPortRequest),
    RemovePort(pb::PortRef),
    LinkSubsystem(pb::PortLink),
    UnlinkSubsystem(pb::PortLink),
    SetAnaState(pb::SetAnaStateRequest),
    AddNamespaceHost(pb::NamespaceHostRef),
    RemoveNamespaceHost(pb::NamespaceHostRef),
    SetNamespaceQos(pb::SetNamespaceQosRequest),
}

fn path_text(p: Option<PathBuf>) -> String {
    p.map(|p| p.display().to_string()).unwrap_or_default()
}

impl From<Op> for Call {
    fn from(op: Op) -> Call {
        match op {
            Op::AddNs {
                nqn,
                device_path,
                nsid,
                ceph_conf,
                client_id,
                keyring,
                ceph_options,
                create,
                auto_visible,
            } => Call::AddNamespace(pb::AddNamespaceRequest {
                subsystem_nqn: nqn,
                device_path,
                nsid: nsid.unwrap_or(0),
                ceph_conf: path_text(ceph_conf),
                client_id: client_id.unwrap_or_default(),
                keyring: path_text(keyring),
                ceph_options: ceph_options.into_iter().collect(),
                create_size: create.size.unwrap_or(0),
                reuse: create.reuse,
                rbd_features: create.rbd_features.unwrap_or_default(),
                rbd_data_pool: create.rbd_data_pool.unwrap_or_default(),
                no_auto_visible: !auto_visible,
            }),
            Op::NsAddHost { nqn, nsid, host } => Call::AddNamespaceHost(pb::NamespaceHostRef {
                subsystem_nqn: nqn,
                nsid,
                host_nqn: host,
            }),
            Op::NsRemoveHost { nqn, nsid, host } => {
                Call::RemoveNamespaceHost(pb::NamespaceHostRef {
                    subsystem_nqn: nqn,
                    nsid,
                    host_nqn: host,
                })
            }
            Op::RemoveNs {
                nqn,
                nsid,
                delete_backing,
            } => Call::RemoveNamespace(pb::RemoveNamespaceRequest {
                subsystem_nqn: nqn,
                nsid,
                delete_backing,
            }),
            Op::ResizeNs { nqn, nsid, size } => Call::ResizeNamespace(pb::ResizeNamespaceRequest {
                subsystem_nqn: nqn,
                nsid,
                size: size.unwrap_or(0),
            }),
            Op::AddSubsystem {
                nqn,
                allow_any_host,
                serial,
                model,
                passthru_device,
                clear_ids,
            } => Call::AddSubsystem(pb::AddSubsystemRequest {
                subsystem_nqn: nqn,
                allow_any_host,
                serial: serial.unwrap_or_default(),
                model: model.unwrap_or_default(),
                passthru_device: passthru_device
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                clear_ids,
            }),
            Op::RemoveSubsystem { nqn } => {
                Call::RemoveSubsystem(pb::SubsystemRef { subsystem_nqn: nqn })
            }
            Op::AddHost { nqn, host } => Call::AddHost(pb::HostRef {
                subsystem_nqn: nqn,
                host_nqn: host,
            }),
            Op::RemoveHost { nqn, host } => Call::RemoveHost(pb::HostRef {
                subsystem_nqn: nqn,
                host_nqn: host,
            }),
            Op::SetHostKey {
                host,
                key_file,
                ctrl_key_file,
                clear_ctrl_key,
            } => Call::SetHostKey(pb::SetHostKeyRequest {
                host_nqn: host,
                dhchap_key_file: path_text(key_file),
                dhchap_ctrl_key_file: path_text(ctrl_key_file),
                clear_ctrl_key,
            }),
            Op::AddPort {
                portid,
                trtype,
                traddr,
                trsvcid,
            } => Call::AddPort(pb::AddPortRequest {
                portid: portid.into(),
                trtype: trtype.as_str().to_string(),
                traddr,
                trsvcid,
            }),
            Op::RemovePort { portid } => Call::RemovePort(pb::PortRef {
                portid: portid.into(),
            }),
            Op::LinkSubsystem { portid, nqn } => Call::LinkSubsystem(pb::PortLink {
                portid: portid.into(),
                subsystem_nqn: nqn,
            }),
            Op::UnlinkSubsystem { portid, nqn } => Call::UnlinkSubsystem(pb::PortLink {
                portid: portid.into(),
                subsystem_nqn: nqn,
            }),
            Op::SetAna {
                portid,
                grpid,
                state,
            } => Call::SetAnaState(pb::SetAnaStateRequest {
                portid: portid.into(),
                grpid,
                state: pb_ana_state(state).into(),
            }),
            Op::SetQos {
                nqn,
                nsid,
                rw_ios,
                r_ios,
                w_ios,
                rw_bytes,
                r_bytes,
                w_bytes,
            } => Call::SetNamespaceQos(pb::SetNamespaceQosRequest {
                subsystem_nqn: nqn,
                nsid,
                rw_ios_per_sec: rw_ios,
                r_ios_per_sec: r_ios,
                w_ios_per_sec: w_ios,
                rw_bytes_per_sec: rw_bytes,
                r_bytes_per_sec: r_bytes,
                w_bytes_per_sec: w_bytes,
            }),
        }
    }
}

fn connection(subsystem: &str, c: &ControllerStatus) -> pb::Connection {
    pb::Connection {
        subsystem_nqn: subsystem.to_string(),
        host_nqn: c.hostnqn.clone(),
        cntlid: c.cntlid.into(),
        portid: c.portid.into(),
        kato_ms: c.kato_ms,
        io_queues: u32::try_from(c.io_queues).unwrap_or(u32::MAX),
    }
}

/// The status view, typed, with the whole view as JSON beside it.
pub fn status_reply(v: &StatusView) -> Result<pb::StatusReply, Status> {
    Ok(pb::StatusReply {
        genctr: v.genctr,
        ports: v
            .ports
            .iter()
            .map(|p| pb::PortStatus {
                portid: p.portid.into(),
                trtype: p.trtype.clone(),
                traddr: p.traddr.clone(),
                trsvcid: p.trsvcid.clone(),
                listening: p.listening.clone().unwrap_or_default(),
                subsystem_nqns: p.subsystems.clone(),
            })
            .collect(),
        subsystems: v
            .subsystems
            .iter()
            .map(|s| pb::SubsystemStatus {
                nqn: s.nqn.clone(),
                allow_any_host: s.allow_any_host,
                allowed_hosts: s.allowed_hosts.clone(),
                namespaces: s
                    .namespaces
                    .iter()
                    .map(|n| pb::NamespaceStatus {
                        nsid: n.nsid,
                        device_path: n.device_path.clone(),
                        backend: n.backend.clone(),
                        size_bytes: n.size_bytes,
                        block_size: n.block_size,
                        auto_visible: n.auto_visible,
                        visible_to: n.visible_to.clone(),
                    })
                    .collect(),
                controllers: s
                    .controllers
                    .iter()
                    .map(|c| connection(&s.nqn, c))
                    .collect(),
            })
            .collect(),
        view_json: serde_json::to_string(v).map_err(|e| Status::internal(e.to_string()))?,
        gateway_group: v.group.as_ref().map(|g| pb::GatewayGroupStatus {
            name: g.name.clone(),
            gateway: g.gateway.clone(),
            version: g.version.unwrap_or(0),
            error: g.error.clone().unwrap_or_default(),
            members: g
                .gateways
                .iter()
                .map(|m| pb::GroupMember {
                    gateway: m.name.clone(),
                    ana_group: m.grpid,
                })
                .collect(),
            owned_ana_groups: g.owned.clone(),
            fenced: g.fenced,
            moves: g
                .moves
                .iter()
                .map(|m| pb::GroupMove {
                    at_unix_ms: m.at_unix_ms,
                    what: m.what.clone(),
                })
                .collect(),
            leases: g
                .leases
                .iter()
                .map(|l| pb::GroupLease {
                    ana_group: l.grpid,
                    home: l.home.clone(),
                    owner: l.owner.clone().unwrap_or_default(),
                    expires_in_ms: l.expires_in_ms,
                })
                .collect(),
        }),
    })
}

/// Every controller of `v` (discovery ones included), of `subsystem` if not empty.
pub fn connections(v: &StatusView, discovery_nqn: &str, subsystem: &str) -> Vec<pb::Connection> {
    let mut out: Vec<pb::Connection> = v
        .subsystems
        .iter()
        .flat_map(|s| s.controllers.iter().map(|c| connection(&s.nqn, c)))
        .chain(
            v.discovery_controllers
                .iter()
                .map(|c| connection(discovery_nqn, c)),
        )
        .collect();
    if !subsystem.is_empty() {
        out.retain(|c| c.subsystem_nqn == subsystem);
    }
    out
}

/// Per-namespace counters from the metrics cells (hosts and poll groups summed).
pub fn namespace_stats(s: &Snapshot, subsystem: &str, nsid: u32) -> Vec<pb::NamespaceStats> {
    let wanted =
        |sub: &str, n: u32| (subsystem.is_empty() || sub == subsystem) && (nsid == 0 || n == nsid);
    let mut by_ns: BTreeMap<(String, u32), pb::NamespaceStats> = s
        .namespaces
        .iter()
        .filter(|(sub, n)| wanted(sub, *n))
        .map(|(sub, n)| {
            let zero = || Some(pb::IoClassStats::default());
            let v = pb::NamespaceStats {
                subsystem_nqn: sub.clone(),
                nsid: *n,
                reads: zero(),
                writes: zero(),
                other: zero(),
                errors: 0,
                qos_throttled_ns: 0,
                qos_throttled_commands: 0,
                qos_queued: 0,
            };
            ((sub.clone(), *n), v)
        })
        .collect();
    for cell in &s.cells {
        let Some(e) = by_ns.get_mut(&(cell.key.subsystem.clone(), cell.key.nsid)) else {
            continue;
        };
        for (class, into) in cell
            .classes
            .iter()
            .zip([&mut e.reads, &mut e.writes, &mut e.other])
        {
            if let Some(into) = into {
                into.commands += class.commands;
                into.bytes += class.bytes;
                into.latency_ns += class.latency_ns;
            }
        }
        e.errors += cell.errors.iter().map(|(_, n)| n).sum::<u64>();
    }
    for q in &s.qos {
        if let Some(e) = by_ns.get_mut(&(q.subsystem.clone(), q.nsid)) {
            e.qos_throttled_ns = q.stats.throttled_ns;
            e.qos_throttled_commands = q.stats.throttled_commands;
            e.qos_queued = q.stats.queued;
        }
    }
    by_ns.into_values().collect()
}

/// An event as the stream carries it.
pub fn event(e: &Stamped) -> pb::Event {
    use pb::event::Kind;
    let kind = match &e.event {
        TargetEvent::NamespaceChanged {
            subsystem,
            nsid,
            change,
        } => Kind::NamespaceChanged(pb::NamespaceChanged {
            subsystem_nqn: subsystem.clone(),
            nsid: *nsid,
            change: match change {
                NamespaceChange::Added => pb::namespace_changed::Change::Added,
                NamespaceChange::Removed => pb::namespace_changed::Change::Removed,
                NamespaceChange::Resized => pb::namespace_changed::Change::Resized,
                NamespaceChange::Reconfigured => pb::namespace_changed::Change::Reconfigured,
            }
            .into(),
        }),
        TargetEvent::HostConnected {
            subsystem,
            host,
            cntlid,
            portid,
        } => Kind::HostConnected(pb::HostConnected {
            subsystem_nqn: subsystem.clone(),
            host_nqn: host.clone(),
            cntlid: (*cntlid).into(),
            portid: (*portid).into(),
        }),
        TargetEvent::HostDisconnected {
            subsystem,
            host,
            cntlid,
            portid,
        } => Kind::HostDisconnected(pb::HostDisconnected {
            subsystem_nqn: subsystem.clone(),
            host_nqn: host.clone(),
            cntlid: (*cntlid).into(),
            portid: (*portid).into(),
        }),
        TargetEvent::AnaChanged {
            portid,
            grpid,
            state,
        } => Kind::AnaChanged(pb::AnaChanged {
            portid: (*portid).into(),
            grpid: *grpid,
            state: pb_ana_state(*state).into(),
        }),
        TargetEvent::AuthenticationFailed {
            subsystem,
            host,
            portid,
        } => Kind::AuthenticationFailed(pb::AuthenticationFailed {
            subsystem_nqn: subsystem.clone(),
            host_nqn: host.clone(),
            portid: (*portid).into(),
        }),
    };
    pb::Event {
        time_unix_ns: unix_ns(e.time),
        kind: Some(kind),
    }
}

/// `count` events a slow subscriber missed.
pub fn events_lost(count: u64) -> pb::Event {
    pb::Event {
        time_unix_ns: unix_ns(std::time::SystemTime::now()),
        kind: Some(pb::event::Kind::EventsLost(pb::EventsLost { count })),
    }
}

fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
