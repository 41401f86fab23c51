//! The difference between the running configuration and a new one, as steps.
//!
//! Everything that can fail is done while planning: the new config is validated,
//! settings that need a restart are compared, new backends are opened and resized ones
//! reopened. Applying a plan ([`super::Live::apply`]) then only binds new listeners
//! (undone if one fails) and swaps state in, so a refused config changes nothing.

use super::refusal::Refusal;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::sync::Arc;

use crate::config::{Config, NamespaceConfig, PortConfig, SubsystemConfig, TrType};
use nvmf_common::types::{Nqn, Nsid};

use crate::backend::spec::NamespaceSpec;
use crate::events::{NamespaceChange, TargetEvent};
use crate::namespace::Namespace;
use crate::subsystem::Subsystem;
use crate::target::{build_namespace, build_subsystem, subsystem_params, Target};

/// One change to the running target.
pub(super) enum Step {
    AddPort(PortConfig),
    RemovePort(u16),
    /// Same listener; its subsystem links or referrals changed. `unlinked`: subsystems
    /// no longer exported there, whose controllers through this port end.
    UpdatePort {
        port: PortConfig,
        unlinked: Vec<String>,
    },
    AddSubsystem(Arc<Subsystem>),
    RemoveSubsystem(String),
    HostPolicy {
        nqn: String,
        allow_any_host: bool,
        hosts: Vec<Nqn>,
    },
    AddNamespace {
        nqn: String,
        ns: Namespace,
    },
    RemoveNamespace {
        nqn: String,
        nsid: Nsid,
    },
    /// Only which hosts see the namespace changed: applied in place (no reopen), the
    /// hosts that gained or lost it are told.
    NamespaceVisibility {
        nqn: String,
        nsid: Nsid,
        auto_visible: bool,
        hosts: Vec<Nqn>,
    },
    /// Only the QoS limits changed: set live, the namespace stays open.
    SetQos {
        nqn: String,
        nsid: Nsid,
        qos: crate::config::QosConfig,
    },
    /// Reconfigured or resized (`change` says which): swapped in one step.
    ReplaceNamespace {
        nqn: String,
        ns: Namespace,
        change: NamespaceChange,
    },
}

/// The event announcing that namespace `nsid` of subsystem `nqn` changed.
pub(super) fn ns_event(nqn: &str, nsid: Nsid, change: NamespaceChange) -> TargetEvent {
    TargetEvent::NamespaceChanged {
        subsystem: nqn.to_string(),
        nsid: nsid.0,
        change,
    }
}

/// Steps and their human descriptions (what `ctl` and the SIGHUP log report).
pub(super) struct Plan {
    pub steps: Vec<Step>,
    pub changes: Vec<String>,
}

/// Whether ports of `trtype` can be added or removed while running.
pub(super) type CanServe<'a> = &'a dyn Fn(TrType) -> bool;

