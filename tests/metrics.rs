//! The metrics endpoint and `ctl top`'s data: a target with metrics on an ephemeral
//! port, known I/O from two of our hosts, a scrape parsed by Python's
//! `prometheus_client` (both its OpenMetrics and its Prometheus text parser), and the
//! counts compared with what the hosts did.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::transport::DataDir;
use nvmf_target::live::ctl::{self, CtlServer};
use nvmf_target::metrics::http::MetricsServer;
use nvmf_tests::ops_support::{connect_as, free_port, host, start_live, tmp_path};
use nvmf_tests::write_read_verify;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:metrics";
/// Host 1's known I/O: this many 4 KiB writes, then as many reads, 8 in flight.
const IOS: usize = 96;
const BS: usize = 4096;
/// Blocks of the namespace (512 B): host 2 reads just past the end.
const NS_BLOCKS: u64 = (16 << 20) / 512;
/// LBA Out of Range (generic status 0x80).
const LBA_OUT_OF_RANGE: &str = "0x80";

/// Every sample of the scrape as Python's parsers see it: one JSON line per sample,
/// `[parser, name, labels, value]`.
const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as prom
text = sys.stdin.read()
for parser, f in (("openmetrics", om), ("prometheus", prom)):
    for fam in f(text):
        for s in fam.samples:
            print(json.dumps([parser, s.name, s.labels, s.value]))
"#;

fn scrape(addr: SocketAddr) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("{e}"));
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap_or_else(|e| panic!("send: {e}"));
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .unwrap_or_else(|e| panic!("read: {e}"));
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {resp:?}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    (head.to_string(), body.to_string())
}

struct Sample {
    parser: String,
    name: String,
    labels: serde_json::Map<String, serde_json::Value>,
    value: f64,
}

fn parse_with_python(text: &str) -> Vec<Sample> {
    let mut child = Command::new("python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 (scripts/setup installs it): {e}"));
    child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("stdin"))
        .write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "the parsers refused the scrape: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            Sample {
                parser: v[0].as_str().unwrap_or_default().to_string(),
                name: v[1].as_str().unwrap_or_default().to_string(),
                labels: v[2].as_object().cloned().unwrap_or_default(),
                value: v[3].as_f64().unwrap_or(f64::NAN),
            }
        })
        .collect()
}

/// The value of the one sample of `parser` named `name` whose labels include `want`.
fn value(samples: &[Sample], parser: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    let hits: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.parser == parser && s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).and_then(|x| x.as_str()) == Some(*v))
        })
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{parser} {name} {want:?}: {} samples",
        hits.len()
    );
    hits[0].value
}

