//! End-to-end tests of the NVMe/TCP controller: a scripted host made of std sockets
//! and the framer's host side drives a [`TcpServer`] on 127.0.0.1 (port 0) with a RAM
//! namespace. Every malformed-input case checks the exact termination request (or
//! status) and then that a fresh, well-behaved connection still works.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::config::{Config, PollMode, TrType, DEFAULT_SUBSYSTEM_NQN};
use nvmf_common::transport::tcp::negotiate::icreq_params;
use nvmf_common::transport::tcp::{
    data_digest, encode_icreq, FramerError, HostConfig, IcRespParams, Negotiated, Pdu, PduReader,
    PduWriter, Role,
};
use nvmf_common::wire::admin::{cns, opcode as admin_op, set_identify};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::{
    cattr, fctype, reg, ConnectCmd, ConnectData, PropertyGetCmd, PropertySetCmd, CONNECT_DATA_LEN,
};
use nvmf_common::wire::identify::{sgls, IdentifyController};
use nvmf_common::wire::nvm::{self, opcode as nvm_op};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_common::wire::tcp::{offset, term_fes};

use super::{TcpOptions, TcpServer};
use crate::target::Target;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0";
const BS: usize = 512;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

// ---- the server -----------------------------------------------------------------

struct Server {
    target: Arc<Target>,
    tcp: TcpServer,
    addr: SocketAddr,
}

fn server(mode: PollMode, groups: usize, opts: TcpOptions) -> Server {
    let mut cfg = Config::single(
        TrType::Tcp,
        Some(("127.0.0.1".into(), "4420".into())),
        None,
        vec!["ram:16M".into()],
    )
    .unwrap();
    // Config validation wants a real port number; ask the OS for a free one.
    cfg.ports[0].trsvcid = "0".into();
    cfg.transport.poll_mode = mode;
    cfg.transport.poll_groups = groups;
    let target = Target::from_config(&cfg).unwrap();
    let tcp = TcpServer::start_with(target.clone(), &target.ports(), opts).unwrap();
    let addr = tcp.local_addrs()[0];
    assert_ne!(addr.port(), 0);
    Server { target, tcp, addr }
}

fn default_server() -> Server {
    server(PollMode::Adaptive, 1, small_h2c())
}

/// 32 KiB H2CData PDUs, so a 128 KiB write takes four R2Ts.
fn small_h2c() -> TcpOptions {
    TcpOptions {
        maxh2cdata: 32 * 1024,
        ..TcpOptions::default()
    }
}

impl Server {
    /// Waits until the counters satisfy `f` (the poll group updates them).
    fn wait_for(&self, what: &str, f: impl Fn(&super::GroupCounters) -> bool) {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            let c = self.tcp.counters();
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
}

// ---- the scripted host ----------------------------------------------------------

/// A PDU as the host received it, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rx {
    IcResp(IcRespParams),
    Term {
        fes: u16,
        fei: u32,
        data: Vec<u8>,
    },
    Resp([u8; 16]),
    C2H {
        cid: u16,
        datao: u32,
        last: bool,
        success: bool,
        data: Vec<u8>,
    },
    R2T {
        cid: u16,
        ttag: u16,
        offset: u32,
        length: u32,
    },
    /// The controller closed the connection (EOF or reset).
    Closed,
    Err(FramerError),
}

struct Host {
    sock: TcpStream,
    cfg: HostConfig,
    reader: PduReader,
    writer: Option<PduWriter>,
    inbuf: Vec<u8>,
    rbuf: Vec<u8>,
    cid: u16,
    spin: bool,
}

fn status_of(cqe: &[u8; 16]) -> Status {
    Cqe::new_unchecked(&cqe[..]).status()
}

fn cid_of(cqe: &[u8; 16]) -> u16 {
    Cqe::new_unchecked(&cqe[..]).cid()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ ((i >> 9) as u8))
        .collect()
}

/// The owned form of what the host framer yields.
fn to_rx(r: Result<Pdu<'_>, FramerError>) -> Rx {
    match r {
        Ok(Pdu::IcResp(p)) => Rx::IcResp(p),
        Ok(Pdu::C2HTermReq { fes, fei, data }) => Rx::Term {
            fes,
            fei,
            data: data.to_vec(),
        },
        Ok(Pdu::CapsuleResp { cqe }) => Rx::Resp(cqe),
        Ok(Pdu::C2HData {
            cid,
            datao,
            last,
            success,
            data,
            ..
        }) => Rx::C2H {
            cid,
            datao,
            last,
            success,
            data: data.to_vec(),
        },
        Ok(Pdu::R2T {
            cid,
            ttag,
            offset,
            length,
        }) => Rx::R2T {
            cid,
            ttag,
            offset,
            length,
        },
        Ok(other) => panic!("unexpected PDU {other:?}"),
        Err(e) => Rx::Err(e),
    }
}

impl Host {
    fn new(addr: SocketAddr, cfg: HostConfig) -> Host {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        sock.set_nodelay(true).unwrap();
        Host {
            sock,
            cfg,
            reader: PduReader::host(cfg).unwrap(),
            writer: None,
            inbuf: Vec::new(),
            rbuf: Vec::new(),
            cid: 1,
            spin: false,
        }
    }

    fn negotiated(&self) -> Negotiated {
        self.reader.negotiated().unwrap()
    }

    fn w(&self) -> PduWriter {
        self.writer.unwrap()
    }

