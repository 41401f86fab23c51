//! Malformed NVMe/TCP input, one test per case, against the TCP target on 127.0.0.1:
//! a scripted host ([`nvmf_tests::raw_tcp`]) sends PDUs built by the framer's writer
//! and then corrupted by hand, or made by hand outright. Each test asserts the exact
//! outcome (C2HTermReq FES/FEI and the close, a status, or a silent close), that the
//! target released what the connection held (poll group counters), and that a
//! well-behaved host is served afterwards. These are the cases the Linux nvmet-tcp
//! CVEs came from: corrupted ICReq, PDUs before or after initialization, H2CData
//! before its command or past its R2T, inconsistent HLEN/PDO/PLEN/DATAO/DATAL, HLEN
//! 255 with digests, transfer tags 0 and out of range, digest errors, truncation, and
//! peers that stall or vanish mid-PDU.

use nvmf_target::runtime::PortServer;
use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::negotiate::icreq_params;
use nvmf_common::transport::tcp::{encode_icreq, HostConfig};
use nvmf_common::types::{Cntlid, Nsid};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::SQE_LEN;
use nvmf_common::wire::status::{generic, Sct};
use nvmf_common::wire::tcp::{offset, pdu_type, term_fes, DATA_HDR_LEN, ICREQ_LEN};
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_target::tcp::GroupCounters;
use nvmf_tests::raw_tcp::{status_of, with_cid, with_sgl, RawTcp, Rx};
use nvmf_tests::{assert_serves, config, start_tcp, start_tcp_with, TcpEnv};

const BS: u32 = 512;
/// Byte offset of PLEN in the common header (a u32).
const PLEN_AT: usize = offset::PLEN as usize;

fn env() -> TcpEnv {
    start_tcp(&config(&["ram:16M"]), TcpOptions::default())
}

fn digests() -> HostConfig {
    HostConfig {
        header_digest: true,
        data_digest: true,
        ..HostConfig::default()
    }
}

/// Waits until the target's counters satisfy `f`.
fn wait_counters(env: &TcpEnv, what: &str, f: impl Fn(&GroupCounters) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = env.server.counters();
        if f(&c) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After the offending connection is gone: no pool buffer is held and only
/// `live` connections remain; then a well-behaved host is served.
fn assert_recovered(env: &TcpEnv, live: u64) {
    wait_counters(env, "the connection's resources released", |c| {
        c.buffers_in_use == 0 && c.queues == live
    });
    assert_serves(&env.fabric, &env.nqn, 1000);
}

fn set_plen(pdu: &mut [u8], plen: u32) {
    if let Some(p) = pdu.get_mut(PLEN_AT..PLEN_AT + 4) {
        p.copy_from_slice(&plen.to_le_bytes());
    }
}

fn icreq_bytes(cfg: &HostConfig) -> Vec<u8> {
    let mut out = Vec::new();
    encode_icreq(&icreq_params(cfg), &mut out);
    out
}

/// An admin queue and an I/O queue (qid 1) of one controller.
fn pair(env: &TcpEnv, cfg: HostConfig) -> (RawTcp, RawTcp, Cntlid) {
    let mut admin = RawTcp::connect(env.addr, cfg);
    admin.init();
    let cntlid = admin.admin_up(&env.nqn);
    let c = admin.run(
        with_sgl(
            command::set_number_of_queues(2),
            SglDescriptor::transport(0),
        ),
        &[],
    );
    assert!(status_of(&c).is_success());
    let mut io = RawTcp::connect(env.addr, cfg);
    io.init();
    let c = io.io_connect(&env.nqn, cntlid, 1, 31);
    assert!(status_of(&c).is_success(), "{}", status_of(&c));
    (admin, io, cntlid)
}

fn write_sqe(cid: u16, slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let s = command::write(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    with_cid(with_sgl(s, sgl), cid)
}

/// Starts a write of `nlb` blocks through R2T; returns (cid, ttag, R2T length).
fn start_r2t_write(io: &mut RawTcp, slba: u64, nlb: u32) -> (u16, u16, u32) {
    let cid = io.next_cid();
    io.cmd(
        &write_sqe(cid, slba, nlb, SglDescriptor::transport(nlb * BS)),
        &[],
    );
    match io.recv() {
        Rx::R2T {
            cid: c,
            ttag,
            offset: 0,
            length,
        } => {
            assert_eq!(c, cid);
            (cid, ttag, length)
        }
        other => panic!("expected an R2T, got {other:?}"),
    }
}

/// Reads `nlb` blocks at `slba` on `io`.
fn read_back(io: &mut RawTcp, slba: u64, nlb: u32) -> Vec<u8> {
    let cid = io.next_cid();
    let s = command::read(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    io.cmd(
        &with_cid(with_sgl(s, SglDescriptor::transport(nlb * BS)), cid),
        &[],
    );
    let mut out = Vec::new();
    loop {
        match io.recv() {
            Rx::C2H { data, success, .. } => {
                out.extend_from_slice(&data);
                if success {
                    return out;
                }
            }
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{}", status_of(&c));
                return out;
            }
            other => panic!("read: {other:?}"),
        }
    }
}

/// Writes `data` in the capsule at `slba`; asserts success.
fn write_icd(io: &mut RawTcp, slba: u64, data: &[u8]) {
    let cid = io.next_cid();
    let nlb = data.len() as u32 / BS;
    let c = io.run(
        write_sqe(
            cid,
            slba,
            nlb,
            SglDescriptor::in_capsule(0, data.len() as u32),
        ),
        data,
    );
    assert!(status_of(&c).is_success(), "{}", status_of(&c));
}

/// A CapsuleCmd PDU (Keep Alive, no data) as the writer makes it.
fn keep_alive_pdu(h: &RawTcp) -> Vec<u8> {
    let mut out = Vec::new();
    h.writer()
        .capsule_cmd(
            &with_sgl(command::keep_alive(), SglDescriptor::transport(0)),
            &[],
            &mut out,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    out
}

// ---- connection initialization ----------------------------------------------------

#[test]
fn icreq_with_unsupported_pfv() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    let mut b = icreq_bytes(&HostConfig::default());
    b[offset::PFV as usize] = 1;
    h.send(&b);
    let echoed = h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PFV);
    assert_eq!(echoed, b, "the whole ICReq comes back");
    assert_recovered(&env, 0);
}

#[test]
fn icreq_with_hpda_above_31() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    let mut b = icreq_bytes(&HostConfig::default());
    b[offset::HPDA as usize] = 32;
    h.send(&b);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HPDA);
    assert_recovered(&env, 0);
}

