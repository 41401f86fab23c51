//! The `status` view: ports, subsystems, namespaces, connected hosts and their queues.

use serde::{Deserialize, Serialize};

use crate::config::Config;

use super::PortHooks;
use crate::controller::Controller;
use crate::runtime::stats::WatchView;
use crate::runtime::GroupCounters;
use crate::target::Target;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// Discovery log generation counter.
    pub genctr: u64,
    pub ports: Vec<PortStatus>,
    pub subsystems: Vec<SubsystemStatus>,
    /// Hosts connected to the discovery subsystem.
    pub discovery_controllers: Vec<ControllerStatus>,
    /// Poll-group counters of each running transport (one naming for all fabrics).
    #[serde(default)]
    pub transports: Vec<TransportStatus>,
    /// Queues with outstanding commands and commands outstanding longer than
    /// `transport.stuck_command_ms`, from every poll group's last sweep.
    #[serde(default)]
    pub commands: WatchView,
    /// The gateway group this target is a gateway of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub name: String,
    pub gateway: String,
    /// The group's version in force here (None: the group was never written).
    pub version: Option<u64>,
    /// Milliseconds since that version was applied here.
    pub applied_ms_ago: Option<u64>,
    /// Why the group's latest version could not be applied here, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The group's gateways and their home ANA groups.
    #[serde(default)]
    pub gateways: Vec<GroupGateway>,
    /// The ANA groups this gateway holds the lease of.
    #[serde(default)]
    pub owned: Vec<u32>,
    /// This gateway's RADOS client was fenced: it serves nothing of the group.
    #[serde(default)]
    pub fenced: bool,
    /// The latest ownership moves here, oldest first.
    #[serde(default)]
    pub moves: Vec<GroupMove>,
    /// Each ANA group's lease as this gateway sees it.
    #[serde(default)]
    pub leases: Vec<GroupLease>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLease {
    pub grpid: u32,
    /// The gateway whose home group it is.
    pub home: String,
    /// Who holds it (this gateway, or the holder it last saw; None: not known here).
    pub owner: Option<String>,
    /// For this gateway's own leases: milliseconds until it ends unless renewed.
    pub expires_in_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupGateway {
    pub name: String,
    pub grpid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMove {
    /// Seconds since the Unix epoch.
    pub at_unix_ms: u64,
    pub what: String,
}

/// The group part of the view.
pub(super) fn group(link: &crate::group::GroupLink) -> GroupStatus {
    let a = link.applied();
    GroupStatus {
        name: link.config.name.clone(),
        gateway: link.config.gateway.clone(),
        version: a.version,
        applied_ms_ago: a
            .at
            .map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)),
        error: a.error,
        gateways: link
            .last()
            .gateways
            .iter()
            .map(|(name, r)| GroupGateway {
                name: name.clone(),
                grpid: r.grpid,
            })
            .collect(),
        owned: link.ownership().owned.into_iter().collect(),
        fenced: link.ownership().fenced,
        moves: link
            .moves()
            .into_iter()
            .map(|m| GroupMove {
                at_unix_ms: m
                    .at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                what: m.what.to_string(),
            })
            .collect(),
        leases: link
            .leases()
            .into_iter()
            .map(|l| GroupLease {
                grpid: l.grpid,
                home: l.home,
                owner: l.owner,
                expires_in_ms: l.expires_in_ms,
            })
            .collect(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportStatus {
    pub trtype: String,
    pub counters: GroupCounters,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    pub portid: u16,
    pub trtype: String,
    pub traddr: String,
    pub trsvcid: String,
    /// The bound socket address, when the transport reports one.
    pub listening: Option<String>,
    pub subsystems: Vec<String>,
    pub referrals: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemStatus {
    pub nqn: String,
    pub allow_any_host: bool,
    pub allowed_hosts: Vec<String>,
    pub namespaces: Vec<NamespaceStatus>,
    pub controllers: Vec<ControllerStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceStatus {
    pub nsid: u32,
    pub device_path: String,
    pub backend: String,
    pub size_bytes: u64,
    pub block_size: u32,
    /// Every host sees it (SPDK's auto visibility); otherwise only `visible_to`.
    #[serde(default = "yes")]
    pub auto_visible: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub visible_to: Vec<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerStatus {
    pub cntlid: u16,
    pub hostnqn: String,
    pub portid: u16,
    pub kato_ms: u32,
    /// I/O queues connected (the admin queue not counted).
    pub io_queues: usize,
}

fn controller(c: &Controller) -> ControllerStatus {
    ControllerStatus {
        cntlid: c.cntlid.0,
        hostnqn: c.hostnqn.to_string(),
        portid: c.port.portid,
        kato_ms: c.kato_ms(),
        io_queues: c.connected_io_queues(),
    }
}

fn controllers(mut v: Vec<std::sync::Arc<Controller>>) -> Vec<ControllerStatus> {
    v.retain(|c| !c.is_dead());
    v.sort_by_key(|c| c.cntlid.0);
    v.iter().map(|c| controller(c)).collect()
}

pub(super) fn collect(target: &Target, cfg: &Config, hooks: &dyn PortHooks) -> StatusView {
    let ports = target
        .ports()
        .iter()
        .map(|p| PortStatus {
            portid: p.portid,
            trtype: p.trtype.as_str().to_string(),
            traddr: p.traddr.clone(),
            trsvcid: p.trsvcid.clone(),
            listening: hooks.port_addr(p.portid),
            subsystems: p.subsystems.clone(),
            referrals: p.referrals.len(),
        })
        .collect();
    let subsystems = target
        .subsystems()
        .iter()
        .map(|s| {
            let sc = cfg.subsystem(&s.nqn);
            let mut hosts: Vec<String> = s.allowed_hosts().iter().map(|h| h.to_string()).collect();
            hosts.sort();
            SubsystemStatus {
                nqn: s.nqn.to_string(),
                allow_any_host: s.allows_any_host(),
                allowed_hosts: hosts,
                namespaces: s
                    .namespaces()
                    .iter()
                    .map(|n| NamespaceStatus {
                        nsid: n.nsid.0,
                        device_path: sc
                            .and_then(|c| c.namespace(n.nsid))
                            .map(|c| c.device_path.clone())
                            .unwrap_or_default(),
                        backend: n.backend.info().description.clone(),
                        size_bytes: n.size_bytes(),
                        block_size: n.block_size,
                        auto_visible: n.visibility.auto_visible(),
                        visible_to: n.visibility.hosts().iter().map(|h| h.to_string()).collect(),
                    })
                    .collect(),
                controllers: controllers(s.controllers()),
            }
        })
        .collect();
    StatusView {
        genctr: target.genctr(),
        ports,
        subsystems,
        discovery_controllers: controllers(target.discovery.controllers()),
        transports: hooks
            .counters()
            .into_iter()
            .map(|(trtype, counters)| TransportStatus {
                trtype: trtype.to_string(),
                counters,
            })
            .collect(),
        commands: target.metrics.watch(),
        group: None,
    }
}

impl std::fmt::Display for StatusView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(g) = &self.group {
            writeln!(
                f,
                "gateway {} of group {}: version {} applied{}{}",
                g.gateway,
                g.name,
                g.version.map_or("none".to_string(), |v| v.to_string()),
                g.applied_ms_ago
                    .map(|ms| format!(" {ms} ms ago"))
                    .unwrap_or_default(),
                g.error
                    .as_ref()
                    .map(|e| format!("; latest not applied: {e}"))
                    .unwrap_or_default()
            )?;
            let members: Vec<String> = g
                .gateways
                .iter()
                .map(|m| format!("{} (home ANA group {})", m.name, m.grpid))
                .collect();
            writeln!(f, "group gateways: {}", members.join(", "))?;
            let owned: Vec<String> = g.owned.iter().map(u32::to_string).collect();
            if g.fenced {
                writeln!(f, "group ANA groups owned: none (fenced)")?;
            } else {
                writeln!(f, "group ANA groups owned: [{}]", owned.join(", "))?;
            }
            for l in &g.leases {
                let owner = l.owner.as_deref().unwrap_or("unknown");
                let expiry = l
                    .expires_in_ms
                    .map(|ms| format!(", lease ends in {ms} ms unless renewed"))
                    .unwrap_or_default();
                writeln!(
                    f,
                    "group ANA group {} (home {}): owner {owner}{expiry}",
                    l.grpid, l.home
                )?;
            }
            for m in &g.moves {
                writeln!(f, "group move at {} ms: {}", m.at_unix_ms, m.what)?;
            }
        }
        writeln!(f, "discovery genctr {}", self.genctr)?;
        for p in &self.ports {
            writeln!(
                f,
                "port {} {} {}:{}{} subsystems [{}] referrals {}",
                p.portid,
                p.trtype,
                p.traddr,
                p.trsvcid,
                p.listening
                    .as_ref()
                    .map(|a| format!(" (listening on {a})"))
                    .unwrap_or_default(),
                p.subsystems.join(", "),
                p.referrals
            )?;
        }
        for s in &self.subsystems {
            let hosts = if s.allow_any_host {
                "any host".to_string()
            } else {
                format!("hosts [{}]", s.allowed_hosts.join(", "))
            };
            writeln!(f, "subsystem {} ({hosts})", s.nqn)?;
            for n in &s.namespaces {
                write!(
                    f,
                    "  namespace {} {} ({}) {} bytes, {} B blocks",
                    n.nsid, n.device_path, n.backend, n.size_bytes, n.block_size
                )?;
                if n.auto_visible {
                    writeln!(f)?;
                } else {
                    writeln!(f, ", visible to [{}]", n.visible_to.join(", "))?;
                }
            }
            for c in &s.controllers {
                writeln!(
                    f,
                    "  controller {} host {} port {} kato {} ms, {} I/O queue(s)",
                    c.cntlid, c.hostnqn, c.portid, c.kato_ms, c.io_queues
                )?;
            }
        }
        for c in &self.discovery_controllers {
            writeln!(
                f,
                "discovery controller {} host {} port {}",
                c.cntlid, c.hostnqn, c.portid
            )?;
        }
        for t in &self.transports {
            let fields: Vec<String> = t
                .counters
                .fields()
                .iter()
                .map(|(name, v)| format!("{name} {v}"))
                .collect();
            writeln!(f, "transport {}: {}", t.trtype, fields.join(", "))?;
        }
        for q in &self.commands.queues {
            writeln!(
                f,
                "outstanding: {} subsystem {} host {} cntlid {} qid {}{}: {} command(s), oldest {} ms",
                q.group,
                q.subsystem,
                q.host,
                q.cntlid,
                q.qid,
                if q.ended { " (ended)" } else { "" },
                q.outstanding,
                q.oldest_ms
            )?;
        }
        for c in &self.commands.stuck {
            writeln!(f, "stuck command: {} {c}", c.group)?;
        }
        Ok(())
    }
}