#[test]
fn scrape_counts_what_the_hosts_did() {
    let port = free_port();
    let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:16M\" }}\n"
    );
    let t = start_live(&yaml, None);
    let metrics = MetricsServer::start(
        t.target.clone(),
        "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("metrics: {e}"));
    let sock = tmp_path("metrics.sock");
    let _ctl = CtlServer::start(t.live.clone(), &sock).unwrap_or_else(|e| panic!("ctl: {e}"));
    let before = ctl::request(&sock, &ctl::Request::Metrics)
        .ok()
        .and_then(|r| r.metrics)
        .unwrap_or_else(|| panic!("no metrics from the admin socket"));

    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let fabric = t.fabric(1);
    // Host 1: IOS writes and IOS reads of BS bytes, verified.
    let mut h1 = connect_as(&fabric, 1, &sub, 1, 0).unwrap_or_else(|e| panic!("host 1: {e}"));
    write_read_verify(&mut h1, BS, 8, IOS);
    // Host 2: one read past the end of the namespace (LBA Out of Range).
    let mut h2 = connect_as(&fabric, 2, &sub, 1, 0).unwrap_or_else(|e| panic!("host 2: {e}"));
    // Host 2 keeps its I/O queue until the scrape (host 1's ended with its run).
    let mut h2_queues = h2.take_io_queues();
    {
        // Raw, so the host's own range check does not stop it first.
        let q = &mut h2_queues[0];
        let buf = h2.alloc(512).unwrap_or_else(|e| panic!("{e}"));
        let sqe = nvmf_initiator::command::read(Nsid(1), NS_BLOCKS, 1, false)
            .unwrap_or_else(|e| panic!("{e}"));
        q.submit(sqe, Some(&buf), DataDir::FromCtrl, 7)
            .unwrap_or_else(|e| panic!("submit: {e}"));
        q.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        let mut done = Vec::new();
        while done.is_empty() {
            q.poll(&mut done).unwrap_or_else(|e| panic!("poll: {e}"));
        }
        assert!(!done[0].status.is_success(), "read past the end succeeded");
    }
    // Host 1's I/O queue closed when its run ended: wait until the target saw it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h1_io_queues(&t.target) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "host 1's I/O queue never closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let (head, text) = scrape(metrics.local_addr());
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let samples = parse_with_python(&text);
    let h1n = host(1).0.to_string();
    let h2n = host(2).0.to_string();
    for parser in ["openmetrics", "prometheus"] {
        let io = |name: &str, h: &str, op: &str| {
            value(
                &samples,
                parser,
                name,
                &[
                    ("subsystem", SUB),
                    ("nsid", "1"),
                    ("host", h),
                    ("port", "1"),
                    ("opcode", op),
                ],
            )
        };
        assert_eq!(
            io("nvmf_commands_total", &h1n, "write"),
            IOS as f64,
            "{parser}"
        );
        assert_eq!(
            io("nvmf_commands_total", &h1n, "read"),
            IOS as f64,
            "{parser}"
        );
        assert_eq!(
            io("nvmf_data_bytes_total", &h1n, "write"),
            (IOS * BS) as f64,
            "{parser}"
        );
        assert_eq!(
            io("nvmf_data_bytes_total", &h1n, "read"),
            (IOS * BS) as f64,
            "{parser}"
        );
        assert_eq!(io("nvmf_commands_total", &h2n, "read"), 1.0, "{parser}");
        assert_eq!(io("nvmf_data_bytes_total", &h2n, "read"), 0.0, "{parser}");
        let err = value(
            &samples,
            parser,
            "nvmf_errors_total",
            &[
                ("host", &h2n),
                ("nsid", "1"),
                ("sct", "generic"),
                ("sc", LBA_OUT_OF_RANGE),
            ],
        );
        assert_eq!(err, 1.0, "{parser}");
        assert!(
            !samples.iter().any(|s| s.parser == parser
                && s.name == "nvmf_errors_total"
                && s.labels.get("host").and_then(|h| h.as_str()) == Some(&h1n)),
            "host 1 had no errors"
        );
        // Histograms: the +Inf bucket and the count are every read (write) of host 1.
        for (hist, n) in [
            ("nvmf_read_latency_seconds", IOS),
            ("nvmf_write_latency_seconds", IOS),
        ] {
            let lab = [("host", h1n.as_str()), ("nsid", "1")];
            assert_eq!(
                value(&samples, parser, &format!("{hist}_count"), &lab),
                n as f64
            );
            let mut inf = lab.to_vec();
            inf.push(("le", "+Inf"));
            assert_eq!(
                value(&samples, parser, &format!("{hist}_bucket"), &inf),
                n as f64
            );
            assert!(value(&samples, parser, &format!("{hist}_sum"), &lab) > 0.0);
        }
        for (h, ioqs) in [(&h1n, 0.0), (&h2n, 1.0)] {
            let lab = [("subsystem", SUB), ("host", h.as_str()), ("port", "1")];
            assert_eq!(
                value(&samples, parser, "nvmf_connections", &lab),
                1.0,
                "{parser} {h}"
            );
            assert_eq!(
                value(&samples, parser, "nvmf_io_queues", &lab),
                ioqs,
                "{parser} {h}"
            );
        }
        let busy: f64 = samples
            .iter()
            .filter(|s| s.parser == parser && s.name == "nvmf_poll_group_busy_seconds_total")
            .map(|s| s.value)
            .sum();
        assert!(busy > 0.0, "{parser}: poll groups were busy");
    }

    // `ctl top`'s data: the same counts through the admin socket, and a rendered view.
    let after = ctl::request(&sock, &ctl::Request::Metrics)
        .ok()
        .and_then(|r| r.metrics)
        .unwrap_or_else(|| panic!("no metrics from the admin socket"));
    let screen = nvmf_target::live::top::render(&before, &after);
    for want in [
        "POLL GROUP",
        "SUBSYSTEM",
        "NAMESPACE",
        "HOST",
        SUB,
        "r_await",
        "aqu-sz",
    ] {
        assert!(screen.contains(want), "{want} missing from:\n{screen}");
    }
    let ns_row = screen
        .lines()
        .skip_while(|l| !l.starts_with("NAMESPACE"))
        .nth(1)
        .unwrap_or_else(|| panic!("no namespace row:\n{screen}"));
    assert!(ns_row.starts_with(SUB), "{ns_row}");
    drop(h2_queues);
    drop(h1);
    drop(h2);
}

