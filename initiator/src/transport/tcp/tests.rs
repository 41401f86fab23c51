//! The NVMe/TCP host queue against the scripted controller of the test kit
//! (`tests/raw_tcp/ctrl.rs`, included here): the cases that need the crate's private
//! items (the queue's socket, the in-memory fake target). Everything else about the
//! host queue over NVMe/TCP is end to end in `tests/tcp_host.rs`.

use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use std::sync::Arc;

use nvmf_common::transport::tcp::ControllerConfig;
use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::{fctype, ConnectCmd, FABRICS_OPCODE};
use nvmf_common::wire::sqe::Sqe;

use super::*;
use crate::controller::{ConnectOptions, Controller};
use crate::discovery::discover_log_with;
use crate::namespace::NsIo;
use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};

/// The test kit's scripted controller, shared with the integration tests.
#[allow(dead_code)]
#[path = "../../../../tests/raw_tcp/ctrl.rs"]
mod ctrl;
use ctrl::{join, Got, RawCtrl};

const T: Duration = Duration::from_secs(10);

fn params(qid: u16, depth: u16, icd: u32) -> QueueParams {
    QueueParams {
        qid: Qid(qid),
        depth,
        in_capsule_data: icd,
        connect_timeout: T,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ ((i >> 8) as u8))
        .collect()
}

fn buf_with(f: &TcpFabric, data: &[u8]) -> IoBuf {
    let b = f.alloc(data.len()).unwrap();
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

const WRITE: u8 = 0x01;

fn set_buf(fd: &impl std::os::fd::AsRawFd, opt: libc::c_int, bytes: libc::c_int) {
    // SAFETY: a valid socket descriptor and a c_int option value of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

/// More than the socket takes: `flush` writes what it can, keeps the rest, and
/// `poll` goes on writing until everything is out.
#[test]
fn partial_writes_continue_in_poll() {
    const N: u16 = 63;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (addr, h) = RawCtrl::spawn(ControllerConfig::default(), move |mut c| {
        go_rx.recv().unwrap();
        for i in 0..N {
            let (s, d) = c.cmd();
            let cid = Sqe::new_unchecked(&s[..]).cid();
            assert_eq!(cid, i);
            assert_eq!(d, pattern(16384, i as u8));
            c.resp(cid, Status::SUCCESS, u32::from(i));
        }
        assert_eq!(c.recv(), Got::Eof);
    });
    let f = TcpFabric::new(addr, TcpOptions::default());
    let mut q = f.connect(&params(1, 64, 16384)).unwrap();
    set_buf(q.sock.tcp(), libc::SO_SNDBUF, 64 * 1024);
    for i in 0..N {
        let b = buf_with(&f, &pattern(16384, i as u8));
        q.submit(i, &sqe(WRITE, i), Some(&b), DataDir::ToCtrl)
            .unwrap();
    }
    q.flush().unwrap();
    assert!(q.pending_output() > 0, "the socket took 1 MiB at once");
    go_tx.send(()).unwrap();
    let out = poll_n(&mut q, usize::from(N)).unwrap();
    assert_eq!(out.len(), usize::from(N));
    assert_eq!(q.pending_output(), 0);
    drop(q);
    join(h);
}

// ---- the host library over NVMe/TCP, against the in-memory fake target ----

/// Serves NVMe/TCP in front of `fabric` (a [`FakeTarget`]'s): each connection's first
/// capsule must be a Connect, which opens a queue of the fake; every command's data is
/// moved the NVMe/TCP way (in-capsule, R2T + H2CData in 32 KiB steps, C2HData in two
/// PDUs, every other read finished by the SUCCESS flag instead of a CapsuleResp).
fn tcp_bridge(fabric: Arc<dyn Fabric>, cfg: ControllerConfig) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // The accept loop ends with the test process.
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let f = fabric.clone();
            thread::spawn(move || bridge_conn(RawCtrl::from_stream(s, cfg), f));
        }
    });
    addr
}

