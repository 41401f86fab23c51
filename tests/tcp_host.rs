//! The host library's NVMe/TCP queue end to end against the scripted controller
//! ([`nvmf_tests::raw_tcp::ctrl`]): a std listener on 127.0.0.1 in a thread speaking
//! through the framer's controller-side reader and writer, so every PDU the host sends
//! is checked by the validation a real target applies, and each test scripts what the
//! controller answers: data paths with and without digests, R2Ts, C2HData in pieces,
//! the SUCCESS flag, and controllers that misbehave (the queue must die with the exact
//! reason and a termination request). The host library against our own target is in
//! `tcp_io.rs`; the unit tests that need the library's private items stay in
//! `initiator/src/transport/tcp/tests.rs` (on the same scripted controller).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::{encode_term_req, ControllerConfig, IcReqParams, Role};
use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_common::wire::tcp::{flags, offset, pdu_type, term_fes};
use nvmf_initiator::command;
use nvmf_initiator::queue::Queue;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpHostQueue, TcpOptions};
use nvmf_initiator::transport::{DataDir, Fabric, HostQueue, IoBuf, QueueParams, TransportError};
use nvmf_tests::raw_tcp::ctrl::{join, sgl1, sqe_cid, Got, RawCtrl};

const T: Duration = Duration::from_secs(10);

/// A failed command's status (Invalid Field, DNR), made from its fields.
const INVALID_FIELD_STATUS: Status = Status {
    sct: Sct::Generic,
    sc: generic::INVALID_FIELD,
    dnr: true,
    ..Status::SUCCESS
};

fn params(qid: u16, depth: u16, icd: u32) -> QueueParams {
    QueueParams {
        qid: Qid(qid),
        depth,
        in_capsule_data: icd,
        connect_timeout: T,
    }
}

fn opts(hdgst: bool, ddgst: bool) -> TcpOptions {
    TcpOptions {
        hdr_digest: hdgst,
        data_digest: ddgst,
        ..TcpOptions::default()
    }
}

fn connect(addr: SocketAddr, o: TcpOptions, p: &QueueParams) -> TcpHostQueue {
    TcpFabric::new(addr, o)
        .connect(p)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

fn buf_with(f: &TcpFabric, data: &[u8]) -> IoBuf {
    let b = f.alloc(data.len()).unwrap_or_else(|e| panic!("{e}"));
    assert!(b.write_at(0, data));
    b
}

fn contents(b: &IoBuf) -> Vec<u8> {
    let mut v = vec![0u8; b.len];
    assert!(b.read_at(0, &mut v));
    v
}

/// An SQE with `opcode` and command id `cid` (DPTR is the transport's).
fn sqe(opcode: u8, cid: u16) -> [u8; 64] {
    let mut s = [0u8; 64];
    let mut v = Sqe::new_unchecked(&mut s[..]);
    v.set_opcode(opcode);
    v.set_cid(cid);
    s
}

fn cqe_cid(c: &[u8; 16]) -> u16 {
    Cqe::new_unchecked(&c[..]).cid()
}

/// Polls (and waits) until `n` completions are in; panics after 10 s.
fn poll_n(q: &mut dyn HostQueue, n: usize) -> Result<Vec<[u8; 16]>, TransportError> {
    let deadline = Instant::now() + T;
    let mut out = Vec::new();
    while out.len() < n {
        q.poll(&mut out)?;
        if out.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no completion in {T:?}: {} of {n}",
            out.len()
        );
        q.wait(Duration::from_millis(50));
    }
    Ok(out)
}

/// Polls until the queue dies; returns the reason. Panics after 10 s.
fn poll_dead(q: &mut dyn HostQueue) -> String {
    match poll_n(q, usize::MAX) {
        Err(TransportError::Dead(m)) => m,
        other => panic!("expected a dead queue, got {other:?}"),
    }
}

/// Every later call reports the same death.
fn stays_dead(q: &mut dyn HostQueue, why: &str) {
    let dead = |r: Result<(), TransportError>| {
        assert_eq!(r, Err(TransportError::Dead(why.to_string())));
    };
    dead(q.poll(&mut Vec::new()).map(|_| ()));
    dead(q.flush());
    dead(q.submit(0, &sqe(0x02, 0), None, DataDir::None));
    let t0 = Instant::now();
    q.wait(Duration::from_secs(5));
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "wait on a dead queue"
    );
}

const READ: u8 = 0x02;
const WRITE: u8 = 0x01;

