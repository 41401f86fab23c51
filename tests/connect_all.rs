//! `connect-all` as a library (issue 31 item 1) over NVMe/TCP against our target in
//! this process: two subsystems with two ports each come back as two subsystems with
//! two paths each (ANA states per path), whether both discovery controllers are given
//! or the second is reached through a referral; a referral loop ends; an unreachable
//! referral is reported while the rest connects; and a subsystem that no longer allows
//! this host is reported with its NVMe status while the other one connects.

use nvmf_common::types::DISCOVERY_NQN;
use nvmf_common::wire::log::trtype;
use nvmf_common::wire::status::{cmd_specific, Sct};
use nvmf_initiator::autoconnect::{
    connect_all, connect_subsystem, walk, ConnectAllOptions, ConnectAllReport, ConnectedSubsystem,
    DiscoverySpec, FabricLogReader, NetConnector, PortAddr, Problem, Profile,
};
use nvmf_initiator::hostnqn::HostIdentity;
use nvmf_initiator::multipath::{PathLink, PathState};
use nvmf_target::live::ctl::{handle, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{free_port, host, start_live, LiveTarget};

const A: &str = "nqn.2024-01.io.nvmf-rs:connect-all-a";
const B: &str = "nqn.2024-01.io.nvmf-rs:connect-all-b";
/// Namespace sizes (MiB) of A and B, to tell them apart in the report.
const A_MIB: u64 = 16;
const B_MIB: u64 = 8;
const MIB: u64 = 1 << 20;

/// Two ports, both exporting A and B; port 2's ANA group 1 is non-optimized.
/// `referrals1`/`referrals2` are YAML flow lists of each port's referrals.
fn yaml(p1: u16, p2: u16, referrals1: &str, referrals2: &str, b_hosts: &str) -> String {
    format!(
        r#"
ports:
  - portid: 1
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: "{p1}"
    subsystems: [{A}, {B}]
    referrals: {referrals1}
  - portid: 2
    trtype: tcp
    traddr: 127.0.0.1
    trsvcid: "{p2}"
    subsystems: [{A}, {B}]
    referrals: {referrals2}
    ana_groups: [{{ grpid: 1, state: non-optimized }}]
subsystems:
  - nqn: {A}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "ram:{A_MIB}M" }}]
  - nqn: {B}
    {b_hosts}
    namespaces:
      - {{ nsid: 1, device_path: "ram:{B_MIB}M" }}
      - {{ nsid: 2, device_path: "ram:{B_MIB}M" }}
"#
    )
}

fn referral(port: u16) -> String {
    format!("[{{ trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", portid: 9 }}]")
}

const ANY_HOST: &str = "allow_any_host: true";

struct Lab {
    target: LiveTarget,
    p1: u16,
    p2: u16,
}

fn lab(refer1: Option<u16>, refer2: Option<u16>, b_hosts: &str) -> Lab {
    let (p1, p2) = (free_port(), free_port());
    let r = |p: Option<u16>| p.map_or_else(|| "[]".to_string(), referral);
    let target = start_live(&yaml(p1, p2, &r(refer1), &r(refer2), b_hosts), None);
    Lab { target, p1, p2 }
}

fn opts() -> ConnectAllOptions {
    let (nqn, id) = host(1);
    let mut o = ConnectAllOptions::new(HostIdentity::combine(Some(nqn), Some(id)));
    o.timeout = std::time::Duration::from_secs(5);
    o
}

fn spec(port: u16) -> DiscoverySpec {
    DiscoverySpec::new(
        &format!("test:{port}"),
        "tcp",
        "127.0.0.1",
        Some(&port.to_string()),
    )
}

fn subsystem<'a>(r: &'a ConnectAllReport, nqn: &str) -> &'a ConnectedSubsystem {
    r.connected
        .iter()
        .find(|s| s.subnqn == nqn)
        .unwrap_or_else(|| panic!("{nqn} not connected; problems: {:?}", messages(r)))
}

fn messages(r: &ConnectAllReport) -> Vec<String> {
    r.problems.iter().map(ToString::to_string).collect()
}

/// Each path's `port: state`, in report order.
fn path_states(s: &ConnectedSubsystem) -> Vec<(String, PathLink, Option<PathState>)> {
    s.path_reports()
        .into_iter()
        .map(|p| (p.path.addr.trsvcid.clone(), p.link, p.ana))
        .collect()
}