#[test]
fn icreq_with_wrong_plen() {
    let env = env();
    for plen in [0u32, 8, 127, 129, 4096, u32::MAX] {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        let mut b = icreq_bytes(&HostConfig::default());
        set_plen(&mut b, plen);
        h.send_lossy(&b);
        h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PLEN);
    }
    assert_recovered(&env, 0);
}

#[test]
fn icreq_with_wrong_hlen_or_pdo() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    let mut b = icreq_bytes(&HostConfig::default());
    b[offset::HLEN as usize] = 255;
    h.send_lossy(&b);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HLEN);
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    let mut b = icreq_bytes(&HostConfig::default());
    b[offset::PDO as usize] = 8;
    h.send_lossy(&b);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PDO);
    assert_recovered(&env, 0);
}

#[test]
fn icreq_truncated_then_close() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    let b = icreq_bytes(&HostConfig::default());
    h.send(&b[..ICREQ_LEN / 2]);
    wait_counters(&env, "accepted", |c| c.accepted >= 1);
    drop(h);
    assert_recovered(&env, 0);
}

#[test]
fn capsule_before_icreq() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.pretend_initialized();
    let pdu = keep_alive_pdu(&h);
    h.send(&pdu);
    let echoed = h.expect_term(term_fes::PDU_SEQUENCE_ERROR, 0);
    // Refused on its common header, which is what comes back.
    assert_eq!(echoed, pdu[..8], "the capsule's common header comes back");
    assert_recovered(&env, 0);
}

#[test]
fn icreq_twice() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    h.send(&icreq_bytes(&HostConfig::default()));
    h.expect_term(term_fes::PDU_SEQUENCE_ERROR, 0);
    assert_recovered(&env, 0);
}

#[test]
fn unknown_or_wrong_direction_pdu_types() {
    let env = env();
    // 0x08 and 0x0A.. are reserved; 0x01/0x05/0x07/0x09 travel controller to host.
    for t in [
        0x08,
        0x0A,
        0x7F,
        0xFF,
        pdu_type::ICRESP,
        pdu_type::RSP,
        pdu_type::C2H_DATA,
        pdu_type::R2T,
    ] {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        h.init();
        let mut pdu = keep_alive_pdu(&h);
        pdu[0] = t;
        h.send_lossy(&pdu);
        h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TYPE);
    }
    assert_recovered(&env, 0);
}

