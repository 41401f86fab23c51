//! Host-side robustness (issue 6, point 5): after a lost connection the host
//! reconnects with back-off and retries or fails the interrupted work per policy; past
//! ctrl-loss-tmo it gives up; nothing hangs.

use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::status::{cmd_specific, Sct};
use nvmf_initiator::reconnect::{connect_with_retry, ReconnectPolicy, RetryPolicy, Session};
use nvmf_target::config::Config;
use nvmf_tests::ops_support::{free_port, options_as, start_live, LiveTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:reconnect";

fn yaml(port: Option<u16>, hosts: &str) -> String {
    let ports = match port {
        Some(p) => format!(
            "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {p}, subsystems: [{SUB}] }}\n"
        ),
        None => "ports: []\n".into(),
    };
    format!(
        "{ports}subsystems:\n  - nqn: {SUB}\n    {hosts}\n    namespaces: [{{ nsid: 1, device_path: \"ram:8M\" }}]\n"
    )
}

fn cfg(text: &str) -> Config {
    Config::from_yaml_str(text, "<test>").unwrap_or_else(|e| panic!("{e}"))
}

fn policy(delay_ms: u64, tmo_ms: u64, retry: RetryPolicy) -> ReconnectPolicy {
    ReconnectPolicy {
        reconnect_delay: Duration::from_millis(delay_ms),
        ctrl_loss_tmo: Some(Duration::from_millis(tmo_ms)),
        retry,
    }
}

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

fn session(t: &LiveTarget, p: ReconnectPolicy) -> Session {
    let mut o = options_as(1, &sub(), 1, 0);
    o.command_timeout = Duration::from_secs(2);
    o.connect_timeout = Duration::from_millis(500);
    Session::connect(t.fabric(1), o, p).unwrap_or_else(|e| panic!("{e}"))
}

/// Takes the port away (its controllers end) and waits until the connection is cut.
fn drop_port(t: &LiveTarget) {
    t.live
        .apply(cfg(&yaml(None, "allow_any_host: true")))
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(300));
}

fn nsze(c: &mut nvmf_initiator::Controller) -> Result<u64, nvmf_initiator::Error> {
    c.identify_namespace(Nsid(1))
        .map(|d| u64::from_le_bytes(d[0..8].try_into().unwrap_or_default()))
}

#[test]
fn reconnects_with_back_off_and_retries_the_interrupted_command() {
    let port = free_port();
    let t = start_live(&yaml(Some(port), "allow_any_host: true"), None);
    let mut s = session(&t, policy(100, 10_000, RetryPolicy::Retry));
    assert_eq!(
        s.run(nsze).unwrap_or_else(|e| panic!("{e}")),
        (8 << 20) / 512
    );

    drop_port(&t);
    let live = t.live.clone();
    let back = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        live.apply(cfg(&yaml(Some(port), "allow_any_host: true")))
    });
    let started = Instant::now();
    let n = s
        .run(nsze)
        .unwrap_or_else(|e| panic!("retry after reconnect: {e}"));
    assert_eq!(n, (8 << 20) / 512);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it waited for the port"
    );
    assert_eq!(s.reconnects(), 1);
    back.join()
        .unwrap_or_else(|_| panic!("thread"))
        .unwrap_or_else(|e| panic!("{e}"));
    s.shutdown().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn gives_up_after_ctrl_loss_tmo_without_hanging() {
    let t = start_live(&yaml(Some(free_port()), "allow_any_host: true"), None);
    let mut s = session(&t, policy(200, 1500, RetryPolicy::Retry));
    drop_port(&t);
    let started = Instant::now();
    let err = s
        .run(nsze)
        .err()
        .unwrap_or_else(|| panic!("no target: must fail"));
    let took = started.elapsed();
    assert!(err.to_string().contains("ctrl-loss-tmo"), "{err}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(6),
        "{took:?}"
    );
    // Later calls fail at once.
    let t2 = Instant::now();
    assert!(s.run(nsze).is_err());
    assert!(t2.elapsed() < Duration::from_secs(1));
}

#[test]
fn fail_policy_reports_the_interrupted_command_and_recovers() {
    let port = free_port();
    let t = start_live(&yaml(Some(port), "allow_any_host: true"), None);
    let mut s = session(&t, policy(100, 10_000, RetryPolicy::Fail));
    drop_port(&t);
    t.live
        .apply(cfg(&yaml(Some(port), "allow_any_host: true")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(s.run(nsze).is_err(), "the interrupted command is reported");
    assert_eq!(
        s.run(nsze).unwrap_or_else(|e| panic!("{e}")),
        (8 << 20) / 512
    );
    assert_eq!(s.reconnects(), 1);
}

#[test]
fn a_refused_host_is_not_retried() {
    let t = start_live(&yaml(Some(free_port()), "allowed_hosts: []"), None);
    let started = Instant::now();
    let err = connect_with_retry(
        &t.fabric(1),
        &options_as(1, &sub(), 1, 0),
        &policy(200, 10_000, RetryPolicy::Retry),
    )
    .err()
    .unwrap_or_else(|| panic!("refused host connected"));
    let st = err.status().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(
        (st.sct, st.sc),
        (Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST)
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
