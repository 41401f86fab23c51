//! Discovery and access control as the kernel target behaves (issue 6, points 1-2):
//! per-port, per-host discovery logs with the current discovery entry and referrals,
//! the real address for wildcard listeners, NUMREC independent of the buffer, GENCTR
//! and Discovery Log Page Change notices, keep-alive on discovery controllers, and
//! Connect Invalid Host for hosts not allowed.

use std::time::Duration;

use nvmf_common::types::Nqn;
use nvmf_common::wire::admin::{aen_cfg, aer_notice, aer_type, fid};
use nvmf_common::wire::log::{lid, subtype, trtype};
use nvmf_common::wire::status::{cmd_specific, Sct};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::transport::DataDir;
use nvmf_tests::ops_support::{
    connect_as, discovery_as, host, nvm_nqns, options_as, parse_full, read_log, read_log_prefix,
    start_yaml,
};

const OPEN: &str = "nqn.2024-01.io.nvmf-rs:open";
const CLOSED: &str = "nqn.2024-01.io.nvmf-rs:closed";
const OTHER_PORT: &str = "nqn.2024-01.io.nvmf-rs:other";

/// Port 1 exports OPEN (any host) and CLOSED (host 2 only) and refers to a remote
/// discovery controller; port 2 exports OTHER_PORT only.
fn two_ports(traddr: &str) -> String {
    format!(
        r#"
ports:
  - portid: 1
    trtype: tcp
    traddr: "{traddr}"
    trsvcid: 4420
    subsystems: [{OPEN}, {CLOSED}]
    referrals:
      - {{ trtype: tcp, traddr: 192.0.2.7, trsvcid: 8009, portid: 9 }}
  - {{ portid: 2, trtype: tcp, traddr: 127.0.0.1, trsvcid: 4421, subsystems: [{OTHER_PORT}] }}
subsystems:
  - nqn: {OPEN}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:16M" }}]
  - nqn: {CLOSED}
    allowed_hosts: ["nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000002"]
    namespaces: [{{ nsid: 1, device_path: "ram:16M" }}]
  - nqn: {OTHER_PORT}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "null:16M" }}]
"#
    )
}