#[test]
fn h2c_term_req_from_the_host_closes_silently() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    let mut t = Vec::new();
    nvmf_common::transport::tcp::encode_term_req(
        nvmf_common::transport::tcp::Role::Host,
        term_fes::INVALID_HEADER_FIELD,
        0,
        &[0u8; 8],
        &mut t,
    );
    io.send(&t);
    io.expect_closed();
    assert_recovered(&env, 1);
}

// ---- capsule headers --------------------------------------------------------------

#[test]
fn hlen_255_with_digests_on() {
    let env = env();
    let mut h = RawTcp::connect(env.addr, digests());
    h.init();
    assert!(h.negotiated().header_digest && h.negotiated().data_digest);
    let mut pdu = keep_alive_pdu(&h);
    pdu[offset::HLEN as usize] = 255;
    h.send_lossy(&pdu);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HLEN);
    // The same with a PDO and PLEN that would fit a 255-byte header.
    let mut h = RawTcp::connect(env.addr, digests());
    h.init();
    let mut pdu = Vec::new();
    h.writer()
        .capsule_cmd(
            &with_sgl(command::keep_alive(), SglDescriptor::in_capsule(0, 512)),
            &[0u8; 512],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    pdu[offset::HLEN as usize] = 255;
    pdu[offset::PDO as usize] = 255;
    h.send_lossy(&pdu);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HLEN);
    assert_recovered(&env, 0);
}

#[test]
fn capsule_shorter_than_an_sqe() {
    let env = env();
    for plen in [8u32, 40, 71] {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        h.init();
        let mut pdu = keep_alive_pdu(&h);
        set_plen(&mut pdu, plen);
        pdu.truncate(plen as usize);
        h.send_lossy(&pdu);
        h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PLEN);
    }
    // HLEN that claims a shorter header.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    let mut pdu = keep_alive_pdu(&h);
    pdu[offset::HLEN as usize] = 40;
    h.send_lossy(&pdu);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HLEN);
    assert_recovered(&env, 0);
}

#[test]
fn capsule_pdo_inside_header_beyond_plen_or_misaligned() {
    let env = env();
    for pdo in [8u8, 71, 73] {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        h.init();
        let mut pdu = Vec::new();
        h.writer()
            .capsule_cmd(
                &with_sgl(command::keep_alive(), SglDescriptor::in_capsule(0, 64)),
                &[0u8; 64],
                &mut pdu,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        pdu[offset::PDO as usize] = pdo;
        h.send_lossy(&pdu);
        h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PDO);
    }
    // PDO at or past PLEN.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    let mut pdu = Vec::new();
    h.writer()
        .capsule_cmd(
            &with_sgl(command::keep_alive(), SglDescriptor::in_capsule(0, 64)),
            &[0u8; 64],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    pdu[offset::PDO as usize] = 136;
    h.send_lossy(&pdu);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::PDO);
    // A capsule without data: PDO is reserved (ignored), the command runs.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    let cid = h.next_cid();
    let mut pdu = Vec::new();
    h.writer()
        .capsule_cmd(
            &with_cid(
                with_sgl(command::keep_alive(), SglDescriptor::transport(0)),
                cid,
            ),
            &[],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    pdu[offset::PDO as usize] = 72;
    h.send(&pdu);
    // Keep Alive before Connect: Invalid Opcode, and the connection goes on.
    let c = h.expect_resp(cid);
    assert!(status_of(&c).is(Sct::Generic, generic::INVALID_OPCODE));
    drop(h);
    assert_recovered(&env, 0);
}

#[test]
fn in_capsule_data_above_the_limit() {
    let env = env();
    let icdoff = env.target.params.in_capsule_data_size;
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    let mut pdu = keep_alive_pdu(&h);
    pdu[offset::PDO as usize] = 72;
    set_plen(&mut pdu, 72 + icdoff + 4);
    h.send_lossy(&pdu);
    h.expect_term(term_fes::DATA_LIMIT_EXCEEDED, 0);
    // PLEN at its largest.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    let mut pdu = keep_alive_pdu(&h);
    pdu[offset::PDO as usize] = 72;
    set_plen(&mut pdu, u32::MAX);
    h.send_lossy(&pdu);
    h.expect_term(term_fes::DATA_LIMIT_EXCEEDED, 0);
    assert_recovered(&env, 0);
}

#[test]
fn invalid_flags() {
    let env = env();
    for f in [0x04u8, 0x08, 0x10, 0x80, 0x01] {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        h.init();
        let mut pdu = keep_alive_pdu(&h);
        pdu[offset::FLAGS as usize] = f;
        h.send_lossy(&pdu);
        h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::FLAGS);
    }
    assert_recovered(&env, 0);
}

