//! Failover in our host (issue 14): two target "nodes" (two in-process targets, each
//! with its own NVMe/TCP port and controller id range) serve one file as one
//! subsystem; `perf --verify` runs through a session that knows both paths while the
//! first node's ANA group turns inaccessible, and again while the first node goes
//! away altogether: no I/O error, every block verifies, and the session ends up on
//! the second path.
//!
//! Then several paths at once ([`PathSet`], `perf --iopolicy`): round-robin and
//! queue-depth spread the commands over both nodes; a non-optimized path carries nothing
//! while an optimized one is up; a path whose group turns inaccessible, or whose node is
//! killed, hands its commands to the other without an error, and rejoins once optimized
//! again or restarted.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::multipath::{IoPolicy, PathSet};
use nvmf_initiator::perf::{self, parse::Rw, PerfOptions, PerfTarget};
use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy, Session};
use nvmf_initiator::requeue::{Requeue, SharedSession};
use nvmf_target::config::AnaState;
use nvmf_target::live::ctl::{handle, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{free_port, options_as, start_live, LiveTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:multipath";

fn node(file: &std::path::Path, cntlid_min: u16, cntlid_max: u16) -> LiveTarget {
    node_on(file, cntlid_min, cntlid_max, free_port())
}

fn node_on(file: &std::path::Path, cntlid_min: u16, cntlid_max: u16, port: u16) -> LiveTarget {
    start_live(
        &format!(
            "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{SUB}] }}\n\
             subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    cntlid_min: {cntlid_min}\n    cntlid_max: {cntlid_max}\n    \
             namespaces:\n      - {{ nsid: 1, device_path: {}, buffered_io: true }}\n",
            file.display()
        ),
        None,
    )
}

fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        reconnect_delay: Duration::from_millis(100),
        ctrl_loss_tmo: Some(Duration::from_secs(10)),
        retry: RetryPolicy::Retry,
    }
}

/// Runs a verifying perf job over both paths while `event` happens after 300 ms;
/// returns the path the session ends on.
fn verify_through(a: &LiveTarget, b: &LiveTarget, event: impl FnOnce() + Send + 'static) -> usize {
    let mut o = options_as(1, &Nqn::new(SUB).unwrap(), 1, 5000);
    o.command_timeout = Duration::from_secs(3);
    let session = Session::connect(a.fabric(1), o, policy())
        .unwrap()
        .with_paths(vec![b.fabric(1)]);
    let mut session = session;
    let target = PerfTarget::from_controller(session.controller().unwrap(), Nsid(1)).unwrap();
    let (shared, mut queues) = SharedSession::new(session).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        event();
    });
    let opts = PerfOptions {
        rw: Rw::RandWrite,
        iodepth: 8,
        runtime: Some(Duration::from_millis(1500)),
        size: Some(4 << 20),
        verify: true,
        ..Default::default()
    };
    let r =
        perf::run_recovering(&target, &mut queues, &opts, Some(&shared as &dyn Requeue)).unwrap();
    t.join().unwrap();
    drop(queues);
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.verify.blocks_checked > 0 && r.verify.failure_count == 0);
    assert!(shared.reconnects() >= 1, "no failover happened");
    let s = shared.into_session().unwrap_or_else(|e| panic!("{e}"));
    let path = s.current_path();
    let _ = s.shutdown();
    path
}

fn shared_file(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nvmf-mp-{}-{name}.img", std::process::id()));
    std::fs::write(&p, vec![0u8; 8 << 20]).unwrap();
    p
}

#[test]
fn perf_verify_keeps_running_when_a_path_turns_inaccessible() {
    let f = shared_file("ana");
    let (a, b) = (node(&f, 1, 99), node(&f, 100, 199));
    let live = a.live.clone();
    let path = verify_through(&a, &b, move || {
        let r = handle(
            &live,
            &Request::Change(Op::SetAna {
                portid: 1,
                grpid: 1,
                state: AnaState::Inaccessible,
            }),
        );
        assert!(r.ok, "{:?}", r.error);
    });
    assert_eq!(path, 1, "the session moved to the second node");
    let _ = std::fs::remove_file(f);
}

#[test]
fn perf_verify_keeps_running_when_a_node_goes_away() {
    let f = shared_file("node");
    let (a, b) = (node(&f, 1, 99), node(&f, 100, 199));
    let a = Arc::new(a);
    let a2 = a.clone();
    let path = verify_through(&a, &b, move || {
        // The node stops serving: its listener and every connection close.
        a2.tcp.shutdown();
    });
    assert_eq!(path, 1, "the session moved to the second node");
    let _ = std::fs::remove_file(f);
}

fn set_ana(t: &LiveTarget, state: AnaState) {
    let r = handle(
        &t.live,
        &Request::Change(Op::SetAna {
            portid: 1,
            grpid: 1,
            state,
        }),
    );
    assert!(r.ok, "{:?}", r.error);
}

/// Both nodes as two paths of one set, `workers` threads.
fn path_set(a: &LiveTarget, b: &LiveTarget, workers: u16) -> Arc<PathSet> {
    let mut o = options_as(1, &Nqn::new(SUB).unwrap(), workers, 5000);
    o.command_timeout = Duration::from_secs(3);
    PathSet::connect(
        vec![("a".into(), a.fabric(1)), ("b".into(), b.fabric(1))],
        o,
        policy(),
        Nsid(1),
        usize::from(workers),
    )
    .unwrap()
}