/// Plans the move from `old` to `new` on `target`. `force_resize`: namespaces to
/// reopen even if their size looks unchanged (`ctl resize-ns`).
pub(super) fn plan(
    old: &Config,
    new: &Config,
    target: &Target,
    can_serve: CanServe<'_>,
    force_resize: &[(String, Nsid)],
) -> Result<Plan, Refusal> {
    // A rule of the configuration broken: the key path names the field.
    new.validate().map_err(|e| {
        if e.path.is_empty() {
            Refusal::from(e.to_string())
        } else {
            Refusal::invalid(&e.path, e.message)
        }
    })?;
    if restart_only(old)? != restart_only(new)? {
        return Err(
            "settings other than ports and subsystems (transport tuning) changed: \
             they take effect only on restart"
                .into(),
        );
    }
    let mut p = Plan {
        steps: Vec::new(),
        changes: Vec::new(),
    };
    let roles = |c: &Config| {
        c.management
            .as_ref()
            .map(|m| (m.admins.clone(), m.readers.clone()))
    };
    if roles(old) != roles(new) {
        p.changes.push("management API roles changed".into());
    }
    plan_ports(old, new, can_serve, &mut p)?;
    for s in &old.subsystems {
        if new.subsystem(&s.nqn).is_none() {
            p.changes.push(format!("subsystem {} removed", s.nqn));
            p.steps.push(Step::RemoveSubsystem(s.nqn.to_string()));
        }
    }
    for s in &new.subsystems {
        match old.subsystem(&s.nqn) {
            None => {
                let sub = build_subsystem(s).map_err(|e| e.to_string())?;
                p.changes.push(format!(
                    "subsystem {} added ({} namespace(s))",
                    s.nqn,
                    sub.active_nsids().len()
                ));
                p.steps.push(Step::AddSubsystem(sub));
            }
            Some(o) => plan_subsystem(o, s, target, force_resize, &mut p)?,
        }
    }
    for (nqn, nsid) in force_resize {
        let listed = p.steps.iter().any(
            |s| matches!(s, Step::ReplaceNamespace { nqn: n, ns, .. } if n == nqn && ns.nsid == *nsid),
        );
        if !listed {
            p.changes
                .push(format!("subsystem {nqn}: namespace {nsid} size unchanged"));
        }
    }
    Ok(p)
}

/// The part of a config that only a restart applies, as comparable text.
fn restart_only(c: &Config) -> Result<String, String> {
    let mut c = c.clone();
    c.ports.clear();
    c.subsystems.clear();
    c.hosts.clear();
    // Who may call the management API applies live; where it listens, at start.
    if let Some(m) = &mut c.management {
        m.admins.clear();
        m.readers.clear();
    }
    c.to_yaml().map_err(|e| e.to_string())
}

fn same_listener(a: &PortConfig, b: &PortConfig) -> bool {
    a.trtype == b.trtype
        && a.traddr == b.traddr
        && a.trsvcid == b.trsvcid
        && a.adrfam() == b.adrfam()
        // The listener decides at accept whether a connection starts with TLS.
        && a.tls() == b.tls()
}

fn same_but_ana(a: &PortConfig, b: &PortConfig) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    a.ana_groups.clear();
    b.ana_groups.clear();
    a == b
}

fn plan_ports(
    old: &Config,
    new: &Config,
    can_serve: CanServe<'_>,
    p: &mut Plan,
) -> Result<(), String> {
    let check = |port: &PortConfig| -> Result<(), String> {
        if can_serve(port.trtype) {
            Ok(())
        } else {
            Err(format!(
                "port {}: {} ports cannot be added or removed while running; restart the target",
                port.portid,
                port.trtype.as_str()
            ))
        }
    };
    for o in &old.ports {
        match new.port(o.portid) {
            None => {
                check(o)?;
                p.changes.push(format!("port {} removed", o.portid));
                p.steps.push(Step::RemovePort(o.portid));
            }
            Some(n) if !same_listener(o, n) => {
                check(o)?;
                check(n)?;
                p.changes.push(if o.tls() != n.tls() {
                    format!(
                        "port {}: TLS now {:?} (was {:?}); listening again",
                        o.portid,
                        n.tls(),
                        o.tls()
                    )
                } else {
                    format!(
                        "port {} moved from {}:{} to {}:{}",
                        o.portid, o.traddr, o.trsvcid, n.traddr, n.trsvcid
                    )
                });
                p.steps.push(Step::RemovePort(o.portid));
                p.steps.push(Step::AddPort(n.clone()));
            }
            // ANA states are applied on their own (Target::apply_ana), without a step.
            Some(n) if !same_but_ana(o, n) => {
                let unlinked: Vec<String> = o
                    .subsystems
                    .iter()
                    .filter(|s| !n.exports(s))
                    .map(|s| s.to_string())
                    .collect();
                p.changes.push(format!(
                    "port {}: subsystem links or referrals changed",
                    o.portid
                ));
                p.steps.push(Step::UpdatePort {
                    port: n.clone(),
                    unlinked,
                });
            }
            Some(_) => {}
        }
    }
    for n in &new.ports {
        if old.port(n.portid).is_none() {
            check(n)?;
            p.changes.push(format!(
                "port {} added ({} {}:{})",
                n.portid,
                n.trtype.as_str(),
                n.traddr,
                n.trsvcid
            ));
            p.steps.push(Step::AddPort(n.clone()));
        }
    }
    Ok(())
}

