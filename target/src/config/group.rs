//! `gateway_group:`: this target is one gateway of a group whose configuration lives
//! in Ceph RADOS, shared by every gateway of the group (the target's `group` module
//! keeps it there and applies it).
//!
//! ```yaml
//! gateway_group:
//!   name: group1              # the group; its RADOS objects are named after it
//!   gateway: gw-a             # this gateway's name in the group (unique in it)
//!   ceph_conf: /etc/ceph/ceph.conf
//!   client_id: admin          # the RADOS client (client.admin)
//!   pool: rbd                 # the pool holding the group's objects
//!   cntlid_min: 1             # this gateway's controller ids: disjoint from the
//!   cntlid_max: 999           #   other gateways' (one subsystem spans them all)
//! ```
//!
//! A gateway's own file then holds only what is its own (transport, tuning, metrics,
//! management, this section); the group's subsystems, namespaces, hosts and each
//! gateway's listeners are [`GroupState`], changed with `ctl` or the API on any
//! gateway. Host keys in the group are references to key files (present on every
//! gateway); inline keys are refused unless `secrets_in_rados: true`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{
    serde_util, AnaGroupConfig, AnaState, Config, HostConfig, PortConfig, SubsystemConfig,
};
use nvmf_common::types::Cntlid;

/// Longest group or gateway name (they become parts of RADOS object names and lock
/// cookies).
pub const GROUP_NAME_MAX: usize = 64;

/// This gateway's membership (`gateway_group:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayGroupConfig {
    /// The group's name.
    pub name: String,
    /// This gateway's name in the group.
    pub gateway: String,
    /// Ceph configuration file; default: librados' search (`/etc/ceph/ceph.conf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<PathBuf>,
    /// RADOS client id (`admin` for `client.admin`); default: librados'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Ceph client options of the group's RADOS client (which the gateway's RBD
    /// namespaces share), set after `ceph_conf` is read: `{ admin_socket: PATH }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ceph_options: BTreeMap<String, String>,
    /// The pool of the group's objects.
    pub pool: String,
    /// Smallest controller id this gateway hands out.
    #[serde(with = "serde_util::cntlid")]
    pub cntlid_min: Cntlid,
    /// Largest controller id this gateway hands out.
    #[serde(with = "serde_util::cntlid")]
    pub cntlid_max: Cntlid,
    /// Allow inline host keys (`dhchap_key`, `tls_key`) in the group's RADOS objects,
    /// where anyone who may read the pool reads them. Off: key files only.
    #[serde(default)]
    pub secrets_in_rados: bool,
    /// How long an ANA group's lease lasts unless renewed (renewed every third of it):
    /// a dead gateway's groups move to another gateway after about this long.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Give a group back to its home gateway once that gateway is back.
    #[serde(default = "yes")]
    pub failback: bool,
    /// How long the home gateway must have been back (beating) before it gets its
    /// group back.
    #[serde(default = "default_failback_delay_ms")]
    pub failback_delay_ms: u64,
}

/// Default lease: a dead gateway's groups move within about 5 s plus a tick.
pub const DEFAULT_LEASE_MS: u64 = 5_000;
/// Leases shorter than this would be renewed faster than RADOS answers under load.
pub const MIN_LEASE_MS: u64 = 1_000;
/// Leases longer than this leave hosts on non-optimized paths too long.
pub const MAX_LEASE_MS: u64 = 120_000;
/// Default failback delay.
pub const DEFAULT_FAILBACK_DELAY_MS: u64 = 10_000;

fn default_lease_ms() -> u64 {
    DEFAULT_LEASE_MS
}

fn default_failback_delay_ms() -> u64 {
    DEFAULT_FAILBACK_DELAY_MS
}

fn yes() -> bool {
    true
}