/// I/O queues of host 1's live controllers, as the target counts them.
fn h1_io_queues(target: &nvmf_target::target::Target) -> usize {
    let h1 = host(1).0.to_string();
    nvmf_target::metrics::snapshot(target)
        .controllers
        .iter()
        .filter(|c| c.host == h1)
        .map(|c| c.io_queues)
        .sum()
}

#[test]
fn only_get_metrics_is_served() {
    let port = free_port();
    let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n"
    );
    let t = start_live(&yaml, None);
    let m = MetricsServer::start(
        t.target.clone(),
        "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("metrics: {e}"));
    let ask = |req: &str| {
        let mut s = TcpStream::connect(m.local_addr()).unwrap_or_else(|e| panic!("{e}"));
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap_or_else(|e| panic!("{e}"));
        s.write_all(req.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(
        ask("GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 404")
    );
    assert!(ask(
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .starts_with("HTTP/1.1 405"));
    assert!(ask("garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    // Still serving after the bad ones.
    let (_, text) = scrape(m.local_addr());
    assert!(text.contains("# TYPE nvmf_commands counter"));
}

/// Waits until `target`'s snapshot counts `event` for `host` (returns the count).
fn wait_event(
    target: &nvmf_target::target::Target,
    event: nvmf_target::metrics::Event,
    host: &str,
) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n: u64 = nvmf_target::metrics::snapshot(target)
            .events
            .iter()
            .filter(|(k, _)| k.event == event && k.host == host)
            .map(|(_, n)| n)
            .sum();
        if n > 0 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn keep_alive_expiry_is_counted() {
    use nvmf_common::types::{Cntlid, Qid};
    use nvmf_initiator::command;
    use nvmf_tests::{config, exec, hostnqn, raw_queue, start, TEST_HOSTID};
    const KATO_MS: u32 = 300;
    let env = start(&config(&["ram:16M"]));
    let mut q = raw_queue(&env, 0, 32);
    let buf = env.fabric.alloc(1024).unwrap_or_else(|e| panic!("{e}"));
    buf.write_at(
        0,
        &command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, &env.nqn, &hostnqn()),
    );
    let c = exec(
        &mut q,
        command::connect(Qid(0), 31, KATO_MS),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(c.status.is_success(), "connect: {}", c.status);
    // Silence past KATO: the target ends the association and counts it once.
    let n = wait_event(
        &env.target.target,
        nvmf_target::metrics::Event::KeepAliveExpired,
        &hostnqn().to_string(),
    );
    assert_eq!(n, 1);
    drop(q);
}

#[test]
fn authentication_failure_is_counted() {
    use nvmf_common::auth::{DhchapSecret, HashId, HostKeys};
    use std::os::unix::fs::PermissionsExt;
    let key = |n| DhchapSecret::generate(Some(HashId::Sha256), n).unwrap_or_else(|e| panic!("{e}"));
    let (right, wrong) = (key(32), key(32));
    let file = tmp_path("metrics-auth.key");
    std::fs::write(&file, right.to_interchange().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{e}"));
    let (h, _) = host(1);
    let port = free_port();
    let t = start_live(
        &format!(
            "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
             subsystems:\n  - nqn: {SUB}\n    allowed_hosts: [\"{h}\"]\n\
             hosts:\n  - nqn: \"{h}\"\n    dhchap_key_file: {}\n",
            file.display()
        ),
        None,
    );
    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let mut o = nvmf_tests::ops_support::options_as(1, &sub, 1, 5000);
    o.dhchap = Some(HostKeys {
        host_key: wrong,
        ctrl_key: None,
    });
    assert!(nvmf_initiator::controller::Controller::connect(t.fabric(1), o).is_err());
    let n = wait_event(
        &t.target,
        nvmf_target::metrics::Event::AuthFailed,
        &h.to_string(),
    );
    assert_eq!(n, 1);
    let _ = std::fs::remove_file(file);
}
