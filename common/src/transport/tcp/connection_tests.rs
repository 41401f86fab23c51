//! [`Connection`] tests: a host and a controller connection talking to each other
//! through byte buffers, initialization, termination both ways, digest errors, the
//! header kept for termination requests, and the deadline.

use std::time::{Duration, Instant};

use super::*;
use crate::wire::sqe::SQE_LEN;
use crate::wire::tcp::{offset, pdu_type, term_fes, CMD_HDR_LEN, DIGEST_LEN, HDR_LEN};

const TIMEOUT: Duration = Duration::from_secs(5);

/// What an event said, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Established(Negotiated, Vec<u8>),
    Pdu(String),
    DataDigest(FramerError, Vec<u8>),
    PeerTerminated(u16, u32),
    Failed(FramerError, Vec<u8>),
}

fn seen(ev: Event<'_>) -> Seen {
    match ev {
        Event::Established {
            negotiated, send, ..
        } => Seen::Established(negotiated, send.to_vec()),
        Event::Pdu(p) => Seen::Pdu(format!("{p:?}")),
        Event::DataDigest { error, header } => Seen::DataDigest(error, header.to_vec()),
        Event::PeerTerminated { fes, fei } => Seen::PeerTerminated(fes, fei),
        Event::Failed { error, send } => Seen::Failed(error, send.to_vec()),
    }
}

/// Feeds `bytes` in pieces of `chunk` bytes and collects every event.
fn read_all(c: &mut Connection, bytes: &[u8], chunk: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        let mut input = piece;
        loop {
            let (used, ev) = c.read(input, seen);
            input = input.get(used..).unwrap_or(&[]);
            match ev {
                Some(e) => out.push(e),
                None => break,
            }
            if input.is_empty() {
                break;
            }
        }
    }
    out
}

/// Both ends initialized; returns them with their writers.
pub(super) fn established(h: HostConfig) -> (Connection, Connection, PduWriter, PduWriter) {
    let now = Instant::now();
    let mut wire = Vec::new();
    let mut host = Connection::host(h, TIMEOUT, now, &mut wire).unwrap();
    let mut ctrl = Connection::controller(ControllerConfig::default(), TIMEOUT, now).unwrap();
    assert!(host.awaiting_peer() && ctrl.awaiting_peer());
    let (used, ev) = ctrl.read(&wire, |ev| match ev {
        Event::Established {
            negotiated,
            writer,
            send,
        } => (negotiated, writer, send.to_vec()),
        other => panic!("{other:?}"),
    });
    assert_eq!(used, wire.len());
    let (n, cw, icresp) = ev.unwrap();
    let (used, ev) = host.read(&icresp, |ev| match ev {
        Event::Established {
            negotiated,
            writer,
            send,
        } => {
            assert!(send.is_empty(), "the host answers nothing");
            (negotiated, writer)
        }
        other => panic!("{other:?}"),
    });
    assert_eq!(used, icresp.len());
    let (hn, hw) = ev.unwrap();
    assert_eq!(n, hn);
    assert_eq!((ctrl.negotiated(), host.negotiated()), (Some(n), Some(n)));
    assert!(ctrl.is_established() && host.is_established());
    assert!(!ctrl.awaiting_peer() && !host.awaiting_peer());
    (host, ctrl, hw, cw)
}

fn sqe(cid: u16) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s
}

#[test]
fn initialization_settles_the_same_parameters_on_both_ends() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let h = HostConfig {
            header_digest: hd,
            data_digest: dd,
            ..HostConfig::default()
        };
        let (host, _, _, _) = established(h);
        let n = host.negotiated().unwrap();
        assert_eq!((n.header_digest, n.data_digest), (hd, dd));
    }
}

