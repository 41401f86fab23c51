//! Asymmetric Namespace Access on the target: two ports of one subsystem, namespaces in
//! two ANA groups; Identify reports ANA, the ANA log page gives each port's view, I/O
//! through a path whose group is inaccessible, in persistent loss or in change gets
//! the matching path status (not DNR: the host retries elsewhere), and `ctl set-ana`
//! changes a state live with an ANA change notice to the hosts on that port.

use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::ana::{decode_log, LSP_RGO};
use nvmf_common::wire::identify::{anacap, cmic};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::status::{path, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::transport::DataDir;
use nvmf_target::config::{AnaState, Config};
use nvmf_target::live::ctl::{handle, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{connect_as, free_port, start_live, wait_aer, LiveTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:ana";

fn yaml(p1: u16, p2: u16) -> String {
    format!(
        "ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{p1}\", subsystems: [{SUB}] }}
  - portid: 2
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: \"{p2}\"
    subsystems: [{SUB}]
    ana_groups: [{{ grpid: 2, state: inaccessible }}]
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: \"ram:4M\" }}
      - {{ nsid: 2, device_path: \"ram:4M\", anagrpid: 2 }}
"
    )
}

fn start() -> LiveTarget {
    start_live(&yaml(free_port(), free_port()), None)
}

fn host(t: &LiveTarget, port: u16, n: u8) -> Controller {
    connect_as(&t.fabric(port), n, &Nqn::new(SUB).unwrap(), 1, 5000)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One 4 KiB read of namespace `nsid` on the controller's first I/O queue.
fn read_status(c: &mut Controller, nsid: u32) -> Status {
    let buf = c.alloc(4096).unwrap();
    let mut qs = c.take_io_queues();
    let sqe = command::read(Nsid(nsid), 0, 8, false).unwrap();
    let r = qs[0]
        .execute(sqe, Some(&buf), DataDir::FromCtrl, Duration::from_secs(5))
        .unwrap();
    for q in qs {
        drop(q);
    }
    r.status
}

fn ana_log(c: &Controller, rgo: bool) -> (u64, Vec<nvmf_common::wire::ana::AnaGroupDesc>) {
    let mut sqe = command::get_log_page(lid::ANA, Nsid::NONE, 4096, 0, false).unwrap();
    if rgo {
        sqe[41] |= LSP_RGO; // CDW10 bits 11:8 (LSP)
    }
    let buf = c.alloc(4096).unwrap();
    let r = c.admin_execute(sqe, Some(&buf), DataDir::FromCtrl).unwrap();
    assert!(r.status.is_success(), "{}", r.status);
    let mut page = vec![0u8; 4096];
    assert!(buf.read_at(0, &mut page));
    decode_log(&page).unwrap()
}

#[test]
fn identify_reports_ana() {
    let t = start();
    let c = host(&t, 1, 1);
    let id = c.identify_controller_raw();
    assert_ne!(id[76] & cmic::ANA, 0, "CMIC.ANA");
    assert_eq!(
        id[343] & 0x1F,
        anacap::OPTIMIZED
            | anacap::NON_OPTIMIZED
            | anacap::INACCESSIBLE
            | anacap::PERSISTENT_LOSS
            | anacap::CHANGE
    );
    assert_eq!(id[342], 10, "ANATT");
    assert_eq!(
        u32::from_le_bytes(id[344..348].try_into().unwrap()),
        128,
        "ANAGRPMAX"
    );
    let ns2 = c.identify_namespace(Nsid(2)).unwrap();
    assert_eq!(
        u32::from_le_bytes(ns2[92..96].try_into().unwrap()),
        2,
        "ANAGRPID"
    );
}

#[test]
fn each_port_reports_its_own_states_and_io_follows_them() {
    let t = start();
    let mut c1 = host(&t, 1, 1);
    let (_, g) = ana_log(&c1, false);
    let view: Vec<_> = g
        .iter()
        .map(|d| (d.grpid, d.state, d.nsids.clone()))
        .collect();
    assert_eq!(
        view,
        vec![
            (1, AnaState::Optimized, vec![1]),
            (2, AnaState::Optimized, vec![2])
        ]
    );
    assert!(read_status(&mut c1, 2).is_success());

    let mut c2 = host(&t, 2, 2);
    let (_, g) = ana_log(&c2, false);
    assert_eq!(g[1].state, AnaState::Inaccessible);
    let (_, rgo) = ana_log(&c2, true);
    assert!(
        rgo.iter().all(|d| d.nsids.is_empty()),
        "RGO leaves the NSID lists out"
    );
    let st = read_status(&mut c2, 2);
    assert!(
        st.is(Sct::PathRelated, path::ASYMMETRIC_ACCESS_INACCESSIBLE) && !st.dnr,
        "{st}"
    );
    // Group 1 stays reachable through port 2.
    let mut c3 = host(&t, 2, 3);
    assert!(read_status(&mut c3, 1).is_success());
}

#[test]
fn ctl_set_ana_changes_states_live_with_a_notice() {
    let t = start();
    let c2 = host(&t, 2, 2);
    let (before, _) = ana_log(&c2, false);
    let set = |state| {
        let r = handle(
            &t.live,
            &Request::Change(Op::SetAna {
                portid: 2,
                grpid: 2,
                state,
            }),
        );
        assert!(r.ok, "{:?}", r.error);
        r.changes
    };
    let changes = set(AnaState::Optimized);
    assert!(
        changes
            .iter()
            .any(|c| c.contains("ANA group 2 is optimized")),
        "{changes:?}"
    );
    // NOTICE (2) | ANA change (3) << 8 | log page 0Ch << 16, as nvmet.
    assert_eq!(wait_aer(&c2), 0x000C_0302);
    let (after, g) = ana_log(&c2, false);
    assert!(after > before, "CHGCNT moves");
    assert_eq!(g[1].state, AnaState::Optimized);
    let mut c = host(&t, 2, 4);
    assert!(read_status(&mut c, 2).is_success());

    for (state, sc) in [
        (
            AnaState::PersistentLoss,
            path::ASYMMETRIC_ACCESS_PERSISTENT_LOSS,
        ),
        (AnaState::Change, path::ASYMMETRIC_ACCESS_TRANSITION),
    ] {
        set(state);
        let mut c = host(&t, 2, 5);
        let st = read_status(&mut c, 2);
        assert!(st.is(Sct::PathRelated, sc) && !st.dnr, "{state}: {st}");
    }
}

#[test]
fn group_ids_out_of_range_are_refused() {
    for bad in ["grpid: 0", "grpid: 129"] {
        let y = yaml(4420, 4421).replace("grpid: 2", bad);
        let e = Config::from_yaml_str(&y, "t").unwrap_err().to_string();
        assert!(
            e.contains("ana_groups[0].grpid") && e.contains("1..=128"),
            "{e}"
        );
    }
    let y = yaml(4420, 4421).replace("anagrpid: 2", "anagrpid: 300");
    let e = Config::from_yaml_str(&y, "t").unwrap_err().to_string();
    assert!(e.contains("namespaces[1].anagrpid"), "{e}");
}
