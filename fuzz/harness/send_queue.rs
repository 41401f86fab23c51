//! A controller's NVMe/TCP send queue ([`SendQueue`]) with deferred responses, driven
//! as the target's connection drives it: C2HData for reads (copied when short, queued
//! by reference otherwise, through [`SendQueue::push_data_pdu`]), each read's
//! response deferred or queued at once, responses that are never deferred, writes of
//! any size (none, partial, everything), releases before a termination request, and
//! the connection's end ([`SendQueue::clear`]).
//!
//! Input: one control byte (bit 0: header digests; bit 1: data digests), then one
//! byte per step choosing the operation and a byte or two of its parameters.
//!
//! Invariants:
//! - what is written is whole PDUs, byte for byte as the [`PduWriter`] encodes them
//!   (so digests and data are intact), each once;
//! - PDUs queued at once keep their order; deferred responses keep theirs;
//! - a deferred response follows everything queued before it was deferred, and at
//!   most [`DEFER_MAX_DATA`] bytes of data queued after it go before it;
//! - a write (`iovecs`) or `release_deferred` puts every response deferred until then
//!   before anything queued afterwards;
//! - `queued()` is exactly the bytes not yet written, and nothing is pending after
//!   everything was written;
//! - every data segment comes back once, from `advance` only after its bytes were
//!   written, or from `clear`.

use nvmf_common::transport::tcp::{
    data_pieces, Negotiated, PduWriter, Role, SendData, SendQueue, DEFER_MAX_DATA,
};
use nvmf_common::wire::cqe::CQE_LEN;

use super::input::Input;

/// Data queued by reference: its segment number and a copy of the bytes.
struct Seg {
    id: usize,
    bytes: Vec<u8>,
}

impl SendData for Seg {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Read lengths the input chooses from: copied, at the copy threshold, by reference,
/// past the deferral cap.
const READ_LENS: [u32; 10] = [
    1, 100, 512, 1023, 1024, 4096, 8192, 65_536, 131_072, 1_100_000,
];
/// C2HData sizes (the target's chunk).
const CHUNKS: [u32; 5] = [512, 4096, 8192, 32_768, 131_072];
/// Bytes one write takes at most (`usize::MAX`: what `iovecs` offers).
const WRITE_SIZES: [usize; 8] = [0, 1, 7, 100, 4096, 65_536, 1 << 20, usize::MAX];
/// Data queued by one run at most, to keep runs short.
const MAX_TOTAL: usize = 8 << 20;

/// One PDU the harness queued.
struct Queued {
    /// Its bytes, as the writer encodes them whole.
    bytes: Vec<u8>,
    /// DATAL for a data PDU, 0 otherwise.
    data_len: usize,
    /// Deferred responses that must go before it (main PDUs), or main PDUs that must go
    /// before it (deferred PDUs).
    after: usize,
}

/// What the queue was given, in the order given, and what it wrote.
#[derive(Default)]
struct Model {
    /// PDUs queued into the stream at once.
    main: Vec<Queued>,
    /// Deferred PDUs.
    deferred: Vec<Queued>,
    /// Deferred PDUs a write or release has put into the stream.
    released: usize,
    /// The bytes written so far.
    stream: Vec<u8>,
    /// Segments queued: whether each came back, and its PDU's index in `main`.
    segs_back: Vec<bool>,
    seg_pdu: Vec<usize>,
    /// Data queued so far, bytes.
    total_data: usize,
    next_cid: u16,
    /// How far the stream was checked: its offset, and the main and deferred PDUs
    /// whole before it.
    at: usize,
    mi: usize,
    di: usize,
}

struct Rig {
    w: PduWriter,
    data_digest: bool,
    q: SendQueue<Seg>,
    m: Model,
}

fn pattern(cid: u16, at: usize) -> u8 {
    (cid as usize).wrapping_mul(31).wrapping_add(at) as u8
}

impl Rig {
    fn response(&self, cid: u16) -> Vec<u8> {
        let mut cqe = [0u8; CQE_LEN];
        cqe[12..14].copy_from_slice(&cid.to_le_bytes());
        let mut out = Vec::new();
        self.w
            .capsule_resp(&cqe, &mut out)
            .expect("a controller's response encodes");
        out
    }

    fn main_pdu(&mut self, bytes: Vec<u8>, data_len: usize) {
        self.m.main.push(Queued {
            bytes,
            data_len,
            after: self.m.released,
        });
    }

