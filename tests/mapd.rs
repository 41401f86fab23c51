//! The mapping daemon (issue 31 item 2) against our target in this process over
//! NVMe/TCP, each namespace served on an NBD socket and used with libnbd's own tools
//! (`nbdinfo`, `nbdcopy`, installed by scripts/setup; a missing tool fails the test):
//!
//! - every namespace of a subsystem with two paths is mapped under its stable name;
//!   data written through one socket reads back; the status socket lists both paths
//!   (one live, one standby) and every namespace;
//! - a namespace added on the target appears, a removed one vanishes, a grown one is
//!   served again at its new size, all without a command (Namespace Attribute
//!   Changed);
//! - a subsystem linked to the port later is mapped, and unmapped when unlinked
//!   (Discovery Log Page Change);
//! - stopping drains and removes every socket;
//! - bad input: an unreachable discovery controller and a subsystem that refuses this
//!   host are reported in the status with the reason, and the rest is mapped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvmf_initiator::autoconnect::{
    ConnectAllOptions, Connector, DiscoverySpec, NetConnector, PortAddr, Profile,
};
use nvmf_initiator::hostnqn::HostIdentity;
use nvmf_initiator::map::Stopper;
use nvmf_initiator::mapd::status::{query, NsState, Status};
use nvmf_initiator::mapd::{self, MapdOptions, Mode};
use nvmf_initiator::transport::Fabric;
use nvmf_target::live::ctl::{handle, Request};
use nvmf_target::live::{Create, Op};
use nvmf_tests::ops_support::{free_port, host, start_live, tmp_path, LiveTarget};

const A: &str = "nqn.2024-01.io.nvmf-rs:mapd-a";
const B: &str = "nqn.2024-01.io.nvmf-rs:mapd-b";
const MIB: u64 = 1 << 20;
/// Longest wait for the daemon to catch up with a change.
const SETTLE: Duration = Duration::from_secs(30);

fn yaml(p1: u16, p2: u16, b_hosts: &str, b_linked: bool) -> String {
    let b_on = if b_linked {
        format!(", {B}")
    } else {
        String::new()
    };
    format!(
        r#"
ports:
  - portid: 1
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: "{p1}"
    subsystems: [{A}{b_on}]
  - portid: 2
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: "{p2}"
    subsystems: [{A}]
    ana_groups: [{{ grpid: 1, state: non-optimized }}]
subsystems:
  - nqn: {A}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: "ram:8M" }}
      - {{ nsid: 2, device_path: "ram:16M" }}
  - nqn: {B}
    {b_hosts}
    namespaces: [{{ nsid: 1, device_path: "ram:4M" }}]
"#
    )
}

/// A running daemon on `dir`, stopped (and joined) on drop.
struct Daemon {
    dir: PathBuf,
    status: PathBuf,
    stop: Arc<Stopper>,
    /// What the next reload reads.
    specs: Arc<std::sync::Mutex<Vec<DiscoverySpec>>>,
    reload: Arc<AtomicBool>,
    join: Option<JoinHandle<Result<(), nvmf_initiator::Error>>>,
}

/// A discovery.conf line for our target's port `p` on 127.0.0.1.
fn spec(p: u16) -> DiscoverySpec {
    DiscoverySpec::new(
        &format!("test:{p}"),
        "tcp",
        "127.0.0.1",
        Some(&p.to_string()),
    )
}

/// How the daemon under test maps.
enum How {
    Nbd,
    /// ublk devices with links in the daemon's directory.
    Ublk,
}

impl Daemon {
    fn start(name: &str, ports: &[u16]) -> Daemon {
        let specs = ports.iter().map(|&p| spec(p)).collect();
        Daemon::start_with(name, specs, Arc::new(NetConnector), How::Nbd)
    }

