//! Shutdown drains the same way on every fabric (the shared poll-group runtime): the
//! command executing when the stop begins is answered, capsules that arrive after it
//! are neither executed nor answered, the queues close, and nothing leaks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::queue::Completion;
use nvmf_initiator::transport::rdma::RdmaFabric;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::{DataDir, Fabric};
use nvmf_target::backend::fault::{FaultBackend, FaultControl};
use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use nvmf_target::config::Config;
use nvmf_target::rdma::RdmaServer;
use nvmf_target::runtime::GroupCounters;
use nvmf_target::subsystem::{Namespace, Subsystem};
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;
use nvmf_tests::init_logs;
use nvmf_tests::ops_support::options_as;
use nvmf_verbs::soft::SoftDevice;
use nvmf_verbs::Device;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:drain";
const BS: usize = 512;
/// Each command of the slow namespace takes this long in the backend.
const DELAY: Duration = Duration::from_millis(150);
/// 64 KiB reads: the data leaves from the poll group's buffer pool.
const LEN: usize = 64 << 10;
/// Reads sent before the shutdown begins, and as many after.
const BEFORE: usize = 4;

fn config(trtype: &str) -> Config {
    let (addr, svc) = match trtype {
        "tcp" => ("127.0.0.1", "4420"),
        _ => ("", "4420"),
    };
    let text = format!(
        r#"
ports:
  - {{ portid: 1, trtype: {trtype}, traddr: "{addr}", trsvcid: "{svc}", subsystems: [{SUB}] }}
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:16M" }}]
"#
    );
    Config::from_yaml_str(&text, "<drain>").unwrap_or_else(|e| panic!("{e}"))
}

/// Replaces namespace 1 with a RAM namespace whose commands can be delayed.
fn slow_namespace(target: &Target) -> (Arc<Subsystem>, Arc<FaultControl>) {
    let subsys = target
        .subsystem_by_name(SUB)
        .unwrap_or_else(|| panic!("subsystem"));
    let inner = open_backend(
        &NamespaceSpec::Ram { size: 16 << 20 },
        &OpenOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (b, ctl) = FaultBackend::wrap(inner);
    subsys.remove_namespace(Nsid(1));
    subsys
        .add_namespace(Namespace::new(Nsid(1), b, [1; 16], [2; 16]))
        .unwrap_or_else(|e| panic!("{e}"));
    (subsys, ctl)
}

/// Runs the drain scenario against a started server: `fabric` reaches it, `stop` shuts
/// it down and returns its final counters.
fn drain_case(
    fabric: Arc<dyn Fabric>,
    subsys: Arc<Subsystem>,
    ctl: Arc<FaultControl>,
    stop: impl FnOnce() -> GroupCounters + Send + 'static,
) {
    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    // No keep-alive: every command the target sees is one of ours.
    let mut o = options_as(1, &sub, 1, 0);
    o.command_timeout = Duration::from_secs(30);
    let mut ctrl = Controller::connect(fabric.clone(), o).unwrap_or_else(|e| panic!("{e}"));
    let mut qs = ctrl.take_io_queues();
    let q = qs.first_mut().unwrap_or_else(|| panic!("no I/O queue"));
    let nlb = (LEN / BS) as u32;
    let bufs: Vec<_> = (0..2 * BEFORE)
        .map(|_| fabric.alloc(LEN).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    ctl.delay(DELAY);
    let submit = |q: &mut nvmf_initiator::queue::Queue, i: usize| {
        let sqe = command::read(Nsid(1), i as u64 * u64::from(nlb), nlb, false)
            .unwrap_or_else(|e| panic!("{e}"));
        q.submit(sqe, bufs.get(i), DataDir::FromCtrl, i as u64)
    };
    for i in 0..BEFORE {
        submit(q, i).unwrap_or_else(|e| panic!("{e}"));
    }
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    // The target is executing the first reads when the shutdown begins.
    std::thread::sleep(DELAY / 2);
    let stopping = std::thread::spawn(stop);
    std::thread::sleep(DELAY / 2);
    // These arrive after the shutdown began: never executed, never answered.
    for i in BEFORE..2 * BEFORE {
        let _ = submit(q, i);
    }
    let _ = q.flush();
    let started = Instant::now();
    let counters = stopping
        .join()
        .unwrap_or_else(|_| panic!("shutdown panicked"));
    let took = started.elapsed();
    // Everything the target answered reached the host, all of it successful.
    let mut done: Vec<Completion> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.len() < 2 * BEFORE && Instant::now() < deadline {
        if q.poll(&mut done).is_err() {
            break;
        }
        q.wait(Duration::from_millis(10));
    }
    assert!(
        done.iter().all(|c| c.status.is_success()),
        "an answered command failed: {done:?}"
    );
    let answered = done.len() as u64;
    assert!(
        answered >= 1,
        "the read executing at shutdown was answered: {counters:?}, {done:?}"
    );
    assert!(
        counters.drained >= 1,
        "the drain answered what was in flight: {counters:?}"
    );
    // Each read was answered, refused by the draining group, or sent after its queue
    // was closed (never seen by the target): none was executed without an answer.
    assert!(
        answered + counters.refused_at_shutdown <= 2 * BEFORE as u64,
        "{counters:?}, answered {answered}"
    );
    assert!(
        answered < 2 * BEFORE as u64,
        "reads sent after the shutdown began were executed: {counters:?}"
    );
    assert!(
        q.poll(&mut done).is_err(),
        "the queue is closed after shutdown"
    );
    assert!(
        took < Duration::from_secs(10),
        "shutdown took {took:?} (drain bound 5 s)"
    );
    // Nothing leaked: no queue, no data buffer, no controller.
    assert_eq!(counters.queues, 0, "{counters:?}");
    assert_eq!(counters.buffers_in_use, 0, "{counters:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !subsys.controllers().is_empty() {
        assert!(Instant::now() < deadline, "controller left after shutdown");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(qs);
    drop(ctrl);
}

#[test]
fn rdma_shutdown_answers_commands_in_flight_refuses_later_ones_and_leaks_nothing() {
    init_logs();
    let target = Target::from_config(&config("loopback")).unwrap_or_else(|e| panic!("target: {e}"));
    let (subsys, ctl) = slow_namespace(&target);
    let device: Arc<dyn Device> = SoftDevice::new();
    let server = RdmaServer::start(target.clone(), device.clone(), &target.ports())
        .unwrap_or_else(|e| panic!("rdma: {e}"));
    let fabric: Arc<dyn Fabric> = Arc::new(
        RdmaFabric::loopback(device, "loopback:1".into()).unwrap_or_else(|e| panic!("fabric: {e}")),
    );
    drain_case(fabric, subsys, ctl, move || server.shutdown());
}

#[test]
fn tcp_shutdown_answers_commands_in_flight_refuses_later_ones_and_leaks_nothing() {
    init_logs();
    let mut cfg = config("tcp");
    // Validation wants a real port number; the OS picks a free one.
    cfg.ports[0].trsvcid = "0".into();
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let (subsys, ctl) = slow_namespace(&target);
    let server =
        TcpServer::start(target.clone(), &target.ports()).unwrap_or_else(|e| panic!("tcp: {e}"));
    let addr = server.local_addrs()[0];
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(addr, TcpOptions::default()));
    drain_case(fabric, subsys, ctl, move || server.shutdown());
}