#[test]
fn header_digest_error_on_a_capsule() {
    let env = env();
    let (_a, mut io, _) = pair(&env, digests());
    let old = nvmf_tests::pattern(1, 0, 4096);
    write_icd(&mut io, 0, &old);
    let cid = io.next_cid();
    let mut pdu = Vec::new();
    io.writer()
        .capsule_cmd(
            &write_sqe(cid, 0, 8, SglDescriptor::in_capsule(0, 4096)),
            &[0xEE; 4096],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    pdu[30] ^= 0x01; // a byte of the SQE, under the header digest
    let received = u32::from_le_bytes([pdu[72], pdu[73], pdu[74], pdu[75]]);
    io.send_lossy(&pdu);
    io.expect_term(term_fes::HEADER_DIGEST_ERROR, received);
    assert_recovered(&env, 1);
    // Nothing was written.
    let (_a2, mut io2, _) = pair(&env, HostConfig::default());
    assert_eq!(read_back(&mut io2, 0, 8), old);
}

#[test]
fn data_digest_error_in_a_capsule_writes_nothing() {
    let env = env();
    let (_a, mut io, _) = pair(&env, digests());
    let old = nvmf_tests::pattern(2, 16, 4096);
    write_icd(&mut io, 16, &old);
    let cid = io.next_cid();
    let mut pdu = Vec::new();
    io.writer()
        .capsule_cmd(
            &write_sqe(cid, 16, 8, SglDescriptor::in_capsule(0, 4096)),
            &[0xEE; 4096],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let n = pdu.len();
    pdu[n - 8] ^= 0x80; // a data byte
    io.send(&pdu);
    let c = io.expect_resp(cid);
    let st = status_of(&c);
    assert!(
        st.is(Sct::Generic, generic::TRANSIENT_TRANSPORT_ERROR),
        "{st}"
    );
    assert!(!st.dnr, "a transient transport error may be retried");
    assert_eq!(read_back(&mut io, 16, 8), old, "nothing written");
    wait_counters(&env, "digest error counted", |c| c.digest_errors == 1);
    assert_recovered(&env, 2);
}

// ---- H2CData ----------------------------------------------------------------------

#[test]
fn h2cdata_before_any_command_with_ttag_0() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    io.h2c(1, 0, 0, &[1; 512], true);
    let echoed = io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    assert_eq!(echoed.len(), DATA_HDR_LEN);
    assert_recovered(&env, 1);
}

#[test]
fn h2cdata_with_ttag_out_of_range() {
    let env = env();
    for ttag in [32u16, 0x8000, u16::MAX] {
        let (_a, mut io, _) = pair(&env, HostConfig::default());
        let (cid, _, _) = start_r2t_write(&mut io, 0, 72);
        io.h2c(cid, ttag, 0, &[1; 512], false);
        io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    }
    assert_recovered(&env, 0);
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    assert_eq!(read_back(&mut io, 0, 8), vec![0u8; 4096], "nothing written");
}

#[test]
fn h2cdata_for_a_command_that_is_not_waiting_for_data() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    // A read holds a slot but never gets an R2T.
    let cid = io.next_cid();
    let s = command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    io.cmd(
        &with_cid(with_sgl(s, SglDescriptor::transport(4096)), cid),
        &[],
    );
    loop {
        match io.recv() {
            Rx::C2H { success: true, .. } => break,
            Rx::C2H { .. } => {}
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{}", status_of(&c));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    // Its slot is free again; no slot waits for data.
    io.h2c(cid, 0, 0, &[1; 512], true);
    io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    assert_recovered(&env, 1);
}

#[test]
fn h2cdata_beyond_its_r2t_window() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    let (cid, ttag, len) = start_r2t_write(&mut io, 0, 72);
    assert_eq!(len, 72 * BS);
    io.h2c(cid, ttag, 0, &vec![2; len as usize + 512], true);
    io.expect_term(term_fes::DATA_OUT_OF_RANGE, 0);
    assert_recovered(&env, 1);
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    assert_eq!(read_back(&mut io, 0, 8), vec![0u8; 4096], "nothing written");
}

#[test]
fn h2cdata_with_datao_past_the_window_or_wrapping() {
    let env = env();
    for datao in [512u32, 72 * BS, u32::MAX - 511, u32::MAX - 4095] {
        let (_a, mut io, _) = pair(&env, HostConfig::default());
        let (cid, ttag, _) = start_r2t_write(&mut io, 0, 72);
        io.h2c(cid, ttag, datao, &[3; 4096], false);
        io.expect_term(term_fes::DATA_OUT_OF_RANGE, 0);
    }
    assert_recovered(&env, 0);
}

#[test]
fn h2cdata_datal_disagrees_with_plen() {
    let env = env();
    for datal in [0u32, 511, 513, u32::MAX] {
        let (_a, mut io, _) = pair(&env, HostConfig::default());
        let (cid, ttag, _) = start_r2t_write(&mut io, 0, 8);
        let mut pdu = Vec::new();
        io.writer()
            .h2c_data(cid, ttag, 0, &[4; 512], false, &mut pdu)
            .unwrap_or_else(|e| panic!("{e}"));
        let at = offset::DATA_LENGTH as usize;
        pdu[at..at + 4].copy_from_slice(&datal.to_le_bytes());
        io.send_lossy(&pdu);
        io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::DATA_LENGTH);
    }
    assert_recovered(&env, 0);
}