    /// ICReq → ICResp; the writer follows the negotiated parameters.
    fn init(&mut self) -> IcRespParams {
        let mut out = Vec::new();
        encode_icreq(&icreq_params(&self.cfg), &mut out);
        self.send(&out);
        match self.recv() {
            Rx::IcResp(p) => {
                self.writer = Some(PduWriter::new(Role::Host, &self.negotiated()));
                p
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    fn recv(&mut self) -> Rx {
        loop {
            if !self.inbuf.is_empty() {
                match self.reader.feed(&self.inbuf) {
                    Ok(n) => {
                        self.inbuf.drain(..n);
                    }
                    Err(e) => return Rx::Err(e),
                }
            }
            if let Some(r) = self.reader.poll() {
                return to_rx(r);
            }
            if !self.inbuf.is_empty() {
                continue;
            }
            let mut b = std::mem::take(&mut self.rbuf);
            b.resize(256 * 1024, 0);
            let r = self.sock.read(&mut b);
            if let Ok(n) = r {
                self.inbuf.extend_from_slice(&b[..n]);
            }
            self.rbuf = b;
            match r {
                Ok(0) => return Rx::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Rx::Closed,
                // A spinning host (set_nonblocking) polls again.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.spin => {}
                Err(e) => panic!("host read: {e}"),
            }
        }
    }

    fn cmd(&mut self, sqe: &[u8; SQE_LEN], data: &[u8]) {
        let mut out = Vec::new();
        self.w().capsule_cmd(sqe, data, &mut out).unwrap();
        self.send(&out);
    }

    fn h2c(&mut self, cid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        let mut out = Vec::new();
        self.w()
            .h2c_data(cid, ttag, datao, data, last, &mut out)
            .unwrap();
        self.send(&out);
    }

    fn expect_resp(&mut self, cid: u16) -> [u8; 16] {
        match self.recv() {
            Rx::Resp(c) => {
                assert_eq!(cid_of(&c), cid, "response for another command");
                c
            }
            other => panic!("expected the response to {cid:#x}, got {other:?}"),
        }
    }

    /// Runs a command without data and returns its response.
    fn run(&mut self, sqe: &[u8; SQE_LEN]) -> [u8; 16] {
        self.cmd(sqe, &[]);
        self.expect_resp(Sqe::new_unchecked(&sqe[..]).cid())
    }

    /// The expected termination request, then the connection closes.
    fn expect_term(&mut self, fes: u16, fei: u32) -> Vec<u8> {
        match self.recv() {
            Rx::Term {
                fes: f,
                fei: i,
                data,
            } => {
                assert_eq!((f, i), (fes, fei), "FES/FEI");
                assert_eq!(self.recv(), Rx::Closed);
                data
            }
            other => panic!("expected C2HTermReq FES {fes} FEI {fei}, got {other:?}"),
        }
    }

    /// Connect (admin queue, 1024 bytes of in-capsule data), CC.EN = 1, CSTS.RDY.
    fn admin_up(&mut self) -> u16 {
        let cid = self.next_cid();
        self.cmd(&connect_sqe(cid, 0, 31, 0), &connect_data(0xFFFF));
        let c = self.expect_resp(cid);
        assert!(
            status_of(&c).is_success(),
            "admin Connect: {:?}",
            status_of(&c)
        );
        let cntlid = Cqe::new_unchecked(&c[..]).dw0() as u16;
        let cid = self.next_cid();
        let c = self.run(&prop_set(cid, reg::CC, 0x0046_0001));
        assert!(status_of(&c).is_success());
        let cid = self.next_cid();
        let c = self.run(&prop_get(cid, reg::CSTS));
        assert_eq!(Cqe::new_unchecked(&c[..]).dw0() & 1, 1, "CSTS.RDY");
        cntlid
    }

    fn io_connect(&mut self, cntlid: u16, qid: u16, sqsize: u16, attrs: u8) {
        let cid = self.next_cid();
        self.cmd(&connect_sqe(cid, qid, sqsize, attrs), &connect_data(cntlid));
        let c = self.expect_resp(cid);
        assert!(
            status_of(&c).is_success(),
            "I/O Connect: {:?}",
            status_of(&c)
        );
    }

    /// Reads `nlb` blocks; returns the status and the data (C2HData offsets checked).
    fn read(&mut self, slba: u64, nlb: u32) -> (Status, Vec<u8>) {
        let cid = self.next_cid();
        let len = nlb as usize * BS;
        self.cmd(
            &rw_sqe(
                nvm_op::READ,
                cid,
                slba,
                nlb,
                SglDescriptor::transport(len as u32),
            ),
            &[],
        );
        let mut data = Vec::new();
        loop {
            match self.recv() {
                Rx::C2H {
                    cid: c,
                    datao,
                    last,
                    success,
                    data: d,
                } => {
                    assert_eq!(c, cid);
                    assert_eq!(datao as usize, data.len(), "C2HData offset");
                    data.extend_from_slice(&d);
                    if success {
                        assert!(last);
                        return (Status::SUCCESS, data);
                    }
                }
                Rx::Resp(c) => {
                    assert_eq!(cid_of(&c), cid);
                    return (status_of(&c), data);
                }
                other => panic!("read: unexpected {other:?}"),
            }
        }
    }

    /// Writes `data` in the capsule.
    fn write_icd(&mut self, slba: u64, data: &[u8]) -> Status {
        let cid = self.next_cid();
        let nlb = (data.len() / BS) as u32;
        self.cmd(
            &rw_sqe(
                nvm_op::WRITE,
                cid,
                slba,
                nlb,
                SglDescriptor::in_capsule(0, data.len() as u32),
            ),
            data,
        );
        status_of(&self.expect_resp(cid))
    }

    /// Writes `data` through R2T/H2CData: answers each R2T as it comes, in PDUs of at
    /// most MAXH2CDATA. Returns the status and the R2Ts seen.
    fn write_r2t(&mut self, slba: u64, data: &[u8]) -> (Status, Vec<(u32, u32)>) {
        let cid = self.next_cid();
        let nlb = (data.len() / BS) as u32;
        self.cmd(
            &rw_sqe(
                nvm_op::WRITE,
                cid,
                slba,
                nlb,
                SglDescriptor::transport(data.len() as u32),
            ),
            &[],
        );
        let maxh2c = self.negotiated().maxh2cdata as usize;
        let mut r2ts = Vec::new();
        loop {
            match self.recv() {
                Rx::R2T {
                    cid: c,
                    ttag,
                    offset: o,
                    length,
                } => {
                    assert_eq!(c, cid);
                    r2ts.push((o, length));
                    let window = &data[o as usize..(o + length) as usize];
                    let mut at = 0;
                    for piece in window.chunks(maxh2c) {
                        let last = at + piece.len() == window.len();
                        self.h2c(cid, ttag, o + at as u32, piece, last);
                        at += piece.len();
                    }
                }
                Rx::Resp(c) => {
                    assert_eq!(cid_of(&c), cid);
                    return (status_of(&c), r2ts);
                }
                other => panic!("write: unexpected {other:?}"),
            }
        }
    }
}

fn connect_sqe(cid: u16, qid: u16, sqsize: u16, attrs: u8) -> [u8; SQE_LEN] {
    connect_sqe_kato(cid, qid, sqsize, attrs, 0)
}

fn connect_sqe_kato(cid: u16, qid: u16, sqsize: u16, attrs: u8, kato: u32) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut c = ConnectCmd::new_unchecked(&mut s[..]);
        c.set_header(fctype::CONNECT, cid);
        c.set_qid(qid);
        c.set_sqsize(sqsize);
        c.set_cattr(attrs);
        c.set_kato(kato);
    }
    finish(
        &mut s,
        SglDescriptor::in_capsule(0, CONNECT_DATA_LEN as u32),
    );
    s
}

fn connect_data(cntlid: u16) -> Vec<u8> {
    let mut d = vec![0u8; CONNECT_DATA_LEN];
    let mut v = ConnectData::new_unchecked(&mut d[..]);
    v.set_hostid([7; 16]);
    v.set_cntlid(cntlid);
    v.set_subsysnqn(DEFAULT_SUBSYSTEM_NQN);
    v.set_hostnqn(HOSTNQN);
    d
}

/// Sets PSDT to SGL and SGL1.
fn finish(s: &mut [u8; SQE_LEN], sgl: SglDescriptor) {
    let mut q = Sqe::new_unchecked(&mut s[..]);
    q.set_psdt(nvmf_common::wire::sqe::psdt::SGL_MPTR_CONTIGUOUS);
    sgl.emit(q.dptr_mut()).unwrap();
}

fn prop_set(cid: u16, off: u32, value: u64) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut p = PropertySetCmd::new_unchecked(&mut s[..]);
        p.set_header(fctype::PROPERTY_SET, cid);
        p.set_attrib(0);
        p.set_offset(off);
        p.set_value(value);
    }
    finish(&mut s, SglDescriptor::transport(0));
    s
}

