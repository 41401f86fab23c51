//! The walk's rules against a scripted set of discovery logs (no network): grouping,
//! referrals, loops, depth, skipped entries, and unreadable controllers.

use std::collections::HashMap;
use std::sync::Mutex;

use nvmf_common::types::{Nqn, DISCOVERY_NQN};
use nvmf_common::wire::log::{adrfam, eflags, subtype, tcp_sectype, treq, trtype};

use super::*;
use crate::discovery::{DiscoveryEntry, DiscoveryLog};
use crate::hostnqn::HostIdentity;
use crate::transport::{Fabric, TransportError};

const A: &str = "nqn.2024-01.io.example:a";
const B: &str = "nqn.2024-01.io.example:b";

fn entry(st: u8, subnqn: &str, traddr: &str, trsvcid: &str) -> DiscoveryEntry {
    DiscoveryEntry {
        trtype: trtype::TCP,
        adrfam: adrfam::IPV4,
        subtype: st,
        treq: treq::NOT_SPECIFIED,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: trsvcid.into(),
        subnqn: subnqn.into(),
        traddr: traddr.into(),
        tsas: vec![0; 256],
        rdma_qptype: 0,
        rdma_prtype: 0,
        rdma_cms: 0,
        rdma_pkey: 0,
        tcp_sectype: 0,
    }
}

fn nvme(subnqn: &str, traddr: &str, trsvcid: &str) -> DiscoveryEntry {
    entry(subtype::NVME, subnqn, traddr, trsvcid)
}

fn referral(traddr: &str, trsvcid: &str) -> DiscoveryEntry {
    entry(subtype::REFERRAL, DISCOVERY_NQN, traddr, trsvcid)
}

/// Discovery logs by `traddr:trsvcid`; an address not listed is unreachable.
#[derive(Default)]
struct Script {
    logs: HashMap<String, Vec<DiscoveryEntry>>,
    reads: Mutex<Vec<String>>,
}

impl Script {
    fn with(mut self, at: &str, entries: Vec<DiscoveryEntry>) -> Script {
        let mut all = vec![entry(subtype::CURRENT_DISCOVERY, DISCOVERY_NQN, "x", "1")];
        all.extend(entries);
        self.logs.insert(at.into(), all);
        self
    }