/// A and B, each through both ports, port 1 optimized and port 2 non-optimized.
fn assert_two_by_two(r: &ConnectAllReport, l: &Lab) {
    assert!(r.problems.is_empty(), "{:?}", messages(r));
    assert!(r.is_success());
    let names: Vec<&str> = r.connected.iter().map(|s| s.subnqn.as_str()).collect();
    assert_eq!(names, vec![A, B]);
    for nqn in [A, B] {
        let s = subsystem(r, nqn);
        assert_eq!(
            path_states(s),
            vec![
                (
                    l.p1.to_string(),
                    PathLink::Connected,
                    Some(PathState::Optimized)
                ),
                (
                    l.p2.to_string(),
                    PathLink::Connected,
                    Some(PathState::NonOptimized)
                ),
            ],
            "{nqn}"
        );
        assert!(s.path_reports()[1].state_words() == "live non-optimized");
    }
    let a = subsystem(r, A);
    assert_eq!(a.namespaces.len(), 1);
    assert_eq!(a.namespaces[0].size_bytes(), A_MIB * MIB);
    let b = subsystem(r, B);
    let nsids: Vec<u32> = b.namespaces.iter().map(|n| n.nsid.0).collect();
    assert_eq!(nsids, vec![1, 2]);
    assert!(b.namespaces.iter().all(|n| n.size_bytes() == B_MIB * MIB));
    assert!(b
        .namespaces
        .iter()
        .all(|n| n.block_size == 512 || n.block_size == 4096));
}

#[test]
fn two_subsystems_with_two_ports_each_from_two_discovery_controllers() {
    let l = lab(None, None, ANY_HOST);
    let r = connect_all(&[spec(l.p1), spec(l.p2)], &opts(), &NetConnector);
    assert_two_by_two(&r, &l);
    assert_eq!(r.visited.len(), 2);
    // Both sets hold live controllers: each answers an admin command.
    for s in &r.connected {
        for i in 0..s.set.len() {
            let id = s
                .set
                .with_controller(i, |c| c.id_ctrl().subnqn.clone())
                .unwrap_or_else(|| panic!("{} path {i} has no controller", s.subnqn));
            assert_eq!(id, s.subnqn);
        }
    }
}

#[test]
fn a_referral_leads_to_the_second_discovery_port() {
    // Port 1 refers to port 2 (whose discovery log lists port 2's entries).
    let l = {
        let p2 = free_port();
        let p1 = free_port();
        let target = start_live(&yaml(p1, p2, &referral(p2), "[]", ANY_HOST), None);
        Lab { target, p1, p2 }
    };
    let r = connect_all(&[spec(l.p1)], &opts(), &NetConnector);
    assert_two_by_two(&r, &l);
    let visited: Vec<String> = r.visited.iter().map(|a| a.trsvcid.clone()).collect();
    assert_eq!(visited, vec![l.p1.to_string(), l.p2.to_string()]);
    // Paths remember which discovery controller listed them.
    let a = subsystem(&r, A);
    assert_eq!(a.paths[1].found_via.trsvcid, l.p2.to_string());
}

#[test]
fn a_referral_loop_terminates() {
    let (p1, p2) = (free_port(), free_port());
    let target = start_live(&yaml(p1, p2, &referral(p2), &referral(p1), ANY_HOST), None);
    let l = Lab { target, p1, p2 };
    let r = connect_all(&[spec(l.p1)], &opts(), &NetConnector);
    assert_two_by_two(&r, &l);
    assert_eq!(r.visited.len(), 2, "each discovery controller read once");
}

#[test]
fn an_unreachable_referral_is_reported_while_the_rest_connects() {
    let dead = free_port();
    let l = lab(Some(dead), None, ANY_HOST);
    let r = connect_all(&[spec(l.p1)], &opts(), &NetConnector);
    assert_eq!(r.connected.len(), 2, "{:?}", messages(&r));
    for s in &r.connected {
        assert_eq!(s.paths.len(), 1, "only port 1 is known");
        assert_eq!(s.set.link(0), PathLink::Connected);
    }
    let msgs = messages(&r);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let want = format!("discovery controller tcp traddr=127.0.0.1,trsvcid={dead}");
    let by = format!("referred to by tcp traddr=127.0.0.1,trsvcid={}", l.p1);
    assert!(
        msgs[0].contains(&want) && msgs[0].contains(&by),
        "{}",
        msgs[0]
    );
    assert!(matches!(r.problems[0], Problem::Discovery(_)));
    assert!(!r.is_success(), "a problem makes the run a failure");
}

