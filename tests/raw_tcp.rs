//! The scripted NVMe/TCP peer every hand-driven NVMe/TCP test uses.
//!
//! - [`RawTcp`] plays the host: a blocking std `TcpStream`, the framer's host-side
//!   reader and writer for well-formed PDUs, and [`RawTcp::send`] for bytes made by
//!   hand, with helpers for bring-up (ICReq, admin and I/O Connect) and for reads and
//!   writes over every data path (in-capsule, R2T/H2CData, C2HData).
//! - [`ctrl::RawCtrl`] plays the controller: a std listener in a thread that answers
//!   the ICReq and then does what its script says, for tests of the host transport.
//!
//! Nothing here retries or repairs: every PDU the peer sends back is handed to the
//! test as an owned value ([`Rx`] on the host side, [`ctrl::Got`] on the controller
//! side).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nvmf_common::transport::tcp::negotiate::icreq_params;
use nvmf_common::transport::tcp::{
    encode_icreq, FramerError, HostConfig, IcRespParams, Negotiated, Pdu, PduReader, PduWriter,
    Role,
};
use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::{reg, ConnectCmd, CONNECT_DATA_LEN};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::{psdt, Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;
use nvmf_common::wire::tcp::offset;
use nvmf_initiator::command;

use crate::{hostnqn, TcpEnv, TEST_HOSTID};

pub mod ctrl;

/// How long a scripted peer waits for the other side before failing the test.
pub const RAW_TIMEOUT: Duration = Duration::from_secs(10);

/// CC value that enables the controller: EN, IOSQES 6 (64 B), IOCQES 4 (16 B).
pub const CC_ENABLE: u64 = 1 | (6 << 16) | (4 << 20);

/// Logical block size of the RAM namespaces the tests serve.
pub const BS: u32 = 512;

/// A PDU the scripted host received, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rx {
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
    /// The controller sent something the host framer rejects.
    Err(FramerError),
}

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
        Ok(other) => panic!("a controller sent host-to-controller PDU {other:?}"),
        Err(e) => Rx::Err(e),
    }
}

// ---- capsule and SQE helpers ------------------------------------------------------

/// The status of a response capsule.
pub fn status_of(cqe: &[u8; 16]) -> Status {
    Cqe::new_unchecked(&cqe[..]).status()
}

/// Completion dword 0 of a response capsule.
pub fn dw0_of(cqe: &[u8; 16]) -> u32 {
    Cqe::new_unchecked(&cqe[..]).dw0()
}

/// The command identifier of a response capsule.
pub fn cid_of(cqe: &[u8; 16]) -> u16 {
    Cqe::new_unchecked(&cqe[..]).cid()
}

/// Sets PSDT to SGL and writes `sgl` into SGL1 of `sqe`.
pub fn with_sgl(mut sqe: [u8; SQE_LEN], sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let mut q = Sqe::new_unchecked(&mut sqe[..]);
    q.set_psdt(psdt::SGL_MPTR_CONTIGUOUS);
    if sgl.emit(q.dptr_mut()).is_err() {
        panic!("SGL {sgl:?} does not encode");
    }
    sqe
}

/// Sets the command identifier of `sqe`.
pub fn with_cid(mut sqe: [u8; SQE_LEN], cid: u16) -> [u8; SQE_LEN] {
    Sqe::new_unchecked(&mut sqe[..]).set_cid(cid);
    sqe
}