#[test]
fn h2cdata_with_bad_plen() {
    let env = env();
    // Shorter than the header; longer than MAXH2CDATA.
    let cases = [
        (8u32, term_fes::INVALID_HEADER_FIELD, offset::PLEN),
        (23, term_fes::INVALID_HEADER_FIELD, offset::PLEN),
        (u32::MAX, term_fes::DATA_LIMIT_EXCEEDED, 0),
    ];
    for (plen, fes, fei) in cases {
        let (_a, mut io, _) = pair(&env, HostConfig::default());
        let (cid, ttag, _) = start_r2t_write(&mut io, 0, 8);
        let mut pdu = Vec::new();
        io.writer()
            .h2c_data(cid, ttag, 0, &[4; 512], false, &mut pdu)
            .unwrap_or_else(|e| panic!("{e}"));
        set_plen(&mut pdu, plen);
        io.send_lossy(&pdu);
        io.expect_term(fes, fei);
    }
    assert_recovered(&env, 0);
}

#[test]
fn h2cdata_header_digest_error_writes_nothing() {
    let env = env();
    let (_a, mut io, _) = pair(&env, digests());
    let (cid, ttag, len) = start_r2t_write(&mut io, 64, 8);
    let mut pdu = Vec::new();
    io.writer()
        .h2c_data(cid, ttag, 0, &vec![9; len as usize], true, &mut pdu)
        .unwrap_or_else(|e| panic!("{e}"));
    pdu[12] ^= 0x10; // DATAO, under the header digest
    let received = u32::from_le_bytes([pdu[24], pdu[25], pdu[26], pdu[27]]);
    io.send_lossy(&pdu);
    io.expect_term(term_fes::HEADER_DIGEST_ERROR, received);
    assert_recovered(&env, 1);
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    assert_eq!(
        read_back(&mut io, 64, 8),
        vec![0u8; 4096],
        "nothing written"
    );
}

#[test]
fn h2cdata_data_digest_error_writes_nothing() {
    let env = env();
    let (_a, mut io, _) = pair(&env, digests());
    let old = nvmf_tests::pattern(3, 128, 8192);
    write_icd(&mut io, 128, &old);
    let (cid, ttag, len) = start_r2t_write(&mut io, 128, 16);
    let mut pdu = Vec::new();
    io.writer()
        .h2c_data(cid, ttag, 0, &vec![0xAB; len as usize], true, &mut pdu)
        .unwrap_or_else(|e| panic!("{e}"));
    let n = pdu.len();
    pdu[n - 1] ^= 0xFF; // the data digest
    io.send(&pdu);
    let c = io.expect_resp(cid);
    assert!(
        status_of(&c).is(Sct::Generic, generic::TRANSIENT_TRANSPORT_ERROR),
        "{}",
        status_of(&c)
    );
    assert_eq!(read_back(&mut io, 128, 16), old, "nothing written");
    // A well-behaved host reads the old data too.
    let (_a2, mut io2, _) = pair(&env, HostConfig::default());
    assert_eq!(read_back(&mut io2, 128, 16), old);
    assert_recovered(&env, 4);
}