#[test]
fn a_subsystem_refusing_this_host_is_reported_and_the_other_connects() {
    let (me, _) = host(1);
    // B allows this host when discovery runs; the host is removed before connecting
    // (access revoked between the two, the way a target lists a subsystem it refuses).
    let l = lab(None, None, &format!("allowed_hosts: [\"{me}\"]"));
    let o = opts();
    let s = spec(l.p1);
    let profile = Profile::resolve(&s, &o).unwrap_or_else(|e| panic!("{e}"));
    let start = (
        PortAddr::new(trtype::TCP, "127.0.0.1", &l.p1.to_string()),
        DISCOVERY_NQN.to_string(),
    );
    let found = walk(
        &[start],
        std::slice::from_ref(&profile),
        &o,
        &FabricLogReader(&NetConnector),
    );
    let names: Vec<&str> = found.subsystems.iter().map(|s| s.subnqn.as_str()).collect();
    assert_eq!(names, vec![A, B]);
    let resp = handle(
        &l.target.live,
        &Request::Change(Op::RemoveHost {
            nqn: B.into(),
            host: me.as_str().into(),
        }),
    );
    assert!(resp.ok, "{:?}", resp.error);
    let mut connected = Vec::new();
    let mut problems = Vec::new();
    for sub in &found.subsystems {
        match connect_subsystem(sub, &profile, &o, &NetConnector) {
            Ok(c) => connected.push(c),
            Err(p) => problems.push(p),
        }
    }
    assert_eq!(connected.len(), 1);
    assert_eq!(connected[0].subnqn, A);
    assert_eq!(problems.len(), 1);
    let st = problems[0]
        .error()
        .and_then(|e| e.status())
        .unwrap_or_else(|| panic!("no NVMe status: {}", problems[0]));
    assert!(
        st.is(Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST),
        "{st}"
    );
    let msg = problems[0].to_string();
    assert!(
        msg.contains(B) && msg.contains("Connect Invalid Host") && msg.contains(me.as_str()),
        "{msg}"
    );
}

#[test]
fn a_subsystem_hidden_from_this_host_is_neither_listed_nor_an_error() {
    // Another host: B is not in its discovery log at all (nothing to report), A is.
    let (me, _) = host(1);
    let l = lab(None, None, &format!("allowed_hosts: [\"{me}\"]"));
    let mut o = opts();
    let (other, other_id) = host(2);
    o.host = HostIdentity::combine(Some(other), Some(other_id));
    let r = connect_all(&[spec(l.p1)], &o, &NetConnector);
    let names: Vec<&str> = r.connected.iter().map(|s| s.subnqn.as_str()).collect();
    assert_eq!(names, vec![A]);
    assert!(r.is_success());
}

#[test]
fn a_path_that_cannot_be_reached_is_reported_while_its_subsystem_connects() {
    let l = lab(None, None, ANY_HOST);
    let o = opts();
    let profile = Profile::resolve(&spec(l.p1), &o).unwrap_or_else(|e| panic!("{e}"));
    let start = (
        PortAddr::new(trtype::TCP, "127.0.0.1", &l.p1.to_string()),
        DISCOVERY_NQN.to_string(),
    );
    let mut found = walk(
        &[start],
        std::slice::from_ref(&profile),
        &o,
        &FabricLogReader(&NetConnector),
    );
    // A second port the log could have named, where nothing listens.
    let dead = free_port();
    let mut extra = found.subsystems[0].paths[0].clone();
    extra.addr.trsvcid = dead.to_string();
    found.subsystems[0].paths.push(extra);
    let c = connect_subsystem(&found.subsystems[0], &profile, &o, &NetConnector)
        .unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(c.set.link(0), PathLink::Connected);
    let problems: Vec<String> = c.path_problems().iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let want = format!("subsystem {A}: path tcp traddr=127.0.0.1,trsvcid={dead} not connected:");
    assert!(
        problems[0].contains(&want) && problems[0].contains("connection refused"),
        "{}",
        problems[0]
    );
}