fn nqn(s: &str) -> Nqn {
    Nqn::new(s).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn log_lists_current_discovery_then_visible_subsystems_then_referrals() {
    let t = start_yaml(&two_ports("127.0.0.1"));
    let port1 = t.addrs[0].port().to_string();
    let d = discovery_as(&t.fabric(0), 1, 0);
    let log = read_log(&d);
    assert_eq!(log.numrec, 3, "{log:#?}");
    let e = &log.entries;
    assert_eq!(e[0].subtype, subtype::CURRENT_DISCOVERY);
    assert_eq!(e[0].subnqn, nvmf_common::types::DISCOVERY_NQN);
    assert_eq!(
        (e[0].traddr.as_str(), e[0].trsvcid.as_str()),
        ("127.0.0.1", port1.as_str())
    );
    assert_eq!(e[0].portid, 1);
    // Host 1 may use OPEN only; OTHER_PORT is on another port.
    assert_eq!(nvm_nqns(&log), vec![OPEN.to_string()]);
    assert_eq!(e[1].trtype, trtype::TCP);
    assert_eq!(
        e[1].trsvcid, port1,
        "the real port number, not the configured 0"
    );
    assert_eq!(e[2].subtype, subtype::REFERRAL);
    assert_eq!(
        (e[2].traddr.as_str(), e[2].trsvcid.as_str(), e[2].portid),
        ("192.0.2.7", "8009", 9)
    );
    d.shutdown().unwrap_or_else(|e| panic!("{e}"));

    // Host 2 is allowed on CLOSED too.
    let d2 = discovery_as(&t.fabric(0), 2, 0);
    let mut seen = nvm_nqns(&read_log(&d2));
    seen.sort();
    assert_eq!(seen, vec![CLOSED.to_string(), OPEN.to_string()]);

    // Discovery is reachable on port 2 as well, and lists only what port 2 exports.
    let d3 = discovery_as(&t.fabric(1), 1, 0);
    let log3 = read_log(&d3);
    assert_eq!(nvm_nqns(&log3), vec![OTHER_PORT.to_string()]);
    assert_eq!(log3.entries[0].portid, 2);
    assert_eq!(log3.numrec, 2, "no referrals on port 2");
}

#[test]
fn wildcard_listener_reports_the_address_the_host_used() {
    let t = start_yaml(&two_ports("0.0.0.0"));
    assert!(t.addrs[0].ip().is_unspecified());
    let d = discovery_as(&t.fabric(0), 1, 0);
    let log = read_log(&d);
    for e in log
        .entries
        .iter()
        .filter(|e| e.subtype != subtype::REFERRAL)
    {
        assert_eq!(e.traddr, "127.0.0.1", "{e:?}");
        assert_eq!(e.trsvcid, t.addrs[0].port().to_string());
    }
}

#[test]
fn numrec_counts_every_entry_when_the_buffer_is_short() {
    let t = start_yaml(&two_ports("127.0.0.1"));
    let d = discovery_as(&t.fabric(0), 2, 0);
    // Header only, then header and one entry: NUMREC still counts all four.
    let (g0, n0, _) = read_log_prefix(&d, 0);
    let (g1, n1, page) = read_log_prefix(&d, 1);
    assert_eq!((n0, n1), (4, 4));
    assert_eq!(g0, g1);
    assert_eq!(page.len(), 1024 * 2);
    // Reading the full length parses.
    let (_, _, full) = read_log_prefix(&d, 4);
    assert_eq!(parse_full(&full).entries.len(), 4);
}

#[test]
fn refused_host_gets_connect_invalid_host_and_unexported_subsystem_is_unreachable() {
    let t = start_yaml(&two_ports("127.0.0.1"));
    let err = connect_as(&t.fabric(0), 1, &nqn(CLOSED), 1, 0)
        .err()
        .unwrap_or_else(|| panic!("host 1 must be refused"));
    let st = err
        .status()
        .unwrap_or_else(|| panic!("no NVMe status: {err}"));
    assert_eq!(
        (st.sct, st.sc),
        (Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST)
    );
    // The allowed host connects.
    let c = connect_as(&t.fabric(0), 2, &nqn(CLOSED), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
    // OTHER_PORT is not linked to port 1: Connect Invalid Parameters (SUBNQN).
    let err = connect_as(&t.fabric(0), 1, &nqn(OTHER_PORT), 1, 0)
        .err()
        .unwrap_or_else(|| panic!("connect through the wrong port must fail"));
    let st = err
        .status()
        .unwrap_or_else(|| panic!("no NVMe status: {err}"));
    assert_eq!(
        (st.sct, st.sc),
        (
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS
        )
    );
    connect_as(&t.fabric(1), 1, &nqn(OTHER_PORT), 1, 0)
        .unwrap_or_else(|e| panic!("{e}"))
        .shutdown()
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn keep_alive_and_kato_accepted_on_discovery_controllers() {
    let t = start_yaml(&two_ports("127.0.0.1"));
    let d = discovery_as(&t.fabric(0), 1, 3000);
    assert_eq!(
        d.keep_alive_timeout_ms().unwrap_or_else(|e| panic!("{e}")),
        3000
    );
    let c = d
        .admin_execute(command::keep_alive(), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.is_success(), "Keep Alive: {}", c.status);
    // The host's keep-alive thread keeps the association up past KATO.
    std::thread::sleep(Duration::from_millis(3500));
    assert!(d.is_alive());
    assert_eq!(read_log(&d).numrec, 3);
}

#[test]
fn genctr_moves_and_hosts_that_asked_get_a_discovery_change_notice() {
    let t = start_yaml(&two_ports("127.0.0.1"));
    let d = discovery_as(&t.fabric(0), 1, 0);
    let mut quiet_opts = options_as(3, &Nqn::discovery(), 0, 0);
    quiet_opts.command_timeout = Duration::from_millis(700);
    let quiet = Controller::connect(t.fabric(0), quiet_opts).unwrap_or_else(|e| panic!("{e}"));
    d.set_features(
        fid::ASYNC_EVENT_CONFIG,
        nvmf_common::types::Nsid::NONE,
        aen_cfg::DISCOVERY_LOG_CHANGE,
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let before = read_log(&d);
    assert_eq!(nvm_nqns(&before), vec![OPEN.to_string()]);

    // An AER outstanding before the change completes when host 1 is allowed on CLOSED.
    std::thread::scope(|s| {
        let aer = s.spawn(|| d.admin_execute(command::async_event_request(), None, DataDir::None));
        std::thread::sleep(Duration::from_millis(300));
        let closed = t
            .target
            .subsystem_by_name(CLOSED)
            .unwrap_or_else(|| panic!("no {CLOSED}"));
        closed.add_host(host(1).0);
        t.target
            .discovery_changed(nvmf_target::target::DiscoveryScope::Exporting(CLOSED));
        let c = aer
            .join()
            .unwrap_or_else(|_| panic!("AER thread"))
            .unwrap_or_else(|e| panic!("AER: {e}"));
        assert!(c.status.is_success());
        assert_eq!(c.dw0 & 0x7, u32::from(aer_type::NOTICE));
        assert_eq!(
            (c.dw0 >> 8) & 0xFF,
            u32::from(aer_notice::DISCOVERY_LOG_CHANGE)
        );
        assert_eq!((c.dw0 >> 16) & 0xFF, u32::from(lid::DISCOVERY));
    });
    let after = read_log(&d);
    assert_ne!(after.genctr, before.genctr, "GENCTR must change");
    let mut seen = nvm_nqns(&after);
    seen.sort();
    assert_eq!(seen, vec![CLOSED.to_string(), OPEN.to_string()]);

    // The host that did not enable the notice has none pending: its AER stays
    // outstanding (it times out on our side).
    let r = quiet.admin_execute(command::async_event_request(), None, DataDir::None);
    assert!(
        r.is_err(),
        "no notice expected for a host that did not ask: {r:?}"
    );
}

#[test]
fn discovery_change_notice_goes_only_to_hosts_whose_view_changed() {
    use nvmf_target::live::Op;
    let port = nvmf_tests::ops_support::free_port();
    let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{OPEN}, {CLOSED}] }}\n\
         subsystems:\n  - nqn: {OPEN}\n    allow_any_host: true\n    namespaces: [{{ nsid: 1, device_path: \"ram:16M\" }}]\n\
         \x20 - nqn: {CLOSED}\n    allowed_hosts: []\n    namespaces: [{{ nsid: 1, device_path: \"ram:16M\" }}]\n"
    );
    let t = nvmf_tests::ops_support::start_live(&yaml, None);
    // Hosts 1 and 3 both asked for discovery change notices; only host 1 is added.
    let mut ctrls = Vec::new();
    for n in [1u8, 3] {
        let mut o = options_as(n, &Nqn::discovery(), 0, 0);
        o.command_timeout = Duration::from_millis(1500);
        let d = Controller::connect(t.fabric(1), o).unwrap_or_else(|e| panic!("{e}"));
        d.set_features(
            fid::ASYNC_EVENT_CONFIG,
            nvmf_common::types::Nsid::NONE,
            aen_cfg::DISCOVERY_LOG_CHANGE,
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(nvm_nqns(&read_log(&d)), vec![OPEN.to_string()]);
        ctrls.push(d);
    }
    let (one, three) = (&ctrls[0], &ctrls[1]);
    std::thread::scope(|s| {
        let a1 = s.spawn(|| one.admin_execute(command::async_event_request(), None, DataDir::None));
        let a3 =
            s.spawn(|| three.admin_execute(command::async_event_request(), None, DataDir::None));
        std::thread::sleep(Duration::from_millis(300));
        t.live
            .execute(&Op::AddHost {
                nqn: CLOSED.into(),
                host: host(1).0.to_string(),
            })
            .unwrap_or_else(|e| panic!("add-host: {e}"));
        let c = a1
            .join()
            .unwrap_or_else(|_| panic!("AER thread"))
            .unwrap_or_else(|e| panic!("host 1 got no notice: {e}"));
        assert_eq!(
            (c.dw0 >> 8) & 0xFF,
            u32::from(aer_notice::DISCOVERY_LOG_CHANGE)
        );
        let r = a3.join().unwrap_or_else(|_| panic!("AER thread"));
        assert!(
            r.is_err(),
            "host 3's view did not change, yet it got a notice: {r:?}"
        );
    });
    let mut seen = nvm_nqns(&read_log(one));
    seen.sort();
    assert_eq!(seen, vec![CLOSED.to_string(), OPEN.to_string()]);
}