fn prop_get(cid: u16, off: u32) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut p = PropertyGetCmd::new_unchecked(&mut s[..]);
        p.set_header(fctype::PROPERTY_GET, cid);
        p.set_attrib(0);
        p.set_offset(off);
    }
    finish(&mut s, SglDescriptor::transport(0));
    s
}

fn identify_sqe(cid: u16, which: u8) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut s[..]);
        q.set_opcode(admin_op::IDENTIFY);
        q.set_cid(cid);
        set_identify(&mut q, which, 0, 0);
    }
    finish(&mut s, SglDescriptor::transport(4096));
    s
}

fn rw_sqe(op: u8, cid: u16, slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut s[..]);
        q.set_opcode(op);
        q.set_cid(cid);
        q.set_nsid(1);
        nvm::set_rw_slba(&mut q, slba);
        nvm::set_rw_nlb(&mut q, nlb);
    }
    finish(&mut s, sgl);
    s
}

/// An admin connection and an I/O queue connection (qid 1) to a fresh controller.
fn io_pair(addr: SocketAddr, cfg: HostConfig, attrs: u8) -> (Host, Host) {
    let mut admin = Host::new(addr, cfg);
    admin.init();
    let cntlid = admin.admin_up();
    let mut io = Host::new(addr, cfg);
    io.init();
    io.io_connect(cntlid, 1, 127, attrs);
    (admin, io)
}

/// A fresh connection does the whole bring-up and a write/read round trip.
fn assert_healthy(addr: SocketAddr) {
    let (_admin, mut io) = io_pair(addr, HostConfig::default(), 0);
    let d = pattern(4096, 0x77);
    assert!(io.write_icd(20_000, &d).is_success());
    let (st, back) = io.read(20_000, 8);
    assert!(st.is_success());
    assert_eq!(back, d);
}

fn tte(st: Status) -> bool {
    st.is(Sct::Generic, generic::TRANSIENT_TRANSPORT_ERROR)
}

// ---- tests ------------------------------------------------------------------------

