//! The hosts' DH-HMAC-CHAP policies and TLS pre-shared keys, by host NQN, as the
//! running configuration gives them ([`HostAuthDb`]); replaced whole by a reload or
//! `ctl`. Policies are read when a controller is created and when a host
//! (re-)authenticates its admin queue, TLS keys at every TLS handshake, so a changed
//! key applies from the next authentication or connection.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::config::HostConfig;
use nvmf_common::auth::AuthPolicy;
use nvmf_common::tls::ConfiguredPsk;
use nvmf_common::types::Nqn;

use crate::subsystem::Subsystem;

/// Host NQN → policy.
#[derive(Default)]
pub struct HostAuthDb {
    map: RwLock<HashMap<Nqn, Arc<AuthPolicy>>>,
    tls: RwLock<HashMap<String, ConfiguredPsk>>,
}

/// A built set of policies and keys, ready to swap in.
pub struct HostPolicies(
    HashMap<Nqn, Arc<AuthPolicy>>,
    HashMap<String, ConfiguredPsk>,
);

impl HostPolicies {
    /// Reads every host's keys (and key files). Errors name the host and field.
    pub fn build(hosts: &[HostConfig]) -> Result<HostPolicies, String> {
        let mut map = HashMap::new();
        let mut tls = HashMap::new();
        for h in hosts {
            let refuse = |(field, msg): (&str, String)| format!("host {}: {field}: {msg}", h.nqn);
            if let Some(p) = h.policy().map_err(refuse)? {
                map.insert(h.nqn.clone(), Arc::new(p));
            }
            if let Some(k) = h.tls_psk().map_err(refuse)? {
                tls.insert(h.nqn.as_str().to_owned(), k);
            }
        }
        Ok(HostPolicies(map, tls))
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
        // Connections already protected keep their keys, as with the Linux target.
        *self.tls.write() = p.1;
        changed
    }

    /// The configured TLS PSK of `host`, if it has one.
    pub fn tls_psk(&self, host: &str) -> Option<ConfiguredPsk> {
        self.tls.read().get(host).cloned()
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
