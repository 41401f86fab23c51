//! Two target nodes on one machine, each in its own network namespace joined to the
//! host's by a veth pair (issue 14): two `nvmf-target` processes (this test binary,
//! re-run as a child inside `ip netns exec`) serve one file as one subsystem with
//! disjoint controller ids; our host, in the root namespace, runs verified I/O over
//! both paths (`--iopolicy round-robin`) while node A's group turns inaccessible and
//! back, node A is killed with SIGKILL, and node A comes back: no I/O error, every
//! block verifies, and node A carries I/O again afterwards. The longest I/O across
//! the events is printed. Needs root (`ip netns`), as CI runs.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::multipath::{IoPolicy, PathSet, PathState};
use nvmf_initiator::perf::{self, parse::Rw, PerfOptions};
use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy};
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::{AnaState, Config};
use nvmf_target::live::ctl::{self, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::options_as;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:netns";
const NODE_CONFIG: &str = "NVMF_NETNS_NODE_CONFIG";
const NODE_CTL: &str = "NVMF_NETNS_NODE_CTL";
const PORT: u16 = 4420;

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with a veth pair to the root namespace: the host side is
/// `10.231.N.1`, the namespace side `10.231.N.2`. Removed on drop.
struct Netns {
    name: String,
    host_if: String,
}

impl Netns {
    fn new(n: u8) -> Netns {
        let tag = std::process::id() % 100_000;
        let name = format!("nvmfmp{tag}-{n}");
        let (host_if, ns_if) = (format!("nvmp{tag}h{n}"), format!("nvmp{tag}n{n}"));
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name, host_if };
        sh(&[
            "ip",
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
        ]);
        sh(&["ip", "link", "set", &ns_if, "netns", &ns.name]);
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("10.231.{n}.1/24"),
            "dev",
            &ns.host_if,
        ]);
        sh(&["ip", "link", "set", &ns.host_if, "up"]);
        let x = |args: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", ns.name.as_str()];
            v.extend_from_slice(args);
            sh(&v);
        };
        x(&[
            "ip",
            "addr",
            "add",
            &format!("10.231.{n}.2/24"),
            "dev",
            &ns_if,
        ]);
        x(&["ip", "link", "set", &ns_if, "up"]);
        x(&["ip", "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
    }
}

/// One node: a child process in `ns`, killed on drop.
struct Node {
    child: Child,
    ctl: PathBuf,
    addr: SocketAddr,
}

impl Node {
    fn start(ns: &Netns, n: u8, file: &Path, cntlids: (u16, u16)) -> Node {
        let dir = std::env::temp_dir();
        let cfg = dir.join(format!("nvmf-netns-{}-{n}.yaml", std::process::id()));
        let ctl = dir.join(format!("nvmf-netns-{}-{n}.sock", std::process::id()));
        let addr: SocketAddr = format!("10.231.{n}.2:{PORT}").parse().unwrap();
        std::fs::write(
            &cfg,
            format!(
                "ports:\n  - {{ portid: 1, trtype: tcp, traddr: {}, trsvcid: \"{PORT}\", subsystems: [{SUB}] }}\n\
                 subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    cntlid_min: {}\n    cntlid_max: {}\n    \
                 namespaces:\n      - {{ nsid: 1, device_path: {}, buffered_io: true }}\n",
                addr.ip(),
                cntlids.0,
                cntlids.1,
                file.display()
            ),
        )
        .unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(exe)
            .args([
                "--exact",
                "child_node_process",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(NODE_CONFIG, &cfg)
            .env(NODE_CTL, &ctl)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn node: {e}"));
        let out = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(out).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("NODE UP") => break,
                Some(Ok(_)) => {}
                _ => panic!("node {n} exited before listening"),
            }
        }
        // Keep reading so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Node { child, ctl, addr }
    }

