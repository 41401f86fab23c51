//! DH-HMAC-CHAP end to end: our host against our target over loopback (the NVMe/RDMA
//! data path on the software provider) and NVMe/TCP, every hash function and DH group,
//! uni- and bidirectional; then a table of hostile or broken exchanges driven by hand
//! on a raw queue, each of which must end only that host's controller, with the
//! reason in the Failure1 it gets, while another host still authenticates.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::auth::msg::{Challenge, Message, Negotiate, Reply};
use nvmf_common::auth::{DhGroup, DhchapSecret, FailureReason, HashId, HostAuth, HostKeys};
use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::fabrics::{authreq, reg};
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::error::Error;
use nvmf_initiator::queue::Queue;
use nvmf_initiator::transport::{DataDir, Fabric};
use nvmf_target::config::{Config, HostConfig, KeyText};
use nvmf_tests::{config, exec, raw_queue, start, start_tcp, write_read_verify, TEST_HOSTID};

fn host(n: &str) -> Nqn {
    Nqn::new(format!("nqn.2014-08.io.nvmf-rs:auth-{n}")).unwrap()
}

fn key(t: Option<HashId>, len: usize) -> DhchapSecret {
    DhchapSecret::generate(t, len).unwrap()
}

/// A keyed host entry allowing exactly `hash` and `group`.
fn entry(nqn: &Nqn, k: &HostKeys, hashes: &[HashId], groups: &[DhGroup]) -> HostConfig {
    let mut h = HostConfig::new(nqn.clone());
    h.dhchap_key = Some(KeyText::new(&k.host_key.to_interchange()));
    h.dhchap_ctrl_key = k
        .ctrl_key
        .as_ref()
        .map(|c| KeyText::new(&c.to_interchange()));
    h.dhchap_hash = hashes.iter().map(|x| x.name().to_string()).collect();
    h.dhchap_dhgroup = groups.iter().map(|x| x.name().to_string()).collect();
    h
}

/// A config whose subsystem admits only `hosts` (which must authenticate).
fn keyed(hosts: Vec<HostConfig>) -> Config {
    let mut c = config(&["ram:16M"]);
    // A stalled exchange ends after 1 s (the default is 30 s).
    c.transport.auth_timeout_ms = 1000;
    let s = &mut c.subsystems[0];
    s.allow_any_host = false;
    s.allowed_hosts = hosts.iter().map(|h| h.nqn.clone()).collect();
    c.hosts = hosts;
    c.validate().unwrap();
    c
}

fn opts(nqn: &Nqn, sub: &Nqn, keys: Option<HostKeys>) -> ConnectOptions {
    let mut o = ConnectOptions::new(sub.clone(), nqn.clone(), TEST_HOSTID);
    o.nr_io_queues = 2;
    o.queue_size = 32;
    o.command_timeout = Duration::from_secs(10);
    o.dhchap = keys;
    o
}

struct Combo {
    nqn: Nqn,
    keys: HostKeys,
    what: String,
}

fn matrix() -> Vec<Combo> {
    let mut v = Vec::new();
    for h in HashId::ALL {
        for g in DhGroup::ALL {
            for bidi in [false, true] {
                v.push(Combo {
                    nqn: host(&format!("{}-{}-{bidi}", h.id(), g.id())),
                    keys: HostKeys {
                        host_key: key(Some(h), h.digest_len()),
                        ctrl_key: bidi.then(|| key(None, 48)),
                    },
                    what: format!("{h} {g} bidirectional={bidi}"),
                });
            }
        }
    }
    v
}

fn matrix_config(m: &[Combo]) -> Config {
    let hosts = m
        .iter()
        .map(|c| {
            let (h, g) = parse_what(&c.what);
            entry(&c.nqn, &c.keys, &[h], &[g])
        })
        .collect();
    keyed(hosts)
}

fn parse_what(w: &str) -> (HashId, DhGroup) {
    let mut it = w.split(' ');
    let h = HashId::from_name(it.next().unwrap()).unwrap();
    let g = DhGroup::from_name(it.next().unwrap()).unwrap();
    (h, g)
}

fn run_matrix(fabric: &Arc<dyn Fabric>, sub: &Nqn, m: &[Combo]) {
    for c in m {
        let mut ctrl = Controller::connect(fabric.clone(), opts(&c.nqn, sub, Some(c.keys.clone())))
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        write_read_verify(&mut ctrl, 4096, 4, 8);
        ctrl.shutdown().unwrap();
    }
}

