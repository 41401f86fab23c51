//! A scripted NVMe/TCP host for malformed-input tests: a blocking std `TcpStream`, the
//! framer's host-side reader and writer for well-formed PDUs, and `send` for bytes made
//! by hand. Nothing here retries or repairs: every PDU the controller sends back is
//! handed to the test as an owned [`Rx`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nvmf_common::transport::tcp::negotiate::icreq_params;
use nvmf_common::transport::tcp::{
    encode_icreq, FramerError, HostConfig, Negotiated, Pdu, PduReader, PduWriter, Role,
};
use nvmf_common::types::{Cntlid, Nqn, Qid};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::{reg, CONNECT_DATA_LEN};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::{psdt, Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;
use nvmf_initiator::command;

use crate::{hostnqn, TEST_HOSTID};

/// How long the scripted host waits for the controller before failing the test.
pub const RAW_TIMEOUT: Duration = Duration::from_secs(10);

/// CC value that enables the controller: EN, IOSQES 6 (64 B), IOCQES 4 (16 B).
pub const CC_ENABLE: u64 = 1 | (6 << 16) | (4 << 20);

/// A PDU the scripted host received, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rx {
    IcResp,
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
        Ok(Pdu::IcResp(_)) => Rx::IcResp,
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

/// The status of a response capsule.
pub fn status_of(cqe: &[u8; 16]) -> Status {
    Cqe::new_unchecked(&cqe[..]).status()
}

/// Completion dword 0 of a response capsule.
pub fn dw0_of(cqe: &[u8; 16]) -> u32 {
    Cqe::new_unchecked(&cqe[..]).dw0()
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

/// Connect data for the test host naming `subnqn` and `cntlid`.
pub fn connect_data(subnqn: &Nqn, cntlid: Cntlid) -> Vec<u8> {
    command::connect_data(TEST_HOSTID, cntlid, subnqn, &hostnqn()).to_vec()
}

/// A scripted host connection.
pub struct RawTcp {
    sock: TcpStream,
    cfg: HostConfig,
    reader: PduReader,
    writer: Option<PduWriter>,
    inbuf: Vec<u8>,
    cid: u16,
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
            cid: 0,
        }
    }

    /// ICReq → ICResp with the configured digests; sets up the PDU writer.
    pub fn init(&mut self) {
        let mut out = Vec::new();
        encode_icreq(&icreq_params(&self.cfg), &mut out);
        self.send(&out);
        match self.recv() {
            Rx::IcResp => {
                let n = self
                    .reader
                    .negotiated()
                    .unwrap_or_else(|| panic!("ICResp without parameters"));
                self.writer = Some(PduWriter::new(Role::Host, &n));
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
        let mut buf = vec![0u8; 64 * 1024];
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
            match self.sock.read(&mut buf) {
                Ok(0) => return Rx::Closed,
                Ok(n) => self.inbuf.extend_from_slice(buf.get(..n).unwrap_or(&[])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return Rx::Closed
                }
                Err(e) => panic!("host read: {e}"),
            }
        }
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

    /// The response to `cid` (nothing else may come first).
    pub fn expect_resp(&mut self, cid: u16) -> [u8; 16] {
        match self.recv() {
            Rx::Resp(c) => {
                assert_eq!(Cqe::new_unchecked(&c[..]).cid(), cid, "response CID");
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

    /// Admin Connect to `subnqn` (dynamic controller), CC.EN = 1; returns the CNTLID.
    pub fn admin_up(&mut self, subnqn: &Nqn) -> Cntlid {
        let sqe = with_sgl(
            command::connect(Qid(0), 31, 0),
            SglDescriptor::in_capsule(0, CONNECT_DATA_LEN as u32),
        );
        let c = self.run(sqe, &connect_data(subnqn, Cntlid::DYNAMIC));
        assert!(
            status_of(&c).is_success(),
            "admin Connect: {}",
            status_of(&c)
        );
        let cntlid = Cntlid(dw0_of(&c) as u16);
        let c = self.run(
            with_sgl(
                command::property_set(reg::CC, CC_ENABLE),
                SglDescriptor::transport(0),
            ),
            &[],
        );
        assert!(status_of(&c).is_success(), "CC.EN: {}", status_of(&c));
        cntlid
    }

    /// I/O Connect of queue `qid` to controller `cntlid`; returns the response.
    pub fn io_connect(&mut self, subnqn: &Nqn, cntlid: Cntlid, qid: u16, sqsize: u16) -> [u8; 16] {
        let sqe = with_sgl(
            command::connect(Qid(qid), sqsize, 0),
            SglDescriptor::in_capsule(0, CONNECT_DATA_LEN as u32),
        );
        self.run(sqe, &connect_data(subnqn, cntlid))
    }
}
