//! Framer tests: every PDU round-trips through writer and reader, every malformed
//! header gets its exact FES/FEI, random bytes never panic.

use super::negotiate::{icreq_params, icresp_params};
use super::*;
use crate::wire::tcp::{emit_header, offset, term_fes, DataPdu, MAX_TERM_PLEN, TERM_HDR_LEN};

/// An initialized connection: readers and writers of both ends.
struct Pair {
    ctrl: PduReader,
    host: PduReader,
    cw: PduWriter,
    hw: PduWriter,
}

fn pair(c: ControllerConfig, h: HostConfig) -> Pair {
    let mut ctrl = PduReader::controller(c).unwrap();
    let mut host = PduReader::host(h).unwrap();
    let mut wire = Vec::new();
    encode_icreq(&icreq_params(&h), &mut wire);
    assert_eq!(wire.len(), 128);
    assert_eq!(ctrl.feed(&wire), Ok(128));
    match ctrl.poll() {
        Some(Ok(Pdu::IcReq(p))) => assert_eq!(p, icreq_params(&h)),
        other => panic!("{other:?}"),
    }
    let n = ctrl.negotiated().unwrap();
    wire.clear();
    encode_icresp(&icresp_params(&n), &mut wire);
    assert_eq!(host.feed(&wire), Ok(128));
    assert!(matches!(host.poll(), Some(Ok(Pdu::IcResp(_)))));
    let hn = host.negotiated().unwrap();
    assert_eq!(n, hn);
    Pair {
        ctrl,
        host,
        cw: PduWriter::new(Role::Controller, &n),
        hw: PduWriter::new(Role::Host, &hn),
    }
}

fn digests(hdgst: bool, ddgst: bool) -> (ControllerConfig, HostConfig) {
    (
        ControllerConfig::default(),
        HostConfig {
            header_digest: hdgst,
            data_digest: ddgst,
            ..HostConfig::default()
        },
    )
}

/// Feeds `bytes` in chunks of `chunk` and collects every PDU (debug-formatted, data
/// included) or error.
fn read_all(r: &mut PduReader, bytes: &[u8], chunk: usize) -> Vec<Result<String, FramerError>> {
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        let mut input = piece;
        loop {
            match r.feed(input) {
                Ok(n) => input = &input[n..],
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
            match r.poll() {
                Some(Ok(p)) => out.push(Ok(format!("{p:?}"))),
                Some(Err(e)) => out.push(Err(e)),
                None => {
                    assert!(input.is_empty());
                    break;
                }
            }
        }
    }
    out
}

fn sqe(cid: u16) -> [u8; 64] {
    let mut s = [0u8; 64];
    s[0] = 0x01;
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s[4] = 1;
    s
}

fn cqe(cid: u16) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[12..14].copy_from_slice(&cid.to_le_bytes());
    c
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// All the host-to-controller PDUs a host writer produces, and what the reader must
/// make of them.
fn h2c_stream(p: &Pair) -> (Vec<u8>, Vec<String>) {
    let mut wire = Vec::new();
    let mut want = Vec::new();
    let d1 = pattern(512, 1);
    let d2 = pattern(4093, 2);
    let d3 = pattern(1, 3);
    p.hw.capsule_cmd(&sqe(1), &[], &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::CapsuleCmd {
            sqe: &sqe(1),
            data: &[]
        }
    ));
    p.hw.capsule_cmd(&sqe(2), &d1, &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::CapsuleCmd {
            sqe: &sqe(2),
            data: &d1
        }
    ));
    p.hw.h2c_data(3, 7, 0, &d2, false, &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::H2CData {
            cid: 3,
            ttag: 7,
            datao: 0,
            datal: 4093,
            last: false,
            data: &d2
        }
    ));
    p.hw.h2c_data(3, 7, 4093, &d3, true, &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::H2CData {
            cid: 3,
            ttag: 7,
            datao: 4093,
            datal: 1,
            last: true,
            data: &d3
        }
    ));
    let hdr = [0xAAu8; 24];
    p.hw.term_req(term_fes::PDU_SEQUENCE_ERROR, 0, &hdr, &mut wire);
    want.push(format!(
        "{:?}",
        Pdu::H2CTermReq {
            fes: 2,
            fei: 0,
            data: &hdr
        }
    ));
    (wire, want)
}

fn c2h_stream(p: &Pair) -> (Vec<u8>, Vec<String>) {
    let mut wire = Vec::new();
    let mut want = Vec::new();
    let d1 = pattern(8192, 4);
    let d2 = pattern(3, 5);
    p.cw.capsule_resp(&cqe(9), &mut wire).unwrap();
    want.push(format!("{:?}", Pdu::CapsuleResp { cqe: cqe(9) }));
    p.cw.r2t(3, 7, 4096, 65536, &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::R2T {
            cid: 3,
            ttag: 7,
            offset: 4096,
            length: 65536
        }
    ));
    // The form a controller sends large data in: the head, the data from where it
    // lies, the trailer.
    p.cw.c2h_data_head(4, 0, &d1, false, false, &mut wire)
        .unwrap();
    wire.extend_from_slice(&d1);
    p.cw.data_trailer(&d1, &mut wire);
    want.push(format!(
        "{:?}",
        Pdu::C2HData {
            cid: 4,
            ttag: 0,
            datao: 0,
            datal: 8192,
            last: false,
            success: false,
            data: &d1
        }
    ));
    p.cw.c2h_data(4, 8192, &d2, true, true, &mut wire).unwrap();
    want.push(format!(
        "{:?}",
        Pdu::C2HData {
            cid: 4,
            ttag: 0,
            datao: 8192,
            datal: 3,
            last: true,
            success: true,
            data: &d2
        }
    ));
    let hdr = [0x55u8; 72];
    p.cw.term_req(term_fes::INVALID_HEADER_FIELD, 2, &hdr, &mut wire);
    want.push(format!(
        "{:?}",
        Pdu::C2HTermReq {
            fes: 1,
            fei: 2,
            data: &hdr
        }
    ));
    (wire, want)
}

