//! Metrics: what the data path counts, and how the control plane reads it.
//!
//! Ownership and cost:
//!
//! - Per command, the poll group that answers it updates one [`IoCell`] it alone
//!   writes (relaxed loads and stores, a fixed-bucket latency histogram; no lock, no
//!   allocation). A queue finds its cells once per namespace ([`Registry::cell`], the
//!   only lock, taken on a queue's first command to a namespace) and keeps them.
//! - Per poll-group pass, the group's own [`GroupStats`] (busy and idle time, queues,
//!   commands...), registered here by name when the group starts.
//! - Rare events (keep-alive expiries, authentication failures) take a lock:
//!   [`Registry::event`].
//!
//! Readers (the HTTP endpoint [`http`], `ctl top` through the admin socket) take a
//! [`Snapshot`]: every cell and group copied, plus the controllers from the target;
//! aggregation into subsystems, namespaces, hosts and ports happens there, at scrape
//! time ([`encode`]).
//!
//! Layering: this file (the [`Registry`] the target owns) and [`cell`] sit below the
//! target and the poll groups, which write them; [`snapshot`], [`encode`] and
//! [`http`] read the target, and sit above it.

pub mod cell;
pub mod encode;
pub mod http;
pub mod snapshot;

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

pub use cell::{CellKey, CellSnapshot, ClassSnapshot, IoCell};
// The readers' names, kept where they were (`metrics::snapshot`, `metrics::Snapshot`).
pub use snapshot::{snapshot, ControllerRow, QosRow, Snapshot};

use crate::controller::Controller;
use crate::runtime::stats::{GroupCounters, GroupStats, StateHistogram, WatchView};

/// Rare per-controller events counted by [`Registry::event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The keep-alive timer of a controller expired (the association ended).
    KeepAliveExpired,
    /// DH-HMAC-CHAP failed: the target refused the host, or the host the target.
    AuthFailed,
}

/// Where a counted event happened.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EventKey {
    pub event: Event,
    pub subsystem: String,
    pub host: String,
    pub portid: u16,
}

/// The target's metrics: cells, poll groups and event counts (see the module docs).
pub struct Registry {
    started: Instant,
    cells: Mutex<Vec<Arc<IoCell>>>,
    groups: Mutex<Vec<(String, Weak<GroupStats>)>>,
    events: Mutex<BTreeMap<EventKey, u64>>,
    /// The gateway group's figures, read at each snapshot (a gateway of a group only).
    gateway_group: std::sync::OnceLock<GatewayGroupSource>,
}

/// Gives the gateway group's figures for a snapshot.
pub type GatewayGroupSource = Box<dyn Fn() -> GatewayGroupRow + Send + Sync>;

/// A gateway's view of its group ([`crate::group`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayGroupRow {
    pub group: String,
    pub gateway: String,
    /// The group's version in force here.
    pub version: u64,
    /// Every ANA group of the group, and whether this gateway owns it.
    pub ana_groups: Vec<(u32, bool)>,
    pub fenced: bool,
    /// ANA groups this gateway took from a gateway that fell silent (failovers).
    pub takeovers: u64,
    /// ANA groups it gave back to their home gateway (failbacks).
    pub releases: u64,
    /// Leases it lost.
    pub losses: u64,
    /// How long the gateway whose group it last took had been silent, in ms.
    pub last_takeover_silent_ms: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            started: Instant::now(),
            cells: Mutex::new(Vec::new()),
            groups: Mutex::new(Vec::new()),
            events: Mutex::new(BTreeMap::new()),
            gateway_group: std::sync::OnceLock::new(),
        }
    }
}

impl Registry {
    /// Makes the snapshots carry the gateway group's figures (once, at join).
    pub fn set_gateway_group(&self, source: GatewayGroupSource) {
        let _ = self.gateway_group.set(source);
    }

    /// The cell of `key`, made on first use. Cells live as long as the target, so
    /// counters never go backwards when queues come and go; their number is bounded
    /// by subsystems x namespaces x hosts x ports x poll groups.
    pub fn cell(&self, key: CellKey) -> Arc<IoCell> {
        let mut cells = self.cells.lock();
        if let Some(c) = cells.iter().find(|c| c.key == key) {
            return c.clone();
        }
        let c = Arc::new(IoCell::new(key));
        cells.push(c.clone());
        c
    }

    /// The cell for commands of `ctrl` to namespace `nsid` answered by `group`.
    pub fn cell_for(&self, ctrl: &Controller, nsid: u32, group: &str) -> Arc<IoCell> {
        self.cell(CellKey {
            subsystem: ctrl.subsys.nqn.to_string(),
            nsid,
            host: ctrl.hostnqn.to_string(),
            portid: ctrl.port.portid,
            group: group.to_string(),
        })
    }

    /// Read and write totals of the namespaces `nsids` of `subsystem` (an NQN), over
    /// every host, port and poll group: what the SMART / Health log reports. A cell is
    /// keyed by NSID, so a namespace removed and added again under its NSID goes on
    /// from the old counts (as nvmet's do when the block device stays the same).
    pub fn io_totals(&self, subsystem: &str, nsids: &[u32]) -> IoTotals {
        let mut t = IoTotals::default();
        for c in self.cells.lock().iter() {
            if c.key.subsystem != subsystem || !nsids.contains(&c.key.nsid) {
                continue;
            }
            let (rc, rb) = c.totals(cell::CLASS_READ);
            let (wc, wb) = c.totals(cell::CLASS_WRITE);
            t.read_commands += u128::from(rc);
            t.read_bytes += u128::from(rb);
            t.write_commands += u128::from(wc);
            t.write_bytes += u128::from(wb);
        }
        t
    }