/// A Write of `nlb` blocks at `slba` of namespace 1 with SGL1 `sgl`.
pub fn write_sqe(slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let s = command::write(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    with_sgl(s, sgl)
}

/// A Read of `nlb` blocks at `slba` of namespace 1 with SGL1 `sgl`.
pub fn read_sqe(slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let s = command::read(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    with_sgl(s, sgl)
}

/// `sqe` (an admin, fabrics or flush command) with no data: a zero-length transport
/// SGL, as Linux sends it.
pub fn no_data(sqe: [u8; SQE_LEN]) -> [u8; SQE_LEN] {
    with_sgl(sqe, SglDescriptor::transport(0))
}

/// Connect data for the test host naming `subnqn` and `cntlid`.
pub fn connect_data(subnqn: &Nqn, cntlid: Cntlid) -> Vec<u8> {
    command::connect_data(TEST_HOSTID, cntlid, subnqn, &hostnqn()).to_vec()
}

/// A Connect SQE for `qid` with the Connect data in the capsule.
pub fn connect_sqe(qid: u16, sqsize: u16, kato_ms: u32, cattr: u8) -> [u8; SQE_LEN] {
    let mut s = command::connect(Qid(qid), sqsize, kato_ms);
    ConnectCmd::new_unchecked(&mut s[..]).set_cattr(cattr);
    with_sgl(s, SglDescriptor::in_capsule(0, CONNECT_DATA_LEN as u32))
}

/// The ICReq the framer writes for `cfg`.
pub fn icreq_bytes(cfg: &HostConfig) -> Vec<u8> {
    let mut out = Vec::new();
    encode_icreq(&icreq_params(cfg), &mut out);
    out
}

/// Overwrites PLEN (bytes 4..8 of the common header) of a PDU made by hand.
pub fn set_plen(pdu: &mut [u8], plen: u32) {
    let at = offset::PLEN as usize;
    if let Some(p) = pdu.get_mut(at..at + 4) {
        p.copy_from_slice(&plen.to_le_bytes());
    }
}

// ---- the host -----------------------------------------------------------------------

/// A scripted host connection.
pub struct RawTcp {
    sock: TcpStream,
    cfg: HostConfig,
    reader: PduReader,
    writer: Option<PduWriter>,
    inbuf: Vec<u8>,
    rbuf: Vec<u8>,
    cid: u16,
    spin: bool,
}

impl RawTcp {
    /// Opens a TCP connection; nothing is sent yet.
    pub fn connect(addr: SocketAddr, cfg: HostConfig) -> RawTcp {
        let sock = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        sock.set_read_timeout(Some(RAW_TIMEOUT))
            .unwrap_or_else(|e| panic!("{e}"));
        sock.set_nodelay(true).unwrap_or_else(|e| panic!("{e}"));
        RawTcp {
            sock,
            cfg,
            reader: PduReader::host(cfg).unwrap_or_else(|e| panic!("{e}")),
            writer: None,
            inbuf: Vec::new(),
            rbuf: Vec::new(),
            cid: 0,
            spin: false,
        }
    }

    /// The host configuration the ICReq is made from.
    pub fn config(&self) -> HostConfig {
        self.cfg
    }

    /// ICReq → ICResp with the configured digests; sets up the PDU writer. Returns
    /// the ICResp's fields.
    pub fn init(&mut self) -> IcRespParams {
        self.send(&icreq_bytes(&self.cfg));
        match self.recv() {
            Rx::IcResp(p) => {
                let n = self
                    .reader
                    .negotiated()
                    .unwrap_or_else(|| panic!("ICResp without parameters"));
                self.writer = Some(PduWriter::new(Role::Host, &n));
                p
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    /// A writer for a connection that never sent its ICReq (sequence tests).
    pub fn pretend_initialized(&mut self) {
        let n = Negotiated {
            header_digest: false,
            data_digest: false,
            hpda: 0,
            cpda: 0,
            maxh2cdata: 8192,
            maxr2t: 0,
        };
        self.writer = Some(PduWriter::new(Role::Host, &n));
    }

    /// The parameters the ICResp settled.
    pub fn negotiated(&self) -> Negotiated {
        self.reader
            .negotiated()
            .unwrap_or_else(|| panic!("not initialized"))
    }

    /// The PDU writer (after [`RawTcp::init`]).
    pub fn writer(&self) -> PduWriter {
        self.writer.unwrap_or_else(|| panic!("not initialized"))
    }

    /// Busy-polls the socket from now on (non-blocking reads, retried at once), as a
    /// host that polls does; for benchmarks against a polling controller.
    pub fn set_spin(&mut self) {
        self.sock
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("{e}"));
        self.spin = true;
    }

    /// Sends bytes as they are.
    pub fn send(&mut self, bytes: &[u8]) {
        self.sock
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("host write: {e}"));
    }

    /// Sends bytes, ignoring a controller that already closed.
    pub fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes);
    }

    /// Closes the write half (the controller sees EOF).
    pub fn shutdown_write(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }

    /// A fresh command identifier.
    pub fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    /// The next PDU from the controller, or `Closed`.
    pub fn recv(&mut self) -> Rx {
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
                self.inbuf.extend_from_slice(b.get(..n).unwrap_or(&[]));
            }
            self.rbuf = b;
            match r {
                Ok(0) => return Rx::Closed,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return Rx::Closed
                }
                // A spinning host polls again.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.spin => {}
                Err(e) => panic!("host read: {e}"),
            }
        }
    }

    /// A PDU already received, without reading the socket.
    pub fn try_buffered(&mut self) -> Option<Rx> {
        if self.inbuf.is_empty() && !self.reader.has_partial_pdu() {
            return None;
        }
        match self.reader.feed(&self.inbuf) {
            Ok(n) => {
                self.inbuf.drain(..n);
            }
            Err(e) => return Some(Rx::Err(e)),
        }
        self.reader.poll().map(to_rx)
    }

    /// Sends a CapsuleCmd with `data` in the capsule.
    pub fn cmd(&mut self, sqe: &[u8; SQE_LEN], data: &[u8]) {
        let mut out = Vec::new();
        self.writer()
            .capsule_cmd(sqe, data, &mut out)
            .unwrap_or_else(|e| panic!("encode capsule: {e}"));
        self.send(&out);
    }

    /// Sends an H2CData PDU.
    pub fn h2c(&mut self, cid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        let mut out = Vec::new();
        self.writer()
            .h2c_data(cid, ttag, datao, data, last, &mut out)
            .unwrap_or_else(|e| panic!("encode H2CData: {e}"));
        self.send(&out);
    }

    /// A Keep Alive CapsuleCmd (no data) as the writer makes it: a well-formed PDU for
    /// tests to corrupt.
    pub fn keep_alive_pdu(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.writer()
            .capsule_cmd(&no_data(command::keep_alive()), &[], &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        out
    }

    /// The response to `cid` (nothing else may come first).
    pub fn expect_resp(&mut self, cid: u16) -> [u8; 16] {
        match self.recv() {
            Rx::Resp(c) => {
                assert_eq!(cid_of(&c), cid, "response CID");
                c
            }
            other => panic!("expected the response to {cid:#x}, got {other:?}"),
        }
    }

    /// Sends `sqe` (its CID replaced by a fresh one) with in-capsule `data` and
    /// returns the response.
    pub fn run(&mut self, sqe: [u8; SQE_LEN], data: &[u8]) -> [u8; 16] {
        let cid = self.next_cid();
        self.cmd(&with_cid(sqe, cid), data);
        self.expect_resp(cid)
    }

    /// The C2HTermReq with this FES and FEI, then the close. Returns its data (the
    /// header of the PDU the controller rejected).
    pub fn expect_term(&mut self, fes: u16, fei: u32) -> Vec<u8> {
        match self.recv() {
            Rx::Term {
                fes: f,
                fei: i,
                data,
            } => {
                assert_eq!((f, i), (fes, fei), "C2HTermReq FES/FEI");
                self.expect_closed();
                data
            }
            other => panic!("expected C2HTermReq FES {fes:#x} FEI {fei}, got {other:?}"),
        }
    }

    /// The controller closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        match self.recv() {
            Rx::Closed => {}
            other => panic!("expected the connection to close, got {other:?}"),
        }
    }

    /// Admin Connect to `subnqn` (dynamic controller) with `sqsize` and `kato_ms`;
    /// returns the response.
    pub fn admin_connect(&mut self, subnqn: &Nqn, sqsize: u16, kato_ms: u32) -> [u8; 16] {
        self.run(
            connect_sqe(0, sqsize, kato_ms, 0),
            &connect_data(subnqn, Cntlid::DYNAMIC),
        )
    }

    /// CC.EN = 1 on an admin queue, then CSTS.RDY must read 1.
    pub fn enable(&mut self) {
        let c = self.run(no_data(command::property_set(reg::CC, CC_ENABLE)), &[]);
        assert!(status_of(&c).is_success(), "CC.EN: {}", status_of(&c));
        let c = self.run(no_data(command::property_get(reg::CSTS)), &[]);
        assert!(status_of(&c).is_success(), "CSTS: {}", status_of(&c));
        assert_eq!(dw0_of(&c) & 1, 1, "CSTS.RDY");
    }

    /// Admin Connect to `subnqn` (dynamic controller, 32 entries, no keep-alive) and
    /// [`RawTcp::enable`]; returns the CNTLID.
    pub fn admin_up(&mut self, subnqn: &Nqn) -> Cntlid {
        let c = self.admin_connect(subnqn, 31, 0);
        assert!(
            status_of(&c).is_success(),
            "admin Connect: {}",
            status_of(&c)
        );
        let cntlid = Cntlid(dw0_of(&c) as u16);
        self.enable();
        cntlid
    }

    /// I/O Connect of queue `qid` to controller `cntlid`; returns the response.
    pub fn io_connect(&mut self, subnqn: &Nqn, cntlid: Cntlid, qid: u16, sqsize: u16) -> [u8; 16] {
        self.io_connect_with(subnqn, cntlid, qid, sqsize, 0)
    }

    /// [`RawTcp::io_connect`] with Connect attributes (`cattr`).
    pub fn io_connect_with(
        &mut self,
        subnqn: &Nqn,
        cntlid: Cntlid,
        qid: u16,
        sqsize: u16,
        cattr: u8,
    ) -> [u8; 16] {
        self.run(
            connect_sqe(qid, sqsize, 0, cattr),
            &connect_data(subnqn, cntlid),
        )
    }

    // ---- I/O on namespace 1 -----------------------------------------------------------

    /// Reads `nlb` blocks at `slba` through C2HData; returns the status and the data.
    /// Each C2HData must belong to the read and continue where the last one ended.
    pub fn read(&mut self, slba: u64, nlb: u32) -> (Status, Vec<u8>) {
        let cid = self.next_cid();
        let sqe = read_sqe(slba, nlb, SglDescriptor::transport(nlb * BS));
        self.cmd(&with_cid(sqe, cid), &[]);
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
                    assert_eq!(c, cid, "C2HData of another command");
                    assert_eq!(datao as usize, data.len(), "C2HData offset");
                    data.extend_from_slice(&d);
                    if success {
                        assert!(last, "SUCCESS without LAST");
                        return (Status::SUCCESS, data);
                    }
                }
                Rx::Resp(c) => {
                    assert_eq!(cid_of(&c), cid, "response of another command");
                    return (status_of(&c), data);
                }
                other => panic!("read: unexpected {other:?}"),
            }
        }
    }

    /// [`RawTcp::read`] that must succeed; returns the data.
    pub fn read_back(&mut self, slba: u64, nlb: u32) -> Vec<u8> {
        let (st, data) = self.read(slba, nlb);
        assert!(st.is_success(), "read back: {st}");
        data
    }

    /// Writes `data` in the capsule at `slba`; returns the status.
    pub fn write_icd(&mut self, slba: u64, data: &[u8]) -> Status {
        let nlb = data.len() as u32 / BS;
        let c = self.run(
            write_sqe(slba, nlb, SglDescriptor::in_capsule(0, data.len() as u32)),
            data,
        );
        status_of(&c)
    }

    /// Writes `data` at `slba` through R2T/H2CData: answers each R2T as it comes, in
    /// PDUs of at most MAXH2CDATA. Returns the status and the (offset, length) of the
    /// R2Ts seen.
    pub fn write_r2t(&mut self, slba: u64, data: &[u8]) -> (Status, Vec<(u32, u32)>) {
        let cid = self.next_cid();
        let nlb = data.len() as u32 / BS;
        let sqe = write_sqe(slba, nlb, SglDescriptor::transport(data.len() as u32));
        self.cmd(&with_cid(sqe, cid), &[]);
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
                    assert_eq!(c, cid, "R2T of another command");
                    r2ts.push((o, length));
                    let window = data
                        .get(o as usize..(o + length) as usize)
                        .unwrap_or_else(|| panic!("R2T {o}+{length} past the data"));
                    let mut at = 0;
                    for piece in window.chunks(maxh2c) {
                        let last = at + piece.len() == window.len();
                        self.h2c(cid, ttag, o + at as u32, piece, last);
                        at += piece.len();
                    }
                }
                Rx::Resp(c) => {
                    assert_eq!(cid_of(&c), cid, "response of another command");
                    return (status_of(&c), r2ts);
                }
                other => panic!("write: unexpected {other:?}"),
            }
        }
    }

    /// Starts a write of `nlb` blocks at `slba` through R2T and waits for its first
    /// R2T (at offset 0); returns (cid, ttag, R2T length).
    pub fn start_r2t_write(&mut self, slba: u64, nlb: u32) -> (u16, u16, u32) {
        let cid = self.next_cid();
        let sqe = write_sqe(slba, nlb, SglDescriptor::transport(nlb * BS));
        self.cmd(&with_cid(sqe, cid), &[]);
        match self.recv() {
            Rx::R2T {
                cid: c,
                ttag,
                offset: 0,
                length,
            } => {
                assert_eq!(c, cid, "R2T of another command");
                (cid, ttag, length)
            }
            other => panic!("expected an R2T, got {other:?}"),
        }
    }
}