    /// A read of `len` bytes in `chunk`-sized C2HData; its response deferred, queued
    /// at once, or carried by the last PDU's SUCCESS flag. `by_ref_fails`: the buffer
    /// cannot be referenced (the PDU must not be queued, nor anything after it).
    fn read(&mut self, len: u32, chunk: u32, how: u8, by_ref_fails: bool) {
        let cid = self.m.next_cid;
        self.m.next_cid = cid.wrapping_add(1);
        let success = how % 3 == 2;
        let data: Vec<u8> = (0..len as usize).map(|i| pattern(cid, i)).collect();
        for p in data_pieces(0, len, chunk, success) {
            let piece = &data[p.range()];
            let mut whole = Vec::new();
            self.w
                .c2h_data(cid, p.datao, piece, p.last, p.success, &mut whole)
                .expect("a controller's C2HData encodes");
            let id = self.m.segs_back.len();
            let mut made = false;
            let before = self.q.queued();
            let r = self.q.push_data_pdu(&self.w, cid, 0, p, piece, || {
                made = true;
                (!by_ref_fails).then(|| Seg {
                    id,
                    bytes: piece.to_vec(),
                })
            });
            if by_ref_fails && made {
                assert!(r.is_err(), "a PDU whose data has no segment was queued");
                // before_data may have released deferred responses: a release moves
                // bytes within the queue, it never adds any.
                assert_eq!(
                    self.q.queued(),
                    before,
                    "a refused PDU changed what is queued"
                );
                return;
            }
            r.expect("a data PDU with its segment queues");
            if made {
                self.m.segs_back.push(false);
                self.m.seg_pdu.push(self.m.main.len());
            }
            self.m.total_data += piece.len();
            self.main_pdu(whole, piece.len());
        }
        match how % 3 {
            0 => {
                let r = self.response(cid);
                self.q.deferred().extend_from_slice(&r);
                let after = self.m.main.len();
                self.m.deferred.push(Queued {
                    bytes: r,
                    data_len: 0,
                    after,
                });
            }
            1 => self.respond_now(cid),
            _ => {}
        }
    }

    /// A response queued at once (a write's, an error's).
    fn respond_now(&mut self, cid: u16) {
        let r = self.response(cid);
        self.q.bytes.extend_from_slice(&r);
        self.main_pdu(r, 0);
    }

    /// `iovecs`, then `advance` by at most `max` bytes of them.
    fn write(&mut self, max: usize) {
        let v = self.q.iovecs();
        let mut n = 0;
        for s in v.iter() {
            let t = (max - n).min(s.len());
            self.m.stream.extend_from_slice(&s[..t]);
            n += t;
            if n == max {
                break;
            }
        }
        drop(v);
        // Everything deferred so far is in the stream's queue now.
        self.m.released = self.m.deferred.len();
        let mut back = Vec::new();
        self.q.advance(n, &mut back);
        let partial = self.check_stream(false);
        for s in &back {
            // Handed back only once its bytes were written: its PDU is whole in the
            // stream, or written up to its data digest.
            let k = self.m.seg_pdu[s.id];
            let trailer = if self.data_digest { 4 } else { 0 };
            let done = k < self.m.mi
                || partial
                    .is_some_and(|w| k == self.m.mi && w + trailer >= self.m.main[k].bytes.len());
            assert!(done, "segment {} handed back before it was written", s.id);
        }
        self.take_back(back);
        self.check_queued();
    }

    fn write_all(&mut self) {
        let mut guard = 0;
        while self.q.pending() {
            self.write(usize::MAX);
            guard += 1;
            assert!(guard < 1 << 16, "the queue never empties");
        }
        assert_eq!(self.q.queued(), 0, "nothing pending, yet bytes queued");
    }

    fn take_back(&mut self, back: Vec<Seg>) {
        for s in back {
            let slot = self
                .m
                .segs_back
                .get_mut(s.id)
                .expect("a segment the harness queued");
            assert!(!*slot, "segment {} handed back twice", s.id);
            *slot = true;
        }
    }

    /// Bytes queued, by the model: everything queued less what was written.
    fn check_queued(&self) {
        let total: usize = self
            .m
            .main
            .iter()
            .chain(self.m.deferred.iter())
            .map(|p| p.bytes.len())
            .sum();
        assert_eq!(
            self.q.queued(),
            total - self.m.stream.len(),
            "queued() differs from what is not yet written"
        );
    }