#[test]
fn bring_up_identify_write_read() {
    let s = default_server();
    let mut admin = Host::new(s.addr, HostConfig::default());
    let icresp = admin.init();
    assert_eq!(
        (icresp.pfv, icresp.cpda, icresp.digest, icresp.maxh2cdata),
        (0, 0, 0, 32 * 1024)
    );
    let cntlid = admin.admin_up();
    assert_ne!(cntlid, 0);

    // Identify Controller: 4096 bytes in C2HData, then the response.
    let cid = admin.next_cid();
    admin.cmd(&identify_sqe(cid, cns::CONTROLLER), &[]);
    let data = match admin.recv() {
        Rx::C2H {
            cid: c,
            datao: 0,
            last: true,
            success: false,
            data,
        } if c == cid => data,
        other => panic!("{other:?}"),
    };
    assert!(status_of(&admin.expect_resp(cid)).is_success());
    let id = IdentifyController::new_unchecked(&data[..]);
    // In-capsule data (8 KiB by default) advertised as IOCCSZ, in 16-byte units.
    assert_eq!(id.ioccsz(), (64 + 8192) / 16);
    assert_eq!(id.sgls() & sgls::KEYED, 0, "no keyed SGLs on TCP");
    assert_eq!(id.cntlid(), cntlid);
    assert_eq!(id.subnqn_str(), Some(DEFAULT_SUBSYSTEM_NQN));

    // I/O queue on a second connection.
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 1, 127, 0);

    // In-capsule write, read back through C2HData.
    let d = pattern(4096, 1);
    assert!(io.write_icd(8, &d).is_success());
    let (st, back) = io.read(8, 8);
    assert!(st.is_success());
    assert_eq!(back, d);

    // 128 KiB through R2T/H2CData: MAXR2T 0 → one R2T at a time, each MAXH2CDATA.
    let big = pattern(128 * 1024, 2);
    let (st, r2ts) = io.write_r2t(1000, &big);
    assert!(st.is_success(), "{st:?}");
    assert_eq!(
        r2ts,
        vec![(0, 32768), (32768, 32768), (65536, 32768), (98304, 32768)]
    );
    let (st, back) = io.read(1000, 256);
    assert!(st.is_success());
    assert_eq!(back, big);

    // A write that is not a multiple of MAXH2CDATA.
    let odd = pattern(36 * 1024, 3);
    let (st, r2ts) = io.write_r2t(5000, &odd);
    assert!(st.is_success());
    assert_eq!(r2ts, vec![(0, 32768), (32768, 4096)]);
    assert_eq!(io.read(5000, 72).1, odd);

    let c = s.tcp.counters();
    assert_eq!(c.r2ts, 6);
    assert_eq!(c.h2c_pdus, 6);
    assert_eq!(c.accepted, 2);
    // The last read's buffer goes back once its PDUs are written.
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
    drop(s.target);
}

#[test]
fn several_r2ts_in_flight_when_the_host_allows_them() {
    let s = default_server();
    let cfg = HostConfig {
        maxr2t: 3,
        ..HostConfig::default()
    };
    let (_admin, mut io) = io_pair(s.addr, cfg, 0);
    let big = pattern(160 * 1024, 9);
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::WRITE,
            cid,
            64,
            320,
            SglDescriptor::transport(big.len() as u32),
        ),
        &[],
    );
    // Four R2Ts (MAXR2T 3 → 4 outstanding) arrive before any data is sent.
    let mut r2ts = Vec::new();
    for _ in 0..4 {
        match io.recv() {
            Rx::R2T {
                cid: c,
                ttag,
                offset,
                length,
            } => {
                assert_eq!(c, cid);
                r2ts.push((ttag, offset, length));
            }
            other => panic!("{other:?}"),
        }
    }
    let offsets: Vec<_> = r2ts.iter().map(|r| (r.1, r.2)).collect();
    assert_eq!(
        offsets,
        vec![(0, 32768), (32768, 32768), (65536, 32768), (98304, 32768)]
    );
    // Answer them last to first; each answered window lets one more R2T out.
    for &(ttag, o, l) in r2ts.iter().rev() {
        io.h2c(cid, ttag, o, &big[o as usize..(o + l) as usize], true);
    }
    match io.recv() {
        Rx::R2T {
            ttag,
            offset: 131072,
            length: 32768,
            ..
        } => io.h2c(cid, ttag, 131072, &big[131072..], true),
        other => panic!("{other:?}"),
    }
    assert!(status_of(&io.expect_resp(cid)).is_success());
    assert_eq!(io.read(64, 320).1, big);
}

#[test]
fn digests_negotiated_and_used() {
    let s = default_server();
    for (hdgst, ddgst) in [(false, false), (true, false), (false, true), (true, true)] {
        let cfg = HostConfig {
            header_digest: hdgst,
            data_digest: ddgst,
            ..HostConfig::default()
        };
        let mut h = Host::new(s.addr, cfg);
        let p = h.init();
        assert_eq!(p.digest, u8::from(hdgst) | (u8::from(ddgst) << 1));
        let cntlid = h.admin_up();
        let mut io = Host::new(s.addr, cfg);
        io.init();
        io.io_connect(cntlid, 1, 31, 0);
        let d = pattern(8192, 4);
        assert!(io.write_icd(100, &d).is_success());
        assert_eq!(io.read(100, 16).1, d);
        let big = pattern(96 * 1024, 5);
        assert!(io.write_r2t(200, &big).0.is_success());
        assert_eq!(io.read(200, 192).1, big);
    }
    // A controller that does not offer digests answers with none.
    let s2 = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            header_digest: false,
            data_digest: false,
            ..TcpOptions::default()
        },
    );
    let mut h = Host::new(
        s2.addr,
        HostConfig {
            header_digest: true,
            ..HostConfig::default()
        },
    );
    let mut out = Vec::new();
    encode_icreq(&icreq_params(&h.cfg), &mut out);
    h.send(&out);
    // The host framer refuses an ICResp without the digest it asked for.
    assert!(matches!(
        h.recv(),
        Rx::Err(FramerError::UnsupportedParameter { .. })
    ));
}