    fn start_with(
        name: &str,
        specs: Vec<DiscoverySpec>,
        connector: Arc<dyn Connector>,
        how: How,
    ) -> Daemon {
        for t in ["nbdinfo", "nbdcopy"] {
            let ok = Command::new(t)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "{t} is missing: run scripts/setup (installs libnbd-bin)"
            );
        }
        let dir = tmp_path(&format!("mapd-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let status = dir.join("status.sock");
        let (nqn, id) = host(1);
        let mut copts = ConnectAllOptions::new(HostIdentity::combine(Some(nqn), Some(id)));
        copts.timeout = Duration::from_secs(5);
        let mode = match how {
            How::Nbd => Mode::Nbd { dir: dir.clone() },
            How::Ublk => Mode::Ublk {
                link_dir: dir.join("by-id"),
            },
        };
        let o = MapdOptions {
            mode,
            io_queues: 1,
            depth: None,
            rediscover: Duration::from_secs(600),
            status_socket: Some(status.clone()),
        };
        let stop = Arc::new(Stopper::new().unwrap());
        let specs = Arc::new(std::sync::Mutex::new(specs));
        let reload = Arc::new(AtomicBool::new(false));
        let (s2, specs2, reload2) = (stop.clone(), specs.clone(), reload.clone());
        let join = std::thread::spawn(move || {
            let load = move || Ok(specs2.lock().map(|s| s.clone()).unwrap_or_default());
            mapd::run(&load, &copts, &o, connector, s2, &reload2)
        });
        Daemon {
            dir,
            status,
            stop,
            specs,
            reload,
            join: Some(join),
        }
    }

    /// Replaces the specs and asks for a reload (what SIGHUP does).
    fn reload(&self, specs: Vec<DiscoverySpec>) {
        *self.specs.lock().unwrap() = specs;
        self.reload.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn status(&self) -> Status {
        query(&self.status).unwrap_or_default()
    }

    /// Waits until `ok` holds for the status, or panics with the last one seen.
    fn wait(&self, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + SETTLE;
        loop {
            let s = self.status();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {SETTLE:?}; status: {s:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(mut self) {
        self.stop.trigger();
        let r = self.join.take().map(|j| j.join());
        assert!(matches!(r, Some(Ok(Ok(())))), "mapd ended with {r:?}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.trigger();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// (nsid, size) of every mapped namespace of `nqn`.
fn mapped(s: &Status, nqn: &str) -> Vec<(u32, u64)> {
    s.subsystems
        .get(nqn)
        .map(|sub| {
            sub.namespaces
                .values()
                .filter(|n| n.state == NsState::Mapped)
                .map(|n| (n.nsid, n.size_bytes))
                .collect()
        })
        .unwrap_or_default()
}

fn socket_of(s: &Status, nqn: &str, nsid: u32) -> PathBuf {
    let uri = &s.subsystems[nqn].namespaces[&nsid].detail;
    let path = uri
        .split("socket=")
        .nth(1)
        .unwrap_or_else(|| panic!("no socket in {uri:?}"));
    PathBuf::from(path)
}

fn uri(socket: &Path) -> String {
    format!("nbd+unix:///?socket={}", socket.display())
}

fn nbd_size(socket: &Path) -> u64 {
    let out = Command::new("nbdinfo")
        .args(["--size", &uri(socket)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nbdinfo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn nbdcopy(from: &str, to: &str) {
    let out = Command::new("nbdcopy").args([from, to]).output().unwrap();
    assert!(
        out.status.success(),
        "nbdcopy {from} {to}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Port 1 back on TCP `port` of 127.0.0.1, exporting A again (after `RemovePort`).
fn restore_port(t: &LiveTarget, port: u16) {
    change(
        t,
        Op::AddPort {
            portid: 1,
            trtype: nvmf_target::config::TrType::Tcp,
            traddr: "127.0.0.1".into(),
            trsvcid: port.to_string(),
        },
    );
    change(
        t,
        Op::LinkSubsystem {
            portid: 1,
            nqn: A.into(),
        },
    );
}

fn change(t: &LiveTarget, op: Op) {
    let r = handle(&t.live, &Request::Change(op));
    assert!(r.ok, "{:?}", r.error);
}

#[test]
fn every_namespace_is_mapped_and_follows_the_target() {
    let (p1, p2) = (free_port(), free_port());
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", false), None);
    let d = Daemon::start("follow", &[p1, p2]);
    let s = d.wait("A's two namespaces mapped", |s| {
        mapped(s, A) == vec![(1, 8 * MIB), (2, 16 * MIB)]
    });
    // Both paths are watched, each with its ANA state.
    let states: Vec<(&str, Option<&str>)> = s.subsystems[A]
        .paths
        .iter()
        .map(|p| (p.state.as_str(), p.ana.as_deref()))
        .collect();
    assert_eq!(
        states,
        vec![("live", Some("optimized")), ("live", Some("non-optimized"))],
        "{s:#?}"
    );
    assert!(!s.subsystems.contains_key(B), "B is on no port yet");

    // The socket carries the stable name; libnbd sees the size and moves data.
    let sock1 = socket_of(&s, A, 1);
    let name = &s.subsystems[A].namespaces[&1].name;
    assert_eq!(sock1, d.dir.join(format!("{name}.sock")));
    assert!(name.starts_with("nvmf-"), "{name}");
    assert_eq!(nbd_size(&sock1), 8 * MIB);
    let src = d.dir.join("pattern.bin");
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &pattern).unwrap();
    nbdcopy(src.to_str().unwrap(), &uri(&sock1));
    let back = d.dir.join("back.bin");
    nbdcopy(&uri(&sock1), back.to_str().unwrap());
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len() as u64, 8 * MIB);
    assert!(
        got[..pattern.len()] == pattern[..],
        "data read back differs"
    );

    // A namespace added, one removed, one grown: followed without a command.
    let grown = tmp_path("mapd-grow.img");
    let _ = std::fs::remove_file(&grown);
    let mut add = Op::add_ns(A, Some(3), grown.to_str().unwrap());
    if let Op::AddNs { create, .. } = &mut add {
        *create = Create {
            size: Some(4 * MIB),
            ..Create::default()
        };
    }
    change(&t, add);
    let s = d.wait("namespace 3 mapped", |s| {
        mapped(s, A).contains(&(3, 4 * MIB))
    });
    let sock3 = socket_of(&s, A, 3);
    assert_eq!(nbd_size(&sock3), 4 * MIB);
    change(
        &t,
        Op::RemoveNs {
            nqn: A.into(),
            nsid: 2,
            delete_backing: false,
        },
    );
    let sock2 = socket_of(&s, A, 2);
    d.wait("namespace 2 unmapped", |s| {
        mapped(s, A) == vec![(1, 8 * MIB), (3, 4 * MIB)]
    });
    assert!(!sock2.exists(), "{} is still there", sock2.display());
    change(
        &t,
        Op::ResizeNs {
            nqn: A.into(),
            nsid: 3,
            size: Some(12 * MIB),
        },
    );
    let s = d.wait("namespace 3 served at its new size", |s| {
        mapped(s, A).contains(&(3, 12 * MIB))
    });
    assert_eq!(nbd_size(&socket_of(&s, A, 3)), 12 * MIB);

    // A subsystem linked to the port later is found through the discovery notice.
    change(
        &t,
        Op::LinkSubsystem {
            portid: 1,
            nqn: B.into(),
        },
    );
    d.wait("B mapped", |s| mapped(s, B) == vec![(1, 4 * MIB)]);
    change(
        &t,
        Op::UnlinkSubsystem {
            portid: 1,
            nqn: B.into(),
        },
    );
    d.wait("B unmapped", |s| !s.subsystems.contains_key(B));

    // Stop: every mapping drains, every socket goes.
    let dir = d.dir.clone();
    d.stop();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "sockets left after stop: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&grown);
}

/// Connects subsystem `nqn` to another port than discovery names (a gateway whose
/// discovery log is stale, say); everything else goes where it is told.
struct Redirect {
    nqn: &'static str,
    port: u16,
}

impl Connector for Redirect {
    fn fabric(
        &self,
        addr: &PortAddr,
        subnqn: &str,
        profile: &Profile,
        tls: bool,
    ) -> Result<Arc<dyn Fabric>, nvmf_initiator::Error> {
        let to = if subnqn == self.nqn {
            PortAddr::new(addr.trtype, &addr.traddr, &self.port.to_string())
        } else {
            addr.clone()
        };
        NetConnector.fabric(&to, subnqn, profile, tls)
    }
}

#[test]
fn unreachable_discovery_controller_and_refused_host_are_reported() {
    let (p1, p2) = (free_port(), free_port());
    let nobody = free_port();
    // Discovery on this target lists B for us; B is served by another target that
    // does not allow this host.
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", true), None);
    let (q1, q2) = (free_port(), free_port());
    let other = start_live(
        &yaml(
            q1,
            q2,
            "allowed_hosts: [nqn.2024-01.io.nvmf-rs:someone-else]",
            true,
        ),
        None,
    );
    let d = Daemon::start_with(
        "bad",
        vec![spec(p1), spec(p2), spec(nobody)],
        Arc::new(Redirect { nqn: B, port: q1 }),
        How::Nbd,
    );
    let s = d.wait("A mapped beside the problems", |s| {
        mapped(s, A).len() == 2
            && s.subsystems
                .get(B)
                .is_some_and(|b| b.paths.iter().any(|p| p.state.starts_with("down")))
    });
    let problems = s.problems.join("\n");
    assert!(
        problems.contains(&format!("127.0.0.1:{nobody}")) && problems.contains("could not be read"),
        "{problems}"
    );
    let b = &s.subsystems[B];
    assert!(b.namespaces.is_empty(), "{b:?}");
    assert!(
        b.paths
            .iter()
            .all(|p| p.state.contains("Connect Invalid Host")),
        "{b:?}"
    );
    d.stop();
    drop((t, other));
}

/// `nbdcopy` from the export to /dev/null: whether it succeeded and how long it took.
fn nbd_read_all(socket: &Path) -> (bool, Duration) {
    let t = Instant::now();
    let ok = Command::new("nbdcopy")
        .args([&uri(socket), "null:"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (ok, t.elapsed())
}

#[test]
fn fast_io_fail_tmo_fails_io_while_reconnecting_goes_on() {
    use nvmf_common::types::{Nqn, Nsid};
    use nvmf_initiator::map::{serve_session, Endpoint, Listen, Listener, MapOptions};
    use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy, Session};
    use nvmf_tests::ops_support::options_as;

    const FAST_IO_FAIL: Duration = Duration::from_secs(1);
    let (p1, p2) = (free_port(), free_port());
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", false), None);
    let nqn = Nqn::new(A).unwrap();
    let policy = ReconnectPolicy {
        reconnect_delay: Duration::from_millis(500),
        ctrl_loss_tmo: Some(Duration::from_secs(60)),
        retry: RetryPolicy::Retry,
    };
    let session = Session::connect_once(t.fabric(1), options_as(1, &nqn, 1, 5000), policy).unwrap();
    let dir = tmp_path("mapd-fast-io-fail");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("ns1.sock");
    let listener = Listener::bind(&Listen::Unix(sock.clone())).unwrap();
    let stop = Arc::new(Stopper::new().unwrap());
    let opts = MapOptions {
        nsid: Nsid(1),
        export_name: String::new(),
        depth: None,
        fast_io_fail: Some(FAST_IO_FAIL),
    };
    let served = std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve_session(
                session,
                Endpoint::Nbd(&listener),
                &opts,
                true,
                &stop,
                |_| {},
            )
        });
        assert!(nbd_read_all(&sock).0, "the export reads before the loss");

        // The target's port goes away: every connection is cut and reconnects are refused.
        change(&t, Op::RemovePort { portid: 1 });
        let lost = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        let (ok, _) = nbd_read_all(&sock);
        let first = lost.elapsed();
        assert!(!ok, "a read while the target is gone must fail");
        assert!(
            first >= FAST_IO_FAIL && first < FAST_IO_FAIL + Duration::from_secs(3),
            "the first read failed {first:?} after the loss (fast_io_fail_tmo {FAST_IO_FAIL:?})"
        );
        // Past the timeout, I/O fails at once while reconnecting goes on.
        let (ok, took) = nbd_read_all(&sock);
        assert!(!ok, "a read past fast_io_fail_tmo must fail");
        assert!(took < Duration::from_secs(1), "it took {took:?}");

        // The port comes back: the same export serves again, without a command.
        restore_port(&t, p1);
        let deadline = Instant::now() + SETTLE;
        while !nbd_read_all(&sock).0 {
            assert!(Instant::now() < deadline, "the export never served again");
            std::thread::sleep(Duration::from_millis(200));
        }
        stop.trigger();
        server.join().unwrap()
    });
    let served = served.unwrap_or_else(|e| panic!("serve: {e}"));
    assert!(served.reconnects >= 1, "{served:?}");
    assert!(served.stats.errors >= 2, "{served:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_namespace_ublk_cannot_take_is_refused_by_name() {
    const C: &str = "nqn.2024-01.io.nvmf-rs:mapd-8k";
    let p = free_port();
    let t = start_live(
        &format!(
            r#"
ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: "{p}", subsystems: [{C}] }}
subsystems:
  - nqn: {C}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:4M", block_size: 8192 }}]
"#
        ),
        None,
    );
    let d = Daemon::start_with("8k", vec![spec(p)], Arc::new(NetConnector), How::Ublk);
    let s = d.wait("the 8 KiB namespace refused", |s| {
        s.subsystems
            .get(C)
            .and_then(|c| c.namespaces.get(&1))
            .is_some_and(|n| n.state == NsState::Failed)
    });
    let n = &s.subsystems[C].namespaces[&1];
    assert_eq!(n.block_size, 8192);
    assert!(
        n.detail.contains("8192-byte blocks") && n.detail.contains("NBD"),
        "{n:?}"
    );
    assert!(
        std::fs::read_dir(d.dir.join("by-id")).map_or(true, |mut r| r.next().is_none()),
        "no stable name for a device that does not exist"
    );
    d.stop();
    drop(t);
}

#[test]
fn reload_applies_the_difference_and_refuses_a_bad_configuration() {
    let (p1, p2) = (free_port(), free_port());
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", false), None);
    let d = Daemon::start("reload", &[p1]);
    d.wait("A mapped through port 1", |s| {
        mapped(s, A).len() == 2 && s.subsystems[A].paths.len() == 1
    });
    // A second discovery controller: A gains its path, nothing is remapped.
    d.reload(vec![spec(p1), spec(p2)]);
    d.wait("A on both paths", |s| {
        mapped(s, A).len() == 2 && s.subsystems[A].paths.len() == 2
    });
    // A bad line refuses the whole reload; what runs stays.
    let mut bad = spec(p1);
    bad.transport = "fc".into();
    d.reload(vec![spec(p1), bad]);
    let refused = |s: &Status| {
        s.reload_refused
            .as_ref()
            .is_some_and(|r| r.contains("reload refused") && r.contains("fc"))
    };
    let s = d.wait("the reload refused", refused);
    assert_eq!(mapped(&s, A).len(), 2);
    assert_eq!(s.subsystems[A].paths.len(), 2);
    // A walk that follows (B linked: the discovery notice) keeps showing the refusal.
    change(
        &t,
        Op::LinkSubsystem {
            portid: 1,
            nqn: B.into(),
        },
    );
    let s = d.wait("B mapped after the refusal", |s| !mapped(s, B).is_empty());
    assert!(refused(&s), "{:?}", s.reload_refused);
    // No discovery controller left: everything is unmapped.
    d.reload(Vec::new());
    let s = d.wait("A and B unmapped", |s| s.subsystems.is_empty());
    assert_eq!(
        s.reload_refused, None,
        "a reload that applied clears the refusal"
    );
    d.stop();
    drop(t);
}

#[test]
fn a_target_gone_past_ctrl_loss_tmo_fails_io_and_comes_back_mapped() {
    let (p1, p2) = (free_port(), free_port());
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", false), None);
    let mut s1 = spec(p1);
    s1.ctrl_loss_tmo = Some(2);
    s1.reconnect_delay = Some(1);
    let d = Daemon::start_with("gone", vec![s1], Arc::new(NetConnector), How::Nbd);
    let s = d.wait("A mapped", |s| mapped(s, A).len() == 2);
    let sock = socket_of(&s, A, 1);
    assert!(nbd_read_all(&sock).0);

    change(&t, Op::RemovePort { portid: 1 });
    let lost = Instant::now();
    let (ok, _) = nbd_read_all(&sock);
    let failed_after = lost.elapsed();
    assert!(!ok, "a read while the target is gone must fail");
    // It waited for the reconnect (no fast_io_fail_tmo), then failed, and nothing hung.
    assert!(
        failed_after >= Duration::from_millis(1500) && failed_after < Duration::from_secs(2 + 5),
        "the read failed {failed_after:?} after the loss (ctrl_loss_tmo 2 s)"
    );
    let s = d.wait("the namespaces failed past ctrl_loss_tmo", |s| {
        s.subsystems.get(A).is_some_and(|a| {
            a.namespaces.len() == 2
                && a.namespaces
                    .values()
                    .all(|n| n.state == NsState::Failed && n.detail.contains("ctrl-loss-tmo"))
        })
    });
    assert!(!sock.exists(), "the socket is removed: {s:#?}");
    assert!(
        s.subsystems[A]
            .paths
            .iter()
            .all(|p| p.state.starts_with("down")),
        "{s:#?}"
    );

    // The target comes back: the daemon maps the namespaces again by itself.
    restore_port(&t, p1);
    let s = d.wait("A mapped again", |s| mapped(s, A).len() == 2);
    assert!(nbd_read_all(&socket_of(&s, A, 1)).0);
    d.stop();
}

#[test]
fn a_discovery_entry_for_an_unreachable_port_is_reported() {
    let (p1, p2) = (free_port(), free_port());
    let nobody = free_port();
    // Discovery lists B on a port where nothing listens (a gateway that is down).
    let t = start_live(&yaml(p1, p2, "allow_any_host: true", true), None);
    let d = Daemon::start_with(
        "unreachable",
        vec![spec(p1)],
        Arc::new(Redirect {
            nqn: B,
            port: nobody,
        }),
        How::Nbd,
    );
    let s = d.wait("A mapped, B's path down", |s| {
        mapped(s, A).len() == 2
            && s.subsystems
                .get(B)
                .is_some_and(|b| b.paths.iter().any(|p| p.state.starts_with("down")))
    });
    let b = &s.subsystems[B];
    assert!(b.namespaces.is_empty(), "{b:?}");
    assert!(
        b.paths.iter().all(
            |p| p.state.contains("connection refused") && p.state.contains(&nobody.to_string())
        ),
        "{b:?}"
    );
    d.stop();
    drop(t);
}