#[test]
fn every_pdu_round_trips_with_and_without_digests_and_alignment() {
    for (hdgst, ddgst) in [(false, false), (true, false), (false, true), (true, true)] {
        for (cpda, hpda) in [(0, 0), (3, 7), (31, 31)] {
            let (mut c, mut h) = digests(hdgst, ddgst);
            c.cpda = cpda;
            h.hpda = hpda;
            for chunk in [1, 5, 97, usize::MAX] {
                let mut p = pair(c, h);
                let (wire, want) = h2c_stream(&p);
                let got = read_all(&mut p.ctrl, &wire, chunk);
                let want: Vec<_> = want.into_iter().map(Ok).collect();
                assert_eq!(
                    got, want,
                    "h2c digests {hdgst}/{ddgst} pda {cpda} chunk {chunk}"
                );

                let (wire, want) = c2h_stream(&p);
                let got = read_all(&mut p.host, &wire, chunk);
                let want: Vec<_> = want.into_iter().map(Ok).collect();
                assert_eq!(
                    got, want,
                    "c2h digests {hdgst}/{ddgst} pda {hpda} chunk {chunk}"
                );
                assert!(!p.ctrl.has_partial_pdu() && !p.host.has_partial_pdu());
            }
        }
    }
}

#[test]
fn writer_layout_matches_linux() {
    // Linux nvmet_setup_c2h_data_pdu: hlen 24, pdo = hlen + hdgst,
    // plen = hlen + hdgst + len + ddgst, flags LAST | HDGST | DDGST.
    let (c, h) = digests(true, true);
    let p = pair(c, h);
    let mut wire = Vec::new();
    let data = pattern(100, 0);
    let n =
        p.cw.c2h_data(0x1234, 0, &data, true, false, &mut wire)
            .unwrap();
    assert_eq!(n, wire.len());
    assert_eq!(&wire[..8], &[7, 0x07, 24, 28, 132, 0, 0, 0]);
    assert_eq!(&wire[8..10], &[0x34, 0x12]);
    assert_eq!(&wire[16..20], &100u32.to_le_bytes());
    assert_eq!(&wire[24..28], &header_digest(&wire[..24]).to_le_bytes());
    assert_eq!(&wire[28..128], &data[..]);
    assert_eq!(&wire[128..], &data_digest(&data).to_le_bytes());
    // Response and R2T: pdo 0, plen = hlen + hdgst.
    wire.clear();
    p.cw.capsule_resp(&cqe(1), &mut wire).unwrap();
    assert_eq!(&wire[..8], &[5, 1, 24, 0, 28, 0, 0, 0]);
    // CRC32C check value ("123456789" -> 0xE3069283, RFC 3720 B.4).
    assert_eq!(data_digest(b"123456789"), 0xE306_9283);

    // A host aligns H2C data to the controller's CPDA: (3 + 1) * 4 = 16.
    let c = ControllerConfig {
        cpda: 3,
        ..ControllerConfig::default()
    };
    let mut p = pair(c, HostConfig::default());
    wire.clear();
    p.hw.capsule_cmd(&sqe(1), &[9; 10], &mut wire).unwrap();
    assert_eq!(&wire[..8], &[4, 0, 72, 80, 90, 0, 0, 0]);
    assert!(wire[72..80].iter().all(|&b| b == 0));
    assert_eq!(&wire[80..], &[9; 10]);
    let got = read_all(&mut p.ctrl, &wire, 1);
    let want = format!(
        "{:?}",
        Pdu::CapsuleCmd {
            sqe: &sqe(1),
            data: &[9; 10]
        }
    );
    assert_eq!(got, vec![Ok(want)]);
}

#[test]
fn writer_refuses_wrong_direction_and_limits() {
    let (c, h) = digests(false, false);
    let p = pair(c, h);
    let mut out = Vec::new();
    assert!(p.cw.capsule_cmd(&sqe(1), &[], &mut out).is_err());
    assert!(p.cw.h2c_data(1, 1, 0, &[1], true, &mut out).is_err());
    assert!(p.hw.capsule_resp(&cqe(1), &mut out).is_err());
    assert!(p.hw.c2h_data(1, 0, &[1], true, false, &mut out).is_err());
    assert!(p.hw.r2t(1, 1, 0, 1, &mut out).is_err());
    assert!(p.cw.c2h_data(1, 0, &[1], false, true, &mut out).is_err());
    let big = vec![0u8; 128 * 1024 + 1];
    assert!(p.hw.h2c_data(1, 1, 0, &big, true, &mut out).is_err());
    assert!(out.is_empty());
    assert_eq!(p.hw.role(), Role::Host);
}

