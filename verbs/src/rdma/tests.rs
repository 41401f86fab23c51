//! Tests that need no RDMA hardware: conversions, private-data limits, address
//! parsing, and the clean failure of device lookup on a machine without RDMA. The
//! data path on a real device is exercised by the interop suite (`tests/interop`).

use std::time::Duration;

use rdma_sys::{ibv_access_flags, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode};

use super::convert::*;
use super::qp::clamp_caps;
use super::RdmaDevice;
use crate::{Access, QpCaps, SendOp, VerbsError, WcOpcode, WcStatus};

/// IB CM reject reason "consumer defined": the passive side called `rdma_reject`.
const IB_CM_REJ_CONSUMER_DEFINED: i32 = 28;
const LW: u32 = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
const RW: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
const RR: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;

#[test]
fn access_flags_map_to_ibverbs_bits() {
    assert_eq!(ibv_access(Access::empty(), false), 0);
    assert_eq!(ibv_access(Access::LOCAL_WRITE, false), LW);
    assert_eq!(
        ibv_access(
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            false
        ),
        LW | RW | RR
    );
    assert_eq!(ibv_access(Access::REMOTE_READ, false), RR);
    // The numeric values are the ABI's (IBV_ACCESS_* in verbs.h).
    assert_eq!((LW, RW, RR), (1, 2, 4));
}

#[test]
fn iwarp_read_sinks_are_remotely_writable() {
    assert_eq!(ibv_access(Access::LOCAL_WRITE, true), LW | RW);
    // Regions that are not local-write (pure sources) gain nothing.
    assert_eq!(ibv_access(Access::REMOTE_READ, true), RR);
}