impl GatewayGroupConfig {
    /// Problems of the section: (key under `gateway_group`, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (key, v) in [("name", &self.name), ("gateway", &self.gateway)] {
            if let Some(why) = name_problem(v) {
                out.push((key, why));
            }
        }
        if self.pool.is_empty() {
            out.push(("pool", "the pool of the group's objects is required".into()));
        }
        if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&self.lease_ms) {
            out.push((
                "lease_ms",
                format!(
                    "{} is outside {MIN_LEASE_MS} to {MAX_LEASE_MS}",
                    self.lease_ms
                ),
            ));
        }
        if self.failback_delay_ms > MAX_LEASE_MS * 10 {
            out.push((
                "failback_delay_ms",
                format!(
                    "{} is more than {}",
                    self.failback_delay_ms,
                    MAX_LEASE_MS * 10
                ),
            ));
        }
        if self.cntlid_min > self.cntlid_max {
            out.push((
                "cntlid_max",
                format!(
                    "smaller than cntlid_min ({} > {})",
                    self.cntlid_min.0, self.cntlid_max.0
                ),
            ));
        }
        out
    }
}

/// Why `name` cannot be a group or gateway name, if it cannot.
fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > GROUP_NAME_MAX {
        return Some(format!("1 to {GROUP_NAME_MAX} characters"));
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    (!name.chars().all(ok)).then(|| format!("{name:?}: only letters, digits, '-', '_' and '.'"))
}

/// The group's shared configuration, as stored in RADOS: what every gateway serves
/// alike, and each gateway's listeners by gateway name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupState {
    #[serde(default)]
    pub subsystems: Vec<SubsystemConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostConfig>,
    /// Ports by gateway name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub listeners: BTreeMap<String, Vec<PortConfig>>,
    /// The gateways that joined, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gateways: BTreeMap<String, GatewayRecord>,
    /// How many times each namespace (`NQN/NSID`) was resized (`resize-ns`): a gateway
    /// that sees the count move re-reads the backing's size and tells its hosts, as the
    /// gateway that resized it did.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resized: BTreeMap<String, u64>,
}

/// The key of a namespace in [`GroupState::resized`].
pub fn namespace_key(nqn: &str, nsid: u32) -> String {
    format!("{nqn}/{nsid}")
}

/// A gateway of the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayRecord {
    /// Its home ANA group: owned by it while it is alive, by another gateway while it
    /// is not.
    pub grpid: u32,
}

/// Who owns which ANA group, as this gateway sees it (its leases).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// The ANA groups this gateway holds the lease of.
    pub owned: BTreeSet<u32>,
    /// This gateway's RADOS client was fenced: it serves nothing of the group.
    pub fenced: bool,
}

/// The keys of a local file that belong to the group instead.
pub const GROUP_OWNED_KEYS: [&str; 3] = ["subsystems", "hosts", "ports"];

impl GroupState {
    /// The group's part of `cfg` (a gateway's whole running configuration), with
    /// `cfg`'s ports as `gateway`'s listeners and the other gateways' as in `self`.
    /// Controller id ranges are each gateway's own: the group stores the defaults.
    pub fn with_changes_of(&self, cfg: &Config, gateway: &str) -> GroupState {
        let mut listeners = self.listeners.clone();
        if cfg.ports.is_empty() {
            listeners.remove(gateway);
        } else {
            listeners.insert(gateway.to_string(), cfg.ports.clone());
        }
        let mut subsystems = cfg.subsystems.clone();
        for s in &mut subsystems {
            s.cntlid_min = Cntlid::MIN;
            s.cntlid_max = Cntlid::MAX;
        }
        GroupState {
            subsystems,
            hosts: cfg.hosts.clone(),
            listeners,
            gateways: self.gateways.clone(),
            resized: self.resized.clone(),
        }
    }

    /// The namespaces resized between `self` and `newer`, as (NQN, NSID).
    pub fn resized_since(&self, newer: &GroupState) -> Vec<(String, u32)> {
        newer
            .resized
            .iter()
            .filter(|(k, n)| self.resized.get(*k) != Some(*n))
            .filter_map(|(k, _)| {
                let (nqn, nsid) = k.rsplit_once('/')?;
                Some((nqn.to_string(), nsid.parse().ok()?))
            })
            .collect()
    }

