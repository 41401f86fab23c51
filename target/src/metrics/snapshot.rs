//! A [`Snapshot`] of the target's metrics: what a reader (the HTTP endpoint, `ctl
//! top`) takes at one moment. Reads the target (its subsystems and controllers) and
//! its [`Registry`](super::Registry), so it sits above both; the registry stays below the target.

use serde::{Deserialize, Serialize};

use super::{CellSnapshot, EventKey, GatewayGroupRow, GroupRow};
use crate::target::Target;

/// One live controller: where it is, and its queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRow {
    pub subsystem: String,
    pub host: String,
    pub portid: u16,
    pub cntlid: u16,
    pub io_queues: usize,
}

/// Everything a reader needs, copied at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Nanoseconds since the target started (rates divide deltas by its delta).
    pub uptime_ns: u64,
    pub groups: Vec<GroupRow>,
    pub cells: Vec<CellSnapshot>,
    pub controllers: Vec<ControllerRow>,
    pub events: Vec<(EventKey, u64)>,
    /// Every namespace served, as (subsystem, nsid), so idle ones show too.
    pub namespaces: Vec<(String, u32)>,
    /// Namespaces with QoS limits (or held commands in the past): limits and counters.
    #[serde(default)]
    pub qos: Vec<QosRow>,
    /// The gateway group, when this target is a gateway of one.
    #[serde(default)]
    pub gateway_group: Option<GatewayGroupRow>,
}

/// The QoS limits and counters of one namespace, summed over poll groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosRow {
    pub subsystem: String,
    pub nsid: u32,
    pub stats: crate::qos::QosStats,
}

/// Takes a [`Snapshot`] of `target`.
pub fn snapshot(target: &Target) -> Snapshot {
    let reg = &target.metrics;
    let cells = {
        let cells = reg.cells.lock();
        cells.iter().map(|c| c.snapshot()).collect()
    };
    let mut controllers = Vec::new();
    let mut namespaces = Vec::new();
    let mut qos = Vec::new();
    let mut subsystems = target.subsystems();
    subsystems.push(target.discovery.clone());
    for s in &subsystems {
        for n in s.namespaces() {
            namespaces.push((s.nqn.to_string(), n.nsid.0));
            let stats = n.qos.stats();
            if n.qos.is_enabled() || stats.throttled_commands > 0 {
                qos.push(QosRow {
                    subsystem: s.nqn.to_string(),
                    nsid: n.nsid.0,
                    stats,
                });
            }
        }
        for c in s.controllers() {
            if c.is_dead() {
                continue;
            }
            controllers.push(ControllerRow {
                subsystem: s.nqn.to_string(),
                host: c.hostnqn.to_string(),
                portid: c.port.portid,
                cntlid: c.cntlid.0,
                io_queues: c.connected_io_queues(),
            });
        }
    }
    controllers.sort_by(|a, b| (&a.subsystem, a.cntlid).cmp(&(&b.subsystem, b.cntlid)));
    Snapshot {
        uptime_ns: u64::try_from(reg.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        groups: reg.groups(),
        cells,
        controllers,
        events: reg
            .events
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        namespaces,
        qos,
        gateway_group: reg.gateway_group.get().map(|f| f()),
    }
}
