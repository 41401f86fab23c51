//! NVMe/TCP over TLS 1.3 (issue 13), our host against our target on 127.0.0.1, with
//! the records in user space (OpenSSL): data with and without digests, what discovery
//! reports, and every way a connection is refused — a plain ICReq where TLS is
//! required, a wrong PSK, an unknown identity, a Connect for another pair than the
//! identity names, TLS 1.2, a stalled handshake — each closing only that connection
//! while a good host keeps being served. Keys change live.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::tls::ConfiguredPsk;
use nvmf_common::types::Nqn;
use nvmf_common::wire::log::{tcp_sectype, treq};
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::discovery::discover;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions, TlsKey};
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::Config;
use nvmf_tests::ops_support::{free_port, start_live};
use nvmf_tests::{
    assert_serves, hostnqn, start_tcp_with, write_read_verify, TcpEnv, TEST_HOSTID, TEST_HOSTNQN,
    TEST_NQN,
};

/// Keys written by nvme-cli 2.13 (`nvme gen-tls-key`), SHA-256 and SHA-384.
const FIXTURE: &str = include_str!("../common/tests/fixtures/tls-psk-nvme-cli-2.13.txt");
const OTHER_NQN: &str = "nqn.2024-01.io.nvmf-rs:other";

fn key(i: usize) -> &'static str {
    FIXTURE.lines().nth(i * 3).unwrap()
}

fn yaml(treq: &str, host_key: &str, port: u16) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", tsas: tls1.3{treq}, \
         subsystems: [{TEST_NQN}, {OTHER_NQN}] }}\n\
         subsystems:\n  - nqn: {TEST_NQN}\n    allowed_hosts: [{TEST_HOSTNQN}]\n    \
         namespaces: [ {{ nsid: 1, device_path: \"ram:64M\" }} ]\n  \
         - nqn: {OTHER_NQN}\n    allow_any_host: true\n    namespaces: [ {{ nsid: 1, device_path: \"ram:16M\" }} ]\n\
         hosts:\n  - nqn: {TEST_HOSTNQN}\n    tls_key: \"{host_key}\"\n"
    )
}

fn tls_opts(k: &str, subnqn: &str, hdr: bool, data: bool) -> TcpOptions {
    TcpOptions {
        hdr_digest: hdr,
        data_digest: data,
        tls: Some(Arc::new(TlsKey {
            psk: k.parse::<ConfiguredPsk>().unwrap(),
            hostnqn: TEST_HOSTNQN.into(),
            subnqn: subnqn.into(),
        })),
        ..TcpOptions::default()
    }
}

fn start(treq: &str, host: TcpOptions, handshake: Duration) -> TcpEnv {
    let cfg = Config::from_yaml_str(&yaml(treq, key(0), 4420), "<tls test>").unwrap();
    let t = nvmf_target::tcp::TcpOptions {
        tls_handshake_timeout: handshake,
        ..Default::default()
    };
    start_tcp_with(&cfg, host, t)
}

fn fabric(env: &TcpEnv, o: TcpOptions) -> Arc<dyn Fabric> {
    Arc::new(TcpFabric::new(env.addr, o))
}

fn connect(f: &Arc<dyn Fabric>, subnqn: &str) -> Result<Controller, nvmf_initiator::error::Error> {
    let mut o = ConnectOptions::new(Nqn::new(subnqn).unwrap(), hostnqn(), TEST_HOSTID);
    o.nr_io_queues = 1;
    o.queue_size = 64;
    o.command_timeout = Duration::from_secs(10);
    o.connect_timeout = Duration::from_secs(5);
    Controller::connect(f.clone(), o)
}

fn good(env: &TcpEnv) -> Arc<dyn Fabric> {
    fabric(env, tls_opts(key(0), TEST_NQN, false, false))
}

#[test]
fn tls_4k_qd32_without_digests() {
    let env = start(
        "",
        tls_opts(key(0), TEST_NQN, false, false),
        Duration::from_secs(10),
    );
    let mut ctrl = connect(&env.fabric, TEST_NQN).unwrap();
    write_read_verify(&mut ctrl, 4096, 32, 1024);
}

#[test]
fn tls_128k_and_1m_with_digests() {
    let env = start(
        "",
        tls_opts(key(0), TEST_NQN, true, true),
        Duration::from_secs(10),
    );
    let mut ctrl = connect(&env.fabric, TEST_NQN).unwrap();
    write_read_verify(&mut ctrl, 128 * 1024, 16, 128);
    let mut ctrl = connect(&env.fabric, TEST_NQN).unwrap();
    write_read_verify(&mut ctrl, 1 << 20, 4, 16);
}

#[test]
fn sha384_key_carries_data() {
    let cfg = Config::from_yaml_str(&yaml("", key(1), 4420), "<tls test>").unwrap();
    let env = start_tcp_with(
        &cfg,
        tls_opts(key(1), TEST_NQN, false, true),
        nvmf_target::tcp::TcpOptions::default(),
    );
    let mut ctrl = connect(&env.fabric, TEST_NQN).unwrap();
    write_read_verify(&mut ctrl, 8192, 8, 64);
}

