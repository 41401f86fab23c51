//! Live port changes and graceful shutdown on the verbs transports (issue 6, points 3
//! and 4), over loopback (NVMe/RDMA on the software verbs provider): a loopback or
//! rdma port added while running serves hosts at once; a removed one stops accepting
//! and ends the controllers that came through it, while other ports keep serving; on
//! shutdown the poll groups answer the commands already executing, execute nothing
//! that arrives later, and leave no queue, data buffer or controller behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::controller::Controller;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::rdma::RdmaFabric;
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::Config;
use nvmf_target::live::rdma_hooks::{RdmaPorts, TransportPorts};
use nvmf_target::live::{FixedPorts, Live};
use nvmf_target::rdma::RdmaServer;
use nvmf_target::target::Target;
use nvmf_tests::init_logs;
use nvmf_tests::ops_support::options_as;
use nvmf_verbs::soft::SoftDevice;
use nvmf_verbs::Device;

const SUB: &str = "nqn.2024-01.io.nvmf-rs:rdma-live";
/// Block size of the RAM namespaces.
const BS: usize = 512;

/// `ports`: (portid, trtype) with loopback ports addressed by id and rdma ports at
/// 192.0.2.1:(4420 + id) (a name only: the software provider listens on any string).
fn yaml(ports: &[(u16, &str)]) -> String {
    let mut s = String::from("ports:\n");
    if ports.is_empty() {
        s = "ports: []\n".into();
    }
    for (id, t) in ports {
        match *t {
            "rdma" => s.push_str(&format!(
                "  - {{ portid: {id}, trtype: rdma, adrfam: ipv4, traddr: 192.0.2.1, trsvcid: \"{}\", subsystems: [{SUB}] }}\n",
                4420 + id
            )),
            _ => s.push_str(&format!(
                "  - {{ portid: {id}, trtype: loopback, subsystems: [{SUB}] }}\n"
            )),
        }
    }
    s.push_str(&format!(
        "subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces: [{{ nsid: 1, device_path: \"ram:16M\" }}]\n"
    ));
    s
}