    fn set_ana(&self, state: AnaState) {
        let r = ctl::request(
            &self.ctl,
            &Request::Change(Op::SetAna {
                portid: 1,
                grpid: 1,
                state,
            }),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.ok, "{:?}", r.error);
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node's body, run by the child process inside its namespace: the target from
/// the config in the environment, its admin socket, until killed.
#[test]
#[ignore]
fn child_node_process() {
    let (Ok(cfg), Ok(ctl_path)) = (std::env::var(NODE_CONFIG), std::env::var(NODE_CTL)) else {
        return;
    };
    let text = std::fs::read_to_string(&cfg).unwrap();
    let config = Config::from_yaml_str(&text, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let target = nvmf_target::target::Target::from_config(&config).unwrap();
    let tcp = Arc::new(
        nvmf_target::live::hooks::TcpPorts::start(
            target.clone(),
            &target.ports(),
            nvmf_target::tcp::TcpOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}")),
    );
    let live = nvmf_target::live::Live::new(target, config, tcp, None);
    let _ctl = nvmf_target::live::ctl::CtlServer::start(live, Path::new(&ctl_path)).unwrap();
    println!("NODE UP");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn run(set: &Arc<PathSet>, ms: u64) -> perf::report::PerfReport {
    let opts = PerfOptions {
        rw: Rw::RandWrite,
        iodepth: 8,
        numjobs: 2,
        runtime: Some(Duration::from_millis(ms)),
        size: Some(8 << 20),
        verify: true,
        ..Default::default()
    };
    let r = perf::run_paths(set, IoPolicy::RoundRobin, &opts).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.verify.blocks_checked > 0 && r.verify.failure_count == 0);
    r
}

#[test]
fn two_nodes_in_network_namespaces_fail_over_and_rejoin() {
    assert!(
        is_root(),
        "this test builds network namespaces (ip netns) and needs root, as CI runs"
    );
    let file = std::env::temp_dir().join(format!("nvmf-netns-{}.img", std::process::id()));
    std::fs::write(&file, vec![0u8; 16 << 20]).unwrap();
    let (nsa, nsb) = (Netns::new(1), Netns::new(2));
    let a = Node::start(&nsa, 1, &file, (1, 99));
    let b = Node::start(&nsb, 2, &file, (100, 199));
    let fabric = |addr: SocketAddr| -> Arc<dyn Fabric> {
        Arc::new(TcpFabric::new(addr, TcpOptions::default()))
    };
    let mut o = options_as(1, &Nqn::new(SUB).unwrap(), 2, 5000);
    o.command_timeout = Duration::from_secs(3);
    let policy = ReconnectPolicy {
        reconnect_delay: Duration::from_millis(200),
        ctrl_loss_tmo: Some(Duration::from_secs(30)),
        retry: RetryPolicy::Retry,
    };
    let set = PathSet::connect(
        vec![
            (a.addr.to_string(), fabric(a.addr)),
            (b.addr.to_string(), fabric(b.addr)),
        ],
        o,
        policy,
        Nsid(1),
        2,
    )
    .unwrap();
    let ios =
        |r: &perf::report::PerfReport| -> Vec<u64> { r.path_ios().iter().map(|p| p.ios).collect() };
    let r = run(&set, 400);
    assert!(ios(&r).iter().all(|&n| n > 0), "both paths: {:?}", ios(&r));

    // (a) node A's group turns inaccessible, then optimized again, under I/O.
    let events = std::thread::scope(|s| {
        let ev = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            a.set_ana(AnaState::Inaccessible);
            std::thread::sleep(Duration::from_millis(500));
            a.set_ana(AnaState::Optimized);
        });
        let r = run(&set, 1500);
        ev.join().unwrap();
        r
    });
    println!(
        "ANA inaccessible and back: longest I/O {:.1} ms, {:?}",
        events.latency().max() as f64 / 1e6,
        ios(&events)
    );

    // (b) node A is killed with SIGKILL under I/O.
    let killed = std::thread::scope(|s| {
        let ev = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            a.kill();
        });
        let r = run(&set, 1200);
        ev.join().unwrap();
        r
    });
    println!(
        "node A killed: longest I/O {:.1} ms (from the kill to its I/O completed elsewhere), {:?}",
        killed.latency().max() as f64 / 1e6,
        ios(&killed)
    );
    assert_eq!(set.state(0), PathState::Unusable);

    // (c) node A comes back on its address: the path reconnects and rejoins.
    let a = Node::start(&nsa, 1, &file, (1, 99));
    let deadline = Instant::now() + Duration::from_secs(20);
    while set.state(0) != PathState::Optimized {
        assert!(Instant::now() < deadline, "node A's path never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = run(&set, 400);
    assert!(ios(&r)[0] > 0, "node A did not rejoin: {:?}", ios(&r));
    drop(set);
    drop((a, b));
    drop((nsa, nsb));
    let _ = std::fs::remove_file(file);
}
