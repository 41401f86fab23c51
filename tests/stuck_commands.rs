//! A command the target accepted and never answered cannot hide (issue 32): with the
//! namespace's backend stalled by fault injection, a write shows within the bound in
//! the log (once, at warn, with its queue, CID, opcode, state and what it waits for),
//! in `ctl status` and in the metrics; once the backend answers, it completes and
//! leaves the view, and the high-water mark keeps its age.

use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::namespace::NsIo;
use nvmf_target::backend::fault::FaultBackend;
use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use nvmf_target::subsystem::Namespace;
use nvmf_tests::ops_support::{free_port, start_live};
use nvmf_tests::{connect_to, pattern};

const SUB: &str = "nqn.2026-11.io.example:stuck";
/// `transport.stuck_command_ms` of the test target.
const BOUND: Duration = Duration::from_millis(500);
/// The watch sweeps four times a second: a stuck command shows at most this much
/// after it crossed the bound (with room for a loaded machine).
const SWEEP_SLACK: Duration = Duration::from_millis(1500);
const NLB: u32 = 16;

#[test]
fn a_stalled_backend_shows_in_the_log_status_and_metrics_within_the_bound() {
    let logs = nvmf_tests::LogCapture::default();
    let w = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_ansi(false)
        .with_writer(move || w.clone())
        .try_init()
        .unwrap_or_else(|e| panic!("log capture: {e}"));
    let port = free_port();
    let yaml = format!(
        "transport:\n  stuck_command_ms: {}\n\
         ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:16M\" }}\n",
        BOUND.as_millis()
    );
    let t = start_live(&yaml, None);
    let sub = t
        .target
        .subsystem_by_name(SUB)
        .unwrap_or_else(|| panic!("subsystem"));
    let inner = open_backend(
        &NamespaceSpec::Ram { size: 16 << 20 },
        &OpenOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (b, fault) = FaultBackend::wrap(inner);
    sub.remove_namespace(Nsid(1));
    sub.add_namespace(Namespace::new(Nsid(1), b, [1; 16], [2; 16]))
        .unwrap_or_else(|e| panic!("{e}"));

    let nqn = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let mut ctrl = connect_to(&t.fabric(1), &nqn, 1, 32);
    let mut qs = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut qs[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let data = pattern(32, 64, NLB as usize * 512);
    let buf = ctrl
        .alloc(data.len())
        .unwrap_or_else(|e| panic!("alloc: {e}"));
    assert!(buf.write_at(0, &data));

    // The backend stops answering; one write goes in.
    fault.stall(true);
    let sent = Instant::now();
    io.submit_write(7, 64, NLB, &buf, false)
        .unwrap_or_else(|e| panic!("submit: {e}"));
    io.queue().flush().unwrap_or_else(|e| panic!("flush: {e}"));

    // `ctl status` lists it within the bound (plus the sweep's period).
    let stuck = loop {
        let s = t.live.status();
        if let Some(c) = s.commands.stuck.first() {
            break (c.clone(), s);
        }
        assert!(
            sent.elapsed() < BOUND + SWEEP_SLACK,
            "no stuck command after {:?}: {:?}",
            sent.elapsed(),
            s.commands
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (cmd, status) = stuck;
    assert!(
        sent.elapsed() >= BOUND,
        "reported before the bound: {cmd:?}"
    );
    assert_eq!(cmd.qid, 1, "{cmd:?}");
    assert_eq!(cmd.opcode, 0x01, "an NVM Write: {cmd:?}");
    assert_eq!(cmd.nsid, 1, "{cmd:?}");
    assert_eq!(cmd.subsystem, SUB);
    assert_eq!(cmd.state, "executing", "{cmd:?}");
    assert!(cmd.waiting_for.contains("backend"), "{cmd:?}");
    assert!(cmd.age_ms >= BOUND.as_millis() as u64, "{cmd:?}");
    let q = status
        .commands
        .queues
        .iter()
        .find(|q| q.qid == 1)
        .unwrap_or_else(|| panic!("queue 1 not listed: {:?}", status.commands));
    assert_eq!(q.outstanding, 1, "{q:?}");
    assert!(q.oldest_ms >= BOUND.as_millis() as u64, "{q:?}");
    let text = status.to_string();
    eprintln!("ctl status:\n{text}");
    assert!(
        text.contains("stuck command:") && text.contains("waiting for the backend"),
        "{text}"
    );

    // The log said so once, at warn, with the queue, CID and opcode.
    let c = t.tcp.counters();
    assert_eq!(c.stuck_commands, 1, "{c:?}");
    assert!(c.oldest_command_ms >= BOUND.as_millis() as u64, "{c:?}");
    let log = logs.text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stuck command"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    eprintln!("log: {}", lines[0]);
    let want = format!("qid 1 cid {:#06x} opcode 0x01 nsid 1", cmd.cid);
    assert!(
        lines[0].contains("WARN") && lines[0].contains(&want),
        "{}",
        lines[0]
    );

    // The metrics carry it: the gauge of stuck commands, the queue's oldest age,
    // the per-state histogram.
    let m = nvmf_target::metrics::encode::encode(nvmf_target::metrics::snapshot(&t.target))
        .unwrap_or_else(|e| panic!("{e}"));
    let stuck_gauge = m
        .lines()
        .find(|l| l.starts_with("nvmf_stuck_commands_outstanding{"))
        .unwrap_or_else(|| panic!("no stuck gauge:\n{m}"));
    assert!(stuck_gauge.ends_with(" 1"), "{stuck_gauge}");
    let oldest = m
        .lines()
        .find(|l| l.starts_with("nvmf_queue_oldest_command_seconds{") && l.contains("qid=\"1\""))
        .unwrap_or_else(|| panic!("no queue age:\n{m}"));
    let secs: f64 = oldest
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{oldest}"));
    assert!(secs >= BOUND.as_secs_f64(), "{oldest}");
    assert!(
        m.contains("nvmf_command_state_seconds_bucket{") && m.contains("state=\"executing\""),
        "{m}"
    );

    // Still one report a sweep later.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(t.tcp.counters().stuck_commands, 1);
    let again = logs.text();
    assert_eq!(
        again
            .lines()
            .filter(|l| l.contains("stuck command"))
            .count(),
        1
    );

    // The backend answers: the write completes, its data is there, the view empties.
    fault.stall(false);
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.is_empty() {
        assert!(Instant::now() < deadline, "the write never completed");
        io.queue()
            .poll(&mut done)
            .unwrap_or_else(|e| panic!("poll: {e}"));
    }
    assert!(done[0].status.is_success(), "{}", done[0].status);
    let mut back = vec![0u8; data.len()];
    io.read(64, &mut back)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(back == data, "the held write's data");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = t.live.status();
        let c = t.tcp.counters();
        if s.commands.stuck.is_empty() && c.oldest_command_ms < BOUND.as_millis() as u64 {
            assert!(c.longest_command_ms >= BOUND.as_millis() as u64, "{c:?}");
            break;
        }
        assert!(Instant::now() < deadline, "still stuck: {:?}", s.commands);
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(io);
    drop(qs);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
}
