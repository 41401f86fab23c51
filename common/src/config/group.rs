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

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{serde_util, Config, HostConfig, PortConfig, SubsystemConfig};
use crate::types::Cntlid;

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
        }
    }

    /// What gateway `g` runs: its own file (`local`) with the group's subsystems and
    /// hosts, its listeners, and its controller id range on every subsystem.
    pub fn effective(&self, local: &Config, g: &GatewayGroupConfig) -> Config {
        let mut cfg = local.clone();
        cfg.subsystems = self.subsystems.clone();
        for s in &mut cfg.subsystems {
            s.cntlid_min = g.cntlid_min;
            s.cntlid_max = g.cntlid_max;
        }
        cfg.hosts = self.hosts.clone();
        cfg.ports = self.listeners.get(&g.gateway).cloned().unwrap_or_default();
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
