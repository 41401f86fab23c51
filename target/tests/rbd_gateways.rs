//! Two RBD gateways as two `nvmf-target` processes (issue 17): the binary built with
//! the `rbd` feature, started twice from YAML configs that export the same
//! `rbd:rbd/img` of a private Ceph cluster as the same subsystem on two 127.0.0.1
//! ports, with the same namespace identity (UUID and NGUID derived from the subsystem
//! NQN and nsid on both), disjoint controller id ranges, gateway A's ANA group
//! optimized and B's non-optimized, and `rbd_cache` off through `ceph_options`.
//!
//! Our host's multipath [`PathSet`] runs verified I/O over both while (a) `ctl
//! set-ana` makes A inaccessible, (b) A is killed with SIGKILL (librbd on B then
//! breaks the dead client's exclusive lock), and (c) A is started again and rejoins:
//! no I/O error anywhere, every run reads back what it wrote, and a last pass reads
//! back every block of the span. The longest I/O of each phase is printed.
//!
//! Also: `check-config` and `ctl add-ns --ceph-option` refuse an unknown Ceph option or
//! a bad value, naming it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::identify::{vwc, IdentifyController};
use nvmf_initiator::controller::ConnectOptions;
use nvmf_initiator::multipath::{IoPolicy, PathSet, PathState};
use nvmf_initiator::perf::{self, parse::Rw, PerfOptions, PerfReport};
use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy};
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::live::ctl::{self, Request};

#[allow(dead_code)] // Shared with the other RBD tests; not every helper is used here.
#[path = "support/ceph_cluster.rs"]
mod ceph_cluster;
use ceph_cluster::CephCluster;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:rbd-gateways";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000b1";
const HOSTID: [u8; 16] = [0xB1; 16];
const IMAGE_SIZE: &str = "64M";
/// The ANA group of the namespace on both gateways.
const GRPID: u32 = 1;
/// Controller id ranges of the two gateways: disjoint, as one subsystem needs.
const A_CNTLIDS: (u16, u16) = (1, 99);
const B_CNTLIDS: (u16, u16) = (100, 199);
/// I/O threads (one queue per path each) and perf jobs.
const WORKERS: u16 = 2;
/// Bytes of the image the perf jobs cover.
const SPAN: u64 = 8 << 20;
const BLOCK: u64 = 4096;
/// How long a gateway may take from spawn to answering `ctl status` (it connects to
/// the monitor and opens the image first).
const START_BOUND: Duration = Duration::from_secs(30);
/// How long a path may take to reach an expected state (ANA log polled every 250 ms,
/// reconnects every `RECONNECT_DELAY`).
const STATE_BOUND: Duration = Duration::from_secs(30);
/// The host's command timeout. Above the time librbd on B needs to take the exclusive
/// lock from a SIGKILLed A (it waits for A's watch on the image header to expire:
/// `osd_client_watch_timeout`, set to `WATCH_TIMEOUT_SECS` below), so no write is sent
/// twice while the first copy may still land.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// The OSD's watch timeout in this test (Ceph's default is 30 s): how long a killed
/// gateway's watch, and so its exclusive lock, outlives it.
const WATCH_TIMEOUT_SECS: &str = "5";
const RECONNECT_DELAY: Duration = Duration::from_millis(200);
/// How long commands may wait with no usable path before they fail.
const CTRL_LOSS_TMO: Duration = Duration::from_secs(120);
/// How far into a run each event happens.
const EVENT_AFTER: Duration = Duration::from_millis(500);

#[path = "support/service.rs"]
mod service;
use service::bin;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-rbdgw-{}-{name}", std::process::id()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One gateway: an `nvmf-target` process with its config, admin socket and log.
struct Gateway {
    name: &'static str,
    child: Child,
    config: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    port: u16,
}

/// A gateway's config: one TCP port, the shared subsystem and namespace.
fn gateway_yaml(cluster: &CephCluster, port: u16, cntlids: (u16, u16), ana: &str) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{SUB}],\n      \
         ana_groups: [{{ grpid: {GRPID}, state: {ana} }}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    cntlid_min: {}\n    cntlid_max: {}\n    \
         namespaces:\n      - nsid: 1\n        device_path: \"rbd:rbd/img\"\n        ceph_conf: \"{}\"\n        \
         anagrpid: {GRPID}\n        ceph_options: {{ rbd_cache: \"false\" }}\n",
        cntlids.0,
        cntlids.1,
        cluster.conf().display()
    )
}