#[test]
fn wc_status_conversion() {
    use ibv_wc_status::*;
    let cases = [
        (IBV_WC_SUCCESS, WcStatus::Success),
        (IBV_WC_LOC_LEN_ERR, WcStatus::LocalLengthError),
        (IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtectionError),
        (IBV_WC_WR_FLUSH_ERR, WcStatus::WrFlushError),
        (IBV_WC_REM_INV_REQ_ERR, WcStatus::RemoteInvalidRequest),
        (IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccessError),
        (IBV_WC_RETRY_EXC_ERR, WcStatus::RetryExceeded),
        (IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
        (IBV_WC_LOC_QP_OP_ERR, WcStatus::Other(2)),
        (IBV_WC_BAD_RESP_ERR, WcStatus::Other(7)),
        (IBV_WC_FATAL_ERR, WcStatus::Other(19)),
        (IBV_WC_GENERAL_ERR, WcStatus::Other(21)),
        (999, WcStatus::Other(999)),
    ];
    for (raw, want) in cases {
        assert_eq!(wc_status(raw), want, "ibv_wc_status {raw}");
    }
}

#[test]
fn wc_opcode_conversion() {
    use ibv_wc_opcode::*;
    assert_eq!(wc_opcode(IBV_WC_SEND), WcOpcode::Send);
    assert_eq!(wc_opcode(IBV_WC_RDMA_WRITE), WcOpcode::RdmaWrite);
    assert_eq!(wc_opcode(IBV_WC_RDMA_READ), WcOpcode::RdmaRead);
    assert_eq!(wc_opcode(IBV_WC_RECV), WcOpcode::Recv);
    assert_eq!(wc_opcode(IBV_WC_RECV_RDMA_WITH_IMM), WcOpcode::Recv);
    assert_eq!(wc_opcode(IBV_WC_COMP_SWAP), WcOpcode::Send);
}

#[test]
fn send_opcodes_and_their_fields() {
    use ibv_wr_opcode::*;
    let f = wr_fields(SendOp::Send);
    assert_eq!(
        (f.opcode, f.rdma, f.invalidate_rkey),
        (IBV_WR_SEND, None, None)
    );
    let f = wr_fields(SendOp::SendWithInvalidate { rkey: 0x1234 });
    assert_eq!(
        (f.opcode, f.rdma, f.invalidate_rkey),
        (IBV_WR_SEND_WITH_INV, None, Some(0x1234))
    );
    let f = wr_fields(SendOp::RdmaWrite {
        remote_addr: 0xdead_0000,
        rkey: 7,
    });
    assert_eq!(
        (f.opcode, f.rdma, f.invalidate_rkey),
        (IBV_WR_RDMA_WRITE, Some((0xdead_0000, 7)), None)
    );
    let f = wr_fields(SendOp::RdmaRead {
        remote_addr: 42,
        rkey: 9,
    });
    assert_eq!(
        (f.opcode, f.rdma, f.invalidate_rkey),
        (IBV_WR_RDMA_READ, Some((42, 9)), None)
    );
}

#[test]
fn addresses_parse_in_every_form() {
    assert_eq!(
        parse_addr("10.0.2.15:4420").ok(),
        "10.0.2.15:4420".parse().ok()
    );
    assert_eq!(
        parse_addr("[fe80::1]:4420").ok(),
        "[fe80::1]:4420".parse().ok()
    );
    // The target's `traddr:trsvcid` for an IPv6 traddr has no brackets.
    assert_eq!(
        parse_addr("fe80::1:4420").ok(),
        "[fe80::1]:4420".parse().ok()
    );
    for bad in [
        "",
        "10.0.2.15",
        "10.0.2.15:port",
        "host:4420",
        "10.0.2.15:70000",
        "loopback:1",
    ] {
        assert!(
            matches!(parse_addr(bad), Err(VerbsError::InvalidArgument(_))),
            "{bad:?} must be refused"
        );
    }
}

#[test]
fn sockaddrs_carry_family_port_and_address() {
    let ss = sockaddr(&"10.0.2.15:4420".parse().unwrap());
    assert_eq!(i32::from(ss.ss_family), libc::AF_INET);
    // SAFETY: the storage holds a sockaddr_in (family AF_INET).
    let sin = unsafe { &*(&raw const ss).cast::<libc::sockaddr_in>() };
    assert_eq!(u16::from_be(sin.sin_port), 4420);
    assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 2, 15]);
    let ss = sockaddr(&"[::1]:8009".parse().unwrap());
    assert_eq!(i32::from(ss.ss_family), libc::AF_INET6);
    // SAFETY: the storage holds a sockaddr_in6 (family AF_INET6).
    let sin6 = unsafe { &*(&raw const ss).cast::<libc::sockaddr_in6>() };
    assert_eq!(u16::from_be(sin6.sin6_port), 8009);
    assert_eq!(sin6.sin6_addr.s6_addr[15], 1);
    assert!(is_wildcard(&"0.0.0.0:4420".parse().unwrap()));
    assert!(!is_wildcard(&"10.0.2.15:4420".parse().unwrap()));
}

#[test]
fn private_data_limits_follow_the_cm_messages() {
    // The NVMe/RDMA request (32 bytes) fits a connect; 57 bytes do not.
    assert_eq!(
        check_private_data(&[0; 32], MAX_CONNECT_PRIVATE_DATA, "x"),
        Ok(32)
    );
    assert_eq!(
        check_private_data(&[], MAX_CONNECT_PRIVATE_DATA, "x"),
        Ok(0)
    );
    assert!(matches!(
        check_private_data(&[0; 57], MAX_CONNECT_PRIVATE_DATA, "too long"),
        Err(VerbsError::InvalidArgument("too long"))
    ));
    assert_eq!(
        check_private_data(&[0; 196], MAX_ACCEPT_PRIVATE_DATA, "x"),
        Ok(196)
    );
    assert!(check_private_data(&[0; 197], MAX_ACCEPT_PRIVATE_DATA, "x").is_err());
    // Anything longer than a u8 can say is refused even with a generous limit.
    assert!(check_private_data(&[0; 300], 1000, "x").is_err());
}