// ---- truncation, stalls, vanishing peers ------------------------------------------

#[test]
fn truncated_capsule_then_close() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    let cid = io.next_cid();
    let mut pdu = Vec::new();
    io.writer()
        .capsule_cmd(
            &write_sqe(cid, 200, 8, SglDescriptor::in_capsule(0, 4096)),
            &[0xCD; 4096],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    io.send(&pdu[..pdu.len() / 2]);
    std::thread::sleep(Duration::from_millis(20));
    drop(io);
    assert_recovered(&env, 1);
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    assert_eq!(
        read_back(&mut io, 200, 8),
        vec![0u8; 4096],
        "nothing written"
    );
}

#[test]
fn truncated_h2cdata_then_close() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    let (cid, ttag, len) = start_r2t_write(&mut io, 300, 72);
    let mut pdu = Vec::new();
    io.writer()
        .h2c_data(cid, ttag, 0, &vec![7; len as usize], true, &mut pdu)
        .unwrap_or_else(|e| panic!("{e}"));
    io.send(&pdu[..pdu.len() - 100]);
    std::thread::sleep(Duration::from_millis(20));
    drop(io);
    assert_recovered(&env, 1);
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    assert_eq!(
        read_back(&mut io, 300, 8),
        vec![0u8; 4096],
        "nothing written"
    );
}

#[test]
fn peer_stalls_mid_pdu() {
    let env = start_tcp_with(
        &config(&["ram:16M"]),
        TcpOptions::default(),
        nvmf_target::tcp::TcpOptions {
            stall_timeout: Duration::from_millis(300),
            ..nvmf_target::tcp::TcpOptions::default()
        },
    );
    // Mid-capsule.
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    let pdu = keep_alive_pdu(&io);
    let t0 = Instant::now();
    io.send(&pdu[..30]);
    io.expect_closed();
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Mid-ICReq.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.send(&icreq_bytes(&HostConfig::default())[..10]);
    h.expect_closed();
    // Mid-common header.
    let mut h = RawTcp::connect(env.addr, HostConfig::default());
    h.init();
    h.send(&[pdu_type::CMD, 0, 72]);
    h.expect_closed();
    assert_recovered(&env, 1);
}

#[test]
fn peer_vanishes_with_io_in_flight() {
    let env = env();
    let (_a, mut io, _) = pair(&env, HostConfig::default());
    // Reads whose data is never read, a write waiting on its R2T, half a capsule.
    for i in 0..8u64 {
        let cid = io.next_cid();
        let s = command::read(Nsid(1), i * 256, 256, false).unwrap_or_else(|e| panic!("{e}"));
        io.cmd(
            &with_cid(with_sgl(s, SglDescriptor::transport(256 * BS)), cid),
            &[],
        );
    }
    let cid = io.next_cid();
    io.cmd(
        &write_sqe(cid, 0, 72, SglDescriptor::transport(72 * BS)),
        &[],
    );
    let pdu = keep_alive_pdu(&io);
    io.send(&pdu[..50]);
    std::thread::sleep(Duration::from_millis(30));
    drop(io);
    assert_recovered(&env, 1);
}

#[test]
fn many_bad_connections_leave_nothing_behind() {
    let env = env();
    let before = env.server.counters();
    for i in 0..50u32 {
        let mut h = RawTcp::connect(env.addr, HostConfig::default());
        match i % 5 {
            0 => h.send_lossy(&[0xFF; 8]),
            1 => h.send_lossy(&icreq_bytes(&HostConfig::default())[..64]),
            2 => {
                h.init();
                let pdu = keep_alive_pdu(&h);
                h.send_lossy(&pdu[..40]);
            }
            3 => {
                h.init();
                h.send_lossy(&icreq_bytes(&HostConfig::default()));
            }
            _ => {}
        }
        drop(h);
    }
    wait_counters(&env, "every connection closed", |c| {
        c.queues == 0 && c.closed >= before.closed + 50 && c.buffers_in_use == 0
    });
    assert_serves(&env.fabric, &env.nqn, 1000);
    let _ = Cntlid::DYNAMIC;
}