#[test]
fn pdus_arrive_the_same_whole_or_a_byte_at_a_time() {
    let h = HostConfig {
        header_digest: true,
        data_digest: true,
        ..HostConfig::default()
    };
    let (_, mut ctrl, hw, _) = established(h);
    let mut wire = Vec::new();
    hw.capsule_cmd(&sqe(1), b"in-capsule data", &mut wire)
        .unwrap();
    hw.capsule_cmd(&sqe(2), &[], &mut wire).unwrap();
    hw.h2c_data(2, 7, 0, &[0x5a; 600], true, &mut wire).unwrap();
    let whole = read_all(&mut ctrl, &wire, wire.len());
    assert_eq!(whole.len(), 3, "{whole:?}");
    assert!(whole.iter().all(|e| matches!(e, Seen::Pdu(_))), "{whole:?}");
    let (_, mut ctrl2, _, _) = established(h);
    assert_eq!(read_all(&mut ctrl2, &wire, 1), whole);
    // The header of the last PDU is kept, cut at its HLEN.
    assert_eq!(ctrl2.header().len(), 24);
    assert_eq!(ctrl2.header().first(), Some(&pdu_type::H2C_DATA));
}

#[test]
fn the_kept_header_is_the_current_pdus_and_terminate_echoes_it() {
    let (mut host, mut ctrl, hw, _) = established(HostConfig::default());
    let mut wire = Vec::new();
    hw.capsule_cmd(&sqe(3), &[], &mut wire).unwrap();
    let first = wire.clone();
    hw.h2c_data(3, 9, 0, &[1; 64], true, &mut wire).unwrap();
    let events = read_all(&mut ctrl, &wire, 5);
    assert_eq!(events.len(), 2);
    assert_eq!(ctrl.header(), &wire[first.len()..first.len() + 24]);
    // The driver finds the H2CData wrong: the termination request echoes its header.
    let mut term = Vec::new();
    ctrl.terminate(term_fes::INVALID_HEADER_FIELD, offset::TTAG, &mut term);
    assert_eq!(
        ctrl.read(&wire, seen),
        (0, None),
        "nothing is read after it"
    );
    assert_eq!(ctrl.deadline(Instant::now(), true), None);
    assert_eq!(
        read_all(&mut host, &term, term.len()),
        [Seen::PeerTerminated(
            term_fes::INVALID_HEADER_FIELD,
            offset::TTAG
        )]
    );
    assert_eq!(term.first(), Some(&pdu_type::C2H_TERM));
    assert_eq!(term.get(24..), Some(&wire[first.len()..first.len() + 24]));
    assert_eq!(host.read(&term, seen), (0, None));
}

