//! The target's event bus (`Target::events`, the management API's `WatchEvents`): a
//! subscriber sees hosts connect and disconnect (once per controller, whatever ends
//! it), namespaces added, resized, reconfigured and removed by live changes, ANA
//! group state changes and failed DH-HMAC-CHAP authentications.
//!
//! Every target here is in-process: NVMe/TCP ports on 127.0.0.1 behind `Live`, and
//! our host library connecting to them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::{error::TryRecvError, Receiver};

use nvmf_common::auth::{DhchapSecret, HashId, HostKeys};
use nvmf_common::types::{Nqn, DISCOVERY_NQN};
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::error::Error;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::{AnaState, Config};
use nvmf_target::events::{NamespaceChange, Stamped, TargetEvent};
use nvmf_target::live::hooks::TcpPorts;
use nvmf_target::live::{Live, Op, PortHooks};
use nvmf_target::target::Target;

/// Subsystem any host may reach.
const SUB: &str = "nqn.2024-01.io.nvmf-rs:events";
/// Subsystem only host 2 may reach, after DH-HMAC-CHAP.
const AUTH_SUB: &str = "nqn.2024-01.io.nvmf-rs:events-auth";
/// The one port of every test target.
const PORTID: u16 = 1;
/// How long an expected event may take.
const EVENT_WAIT: Duration = Duration::from_secs(5);
/// How long we watch for an event that must not come.
const QUIET_WAIT: Duration = Duration::from_millis(500);
/// Polling interval while waiting for events.
const POLL: Duration = Duration::from_millis(5);
/// Host 2's key length (bytes): SHA-256 sized.
const KEY_LEN: usize = 32;

/// A live target and its NVMe/TCP listeners (stopped on drop).
struct Env {
    live: Arc<Live>,
    tcp: Arc<TcpPorts>,
    target: Arc<Target>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.tcp.shutdown();
    }
}

impl Env {
    fn fabric(&self) -> Arc<dyn Fabric> {
        let addr: SocketAddr = self
            .tcp
            .port_addr(PORTID)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("port {PORTID} is not listening"));
        let addr = SocketAddr::new([127, 0, 0, 1].into(), addr.port());
        Arc::new(TcpFabric::new(addr, TcpOptions::default()))
    }

    fn execute(&self, op: Op) -> Vec<String> {
        self.live
            .execute(&op)
            .unwrap_or_else(|e| panic!("{op:?} refused: {e}"))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"))
}

fn tmp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-events-{}-{name}", std::process::id()))
}

/// Host number `n`: its NQN and host identifier.
fn host(n: u8) -> (Nqn, [u8; 16]) {
    let nqn = Nqn::new(format!(
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000{n:02x}"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    (nqn, [n; 16])
}

fn options(n: u8, subnqn: &str, nr_io: u16) -> ConnectOptions {
    let (hostnqn, hostid) = host(n);
    let sub = Nqn::new(subnqn).unwrap_or_else(|e| panic!("{e}"));
    let mut o = ConnectOptions::new(sub, hostnqn, hostid);
    o.nr_io_queues = nr_io;
    o.queue_size = 32;
    o.kato_ms = 0;
    o.command_timeout = Duration::from_secs(10);
    o.connect_timeout = Duration::from_secs(5);
    o
}

fn connect(env: &Env, n: u8, subnqn: &str, nr_io: u16) -> Controller {
    Controller::connect(env.fabric(), options(n, subnqn, nr_io))
        .unwrap_or_else(|e| panic!("connect to {subnqn}: {e}"))
}

/// Port 1 exporting [`SUB`] (namespace 1 on RAM, `extra_ns` lines after it) and
/// [`AUTH_SUB`] (host 2 only, with `host2_key`).
fn yaml(port: u16, extra_ns: &str, host2_key: &DhchapSecret) -> String {
    let (h2, _) = host(2);
    format!(
        r#"
ports:
  - {{ portid: {PORTID}, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}, {AUTH_SUB}] }}
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: "ram:8M" }}
{extra_ns}
  - nqn: {AUTH_SUB}
    allowed_hosts: ["{h2}"]
    namespaces:
      - {{ nsid: 1, device_path: "ram:4M" }}
hosts:
  - nqn: "{h2}"
    dhchap_key: "{}"
    dhchap_dhgroup: "null"
"#,
        host2_key.to_interchange().as_str()
    )
}

fn new_key() -> DhchapSecret {
    DhchapSecret::generate(Some(HashId::Sha256), KEY_LEN).unwrap_or_else(|e| panic!("{e}"))
}

fn start(yaml: &str) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cfg = Config::from_yaml_str(yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let tcp = Arc::new(
        TcpPorts::start(target.clone(), &target.ports(), Default::default())
            .unwrap_or_else(|e| panic!("tcp: {e}")),
    );
    let live = Live::new(target.clone(), cfg, tcp.clone(), None);
    Env { live, tcp, target }
}