#[test]
fn icreq_and_a_command_without_data() {
    let cfg = ControllerConfig {
        maxh2cdata: 64 * 1024,
        ..ControllerConfig::default()
    };
    let (addr, h) = RawCtrl::spawn(cfg, |mut c| {
        assert_eq!(
            c.icreq(),
            IcReqParams {
                pfv: 0,
                hpda: 0,
                digest: 0,
                maxr2t: 0
            }
        );
        let (s, data) = c.cmd();
        assert!(data.is_empty());
        // Linux nvme_tcp_set_sg_null: a zero-length transport data block.
        assert_eq!(sgl1(&s), SglDescriptor::transport(0).to_bytes());
        assert_eq!(sgl1(&s)[15], 0x5A);
        assert_eq!(&s[..4], &sqe(0x18, 3)[..4]);
        c.resp(3, Status::SUCCESS, 0xABCD);
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    assert_eq!((f.name(), f.keyed_sgls()), ("tcp", false));
    let mut q = f
        .connect_queue(&params(1, 8, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    q.submit(3, &sqe(0x18, 3), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let out = poll_n(q.as_mut(), 1).unwrap_or_else(|e| panic!("{e}"));
    let c = Cqe::new_unchecked(&out[0][..]);
    assert_eq!((c.cid(), c.dw0(), c.sqhd()), (3, 0xABCD, 3));
    assert!(c.status().is_success());
    q.close();
    stays_dead(q.as_mut(), "closed");
    join(h);
}

#[test]
fn negotiated_parameters() {
    let cfg = ControllerConfig {
        maxh2cdata: 8192,
        cpda: 3,
        ..ControllerConfig::default()
    };
    let (addr, h) = RawCtrl::spawn(cfg, |mut c| {
        assert_eq!(c.icreq().digest, 3);
        assert_eq!(c.recv(), Got::Eof);
    });
    let q = connect(addr, opts(true, true), &params(0, 32, 0));
    let n = q.negotiated();
    assert!(n.header_digest && n.data_digest);
    assert_eq!((n.cpda, n.maxh2cdata, n.maxr2t, n.hpda), (3, 8192, 0, 0));
    // The admin queue takes 8 KiB in the capsule before Identify (Linux).
    assert_eq!(q.in_capsule_data(), 8192);
    assert_eq!(q.depth(), 32);
    drop(q);
    join(h);
}

/// In-capsule write, R2T write and read, each with and without digests (the framer
/// on both ends checks every digest and the CPDA padding).
#[test]
fn data_paths_with_and_without_digests() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let small = pattern(4096, 1);
        let big = pattern(20000, 2);
        let rd = pattern(9000, 3);
        let (s2, b2, r2) = (small.clone(), big.clone(), rd.clone());
        let cfg = ControllerConfig {
            maxh2cdata: 8192,
            cpda: 1,
            ..ControllerConfig::default()
        };
        let (addr, h) = RawCtrl::spawn(cfg, move |mut c| {
            assert_eq!(c.icreq().digest, u8::from(hd) | (u8::from(dd) << 1));
            let (s, data) = c.cmd();
            assert_eq!(sgl1(&s), SglDescriptor::in_capsule(0, 4096).to_bytes());
            assert_eq!(data, s2);
            c.resp(0, Status::SUCCESS, 0);
            let (s, data) = c.cmd();
            assert!(data.is_empty());
            assert_eq!(sgl1(&s), SglDescriptor::transport(20000).to_bytes());
            c.r2t(1, 9, 0, 20000);
            let mut got = Vec::new();
            for (off, len, last) in [(0, 8192, false), (8192, 8192, false), (16384, 3616, true)] {
                match c.recv() {
                    Got::H2C {
                        cid: 1,
                        ttag: 9,
                        datao,
                        last: l,
                        data,
                    } => {
                        assert_eq!((datao, data.len(), l), (off, len, last));
                        got.extend_from_slice(&data);
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(got, b2);
            c.resp(1, Status::SUCCESS, 0);
            let (s, _) = c.cmd();
            assert_eq!(sgl1(&s), SglDescriptor::transport(9000).to_bytes());
            c.c2h(2, 0, &r2[..5000], false, false);
            c.c2h(2, 5000, &r2[5000..], true, true);
            assert_eq!(c.recv(), Got::Eof);
        });
        let f = TcpFabric::new(addr, opts(hd, dd));
        let mut q = f
            .connect(&params(1, 8, 8192))
            .unwrap_or_else(|e| panic!("{e}"));
        let b = buf_with(&f, &small);
        q.submit(0, &sqe(WRITE, 0), Some(&b), DataDir::ToCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cqe_cid(&poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"))[0]),
            0
        );
        let b = buf_with(&f, &big);
        q.submit(1, &sqe(WRITE, 1), Some(&b), DataDir::ToCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cqe_cid(&poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"))[0]),
            1
        );
        let b = f.alloc(9000).unwrap_or_else(|e| panic!("{e}"));
        q.submit(2, &sqe(READ, 2), Some(&b), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        let c = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cqe_cid(&c[0]), 2);
        assert_eq!(contents(&b), rd);
        drop(q);
        join(h);
    }
}

#[test]
fn in_capsule_limit_on_io_and_admin_queues() {
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), |mut c| {
        // I/O queue with 8 KiB: 8192 bytes go in the capsule, 8193 do not.
        let (s, d) = c.cmd();
        assert_eq!(sgl1(&s), SglDescriptor::in_capsule(0, 8192).to_bytes());
        assert_eq!(d, pattern(8192, 7));
        let (s, d) = c.cmd();
        assert_eq!(sgl1(&s), SglDescriptor::transport(8193).to_bytes());
        assert!(d.is_empty());
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = f
        .connect(&params(1, 4, 8192))
        .unwrap_or_else(|e| panic!("{e}"));
    let a = buf_with(&f, &pattern(8192, 7));
    let b = buf_with(&f, &pattern(8193, 7));
    q.submit(0, &sqe(WRITE, 0), Some(&a), DataDir::ToCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    q.submit(1, &sqe(WRITE, 1), Some(&b), DataDir::ToCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    // A busy or out-of-range slot is refused before anything is encoded.
    assert!(matches!(
        q.submit(1, &sqe(WRITE, 1), Some(&b), DataDir::ToCtrl),
        Err(TransportError::Invalid(_))
    ));
    assert!(matches!(
        q.submit(4, &sqe(WRITE, 4), None, DataDir::None),
        Err(TransportError::Invalid(_))
    ));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    drop(q);
    join(h);

    // An I/O queue of a controller without in-capsule data: every write by R2T.
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), |mut c| {
        let (s, d) = c.cmd();
        assert_eq!(sgl1(&s), SglDescriptor::transport(512).to_bytes());
        assert!(d.is_empty());
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = f
        .connect(&params(2, 4, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let a = buf_with(&f, &pattern(512, 1));
    q.submit(0, &sqe(WRITE, 0), Some(&a), DataDir::ToCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    drop(q);
    join(h);
}

/// A 64 KiB write answered with two R2Ts of 32 KiB: each gets H2CData PDUs of at
/// most MAXH2CDATA with LAST on the final one of that R2T, at the right offsets, with
/// the right bytes.
#[test]
fn large_write_by_two_r2ts() {
    for maxh2cdata in [16 * 1024u32, 128 * 1024] {
        let data = pattern(64 * 1024, 5);
        let d2 = data.clone();
        let cfg = ControllerConfig {
            maxh2cdata,
            ..ControllerConfig::default()
        };
        let (addr, h) = RawCtrl::spawn(cfg, move |mut c| {
            let (s, d) = c.cmd();
            assert!(d.is_empty());
            assert_eq!(sgl1(&s), SglDescriptor::transport(65536).to_bytes());
            let cid = sqe_cid(&s);
            assert_eq!(cid, 5);
            let per = (32 * 1024 / maxh2cdata.min(32 * 1024)) as usize;
            for (ttag, r2to) in [(0x11u16, 0u32), (0x12, 32 * 1024)] {
                c.r2t(cid, ttag, r2to, 32 * 1024);
                for i in 0..per {
                    let chunk = maxh2cdata.min(32 * 1024);
                    let want_off = r2to + i as u32 * chunk;
                    match c.recv() {
                        Got::H2C {
                            cid: 5,
                            ttag: t,
                            datao,
                            last,
                            data,
                        } => {
                            assert_eq!(t, ttag);
                            assert_eq!(datao, want_off);
                            assert_eq!(data.len(), chunk as usize);
                            assert_eq!(last, i + 1 == per);
                            let o = datao as usize;
                            assert_eq!(data, &d2[o..o + data.len()]);
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            c.resp(5, Status::SUCCESS, 0);
            assert_eq!(c.recv(), Got::Eof);
        });
        let f = TcpFabric::new(addr, TcpOptions::default());
        let mut q = f
            .connect(&params(1, 8, 8192))
            .unwrap_or_else(|e| panic!("{e}"));
        let b = buf_with(&f, &data);
        q.submit(5, &sqe(WRITE, 5), Some(&b), DataDir::ToCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cqe_cid(&out[0]), 5);
        drop(q);
        join(h);
    }
}

#[test]
fn read_in_two_c2h_chunks_then_capsule_resp() {
    let data = pattern(8192, 9);
    let d2 = data.clone();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        let (s, _) = c.cmd();
        assert_eq!(sgl1(&s), SglDescriptor::transport(8192).to_bytes());
        // Out of order is fine, as long as it stays inside the buffer.
        c.c2h(2, 4096, &d2[4096..], false, false);
        c.c2h(2, 0, &d2[..4096], true, false);
        c.resp(2, Status::SUCCESS, 0x77);
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = f
        .connect(&params(1, 4, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let b = f.alloc(8192).unwrap_or_else(|e| panic!("{e}"));
    q.submit(2, &sqe(READ, 2), Some(&b), DataDir::FromCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), 1);
    let c = Cqe::new_unchecked(&out[0][..]);
    assert_eq!((c.cid(), c.dw0(), c.sqhd()), (2, 0x77, 3));
    assert_eq!(contents(&b), data);
    drop(q);
    join(h);
}

#[test]
fn large_c2h_data_arriving_in_pieces_lands_in_the_buffer() {
    // Large C2HData is received straight into the command's buffer once its header is
    // in; pieces of every size (smaller and larger than that path's threshold) and
    // header digests must leave exactly the data in the buffer.
    for hdgst in [false, true] {
        let data = pattern(200_000, 5);
        let d2 = data.clone();
        let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
            let (s, _) = c.cmd();
            assert_eq!(sgl1(&s), SglDescriptor::transport(200_000).to_bytes());
            let mut first = Vec::new();
            c.writer()
                .c2h_data(3, 0, &d2[..150_000], false, false, &mut first)
                .unwrap_or_else(|e| panic!("{e}"));
            // The header and a few data bytes, a large part, most of the rest (so that
            // less than the threshold is missing), then the last bytes.
            let tail = first.len() - 10_000;
            let mut at = 0;
            for end in [30, 40_030, 70_000, tail, first.len() - 7, first.len()] {
                c.send(&first[at..end]);
                at = end;
                thread::sleep(Duration::from_millis(20));
            }
            // The second PDU and the response in one go.
            let mut rest = Vec::new();
            c.writer()
                .c2h_data(3, 150_000, &d2[150_000..], true, false, &mut rest)
                .unwrap_or_else(|e| panic!("{e}"));
            c.send(&rest[..10]);
            thread::sleep(Duration::from_millis(5));
            c.send(&rest[10..]);
            c.resp(3, Status::SUCCESS, 0);
            assert_eq!(c.recv(), Got::Eof);
        });
        let f = TcpFabric::new(addr, opts(hdgst, false));
        let mut q = f
            .connect(&params(1, 4, 0))
            .unwrap_or_else(|e| panic!("{e}"));
        let b = f.alloc(200_000).unwrap_or_else(|e| panic!("{e}"));
        q.submit(3, &sqe(READ, 3), Some(&b), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cqe_cid(&out[0]), 3);
        assert!(contents(&b) == data, "hdgst {hdgst}: data differs");
        drop(q);
        join(h);
    }
}

#[test]
fn read_with_c2h_success_synthesizes_the_completion() {
    let data = pattern(4096, 4);
    let d2 = data.clone();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        c.cmd();
        c.c2h(1, 0, &d2, true, true);
        // A second command still works after the synthesized completion.
        let (s, _) = c.cmd();
        assert_eq!(sqe_cid(&s), 1);
        c.resp(1, Status::SUCCESS, 0);
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = f
        .connect(&params(3, 4, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let b = f.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    q.submit(1, &sqe(READ, 1), Some(&b), DataDir::FromCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
    let c = Cqe::new_unchecked(&out[0][..]);
    assert_eq!((c.cid(), c.sqid(), c.sqhd(), c.dw0()), (1, 3, 0, 0));
    assert!(c.status().is_success());
    assert_eq!(contents(&b), data);
    // The slot is free again.
    q.submit(1, &sqe(READ, 1), Some(&b), DataDir::FromCtrl)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}")).len(), 1);
    drop(q);
    join(h);
}

/// Runs a one-command exchange where the controller misbehaves; returns the queue's
/// death reason and what the controller received after misbehaving.
fn misbehave(
    cfg: ControllerConfig,
    o: TcpOptions,
    dir: DataDir,
    len: usize,
    bad: impl FnOnce(&mut RawCtrl) + Send + 'static,
) -> (String, Vec<Got>) {
    let (tx, rx) = mpsc::channel();
    let (addr, h) = RawCtrl::spawn(cfg, move |mut c| {
        c.cmd();
        bad(&mut c);
        tx.send(c.rest()).unwrap_or_else(|e| panic!("{e}"));
    });
    let f = TcpFabric::new(addr, o);
    let mut q = f
        .connect(&params(1, 8, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let b = (len > 0).then(|| buf_with(&f, &pattern(len, 0)));
    let op = if dir == DataDir::ToCtrl { WRITE } else { READ };
    q.submit(2, &sqe(op, 2), b.as_ref(), dir)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let why = poll_dead(&mut q);
    stays_dead(&mut q, &why);
    join(h);
    (why, rx.recv().unwrap_or_else(|e| panic!("{e}")))
}

fn term_of(after: &[Got]) -> (u16, u32, Vec<u8>) {
    match after {
        [Got::Term { fes, fei, hdr }, Got::Eof] => (*fes, *fei, hdr.clone()),
        other => panic!("expected H2CTermReq then close, got {other:?}"),
    }
}

#[test]
fn c2h_data_for_an_unknown_cid_kills_the_queue() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::FromCtrl,
        4096,
        |c| c.c2h(7, 0, &[1u8; 512], true, false),
    );
    assert_eq!(
        why,
        "C2HData for command id 7, which is not outstanding (unknown command id)"
    );
    let (fes, fei, hdr) = term_of(&after);
    assert_eq!(
        (fes, fei),
        (term_fes::INVALID_HEADER_FIELD, offset::COMMAND_ID)
    );
    // The header of the offending PDU is echoed.
    assert_eq!(hdr.len(), 24);
    assert_eq!(
        (hdr[0], u16::from_le_bytes([hdr[8], hdr[9]])),
        (pdu_type::C2H_DATA, 7)
    );
}

#[test]
fn c2h_data_beyond_the_buffer_kills_the_queue() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::FromCtrl,
        4096,
        |c| c.c2h(2, 2048, &[1u8; 4096], true, false),
    );
    assert_eq!(
        why,
        "C2HData for command id 2 at bytes 2048..6144, beyond its 4096-byte buffer"
    );
    assert_eq!(term_of(&after).0, term_fes::DATA_OUT_OF_RANGE);
}

#[test]
fn c2h_data_for_a_write_kills_the_queue() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::ToCtrl,
        16384,
        |c| c.c2h(2, 0, &[1u8; 512], true, false),
    );
    assert_eq!(why, "C2HData for command id 2, which reads no data");
    assert_eq!(term_of(&after).0, term_fes::INVALID_HEADER_FIELD);
}

#[test]
fn bad_r2ts_kill_the_queue() {
    let cases: Vec<(u16, u32, u32, DataDir, &str, u16)> = vec![
        (
            6,
            0,
            4096,
            DataDir::ToCtrl,
            "R2T for command id 6, which is not outstanding (unknown command id)",
            term_fes::INVALID_HEADER_FIELD,
        ),
        (
            2,
            8192,
            16384,
            DataDir::ToCtrl,
            "R2T for command id 2 asks for bytes 8192..24576, beyond its 16384 bytes of data",
            term_fes::DATA_OUT_OF_RANGE,
        ),
        (
            2,
            0,
            0,
            DataDir::ToCtrl,
            "R2T of 0 bytes for command id 2",
            term_fes::INVALID_HEADER_FIELD,
        ),
        (
            2,
            0,
            4096,
            DataDir::FromCtrl,
            "R2T for command id 2, which has no data to transfer by R2T",
            term_fes::INVALID_HEADER_FIELD,
        ),
    ];
    for (cid, off, len, dir, want, want_fes) in cases {
        let (why, after) = misbehave(
            ControllerConfig::default(),
            TcpOptions::default(),
            dir,
            16384,
            move |c| c.r2t(cid, 1, off, len),
        );
        assert_eq!(why, want);
        assert_eq!(term_of(&after).0, want_fes, "{want}");
    }
    // An R2T going back over data already asked for.
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::ToCtrl,
        16384,
        |c| {
            c.r2t(2, 1, 0, 8192);
            assert!(matches!(c.recv(), Got::H2C { last: true, .. }));
            c.r2t(2, 2, 4096, 4096);
        },
    );
    assert_eq!(
        why,
        "R2T for command id 2 at offset 4096, but 8192 bytes were already asked for"
    );
    assert_eq!(term_of(&after).1, offset::R2T_OFFSET);
}

#[test]
fn header_digest_error_kills_the_queue() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        opts(true, false),
        DataDir::None,
        0,
        |c| {
            let mut cq = Cqe::new_unchecked([0u8; CQE_LEN]);
            cq.set_cid(2);
            let mut b = Vec::new();
            c.writer()
                .capsule_resp(&cq.into_inner(), &mut b)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(b.len(), 28);
            b[24] ^= 0xFF; // the header digest
            c.send(&b);
        },
    );
    assert!(why.contains("header digest mismatch"), "{why}");
    let (fes, fei, hdr) = term_of(&after);
    assert_eq!(fes, term_fes::HEADER_DIGEST_ERROR);
    // FEI is the received (corrupted) digest.
    let mut h = [0u8; 24];
    let mut cq = Cqe::new_unchecked([0u8; CQE_LEN]);
    cq.set_cid(2);
    h[..8].copy_from_slice(&[pdu_type::RSP, flags::HDGST, 24, 0, 28, 0, 0, 0]);
    h[8..].copy_from_slice(&cq.into_inner());
    assert_eq!(fei, nvmf_common::transport::tcp::header_digest(&h) ^ 0xFF);
    assert_eq!(hdr, h.to_vec());
}

#[test]
fn c2h_term_req_kills_the_queue_with_its_fes() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::None,
        0,
        |c| {
            let mut b = Vec::new();
            c.writer()
                .term_req(term_fes::UNSUPPORTED_PARAMETER, 11, &[0u8; 72], &mut b);
            c.send(&b);
        },
    );
    assert_eq!(
        why,
        "controller terminated the connection (C2HTermReq): unsupported parameter (FES 0x6, FEI 0xb)"
    );
    // No termination request answers a termination request.
    assert_eq!(after, vec![Got::Eof]);
}

#[test]
fn target_closing_the_socket_kills_the_queue() {
    // Closed between PDUs...
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::FromCtrl,
        4096,
        |c| {
            c.shutdown_write();
        },
    );
    assert_eq!(why, "the controller closed the connection");
    assert_eq!(after, vec![Got::Eof]);
    // ... and in the middle of one.
    let (why, _) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::FromCtrl,
        4096,
        |c| {
            let mut b = Vec::new();
            c.writer()
                .c2h_data(2, 0, &[5u8; 4096], true, true, &mut b)
                .unwrap_or_else(|e| panic!("{e}"));
            c.send(&b[..1000]);
            c.shutdown_write();
        },
    );
    assert_eq!(
        why,
        "the controller closed the connection in the middle of a PDU"
    );
}

#[test]
fn malformed_pdu_gets_the_framers_termination_request() {
    let (why, after) = misbehave(
        ControllerConfig::default(),
        TcpOptions::default(),
        DataDir::None,
        0,
        |c| {
            // An R2T with a PDO: invalid header field at byte 3.
            let mut b = Vec::new();
            c.writer()
                .r2t(2, 1, 0, 4096, &mut b)
                .unwrap_or_else(|e| panic!("{e}"));
            b[3] = 24;
            c.send(&b);
        },
    );
    assert!(why.starts_with("invalid PDU from the controller:"), "{why}");
    let (fes, fei, _) = term_of(&after);
    assert_eq!((fes, fei), (term_fes::INVALID_HEADER_FIELD, offset::PDO));
}

/// A C2HData PDU with a bad data digest fails its command with Data Transfer Error
/// (its data is not used); the queue keeps working.
#[test]
fn data_digest_error_fails_only_the_command() {
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), |mut c| {
        let corrupt = |c: &mut RawCtrl, cid: u16, success: bool| {
            let mut b = Vec::new();
            c.writer()
                .c2h_data(cid, 0, &[0xEE; 512], true, success, &mut b)
                .unwrap_or_else(|e| panic!("{e}"));
            let n = b.len();
            b[n - 1] ^= 1;
            c.send(&b);
        };
        c.cmd();
        corrupt(&mut c, 0, false);
        c.resp(0, Status::SUCCESS, 0);
        c.cmd();
        corrupt(&mut c, 1, true);
        c.cmd();
        c.c2h(2, 0, &[0x42; 512], true, true);
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, opts(false, true));
    let mut q = f
        .connect(&params(1, 4, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    for cid in 0..3u16 {
        let b = f.alloc(512).unwrap_or_else(|e| panic!("{e}"));
        q.submit(cid, &sqe(READ, cid), Some(&b), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
        let c = Cqe::new_unchecked(&out[0][..]);
        assert_eq!(c.cid(), cid);
        if cid < 2 {
            assert!(c.status().is(Sct::Generic, generic::DATA_TRANSFER_ERROR));
            assert_eq!(contents(&b), vec![0u8; 512], "corrupt data was copied");
        } else {
            assert!(c.status().is_success());
            assert_eq!(contents(&b), vec![0x42; 512]);
        }
    }
    drop(q);
    join(h);
}

/// Large C2HData with a data digest, arriving a few KiB at a time, is received
/// straight into the command's buffer and digested there (no pass through the
/// framer's buffer): good PDUs land whole; a flipped data byte and a flipped digest
/// byte each fail only their command with Data Transfer Error (the buffer of a failed
/// read holds no promised contents, as with the kernel's and SPDK's hosts, which also
/// receive in place); the queue keeps working.
#[test]
fn large_digested_data_is_received_in_place_and_checked() {
    const LEN: usize = 96 * 1024;
    // Damage: none, a data byte, the digest's last byte.
    const CASES: [(u16, Option<usize>); 4] = [
        (0, None),
        (1, Some(24 + LEN / 2)),
        (2, Some(usize::MAX)),
        (3, None),
    ];
    let data = pattern(LEN, 5);
    let sent = data.clone();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        for (cid, damage) in CASES {
            c.cmd();
            let mut b = Vec::new();
            c.writer()
                .c2h_data(cid, 0, &sent, true, true, &mut b)
                .unwrap_or_else(|e| panic!("{e}"));
            let n = b.len();
            match damage {
                Some(usize::MAX) => b[n - 1] ^= 1,
                Some(i) => b[i] ^= 0x10,
                None => {}
            }
            // In pieces with pauses, so the host's reads find the PDU unfinished.
            for part in b.chunks(7000) {
                c.send(part);
                thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, opts(false, true));
    let mut q = f
        .connect(&params(1, 4, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    for (cid, damage) in CASES {
        let b = f.alloc(LEN).unwrap_or_else(|e| panic!("{e}"));
        q.submit(cid, &sqe(READ, cid), Some(&b), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        q.flush().unwrap_or_else(|e| panic!("{e}"));
        let out = poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}"));
        let c = Cqe::new_unchecked(&out[0][..]);
        assert_eq!(c.cid(), cid);
        if damage.is_some() {
            assert!(
                c.status().is(Sct::Generic, generic::DATA_TRANSFER_ERROR),
                "cid {cid}: {:?}",
                c.status()
            );
        } else {
            assert!(c.status().is_success(), "cid {cid}: {:?}", c.status());
            assert!(contents(&b) == data, "cid {cid}: the data differs");
        }
    }
    drop(q);
    join(h);
}

#[test]
fn icresp_with_other_digests_is_rejected() {
    let (tx, rx) = mpsc::channel();
    let cfg = ControllerConfig {
        header_digest: false,
        ..ControllerConfig::default()
    };
    let (addr, h) = RawCtrl::spawn(cfg, move |mut c| {
        tx.send(c.recv()).unwrap_or_else(|e| panic!("{e}"));
    });
    let r = TcpFabric::new(addr, opts(true, false)).connect(&params(0, 32, 0));
    match r {
        Err(TransportError::Rejected(m)) => {
            assert!(
                m.contains("digests enabled differ from those requested"),
                "{m}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected"),
    }
    join(h);
    match rx.recv().unwrap_or_else(|e| panic!("{e}")) {
        Got::Term { fes, fei, hdr } => {
            assert_eq!(
                (fes, fei),
                (term_fes::UNSUPPORTED_PARAMETER, offset::DIGEST)
            );
            assert_eq!(hdr.len(), 128);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn connect_failures() {
    // Nobody listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(l);
    assert!(matches!(
        TcpFabric::new(addr, TcpOptions::default()).connect(&params(0, 32, 0)),
        Err(TransportError::Refused(_))
    ));
    // A listener that never answers the ICReq.
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let mut p = params(0, 32, 0);
    p.connect_timeout = Duration::from_millis(200);
    let t0 = Instant::now();
    let r = TcpFabric::new(addr, TcpOptions::default()).connect(&p);
    assert!(
        matches!(r, Err(TransportError::Timeout(_))),
        "{:?}",
        r.err()
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A listener that closes instead.
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let h = thread::spawn(move || drop(l.accept().unwrap_or_else(|e| panic!("{e}"))));
    let r = TcpFabric::new(addr, TcpOptions::default()).connect(&params(0, 32, 0));
    assert!(
        matches!(r, Err(TransportError::Rejected(_))),
        "{:?}",
        r.err()
    );
    join(h);
    // A C2HTermReq instead of an ICResp.
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let h = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap_or_else(|e| panic!("{e}"));
        let mut icreq = [0u8; 128];
        s.read_exact(&mut icreq).unwrap_or_else(|e| panic!("{e}"));
        let mut b = Vec::new();
        encode_term_req(
            Role::Controller,
            term_fes::INVALID_HEADER_FIELD,
            10,
            &icreq,
            &mut b,
        );
        s.write_all(&b).unwrap_or_else(|e| panic!("{e}"));
    });
    let r = TcpFabric::new(addr, TcpOptions::default()).connect(&params(0, 32, 0));
    match r {
        Err(TransportError::Rejected(m)) => assert!(m.contains("FES 0x1, FEI 0xa"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    join(h);
}

/// The queue layer on top: Connect on the admin queue (1024 bytes in the capsule with
/// an in-capsule size of 0 from the caller), then reads through `Queue`.
#[test]
fn queue_layer_over_tcp() {
    let data = pattern(4096, 8);
    let d2 = data.clone();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        let (s, d) = c.cmd();
        assert_eq!(s[0], 0x7F, "fabrics command");
        assert_eq!(sgl1(&s), SglDescriptor::in_capsule(0, 1024).to_bytes());
        assert_eq!(d.len(), 1024);
        assert_eq!(&d[256..256 + 19], b"nqn.2024-01.io.test");
        let cid = sqe_cid(&s);
        c.resp(cid, Status::SUCCESS, 0x21);
        // Two reads in flight; answered in reverse order.
        let (a, _) = c.cmd();
        let (b, _) = c.cmd();
        let (ca, cb) = (
            Sqe::new_unchecked(&a[..]).cid(),
            Sqe::new_unchecked(&b[..]).cid(),
        );
        c.c2h(cb, 0, &d2, true, true);
        c.c2h(ca, 0, &d2[..2048], false, false);
        c.c2h(ca, 2048, &d2[2048..], true, false);
        c.resp(ca, INVALID_FIELD_STATUS, 0);
        assert_eq!(c.recv(), Got::Eof);
    });
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(addr, TcpOptions::default()));
    let t = fabric
        .connect_queue(&params(0, 32, 0))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut q = Queue::new(t);
    let cd = command::connect_data(
        [7u8; 16],
        Cntlid::DYNAMIC,
        &Nqn::new("nqn.2024-01.io.test:sub").unwrap_or_else(|e| panic!("{e}")),
        &Nqn::new("nqn.2024-01.io.test:host").unwrap_or_else(|e| panic!("{e}")),
    );
    let buf = fabric.alloc(cd.len()).unwrap_or_else(|e| panic!("{e}"));
    assert!(buf.mr.is_none());
    assert!(buf.write_at(0, &cd));
    let c = q
        .execute(
            command::connect(Qid::ADMIN, 31, 0),
            Some(&buf),
            DataDir::ToCtrl,
            T,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.is_success());
    assert_eq!(c.dw0, 0x21);

    let b1 = fabric.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let b2 = fabric.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let s = command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    q.submit(s, Some(&b1), DataDir::FromCtrl, 100)
        .unwrap_or_else(|e| panic!("{e}"));
    q.submit(s, Some(&b2), DataDir::FromCtrl, 200)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + T;
    let mut done = Vec::new();
    while done.len() < 2 {
        q.poll(&mut done).unwrap_or_else(|e| panic!("{e}"));
        assert!(Instant::now() < deadline);
        q.wait(Duration::from_millis(50));
    }
    assert_eq!(done[0].tag, 200);
    assert!(done[0].status.is_success());
    assert_eq!(done[1].tag, 100);
    assert!(done[1].status.is(Sct::Generic, generic::INVALID_FIELD));
    assert_eq!(contents(&b1), data);
    assert_eq!(contents(&b2), data);
    assert_eq!(q.outstanding(), 0);
    q.close();
    join(h);
}

#[test]
fn wait_blocks_until_data_or_timeout() {
    let (tx, rx) = mpsc::channel::<()>();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        c.cmd();
        rx.recv().unwrap_or_else(|e| panic!("{e}"));
        thread::sleep(Duration::from_millis(100));
        c.resp(0, Status::SUCCESS, 0);
        assert_eq!(c.recv(), Got::Eof);
    });
    let mut q = connect(addr, TcpOptions::default(), &params(1, 4, 0));
    q.submit(0, &sqe(0x00, 0), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    q.wait(Duration::from_millis(60));
    let e = t0.elapsed();
    assert!(
        e >= Duration::from_millis(55) && e < Duration::from_secs(2),
        "{e:?}"
    );
    tx.send(()).unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    q.wait(Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(poll_n(&mut q, 1).unwrap_or_else(|e| panic!("{e}")).len(), 1);
    drop(q);
    join(h);
}

/// Polls `q` until `f` holds (the controller's PDUs are handled in `poll`); panics
/// after 10 s.
fn poll_until(q: &mut TcpHostQueue, what: &str, f: impl Fn(&TcpHostQueue) -> bool) {
    let deadline = Instant::now() + T;
    let mut out = Vec::new();
    while !f(q) {
        q.poll(&mut out).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.is_empty(), "the controller answers nothing here");
        assert!(Instant::now() < deadline, "never {what}");
        q.wait(Duration::from_millis(5));
    }
}

/// Where each outstanding command is, as the stuck-command report shows it: queued
/// until its capsule is written, then sent; data moving once the controller asks for
/// part of the write data (R2T) or sends part of the read data; awaiting the response
/// once every byte has moved (at once for a command without data).
#[test]
fn command_phases_follow_the_data() {
    use nvmf_initiator::transport::CommandPhase::{AwaitingResponse, DataTransfer, Queued, Sent};
    const HALF: u32 = 32 * 1024;
    const RLEN: usize = 8192;
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let read_data = pattern(RLEN, 3);
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        let take_h2c = |c: &mut RawCtrl| loop {
            match c.recv() {
                Got::H2C { cid: 1, last, .. } if last => break,
                Got::H2C { cid: 1, .. } => {}
                other => panic!("wanted H2CData, got {other:?}"),
            }
        };
        for _ in 0..3 {
            c.cmd();
        }
        step_tx.send(()).unwrap_or_else(|e| panic!("{e}"));
        go_rx.recv().unwrap_or_else(|e| panic!("{e}"));
        c.r2t(1, 0x21, 0, HALF);
        take_h2c(&mut c);
        c.c2h(2, 0, &read_data[..RLEN / 2], false, false);
        go_rx.recv().unwrap_or_else(|e| panic!("{e}"));
        c.r2t(1, 0x22, HALF, HALF);
        take_h2c(&mut c);
        c.c2h(2, (RLEN / 2) as u32, &read_data[RLEN / 2..], true, false);
        // ... and no response for any of them.
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = connect(addr, TcpOptions::default(), &params(1, 8, 0));
    let wbuf = buf_with(&f, &pattern(2 * HALF as usize, 1));
    let rbuf = f.alloc(RLEN).unwrap_or_else(|e| panic!("{e}"));
    let phases = |q: &TcpHostQueue| [1, 2, 3].map(|cid| q.command_phase(cid));
    for (cid, op, buf, dir) in [
        (1, WRITE, Some(&wbuf), DataDir::ToCtrl),
        (2, READ, Some(&rbuf), DataDir::FromCtrl),
        (3, 0x00, None, DataDir::None),
    ] {
        q.submit(cid, &sqe(op, cid), buf, dir)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(phases(&q), [Some(Queued); 3]);
    assert_eq!(q.command_phase(4), None, "no command in that slot");
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    step_rx.recv().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(phases(&q), [Some(Sent), Some(Sent), Some(AwaitingResponse)]);
    go_tx.send(()).unwrap_or_else(|e| panic!("{e}"));
    poll_until(&mut q, "half the data moved", |q| {
        phases(q)
            == [
                Some(DataTransfer),
                Some(DataTransfer),
                Some(AwaitingResponse),
            ]
    });
    go_tx.send(()).unwrap_or_else(|e| panic!("{e}"));
    poll_until(&mut q, "all the data moved", |q| {
        phases(q) == [Some(AwaitingResponse); 3]
    });
    assert_eq!(contents(&rbuf), pattern(RLEN, 3));
    drop(q);
    join(h);
}
