//! Failover in our host (issue 14): two target "nodes" (two in-process targets, each
//! with its own NVMe/TCP port and controller id range) serve one file as one
//! subsystem; `perf --verify` runs through a session that knows both paths while the
//! first node's ANA group turns inaccessible, and again while the first node goes
//! away altogether: no I/O error, every block verifies, and the session ends up on
//! the second path.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::config::AnaState;
use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::perf::{self, parse::Rw, PerfOptions, PerfTarget};
use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy, Session};
use nvmf_initiator::requeue::{Requeue, SharedSession};
use nvmf_target::live::ctl::{handle, Request};
use nvmf_tests::ops_support::{free_port, options_as, start_live, LiveTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:multipath";

fn node(file: &std::path::Path, cntlid_min: u16, cntlid_max: u16) -> LiveTarget {
    let port = free_port();
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
    let s = shared.into_session();
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
            &Request::SetAna {
                portid: 1,
                grpid: 1,
                state: AnaState::Inaccessible,
            },
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