#[test]
fn reads_are_chunked_into_c2hdata_pdus() {
    // 32 KiB C2HData PDUs: large chunks go out from the pool buffer, a short tail is
    // copied; with and without digests, and with SQ flow control disabled.
    let s = server(
        PollMode::Adaptive,
        1,
        TcpOptions {
            c2h_chunk: 32 * 1024,
            // H2C data aligned to 16 bytes.
            cpda: 3,
            ..small_h2c()
        },
    );
    for (ddgst, attrs) in [(false, 0), (true, 0), (true, cattr::DISABLE_SQFLOW)] {
        let cfg = HostConfig {
            header_digest: ddgst,
            data_digest: ddgst,
            hpda: if ddgst { 7 } else { 0 },
            ..HostConfig::default()
        };
        let (_a, mut io) = io_pair(s.addr, cfg, attrs);
        for len in [512usize, 20 * 1024, 36 * 1024, 100 * 1024, 1024 * 1024] {
            let d = pattern(len, len as u8);
            assert!(io.write_r2t(3000, &d).0.is_success());
            let cid = io.next_cid();
            let nlb = (len / BS) as u32;
            io.cmd(
                &rw_sqe(
                    nvm_op::READ,
                    cid,
                    3000,
                    nlb,
                    SglDescriptor::transport(len as u32),
                ),
                &[],
            );
            let mut back = Vec::new();
            let mut pdus = 0;
            loop {
                match io.recv() {
                    Rx::C2H {
                        datao,
                        last,
                        success,
                        data,
                        ..
                    } => {
                        assert_eq!(datao as usize, back.len());
                        assert!(data.len() <= 32 * 1024);
                        assert_eq!(last, back.len() + data.len() == len);
                        back.extend_from_slice(&data);
                        pdus += 1;
                        if success {
                            assert_eq!(attrs, cattr::DISABLE_SQFLOW);
                            break;
                        }
                    }
                    Rx::Resp(c) => {
                        assert!(status_of(&c).is_success());
                        assert_eq!(attrs, 0);
                        break;
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(pdus, len.div_ceil(32 * 1024));
            assert_eq!(back, d, "len {len}");
        }
    }
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn sq_flow_control_disabled_sends_success_in_the_last_c2hdata() {
    let s = default_server();
    let (_admin, mut io) = io_pair(s.addr, HostConfig::default(), cattr::DISABLE_SQFLOW);
    let d = pattern(4096, 6);
    assert!(io.write_icd(300, &d).is_success());
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(nvm_op::READ, cid, 300, 8, SglDescriptor::transport(4096)),
        &[],
    );
    match io.recv() {
        Rx::C2H {
            cid: c,
            last: true,
            success: true,
            data,
            ..
        } => {
            assert_eq!(c, cid);
            assert_eq!(data, d);
        }
        other => panic!("{other:?}"),
    }
    // No CapsuleResp follows: the next PDU answers the next command.
    let cid = io.next_cid();
    let mut flush = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut flush[..]);
        q.set_opcode(nvm_op::FLUSH);
        q.set_cid(cid);
        q.set_nsid(1);
    }
    finish(&mut flush, SglDescriptor::transport(0));
    assert!(status_of(&io.run(&flush)).is_success());
    // A failed read still gets a response (and no data).
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::READ,
            cid,
            1 << 40,
            8,
            SglDescriptor::transport(4096),
        ),
        &[],
    );
    let c = io.expect_resp(cid);
    assert!(status_of(&c).is(Sct::Generic, generic::LBA_OUT_OF_RANGE));
}

#[test]
fn sgl_errors_fail_the_command_only() {
    let s = default_server();
    let (_admin, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    // A keyed SGL (RDMA) on TCP.
    let cid = io.next_cid();
    let c = io.run(&rw_sqe(
        nvm_op::WRITE,
        cid,
        0,
        8,
        SglDescriptor::keyed(0x1000, 4096, 5, false),
    ));
    assert!(status_of(&c).is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID));
    // In-capsule SGL longer than the capsule's data.
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(nvm_op::WRITE, cid, 0, 8, SglDescriptor::in_capsule(0, 4096)),
        &[1; 2048],
    );
    let c = io.expect_resp(cid);
    assert!(status_of(&c).is(Sct::Generic, generic::SGL_OFFSET_INVALID));
    // Read data must use a transport SGL.
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(nvm_op::READ, cid, 0, 1, SglDescriptor::in_capsule(0, 512)),
        &[0; 512],
    );
    let c = io.expect_resp(cid);
    assert!(status_of(&c).is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID));
    // The queue still works.
    let d = pattern(512, 1);
    assert!(io.write_icd(1, &d).is_success());
    assert_eq!(io.read(1, 1).1, d);
}

#[test]
fn held_aer_completes_on_an_event() {
    let s = server(PollMode::Interrupt, 1, small_h2c());
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    h.admin_up();
    let cid = h.next_cid();
    let mut aer = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut aer[..]);
        q.set_opcode(admin_op::ASYNC_EVENT_REQUEST);
        q.set_cid(cid);
    }
    finish(&mut aer, SglDescriptor::transport(0));
    h.cmd(&aer, &[]);
    // Held: other commands overtake it.
    let cid2 = h.next_cid();
    assert!(status_of(&h.run(&prop_get(cid2, reg::CSTS))).is_success());
    // A namespace goes away: the AER completes with a notice.
    let sub = s.target.subsystem_by_name(DEFAULT_SUBSYSTEM_NQN).unwrap();
    assert!(sub.remove_namespace(nvmf_common::types::Nsid(1)).is_some());
    let c = h.expect_resp(cid);
    assert!(status_of(&c).is_success());
    assert_ne!(Cqe::new_unchecked(&c[..]).dw0(), 0);
}

#[test]
fn failed_commands_give_their_slots_back() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    // Before Connect the queue has one entry: a refused command must free it.
    for _ in 0..3 {
        let cid = h.next_cid();
        let c = h.run(&prop_get(cid, reg::CSTS));
        assert!(status_of(&c).is(Sct::Generic, generic::INVALID_OPCODE));
    }
    // A Connect to an unknown subsystem fails; the next one succeeds.
    let cid = h.next_cid();
    let mut data = connect_data(0xFFFF);
    ConnectData::new_unchecked(&mut data[..]).set_subsysnqn("nqn.2024-01.io.example:nope");
    h.cmd(&connect_sqe(cid, 0, 7, 0), &data);
    assert!(!status_of(&h.expect_resp(cid)).is_success());
    let cntlid = h.admin_up();
    // Many more failing commands than the queue (8 entries) holds.
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 1, 7, 0);
    for i in 0..40u64 {
        let cid = io.next_cid();
        let sgl = if i % 2 == 0 {
            SglDescriptor::keyed(0, 512, 1, false)
        } else {
            SglDescriptor::transport(512)
        };
        // Out of range or with an SGL TCP does not carry.
        let c = io.run(&rw_sqe(nvm_op::READ, cid, 1 << 40, 1, sgl));
        assert!(!status_of(&c).is_success());
    }
    let d = pattern(512, 3);
    assert!(io.write_icd(0, &d).is_success());
    assert_eq!(io.read(0, 1).1, d);
}