    /// The ANA groups of the group (each gateway's home group).
    pub fn ana_groups(&self) -> BTreeSet<u32> {
        self.gateways.values().map(|g| g.grpid).collect()
    }

    /// The home ANA group a gateway joining now gets: the smallest one unused, within
    /// the ANA group ids a port can report (1 to ANAGRPMAX).
    pub fn free_grpid(&self) -> Option<u32> {
        let used = self.ana_groups();
        (1..=nvmf_common::wire::ana::MAX_GROUPS).find(|g| !used.contains(g))
    }

    /// Puts each namespace of `cfg` without an ANA group into the group's ANA group
    /// with the fewest namespaces (ties: the lowest id), so every gateway serves some.
    pub fn place(&self, cfg: &mut Config) {
        let groups = self.ana_groups();
        if groups.is_empty() {
            return;
        }
        let mut load: BTreeMap<u32, usize> = groups.iter().map(|g| (*g, 0)).collect();
        for ns in cfg.subsystems.iter().flat_map(|s| &s.namespaces) {
            if let Some(n) = ns.anagrpid.and_then(|g| load.get_mut(&g)) {
                *n += 1;
            }
        }
        for ns in cfg.subsystems.iter_mut().flat_map(|s| &mut s.namespaces) {
            if ns.anagrpid.is_some() {
                continue;
            }
            let Some((&g, _)) = load.iter().min_by_key(|(g, n)| (**n, **g)) else {
                return;
            };
            ns.anagrpid = Some(g);
            if let Some(n) = load.get_mut(&g) {
                *n += 1;
            }
        }
    }

    /// What gateway `g` runs: its own file (`local`) with the group's subsystems and
    /// hosts, its listeners, and its controller id range on every subsystem. On each
    /// listener every ANA group of the group is optimized where `own` says this
    /// gateway holds it, non-optimized where not, inaccessible when it is fenced.
    pub fn effective(&self, local: &Config, g: &GatewayGroupConfig, own: &Ownership) -> Config {
        let mut cfg = local.clone();
        cfg.subsystems = self.subsystems.clone();
        for s in &mut cfg.subsystems {
            s.cntlid_min = g.cntlid_min;
            s.cntlid_max = g.cntlid_max;
        }
        cfg.hosts = self.hosts.clone();
        cfg.ports = self.listeners.get(&g.gateway).cloned().unwrap_or_default();
        let ana: Vec<AnaGroupConfig> = self
            .ana_groups()
            .into_iter()
            .map(|grpid| AnaGroupConfig {
                grpid,
                state: if own.fenced {
                    AnaState::Inaccessible
                } else if own.owned.contains(&grpid) {
                    AnaState::Optimized
                } else {
                    AnaState::NonOptimized
                },
            })
            .collect();
        for p in &mut cfg.ports {
            p.ana_groups = ana.clone();
        }
        cfg
    }

    /// Why this state may not be stored in the group, if it may not: inline keys
    /// without `secrets_in_rados`.
    pub fn refusal(&self, g: &GatewayGroupConfig) -> Option<String> {
        if g.secrets_in_rados {
            return None;
        }
        self.hosts
            .iter()
            .find(|h| h.dhchap_key.is_some() || h.dhchap_ctrl_key.is_some() || h.tls_key.is_some())
            .map(|h| {
                format!(
                    "host {}: inline keys would be stored in RADOS in clear; use key files \
                     (dhchap_key_file, tls_key_file) present on every gateway, or set \
                     gateway_group.secrets_in_rados",
                    h.nqn
                )
            })
    }

    /// The stored form (YAML).
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        serde_yaml_ng::to_string(self)
            .map(String::into_bytes)
            .map_err(|e| format!("cannot encode the group state: {e}"))
    }

    /// Reads the stored form.
    pub fn from_bytes(bytes: &[u8]) -> Result<GroupState, String> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| format!("group state: not UTF-8: {e}"))?;
        let de = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| format!("group state: {e}"))
    }
}
