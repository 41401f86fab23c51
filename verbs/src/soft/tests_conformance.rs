//! The provider-neutral properties (`verbs::conformance`), each run as its own test on a
//! fresh soft fabric. The rdma-sys provider runs the same functions in the interop lab.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::tests::T;
use super::SoftDevice;
use crate::conformance::{self, Fabric, Verdict, PROPERTIES};

/// A fresh fabric. The RNR timeout is long: conformance properties always post
/// receives in time, except the one that checks the retry waits for a late one.
fn soft_fabric() -> Fabric {
    let dev = SoftDevice::new();
    dev.set_rnr_timeout(T);
    let n = AtomicU32::new(0);
    Fabric::new(dev, move || {
        format!("conformance-{}", n.fetch_add(1, Ordering::Relaxed))
    })
    .with_timeout(T)
    // Work completes synchronously in the posting thread: nothing comes late.
    .with_grace(Duration::ZERO)
}

fn check(name: &str) {
    let p = conformance::property(name).expect("a conformance property");
    assert_eq!(conformance::run(&soft_fabric(), p), Verdict::Pass, "{name}");
}

macro_rules! soft_conformance {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*
        const TESTED: &[&str] = &[$(stringify!($name)),*];
    };
}

soft_conformance![
    cm_accept_exchanges_private_data,
    cm_reject_returns_private_data,
    cm_failed_accept_rejects_with_reject_data,
    cm_dropped_request_is_refused,
    cm_connect_without_listener_fails,
    registration_keys_and_rights,
    send_recv_delivers_bytes_and_byte_len,
    rdma_write_lands_bytes,
    rdma_read_lands_bytes,
    rc_orders_unsignaled_write_before_send,
    rnr_retry_delivers_to_a_late_receive,
    wrong_rkey_is_remote_access_error,
    out_of_bounds_write_is_remote_access_error,
    read_below_region_is_remote_access_error,
    missing_remote_write_is_remote_access_error,
    missing_remote_read_is_remote_access_error,
    deregistered_rkey_is_remote_access_error,
    disconnect_flushes_receives,
    dropped_qp_disconnects_the_peer,
    send_with_invalidate_revokes_the_rkey,
    cq_event_fd_is_armed_one_shot,
    cq_wait_wakes_on_completion,
    srq_two_qps_share_receives,
    srq_reposted_receives_are_reused,
    srq_survives_a_destroyed_qp,
];

#[test]
fn every_property_runs_on_the_soft_provider() {
    let all: Vec<&str> = PROPERTIES.iter().map(|p| p.name).collect();
    assert_eq!(all, TESTED, "soft_conformance! must list every property");
    let f = soft_fabric();
    for p in PROPERTIES {
        assert!(
            p.needs.and_then(|n| f.lacks(n)).is_none(),
            "the soft provider must offer everything"
        );
    }
}

/// The suite can fail: a provider that breaks a property is caught. Here the
/// "provider" is a fabric whose listen addresses collide, so the second
/// connection of a property cannot listen.
#[test]
fn a_broken_fabric_fails() {
    let f = Fabric::new(SoftDevice::new(), || "same".to_string()).with_timeout(T);
    let p = conformance::property("cm_accept_exchanges_private_data").expect("property");
    match conformance::run(&f, p) {
        Verdict::Fail(why) => assert!(why.contains("listen"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    let f = f.lacking(conformance::Need::RemoteInvalidate, "not here");
    let p = conformance::property("send_with_invalidate_revokes_the_rkey").expect("property");
    assert_eq!(conformance::run(&f, p), Verdict::NotApplicable("not here"));
}