#[test]
fn buffer_is_bounded_by_the_configuration() {
    let r = PduReader::controller(ControllerConfig::default()).unwrap();
    assert_eq!(r.max_pdu_len(), 255 + 128 * 1024 + 4);
    let r = PduReader::host(HostConfig {
        max_c2h_data: 0,
        ..HostConfig::default()
    })
    .unwrap();
    assert_eq!(r.max_pdu_len(), 259);
    assert!(PduReader::controller(ControllerConfig {
        maxh2cdata: 1000,
        ..ControllerConfig::default()
    })
    .is_err());
}

// ---- malformed input -------------------------------------------------------------

/// A controller reader after the handshake (digests as given).
fn live_ctrl(hdgst: bool, ddgst: bool) -> PduReader {
    let (c, h) = digests(hdgst, ddgst);
    pair(c, h).ctrl
}

fn live_host(hdgst: bool, ddgst: bool) -> PduReader {
    let (c, h) = digests(hdgst, ddgst);
    pair(c, h).host
}

/// A raw PDU: common header + `rest` (PSH, digests, data as the test wants them).
fn raw(t: u8, fl: u8, hlen: u8, pdo: u8, plen: u32, rest: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    emit_header(&mut b, t, fl, hlen, pdo, plen);
    b.extend_from_slice(rest);
    b
}

/// Feeds `bytes` whole and expects a fatal error with `fes` and `fei`; checks the
/// reader stays poisoned and builds the termination request.
fn expect_fatal(r: &mut PduReader, bytes: &[u8], fes: u16, fei: u32) -> FramerError {
    let e = match r.feed(bytes) {
        Err(e) => e,
        Ok(_) => match r.poll() {
            Some(Ok(p)) => panic!("accepted {p:?}"),
            Some(Err(e)) => panic!("non-fatal {e:?}"),
            None => panic!("incomplete, expected FES {fes} FEI {fei}"),
        },
    };
    assert_eq!((e.fes(), e.fei()), (Some(fes), fei), "{e}");
    assert!(e.is_fatal());
    // Poisoned: the same error from feed and poll, nothing consumed.
    assert_eq!(r.feed(&[0u8; 64]), Err(e));
    assert_eq!(r.poll().map(|x| x.map(|p| format!("{p:?}"))), Some(Err(e)));
    assert_eq!(r.error(), Some(e));
    // The termination request: the right type, FES, FEI at bytes 10..14 and the
    // received header of the offending PDU.
    let mut term = Vec::new();
    assert!(r.termination_request(&mut term));
    let t = r.role().term_type();
    let copy = r.error_header();
    assert!(!copy.is_empty() && copy.len() <= 128);
    assert_eq!(copy, &bytes[..copy.len()]);
    assert_eq!(term.len(), TERM_HDR_LEN + copy.len());
    assert!(term.len() <= MAX_TERM_PLEN);
    assert_eq!(&term[..4], &[t, 0, 24, 0]);
    assert_eq!(&term[4..8], &(term.len() as u32).to_le_bytes());
    assert_eq!(&term[8..10], &fes.to_le_bytes());
    assert_eq!(&term[10..14], &fei.to_le_bytes());
    assert_eq!(&term[24..], copy);
    e
}

const IHF: u16 = term_fes::INVALID_HEADER_FIELD;

#[test]
fn truncated_pdus_stay_incomplete() {
    let (c, h) = digests(true, true);
    let p = pair(c, h);
    let (wire, _) = h2c_stream(&p);
    let mut r = p.ctrl;
    for cut in (0..wire.len()).filter(|c| c % 7 == 0 || *c < 200) {
        let mut fresh = live_ctrl(true, true);
        let prefix = &wire[..cut];
        let mut input = prefix;
        while !input.is_empty() {
            let n = fresh.feed(input).unwrap();
            input = &input[n..];
            match fresh.poll() {
                Some(Ok(_)) => {}
                other => assert!(other.is_none(), "{other:?}"),
            }
        }
        assert!(fresh.error().is_none());
    }
    // A lone partial header is reported as a partial PDU.
    assert_eq!(r.feed(&wire[..5]), Ok(5));
    assert!(r.poll().is_none());
    assert!(r.has_partial_pdu());
}

#[test]
fn unknown_type_and_wrong_direction() {
    for t in [0x08u8, 0x0A, 0x0C, 0xFE] {
        expect_fatal(
            &mut live_ctrl(false, false),
            &raw(t, 0, 24, 0, 24, &[0; 16]),
            IHF,
            0,
        );
    }
    for t in [0x0Bu8, 0x0D, 0xFF] {
        expect_fatal(
            &mut live_host(false, false),
            &raw(t, 0, 24, 0, 24, &[0; 16]),
            IHF,
            0,
        );
    }
    // Host-bound PDUs sent to a controller and vice versa.
    let rsp = raw(pdu_type::RSP, 0, 24, 0, 24, &[0; 16]);
    expect_fatal(&mut live_ctrl(false, false), &rsp, IHF, offset::TYPE);
    let cmd = raw(pdu_type::CMD, 0, 72, 0, 72, &[0; 64]);
    expect_fatal(&mut live_host(false, false), &cmd, IHF, offset::TYPE);
    let r2t = raw(pdu_type::R2T, 0, 24, 0, 24, &[0; 16]);
    expect_fatal(&mut live_ctrl(false, false), &r2t, IHF, 0);
}

