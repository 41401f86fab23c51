//! Gateways of one group in one process, sharing a [`MemoryStore`]: changes made on
//! one apply on all, concurrent changes all land, the group's rules hold. The RADOS
//! store is checked against a real cluster in `target/tests/gateway_group.rs`.

use std::sync::Arc;
use std::thread;

use crate::config::Config;
use nvmf_common::types::Nqn;

use super::memory::MemoryStore;
use super::*;
use crate::live::hooks::TcpPorts;
use crate::live::{Live, Op};
use crate::target::Target;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:group-test";

fn local(gateway: &str, cntlid_min: u16) -> Config {
    let yaml = format!(
        "gateway_group: {{ name: g1, gateway: {gateway}, pool: rbd, cntlid_min: {cntlid_min}, cntlid_max: {} }}\n",
        cntlid_min + 99
    );
    Config::from_yaml_str(&yaml, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

struct Gateway {
    live: Arc<Live>,
    _tcp: Arc<TcpPorts>,
}

fn gateway(store: &Arc<MemoryStore>, name: &str, cntlid_min: u16) -> Gateway {
    let store: Arc<dyn GroupStore> = store.clone();
    let (cfg, link) = join(&local(name, cntlid_min), store).unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let tcp = Arc::new(
        TcpPorts::start(target.clone(), &target.ports(), Default::default())
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let live = Live::new(target, cfg, tcp.clone(), None);
    live.join_group(link);
    Gateway { live, _tcp: tcp }
}

fn op(json: serde_json::Value) -> Op {
    serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"))
}

fn add_ns(nsid: u32) -> Op {
    op(serde_json::json!({"op": "add-ns", "nqn": SUB, "device_path": "null:64M", "nsid": nsid}))
}

fn nsids(g: &Gateway) -> Vec<u32> {
    let nqn = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    g.live
        .target()
        .subsystem_by_name(nqn.as_str())
        .map(|s| s.active_nsids())
        .unwrap_or_default()
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    l.local_addr()
        .map(|a| a.port().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_change_on_one_gateway_applies_on_the_others_with_their_own_listeners_and_cntlids() {
    let store = Arc::new(MemoryStore::default());
    let a = gateway(&store, "gw-a", 1);
    let b = gateway(&store, "gw-b", 100);
    a.live
        .execute(&op(
            serde_json::json!({"op": "add-subsystem", "nqn": SUB, "allow_any_host": true}),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    a.live.execute(&add_ns(1)).unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    a.live
        .execute(&op(serde_json::json!({"op": "add-port", "portid": 1, "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": port})))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nsids(&b), Vec::<u32>::new(), "B has not synced yet");
    let changes = b.live.group_sync().unwrap_or_else(|e| panic!("{e}"));
    assert!(!changes.is_empty());
    assert_eq!(nsids(&b), vec![1]);
    let (ra, rb) = (a.live.running(), b.live.running());
    assert_eq!(ra.ports.len(), 1, "A's listener is A's");
    assert!(
        rb.ports.is_empty(),
        "A's listener is not B's: {:?}",
        rb.ports
    );
    assert_eq!(ra.subsystems[0].cntlid_min.0, 1);
    assert_eq!(
        rb.subsystems[0].cntlid_min.0, 100,
        "each gateway its own cntlid range"
    );
    let stored = store.read().unwrap_or_else(|e| panic!("{e}"));
    // Two joins, three changes.
    assert_eq!(stored.version, Some(5));
    assert_eq!(stored.state.listeners.keys().collect::<Vec<_>>(), ["gw-a"]);
    assert_eq!(b.live.group().map(|g| g.applied().version), Some(Some(5)));
    let homes: Vec<u32> = stored.state.gateways.values().map(|g| g.grpid).collect();
    assert_eq!(homes, [1, 2], "each gateway its own home ANA group");
    // Namespaces are spread over the ANA groups; every listener reports all of them.
    let grp: Vec<Option<u32>> = stored.state.subsystems[0]
        .namespaces
        .iter()
        .map(|n| n.anagrpid)
        .collect();
    assert_eq!(grp, [Some(1)]);
    let ana: Vec<u32> = ra.ports[0].ana_groups.iter().map(|g| g.grpid).collect();
    assert_eq!(ana, [1, 2]);
    // A change on B lands on A, planned on the group's latest state.
    b.live.execute(&add_ns(2)).unwrap_or_else(|e| panic!("{e}"));
    a.live.group_sync().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nsids(&a), vec![1, 2]);
    let ns2 = a.live.running().subsystems[0].namespaces[1].anagrpid;
    assert_eq!(
        ns2,
        Some(2),
        "the second namespace goes to the less loaded group"
    );
    // A gateway that joins later starts from the group's state.
    let c = gateway(&store, "gw-c", 200);
    assert_eq!(nsids(&c), vec![1, 2]);
}

#[test]
fn gateways_changing_the_group_at_once_lose_no_update() {
    const EACH: u32 = 12;
    let store = Arc::new(MemoryStore::default());
    let a = gateway(&store, "gw-a", 1);
    let b = gateway(&store, "gw-b", 100);
    a.live
        .execute(&op(
            serde_json::json!({"op": "add-subsystem", "nqn": SUB, "allow_any_host": true}),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    thread::scope(|s| {
        for (g, first) in [(&a, 1), (&b, 1 + EACH)] {
            s.spawn(move || {
                for nsid in first..first + EACH {
                    g.live
                        .execute(&add_ns(nsid))
                        .unwrap_or_else(|e| panic!("nsid {nsid}: {e}"));
                }
            });
        }
    });
    a.live.group_sync().unwrap_or_else(|e| panic!("{e}"));
    b.live.group_sync().unwrap_or_else(|e| panic!("{e}"));
    let all: Vec<u32> = (1..=2 * EACH).collect();
    assert_eq!(nsids(&a), all);
    assert_eq!(nsids(&b), all);
    let stored = store.read().unwrap_or_else(|e| panic!("{e}"));
    // Two joins, the subsystem, and one version per namespace.
    assert_eq!(
        stored.version,
        Some(3 + u64::from(2 * EACH)),
        "one version per change"
    );
}

#[test]
fn group_rules_refuse_local_subsystems_and_inline_keys() {
    let mut l = local("gw-a", 1);
    let sub = Config::single(
        crate::config::TrType::Tcp,
        None,
        None,
        vec!["null:1M".to_string()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    l.subsystems = sub.subsystems;
    let e = check_local(&l).err().unwrap_or_default();
    assert!(e.contains("subsystems") && e.contains("ctl"), "{e}");

    let store = Arc::new(MemoryStore::default());
    let a = gateway(&store, "gw-a", 1);
    a.live
        .execute(&op(serde_json::json!({"op": "add-subsystem", "nqn": SUB})))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = store.read().unwrap_or_else(|e| panic!("{e}")).version;
    let key = nvmf_common::auth::DhchapSecret::generate(None, 32)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_interchange();
    let dir = std::env::temp_dir().join(format!("nvmf-group-key-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("host.key");
    std::fs::write(&file, key.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let private = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
    std::fs::set_permissions(&file, private).unwrap_or_else(|e| panic!("{e}"));
    // A key file is a reference: allowed.
    a.live
        .execute(&op(serde_json::json!({"op": "set-host-key", "host": "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c1", "key_file": file})))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(
        store.read().unwrap_or_else(|e| panic!("{e}")).version,
        before
    );
    // An inline key would be in the store in clear: refused, nothing stored.
    let mut state = store.read().unwrap_or_else(|e| panic!("{e}")).state;
    state.hosts[0].dhchap_key = Some(crate::config::KeyText::new(key.as_str()));
    let g = a
        .live
        .group()
        .cloned()
        .unwrap_or_else(|| panic!("no group"));
    let why = state.refusal(&g.config).unwrap_or_default();
    assert!(why.contains("secrets_in_rados"), "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}
