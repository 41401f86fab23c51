//! Namespace visibility per host (SPDK's namespace masking).
//!
//! ```yaml
//! namespaces:
//!   - nsid: 3
//!     device_path: ram:64M
//!     auto_visible: false          # SPDK's no_auto_visible
//!     visible_to:                  # SPDK's nvmf_ns_add_host, one entry per host
//!       - nqn.2014-08.org.nvmexpress:uuid:5b6d1a2e-0000-4000-8000-000000000001
//! ```
//!
//! Semantics follow SPDK (nvmet has no masking): a namespace is visible to every host
//! unless `auto_visible` is false; then only to the hosts listed. Listing hosts on an
//! auto-visible namespace is refused, as SPDK's `nvmf_ns_add_host` refuses it (EPERM)
//! rather than silently turning the namespace private. A host that does not see a
//! namespace finds it nowhere (Identify, logs, I/O): to it the NSID is inactive.
//! Listed hosts need not be on the subsystem's allowed hosts (SPDK keeps the entry for
//! a host that connects later). Unlike the subsystem's `allowed_hosts` (any string a
//! peer may send), a listed NQN must have the NVMe form (`nqn.yyyy-mm.domain:name` or
//! `nqn.2014-08.org.nvmexpress:uuid:UUID`), as ceph-nvmeof's `namespace add_host`
//! checks: a typo would otherwise hide the namespace from the host it was meant for.

use std::collections::HashSet;

use super::error::KeyPath;
use super::NamespaceConfig;
use nvmf_common::types::Nqn;

/// Why `host` cannot be named in a namespace's visibility list, or its NQN.
pub fn check_host(host: &str) -> Result<Nqn, String> {
    let nqn = Nqn::new(host).map_err(|e| format!("{host:?}: {e}"))?;
    if nqn.is_discovery() {
        return Err("the discovery NQN is not a host NQN".into());
    }
    nqn.check_format()?;
    Ok(nqn)
}

/// The visibility problems of `ns` at key path `n`: (path, message).
pub(super) fn check(ns: &NamespaceConfig, n: &KeyPath) -> Vec<(KeyPath, String)> {
    let mut out = Vec::new();
    if ns.auto_visible && !ns.visible_to.is_empty() {
        out.push((
            n.key("visible_to"),
            format!(
                "namespace {} is visible to every host (auto_visible is true); \
                 set auto_visible: false to limit it to the hosts listed",
                ns.nsid
            ),
        ));
    }
    let mut seen = HashSet::new();
    for (j, host) in ns.visible_to.iter().enumerate() {
        let hp = n.key("visible_to").index(j);
        if let Err(e) = check_host(host.as_str()) {
            out.push((hp.clone(), e));
        }
        if !seen.insert(host) {
            out.push((hp, format!("host {host} is listed twice")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const ORIGIN: &str = "configs/x.yaml";

    fn config(ns_extra: &str) -> Result<Config, String> {
        let text = format!(
            "\
ports:
  - portid: 1
    trtype: loopback
    subsystems: [nqn.2024-01.io.nvmf-rs:ram0]
subsystems:
  - nqn: nqn.2024-01.io.nvmf-rs:ram0
    allow_any_host: true
    namespaces:
      - nsid: 1
        device_path: ram:1M
{ns_extra}"
        );
        Config::from_yaml_str(&text, ORIGIN).map_err(|e| e.to_string())
    }

    const H1: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";

    #[test]
    fn auto_visible_defaults_to_true_and_round_trips() {
        let c = config("").unwrap();
        let ns = &c.subsystems[0].namespaces[0];
        assert!(ns.auto_visible && ns.visible_to.is_empty());
        assert!(!c.to_yaml().unwrap().contains("visible"));

        let c = config(&format!(
            "        auto_visible: false\n        visible_to: [{H1}]\n"
        ))
        .unwrap();
        let ns = &c.subsystems[0].namespaces[0];
        assert!(!ns.auto_visible);
        assert_eq!(ns.visible_to.len(), 1);
        let back = Config::from_yaml_str(&c.to_yaml().unwrap(), ORIGIN).unwrap();
        assert_eq!(back.subsystems[0].namespaces[0], *ns);
        // Private to nobody yet is allowed: hosts are added later (SPDK's flow).
        assert!(config("        auto_visible: false\n").is_ok());
    }

    #[test]
    fn visibility_list_naming_an_unknown_host_format_is_refused() {
        let cases = [
            (
                "[host-a]".to_string(),
                "subsystems[0].namespaces[0].visible_to[0]: \"host-a\" is shorter than 11 bytes",
            ),
            (
                "[\"nqn.example:host-a\"]".to_string(),
                "subsystems[0].namespaces[0].visible_to[0]: \"nqn.example:host-a\" is not of the form nqn.yyyy-mm.reverse.domain:name",
            ),
            (
                "[\"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid\"]".to_string(),
                "subsystems[0].namespaces[0].visible_to[0]: \"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid\": the part after",
            ),
            (
                "[nqn.2014-08.org.nvmexpress.discovery]".to_string(),
                "subsystems[0].namespaces[0].visible_to[0]: the discovery NQN is not a host NQN",
            ),
            (
                format!("[{H1}, {H1}]"),
                "subsystems[0].namespaces[0].visible_to[1]: host nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001 is listed twice",
            ),
        ];
        for (list, want) in cases {
            let e = config(&format!(
                "        auto_visible: false\n        visible_to: {list}\n"
            ))
            .unwrap_err();
            assert!(e.contains(want), "{list}: {e}");
        }
        // Not an NQN at all (empty): refused while parsing.
        let e = config("        auto_visible: false\n        visible_to: [\"\"]\n").unwrap_err();
        assert!(e.contains("visible_to[0]") && e.contains("empty"), "{e}");
    }

    #[test]
    fn visible_to_on_an_auto_visible_namespace_is_refused() {
        let e = config(&format!("        visible_to: [{H1}]\n")).unwrap_err();
        assert!(
            e.contains("subsystems[0].namespaces[0].visible_to: namespace 1 is visible to every host (auto_visible is true); set auto_visible: false"),
            "{e}"
        );
    }
}
