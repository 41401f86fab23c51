//! The hosts' DH-HMAC-CHAP policies, by host NQN, as the running configuration gives
//! them ([`HostAuthDb`]); replaced whole by a reload or `ctl`, read when a controller
//! is created and when a host (re-)authenticates its admin queue, so a changed key
//! applies from the next authentication.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use nvmf_common::auth::AuthPolicy;
use nvmf_common::config::HostConfig;
use nvmf_common::types::Nqn;

use crate::subsystem::Subsystem;

/// Host NQN → policy.
#[derive(Default)]
pub struct HostAuthDb {
    map: RwLock<HashMap<Nqn, Arc<AuthPolicy>>>,
}

/// A built set of policies, ready to swap in.
pub struct HostPolicies(HashMap<Nqn, Arc<AuthPolicy>>);

impl HostPolicies {
    /// Reads every host's keys (and key files). Errors name the host and field.
    pub fn build(hosts: &[HostConfig]) -> Result<HostPolicies, String> {
        let mut map = HashMap::new();
        for h in hosts {
            match h.policy() {
                Ok(Some(p)) => {
                    map.insert(h.nqn.clone(), Arc::new(p));
                }
                Ok(None) => {}
                Err((field, msg)) => return Err(format!("host {}: {field}: {msg}", h.nqn)),
            }
        }
        Ok(HostPolicies(map))
    }
}

impl HostAuthDb {
    /// Swaps in `p`; returns the hosts whose policy was added, changed or removed.
    pub fn replace(&self, p: HostPolicies) -> Vec<Nqn> {
        let mut g = self.map.write();
        let mut changed: Vec<Nqn> =
            p.0.iter()
                .filter(|(n, new)| !g.get(*n).is_some_and(|old| same(old, new)))
                .map(|(n, _)| n.clone())
                .collect();
        changed.extend(g.keys().filter(|n| !p.0.contains_key(*n)).cloned());
        *g = p.0;
        changed
    }

    /// The policy `host` must satisfy to reach `subsys`: None when no authentication is
    /// asked (no key, a subsystem that allows any host, the discovery subsystem).
    pub fn policy_for(&self, subsys: &Subsystem, host: &Nqn) -> Option<Arc<AuthPolicy>> {
        if subsys.is_discovery() || subsys.allows_any_host() {
            return None;
        }
        self.map.read().get(host).cloned()
    }
}

fn same(a: &AuthPolicy, b: &AuthPolicy) -> bool {
    a.host_key.ct_eq(&b.host_key)
        && match (&a.ctrl_key, &b.ctrl_key) {
            (Some(x), Some(y)) => x.ct_eq(y),
            (None, None) => true,
            _ => false,
        }
        && a.hashes == b.hashes
        && a.groups == b.groups
}