fn bridge_conn(mut c: RawCtrl, fabric: Arc<dyn Fabric>) {
    // A server: a host under a loaded machine may be slow; it ends by closing.
    c.wait_forever();
    let mut fq: Option<Box<dyn HostQueue>> = None;
    let mut reads = 0u32;
    loop {
        let (sqe, icdata) = match c.recv() {
            Got::Cmd { sqe, data } => (sqe, data),
            Got::Eof => return,
            other => panic!("bridge got {other:?}"),
        };
        let s = Sqe::new_unchecked(&sqe[..]);
        let (cid, op) = (s.cid(), s.opcode());
        let xfer = if op == FABRICS_OPCODE {
            sqe[4] & 3
        } else {
            op & 3
        };
        let dir = match xfer {
            1 => DataDir::ToCtrl,
            2 => DataDir::FromCtrl,
            _ => DataDir::None,
        };
        let buf = match SglDescriptor::parse(&sqe[DPTR]).unwrap() {
            SglDescriptor::DataBlock {
                addr: 0,
                len,
                subtype: nvmf_common::wire::sgl::subtype::OFFSET,
            } => {
                assert_eq!(len as usize, icdata.len());
                assert_eq!(dir, DataDir::ToCtrl);
                let b = fabric.alloc(icdata.len()).unwrap();
                assert!(b.write_at(0, &icdata));
                Some(b)
            }
            SglDescriptor::TransportDataBlock { len: 0 } => {
                assert!(icdata.is_empty());
                None
            }
            SglDescriptor::TransportDataBlock { len } => {
                assert!(icdata.is_empty());
                let b = fabric.alloc(len as usize).unwrap();
                if dir == DataDir::ToCtrl {
                    let mut off = 0;
                    while off < len {
                        let n = (len - off).min(32 * 1024);
                        c.r2t(cid, off as u16, off, n);
                        loop {
                            match c.recv() {
                                Got::H2C {
                                    cid: dc,
                                    datao,
                                    last,
                                    data,
                                    ..
                                } => {
                                    assert_eq!(dc, cid);
                                    assert!(b.write_at(datao as usize, &data));
                                    if last {
                                        break;
                                    }
                                }
                                other => panic!("bridge wanted H2CData, got {other:?}"),
                            }
                        }
                        off += n;
                    }
                }
                Some(b)
            }
            other => panic!("bridge got SGL {other:?}"),
        };
        if fq.is_none() {
            assert_eq!((op, sqe[4]), (FABRICS_OPCODE, fctype::CONNECT));
            let cc = ConnectCmd::new_unchecked(&sqe[..]);
            fq = Some(
                fabric
                    .connect_queue(&QueueParams {
                        qid: Qid(cc.qid()),
                        depth: cc.sqsize() + 1,
                        in_capsule_data: 8192,
                        connect_timeout: T,
                    })
                    .unwrap(),
            );
        }
        let q = fq.as_mut().unwrap();
        q.submit(cid, &sqe, buf.as_ref(), dir).unwrap();
        q.flush().unwrap();
        let mut out = Vec::new();
        q.poll(&mut out).unwrap();
        assert_eq!(out.len(), 1);
        let cqe = out[0];
        let v = Cqe::new_unchecked(&cqe[..]);
        let plain = v.status().is_success() && v.result_u64() == 0;
        match (&buf, dir) {
            (Some(b), DataDir::FromCtrl) if v.status().is_success() => {
                reads += 1;
                let d = contents(b);
                let half = d.len() / 2;
                if half > 0 {
                    c.c2h(cid, 0, &d[..half], false, false);
                }
                let success = plain && reads.is_multiple_of(2);
                c.c2h(cid, half as u32, &d[half..], true, success);
                if !success {
                    c.resp_cqe(&cqe);
                }
            }
            _ => c.resp_cqe(&cqe),
        }
    }
}