impl Gateway {
    fn start(name: &'static str, yaml: &str, port: u16) -> Gateway {
        let config = tmp(&format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap_or_else(|e| panic!("{e}"));
        let sock = tmp(&format!("{name}.sock"));
        let log = tmp(&format!("{name}.log"));
        let mut gw = Gateway {
            name,
            child: Gateway::spawn(&config, &sock, &log),
            config,
            sock,
            log,
            port,
        };
        gw.wait_ready();
        gw
    }

    fn spawn(config: &Path, sock: &Path, log: &Path) -> Child {
        let out = File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        bin()
            .arg("--config")
            .arg(config)
            .arg("--ctl-socket")
            .arg(sock)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn nvmf-target: {e}"))
    }

    /// Waits until the admin socket answers `status`, which the target opens once its
    /// namespaces are open and its ports listen.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_BOUND;
        loop {
            if let Ok(r) = ctl::request(&self.sock, &Request::Status) {
                if r.ok {
                    return;
                }
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("gateway {} exited ({st}): {}", self.name, self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "gateway {} not ready within {START_BOUND:?}: {}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn fabric(&self) -> Arc<dyn Fabric> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        Arc::new(TcpFabric::new(addr, TcpOptions::default()))
    }

    /// `nvmf-target ctl --socket S ARGS...`: (success, stdout and stderr).
    fn ctl(&self, args: &[&str]) -> (bool, String) {
        service::ctl(&self.sock, args)
    }

    fn set_ana(&self, state: &str) {
        let (ok, text) = self.ctl(&["set-ana", "1", &GRPID.to_string(), state]);
        assert!(ok, "gateway {}: ctl set-ana {state}: {text}", self.name);
    }

    /// SIGKILL: no shutdown, no flush, librbd's lock and watch left behind.
    fn kill(&mut self) {
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("kill gateway {}: {e}", self.name));
        let _ = self.child.wait();
    }

    /// Starts the killed gateway again from the same config, on the same port.
    fn restart(&mut self) {
        self.child = Gateway::spawn(&self.config, &self.sock, &self.log);
        self.wait_ready();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for p in [&self.config, &self.sock, &self.log] {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn connect_options() -> ConnectOptions {
    let nqn = |s: &str| Nqn::new(s).unwrap_or_else(|e| panic!("{e}"));
    let mut o = ConnectOptions::new(nqn(SUB), nqn(HOSTNQN), HOSTID);
    o.nr_io_queues = WORKERS;
    o.queue_size = 32;
    o.command_timeout = COMMAND_TIMEOUT;
    o.connect_timeout = Duration::from_secs(5);
    o
}

/// Waits until the set sees `state` on path `i`.
fn wait_state(set: &PathSet, i: usize, state: PathState) -> Duration {
    let started = Instant::now();
    while set.state(i) != state {
        assert!(
            started.elapsed() < STATE_BOUND,
            "path {i} is {:?}, not {state:?}, after {STATE_BOUND:?}",
            set.state(i)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// A verifying perf run over both paths; fails the test on any error or mismatch.
fn run(set: &Arc<PathSet>, rw: Rw, runtime: Option<Duration>) -> PerfReport {
    let opts = PerfOptions {
        rw,
        iodepth: 8,
        numjobs: u32::from(WORKERS),
        runtime,
        size: Some(SPAN),
        verify: true,
        ..Default::default()
    };
    let r =
        perf::run_paths(set, IoPolicy::RoundRobin, &opts).unwrap_or_else(|e| panic!("perf: {e}"));
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(
        r.verify.blocks_checked > 0 && r.verify.failure_count == 0,
        "{}",
        r.format_normal()
    );
    r
}

/// A random-write run of `ms` with `event` after [`EVENT_AFTER`].
fn run_with(set: &Arc<PathSet>, ms: u64, event: impl FnOnce() + Send) -> PerfReport {
    std::thread::scope(|s| {
        let ev = s.spawn(|| {
            std::thread::sleep(EVENT_AFTER);
            event();
        });
        let r = run(set, Rw::RandWrite, Some(Duration::from_millis(ms)));
        ev.join()
            .unwrap_or_else(|_| panic!("event thread panicked"));
        r
    })
}

fn ios(r: &PerfReport) -> Vec<u64> {
    r.path_ios().iter().map(|p| p.ios).collect()
}

fn longest_ms(r: &PerfReport) -> f64 {
    r.latency().max() as f64 / 1e6
}

/// Both paths report one namespace identity, one serial, no volatile write cache
/// (`rbd_cache` off) and a controller id from their own gateway's range.
fn check_identity(set: &PathSet) {
    let seen: Vec<_> = (0..2)
        .map(|i| {
            set.with_controller(i, |c| {
                let ns = c
                    .namespace(Nsid(1))
                    .unwrap_or_else(|e| panic!("path {i}: {e}"));
                let idc = IdentifyController::new_checked(c.identify_controller_raw())
                    .unwrap_or_else(|e| panic!("path {i}: identify controller: {e}"));
                assert_eq!(
                    idc.vwc() & vwc::PRESENT,
                    0,
                    "path {i}: VWC with rbd_cache off"
                );
                (
                    (ns.nguid, ns.eui64, ns.uuid, c.id_ctrl().sn.clone()),
                    c.cntlid().0,
                )
            })
            .unwrap_or_else(|| panic!("path {i} not connected"))
        })
        .collect();
    let [(a, a_cntlid), (b, b_cntlid)] = [seen[0].clone(), seen[1].clone()];
    assert_eq!(a, b, "the gateways report different namespace identities");
    assert!(a.0 != [0; 16] && a.2.is_some(), "no NGUID or UUID: {a:?}");
    assert!(
        (A_CNTLIDS.0..=A_CNTLIDS.1).contains(&a_cntlid),
        "{a_cntlid}"
    );
    assert!(
        (B_CNTLIDS.0..=B_CNTLIDS.1).contains(&b_cntlid),
        "{b_cntlid}"
    );
    eprintln!(
        "identity on both gateways: NGUID {:02x?}, UUID {:02x?}, serial {}; cntlid {a_cntlid} and {b_cntlid}",
        a.0, a.2, a.3
    );
}

#[test]
fn two_gateway_processes_fail_over_and_rejoin() {
    let cluster = CephCluster::start("gw", IMAGE_SIZE);
    // Before any gateway registers its watch (the OSD reads it when a watch starts).
    cluster.ceph(&[
        "config",
        "set",
        "osd",
        "osd_client_watch_timeout",
        WATCH_TIMEOUT_SECS,
    ]);
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = Gateway::start(
        "a",
        &gateway_yaml(&cluster, port_a, A_CNTLIDS, "optimized"),
        port_a,
    );
    let b = Gateway::start(
        "b",
        &gateway_yaml(&cluster, port_b, B_CNTLIDS, "non-optimized"),
        port_b,
    );
    let policy = ReconnectPolicy {
        reconnect_delay: RECONNECT_DELAY,
        ctrl_loss_tmo: Some(CTRL_LOSS_TMO),
        retry: RetryPolicy::Retry,
    };
    let set = PathSet::connect(
        vec![("a".into(), a.fabric()), ("b".into(), b.fabric())],
        connect_options(),
        policy,
        Nsid(1),
        usize::from(WORKERS),
    )
    .unwrap_or_else(|e| panic!("connect: {e}"));
    wait_state(&set, 0, PathState::Optimized);
    wait_state(&set, 1, PathState::NonOptimized);
    check_identity(&set);

    // Every block of the span written once, through A only (B is non-optimized).
    let r = run(&set, Rw::Write, None);
    eprintln!(
        "initial pass: {} writes, paths {:?}, longest {:.1} ms",
        r.total_ios(),
        ios(&r),
        longest_ms(&r)
    );
    assert_eq!(r.write.ios, SPAN / BLOCK, "{}", r.format_normal());
    assert_eq!(ios(&r)[1], 0, "the non-optimized gateway carried I/O");

    // (a) A's group inaccessible under I/O: the commands move to B.
    let r = run_with(&set, 2500, || a.set_ana("inaccessible"));
    eprintln!(
        "(a) A inaccessible: {} I/Os, paths {:?}, longest {:.1} ms, 0 errors",
        r.total_ios(),
        ios(&r),
        longest_ms(&r)
    );
    assert!(ios(&r)[1] > 0, "B carried nothing: {:?}", ios(&r));
    assert_eq!(set.state(0), PathState::Unusable);
    a.set_ana("optimized");
    let back = wait_state(&set, 0, PathState::Optimized);
    eprintln!("A optimized again, seen after {back:?}");

    // (b) A killed under I/O: B takes the image's lock and the commands.
    let r = run_with(&set, 4000, || a.kill());
    eprintln!(
        "(b) A SIGKILLed: {} I/Os, paths {:?}, longest {:.1} ms (the kill to the I/O completed through B), 0 errors",
        r.total_ios(),
        ios(&r),
        longest_ms(&r)
    );
    assert!(ios(&r)[1] > 0, "B carried nothing: {:?}", ios(&r));
    assert_eq!(set.state(0), PathState::Unusable);

    // (c) A started again: its path reconnects and, optimized, carries the I/O.
    let started = Instant::now();
    a.restart();
    let rejoined = wait_state(&set, 0, PathState::Optimized);
    eprintln!(
        "(c) A restarted in {:?}, path optimized {rejoined:?} later",
        started.elapsed() - rejoined
    );
    let r = run(&set, Rw::RandWrite, Some(Duration::from_millis(1500)));
    eprintln!(
        "(c) after the restart: {} I/Os, paths {:?}, longest {:.1} ms, 0 errors",
        r.total_ios(),
        ios(&r),
        longest_ms(&r)
    );
    assert!(ios(&r)[0] > 0, "A did not rejoin: {:?}", ios(&r));

    // Every block of the span holds a block some acknowledged write put there.
    let r = run(&set, Rw::Read, None);
    eprintln!(
        "final read-back: {} blocks verified, paths {:?}",
        r.verify.blocks_checked,
        ios(&r)
    );
    assert_eq!(r.verify.blocks_checked, SPAN / 512, "{}", r.format_normal());
    drop(set);
    drop((a, b));
}

#[test]
fn bad_ceph_options_are_refused_by_name() {
    // check-config asks librados without connecting: no cluster needed.
    let cfg = tmp("check.yaml");
    let yaml = |options: &str| {
        format!(
            "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"4420\", subsystems: [{SUB}] }}\n\
             subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      \
             - {{ nsid: 1, device_path: \"rbd:rbd/img\", ceph_options: {options} }}\n"
        )
    };
    let check = |options: &str| {
        std::fs::write(&cfg, yaml(options)).unwrap_or_else(|e| panic!("{e}"));
        let out = bin()
            .arg("check-config")
            .arg(&cfg)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, text) = check("{ rados_osd_op_timeout: \"30\", rbd_cache: false }");
    assert_eq!(code, Some(0), "{text}");
    for (options, want) in [
        (
            "{ rados_osd_op_timout: \"30\" }",
            "ceph_options: rados_osd_op_timout: not a Ceph option",
        ),
        (
            "{ rados_osd_op_timeout: \"half a minute\" }",
            "ceph_options: rados_osd_op_timeout: librados refused the value",
        ),
    ] {
        let (code, text) = check(options);
        assert_eq!(code, Some(2), "{options}: {text}");
        assert!(
            text.contains(&format!("subsystem {SUB} namespace 1: {want}")),
            "{options}: {text}"
        );
        assert!(
            !text.contains("half a minute"),
            "the value is shown: {text}"
        );
    }
    let _ = std::fs::remove_file(&cfg);

    // ctl add-ns on a running gateway: refused before anything changes, then accepted.
    let cluster = CephCluster::start("addns", IMAGE_SIZE);
    cluster.rbd(&["create", "rbd/img2", "--size", "8M"]);
    let port = free_port();
    let gw = Gateway::start(
        "addns",
        &gateway_yaml(&cluster, port, A_CNTLIDS, "optimized"),
        port,
    );
    let conf = cluster.conf().display().to_string();
    let add = |option: &str| {
        gw.ctl(&[
            "add-ns",
            SUB,
            "rbd:rbd/img2",
            "--nsid",
            "2",
            "--ceph-conf",
            &conf,
            "--ceph-option",
            "rbd_cache=false",
            "--ceph-option",
            option,
        ])
    };
    let (ok, text) = add("rados_osd_op_timout=30");
    assert!(!ok, "an unknown option was accepted: {text}");
    assert!(
        text.contains("ceph_options: rados_osd_op_timout: not a Ceph option"),
        "{text}"
    );
    let (ok, text) = add("key=AQBnotarealkeybutstillsecret==");
    assert!(!ok, "a key in ceph_options was accepted: {text}");
    assert!(
        text.contains("ceph_options.key: a Ceph secret does not belong"),
        "{text}"
    );
    let log = gw.log_text();
    assert!(
        log.contains("admin request") && log.contains("(secret, not logged)"),
        "the refused request is not in the log: {log}"
    );
    assert!(!log.contains("AQBnotareal"), "the key reached the log");
    let (ok, text) = add("rados_osd_op_timeout=30");
    assert!(ok, "add-ns: {text}");
    let r = ctl::request(&gw.sock, &Request::Status).unwrap_or_else(|e| panic!("{e}"));
    let status = serde_json::to_string(&r.status).unwrap_or_else(|e| panic!("{e}"));
    assert!(status.contains("rbd:rbd/img2"), "{status}");
}