    /// A poll group started: its counters are read by name from now on (until the
    /// group and its handles are gone). Returns the name it is known by: `name`, or
    /// `name-2`... while a live group holds `name` (one RDMA server per device names
    /// its groups alike). Cells are keyed by this name, so each keeps one writer.
    pub fn add_group(&self, name: String, stats: &Arc<GroupStats>) -> String {
        let mut g = self.groups.lock();
        g.retain(|(_, w)| w.strong_count() > 0);
        let mut unique = name.clone();
        let mut n = 2;
        while g.iter().any(|(x, _)| *x == unique) {
            unique = format!("{name}-{n}");
            n += 1;
        }
        g.push((unique.clone(), Arc::downgrade(stats)));
        unique
    }

    /// Counts one `event` of `ctrl`.
    pub fn event(&self, event: Event, ctrl: &Controller) {
        let key = EventKey {
            event,
            subsystem: ctrl.subsys.nqn.to_string(),
            host: ctrl.hostnqn.to_string(),
            portid: ctrl.port.portid,
        };
        *self.events.lock().entry(key).or_insert(0) += 1;
    }

    pub(super) fn groups(&self) -> Vec<GroupRow> {
        self.groups
            .lock()
            .iter()
            .filter_map(|(name, w)| {
                w.upgrade().map(|s| GroupRow {
                    name: name.clone(),
                    counters: s.snapshot(),
                    states: s.states.snapshot(),
                    watch: s.watch.lock().clone(),
                })
            })
            .collect()
    }

    /// What every poll group's command watch last saw: queues with outstanding
    /// commands (oldest first) and stuck commands (longest outstanding first).
    pub fn watch(&self) -> WatchView {
        let mut all = WatchView::default();
        for (_, w) in self.groups.lock().iter() {
            if let Some(s) = w.upgrade() {
                let v = s.watch.lock().clone();
                all.queues.extend(v.queues);
                all.stuck.extend(v.stuck);
            }
        }
        all.queues.sort_by_key(|q| std::cmp::Reverse(q.oldest_ms));
        all.stuck.sort_by_key(|c| std::cmp::Reverse(c.age_ms));
        all
    }
}

/// Read and write commands (completed, successfully or not) and the bytes of the
/// successful ones, summed by [`Registry::io_totals`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTotals {
    pub read_commands: u128,
    pub read_bytes: u128,
    pub write_commands: u128,
    pub write_bytes: u128,
}

/// One poll group's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRow {
    pub name: String,
    pub counters: GroupCounters,
    /// Time per request state.
    #[serde(default)]
    pub states: Vec<StateHistogram>,
    /// Outstanding and stuck commands at the group's last sweep.
    #[serde(default)]
    pub watch: WatchView,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_totals_sum_the_namespaces_asked_for_over_hosts_and_groups() {
        let r = Registry::default();
        let key = |nsid: u32, host: &str, group: &str| CellKey {
            subsystem: "nqn.s".into(),
            nsid,
            host: host.into(),
            portid: 1,
            group: group.into(),
        };
        r.cell(key(1, "h1", "g0"))
            .record(cell::CLASS_READ, 4096, 1, None);
        r.cell(key(1, "h2", "g1"))
            .record(cell::CLASS_WRITE, 8192, 1, None);
        r.cell(key(2, "h1", "g0"))
            .record(cell::CLASS_WRITE, 512, 1, None);
        r.cell(key(1, "h1", "g0"))
            .record(cell::CLASS_OTHER, 0, 1, None);
        let mut other = key(1, "h1", "g0");
        other.subsystem = "nqn.other".into();
        r.cell(other).record(cell::CLASS_READ, 1 << 20, 1, None);
        let t = r.io_totals("nqn.s", &[1]);
        assert_eq!(
            (
                t.read_commands,
                t.read_bytes,
                t.write_commands,
                t.write_bytes
            ),
            (1, 4096, 1, 8192)
        );
        let t = r.io_totals("nqn.s", &[1, 2]);
        assert_eq!((t.write_commands, t.write_bytes), (2, 8704));
        assert_eq!(r.io_totals("nqn.s", &[]), IoTotals::default());
    }

    #[test]
    fn groups_with_one_name_get_distinct_names_while_alive() {
        let r = Registry::default();
        let (a, b) = (
            Arc::new(GroupStats::default()),
            Arc::new(GroupStats::default()),
        );
        assert_eq!(r.add_group("nvmf-pg0".into(), &a), "nvmf-pg0");
        assert_eq!(r.add_group("nvmf-pg0".into(), &b), "nvmf-pg0-2");
        drop(a);
        drop(b);
        // Both gone: a restarted group takes the plain name (and its old cells) again.
        let c = Arc::new(GroupStats::default());
        assert_eq!(r.add_group("nvmf-pg0".into(), &c), "nvmf-pg0");
        assert_eq!(r.groups().len(), 1);
    }
}
