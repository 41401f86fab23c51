//! Unit tests of controller bring-up, keep-alive, log pages and identity parsing,
//! against the in-process fake target.

use std::time::{Duration, Instant};

use nvmf_common::types::Nqn;
use nvmf_common::wire::fabrics::reg;
use nvmf_common::wire::identify::{cntrltype, IdentifyController};
use nvmf_common::wire::status::{cmd_specific, Sct};

use super::registers::CAP_TO_UNIT;
use super::*;
use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};

fn host() -> (Nqn, [u8; 16]) {
    (
        Nqn::new("nqn.2014-08.org.nvmexpress:uuid:test").unwrap(),
        [7u8; 16],
    )
}

fn opts(sub: &str) -> ConnectOptions {
    let (h, id) = host();
    let mut o = ConnectOptions::new(Nqn::new(sub).unwrap(), h, id);
    o.nr_io_queues = 2;
    o.kato_ms = 0;
    o
}

#[test]
fn bring_up_in_order() {
    let t = FakeTarget::new(FakeTargetConfig::default());
    let mut ctrl = Controller::connect(t.fabric(), opts(&t.subnqn())).unwrap();
    assert_eq!(ctrl.cntlid(), Cntlid(FakeTargetConfig::default().cntlid));
    assert_eq!(ctrl.io_queue_count(), 2);
    assert_eq!(ctrl.id_ctrl().mn, "fake model");
    assert_eq!(ctrl.id_ctrl().in_capsule_data, 8192);
    assert_eq!(ctrl.max_transfer(), Some(128 * 1024));
    assert_eq!(ctrl.identify_controller_raw().len(), 4096);
    let ns = ctrl.namespaces();
    // NSID 2 has size 0 and is skipped.
    assert_eq!(ns.iter().map(|n| n.nsid.0).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(ns[0].block_size, 512);
    assert_eq!(ns[0].nsze, 2048);
    assert_eq!(ns[0].uuid, Some([0x11; 16]));
    assert_eq!(ns[1].block_size, 4096);
    let log = t.log();
    let expect_prefix = [
        "connect qid 0 cntlid 65535",
        "prop_get 0x0",
        "prop_get 0x8",
        "prop_set 0x14 0x460001",
        "prop_get 0x1c",
    ];
    assert_eq!(&log[..5], &expect_prefix);
    let rest: Vec<&str> = log[5..]
        .iter()
        .map(|s| s.as_str())
        .filter(|s| !s.starts_with("prop_get 0x1c"))
        .collect();
    assert_eq!(rest[0], "identify cns 1");
    assert_eq!(rest[1], "set_features 7 0x10001");
    assert_eq!(rest[2], "connect qid 1 cntlid 5");
    assert_eq!(rest[3], "connect qid 2 cntlid 5");
    assert_eq!(rest[4], "identify cns 2");
    let conns = t.connects();
    assert_eq!(conns.len(), 3);
    assert_eq!((conns[1].depth, conns[1].in_capsule_data), (64, 8192));
    let qs = ctrl.take_io_queues();
    assert_eq!(qs.len(), 2);
    assert_eq!(qs[0].depth(), 64, "capped by CAP.MQES + 1");
    drop(qs);
    ctrl.shutdown().unwrap();
    assert!(t.log().iter().any(|s| s == "prop_set 0x14 0x464001"));
}

#[test]
fn controller_is_shareable() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Controller>();
}

#[test]
fn granted_fewer_queues() {
    let t = FakeTarget::new(FakeTargetConfig {
        max_queues: 1,
        ..Default::default()
    });
    let mut o = opts(&t.subnqn());
    o.nr_io_queues = 4;
    let ctrl = Controller::connect(t.fabric(), o).unwrap();
    assert_eq!(ctrl.io_queue_count(), 1);
}

#[test]
fn connect_rejected_reports_status() {
    let t = FakeTarget::new(FakeTargetConfig::default());
    let r = Controller::connect(t.fabric(), opts("nqn.2024-01.io.example:other"));
    let e = r.err().unwrap();
    let s = e.status().unwrap();
    assert!(s.is(
        Sct::CommandSpecific,
        cmd_specific::CONNECT_INVALID_PARAMETERS
    ));
    assert!(e.to_string().contains("Connect data byte 256"), "{e}");
}