#[test]
fn rejects_map_to_the_right_errors() {
    // An NVMe/RDMA reject: recfmt 0, sts 3 (invalid hsqsize), padded by the IB CM REJ.
    let mut rej = vec![0u8; MAX_REJECT_PRIVATE_DATA];
    rej[2] = 3;
    assert_eq!(
        reject_error(IB_CM_REJ_CONSUMER_DEFINED, &rej, "10.0.2.15:4420"),
        VerbsError::Rejected(rej.clone())
    );
    // No listener on that port.
    assert_eq!(
        reject_error(IB_CM_REJ_INVALID_SERVICE_ID, &[0; 148], "10.0.2.15:4421"),
        VerbsError::NoListener("10.0.2.15:4421".into())
    );
    // A reject with no (or all-zero) private data is a plain refusal.
    assert_eq!(
        reject_error(IB_CM_REJ_CONSUMER_DEFINED, &[], "a"),
        VerbsError::ConnectionRefused
    );
    assert_eq!(
        reject_error(IB_CM_REJ_CONSUMER_DEFINED, &[0; 148], "a"),
        VerbsError::ConnectionRefused
    );
}

#[test]
fn accept_depths_are_capped_by_the_device() {
    // The host offers 16 responder resources (our initiator depth) and asks for 4.
    assert_eq!(accept_depths(16, 4, 8, 128), (8, 4));
    assert_eq!(accept_depths(0, 0, 8, 8), (0, 0));
    assert_eq!(clamp_u8(-1), 0);
    assert_eq!(clamp_u8(300), 255);
    assert_eq!(clamp_u8(16), 16);
}

#[test]
fn qp_caps_are_clamped_to_device_limits() {
    let want = QpCaps {
        max_send_wr: 100_000,
        max_recv_wr: 0,
        max_send_sge: 2,
        max_recv_sge: 64,
    };
    let got = clamp_caps(want, 16384, 32);
    assert_eq!(
        got,
        QpCaps {
            max_send_wr: 16384,
            max_recv_wr: 1,
            max_send_sge: 2,
            max_recv_sge: 32
        }
    );
}

#[test]
fn timeouts_in_milliseconds_are_positive() {
    assert_eq!(timeout_ms(Duration::ZERO), 1);
    assert_eq!(timeout_ms(Duration::from_millis(1500)), 1500);
    assert_eq!(timeout_ms(Duration::from_secs(u64::MAX)), i32::MAX);
}

/// Whether this machine has an rdma_cm device node at all.
fn rdma_present() -> bool {
    std::path::Path::new("/dev/infiniband/rdma_cm").exists()
}

#[test]
fn device_lookup_fails_cleanly_without_rdma_or_on_a_foreign_address() {
    // 192.0.2.1 (TEST-NET-1) is never an address of this machine, with or without
    // RDMA; the error must say so rather than crash.
    let e = RdmaDevice::for_local_addr("192.0.2.1:4420").unwrap_err();
    match e {
        VerbsError::NoDevice(msg) => {
            if rdma_present() {
                assert!(msg.contains("192.0.2.1"), "{msg}");
            } else {
                assert!(msg.contains("rdma_cm"), "{msg}");
                assert!(
                    msg.contains("rdma link add"),
                    "the hint names the fix: {msg}"
                );
            }
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
    // Malformed addresses are refused before touching librdmacm.
    assert!(matches!(
        RdmaDevice::for_local_addr("nonsense"),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        RdmaDevice::for_remote_addr("nonsense", Duration::from_millis(100)),
        Err(VerbsError::InvalidArgument(_))
    ));
}

#[test]
fn remote_lookup_and_listing_fail_cleanly_without_rdma() {
    if rdma_present() {
        // With an RDMA stack, listing works; resolution of an unroutable address fails.
        assert!(RdmaDevice::list().is_ok());
        assert!(RdmaDevice::for_remote_addr("192.0.2.1:4420", Duration::from_millis(500)).is_err());
        return;
    }
    assert!(matches!(RdmaDevice::list(), Err(VerbsError::NoDevice(_))));
    assert!(matches!(
        RdmaDevice::for_remote_addr("10.0.2.15:4420", Duration::from_millis(100)),
        Err(VerbsError::NoDevice(m)) if m.contains("rdma_cm")
    ));
}