/// The next event, within [`EVENT_WAIT`]; fails naming what was awaited.
fn next(rx: &mut Receiver<Stamped>, what: &str) -> TargetEvent {
    let deadline = Instant::now() + EVENT_WAIT;
    loop {
        match rx.try_recv() {
            Ok(s) => return s.event,
            Err(TryRecvError::Empty) if Instant::now() < deadline => std::thread::sleep(POLL),
            Err(TryRecvError::Empty) => panic!("no event within {EVENT_WAIT:?}: expected {what}"),
            Err(e) => panic!("event stream broken while waiting for {what}: {e}"),
        }
    }
}

/// Asserts that no event comes within [`QUIET_WAIT`].
fn quiet(rx: &mut Receiver<Stamped>, after: &str) {
    let deadline = Instant::now() + QUIET_WAIT;
    while Instant::now() < deadline {
        match rx.try_recv() {
            Ok(s) => panic!("unexpected event after {after}: {:?}", s.event),
            Err(TryRecvError::Empty) => std::thread::sleep(POLL),
            Err(e) => panic!("event stream broken after {after}: {e}"),
        }
    }
}

fn connected(subsystem: &str, n: u8, cntlid: u16) -> TargetEvent {
    TargetEvent::HostConnected {
        subsystem: subsystem.into(),
        host: host(n).0.to_string(),
        cntlid,
        portid: PORTID,
    }
}

fn disconnected(subsystem: &str, n: u8, cntlid: u16) -> TargetEvent {
    TargetEvent::HostDisconnected {
        subsystem: subsystem.into(),
        host: host(n).0.to_string(),
        cntlid,
        portid: PORTID,
    }
}

fn ns_changed(nsid: u32, change: NamespaceChange) -> TargetEvent {
    TargetEvent::NamespaceChanged {
        subsystem: SUB.into(),
        nsid,
        change,
    }
}

#[test]
fn host_connect_and_disconnect_are_announced_once_per_controller() {
    let env = start(&yaml(free_port(), "", &new_key()));
    let mut rx = env.target.events.subscribe();

    // The discovery controller.
    let d = connect(&env, 1, DISCOVERY_NQN, 0);
    let dcnt = d.cntlid().0;
    assert_eq!(
        next(&mut rx, "HostConnected (discovery)"),
        connected(DISCOVERY_NQN, 1, dcnt)
    );
    d.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        next(&mut rx, "HostDisconnected (discovery)"),
        disconnected(DISCOVERY_NQN, 1, dcnt)
    );

    // An NVM controller with an I/O queue: one event each way, whatever its queues do.
    let c = connect(&env, 1, SUB, 1);
    let cnt = c.cntlid().0;
    assert_eq!(next(&mut rx, "HostConnected (NVM)"), connected(SUB, 1, cnt));
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        next(&mut rx, "HostDisconnected (NVM)"),
        disconnected(SUB, 1, cnt)
    );
    quiet(&mut rx, "the host disconnected");
}

#[test]
fn a_controller_the_target_ends_is_announced_once() {
    let env = start(&yaml(free_port(), "", &new_key()));
    let mut rx = env.target.events.subscribe();
    let c = connect(&env, 3, SUB, 1);
    let cnt = c.cntlid().0;
    assert_eq!(next(&mut rx, "HostConnected"), connected(SUB, 3, cnt));

    // Removing the subsystem ends the controller (fatal), then its queues tear down
    // (release) and it is freed: one HostDisconnected, then its namespace goes.
    env.execute(Op::RemoveSubsystem { nqn: SUB.into() });
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next(
            &mut rx,
            "HostDisconnected and NamespaceChanged Removed",
        ));
    }
    assert!(
        seen.contains(&disconnected(SUB, 3, cnt)),
        "no HostDisconnected: {seen:?}"
    );
    assert!(
        seen.contains(&ns_changed(1, NamespaceChange::Removed)),
        "no NamespaceChanged Removed: {seen:?}"
    );
    // The host notices only now; its teardown must not announce the end again.
    drop(c);
    quiet(&mut rx, "the subsystem was removed");
}

