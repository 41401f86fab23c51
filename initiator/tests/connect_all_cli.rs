//! `nvmf-initiator connect-all` end to end (issue 31 item 1): the binary reads a
//! discovery.conf naming two discovery ports of our target (running in this process
//! over NVMe/TCP), connects both subsystems through both ports, and prints them as
//! `nvme list-subsys` would, with their namespaces; an unreachable referral is
//! printed as a problem and fails the run while the subsystems are still listed; a
//! bad line in the file is refused with its line number.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use nvmf_target::config::Config;
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;

const A: &str = "nqn.2024-01.io.nvmf-rs:cli-all-a";
const B: &str = "nqn.2024-01.io.nvmf-rs:cli-all-b";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000d1";
const HOSTID: &str = "00000000-0000-4000-8000-0000000000d1";
/// The exit code of a usage error (a bad discovery.conf).
const EXIT_USAGE: i32 = 2;

/// An ephemeral port on 127.0.0.1 (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A and B exported on two ports; port 2's ANA group 1 is non-optimized; port 1
/// refers to `referral` when given.
fn start(p1: u16, p2: u16, referral: Option<u16>) -> (TcpServer, Arc<Target>) {
    let refs = referral.map_or_else(
        || "[]".to_string(),
        |p| format!("[{{ trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{p}\", portid: 7 }}]"),
    );
    let yaml = format!(
        r#"
ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: "{p1}", subsystems: [{A}, {B}], referrals: {refs} }}
  - portid: 2
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: "{p2}"
    subsystems: [{A}, {B}]
    ana_groups: [{{ grpid: 1, state: non-optimized }}]
subsystems:
  - nqn: {A}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:16M" }}]
  - nqn: {B}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:8M" }}, {{ nsid: 2, device_path: "ram:8M" }}]
"#
    );
    let cfg = Config::from_yaml_str(&yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let server =
        TcpServer::start(target.clone(), &target.ports()).unwrap_or_else(|e| panic!("{e}"));
    (server, target)
}

/// A file in the temp directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, text: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "nvmf-connect-all-cli-{}-{tag}.conf",
            std::process::id()
        ));
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"))
        .arg("connect-all")
        .args(["-q", HOSTNQN, "-I", HOSTID, "--timeout", "5"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn conf_arg(p: &Path) -> String {
    p.display().to_string()
}

/// The lines of one subsystem's block in the listing.
fn block(out: &str, nqn: &str) -> Vec<String> {
    let start = format!("NQN={nqn}");
    out.lines()
        .skip_while(|l| *l != start)
        .take_while(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn connect_all_from_discovery_conf_lists_every_subsystem_path_and_namespace() {
    let (p1, p2) = (free_port(), free_port());
    let _t = start(p1, p2, None);
    let conf = Scratch::new(
        "ok",
        &format!(
            "# discovery controllers of the lab\n\
             --transport=tcp --traddr=127.0.0.1 --trsvcid={p1}\n\
             \n\
             -t tcp -a 127.0.0.1 -s {p2} --persistent\n"
        ),
    );
    let out = run(&["--discovery-conf", &conf_arg(&conf.0)]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    println!("{stdout}");
    assert!(stderr.is_empty(), "{stderr}");
    let a = block(&stdout, A);
    let b = block(&stdout, B);
    let hostline = format!("hostnqn={HOSTNQN}");
    let p1_line = format!(" +- tcp traddr=127.0.0.1,trsvcid={p1} live optimized");
    let p2_line = format!(" +- tcp traddr=127.0.0.1,trsvcid={p2} live non-optimized");
    for blk in [&a, &b] {
        assert!(blk.len() > 5, "{stdout}");
        assert_eq!(blk[1], hostline, "{stdout}");
        assert_eq!(blk[2], "\\");
        assert_eq!(blk[3], p1_line, "{stdout}");
        assert_eq!(blk[4], p2_line, "{stdout}");
        assert!(blk[5].starts_with("NSID"), "{stdout}");
    }
    // A: one 16 MiB namespace; B: two of 8 MiB.
    assert_eq!(a.len(), 7, "{stdout}");
    assert!(a[6].starts_with("1 ") && a[6].contains("16MiB"), "{}", a[6]);
    assert_eq!(b.len(), 8, "{stdout}");
    assert!(b[6].starts_with("1 ") && b[6].contains("8MiB"), "{}", b[6]);
    assert!(b[7].starts_with("2 ") && b[7].contains("8MiB"), "{}", b[7]);
}

#[test]
fn an_unreachable_referral_is_printed_and_fails_the_run_after_the_listing() {
    let (p1, p2, dead) = (free_port(), free_port(), free_port());
    let _t = start(p1, p2, Some(dead));
    let out = run(&["-t", "tcp", "-a", "127.0.0.1", "-s", &p1.to_string()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(
        block(&stdout, A).len(),
        6,
        "one path, one namespace:\n{stdout}"
    );
    assert_eq!(block(&stdout, B).len(), 7, "{stdout}");
    let want = format!(
        "connect-all: discovery controller tcp traddr=127.0.0.1,trsvcid={dead}, referred to by \
         tcp traddr=127.0.0.1,trsvcid={p1}, could not be read:"
    );
    assert!(stderr.contains(&want), "{stderr}");
    assert!(
        stderr.contains("error: 2 subsystem(s) connected, 1 problem(s)"),
        "{stderr}"
    );
}

#[test]
fn json_output_has_the_subsystems_paths_and_namespaces() {
    let (p1, p2) = (free_port(), free_port());
    let _t = start(p1, p2, None);
    let conf = Scratch::new(
        "json",
        &format!("-t tcp -a 127.0.0.1 -s {p1}\n-t tcp -a 127.0.0.1 -s {p2}\n"),
    );
    let out = run(&["--discovery-conf", &conf_arg(&conf.0), "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let subs = v["subsystems"].as_array().cloned().unwrap_or_default();
    assert_eq!(subs.len(), 2, "{v}");
    assert_eq!(subs[0]["subnqn"], A);
    assert_eq!(subs[0]["paths"][1]["ana_state"], "non-optimized");
    assert_eq!(subs[0]["paths"][1]["state"], "live");
    assert_eq!(subs[1]["namespaces"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["problems"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_bad_discovery_conf_line_is_refused_with_its_number() {
    let conf = Scratch::new(
        "bad",
        "# ok so far\n-t tcp -a 127.0.0.1\n-t tcp -a 127.0.0.2 --bogus 1\n",
    );
    let out = run(&["--discovery-conf", &conf_arg(&conf.0)]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{stderr}");
    let want = format!("{}:3: unknown option --bogus", conf.0.display());
    assert!(stderr.contains(&want), "{stderr}");
    assert!(out.stdout.is_empty());
    // No file and no -t/-a: nvme-cli's complaint.
    let out = run(&["--discovery-conf", "/nonexistent/discovery.conf"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{stderr}");
    assert!(
        stderr.contains("no /nonexistent/discovery.conf"),
        "{stderr}"
    );
}