    fn reads(&self) -> Vec<String> {
        self.reads.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl LogReader for Script {
    fn read(&self, addr: &PortAddr, _: &Nqn, _: &Profile) -> Result<DiscoveryLog, Error> {
        let key = format!("{}:{}", addr.traddr, addr.trsvcid);
        if let Ok(mut r) = self.reads.lock() {
            r.push(key.clone());
        }
        let entries = self.logs.get(&key).cloned().ok_or_else(|| {
            Error::Transport(TransportError::Other(format!("{key}: connection refused")))
        })?;
        Ok(DiscoveryLog {
            genctr: 1,
            numrec: entries.len() as u64,
            recfmt: 0,
            entries,
        })
    }
}

use super::walk::LogReader;

fn opts() -> ConnectAllOptions {
    ConnectAllOptions::new(HostIdentity::combine(
        Some(
            Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001")
                .unwrap(),
        ),
        Some([1; 16]),
    ))
}

fn run(script: &Script, starts: &[&str]) -> WalkResult {
    let o = opts();
    let mut s = Vec::new();
    let mut profiles = Vec::new();
    for at in starts {
        let (a, p) = at.split_once(':').unwrap();
        let spec = DiscoverySpec::new("test", "tcp", a, Some(p));
        profiles.push(Profile::resolve(&spec, &o).unwrap());
        s.push((PortAddr::new(trtype::TCP, a, p), DISCOVERY_NQN.to_string()));
    }
    walk(&s, &profiles, &o, script)
}

fn paths(r: &WalkResult, subnqn: &str) -> Vec<String> {
    r.subsystems
        .iter()
        .find(|s| s.subnqn == subnqn)
        .map(|s| {
            s.paths
                .iter()
                .map(|p| format!("{}:{}", p.addr.traddr, p.addr.trsvcid))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn entries_are_grouped_by_subsystem_nqn() {
    let s = Script::default().with(
        "10.0.0.1:8009",
        vec![
            nvme(A, "10.0.0.1", "4420"),
            nvme(B, "10.0.0.1", "4420"),
            nvme(A, "10.0.0.2", "4420"),
            nvme(B, "10.0.0.2", "4420"),
        ],
    );
    let r = run(&s, &["10.0.0.1:8009"]);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let names: Vec<&str> = r.subsystems.iter().map(|s| s.subnqn.as_str()).collect();
    assert_eq!(names, vec![A, B]);
    assert_eq!(paths(&r, A), vec!["10.0.0.1:4420", "10.0.0.2:4420"]);
    assert_eq!(paths(&r, B), vec!["10.0.0.1:4420", "10.0.0.2:4420"]);
    assert!(
        r.skipped.is_empty(),
        "the current discovery entry is not reported"
    );
}

#[test]
fn referrals_are_followed_and_the_same_port_listed_twice_is_one_path() {
    let s = Script::default()
        .with(
            "10.0.0.1:8009",
            vec![nvme(A, "10.0.0.1", "4420"), referral("10.0.0.2", "8009")],
        )
        .with(
            "10.0.0.2:8009",
            vec![nvme(A, "10.0.0.2", "4420"), nvme(A, "10.0.0.1", "4420")],
        );
    let r = run(&s, &["10.0.0.1:8009"]);
    assert_eq!(paths(&r, A), vec!["10.0.0.1:4420", "10.0.0.2:4420"]);
    assert_eq!(r.visited.len(), 2);
    let via: Vec<String> = r.subsystems[0]
        .paths
        .iter()
        .map(|p| p.found_via.traddr.clone())
        .collect();
    assert_eq!(via, vec!["10.0.0.1", "10.0.0.2"]);
}

#[test]
fn a_referral_loop_ends_and_each_controller_is_read_once() {
    let s = Script::default()
        .with(
            "10.0.0.1:8009",
            vec![nvme(A, "10.0.0.1", "4420"), referral("10.0.0.2", "8009")],
        )
        .with(
            "10.0.0.2:8009",
            vec![referral("10.0.0.1", "8009"), referral("10.0.0.2", "8009")],
        );
    // Starting twice from the same controller reads it once as well.
    let r = run(&s, &["10.0.0.1:8009", "10.0.0.1:8009"]);
    assert_eq!(s.reads(), vec!["10.0.0.1:8009", "10.0.0.2:8009"]);
    assert_eq!(paths(&r, A), vec!["10.0.0.1:4420"]);
    assert!(r.problems.is_empty());
}

#[test]
fn a_referral_chain_stops_at_the_depth_limit() {
    let mut s = Script::default();
    // 10.0.1.N refers to 10.0.1.N+1, far past the limit; each lists its own port.
    for n in 0..20 {
        s = s.with(
            &format!("10.0.1.{n}:8009"),
            vec![
                nvme(A, &format!("10.0.1.{n}"), "4420"),
                referral(&format!("10.0.1.{}", n + 1), "8009"),
            ],
        );
    }
    let r = run(&s, &["10.0.1.0:8009"]);
    assert_eq!(
        r.visited.len(),
        MAX_REFERRAL_DEPTH + 1,
        "the start and 8 referrals"
    );
    assert_eq!(paths(&r, A).len(), MAX_REFERRAL_DEPTH + 1);
    assert!(
        r.skipped.iter().any(|k| k.reason.contains("depth limit")),
        "{:?}",
        r.skipped
    );
}

#[test]
fn an_unreachable_referral_is_reported_and_the_rest_is_found() {
    let s = Script::default()
        .with(
            "10.0.0.1:8009",
            vec![
                referral("10.0.0.9", "8009"),
                nvme(A, "10.0.0.1", "4420"),
                referral("10.0.0.2", "8009"),
            ],
        )
        .with("10.0.0.2:8009", vec![nvme(B, "10.0.0.2", "4420")]);
    let r = run(&s, &["10.0.0.1:8009", "10.0.0.7:8009"]);
    assert_eq!(paths(&r, A), vec!["10.0.0.1:4420"]);
    assert_eq!(paths(&r, B), vec!["10.0.0.2:4420"]);
    let msgs: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].contains("tcp traddr=10.0.0.9,trsvcid=8009")
            && msgs[0].contains("referred to by tcp traddr=10.0.0.1,trsvcid=8009")
            && msgs[0].contains("connection refused"),
        "{}",
        msgs[0]
    );
    assert!(
        msgs[1].contains("10.0.0.7") && msgs[1].contains("(test)"),
        "{}",
        msgs[1]
    );
}

#[test]
fn entries_this_host_does_not_use_are_skipped_with_a_reason() {
    let mut rdma = nvme(B, "10.0.0.1", "4420");
    rdma.trtype = trtype::RDMA;
    let mut fc = nvme(B, "nn-0x1:pn-0x2", "");
    fc.adrfam = adrfam::FC;
    let mut dup = referral("10.0.0.5", "8009");
    dup.eflags = eflags::DUPRETINFO;
    let s = Script::default().with(
        "10.0.0.1:8009",
        vec![rdma, fc, dup, nvme(A, "10.0.0.1", "4420")],
    );
    let r = run(&s, &["10.0.0.1:8009"]);
    assert_eq!(r.subsystems.len(), 1);
    let reasons: Vec<&str> = r.skipped.iter().map(|k| k.reason.as_str()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("transport rdma differs"));
    assert!(reasons[1].contains("address family"));
    assert!(reasons[2].contains("duplicate"));
    assert_eq!(
        s.reads(),
        vec!["10.0.0.1:8009"],
        "the duplicate referral is not read"
    );
}

#[test]
fn tls_is_required_only_where_the_entry_says_so() {
    let mut e = nvme(A, "10.0.0.1", "4420");
    e.tcp_sectype = tcp_sectype::TLS13;
    e.treq = treq::REQUIRED;
    let s = Script::default().with("10.0.0.1:8009", vec![e.clone()]);
    let r = run(&s, &["10.0.0.1:8009"]);
    assert!(r.subsystems[0].paths[0].requires_tls());
    e.treq = treq::NOT_REQUIRED;
    let s = Script::default().with("10.0.0.1:8009", vec![e]);
    let r = run(&s, &["10.0.0.1:8009"]);
    assert!(!r.subsystems[0].paths[0].requires_tls());
}

/// A connector that makes no fabric: a subsystem without a usable path is reported.
struct NoFabric;

impl Connector for NoFabric {
    fn fabric(
        &self,
        addr: &PortAddr,
        _: &str,
        _: &Profile,
        _: bool,
    ) -> Result<std::sync::Arc<dyn Fabric>, Error> {
        Err(Error::Transport(TransportError::Other(format!(
            "{addr}: no route"
        ))))
    }
}

#[test]
fn a_subsystem_without_a_usable_path_is_a_problem_not_a_panic() {
    let found = FoundSubsystem {
        subnqn: A.into(),
        paths: vec![SubsystemPath {
            addr: PortAddr::new(trtype::TCP, "10.0.0.1", "4420"),
            adrfam: adrfam::IPV4,
            portid: 1,
            treq: 0,
            tcp_sectype: 0,
            found_via: PortAddr::new(trtype::TCP, "10.0.0.1", "8009"),
        }],
        profile: 0,
    };
    let o = opts();
    let p = Profile::resolve(&DiscoverySpec::new("t", "tcp", "10.0.0.1", None), &o).unwrap();
    let e = connect_subsystem(&found, &p, &o, &NoFabric).unwrap_err();
    assert!(
        e.to_string().contains(A) && e.to_string().contains("no route"),
        "{e}"
    );
    // And connect_all with nothing reachable reports, connects nothing, fails.
    let r = connect_all(
        &[DiscoverySpec::new("t:1", "tcp", "10.0.0.1", None)],
        &o,
        &NoFabric,
    );
    assert!(!r.is_success());
    assert_eq!(r.problems.len(), 1);
}