fn plan_subsystem(
    o: &SubsystemConfig,
    s: &SubsystemConfig,
    target: &Target,
    force_resize: &[(String, Nsid)],
    p: &mut Plan,
) -> Result<(), String> {
    let nqn = s.nqn.to_string();
    let (po, pn) = (subsystem_params(o), subsystem_params(s));
    if po.serial != pn.serial
        || po.model != pn.model
        || po.cntlid_min != pn.cntlid_min
        || po.cntlid_max != pn.cntlid_max
        || po.controller_model != pn.controller_model
    {
        return Err(format!(
            "subsystem {nqn}: serial, model, cntlid range and controller model cannot \
             change while hosts may be connected; remove the subsystem first"
        ));
    }
    if o.passthru != s.passthru {
        // The device, its namespaces and its admin worker are the subsystem's; a
        // change of device or allowed list is a new subsystem.
        return Err(format!(
            "subsystem {nqn}: its passthru device and options cannot change while hosts \
             may be connected; remove the subsystem first"
        ));
    }
    if o.allow_any_host != s.allow_any_host || o.allowed_hosts != s.allowed_hosts {
        p.changes
            .push(format!("subsystem {nqn}: allowed hosts changed"));
        p.steps.push(Step::HostPolicy {
            nqn: nqn.clone(),
            allow_any_host: s.allow_any_host,
            hosts: s.allowed_hosts.clone(),
        });
    }
    let live = target.subsystem_by_name(&nqn);
    let enabled = |c: &SubsystemConfig, id: Nsid| c.namespace(id).filter(|n| n.enable).cloned();
    for n in o.namespaces.iter().filter(|n| n.enable) {
        if enabled(s, n.nsid).is_none() {
            p.changes
                .push(format!("subsystem {nqn}: namespace {} removed", n.nsid));
            p.steps.push(Step::RemoveNamespace {
                nqn: nqn.clone(),
                nsid: n.nsid,
            });
        }
    }
    for n in s.namespaces.iter().filter(|n| n.enable) {
        let build = || build_namespace(&s.nqn, n).map_err(|e| e.to_string());
        match enabled(o, n.nsid) {
            None => {
                let ns = build()?;
                p.changes.push(format!(
                    "subsystem {nqn}: namespace {} added ({}, {} bytes)",
                    n.nsid,
                    n.device_path,
                    ns.size_bytes()
                ));
                p.steps.push(Step::AddNamespace {
                    nqn: nqn.clone(),
                    ns,
                });
            }
            // Only who sees it and its limits changed: both apply in place (no reopen).
            Some(old_n) if old_n != *n && same_but_visibility_and_qos(&old_n, n) => {
                if old_n.auto_visible != n.auto_visible || old_n.visible_to != n.visible_to {
                    p.changes.extend(visibility_changes(&nqn, &old_n, n));
                    p.steps.push(Step::NamespaceVisibility {
                        nqn: nqn.clone(),
                        nsid: n.nsid,
                        auto_visible: n.auto_visible,
                        hosts: n.visible_to.clone(),
                    });
                }
                if old_n.qos != n.qos {
                    p.changes.push(format!(
                        "subsystem {nqn}: namespace {} QoS limits set ({})",
                        n.nsid,
                        super::qos_op::describe(&n.qos)
                    ));
                    p.steps.push(Step::SetQos {
                        nqn: nqn.clone(),
                        nsid: n.nsid,
                        qos: n.qos,
                    });
                }
            }
            Some(old_n) if old_n != *n => {
                let ns = build()?;
                p.changes.push(format!(
                    "subsystem {nqn}: namespace {} reconfigured ({})",
                    n.nsid, n.device_path
                ));
                p.steps.push(Step::ReplaceNamespace {
                    nqn: nqn.clone(),
                    ns,
                    change: NamespaceChange::Reconfigured,
                });
            }
            Some(_) => {
                let current = live.as_ref().and_then(|l| l.namespace(n.nsid));
                let forced = force_resize
                    .iter()
                    .any(|(q, id)| *q == nqn && *id == n.nsid);
                let Some(cur) = current else { continue };
                if !forced && !backing_size_changed(n, &cur) {
                    continue;
                }
                if matches!(
                    n.device_path.parse::<NamespaceSpec>(),
                    Ok(NamespaceSpec::Ram { .. })
                ) {
                    // Reopening a RAM disk would lose its data; its size is its spec.
                    continue;
                }
                let ns = build()?;
                if ns.size_bytes() == cur.size_bytes() {
                    continue;
                }
                p.changes.push(format!(
                    "subsystem {nqn}: namespace {} resized from {} to {} bytes",
                    n.nsid,
                    cur.size_bytes(),
                    ns.size_bytes()
                ));
                p.steps.push(Step::ReplaceNamespace {
                    nqn: nqn.clone(),
                    ns,
                    change: NamespaceChange::Resized,
                });
            }
        }
    }
    Ok(())
}

