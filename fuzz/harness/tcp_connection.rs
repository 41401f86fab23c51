//! A whole NVMe/TCP connection ([`Connection`]), either end, driven as the target's
//! and the host's socket drivers drive it, on an arbitrary byte stream from its peer.
//!
//! Input: the `tcp_framer` layout, so its seeds (recorded traffic) serve here too:
//! one control byte (bit 0: the controller or the host end is fed; bits 1-2: header
//! and data digests asked for; bit 3: the peer end — a real `Connection` of the other
//! role — starts the stream with its own initialization PDU; bits 4-7: chunk size
//! seed; with bit 7 set, the driver also ends the connection itself after PDU number
//! `(ctl >> 4) & 7`, as a driver does on an error it finds), then the stream.
//!
//! Invariants: `read` never consumes more than it is given and always progresses
//! until the connection ends; initialization comes first and once; after a
//! termination (the peer's, a framer error, or the driver's) nothing more is read and
//! no deadline is set; every termination request the connection produces is a
//! well-formed PDU that a fresh connection of the other role reads as the same FES and
//! FEI; a data digest error's header is the PDU's own, at most [`HEADER_KEEP`] bytes.

use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::{
    Connection, ControllerConfig, Event, FramerError, HostConfig, Role, HEADER_KEEP,
};
use nvmf_common::wire::tcp::term_fes;

use super::tcp_framer::{touch, MAX_DATA};

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    No,
    Yes,
}

fn host_config(ctl: u8) -> HostConfig {
    HostConfig {
        header_digest: ctl & 0b010 != 0,
        data_digest: ctl & 0b100 != 0,
        max_c2h_data: MAX_DATA,
        ..HostConfig::default()
    }
}

/// A connection of `role`, and the bytes it sends first (the host's ICReq).
fn connection(role: Role, ctl: u8, now: Instant) -> (Connection, Vec<u8>) {
    let mut first = Vec::new();
    let c = match role {
        Role::Controller => Connection::controller(ControllerConfig::default(), TIMEOUT, now),
        Role::Host => Connection::host(host_config(ctl), TIMEOUT, now, &mut first),
    };
    match c {
        Ok(c) => (c, first),
        Err(e) => panic!("the default configurations are valid: {e}"),
    }
}

/// The peer's first PDU: a host's ICReq, or the ICResp a controller answers this
/// host's ICReq with.
fn peer_initialization(role: Role, ctl: u8, now: Instant) -> Vec<u8> {
    match role {
        // We feed the controller: its peer, a host, opens with the ICReq.
        Role::Controller => connection(Role::Host, ctl, now).1,
        Role::Host => {
            let (_, icreq) = connection(Role::Host, ctl, now);
            let (mut ctrl, _) = connection(Role::Controller, ctl, now);
            let (_, out) = ctrl.read(&icreq, |ev| match ev {
                Event::Established { send, .. } => send.to_vec(),
                other => panic!("a genuine ICReq gives {other:?}"),
            });
            out.unwrap_or_default()
        }
    }
}

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some((&ctl, stream)) = input.split_first() else {
        return;
    };
    let role = if ctl & 1 == 0 {
        Role::Controller
    } else {
        Role::Host
    };
    let now = Instant::now();
    let (mut conn, _) = connection(role, ctl, now);
    let mut bytes = Vec::with_capacity(stream.len() + 128);
    if ctl & 0b1000 != 0 {
        bytes.extend_from_slice(&peer_initialization(role, ctl, now));
    }
    bytes.extend_from_slice(stream);
    let chunk = usize::from(ctl >> 4) * 7 + 1;
    let terminate_after = (ctl & 0x80 != 0).then_some(usize::from((ctl >> 4) & 7));
    let mut established = false;
    let mut pdus = 0usize;
    let mut ended = Ended::No;
    let mut at = 0;
    'stream: while at < bytes.len() {
        let end = (at + chunk).min(bytes.len());
        let mut piece = &bytes[at..end];
        while !piece.is_empty() {
            let was_established = established;
            let (used, out) = conn.read(piece, |ev| check_event(role, was_established, ev));
            assert!(used <= piece.len(), "consumed more than given");
            let left = piece.len() - used;
            piece = &piece[used..];
            at += used;
            match out {
                None => {
                    // An open connection takes every byte until a PDU completes.
                    assert_eq!(left, 0, "bytes left without a PDU");
                    continue 'stream;
                }
                Some(Step::Established) => established = true,
                Some(Step::Pdu) => {
                    pdus += 1;
                    if terminate_after == Some(pdus) {
                        let mut term = Vec::new();
                        conn.terminate(term_fes::INVALID_HEADER_FIELD, 0, &mut term);
                        assert!(conn.header().len() <= HEADER_KEEP);
                        check_term(role, &term, term_fes::INVALID_HEADER_FIELD, 0);
                        ended = Ended::Yes;
                        break 'stream;
                    }
                }
                Some(Step::Ended) => {
                    ended = Ended::Yes;
                    break 'stream;
                }
            }
            let _ = conn.deadline(now, false);
        }
    }
    if ended == Ended::Yes {
        assert_eq!(conn.read(&bytes, |_| ()), (0, None), "read after the end");
        assert_eq!(conn.deadline(now, true), None, "a deadline after the end");
        assert!(!conn.is_established() || established);
    }
}

/// What the harness does next after one event.
enum Step {
    Established,
    Pdu,
    Ended,
}

fn check_event(role: Role, established: bool, ev: Event<'_>) -> Step {
    match ev {
        Event::Established { send, .. } => {
            assert!(!established, "initialized twice");
            assert_eq!(
                send.is_empty(),
                role == Role::Host,
                "ICResp from the controller only"
            );
            Step::Established
        }
        Event::Pdu(p) => {
            assert!(established, "a PDU before initialization");
            touch(&p);
            Step::Pdu
        }
        Event::DataDigest { error, header } => {
            assert!(established, "data before initialization");
            assert!(header.len() <= HEADER_KEEP);
            let FramerError::DataDigest { pdu_type, .. } = error else {
                panic!("a data digest event with {error:?}");
            };
            assert_eq!(header.first(), Some(&pdu_type), "the header is the PDU's");
            Step::Pdu
        }
        Event::PeerTerminated { .. } => Step::Ended,
        Event::Failed { error, send } => {
            assert!(error.is_fatal());
            match error.fes() {
                Some(fes) => check_term(role, send, fes, error.fei()),
                None => assert!(send.is_empty(), "a termination request for {error:?}"),
            }
            Step::Ended
        }
    }
}

/// A termination request from `role` reads, at a fresh connection of the other role,
/// as what was meant.
fn check_term(role: Role, term: &[u8], fes: u16, fei: u32) {
    let peer = match role {
        Role::Controller => Role::Host,
        Role::Host => Role::Controller,
    };
    let (mut c, _) = connection(peer, 0, Instant::now());
    let (used, out) = c.read(term, |ev| match ev {
        Event::PeerTerminated { fes, fei } => (fes, fei),
        other => panic!("our termination request reads as {other:?}"),
    });
    assert_eq!(used, term.len(), "termination request length");
    assert_eq!(out, Some((fes, fei)));
}