#[test]
fn a_fatal_framer_error_hands_out_its_termination_request_once() {
    let (mut host, mut ctrl, hw, _) = established(HostConfig::default());
    let mut wire = Vec::new();
    hw.capsule_cmd(&sqe(4), &[], &mut wire).unwrap();
    // An unknown PDU type.
    wire[0] = 0x7e;
    let events = read_all(&mut ctrl, &wire, wire.len());
    let [Seen::Failed(e, term)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!(e.fes(), Some(term_fes::INVALID_HEADER_FIELD));
    assert_eq!(
        read_all(&mut host, term, 3),
        [Seen::PeerTerminated(
            term_fes::INVALID_HEADER_FIELD,
            offset::TYPE
        )]
    );
    assert_eq!(ctrl.read(&wire, seen), (0, None));
}

#[test]
fn a_malformed_termination_request_ends_the_connection_without_an_answer() {
    let (mut host, _, _, _) = established(HostConfig::default());
    let mut term = Vec::new();
    encode_term_req(
        Role::Controller,
        term_fes::PDU_SEQUENCE_ERROR,
        0,
        &[],
        &mut term,
    );
    term[offset::HLEN as usize] = 8;
    let events = read_all(&mut host, &term, term.len());
    let [Seen::Failed(FramerError::MalformedTermReq { .. }, send)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert!(send.is_empty());
}

#[test]
fn a_data_digest_error_names_the_pdu_and_the_connection_goes_on() {
    let h = HostConfig {
        data_digest: true,
        ..HostConfig::default()
    };
    let (_, _, hw, _) = established(h);
    let mut wire = Vec::new();
    hw.capsule_cmd(&sqe(5), &[0xab; 100], &mut wire).unwrap();
    let bad = wire.len() - DIGEST_LEN;
    wire[bad] ^= 1;
    hw.capsule_cmd(&sqe(6), &[], &mut wire).unwrap();
    for chunk in [1, 7, wire.len()] {
        let (_, mut c, _, _) = established(h);
        let events = read_all(&mut c, &wire, chunk);
        let [Seen::DataDigest(e, header), Seen::Pdu(_)] = events.as_slice() else {
            panic!("{events:?}");
        };
        assert!(matches!(e, FramerError::DataDigest { cid: 5, .. }), "{e:?}");
        assert_eq!(header.len(), CMD_HDR_LEN);
        assert_eq!(&header[HDR_LEN..], &sqe(5)[..]);
    }
}

#[test]
fn an_icresp_that_breaks_the_rules_is_answered_with_a_termination_request() {
    let now = Instant::now();
    let mut icreq = Vec::new();
    let mut host = Connection::host(HostConfig::default(), TIMEOUT, now, &mut icreq).unwrap();
    let mut icresp = Vec::new();
    // MAXH2CDATA below the 4 KiB minimum.
    let n = Negotiated {
        header_digest: false,
        data_digest: false,
        hpda: 0,
        cpda: 0,
        maxh2cdata: 1000,
        maxr2t: 0,
    };
    encode_icresp(&negotiate::icresp_params(&n), &mut icresp);
    let events = read_all(&mut host, &icresp, icresp.len());
    let [Seen::Failed(e, term)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert!(e.fes().is_some(), "{e:?}");
    assert_eq!(term.first(), Some(&pdu_type::H2C_TERM));
    assert!(!host.is_established());
}

#[test]
fn a_controller_refusing_the_icreq_is_reported() {
    let now = Instant::now();
    let mut icreq = Vec::new();
    let mut host = Connection::host(HostConfig::default(), TIMEOUT, now, &mut icreq).unwrap();
    let mut term = Vec::new();
    encode_term_req(
        Role::Controller,
        term_fes::UNSUPPORTED_PARAMETER,
        offset::TYPE,
        &icreq[..HDR_LEN],
        &mut term,
    );
    assert_eq!(
        read_all(&mut host, &term, 2),
        [Seen::PeerTerminated(
            term_fes::UNSUPPORTED_PARAMETER,
            offset::TYPE
        )]
    );
}

#[test]
fn the_deadline_follows_what_the_peer_owes() {
    let t0 = Instant::now();
    let mut ctrl = Connection::controller(ControllerConfig::default(), TIMEOUT, t0).unwrap();
    // Owed from the start: the ICReq.
    let later = t0 + Duration::from_secs(1);
    assert_eq!(ctrl.deadline(later, false), Some(t0 + TIMEOUT));
    ctrl.progress(later);
    assert_eq!(ctrl.deadline(later, false), Some(later + TIMEOUT));
    let (_, mut ctrl, hw, _) = established(HostConfig::default());
    let t1 = Instant::now();
    assert_eq!(ctrl.deadline(t1, false), None, "nothing owed");
    assert_eq!(
        ctrl.deadline(t1, true),
        Some(t1 + TIMEOUT),
        "data asked for"
    );
    assert_eq!(ctrl.deadline(t1, false), None);
    // Half a PDU: the rest is owed.
    let mut wire = Vec::new();
    hw.capsule_cmd(&sqe(7), &[], &mut wire).unwrap();
    assert_eq!(ctrl.read(&wire[..10], seen), (10, None));
    assert!(ctrl.awaiting_peer());
    let t2 = t1 + Duration::from_millis(10);
    assert_eq!(ctrl.deadline(t2, false), Some(t2 + TIMEOUT));
    assert!(ctrl.read(&wire[10..], seen).1.is_some());
    assert_eq!(ctrl.deadline(t2, false), None);
}

#[test]
fn large_data_is_received_elsewhere_and_skipped() {
    let (mut host, _, _, cw) = established(HostConfig::default());
    let mut wire = Vec::new();
    let data = vec![0x42u8; 8192];
    cw.c2h_data(8, 0, &data, true, false, &mut wire).unwrap();
    // Header and 100 data bytes arrive first: the reader stops at the data.
    let (used, ev) = host.read_to_data(&wire[..124], seen);
    assert_eq!((used, ev), (24, None));
    let d = host.data_in_progress().unwrap();
    assert_eq!((d.cid, d.len, d.received), (8, data.len(), 0));
    assert_eq!(host.skip_data(&data), data.len());
    let (_, ev) = host.read(&[], seen);
    assert!(
        matches!(ev, Some(Seen::Pdu(ref p)) if p.contains("C2HData")),
        "{ev:?}"
    );
    assert_eq!(host.header().len(), 24);
}