#[test]
fn wrong_hlen_per_type() {
    for (t, good) in [(pdu_type::CMD, 72u8), (pdu_type::H2C_DATA, 24)] {
        for bad in [0u8, 8, good - 4, good + 4, 255] {
            let pdu = raw(
                t,
                0,
                bad,
                0,
                u32::from(good),
                &vec![0; usize::from(good) - 8],
            );
            expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::HLEN);
        }
    }
    for (t, good) in [
        (pdu_type::RSP, 24u8),
        (pdu_type::C2H_DATA, 24),
        (pdu_type::R2T, 24),
    ] {
        for bad in [0u8, 23, 25, 128] {
            let pdu = raw(
                t,
                0,
                bad,
                0,
                u32::from(good),
                &vec![0; usize::from(good) - 8],
            );
            expect_fatal(&mut live_host(false, false), &pdu, IHF, offset::HLEN);
        }
    }
    // ICReq / ICResp with a wrong hlen.
    let icreq = raw(pdu_type::ICREQ, 0, 127, 0, 128, &[0; 120]);
    expect_fatal(
        &mut PduReader::controller(ControllerConfig::default()).unwrap(),
        &icreq,
        IHF,
        2,
    );
    let icresp = raw(pdu_type::ICRESP, 0, 24, 0, 128, &[0; 120]);
    expect_fatal(
        &mut PduReader::host(HostConfig::default()).unwrap(),
        &icresp,
        IHF,
        2,
    );
}

#[test]
fn header_length_255_with_digests_on() {
    let pdu = raw(pdu_type::CMD, flags::HDGST, 255, 0, 259, &[0; 251]);
    expect_fatal(&mut live_ctrl(true, true), &pdu, IHF, offset::HLEN);
    let pdu = raw(
        pdu_type::C2H_DATA,
        flags::HDGST | flags::DDGST,
        255,
        255,
        u32::MAX,
        &[],
    );
    expect_fatal(&mut live_host(true, true), &pdu, IHF, offset::HLEN);
}

#[test]
fn data_offset_errors() {
    // pdo < hlen (+ header digest).
    let pdu = raw(pdu_type::CMD, 0, 72, 8, 72 + 16, &[0; 80]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::PDO);
    let pdu = raw(pdu_type::CMD, flags::HDGST, 72, 72, 76 + 16, &[0; 84]);
    expect_fatal(&mut live_ctrl(true, false), &pdu, IHF, offset::PDO);
    // pdo beyond plen.
    let pdu = raw(pdu_type::CMD, 0, 72, 100, 72 + 16, &[0; 80]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::PDO);
    let pdu = raw(pdu_type::H2C_DATA, 0, 24, 40, 40, &[0; 32]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::PDO);
    // pdo not aligned to the controller's CPDA (16 bytes).
    let c = ControllerConfig {
        cpda: 3,
        ..ControllerConfig::default()
    };
    let mut r = pair(c, HostConfig::default()).ctrl;
    let pdu = raw(pdu_type::CMD, 0, 72, 72, 72 + 16, &[0; 80]);
    expect_fatal(&mut r, &pdu, IHF, offset::PDO);
    // A PDU without data must have pdo 0.
    let pdu = raw(pdu_type::RSP, 0, 24, 24, 24, &[0; 16]);
    expect_fatal(&mut live_host(false, false), &pdu, IHF, offset::PDO);
}

#[test]
fn pdu_length_errors() {
    // plen < hlen.
    let pdu = raw(pdu_type::CMD, 0, 72, 0, 50, &[0; 64]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::PLEN);
    // plen < hlen + header digest.
    let pdu = raw(pdu_type::R2T, flags::HDGST, 24, 0, 24, &[0; 16]);
    expect_fatal(&mut live_host(true, false), &pdu, IHF, offset::PLEN);
    // A PDU without data longer than its header.
    let pdu = raw(pdu_type::RSP, 0, 24, 0, 28, &[0; 20]);
    expect_fatal(&mut live_host(false, false), &pdu, IHF, offset::PLEN);
    let icreq = raw(pdu_type::ICREQ, 0, 128, 0, 129, &[0; 121]);
    expect_fatal(
        &mut PduReader::controller(ControllerConfig::default()).unwrap(),
        &icreq,
        IHF,
        4,
    );
    // Data digest negotiated but no room for it after the data offset.
    let pdu = raw(pdu_type::CMD, flags::DDGST, 72, 72, 76, &[0; 68]);
    expect_fatal(&mut live_ctrl(false, true), &pdu, IHF, offset::PLEN);
}

#[test]
fn pdu_length_over_the_maximum() {
    let limit = term_fes::DATA_LIMIT_EXCEEDED;
    // In-capsule data above max_icd (16 KiB).
    let pdu = raw(pdu_type::CMD, 0, 72, 72, 72 + 16 * 1024 + 1, &[0; 64]);
    let e = expect_fatal(&mut live_ctrl(false, false), &pdu, limit, 0);
    assert_eq!(
        e,
        FramerError::DataLimitExceeded {
            len: 16385,
            limit: 16384
        }
    );
    // H2CData above MAXH2CDATA, and a plen near u32::MAX.
    let pdu = raw(pdu_type::H2C_DATA, 0, 24, 24, 24 + 128 * 1024 + 4, &[0; 16]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, limit, 0);
    let pdu = raw(pdu_type::H2C_DATA, 0, 24, 24, u32::MAX, &[0; 16]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, limit, 0);
    // C2HData above the host's limit.
    let pdu = raw(
        pdu_type::C2H_DATA,
        0,
        24,
        24,
        24 + 1024 * 1024 + 1,
        &[0; 16],
    );
    expect_fatal(&mut live_host(false, false), &pdu, limit, 0);
    // Exactly at the limit is fine (header only fed: incomplete, no error).
    let mut r = live_ctrl(false, false);
    let mut pdu = raw(pdu_type::H2C_DATA, 0, 24, 24, 24 + 128 * 1024, &[0; 16]);
    DataPdu::new_unchecked(&mut pdu[..]).set_data_length(128 * 1024);
    assert_eq!(r.feed(&pdu), Ok(24));
    assert!(r.poll().is_none() && r.error().is_none());
}