fn cfg(text: &str) -> Config {
    Config::from_yaml_str(text, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

/// A target on a private software device with live changes through [`RdmaPorts`].
struct Rig {
    target: Arc<Target>,
    device: Arc<dyn Device>,
    rdma: Arc<RdmaPorts>,
    live: Arc<Live>,
}

fn start(text: &str) -> Rig {
    init_logs();
    let c = cfg(text);
    let target = Target::from_config(&c).unwrap_or_else(|e| panic!("target: {e}"));
    let device: Arc<dyn Device> = SoftDevice::new();
    let server = RdmaServer::start(target.clone(), device.clone(), &target.ports())
        .unwrap_or_else(|e| panic!("rdma: {e}"));
    let d = device.clone();
    let rdma = Arc::new(RdmaPorts::new(
        target.clone(),
        vec![server],
        Box::new(move |_| Ok(d.clone())),
    ));
    let hooks = Arc::new(TransportPorts {
        tcp: Arc::new(FixedPorts),
        rdma: rdma.clone(),
    });
    let live = Live::new(target.clone(), c, hooks, None);
    Rig {
        target,
        device,
        rdma,
        live,
    }
}

impl Rig {
    /// A host fabric to the rdma_cm address `addr` on the rig's device.
    fn fabric(&self, addr: &str) -> Arc<dyn Fabric> {
        Arc::new(
            RdmaFabric::loopback(self.device.clone(), addr.to_string())
                .unwrap_or_else(|e| panic!("fabric: {e}")),
        )
    }

    fn connect(&self, addr: &str, host: u8) -> Result<Controller, nvmf_initiator::Error> {
        let mut o = options_as(host, &sub(), 1, 0);
        o.command_timeout = Duration::from_secs(3);
        o.connect_timeout = Duration::from_secs(2);
        Controller::connect(self.fabric(addr), o)
    }

    fn controllers(&self) -> usize {
        self.target
            .subsystem_by_name(SUB)
            .map_or(0, |s| s.controllers().len())
    }
}

/// Writes a pattern at `lba` and reads it back through `ctrl`'s first I/O queue.
fn write_read(ctrl: &mut Controller, lba: u64, seed: u8) -> Result<(), nvmf_initiator::Error> {
    let mut qs = ctrl.take_io_queues();
    let q = qs
        .first_mut()
        .ok_or_else(|| nvmf_initiator::Error::Protocol("no I/O queue".into()))?;
    let data: Vec<u8> = (0..8 * BS).map(|i| (i as u8) ^ seed).collect();
    let mut io = NsIo::new(ctrl, q, Nsid(1))?;
    io.write(lba, &data)?;
    let mut back = vec![0u8; data.len()];
    io.read(lba, &mut back)?;
    if back != data {
        return Err(nvmf_initiator::Error::Verify("data differs".into()));
    }
    Ok(())
}

#[test]
fn loopback_and_rdma_ports_are_added_and_removed_while_running() {
    let rig = start(&yaml(&[(1, "loopback")]));
    let (p1, p2, p3) = ("loopback:1", "loopback:2", "192.0.2.1:4423");
    assert!(rig.connect(p2, 1).is_err(), "port 2 does not exist yet");

    let changes = rig
        .live
        .apply(cfg(&yaml(&[(1, "loopback"), (2, "loopback"), (3, "rdma")])))
        .unwrap_or_else(|e| panic!("add ports: {e}"));
    assert!(changes.iter().any(|c| c.contains("port 2")), "{changes:?}");
    assert!(changes.iter().any(|c| c.contains("port 3")), "{changes:?}");
    let status = rig.live.status();
    let listening: Vec<_> = status.ports.iter().map(|p| p.listening.clone()).collect();
    assert!(
        listening.contains(&Some(p2.to_string())) && listening.contains(&Some(p3.to_string())),
        "{listening:?}"
    );

    let mut c2 = rig
        .connect(p2, 2)
        .unwrap_or_else(|e| panic!("connect through the new loopback port: {e}"));
    write_read(&mut c2, 0, 2).unwrap_or_else(|e| panic!("I/O through port 2: {e}"));
    let mut c3 = rig
        .connect(p3, 3)
        .unwrap_or_else(|e| panic!("connect through the new rdma port: {e}"));
    write_read(&mut c3, 64, 3).unwrap_or_else(|e| panic!("I/O through port 3: {e}"));
    let mut c1 = rig
        .connect(p1, 1)
        .unwrap_or_else(|e| panic!("connect through port 1: {e}"));
    assert_eq!(rig.controllers(), 3);

    // Ports 2 and 3 go: their controllers end, new connections are refused; port 1
    // keeps serving its host.
    let changes = rig
        .live
        .apply(cfg(&yaml(&[(1, "loopback")])))
        .unwrap_or_else(|e| panic!("remove ports: {e}"));
    assert!(
        changes.iter().filter(|c| c.contains("removed")).count() >= 2,
        "{changes:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.controllers() > 1 {
        assert!(
            Instant::now() < deadline,
            "controllers of removed ports still there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        write_read(&mut c2, 0, 4).is_err(),
        "port 2's controller ended"
    );
    assert!(rig.connect(p2, 4).is_err(), "port 2 no longer accepts");
    assert!(rig.connect(p3, 4).is_err(), "port 3 no longer accepts");
    write_read(&mut c1, 128, 1).unwrap_or_else(|e| panic!("port 1 still serves: {e}"));

    // And a removed port can come back on the same address.
    rig.live
        .apply(cfg(&yaml(&[(1, "loopback"), (2, "loopback")])))
        .unwrap_or_else(|e| panic!("re-add port 2: {e}"));
    let mut again = rig
        .connect(p2, 5)
        .unwrap_or_else(|e| panic!("connect through the re-added port: {e}"));
    write_read(&mut again, 0, 5).unwrap_or_else(|e| panic!("I/O after re-adding: {e}"));
    drop((c1, c2, c3, again));
    rig.rdma.shutdown();
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.controllers() > 0 {
        assert!(Instant::now() < deadline, "controllers left after shutdown");
        std::thread::sleep(Duration::from_millis(20));
    }
}
