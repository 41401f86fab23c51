//! Our host's view of commands the target never answers (issue 32): behind a proxy
//! that drops everything our target sends on the I/O queue after the Connect response,
//! the host lists each outstanding command with its queue, command id, opcode, age and
//! where it is, and logs a `stuck command` warning for each once it passes the stuck
//! bound, well before the command timeout ends it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Cid, Nsid, Qid};
use nvmf_initiator::command;
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::queue::{CommandPhase, Completion};
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::{DataDir, Fabric};
use nvmf_tests::proxy::{Faults, Plan, Proxy};
use nvmf_tests::{config, pattern};
use tracing_subscriber::util::SubscriberInitExt as _;

/// The ICResp and the Connect response (a CapsuleResp without digests): what the
/// proxy lets through on the I/O queue's connection.
const ICRESP_LEN: u64 = 128;
const CAPSULE_RESP_LEN: u64 = 24;
/// The I/O queue is the second connection (the admin queue is the first).
const IO_QUEUE_CONNECTION: usize = 1;
const STUCK_WARN: Duration = Duration::from_millis(300);
const TIMEOUT: Duration = Duration::from_secs(3);
/// How often the test runs the host's timeout scan, as an I/O loop's housekeeping does.
const SCAN_EVERY: Duration = Duration::from_millis(20);
const BLOCK: usize = 512;

/// The host's I/O loop: poll, and run the timeout scan now and then (as an I/O loop's
/// housekeeping does), until `until`.
fn run_until(q: &mut nvmf_initiator::Queue, out: &mut Vec<Completion>, until: Instant) {
    while Instant::now() < until {
        q.poll(out).unwrap_or_else(|e| panic!("{e}"));
        q.expire(Instant::now());
        q.wait(SCAN_EVERY);
    }
}

#[test]
fn commands_the_target_never_answers_are_listed_and_reported_before_the_timeout() {
    let env = nvmf_tests::start_tcp(&config(&["ram:16M"]), TcpOptions::default());
    let proxy = Proxy::start(
        env.addr,
        Plan {
            to_host: Faults {
                truncate_at: Some(ICRESP_LEN + CAPSULE_RESP_LEN),
                ..Faults::default()
            },
            only: Some(IO_QUEUE_CONNECTION),
            ..Plan::default()
        },
    );
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(proxy.addr(), TcpOptions::default()));
    let mut o = ConnectOptions::new(
        env.nqn.clone(),
        nvmf_tests::hostnqn(),
        nvmf_tests::TEST_HOSTID,
    );
    o.nr_io_queues = 1;
    o.queue_size = 32;
    o.command_timeout = TIMEOUT;
    o.stuck_command_warn = STUCK_WARN;
    let mut ctrl = Controller::connect(fabric.clone(), o).unwrap_or_else(|e| panic!("{e}"));
    let icd = ctrl.id_ctrl().in_capsule_data as usize;
    let mut q = ctrl.take_io_queues().remove(0);
    assert_eq!(q.stuck_warn(), Some(STUCK_WARN));

    // A write whose data goes in the capsule (executed; only its response is lost), a
    // write that needs an R2T and a read that needs C2HData (neither ever arrives).
    let small = BLOCK.max(icd.min(4096) / BLOCK * BLOCK);
    let big = 64 * 1024;
    let buf = |len: usize, seed: u64| {
        let b = fabric.alloc(len).unwrap_or_else(|e| panic!("{e}"));
        assert!(b.write_at(0, &pattern(seed, 0, len)));
        b
    };
    let (b0, b1, b2) = (buf(small, 1), buf(big, 2), buf(4096, 3));
    let nlb = |len: usize| (len / BLOCK) as u32;
    let cmds = [
        (
            command::write(Nsid(1), 0, nlb(small), false),
            &b0,
            DataDir::ToCtrl,
        ),
        (
            command::write(Nsid(1), 64, nlb(big), false),
            &b1,
            DataDir::ToCtrl,
        ),
        (
            command::read(Nsid(1), 512, nlb(4096), false),
            &b2,
            DataDir::FromCtrl,
        ),
    ];
    let log = nvmf_tests::LogCapture::default();
    let sink = log.clone();
    let _guard = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish()
        .set_default();
    let t0 = Instant::now();
    for (tag, (sqe, b, dir)) in cmds.into_iter().enumerate() {
        let sqe = sqe.unwrap_or_else(|e| panic!("{e}"));
        q.submit(sqe, Some(b), dir, tag as u64)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    q.flush().unwrap_or_else(|e| panic!("{e}"));

    let mut out: Vec<Completion> = Vec::new();
    run_until(&mut q, &mut out, t0 + STUCK_WARN * 2);
    assert!(
        out.is_empty(),
        "the target's answers never get through: {out:?}"
    );

    // Listed with their age and where they are; the timeout has not fired.
    let now = Instant::now();
    let stuck = q.outstanding_commands(now, STUCK_WARN);
    let seen: Vec<(Cid, u8, CommandPhase)> =
        stuck.iter().map(|c| (c.cid, c.opcode, c.phase)).collect();
    let (write, read) = (0x01, 0x02);
    let mut want = vec![
        (Cid(0), write, CommandPhase::AwaitingResponse),
        (Cid(1), write, CommandPhase::Sent),
        (Cid(2), read, CommandPhase::Sent),
    ];
    if small > icd {
        // No in-capsule data on this target: the small write waits for an R2T too.
        want[0].2 = CommandPhase::Sent;
    }
    assert_eq!(seen, want, "{stuck:?}");
    for c in &stuck {
        assert_eq!(c.qid, Qid(1));
        assert!(c.age >= STUCK_WARN && c.age < TIMEOUT, "{c}");
        assert!(c.warned, "{c}");
    }
    assert!(q.oldest_age(now).is_some_and(|a| a >= STUCK_WARN * 2));
    assert_eq!((q.timed_out(), q.is_broken()), (0, false));
    let text = log.text();
    for (cid, name, phase) in [
        (0, "Write", want[0].2),
        (1, "Write", CommandPhase::Sent),
        (2, "Read", CommandPhase::Sent),
    ] {
        let line = text
            .lines()
            .find(|l| l.contains("stuck command") && l.contains(&format!(" cid={cid} ")))
            .unwrap_or_else(|| panic!("no warning for cid {cid}: {text}"));
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains("qid=1"), "{line}");
        assert!(line.contains(&format!("command=\"{name}\"")), "{line}");
        assert!(line.contains(&format!("phase={phase}")), "{line}");
    }
    assert_eq!(
        text.matches("stuck command:").count(),
        3,
        "one warning per command: {text}"
    );
    assert_eq!(q.command_ages().stuck, 3);

    // Then the command timeout ends them, after the warnings.
    run_until(&mut q, &mut out, t0 + TIMEOUT + Duration::from_millis(500));
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out.iter().all(Completion::is_host_timeout));
    let text = log.text();
    let warned_at = text.find("stuck command:").unwrap_or(usize::MAX);
    let timed_out_at = text.find("command timed out").unwrap_or(0);
    assert!(warned_at < timed_out_at, "{text}");
    assert_eq!(text.matches("stuck command:").count(), 3, "{text}");
    drop(q);
    drop(ctrl);
    drop(proxy);
}