#[test]
fn sequence_errors() {
    let seq = term_fes::PDU_SEQUENCE_ERROR;
    // CapsuleCmd before ICReq.
    let cmd = raw(pdu_type::CMD, 0, 72, 0, 72, &[0; 64]);
    let mut r = PduReader::controller(ControllerConfig::default()).unwrap();
    expect_fatal(&mut r, &cmd, seq, 0);
    // CapsuleResp before ICResp.
    let rsp = raw(pdu_type::RSP, 0, 24, 0, 24, &[0; 16]);
    expect_fatal(
        &mut PduReader::host(HostConfig::default()).unwrap(),
        &rsp,
        seq,
        0,
    );
    // ICReq twice, ICResp twice.
    let mut icreq = Vec::new();
    encode_icreq(&icreq_params(&HostConfig::default()), &mut icreq);
    expect_fatal(&mut live_ctrl(false, false), &icreq, seq, 0);
    let mut icresp = Vec::new();
    let n = live_ctrl(false, false).negotiated().unwrap();
    encode_icresp(&icresp_params(&n), &mut icresp);
    expect_fatal(&mut live_host(false, false), &icresp, seq, 0);
}

#[test]
fn icreq_and_icresp_contents_are_checked() {
    let mut bad = crate::wire::tcp::icreq(1, 0, 0, 0).to_vec();
    expect_fatal(
        &mut PduReader::controller(ControllerConfig::default()).unwrap(),
        &bad,
        IHF,
        8,
    );
    bad = crate::wire::tcp::icreq(0, 32, 0, 0).to_vec();
    expect_fatal(
        &mut PduReader::controller(ControllerConfig::default()).unwrap(),
        &bad,
        IHF,
        10,
    );
    let host = HostConfig {
        data_digest: true,
        ..HostConfig::default()
    };
    let resp = crate::wire::tcp::icresp(0, 0, 0, 8192).to_vec();
    let e = expect_fatal(
        &mut PduReader::host(host).unwrap(),
        &resp,
        term_fes::UNSUPPORTED_PARAMETER,
        11,
    );
    assert!(matches!(e, FramerError::UnsupportedParameter { .. }));
    let resp = crate::wire::tcp::icresp(0, 0, 2, 1000).to_vec();
    expect_fatal(&mut PduReader::host(host).unwrap(), &resp, IHF, 12);
    // Flags on an ICReq are not valid.
    let mut req = Vec::new();
    encode_icreq(&icreq_params(&HostConfig::default()), &mut req);
    req[1] = flags::HDGST;
    expect_fatal(
        &mut PduReader::controller(ControllerConfig::default()).unwrap(),
        &req,
        IHF,
        1,
    );
}

#[test]
fn flag_errors() {
    // Header digest negotiated, HDGSTF clear (and the reverse).
    let pdu = raw(pdu_type::CMD, 0, 72, 0, 76, &[0; 68]);
    expect_fatal(&mut live_ctrl(true, false), &pdu, IHF, offset::FLAGS);
    let pdu = raw(pdu_type::CMD, flags::HDGST, 72, 0, 76, &[0; 68]);
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::FLAGS);
    // Data digest negotiated, DDGSTF clear on a PDU with data; DDGSTF without data.
    let pdu = raw(pdu_type::H2C_DATA, 0, 24, 24, 24 + 8 + 4, &[0; 28]);
    expect_fatal(&mut live_ctrl(false, true), &pdu, IHF, offset::FLAGS);
    let pdu = raw(pdu_type::CMD, flags::DDGST, 72, 0, 72, &[0; 64]);
    expect_fatal(&mut live_ctrl(false, true), &pdu, IHF, offset::FLAGS);
    // SUCCESS on an H2CData; SUCCESS without LAST_PDU on a C2HData.
    let pdu = raw(
        pdu_type::H2C_DATA,
        flags::DATA_SUCCESS,
        24,
        24,
        28,
        &[0; 20],
    );
    expect_fatal(&mut live_ctrl(false, false), &pdu, IHF, offset::FLAGS);
    let pdu = raw(
        pdu_type::C2H_DATA,
        flags::DATA_SUCCESS,
        24,
        24,
        28,
        &[0; 20],
    );
    expect_fatal(&mut live_host(false, false), &pdu, IHF, offset::FLAGS);
    // Unknown flag bits.
    let pdu = raw(pdu_type::R2T, 0x80, 24, 0, 24, &[0; 16]);
    expect_fatal(&mut live_host(false, false), &pdu, IHF, offset::FLAGS);
}

#[test]
fn header_digest_error() {
    let p = pair(digests(true, false).0, digests(true, false).1);
    let mut wire = Vec::new();
    p.hw.capsule_cmd(&sqe(5), &[1, 2, 3, 4], &mut wire).unwrap();
    wire[40] ^= 0x01; // a bit of the SQE
    let received = u32::from_le_bytes([wire[72], wire[73], wire[74], wire[75]]);
    let mut r = p.ctrl;
    let e = expect_fatal(&mut r, &wire, term_fes::HEADER_DIGEST_ERROR, received);
    assert!(matches!(e, FramerError::HeaderDigest { .. }));
    // The whole header was received: the termination request echoes all 72 bytes.
    assert_eq!(r.error_header().len(), 72);
}