#[test]
fn capsule_before_icreq_is_a_sequence_error() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    // A writer for a connection that was never initialized.
    let n = Negotiated {
        header_digest: false,
        data_digest: false,
        hpda: 0,
        cpda: 0,
        maxh2cdata: 8192,
        maxr2t: 0,
    };
    h.writer = Some(PduWriter::new(Role::Host, &n));
    h.cmd(&connect_sqe(1, 0, 31, 0), &connect_data(0xFFFF));
    // The header of the offending PDU comes back (72 bytes).
    let echoed = h.expect_term(term_fes::PDU_SEQUENCE_ERROR, 0);
    assert!(!echoed.is_empty() && echoed.len() <= 72, "{}", echoed.len());
    assert_eq!(echoed[0], nvmf_common::wire::tcp::pdu_type::CMD);
    assert_healthy(s.addr);
    s.wait_for("protocol error counted", |c| c.protocol_errors == 1);
}

#[test]
fn icreq_twice_is_a_sequence_error() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    let mut out = Vec::new();
    encode_icreq(&icreq_params(&h.cfg), &mut out);
    h.send(&out);
    h.expect_term(term_fes::PDU_SEQUENCE_ERROR, 0);
    assert_healthy(s.addr);
}

#[test]
fn bad_hlen_is_an_invalid_header_field() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    let mut out = Vec::new();
    h.w()
        .capsule_cmd(&connect_sqe(1, 0, 31, 0), &connect_data(0xFFFF), &mut out)
        .unwrap();
    out[2] = 70; // hlen of a CapsuleCmd is 72
    h.send(&out);
    let echoed = h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::HLEN);
    assert_eq!(&echoed[..8], &out[..8]);
    assert_healthy(s.addr);
}

#[test]
fn header_digest_error_terminates() {
    let s = default_server();
    let cfg = HostConfig {
        header_digest: true,
        ..HostConfig::default()
    };
    let mut h = Host::new(s.addr, cfg);
    h.init();
    let mut out = Vec::new();
    h.w()
        .capsule_cmd(&connect_sqe(1, 0, 31, 0), &connect_data(0xFFFF), &mut out)
        .unwrap();
    out[20] ^= 0x40; // a bit of the SQE, under the header digest
    let received = u32::from_le_bytes([out[72], out[73], out[74], out[75]]);
    h.send(&out);
    let echoed = h.expect_term(term_fes::HEADER_DIGEST_ERROR, received);
    assert_eq!(echoed.len(), 72);
    assert_healthy(s.addr);
}

#[test]
fn h2cdata_for_an_unknown_command() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    h.admin_up();
    h.h2c(0x55, 3, 0, &[1; 512], true);
    let echoed = h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    assert_eq!(echoed.len(), 24);
    assert_eq!(&echoed[8..10], &0x55u16.to_le_bytes());
    // A TTAG beyond every slot.
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    h.admin_up();
    h.h2c(0x56, 0xFFF0, 0, &[1; 512], true);
    h.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    assert_healthy(s.addr);
}

/// Starts a 36 KiB R2T write and returns (cid, the first R2T's ttag).
fn start_r2t_write(io: &mut Host, slba: u64) -> (u16, u16) {
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::WRITE,
            cid,
            slba,
            72,
            SglDescriptor::transport(36 * 1024),
        ),
        &[],
    );
    match io.recv() {
        Rx::R2T {
            cid: c,
            ttag,
            offset: 0,
            length: 32768,
        } => {
            assert_eq!(c, cid);
            (cid, ttag)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn h2cdata_outside_its_r2t_window() {
    let s = default_server();
    // Not at the window's next offset.
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 4096, &[2; 4096], false);
    io.expect_term(term_fes::DATA_OUT_OF_RANGE, 0);
    // The same bytes twice.
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 0, &[2; 4096], false);
    io.h2c(cid, ttag, 0, &[2; 4096], false);
    io.expect_term(term_fes::DATA_OUT_OF_RANGE, 0);
    // Past the end of the second (4 KiB) window.
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 0, &[2; 32768], true);
    match io.recv() {
        Rx::R2T {
            offset: 32768,
            length: 4096,
            ttag: t2,
            ..
        } => io.h2c(cid, t2, 32768, &[3; 8192], true),
        other => panic!("{other:?}"),
    }
    io.expect_term(term_fes::DATA_OUT_OF_RANGE, 0);
    // No data at all.
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 0, &[], false);
    io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::DATA_LENGTH);
    assert_healthy(s.addr);
    // Nothing was left behind: no buffers held, only live connections remain.
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn h2cdata_with_a_wrong_ttag_or_command_id() {
    let s = default_server();
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag.wrapping_add(1), 0, &[2; 4096], false);
    io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::TTAG);
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid.wrapping_add(1), ttag, 0, &[2; 4096], false);
    io.expect_term(term_fes::INVALID_HEADER_FIELD, offset::COMMAND_ID);
    assert_healthy(s.addr);
}