#[test]
fn discovery_reports_treq_and_tls13() {
    for (t, want) in [
        ("", treq::REQUIRED),
        (", treq: not required", treq::NOT_REQUIRED),
    ] {
        let env = start(t, TcpOptions::default(), Duration::from_secs(10));
        let f = fabric(
            &env,
            tls_opts(key(0), nvmf_common::types::DISCOVERY_NQN, false, false),
        );
        let entries = discover(f, &hostnqn(), TEST_HOSTID, Duration::from_secs(10)).unwrap();
        let e = entries
            .iter()
            .find(|e| e.subnqn == TEST_NQN)
            .expect("the subsystem is listed");
        assert_eq!(e.treq & treq::SECURE_CHANNEL_MASK, want, "treq for {t:?}");
        assert_eq!(e.tcp_sectype, tcp_sectype::TLS13);
    }
}

#[test]
fn plain_icreq_on_a_tls_required_port_is_refused() {
    let env = start("", TcpOptions::default(), Duration::from_secs(10));
    let plain = fabric(&env, TcpOptions::default());
    let e = connect(&plain, TEST_NQN)
        .map(drop)
        .expect_err("plain host refused");
    let e = e.to_string();
    assert!(
        e.contains("closed the connection") || e.contains("reset the connection"),
        "plain host: {e}"
    );
    assert_serves(&good(&env), &Nqn::new(TEST_NQN).unwrap(), 0);
}

#[test]
fn not_required_port_takes_tls_and_plain() {
    let env = start(
        ", treq: not required",
        TcpOptions::default(),
        Duration::from_secs(10),
    );
    let nqn = Nqn::new(TEST_NQN).unwrap();
    assert_serves(&fabric(&env, TcpOptions::default()), &nqn, 0);
    assert_serves(&good(&env), &nqn, 8);
}

#[test]
fn wrong_psk_is_refused() {
    let env = start("", TcpOptions::default(), Duration::from_secs(10));
    // Same host, the other fixture key (another hash, too).
    let bad = fabric(&env, tls_opts(key(1), TEST_NQN, false, false));
    let e = connect(&bad, TEST_NQN)
        .map(drop)
        .expect_err("wrong key refused");
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    // A key of the right hash but other bytes.
    let other = key(0).replace("AAECAwQF", "AAECAwQG");
    if other.parse::<ConfiguredPsk>().is_ok() {
        let e = connect(
            &fabric(&env, tls_opts(&other, TEST_NQN, false, false)),
            TEST_NQN,
        )
        .map(drop)
        .expect_err("wrong key refused");
        assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    }
    assert_serves(&good(&env), &Nqn::new(TEST_NQN).unwrap(), 16);
}

#[test]
fn unknown_identity_is_refused() {
    let env = start("", TcpOptions::default(), Duration::from_secs(10));
    let mut o = tls_opts(key(0), TEST_NQN, false, false);
    if let Some(t) = o.tls.as_mut() {
        Arc::make_mut(t).hostnqn =
            "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff".into();
    }
    let e = connect(&fabric(&env, o), TEST_NQN)
        .map(drop)
        .expect_err("unknown host refused");
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    assert_serves(&good(&env), &Nqn::new(TEST_NQN).unwrap(), 24);
}

#[test]
fn connect_must_match_the_identity() {
    let env = start("", TcpOptions::default(), Duration::from_secs(10));
    // TLS for OTHER_NQN, Connect to TEST_NQN: the handshake succeeds, the Connect not.
    let f = fabric(&env, tls_opts(key(0), OTHER_NQN, false, false));
    let e = connect(&f, TEST_NQN)
        .map(drop)
        .expect_err("mismatched Connect refused");
    assert!(e.to_string().to_lowercase().contains("invalid"), "{e}");
    // The pair the identity names is served.
    connect(&f, OTHER_NQN).unwrap().shutdown().unwrap();
}

#[test]
fn tls12_is_refused() {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
    let env = start("", TcpOptions::default(), Duration::from_secs(10));
    let mut b = SslConnector::builder(SslMethod::tls()).unwrap();
    b.set_max_proto_version(Some(SslVersion::TLS1_2)).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let s = TcpStream::connect(env.addr).unwrap();
    assert!(b.build().connect("target", s).is_err());
    assert_serves(&good(&env), &Nqn::new(TEST_NQN).unwrap(), 32);
}

#[test]
fn stalled_handshake_is_closed() {
    let env = start("", TcpOptions::default(), Duration::from_millis(300));
    let mut s = TcpStream::connect(env.addr).unwrap();
    // Half a TLS record header, then silence.
    s.write_all(&[22, 3]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    let mut b = [0u8; 64];
    let r = s.read(&mut b);
    assert!(
        matches!(r, Ok(0))
            || r.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the target closes a stalled handshake: {r:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_serves(&good(&env), &Nqn::new(TEST_NQN).unwrap(), 40);
}

#[test]
fn keys_change_live() {
    let port = free_port();
    let t = start_live(&yaml("", key(0), port), None);
    let f = |k: &str| -> Arc<dyn Fabric> {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        Arc::new(TcpFabric::new(addr, tls_opts(k, TEST_NQN, false, false)))
    };
    connect(&f(key(0)), TEST_NQN).unwrap().shutdown().unwrap();
    let new = Config::from_yaml_str(&yaml("", key(1), port), "<tls test>").unwrap();
    t.live.apply(new).unwrap();
    assert!(
        connect(&f(key(0)), TEST_NQN).is_err(),
        "the old key no longer works"
    );
    connect(&f(key(1)), TEST_NQN).unwrap().shutdown().unwrap();
}