#[test]
fn data_digest_error_fails_only_the_command() {
    for t in ["cmd", "h2c"] {
        let p = pair(digests(false, true).0, digests(false, true).1);
        let mut wire = Vec::new();
        match t {
            "cmd" => {
                p.hw.capsule_cmd(&sqe(0x4242), &[7; 100], &mut wire)
                    .unwrap()
            }
            _ => {
                p.hw.h2c_data(0x4242, 1, 0, &[7; 100], true, &mut wire)
                    .unwrap()
            }
        };
        let n = wire.len();
        wire[n - 10] ^= 0xFF; // a data byte
        let good_start = wire.len();
        p.hw.capsule_cmd(&sqe(9), &[], &mut wire).unwrap();
        let mut r = p.ctrl;
        let got = read_all(&mut r, &wire, 3);
        assert_eq!(got.len(), 2, "{got:?}");
        match got[0] {
            Err(FramerError::DataDigest {
                cid, pdu_type: ty, ..
            }) => {
                assert_eq!(cid, 0x4242);
                assert_eq!(
                    ty,
                    if t == "cmd" {
                        pdu_type::CMD
                    } else {
                        pdu_type::H2C_DATA
                    }
                );
            }
            ref other => panic!("{other:?}"),
        }
        let e = got[0].clone().unwrap_err();
        assert!(!e.is_fatal() && e.fes().is_none());
        assert!(r.error().is_none());
        assert!(!r.termination_request(&mut Vec::new()));
        // The reader goes on with the next PDU.
        let mut r2 = live_ctrl(false, true);
        let next = read_all(&mut r2, &wire[good_start..], 1);
        assert_eq!(got[1], next[0]);
    }
    // A host sees C2HData digest errors the same way.
    let p = pair(digests(false, true).0, digests(false, true).1);
    let mut wire = Vec::new();
    p.cw.c2h_data(77, 0, &[1; 64], true, true, &mut wire)
        .unwrap();
    let n = wire.len();
    wire[n - 1] ^= 0x80; // the digest itself
    let mut r = p.host;
    let got = read_all(&mut r, &wire, 1000);
    assert!(matches!(
        got[0],
        Err(FramerError::DataDigest { cid: 77, .. })
    ));
}

#[test]
fn data_length_inconsistent_with_plen() {
    let p = pair(digests(false, false).0, digests(false, false).1);
    let mut wire = Vec::new();
    p.hw.h2c_data(1, 2, 0, &[0; 64], true, &mut wire).unwrap();
    DataPdu::new_unchecked(&mut wire[..24]).set_data_length(65);
    let mut r = p.ctrl;
    expect_fatal(&mut r, &wire, IHF, offset::DATA_LENGTH);
    // With digests the digest is checked first, then DATAL.
    let p = pair(digests(true, true).0, digests(true, true).1);
    let mut wire = Vec::new();
    p.cw.c2h_data(1, 0, &[0; 64], true, false, &mut wire)
        .unwrap();
    DataPdu::new_unchecked(&mut wire[..24]).set_data_length(0);
    let d = header_digest(&wire[..24]).to_le_bytes();
    wire[24..28].copy_from_slice(&d);
    let mut r = p.host;
    expect_fatal(&mut r, &wire, IHF, offset::DATA_LENGTH);
}

#[test]
fn termination_requests() {
    // Accepted any time, even before initialization, and parsed.
    let mut r = PduReader::controller(ControllerConfig::default()).unwrap();
    let mut wire = Vec::new();
    encode_term_req(
        Role::Host,
        term_fes::DATA_OUT_OF_RANGE,
        0,
        &[1, 2, 3],
        &mut wire,
    );
    let got = read_all(&mut r, &wire, 1);
    assert_eq!(
        got,
        vec![Ok(format!(
            "{:?}",
            Pdu::H2CTermReq {
                fes: 4,
                fei: 0,
                data: &[1, 2, 3]
            }
        ))]
    );
    // The header copy is cut to 128 bytes.
    wire.clear();
    encode_term_req(Role::Controller, 1, 3, &[0xEE; 200], &mut wire);
    assert_eq!(wire.len(), 152);
    // Malformed ones close the connection without a reply.
    for (hlen, plen) in [(24u8, 23u32), (24, 177), (20, 30), (24, u32::MAX)] {
        let mut r = live_host(true, true);
        let pdu = raw(pdu_type::C2H_TERM, 0, hlen, 0, plen, &[0; 16]);
        let e = r.feed(&pdu).unwrap_err();
        assert!(matches!(e, FramerError::MalformedTermReq { .. }), "{e}");
        assert!(e.fes().is_none() && e.is_fatal());
        assert!(!r.termination_request(&mut Vec::new()));
    }
}

// ---- random input ----------------------------------------------------------------

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Feeds `bytes` in random chunks; returns (PDUs, errors). Never panics.
fn churn(r: &mut PduReader, bytes: &[u8], rng: &mut XorShift) -> (usize, usize) {
    let cap = r.max_pdu_len();
    let (mut pdus, mut errors) = (0, 0);
    let mut input = bytes;
    while !input.is_empty() {
        let take = (1 + rng.below(300)).min(input.len());
        let mut chunk = &input[..take];
        input = &input[take..];
        loop {
            match r.feed(chunk) {
                Ok(n) => chunk = &chunk[n..],
                Err(_) => return (pdus, errors + 1),
            }
            match r.poll() {
                Some(Ok(_)) => pdus += 1,
                Some(Err(_)) => errors += 1,
                None => break,
            }
        }
        assert_eq!(r.max_pdu_len(), cap);
    }
    (pdus, errors)
}

