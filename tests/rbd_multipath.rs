//! Two gateways on one RBD image (issue 17, part 2, the ordinary case): two in-process
//! targets export the same `rbd/img` as one subsystem, with disjoint controller id
//! ranges, gateway A ANA-optimized and gateway B non-optimized. A verifying perf job
//! runs through our host's multipath session while A's group turns inaccessible, and
//! again while A goes away: no I/O error, every block verifies (blocks written through
//! A read back through B), and the session ends on B.
//!
//! `target/tests/rbd_gateways.rs` runs two gateways as two `nvmf-target` processes
//! (SIGKILL and restart included).
//!
//! Coherence between the two librbd clients comes from the image's `exclusive-lock`
//! feature (on by default): librbd flushes its cache and hands the lock over when the
//! other client first writes, and invalidates its cache when it takes the lock back.

#![cfg_attr(not(feature = "rbd"), allow(unused))]

/// Without the feature there is nothing to test: say so instead of passing silently.
#[cfg(not(feature = "rbd"))]
#[test]
fn rbd_feature_is_enabled() {
    panic!("nvmf-tests was built without its `rbd` feature: the RBD tests did not run");
}

#[cfg(feature = "rbd")]
mod rbd {
    use std::sync::Arc;
    use std::time::Duration;

    use nvmf_common::types::{Nqn, Nsid};
    use nvmf_initiator::perf::{self, parse::Rw, PerfOptions, PerfTarget};
    use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy, Session};
    use nvmf_initiator::requeue::{Requeue, SharedSession};
    use nvmf_target::config::AnaState;
    use nvmf_target::live::ctl::{handle, Request};
    use nvmf_target::live::Op;
    use nvmf_tests::ceph_cluster::CephCluster;
    use nvmf_tests::ops_support::{free_port, options_as, start_live, LiveTarget};

    const SUB: &str = "nqn.2024-01.io.nvmf-rs:rbd-multipath";
    /// Controller id ranges of the two gateways: disjoint, as one subsystem needs.
    const A_CNTLIDS: (u16, u16) = (1, 99);
    const B_CNTLIDS: (u16, u16) = (100, 199);
    /// Bytes of the image the perf job covers.
    const JOB_BYTES: u64 = 4 << 20;

    fn gateway(cluster: &CephCluster, cntlids: (u16, u16), ana: Option<&str>) -> LiveTarget {
        let ana = ana
            .map(|s| format!(", ana_groups: [{{ grpid: 1, state: {s} }}]"))
            .unwrap_or_default();
        start_live(
            &format!(
                "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{}\", subsystems: [{SUB}]{ana} }}\n\
                 subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    cntlid_min: {}\n    cntlid_max: {}\n    \
                 namespaces:\n      - {{ nsid: 1, device_path: \"rbd:rbd/img\", ceph_conf: \"{}\", anagrpid: 1 }}\n",
                free_port(),
                cntlids.0,
                cntlids.1,
                cluster.conf().display()
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
    fn verify_through(
        a: &LiveTarget,
        b: &LiveTarget,
        event: impl FnOnce() + Send + 'static,
    ) -> usize {
        let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
        let mut o = options_as(1, &sub, 1, 5000);
        o.command_timeout = Duration::from_secs(5);
        let mut session = Session::connect(a.fabric(1), o, policy())
            .unwrap_or_else(|e| panic!("connect to gateway A: {e}"))
            .with_paths(vec![b.fabric(1)]);
        let ctrl = session
            .controller()
            .unwrap_or_else(|e| panic!("controller: {e}"));
        let target = PerfTarget::from_controller(ctrl, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let (shared, mut queues) = SharedSession::new(session).unwrap_or_else(|e| panic!("{e}"));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            event();
        });
        let opts = PerfOptions {
            rw: Rw::RandWrite,
            iodepth: 8,
            runtime: Some(Duration::from_millis(2000)),
            size: Some(JOB_BYTES),
            verify: true,
            ..Default::default()
        };
        let r = perf::run_recovering(&target, &mut queues, &opts, Some(&shared as &dyn Requeue))
            .unwrap_or_else(|e| panic!("perf: {e}"));
        t.join().unwrap_or_else(|_| panic!("event thread panicked"));
        drop(queues);
        eprintln!("{}", r.format_normal());
        assert!(!r.failed(), "{}", r.format_normal());
        assert!(r.verify.blocks_checked > 0 && r.verify.failure_count == 0);
        assert!(shared.reconnects() >= 1, "no failover happened");
        let s = shared.into_session().unwrap_or_else(|e| panic!("{e}"));
        let path = s.current_path();
        let _ = s.shutdown();
        path
    }

    #[test]
    fn failover_when_gateway_a_turns_inaccessible() {
        let cluster = CephCluster::start("mp-ana", "64M");
        let a = gateway(&cluster, A_CNTLIDS, None);
        let b = gateway(&cluster, B_CNTLIDS, Some("non-optimized"));
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
        assert_eq!(path, 1, "the session moved to gateway B");
    }

    #[test]
    fn failover_when_gateway_a_goes_away() {
        let cluster = CephCluster::start("mp-node", "64M");
        let a = Arc::new(gateway(&cluster, A_CNTLIDS, None));
        let b = gateway(&cluster, B_CNTLIDS, Some("non-optimized"));
        let a2 = a.clone();
        let path = verify_through(&a, &b, move || {
            // The gateway stops serving: its listener and every connection close.
            a2.tcp.shutdown();
        });
        assert_eq!(path, 1, "the session moved to gateway B");
    }
}