/// Whether `a` and `b` differ at most in visibility and QoS limits.
fn same_but_visibility_and_qos(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    let mut a = a.clone();
    a.qos = b.qos;
    same_but_visibility(&a, b)
}

/// Whether `a` and `b` differ at most in visibility (QoS counts as a difference).
fn same_but_visibility(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    for n in [&mut a, &mut b] {
        n.auto_visible = true;
        n.visible_to.clear();
    }
    a == b
}

/// What a visibility change does, one line per host that gains or loses the namespace.
fn visibility_changes(nqn: &str, o: &NamespaceConfig, n: &NamespaceConfig) -> Vec<String> {
    let at = format!("subsystem {nqn}: namespace {}", n.nsid);
    if n.auto_visible != o.auto_visible {
        return vec![if n.auto_visible {
            format!("{at} now visible to every host")
        } else {
            format!(
                "{at} now visible only to {} listed host(s)",
                n.visible_to.len()
            )
        }];
    }
    let gained = n.visible_to.iter().filter(|h| !o.visible_to.contains(h));
    let lost = o.visible_to.iter().filter(|h| !n.visible_to.contains(h));
    gained
        .map(|h| format!("{at} now visible to {h}"))
        .chain(lost.map(|h| format!("{at} no longer visible to {h}")))
        .collect()
}

/// Whether the file, block device or RBD image backing `n` is now larger or smaller
/// (by at least one block) than the namespace `cur` serves. Files are measured by path;
/// backends that know their store's size (RBD) say it through
/// [`crate::backend::Backend::backing_size`].
fn backing_size_changed(n: &NamespaceConfig, cur: &Namespace) -> bool {
    let size = match n.device_path.parse::<NamespaceSpec>() {
        Ok(NamespaceSpec::File(path)) => {
            File::open(&path).and_then(|mut f| f.seek(SeekFrom::End(0)))
        }
        Ok(NamespaceSpec::Rbd { .. }) => cur
            .backend
            .backing_size()
            .ok_or_else(|| std::io::Error::other("size unknown")),
        _ => return false,
    };
    match size {
        Ok(bytes) => (bytes >> cur.block_size_shift) != cur.nblocks,
        Err(_) => false,
    }
}

/// The port description a planned port gets.
pub(super) fn port_of(p: &PortConfig, t: &Target) -> crate::params::PortInfo {
    t.port_info(p)
}