#[test]
fn every_hash_group_and_direction_over_loopback() {
    let m = matrix();
    let env = start(&matrix_config(&m));
    run_matrix(&env.fabric, &env.nqn, &m);
}

#[test]
fn every_hash_group_and_direction_over_tcp() {
    let m = matrix();
    let env = start_tcp(&matrix_config(&m), Default::default());
    run_matrix(&env.fabric, &env.nqn, &m);
}

/// One keyed host `a` (bidirectional capable) and one more, `b`, for "others unaffected".
struct Two {
    env: nvmf_tests::Env,
    a: HostKeys,
    b: HostKeys,
}

fn two() -> Two {
    let a = HostKeys {
        host_key: key(Some(HashId::Sha256), 32),
        ctrl_key: Some(key(Some(HashId::Sha384), 48)),
    };
    let b = HostKeys {
        host_key: key(None, 64),
        ctrl_key: None,
    };
    let cfg = keyed(vec![
        entry(&host("a"), &a, &HashId::ALL, &[DhGroup::Ffdhe2048]),
        entry(&host("b"), &b, &HashId::ALL, &DhGroup::ALL),
    ]);
    Two {
        env: start(&cfg),
        a,
        b,
    }
}

impl Two {
    /// Host b still gets in and does I/O.
    fn b_still_authenticates(&self) {
        let mut c = Controller::connect(
            self.env.fabric.clone(),
            opts(&host("b"), &self.env.nqn, Some(self.b.clone())),
        )
        .unwrap_or_else(|e| panic!("second host: {e}"));
        write_read_verify(&mut c, 4096, 2, 4);
        c.shutdown().unwrap();
    }

    fn connect_a(&self, keys: Option<HostKeys>) -> Result<Controller, Error> {
        Controller::connect(
            self.env.fabric.clone(),
            opts(&host("a"), &self.env.nqn, keys),
        )
    }
}

fn auth_err(r: Result<Controller, Error>) -> String {
    match r {
        Err(Error::Auth(m)) => m,
        Err(e) => panic!("expected an authentication error, got {e}"),
        Ok(_) => panic!("connected without authenticating"),
    }
}

#[test]
fn no_key_is_refused() {
    let t = two();
    let m = auth_err(t.connect_a(None));
    assert!(m.contains("requires DH-HMAC-CHAP"), "{m}");
    t.b_still_authenticates();
}

#[test]
fn wrong_key_is_refused() {
    let t = two();
    let mut k = t.a.clone();
    k.host_key = key(Some(HashId::Sha256), 32);
    let m = auth_err(t.connect_a(Some(k)));
    assert!(
        m.contains("refused") && m.contains("authentication failed"),
        "{m}"
    );
    t.b_still_authenticates();
}

#[test]
fn wrong_controller_key_is_refused_by_the_host() {
    let t = two();
    let mut k = t.a.clone();
    k.ctrl_key = Some(key(Some(HashId::Sha384), 48));
    let m = auth_err(t.connect_a(Some(k)));
    assert!(m.contains("wrong controller key"), "{m}");
    t.b_still_authenticates();
}

#[test]
fn controller_key_not_configured_is_refused() {
    let t = two();
    let k = HostKeys {
        host_key: t.b.host_key.clone(),
        ctrl_key: Some(key(None, 32)),
    };
    let r = Controller::connect(t.env.fabric.clone(), opts(&host("b"), &t.env.nqn, Some(k)));
    let m = auth_err(r);
    assert!(m.contains("refused"), "{m}");
    t.b_still_authenticates();
}

#[test]
fn reauthentication_on_a_live_controller() {
    let t = two();
    let mut ctrl = t.connect_a(Some(t.a.clone())).unwrap();
    let fabric = t.env.fabric.clone();
    let o = ctrl.options().clone();
    let mut qs = ctrl.take_io_queues();
    for q in &mut qs {
        let qid = q.qid();
        nvmf_initiator::controller::auth::authenticate(fabric.as_ref(), q, &o, qid, &t.a).unwrap();
    }
    drop(qs);
    ctrl.shutdown().unwrap();
}