#[test]
fn random_bytes_never_panic_and_never_grow_the_buffer() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut pdus, mut errors) = (0, 0);
    for round in 0..3000 {
        let hdgst = rng.next() & 1 == 1;
        let ddgst = rng.next() & 1 == 1;
        let (mut c, mut h) = digests(hdgst, ddgst);
        c.cpda = (rng.below(4) * 3) as u8;
        h.hpda = (rng.below(4) * 3) as u8;
        c.max_icd = 4096;
        c.maxh2cdata = 8192;
        h.max_c2h_data = 8192;
        let p = pair(c, h);
        // Either pure noise, or a valid stream with a few bytes corrupted.
        let controller = round % 2 == 0;
        let (mut wire, _) = if controller {
            h2c_stream(&p)
        } else {
            c2h_stream(&p)
        };
        if round % 3 == 0 {
            let len = rng.below(4000);
            wire = (0..len).map(|_| rng.next() as u8).collect();
            // Make random headers look plausible now and then.
            if wire.len() > 8 && rng.next() & 1 == 1 {
                wire[0] = if controller { 4 } else { 7 };
                wire[2] = if controller { 72 } else { 24 };
            }
        } else {
            for _ in 0..rng.below(4) {
                if !wire.is_empty() {
                    let at = rng.below(wire.len());
                    wire[at] ^= 1 << rng.below(8);
                }
            }
        }
        let mut r = if controller { p.ctrl } else { p.host };
        let cap = r.max_pdu_len();
        assert_eq!(cap, 255 + 8192 + 4);
        let (ok, err) = churn(&mut r, &wire, &mut rng);
        pdus += ok;
        errors += err;
        // Fresh, uninitialized readers too.
        let mut fresh = if controller {
            PduReader::controller(c).unwrap()
        } else {
            PduReader::host(h).unwrap()
        };
        let (ok, err) = churn(&mut fresh, &wire, &mut rng);
        pdus += ok;
        errors += err;
    }
    // The corrupted streams exercise both paths.
    assert!(pdus > 1000 && errors > 1000, "{pdus} PDUs, {errors} errors");
}

/// Reads `bytes` with [`PduReader::read`] in random chunks (the whole stream when
/// `whole`); collects what [`read_all`] collects.
fn read_in_place_all(
    r: &mut PduReader,
    bytes: &[u8],
    rng: &mut XorShift,
    whole: bool,
    zero_copy: &mut usize,
) -> Vec<Result<String, FramerError>> {
    let mut out = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        let take = if whole {
            input.len()
        } else {
            (1 + rng.below(9000)).min(input.len())
        };
        let mut chunk = &input[..take];
        input = &input[take..];
        loop {
            let whole_chunk = chunk;
            let (n, got) = r.read(chunk);
            chunk = &chunk[n..];
            match got {
                None => {
                    assert!(chunk.is_empty());
                    break;
                }
                Some(Ok(p)) => {
                    let data = match &p {
                        Pdu::CapsuleCmd { data, .. }
                        | Pdu::H2CData { data, .. }
                        | Pdu::C2HData { data, .. } => *data,
                        _ => &[],
                    };
                    if !data.is_empty() && whole_chunk.as_ptr_range().contains(&data.as_ptr()) {
                        *zero_copy += 1;
                    }
                    out.push(Ok(format!("{p:?}")))
                }
                Some(Err(e)) => {
                    out.push(Err(e));
                    if e.is_fatal() {
                        return out;
                    }
                }
            }
        }
    }
    out
}

#[test]
fn reading_in_place_matches_feed_and_poll() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut in_place = 0;
    for round in 0..1500 {
        let hdgst = rng.next() & 1 == 1;
        let ddgst = rng.next() & 1 == 1;
        let (mut c, mut h) = digests(hdgst, ddgst);
        c.cpda = (rng.below(4) * 3) as u8;
        h.hpda = (rng.below(4) * 3) as u8;
        c.max_icd = 4096;
        c.maxh2cdata = 8192;
        h.max_c2h_data = 8192;
        let controller = round % 2 == 0;
        let fresh_pair = || pair(c, h);
        let p = fresh_pair();
        let (mut wire, _) = if controller {
            h2c_stream(&p)
        } else {
            c2h_stream(&p)
        };
        if round % 5 == 0 {
            let len = rng.below(4000);
            wire = (0..len).map(|_| rng.next() as u8).collect();
        } else if round % 5 != 1 {
            for _ in 0..rng.below(3) {
                if !wire.is_empty() {
                    let at = rng.below(wire.len());
                    wire[at] ^= 1 << rng.below(8);
                }
            }
        }
        let reader = |p: Pair| if controller { p.ctrl } else { p.host };
        let mut want_r = reader(fresh_pair());
        let want = read_all(&mut want_r, &wire, 1);
        for whole in [true, false] {
            let mut r = reader(fresh_pair());
            let got = read_in_place_all(&mut r, &wire, &mut rng, whole, &mut in_place);
            assert_eq!(got, want, "round {round} whole {whole}");
            assert_eq!(r.error(), want_r.error());
            assert_eq!(r.error_header(), want_r.error_header());
            assert_eq!(r.has_partial_pdu(), want_r.has_partial_pdu());
        }
    }
    assert!(in_place > 1000, "{in_place}");
}