/// A verifying random-write run over `set`; returns the commands each path carried.
fn spread(set: &Arc<PathSet>, iopolicy: IoPolicy, numjobs: u32, ms: u64) -> Vec<u64> {
    let opts = PerfOptions {
        rw: Rw::RandWrite,
        iodepth: 8,
        numjobs,
        runtime: Some(Duration::from_millis(ms)),
        size: Some(4 << 20),
        verify: true,
        ..Default::default()
    };
    let r = perf::run_paths(set, iopolicy, &opts).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.verify.blocks_checked > 0 && r.verify.failure_count == 0);
    let paths = r.path_ios();
    assert_eq!(paths.len(), 2);
    let sum: u64 = paths.iter().map(|p| p.ios).sum();
    assert!(sum >= r.total_ios(), "{paths:?} vs {} ios", r.total_ios());
    paths.iter().map(|p| p.ios).collect()
}

/// Waits until the set sees `state` on path `i` (the ANA poller reads every 250 ms).
fn wait_state(set: &PathSet, i: usize, state: nvmf_initiator::multipath::PathState) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while set.state(i) != state {
        assert!(
            std::time::Instant::now() < deadline,
            "path {i} never became {state:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn round_robin_and_queue_depth_use_both_paths() {
    let f = shared_file("spread");
    let (a, b) = (node(&f, 1, 99), node(&f, 100, 199));
    let set = path_set(&a, &b, 2);
    for p in [IoPolicy::RoundRobin, IoPolicy::QueueDepth] {
        let ios = spread(&set, p, 2, 600);
        assert!(ios.iter().all(|&n| n > 0), "{p}: {ios:?}");
    }
    // numa: the first optimized path only.
    let ios = spread(&set, IoPolicy::Numa, 1, 400);
    assert!(ios[0] > 0 && ios[1] == 0, "numa: {ios:?}");
    drop(set);
    let _ = std::fs::remove_file(f);
}

#[test]
fn non_optimized_path_is_used_only_without_an_optimized_one() {
    use nvmf_initiator::multipath::PathState;
    let f = shared_file("nonopt");
    let (a, b) = (node(&f, 1, 99), node(&f, 100, 199));
    set_ana(&a, AnaState::NonOptimized);
    let set = path_set(&a, &b, 1);
    wait_state(&set, 0, PathState::NonOptimized);
    let ios = spread(&set, IoPolicy::RoundRobin, 1, 400);
    assert!(ios[0] == 0 && ios[1] > 0, "{ios:?}");
    set_ana(&b, AnaState::Inaccessible);
    wait_state(&set, 1, PathState::Unusable);
    let ios = spread(&set, IoPolicy::RoundRobin, 1, 400);
    assert!(
        ios[0] > 0 && ios[1] == 0,
        "the non-optimized path, the only one left: {ios:?}"
    );
    drop(set);
    let _ = std::fs::remove_file(f);
}

#[test]
fn inaccessible_path_hands_over_and_rejoins_when_optimized() {
    use nvmf_initiator::multipath::PathState;
    let f = shared_file("rejoin-ana");
    let (a, b) = (node(&f, 1, 99), node(&f, 100, 199));
    let set = path_set(&a, &b, 1);
    let live = a.live.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let r = handle(
            &live,
            &Request::Change(Op::SetAna {
                portid: 1,
                grpid: 1,
                state: AnaState::Inaccessible,
            }),
        );
        assert!(r.ok, "{:?}", r.error);
    });
    // No error although path a refuses I/O part way through.
    spread(&set, IoPolicy::RoundRobin, 1, 1200);
    t.join().unwrap();
    wait_state(&set, 0, PathState::Unusable);
    let ios = spread(&set, IoPolicy::RoundRobin, 1, 300);
    assert!(ios[0] == 0 && ios[1] > 0, "inaccessible path used: {ios:?}");
    set_ana(&a, AnaState::Optimized);
    wait_state(&set, 0, PathState::Optimized);
    let ios = spread(&set, IoPolicy::RoundRobin, 1, 300);
    assert!(ios[0] > 0 && ios[1] > 0, "path a did not rejoin: {ios:?}");
    drop(set);
    let _ = std::fs::remove_file(f);
}

#[test]
fn killed_node_hands_over_and_rejoins_when_restarted() {
    use nvmf_initiator::multipath::PathState;
    let f = shared_file("rejoin-node");
    let port = free_port();
    let a = Arc::new(node_on(&f, 1, 99, port));
    let b = node(&f, 100, 199);
    let set = path_set(&a, &b, 2);
    let a2 = a.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // The node stops serving: its listener and every connection close.
        a2.tcp.shutdown();
    });
    spread(&set, IoPolicy::RoundRobin, 2, 1500);
    t.join().unwrap();
    drop(a);
    assert_eq!(set.state(0), PathState::Unusable);
    // The node comes back on the same port; the path reconnects in the background.
    let a = node_on(&f, 1, 99, port);
    wait_state(&set, 0, PathState::Optimized);
    let ios = spread(&set, IoPolicy::RoundRobin, 2, 400);
    assert!(
        ios[0] > 0 && ios[1] > 0,
        "the restarted node did not rejoin: {ios:?}"
    );
    drop(set);
    drop(a);
    let _ = std::fs::remove_file(f);
}