    /// Checks what was written since the last call: the queued PDUs, whole, in an
    /// order the rules allow; with `complete`, all of them and every segment back.
    /// Returns the bytes written of main PDU `mi` when the stream ends inside it.
    fn check_stream(&mut self, complete: bool) -> Option<usize> {
        let m = &mut self.m;
        let mut partial = None;
        while m.at < m.stream.len() {
            let rest = &m.stream[m.at..];
            let main = m.main.get(m.mi).filter(|p| p.after <= m.di);
            let def = m.deferred.get(m.di).filter(|p| p.after <= m.mi);
            let fits = |p: &Queued| {
                let n = p.bytes.len().min(rest.len());
                p.bytes[..n] == rest[..n]
            };
            let whole = |p: &Queued| p.bytes.len() <= rest.len();
            if let Some(p) = main.filter(|p| fits(p)) {
                if !whole(p) {
                    partial = Some(rest.len());
                    break;
                }
                m.at += p.bytes.len();
                m.mi += 1;
            } else if let Some(p) = def.filter(|p| fits(p)) {
                if !whole(p) {
                    break;
                }
                let behind: usize = m.main[p.after..m.mi].iter().map(|q| q.data_len).sum();
                assert!(
                    behind <= DEFER_MAX_DATA,
                    "{behind} bytes of data went before a deferred response"
                );
                m.at += p.bytes.len();
                m.di += 1;
            } else {
                panic!(
                    "stream offset {}: neither main PDU {} nor deferred PDU {} \
                     (whole PDUs, order, deferral rules)",
                    m.at, m.mi, m.di
                );
            }
        }
        if complete {
            assert_eq!(m.at, m.stream.len(), "a PDU was cut at the end");
            assert_eq!(m.mi, m.main.len(), "main PDUs missing");
            assert_eq!(m.di, m.deferred.len(), "deferred PDUs missing");
            assert!(m.segs_back.iter().all(|b| *b), "a segment never came back");
        }
        partial
    }
}

pub fn run(input: &[u8]) {
    let mut inp = Input(input);
    let ctl = inp.byte();
    let n = Negotiated {
        header_digest: ctl & 1 != 0,
        data_digest: ctl & 2 != 0,
        hpda: 0,
        cpda: 0,
        maxh2cdata: 131_072,
        maxr2t: 0,
    };
    let mut r = Rig {
        w: PduWriter::new(Role::Controller, &n),
        data_digest: n.data_digest,
        q: SendQueue::default(),
        m: Model::default(),
    };
    while !inp.done() && r.m.total_data < MAX_TOTAL && r.m.next_cid < u16::MAX - 1024 {
        let b = inp.byte();
        let p = inp.byte();
        let len = READ_LENS[p as usize % READ_LENS.len()];
        let chunk = CHUNKS[(p as usize / READ_LENS.len()) % CHUNKS.len()];
        match b % 8 {
            0 | 1 => r.read(len, chunk, b >> 3, false),
            2 => {
                let cid = r.m.next_cid;
                r.m.next_cid += 1;
                r.respond_now(cid);
            }
            3 => r.write(WRITE_SIZES[p as usize % WRITE_SIZES.len()]),
            4 => r.write_all(),
            5 => {
                // A termination request goes after every deferred response.
                r.q.release_deferred();
                r.m.released = r.m.deferred.len();
                let cid = r.m.next_cid;
                r.m.next_cid += 1;
                r.respond_now(cid);
            }
            6 => r.read(len.max(1024), chunk.max(1024), b >> 3, true),
            _ => {
                // A burst: up to 64 short reads (deferred, mostly), then writes of up to
                // a few at a time; many of these teach the queue the host's depth.
                let count = 1 + (b >> 3) as usize * 2;
                for i in 0..count {
                    let small = READ_LENS[(p as usize + i) % 6];
                    r.read(small, 4096, if i % 5 == 4 { 1 } else { 0 }, false);
                }
                r.write(WRITE_SIZES[(p >> 4) as usize % WRITE_SIZES.len()]);
            }
        }
        r.check_queued();
        r.check_stream(false);
    }
    if inp.byte() & 1 == 1 {
        // The connection ends: what is queued is dropped, and the segments come back.
        let mut dropped = Vec::new();
        r.q.clear(&mut dropped);
        r.take_back(dropped);
        assert!(!r.q.pending(), "pending after clear");
        assert!(r.m.segs_back.iter().all(|b| *b), "a segment lost by clear");
        r.check_stream(false);
        return;
    }
    r.write_all();
    r.check_stream(true);
}