#[test]
fn namespace_changes_are_announced_after_the_swap() {
    let img = tmp_path("grow.img");
    let f = std::fs::File::create(&img).unwrap_or_else(|e| panic!("{e}"));
    f.set_len(8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let extra = format!("      - {{ nsid: 3, device_path: \"{}\" }}", img.display());
    let env = start(&yaml(free_port(), &extra, &new_key()));
    let mut rx = env.target.events.subscribe();

    env.execute(Op::AddNs {
        nqn: SUB.into(),
        device_path: "ram:4M".into(),
        nsid: Some(2),
        ceph_conf: None,
        client_id: None,
        keyring: None,
        ceph_options: Vec::new(),
        create: Default::default(),
        auto_visible: true,
    });
    assert_eq!(
        next(&mut rx, "namespace 2 added"),
        ns_changed(2, NamespaceChange::Added)
    );

    // Same size: nothing changed, nothing announced.
    env.execute(Op::ResizeNs {
        nqn: SUB.into(),
        nsid: 3,
        size: None,
    });
    quiet(&mut rx, "a resize that found the size unchanged");
    f.set_len(16 << 20).unwrap_or_else(|e| panic!("{e}"));
    let changes = env.execute(Op::ResizeNs {
        nqn: SUB.into(),
        nsid: 3,
        size: None,
    });
    assert!(changes.iter().any(|c| c.contains("resized")), "{changes:?}");
    assert_eq!(
        next(&mut rx, "namespace 3 resized"),
        ns_changed(3, NamespaceChange::Resized)
    );

    // Other settings for namespace 1 (a reload or `apply`): reconfigured.
    let mut cfg = env.live.running();
    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let ns1 = cfg
        .subsystems
        .iter_mut()
        .find(|s| s.nqn == sub)
        .and_then(|s| s.namespaces.iter_mut().find(|n| n.nsid.0 == 1))
        .unwrap_or_else(|| panic!("namespace 1 not in the running configuration"));
    ns1.device_path = "ram:16M".into();
    env.live.apply(cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        next(&mut rx, "namespace 1 reconfigured"),
        ns_changed(1, NamespaceChange::Reconfigured)
    );

    env.execute(Op::RemoveNs {
        nqn: SUB.into(),
        nsid: 2,
        delete_backing: false,
    });
    assert_eq!(
        next(&mut rx, "namespace 2 removed"),
        ns_changed(2, NamespaceChange::Removed)
    );
    quiet(&mut rx, "the namespace changes");
    let _ = std::fs::remove_file(&img);
}

#[test]
fn ana_changes_are_announced_per_group_that_changed() {
    let env = start(&yaml(free_port(), "", &new_key()));
    let mut rx = env.target.events.subscribe();
    let set = |grpid, state| Op::SetAna {
        portid: PORTID,
        grpid,
        state,
    };
    env.execute(set(2, AnaState::Inaccessible));
    assert_eq!(
        next(&mut rx, "ANA group 2 inaccessible"),
        TargetEvent::AnaChanged {
            portid: PORTID,
            grpid: 2,
            state: AnaState::Inaccessible,
        }
    );
    // The same state again changes nothing.
    env.execute(set(2, AnaState::Inaccessible));
    quiet(&mut rx, "setting an ANA group to the state it has");
    env.execute(set(2, AnaState::Optimized));
    assert_eq!(
        next(&mut rx, "ANA group 2 optimized"),
        TargetEvent::AnaChanged {
            portid: PORTID,
            grpid: 2,
            state: AnaState::Optimized,
        }
    );
    quiet(&mut rx, "the ANA changes");
}

#[test]
fn a_host_with_a_wrong_dhchap_key_is_announced_as_failed() {
    let key = new_key();
    let env = start(&yaml(free_port(), "", &key));
    let mut rx = env.target.events.subscribe();
    let (h2, _) = host(2);

    let mut o = options(2, AUTH_SUB, 1);
    o.dhchap = Some(HostKeys {
        host_key: new_key(),
        ctrl_key: None,
    });
    match Controller::connect(env.fabric(), o) {
        Err(Error::Auth(_)) => {}
        Err(e) => panic!("expected an authentication failure, got: {e}"),
        Ok(_) => panic!("a wrong DH-HMAC-CHAP key was accepted"),
    }
    let failed = TargetEvent::AuthenticationFailed {
        subsystem: AUTH_SUB.into(),
        host: h2.to_string(),
        portid: PORTID,
    };
    // The controller existed (its Connect succeeded) until the failure ended it.
    let mut seen = Vec::new();
    while !seen.contains(&failed) {
        seen.push(next(&mut rx, "AuthenticationFailed"));
    }
    assert!(
        matches!(seen.first(), Some(TargetEvent::HostConnected { subsystem, .. }) if subsystem == AUTH_SUB),
        "{seen:?}"
    );
    assert_eq!(seen.iter().filter(|e| **e == failed).count(), 1, "{seen:?}");

    // The right key: no failure.
    let mut o = options(2, AUTH_SUB, 1);
    o.dhchap = Some(HostKeys {
        host_key: key,
        ctrl_key: None,
    });
    let c = Controller::connect(env.fabric(), o).unwrap_or_else(|e| panic!("right key: {e}"));
    let cnt = c.cntlid().0;
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let mut rest = Vec::new();
    while !rest.contains(&disconnected(AUTH_SUB, 2, cnt)) {
        rest.push(next(&mut rx, "HostDisconnected of the authenticated host"));
    }
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e, TargetEvent::AuthenticationFailed { .. })),
        "{rest:?}"
    );
}

#[test]
fn stopping_the_listeners_announces_the_end_of_their_controllers() {
    let env = start(&yaml(free_port(), "", &new_key()));
    let mut rx = env.target.events.subscribe();
    let c = connect(&env, 4, SUB, 1);
    let cnt = c.cntlid().0;
    assert_eq!(next(&mut rx, "HostConnected"), connected(SUB, 4, cnt));
    // Target shutdown: the poll groups stop with the controller's queues.
    env.tcp.shutdown();
    assert_eq!(
        next(&mut rx, "HostDisconnected at shutdown"),
        disconnected(SUB, 4, cnt)
    );
    drop(c);
    quiet(&mut rx, "the listeners stopped");
}
