//! The receive loop: large data PDUs' data put straight into the receiver's buffer,
//! the rest handled where it lies, in any split of the input; socket reads past
//! `DIRECT_MIN`; refusals and handler errors.

use super::*;
use crate::transport::tcp::connection_tests::established;
use crate::transport::tcp::{HostConfig, Pdu, PduWriter};
use crate::wire::cqe::CQE_LEN;

const READ_CID: u16 = 4;
const BUF_LEN: usize = 96 * 1024;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// A host driver with one read command's buffer.
struct Host {
    buf: Vec<u8>,
    /// How often each byte of `buf` landed (copied by the handler, or placed: the
    /// data bytes the handler did not get).
    landed: Vec<u8>,
    /// Destinations handed out.
    lent: usize,
    /// Refuse to lend the buffer.
    refuse: bool,
    /// (DATAL, bytes the handler got) of each C2HData; CapsuleResp cids.
    c2h: Vec<(u32, usize)>,
    resps: Vec<u16>,
    digest_errors: usize,
    /// Fail the handler on the next CapsuleResp.
    fail_on_resp: bool,
}

impl Host {
    fn new() -> Self {
        Host {
            buf: vec![0; BUF_LEN],
            landed: vec![0; BUF_LEN],
            lent: 0,
            refuse: false,
            c2h: Vec::new(),
            resps: Vec::new(),
            digest_errors: 0,
            fail_on_resp: false,
        }
    }
}

impl Receiver for Host {
    type Error = &'static str;

    fn destination(&mut self, d: &DataProgress) -> Option<&mut [u8]> {
        if self.refuse || d.cid != READ_CID || d.end()? as usize > BUF_LEN {
            return None;
        }
        let (at, n) = (d.missing_at(), d.missing());
        self.lent += 1;
        self.buf.get_mut(at..at + n)
    }

    fn on_event(&mut self, ev: Event<'_>) -> Result<(), &'static str> {
        match ev {
            Event::Pdu(Pdu::C2HData {
                datao, datal, data, ..
            }) => {
                let at = datao as usize;
                self.buf[at..at + data.len()].copy_from_slice(data);
                for l in &mut self.landed[at..at + datal as usize] {
                    *l += 1;
                }
                self.c2h.push((datal, data.len()));
                Ok(())
            }
            Event::Pdu(Pdu::CapsuleResp { cqe }) => {
                if self.fail_on_resp {
                    return Err("refused");
                }
                self.resps.push(u16::from_le_bytes([cqe[12], cqe[13]]));
                Ok(())
            }
            Event::DataDigest { .. } => {
                self.digest_errors += 1;
                Ok(())
            }
            _ => Err("unexpected event"),
        }
    }
}

fn cqe(cid: u16) -> [u8; CQE_LEN] {
    let mut c = [0u8; CQE_LEN];
    c[12..14].copy_from_slice(&cid.to_le_bytes());
    c
}

/// A response, a 40 KiB C2HData at 4096, a 3-byte C2HData, a response.
fn stream(cw: &PduWriter) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let big = pattern(40 * 1024, 1);
    let small = pattern(3, 2);
    let mut wire = Vec::new();
    cw.capsule_resp(&cqe(9), &mut wire).unwrap();
    cw.c2h_data(READ_CID, 4096, &big, false, false, &mut wire)
        .unwrap();
    cw.c2h_data(
        READ_CID,
        4096 + big.len() as u32,
        &small,
        true,
        false,
        &mut wire,
    )
    .unwrap();
    cw.capsule_resp(&cqe(READ_CID), &mut wire).unwrap();
    (wire, big, small)
}

fn digests(hd: bool, dd: bool) -> HostConfig {
    HostConfig {
        header_digest: hd,
        data_digest: dd,
        ..HostConfig::default()
    }
}

#[test]
fn data_not_whole_in_the_input_goes_into_the_buffer_each_byte_once() {
    for (hd, dd) in [(false, false), (true, true)] {
        for chunk in [1, 7, 100, 4096, 16 * 1024, 1 << 20] {
            let (mut host, _, _, cw) = established(digests(hd, dd));
            let (wire, big, small) = stream(&cw);
            let mut h = Host::new();
            for piece in wire.chunks(chunk) {
                host.receive(piece, &mut h).unwrap();
            }
            assert_eq!(h.resps, vec![9, READ_CID], "chunk {chunk}");
            assert_eq!(&h.buf[4096..4096 + big.len()], &big[..]);
            assert_eq!(&h.buf[4096 + big.len()..4096 + big.len() + 3], &small[..]);
            let end = 4096 + big.len() + 3;
            assert!(h.landed[4096..end].iter().all(|&n| n == 1), "chunk {chunk}");
            assert_eq!(h.c2h.len(), 2);
            assert_eq!((h.c2h[0].0, h.c2h[1].0), (big.len() as u32, 3));
            if chunk >= wire.len() {
                // Whole in the input: handled where it lies, nothing lent.
                assert_eq!(h.lent, 0);
            } else {
                assert!(h.lent > 0);
            }
            assert_eq!(host.read_len(65536), 65536, "the last data PDU was small");
        }
    }
}