// ---- Hand-driven exchanges on a raw admin queue ----

/// A raw admin queue connected as host `a` (no authentication run yet).
fn raw_admin(t: &Two) -> Queue {
    raw_admin_kato(t, 0)
}

/// [`raw_admin`] with keep-alive timeout `kato_ms`.
fn raw_admin_kato(t: &Two, kato_ms: u32) -> Queue {
    let mut q = raw_queue(&t.env, 0, 32);
    let data = command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, &t.env.nqn, &host("a"));
    let buf = t.env.fabric.alloc(data.len()).unwrap();
    assert!(buf.write_at(0, &data));
    let c = exec(
        &mut q,
        command::connect(Qid::ADMIN, 31, kato_ms),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(c.status.is_success(), "{}", c.status);
    assert_ne!(
        c.dw0 & authreq::ATR,
        0,
        "Connect must ask for authentication"
    );
    q
}

fn send(t: &Two, q: &mut Queue, m: &[u8]) -> nvmf_common::wire::status::Status {
    let buf = t.env.fabric.alloc(m.len()).unwrap();
    assert!(buf.write_at(0, m));
    exec(
        q,
        command::auth(true, m.len() as u32),
        Some(&buf),
        DataDir::ToCtrl,
    )
    .status
}

fn receive(t: &Two, q: &mut Queue) -> Message {
    let buf = t.env.fabric.alloc(4096).unwrap();
    let c = exec(q, command::auth(false, 4096), Some(&buf), DataDir::FromCtrl);
    assert!(c.status.is_success(), "{}", c.status);
    let mut out = vec![0u8; 4096];
    assert!(buf.read_at(0, &mut out));
    Message::decode(&out).unwrap()
}

/// Sends `m`, then expects Failure1 with `reason`; the queue then ends.
fn expect_failure(t: &Two, q: &mut Queue, m: &[u8], reason: FailureReason) {
    let st = send(t, q, m);
    assert!(
        st.is_success(),
        "the Authentication Send itself completes: {st}"
    );
    match receive(t, q) {
        Message::Failure1(f) => assert_eq!(f.reason, reason),
        other => panic!("expected Failure1 ({reason}), got {}", other.name()),
    }
    // The controller ended: the queue is closed (or commands fail).
    let c = q.execute(
        command::property_get(reg::CSTS),
        None,
        DataDir::None,
        Duration::from_secs(3),
    );
    assert!(
        c.map(|c| !c.status.is_success()).unwrap_or(true),
        "queue still serves after a failed authentication"
    );
    t.b_still_authenticates();
}

fn negotiate(tid: u16, hashes: &[u8], groups: &[u8]) -> Vec<u8> {
    Message::Negotiate(Negotiate {
        tid,
        sc_c: 0,
        hashes: hashes.to_vec(),
        dhgroups: groups.to_vec(),
    })
    .encode()
}

/// Negotiates with host `a`'s policy (ffdhe2048) and returns the Challenge.
fn challenge(t: &Two, q: &mut Queue, tid: u16) -> Challenge {
    assert!(send(t, q, &negotiate(tid, &[1, 2, 3], &[0, 1, 2, 3, 4, 5])).is_success());
    match receive(t, q) {
        Message::Challenge(c) => c,
        other => panic!("expected a Challenge, got {}", other.name()),
    }
}

#[test]
fn commands_before_authentication_get_authentication_required() {
    let t = two();
    let mut q = raw_admin(&t);
    let c = exec(&mut q, command::property_get(reg::CAP), None, DataDir::None);
    assert!(
        c.status
            .is(Sct::CommandSpecific, cmd_specific::AUTH_REQUIRED)
            && c.status.dnr,
        "{}",
        c.status
    );
    t.b_still_authenticates();
}

#[test]
fn message_too_short() {
    let t = two();
    let mut q = raw_admin(&t);
    expect_failure(&t, &mut q, &[0, 0, 0, 0], FailureReason::IncorrectPayload);
}

#[test]
fn transfer_too_long_is_refused_by_the_command() {
    let t = two();
    let mut q = raw_admin(&t);
    let big = vec![0u8; nvmf_common::auth::MAX_TRANSFER_LEN as usize + 4];
    let st = send(&t, &mut q, &big);
    assert!(
        st.is(Sct::Generic, generic::INVALID_FIELD) && st.dnr,
        "{st}"
    );
    // Nothing was consumed: the exchange still works on this queue.
    let c = challenge(&t, &mut q, 3);
    assert_eq!(c.tid, 3);
}