#[test]
fn data_digest_error_fails_the_command_without_writing() {
    let s = default_server();
    let cfg = HostConfig {
        data_digest: true,
        ..HostConfig::default()
    };
    let (_a, mut io) = io_pair(s.addr, cfg, 0);
    let old = pattern(64 * 1024, 10);
    assert!(io.write_r2t(400, &old).0.is_success());

    // H2CData with a bad data digest: the command fails once all its R2T windows are
    // drained, with no further R2T, and nothing reaches the namespace.
    let new = pattern(64 * 1024, 11);
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::WRITE,
            cid,
            400,
            128,
            SglDescriptor::transport(65536),
        ),
        &[],
    );
    let ttag = match io.recv() {
        Rx::R2T {
            ttag,
            offset: 0,
            length: 32768,
            ..
        } => ttag,
        other => panic!("{other:?}"),
    };
    let mut out = Vec::new();
    io.w()
        .h2c_data(cid, ttag, 0, &new[..32768], true, &mut out)
        .unwrap();
    let n = out.len();
    out[n - 100] ^= 0x01; // a data byte
    io.send(&out);
    let c = io.expect_resp(cid);
    assert!(tte(status_of(&c)), "{:?}", status_of(&c));
    assert_eq!(io.read(400, 128).1, old);

    // In-capsule data with a bad digest: the same, and the SQ head still advances.
    let mut out = Vec::new();
    let cid = io.next_cid();
    io.w()
        .capsule_cmd(
            &rw_sqe(
                nvm_op::WRITE,
                cid,
                400,
                8,
                SglDescriptor::in_capsule(0, 4096),
            ),
            &new[..4096],
            &mut out,
        )
        .unwrap();
    let n = out.len();
    // Corrupt the digest itself this time.
    let good = data_digest(&new[..4096]).to_le_bytes();
    assert_eq!(&out[n - 4..], &good);
    out[n - 1] ^= 0xFF;
    io.send(&out);
    let c = io.expect_resp(cid);
    assert!(tte(status_of(&c)));
    assert_eq!(io.read(400, 128).1, old);
    // The connection goes on.
    assert!(io.write_icd(400, &new[..4096]).is_success());
    assert_eq!(io.read(400, 8).1, new[..4096].to_vec());
    assert_eq!(s.tcp.counters().digest_errors, 2);
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn peer_closing_or_resetting_mid_transfer_leaks_nothing() {
    let s = default_server();
    let mut admin = Host::new(s.addr, HostConfig::default());
    admin.init();
    let cntlid = admin.admin_up();
    // Half the data of an R2T window, then a clean close.
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 1, 127, 0);
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 0, &[5; 8192], false);
    drop(io);
    // A write whose R2T is never read, then close: unread data makes the kernel reset.
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 2, 31, 0);
    let cid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::WRITE,
            cid,
            0,
            72,
            SglDescriptor::transport(36 * 1024),
        ),
        &[],
    );
    // Reads whose data is never read either.
    for _ in 0..8 {
        let cid = io.next_cid();
        io.cmd(
            &rw_sqe(
                nvm_op::READ,
                cid,
                0,
                256,
                SglDescriptor::transport(128 * 1024),
            ),
            &[],
        );
    }
    std::thread::sleep(Duration::from_millis(50));
    drop(io);
    s.wait_for("connections cleaned up", |c| {
        c.buffers_in_use == 0 && c.closed >= 2 && c.connections == 1
    });
    // The controller (admin queue) and new connections are unaffected.
    let cid = admin.next_cid();
    assert!(status_of(&admin.run(&prop_get(cid, reg::CSTS))).is_success());
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 1, 127, 0);
    let d = pattern(4096, 8);
    assert!(io.write_icd(0, &d).is_success());
    assert_eq!(io.read(0, 8).1, d);
    assert_healthy(s.addr);
}

#[test]
fn stalled_host_is_disconnected() {
    let s = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            stall_timeout: Duration::from_millis(300),
            ..small_h2c()
        },
    );
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let t0 = Instant::now();
    let (cid, ttag) = start_r2t_write(&mut io, 0);
    io.h2c(cid, ttag, 0, &[1; 4096], false);
    // No more data: the controller gives up on the connection.
    assert_eq!(io.recv(), Rx::Closed);
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
    // A connection that never sends its ICReq is closed too.
    let mut idle = Host::new(s.addr, HostConfig::default());
    assert_eq!(idle.recv(), Rx::Closed);
    assert_healthy(s.addr);
}

#[test]
fn queue_overrun_ends_only_that_connection() {
    let s = default_server();
    let mut h = Host::new(s.addr, HostConfig::default());
    h.init();
    // An admin queue of 2 entries: two held AERs fill it, a third command overruns it.
    let cid = h.next_cid();
    h.cmd(&connect_sqe(cid, 0, 1, 0), &connect_data(0xFFFF));
    assert!(status_of(&h.expect_resp(cid)).is_success());
    let cid = h.next_cid();
    assert!(status_of(&h.run(&prop_set(cid, reg::CC, 0x0046_0001))).is_success());
    for _ in 0..2 {
        let cid = h.next_cid();
        let mut aer = [0u8; SQE_LEN];
        {
            let mut q = Sqe::new_unchecked(&mut aer[..]);
            q.set_opcode(admin_op::ASYNC_EVENT_REQUEST);
            q.set_cid(cid);
        }
        finish(&mut aer, SglDescriptor::transport(0));
        h.cmd(&aer, &[]);
    }
    let cid = h.next_cid();
    h.cmd(&prop_get(cid, reg::CSTS), &[]);
    assert_eq!(h.recv(), Rx::Closed);
    assert_healthy(s.addr);
}