#[test]
fn socket_reads_go_in_place_past_direct_min_and_the_next_read_is_small() {
    let (mut host, _, _, cw) = established(digests(false, true));
    let (wire, big, _) = stream(&cw);
    let mut h = Host::new();
    // The response and the C2HData header with 100 data bytes, as one read.
    let resp = 24;
    let first = resp + 24 + 100;
    host.receive(&wire[..first], &mut h).unwrap();
    assert_eq!(h.resps, vec![9]);
    // The input held the first 100 data bytes: they went in place already.
    let d = host.wants_in_place(DIRECT_MIN).expect("40 KiB missing");
    assert_eq!(
        (d.received, d.missing(), d.placing),
        (100, big.len() - 100, true)
    );
    assert_eq!(h.lent, 1);
    // A short socket read straight into the buffer, then the rest.
    let mut at = first;
    for n in [1000, big.len() - 100 - 1000] {
        let dst = host
            .wants_in_place(DIRECT_MIN)
            .and_then(|d| h.destination(&d))
            .expect("in place once started, however little is missing");
        assert_eq!(dst.len(), big.len() - (at - resp - 24));
        dst[..n].copy_from_slice(&wire[at..at + n]);
        host.placed(&wire[at..at + n]);
        host.receive(&[], &mut h).unwrap();
        at += n;
    }
    // The data digest comes through an ordinary read.
    assert_eq!(host.wants_in_place(DIRECT_MIN), None);
    assert!(h.c2h.is_empty());
    host.receive(&wire[at..at + 4], &mut h).unwrap();
    assert_eq!(
        h.c2h,
        vec![(big.len() as u32, 0)],
        "every data byte was placed"
    );
    assert_eq!(host.read_len(65536), SMALL_RX, "after a large PDU placed");
    host.receive(&wire[at + 4..], &mut h).unwrap();
    assert_eq!(h.resps, vec![9, READ_CID]);
    assert_eq!(&h.buf[4096..4096 + big.len()], &big[..]);
    assert_eq!(host.read_len(65536), 65536);
}

#[test]
fn below_direct_min_a_socket_read_takes_the_buffer() {
    let (mut host, _, _, cw) = established(HostConfig::default());
    let data = pattern(DIRECT_MIN - 1, 5);
    let mut wire = Vec::new();
    cw.c2h_data(READ_CID, 0, &data, true, true, &mut wire)
        .unwrap();
    let mut h = Host::new();
    // The header alone: the loop stops at the data, nothing placed yet.
    host.receive(&wire[..24], &mut h).unwrap();
    assert_eq!(h.lent, 0);
    assert_eq!(host.wants_in_place(DIRECT_MIN), None);
    let d = host.wants_in_place(DIRECT_MIN - 1);
    assert_eq!(
        d.map(|d| (d.missing(), d.placing)),
        Some((DIRECT_MIN - 1, false))
    );
}

#[test]
fn data_the_receiver_does_not_take_goes_through_the_framer() {
    let (mut host, _, _, cw) = established(HostConfig::default());
    let (wire, big, _) = stream(&cw);
    let mut h = Host::new();
    h.refuse = true;
    for piece in wire.chunks(1000) {
        host.receive(piece, &mut h).unwrap();
    }
    assert_eq!(h.lent, 0);
    assert_eq!(h.c2h[0], (big.len() as u32, big.len()));
    assert_eq!(&h.buf[4096..4096 + big.len()], &big[..]);
}

#[test]
fn placed_data_that_fails_its_digest_is_a_digest_error_and_the_stream_goes_on() {
    let (mut host, _, _, cw) = established(digests(false, true));
    let (mut wire, _, _) = stream(&cw);
    // A data byte of the large PDU, well past what the first piece holds.
    wire[24 + 24 + 20_000] ^= 0x40;
    let mut h = Host::new();
    for piece in wire.chunks(4096) {
        host.receive(piece, &mut h).unwrap();
    }
    assert_eq!(h.digest_errors, 1);
    assert_eq!(h.c2h.len(), 1, "only the small PDU");
    assert_eq!(h.resps, vec![9, READ_CID]);
}

#[test]
fn a_handler_error_stops_the_loop_and_comes_back() {
    let (mut host, _, _, cw) = established(HostConfig::default());
    let (wire, _, _) = stream(&cw);
    let mut h = Host::new();
    h.fail_on_resp = true;
    assert_eq!(host.receive(&wire, &mut h), Err("refused"));
    assert!(
        h.c2h.is_empty(),
        "nothing after the failed event was handled"
    );
}