// ---- a controller's queues ----------------------------------------------------------

/// An enabled admin queue (two I/O queues granted) and I/O queue 1 (32 entries) of
/// one controller of `env`'s subsystem, both made with `cfg`.
pub fn pair(env: &TcpEnv, cfg: HostConfig) -> (RawTcp, RawTcp, Cntlid) {
    pair_with(env.addr, &env.nqn, cfg, 31, 0)
}

/// [`pair`] at `addr` with I/O queue `sqsize` and Connect attributes `cattr`.
pub fn pair_with(
    addr: SocketAddr,
    nqn: &Nqn,
    cfg: HostConfig,
    sqsize: u16,
    cattr: u8,
) -> (RawTcp, RawTcp, Cntlid) {
    let mut admin = RawTcp::connect(addr, cfg);
    admin.init();
    let cntlid = admin.admin_up(nqn);
    let c = admin.run(no_data(command::set_number_of_queues(2)), &[]);
    assert!(
        status_of(&c).is_success(),
        "Number of Queues: {}",
        status_of(&c)
    );
    let mut io = RawTcp::connect(addr, cfg);
    io.init();
    let c = io.io_connect_with(nqn, cntlid, 1, sqsize, cattr);
    assert!(status_of(&c).is_success(), "I/O Connect: {}", status_of(&c));
    (admin, io, cntlid)
}