#[test]
fn commands_wait_in_line_for_pool_buffers() {
    // A 1 MiB arena: two 512 KiB transfers at a time; the others wait their turn.
    let s = server(
        PollMode::Interrupt,
        1,
        TcpOptions {
            arena_bytes: 1 << 20,
            maxh2cdata: 128 * 1024,
            ..TcpOptions::default()
        },
    );
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    let len = 512 * 1024;
    let nlb = (len / BS) as u32;
    let datas: Vec<Vec<u8>> = (0..4).map(|i| pattern(len, 40 + i as u8)).collect();
    let mut cids = Vec::new();
    for (i, d) in datas.iter().enumerate() {
        let cid = io.next_cid();
        cids.push(cid);
        io.cmd(
            &rw_sqe(
                nvm_op::WRITE,
                cid,
                i as u64 * u64::from(nlb),
                nlb,
                SglDescriptor::transport(d.len() as u32),
            ),
            &[],
        );
    }
    // A read queued behind them gets a buffer only after the writes give theirs back.
    let rcid = io.next_cid();
    io.cmd(
        &rw_sqe(
            nvm_op::READ,
            rcid,
            0,
            nlb,
            SglDescriptor::transport(len as u32),
        ),
        &[],
    );
    let mut done = 0;
    let mut first_r2t = Vec::new();
    let mut read_back = Vec::new();
    while done < 5 {
        match io.recv() {
            Rx::R2T {
                cid,
                ttag,
                offset,
                length,
            } => {
                if offset == 0 {
                    first_r2t.push(cid);
                }
                let i = cids.iter().position(|&c| c == cid).unwrap();
                let d = &datas[i][offset as usize..(offset + length) as usize];
                io.h2c(cid, ttag, offset, d, true);
            }
            Rx::C2H {
                cid, datao, data, ..
            } => {
                assert_eq!(cid, rcid);
                assert_eq!(datao as usize, read_back.len());
                read_back.extend_from_slice(&data);
            }
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{:?}", status_of(&c));
                done += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    // Buffers went out in arrival order, and the read saw the first write.
    assert_eq!(first_r2t, cids);
    assert_eq!(read_back, datas[0]);
    for (i, d) in datas.iter().enumerate() {
        assert_eq!(&io.read(i as u64 * u64::from(nlb), nlb).1, d);
    }
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
}

#[test]
fn a_host_that_does_not_read_is_not_read_either() {
    let s = server(PollMode::Interrupt, 1, TcpOptions::default());
    let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
    // A full queue of 256 KiB reads (32 MiB of responses), none of them read yet.
    let mut cids = Vec::new();
    let mut out = Vec::new();
    for i in 0..128u64 {
        let cid = io.next_cid();
        cids.push(cid);
        io.w()
            .capsule_cmd(
                &rw_sqe(
                    nvm_op::READ,
                    cid,
                    (i % 32) * 512,
                    512,
                    SglDescriptor::transport(256 * 1024),
                ),
                &[],
                &mut out,
            )
            .unwrap();
    }
    io.send(&out);
    std::thread::sleep(Duration::from_millis(300));
    // What waits for the socket stays bounded by the pool, and all of it arrives.
    let c = s.tcp.counters();
    assert!(c.buffers_in_use <= 256, "{c:?}");
    let mut done = 0;
    while done < cids.len() {
        match io.recv() {
            Rx::C2H { .. } => {}
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success());
                done += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    s.wait_for("buffers back", |c| c.buffers_in_use == 0);
    assert_healthy(s.addr);
}

#[test]
fn keep_alive_expiry_closes_every_queue_of_the_controller() {
    let s = server(PollMode::Interrupt, 1, small_h2c());
    let mut admin = Host::new(s.addr, HostConfig::default());
    admin.init();
    let cid = admin.next_cid();
    admin.cmd(&connect_sqe_kato(cid, 0, 31, 0, 300), &connect_data(0xFFFF));
    let c = admin.expect_resp(cid);
    assert!(status_of(&c).is_success());
    let cntlid = Cqe::new_unchecked(&c[..]).dw0() as u16;
    let cid = admin.next_cid();
    assert!(status_of(&admin.run(&prop_set(cid, reg::CC, 0x0046_0001))).is_success());
    let mut io = Host::new(s.addr, HostConfig::default());
    io.init();
    io.io_connect(cntlid, 1, 31, 0);
    // Traffic on the I/O queue keeps the controller alive...
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        assert!(io.write_icd(0, &[1; 512]).is_success());
    }
    // ...silence does not.
    let t0 = Instant::now();
    assert_eq!(admin.recv(), Rx::Closed);
    assert_eq!(io.recv(), Rx::Closed);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_healthy(s.addr);
}

#[test]
fn ipv6_listener() {
    let mut cfg = Config::single(
        TrType::Tcp,
        Some(("::1".into(), "4420".into())),
        None,
        vec!["ram:16M".into()],
    )
    .unwrap();
    cfg.ports[0].trsvcid = "0".into();
    let target = Target::from_config(&cfg).unwrap();
    let tcp = match TcpServer::start(target.clone(), &target.ports()) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            eprintln!("no IPv6 loopback here: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let addr = tcp.local_addrs()[0];
    assert!(addr.is_ipv6());
    assert_healthy(addr);
}

#[test]
fn interrupt_poll_and_several_groups() {
    for (mode, groups) in [
        (PollMode::Interrupt, 2),
        (PollMode::Poll, 1),
        (PollMode::Adaptive, 2),
    ] {
        let s = server(mode, groups, small_h2c());
        let (_a, mut io) = io_pair(s.addr, HostConfig::default(), 0);
        let (_a2, mut io2) = io_pair(s.addr, HostConfig::default(), 0);
        for i in 0..20u64 {
            let d = pattern(4096, i as u8);
            assert!(io.write_icd(i * 8, &d).is_success());
            let big = pattern(64 * 1024, i as u8 + 100);
            assert!(io2.write_r2t(10_000 + i * 128, &big).0.is_success());
            assert_eq!(io2.read(i * 8, 8).1, d);
            assert_eq!(io.read(10_000 + i * 128, 128).1, big);
        }
        if groups == 2 {
            // Four connections spread over both groups.
            let per: Vec<u64> = s
                .tcp
                .groups
                .iter()
                .map(|g| g.stats.snapshot().accepted)
                .collect();
            assert_eq!(per, vec![2, 2], "{mode:?}");
        }
        s.tcp.shutdown();
    }
}