#[test]
fn fatal_status_and_not_ready() {
    let t = FakeTarget::new(FakeTargetConfig {
        cfs: true,
        ..Default::default()
    });
    assert!(matches!(
        Controller::connect(t.fabric(), opts(&t.subnqn())),
        Err(Error::Protocol(_))
    ));
    let t = FakeTarget::new(FakeTargetConfig {
        never_ready: true,
        cap_to: 1,
        ..Default::default()
    });
    let start = Instant::now();
    assert!(matches!(
        Controller::connect(t.fabric(), opts(&t.subnqn())),
        Err(Error::Timeout(_))
    ));
    assert!(start.elapsed() >= CAP_TO_UNIT);
}

/// A controller with CAP.CRMS.CRWMS gets CRTO.CRWMT to become ready, not CAP.TO (a
/// CRTO under CAP.TO counts as CAP.TO); without it CRTO is never read.
#[test]
fn ready_timeout_comes_from_crto_when_the_controller_has_it() {
    let t = FakeTarget::new(FakeTargetConfig {
        never_ready: true,
        cap_to: 1,
        crwmt: Some(3),
        ..Default::default()
    });
    let start = Instant::now();
    match Controller::connect(t.fabric(), opts(&t.subnqn())) {
        Err(Error::Timeout(m)) => assert!(m.contains("CRTO.CRWMT"), "{m}"),
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(_) => panic!("a controller never ready was connected"),
    }
    assert!(start.elapsed() >= CAP_TO_UNIT * 3);
    assert!(t
        .log()
        .iter()
        .any(|l| l == &format!("prop_get {:#x}", reg::CRTO)));
    let t = FakeTarget::new(FakeTargetConfig {
        never_ready: true,
        cap_to: 1,
        crwmt: Some(0),
        ..Default::default()
    });
    let start = Instant::now();
    assert!(matches!(
        Controller::connect(t.fabric(), opts(&t.subnqn())),
        Err(Error::Timeout(_))
    ));
    assert!(start.elapsed() >= CAP_TO_UNIT);
    let t = FakeTarget::new(FakeTargetConfig::default());
    drop(Controller::connect(t.fabric(), opts(&t.subnqn())).unwrap());
    assert!(!t
        .log()
        .iter()
        .any(|l| l == &format!("prop_get {:#x}", reg::CRTO)));
}

#[test]
fn keep_alive_runs_and_stops() {
    let t = FakeTarget::new(FakeTargetConfig::default());
    let mut o = opts(&t.subnqn());
    o.kato_ms = 40;
    let ctrl = Controller::connect(t.fabric(), o).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(ctrl.is_alive());
    drop(ctrl);
    let n = t.log().iter().filter(|s| *s == "keep_alive").count();
    assert!(n >= 3, "{n} keep alives");
    std::thread::sleep(Duration::from_millis(100));
    let m = t.log().iter().filter(|s| *s == "keep_alive").count();
    assert_eq!(n, m, "keep-alive stopped on drop");
    let conn = t
        .log()
        .iter()
        .find(|s| s.starts_with("connect qid 0"))
        .cloned();
    assert_eq!(conn.as_deref(), Some("connect qid 0 cntlid 65535"));
    assert!(t.log().iter().any(|s| s == "kato 40"));
}

#[test]
fn log_page_split_by_mdts() {
    let t = FakeTarget::new(FakeTargetConfig {
        mdts: 1, // 8 KiB
        ..Default::default()
    });
    let ctrl = Controller::connect(t.fabric(), opts(&t.subnqn())).unwrap();
    let page = ctrl.get_log_page(0xC0, Nsid::NONE, 20 * 1024, 0).unwrap();
    assert_eq!(page.len(), 20 * 1024);
    // The fake fills log bytes with (offset / 4) as u8 patterns: check continuity.
    assert!(page
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i / 4) % 251) as u8));
    let gets = t
        .log()
        .iter()
        .filter(|s| s.starts_with("get_log 0xc0"))
        .count();
    assert_eq!(gets, 3);
    assert!(ctrl.get_log_page(0xC0, Nsid::NONE, 6, 0).is_err());
}

#[test]
fn parse_identity_fields() {
    let mut raw = vec![0u8; IDENTIFY_LEN];
    let mut id = IdentifyController::new_unchecked(&mut raw[..]);
    id.set_mdts(0);
    id.set_ioccsz(4);
    id.set_cntrltype(cntrltype::DISCOVERY);
    id.set_sn("SN1");
    let p = ControllerIdentity::parse(&raw, 0).unwrap();
    assert_eq!(p.max_transfer, None);
    assert_eq!(p.in_capsule_data, 0);
    assert!(p.is_discovery());
    assert_eq!(p.sn, "SN1");
    assert!(ControllerIdentity::parse(&raw[..100], 0).is_err());
}