#[test]
fn data_received_elsewhere_is_skipped() {
    for (hdgst, ddgst, hpda) in [(false, false, 0), (true, false, 3), (false, true, 0)] {
        let (c, mut h) = digests(hdgst, ddgst);
        h.hpda = hpda;
        let p = pair(c, h);
        let data = pattern(5000, 9);
        let mut wire = Vec::new();
        p.cw.c2h_data(0x33, 4096, &data, true, false, &mut wire)
            .unwrap();
        let ddgst_len = if ddgst { 4 } else { 0 };
        let head = wire.len() - data.len() - ddgst_len;
        p.cw.capsule_resp(&cqe(0x33), &mut wire).unwrap();
        let mut r = p.host;
        // Nothing to skip before the header (and padding) is in.
        assert_eq!(r.feed(&wire[..head - 1]), Ok(head - 1));
        assert_eq!(r.data_in_progress(), None);
        assert_eq!(r.skip_data(&data[..10]), 0);
        // Header and 100 data bytes fed.
        assert_eq!(r.feed(&wire[head - 1..head + 100]), Ok(101));
        assert!(r.poll().is_none());
        let d = r.data_in_progress().unwrap();
        assert_eq!(
            d,
            DataProgress {
                cid: 0x33,
                ttag: 0,
                datao: 4096,
                received: 100,
                len: 5000,
                placing: false,
            }
        );
        assert_eq!(r.skip_data(&data[100..1100]), 1000);
        let d = r.data_in_progress().unwrap();
        assert_eq!((d.received, d.missing(), d.placing), (1100, 3900, true));
        // More than the data lacks: only what it lacks is counted.
        let mut beyond = data[1100..].to_vec();
        beyond.extend_from_slice(&[0xEE; 100]);
        assert_eq!(r.skip_data(&beyond), 3900);
        assert_eq!(r.data_in_progress(), None);
        // A data digest still has to come in; it is read as usual.
        let mut at = head + 5000;
        if ddgst {
            assert!(r.poll().is_none());
            assert_eq!(r.feed(&wire[at..at + 4]), Ok(4));
            at += 4;
        }
        match r.poll() {
            Some(Ok(Pdu::C2HData {
                cid: 0x33,
                datao: 4096,
                datal: 5000,
                last: true,
                data: got,
                ..
            })) => {
                // Only what the reader held: the rest went elsewhere.
                assert_eq!(got, &data[..100]);
            }
            other => panic!("{other:?}"),
        }
        // The stream goes on after the skipped data.
        let rest = &wire[at..];
        let (n, next) = r.read(rest);
        assert_eq!(n, rest.len());
        assert!(matches!(next, Some(Ok(Pdu::CapsuleResp { .. }))));
    }
}

/// With a data digest, the digest is checked over the data as it was fed and skipped,
/// in any mix: a corrupt byte in the data put elsewhere, or in the data fed after a
/// skip, is a data digest error, and the stream goes on.
#[test]
fn skipped_data_is_digested() {
    let data = pattern(9000, 3);
    // (bytes fed before skipping, bytes skipped, corrupt byte in the skipped part,
    //  corrupt byte in what is fed afterwards)
    for (fed, skipped, bad_skip, bad_fed) in [
        (0, 9000, None, None),
        (0, 9000, Some(8999), None),
        (123, 8877, Some(0), None),
        (500, 4000, None, None),
        (500, 4000, None, Some(8000)),
        (500, 4000, Some(3000), None),
    ] {
        let p = pair(digests(false, true).0, digests(false, true).1);
        let mut wire = Vec::new();
        p.cw.c2h_data(0x21, 0, &data, true, false, &mut wire)
            .unwrap();
        let head = wire.len() - data.len() - 4;
        p.cw.capsule_resp(&cqe(0x21), &mut wire).unwrap();
        let mut r = p.host;
        assert_eq!(r.feed(&wire[..head + fed]), Ok(head + fed));
        assert_eq!(r.data_in_progress().unwrap().received, fed);
        // What the caller put elsewhere, possibly damaged on the way.
        let mut elsewhere = data[fed..fed + skipped].to_vec();
        if let Some(i) = bad_skip {
            elsewhere[i - fed.min(i)] ^= 0x40;
        }
        assert_eq!(r.skip_data(&elsewhere), skipped);
        // The rest (and the digest) fed as usual, possibly damaged.
        let mut rest = wire[head + fed + skipped..].to_vec();
        if let Some(i) = bad_fed {
            rest[i - fed - skipped] ^= 0x01;
        }
        let mut at = 0;
        let first = loop {
            let n = r.feed(&rest[at..]).unwrap();
            at += n;
            if let Some(out) = r.poll() {
                break out.map(|pdu| pdu.pdu_type());
            }
            assert!(n > 0, "stuck");
        };
        let bad = bad_skip.is_some() || bad_fed.is_some();
        match first {
            Ok(t) => assert!(!bad && t == pdu_type::C2H_DATA, "{fed} {skipped}: {t}"),
            Err(FramerError::DataDigest { cid, .. }) => assert!(bad && cid == 0x21),
            Err(e) => panic!("{e:?}"),
        }
        let (n, next) = r.read(&rest[at..]);
        assert_eq!(n, rest.len() - at);
        assert!(matches!(next, Some(Ok(Pdu::CapsuleResp { .. }))));
    }
}