#[test]
fn reply_before_challenge() {
    let t = two();
    let mut q = raw_admin(&t);
    let r = Message::Reply(Reply {
        tid: 0,
        response: vec![0; 32],
        challenge: None,
        seqnum: 0,
        dh_value: vec![],
    })
    .encode();
    expect_failure(&t, &mut q, &r, FailureReason::IncorrectMessage);
}

#[test]
fn success2_unasked() {
    let t = two();
    let mut q = raw_admin(&t);
    expect_failure(
        &t,
        &mut q,
        &Message::Success2 { tid: 0 }.encode(),
        FailureReason::IncorrectMessage,
    );
}

#[test]
fn unknown_hash_ids() {
    let t = two();
    let mut q = raw_admin(&t);
    expect_failure(
        &t,
        &mut q,
        &negotiate(1, &[9, 0xFF], &[1]),
        FailureReason::HashUnusable,
    );
}

#[test]
fn unknown_dh_group_ids() {
    let t = two();
    let mut q = raw_admin(&t);
    expect_failure(
        &t,
        &mut q,
        &negotiate(1, &[1], &[6, 0xEE]),
        FailureReason::DhGroupUnusable,
    );
}

/// A genuine host computes the Reply to `c`, then `f` damages it.
fn reply_for(t: &Two, c: &Challenge, f: impl FnOnce(&mut Reply)) -> Vec<u8> {
    let mut h = HostAuth::new(t.a.clone(), host("a").as_str(), t.env.nqn.as_str(), c.tid);
    let bytes = h
        .on_challenge(&Message::Challenge(c.clone()).encode())
        .unwrap();
    let Message::Reply(mut r) = Message::decode(&bytes).unwrap() else {
        unreachable!()
    };
    f(&mut r);
    Message::Reply(r).encode()
}

#[test]
fn wrong_transaction_id() {
    let t = two();
    let mut q = raw_admin(&t);
    let c = challenge(&t, &mut q, 5);
    let r = reply_for(&t, &c, |r| r.tid = 6);
    expect_failure(&t, &mut q, &r, FailureReason::IncorrectPayload);
}

#[test]
fn dh_value_of_the_wrong_length() {
    let t = two();
    let mut q = raw_admin(&t);
    let c = challenge(&t, &mut q, 5);
    let r = reply_for(&t, &c, |r| {
        r.dh_value.pop();
    });
    expect_failure(&t, &mut q, &r, FailureReason::IncorrectPayload);
}

#[test]
fn replayed_reply() {
    let t = two();
    let mut q = raw_admin(&t);
    let c = challenge(&t, &mut q, 5);
    let r = reply_for(&t, &c, |_| {});
    assert!(send(&t, &mut q, &r).is_success());
    assert!(matches!(receive(&t, &mut q), Message::Success1(_)));
    // Success2 is still expected (bidirectional); the same Reply again is out of step.
    expect_failure(&t, &mut q, &r, FailureReason::IncorrectMessage);
}

#[test]
fn reply_replayed_into_a_new_transaction() {
    let t = two();
    let mut q = raw_admin(&t);
    let c = challenge(&t, &mut q, 5);
    let old = reply_for(&t, &c, |_| {});
    // The host restarts; the old Reply does not answer the new challenge.
    let c2 = challenge(&t, &mut q, 5);
    assert_ne!(c.challenge, c2.challenge);
    expect_failure(&t, &mut q, &old, FailureReason::Failed);
}

#[test]
fn host_that_stops_mid_exchange_is_ended_by_the_deadline() {
    let t = two();
    // transport.auth_timeout_ms is 1 s here: the transaction may stall that long.
    let mut q = raw_admin_kato(&t, 1000);
    let _ = challenge(&t, &mut q, 9);
    std::thread::sleep(Duration::from_millis(2500));
    let r = q.execute(
        command::property_get(reg::CSTS),
        None,
        DataDir::None,
        Duration::from_secs(3),
    );
    assert!(
        r.map(|c| !c.status.is_success()).unwrap_or(true),
        "stalled exchange still open"
    );
    t.b_still_authenticates();
}