fn host_id() -> (Nqn, [u8; 16]) {
    (
        Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa").unwrap(),
        [0xAA; 16],
    )
}

/// `discover -t tcp`: the existing discovery code over a `TcpFabric`, with digests.
#[test]
fn discovery_over_tcp() {
    let t = FakeTarget::new(FakeTargetConfig {
        subnqn: nvmf_common::types::DISCOVERY_NQN.into(),
        discovery: (0..10)
            .map(|i| {
                (
                    format!("nqn.2024-01.io.example:sub{i}"),
                    format!("10.0.0.{i}"),
                    "4420".to_string(),
                )
            })
            .collect(),
        mdts: 1, // 8 KiB: the 11 KiB log takes two Get Log Page commands
        ..Default::default()
    });
    let addr = tcp_bridge(t.fabric(), ControllerConfig::default());
    let (h, id) = host_id();
    let mut o = ConnectOptions::discovery(h, id);
    o.command_timeout = T;
    o.connect_timeout = T;
    let log = discover_log_with(
        Arc::new(TcpFabric::new(
            addr,
            TcpOptions {
                hdr_digest: true,
                data_digest: true,
                ..TcpOptions::default()
            },
        )),
        o,
    )
    .unwrap();
    assert_eq!(log.entries.len(), 10);
    assert_eq!(log.entries[3].subnqn, "nqn.2024-01.io.example:sub3");
    assert_eq!(log.entries[3].traddr, "10.0.0.3");
    let l = t.log();
    assert_eq!(l[0], "connect qid 0 cntlid 65535");
    assert!(l.iter().any(|s| s == "prop_set 0x14 0x464001"), "shut down");
}

/// Controller bring-up (admin Connect with its data in the capsule, Identify over
/// C2HData, I/O queue Connects) and namespace I/O: writes in the capsule and by R2T,
/// reads back.
#[test]
fn controller_and_namespace_io_over_tcp() {
    let t = FakeTarget::new(FakeTargetConfig::default());
    let cfg = ControllerConfig {
        maxh2cdata: 16 * 1024,
        ..ControllerConfig::default()
    };
    let addr = tcp_bridge(t.fabric(), cfg);
    let (h, id) = host_id();
    let mut o = ConnectOptions::new(Nqn::new(t.subnqn()).unwrap(), h, id);
    o.nr_io_queues = 2;
    o.kato_ms = 0;
    o.command_timeout = T;
    o.connect_timeout = T;
    let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(addr, TcpOptions::default()));
    let mut ctrl = Controller::connect(fabric, o).unwrap();
    assert_eq!(ctrl.id_ctrl().in_capsule_data, 8192);
    assert_eq!(ctrl.io_queue_count(), 2);
    assert_eq!(ctrl.namespaces()[0].nsze, 2048);
    let mut qs = ctrl.take_io_queues();
    {
        let mut ns = NsIo::new(&ctrl, &mut qs[0], Nsid(1)).unwrap();
        let big = pattern(64 * 1024, 0x31);
        let small = pattern(4096, 0x32);
        ns.write(0, &big).unwrap(); // 64 KiB: R2T
        ns.write(200, &small).unwrap(); // 4 KiB: in the capsule
        let mut back = vec![0u8; 64 * 1024];
        ns.read(0, &mut back).unwrap();
        assert_eq!(back, big);
        let mut back = vec![0u8; 4096];
        ns.read(200, &mut back).unwrap();
        assert_eq!(back, small);
    }
    assert_eq!(t.ns_bytes(1, 0, 64 * 1024), pattern(64 * 1024, 0x31));
    assert_eq!(t.ns_bytes(1, 200 * 512, 4096), pattern(4096, 0x32));
    let l = t.log();
    assert!(l.iter().any(|s| s == "connect qid 1 cntlid 5"), "{l:?}");
    assert!(l.iter().any(|s| s == "connect qid 2 cntlid 5"), "{l:?}");
    drop(qs);
    ctrl.shutdown().unwrap();
}
