//! Namespace visibility per host (SPDK's namespace masking: `no_auto_visible`,
//! `nvmf_ns_add_host`, `nvmf_ctrlr_ns_is_visible`).
//!
//! Decided in the core, per controller by its host NQN: [`crate::controller::Controller`]
//! finds namespaces only through [`NsVisibility::allows`], so Identify (the Active
//! Namespace ID list, Identify Namespace, the descriptor list), the ANA and reservation
//! logs, the Changed Namespace List and I/O treat a namespace its host may not see as
//! an inactive NSID, on every transport. A change applies in place (the namespace keeps
//! its backend); the controllers whose view changed get Namespace Attribute Changed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use nvmf_common::types::Nqn;

/// Which hosts see a namespace.
#[derive(Debug)]
pub struct NsVisibility {
    /// Every host sees it (the default). Read first, without the lock, so that a
    /// namespace that is not masked costs its I/O one load.
    auto: AtomicBool,
    /// With `auto` false: the host NQNs that see it.
    hosts: RwLock<HashSet<Nqn>>,
}

impl Default for NsVisibility {
    fn default() -> Self {
        NsVisibility::new(true, &[])
    }
}

impl NsVisibility {
    pub fn new(auto_visible: bool, hosts: &[Nqn]) -> Self {
        NsVisibility {
            auto: AtomicBool::new(auto_visible),
            hosts: RwLock::new(hosts.iter().cloned().collect()),
        }
    }

    /// Whether `host` sees the namespace.
    #[inline]
    pub fn allows(&self, host: &Nqn) -> bool {
        self.auto.load(Ordering::Acquire) || self.hosts.read().contains(host)
    }

    pub fn auto_visible(&self) -> bool {
        self.auto.load(Ordering::Acquire)
    }

    /// The hosts listed, sorted.
    pub fn hosts(&self) -> Vec<Nqn> {
        let mut v: Vec<Nqn> = self.hosts.read().iter().cloned().collect();
        v.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        v
    }

    /// Replaces the policy. The list is set before `auto` is cleared, so a reader never
    /// sees a masked namespace with a stale list.
    pub fn set(&self, auto_visible: bool, hosts: &[Nqn]) {
        let mut g = self.hosts.write();
        *g = hosts.iter().cloned().collect();
        self.auto.store(auto_visible, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_visible_allows_everyone_a_list_only_its_hosts() {
        let (a, b) = (
            Nqn::new("nqn.2024-01.io.example:a").unwrap(),
            Nqn::new("nqn.2024-01.io.example:b").unwrap(),
        );
        let v = NsVisibility::default();
        assert!(v.allows(&a) && v.allows(&Nqn::empty_host()));
        v.set(false, std::slice::from_ref(&a));
        assert!(v.allows(&a) && !v.allows(&b) && !v.allows(&Nqn::empty_host()));
        assert_eq!(v.hosts(), vec![a.clone()]);
        v.set(true, &[]);
        assert!(v.allows(&b));
    }
}
