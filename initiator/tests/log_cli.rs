//! nvme-cli's `smart-log`, `error-log`, `fw-log`, `changed-ns-list-log`, `effects-log`,
//! `ns-descs` and `compare` (issue 16, deliverable 3) end to end: the `nvmf-initiator`
//! binary against our target over NVMe/TCP on 127.0.0.1, plain and `-o json`.
//!
//! The target runs in this process (a RAM namespace that keeps its data between the
//! host's invocations) on an ephemeral port.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use nvmf_target::config::Config;
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:log-cli";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000d1";
const HOSTID: &str = "00000000-0000-4000-8000-0000000000d1";
/// The target's firmware revision: its crate version (the workspace's).
const FW_REVISION: &str = env!("CARGO_PKG_VERSION");

struct Node {
    server: Option<TcpServer>,
    _target: Arc<Target>,
    port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

fn start() -> Node {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, adrfam: ipv4, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{NQN}] }}\n\
         subsystems:\n  - nqn: {NQN}\n    allow_any_host: true\n    namespaces: [{{ nsid: 1, device_path: \"ram:16M\" }}]\n"
    );
    let cfg = Config::from_yaml_str(&yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let server =
        TcpServer::start(target.clone(), &target.ports()).unwrap_or_else(|e| panic!("{e}"));
    Node {
        server: Some(server),
        _target: target,
        port,
    }
}

/// `nvmf-initiator SUB -t tcp -a 127.0.0.1 -s PORT -n NQN ARGS` with a fixed identity.
fn run(node: &Node, sub: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"))
        .args([sub, "-t", "tcp", "-a", "127.0.0.1", "-s"])
        .arg(node.port.to_string())
        .args(["-n", NQN, "-q", HOSTNQN, "-I", HOSTID, "--timeout", "10"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Stdout of a run that must succeed.
fn ok(node: &Node, sub: &str, args: &[&str]) -> String {
    let out = run(node, sub, args);
    assert!(
        out.status.success(),
        "{sub} {args:?} failed: {}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(node: &Node, sub: &str, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend_from_slice(&["-o", "json"]);
    let s = ok(node, sub, &a);
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{sub}: not JSON ({e}):\n{s}"))
}

#[test]
fn log_pages_plain_and_json() {
    let node = start();

    let s = ok(&node, "smart-log", &[]);
    assert!(
        s.starts_with(&format!(
            "Smart Log for NVME device:{NQN} namespace-id:ffffffff\n"
        )),
        "{s}"
    );
    assert!(
        s.contains("temperature\t\t\t\t: 27 °C (300 K, 80 °F)\n"),
        "{s}"
    );
    assert!(s.contains("available_spare\t\t\t\t: 100%\n"), "{s}");
    let j = json(&node, "smart-log", &["-H"]);
    assert_eq!(j["avail_spare"], 100, "{j}");
    assert_eq!(j["temperature"], 300, "{j}");
    assert_eq!(j["critical_warning"]["value"], 0, "{j}");

    let s = ok(&node, "error-log", &["-e", "2"]);
    assert!(
        s.starts_with(&format!(
            "Error Log Entries for device:{NQN} entries:2\n.................\n Entry[ 0]\n"
        )),
        "{s}"
    );
    assert_eq!(s.matches("error_count\t: 0\n").count(), 2, "{s}");
    let j = json(&node, "error-log", &[]);
    assert_eq!(
        j["errors"].as_array().map(Vec::len),
        Some(64),
        "ELPE + 1 entries"
    );

    let s = ok(&node, "fw-log", &[]);
    assert!(
        s.starts_with(&format!(
            "Firmware Log for device:{NQN}\nafi  : 0x1\nfrs1 : 0x"
        )),
        "{s}"
    );
    assert!(s.contains(&format!("({FW_REVISION}")), "{s}");
    let j = json(&node, "fw-log", &[]);
    assert_eq!(j[NQN]["Active Firmware Slot (afi)"], 1, "{j}");
    assert!(j[NQN]["Firmware Rev Slot 1"].is_string(), "{j}");

    assert_eq!(ok(&node, "changed-ns-list-log", &[]), "no ns changed\n");
    let j = json(&node, "changed-ns-list-log", &[]);
    assert_eq!(j["Changed Attached Namespace List Log"], NQN, "{j}");

    let s = ok(&node, "effects-log", &[]);
    assert!(s.starts_with("NVM Command Set Log Page\n"), "{s}");
    assert!(
        s.contains("IOCS5    [Compare                         ] 00100001\n"),
        "{s}"
    );
    assert!(
        s.contains("ACS6     [Identify                        ] 00300001\n"),
        "{s}"
    );
    // Copy changes logical block content (LBCC); scopes: namespace, and for Identify
    // controller and namespace.
    assert!(
        s.contains("IOCS25   [Copy                            ] 00100003\n"),
        "{s}"
    );
    let j = json(&node, "effects-log", &[]);
    assert_eq!(j[0]["command_set_identifier"], 0, "{j}");
    // CSUPP | LBCC with namespace scope (bit 20).
    assert_eq!(j[0]["io_cmd_set"]["IOCS_1 (Write)"], 0x0010_0003, "{j}");

    // The raw page is the page.
    let out = run(&node, "smart-log", &["-b"]);
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 512);
}

#[test]
fn ns_descs_plain_and_json() {
    let node = start();
    let s = ok(&node, "ns-descs", &["--nsid", "1"]);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"NVME Namespace Identification Descriptors NS 1:")
    );
    let uuid = lines
        .iter()
        .find_map(|l| l.strip_prefix("uuid    : "))
        .unwrap_or_else(|| panic!("no uuid line:\n{s}"));
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{uuid}");
    assert!(lines.iter().any(|l| l.starts_with("nguid   : ")), "{s}");
    assert!(lines.contains(&"csi     : 0"), "{s}");
    let j = json(&node, "ns-descs", &[]);
    let descs = j["ns-descs"]
        .as_array()
        .unwrap_or_else(|| panic!("no ns-descs: {j}"));
    let u = descs
        .iter()
        .find(|d| d["Type"] == "uuid")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(u["uuid"], uuid, "the same namespace UUID both ways");
    assert_eq!((u["loc"].as_u64(), u["nidl"].as_u64()), (Some(0), Some(16)));
    // A namespace that does not exist: the target's status, exit code 1.
    let out = run(&node, "ns-descs", &["--nsid", "9"]);
    assert_eq!(out.status.code(), Some(1));
}

/// A scratch file removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, data: &[u8]) -> Scratch {
        let p = std::env::temp_dir().join(format!("nvmf-log-cli-{}-{tag}.bin", std::process::id()));
        std::fs::write(&p, data).unwrap_or_else(|e| panic!("{e}"));
        Scratch(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap_or_else(|| panic!("path"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn compare_matches_and_reports_a_miscompare() {
    let node = start();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let good = Scratch::new("good", &data);
    ok(&node, "write", &["--lba", "8", "--input", good.path()]);

    // Block 8 on holds the file (then zeros, as the padded expected data): a match.
    let out = run(
        &node,
        "compare",
        &["--start-block", "8", "-c", "7", "-d", good.path()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{err}", out.status);
    assert_eq!(err.trim(), "compare: Success");
    // The same from the size alone.
    let out = run(
        &node,
        "compare",
        &["--start-block", "8", "-z", "4096", "-d", good.path()],
    );
    assert!(out.status.success());

    // One byte different in the last block: Compare Failure, exit code 1.
    let mut other = data.clone();
    other[4000] ^= 0xFF;
    let bad = Scratch::new("bad", &other);
    let out = run(
        &node,
        "compare",
        &["--start-block", "8", "-c", "7", "-d", bad.path()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Compare Failure"), "{err}");
    assert!(!err.contains("compare: Success"), "{err}");
}
