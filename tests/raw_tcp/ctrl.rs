//! The controller role of the scripted NVMe/TCP peer: a std `TcpListener` on
//! 127.0.0.1 whose connection is answered by the framer's controller-side reader and
//! writer, so every PDU a host sends is checked by the validation a real target
//! applies, and a test script decides what goes back.
//!
//! This file uses only `std` and `nvmf_common`, so the host library's unit tests
//! that need its private items include it too (`#[path]`): there is one scripted
//! controller.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use nvmf_common::transport::tcp::negotiate::icresp_params;
use nvmf_common::transport::tcp::{
    encode_icresp, ControllerConfig, FramerError, IcReqParams, Negotiated, Pdu, PduReader,
    PduWriter, Role,
};
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sgl::SGL_DESC_LEN;
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::Status;

/// How long the scripted controller waits for the host before failing the test.
pub const CTRL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the scripted controller received, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    Cmd {
        sqe: [u8; SQE_LEN],
        data: Vec<u8>,
    },
    H2C {
        cid: u16,
        ttag: u16,
        datao: u32,
        last: bool,
        data: Vec<u8>,
    },
    Term {
        fes: u16,
        fei: u32,
        hdr: Vec<u8>,
    },
    /// The host closed the connection (EOF or reset).
    Eof,
    /// The host sent something the controller framer rejects.
    Error(FramerError),
}

/// SGL1 of an SQE, as bytes.
pub fn sgl1(sqe: &[u8; SQE_LEN]) -> [u8; SGL_DESC_LEN] {
    let mut out = [0u8; SGL_DESC_LEN];
    let d = Sqe::new_unchecked(&sqe[..]);
    if let Some(s) = d.dptr().get(..SGL_DESC_LEN) {
        out.copy_from_slice(s);
    }
    out
}

/// The command identifier of an SQE.
pub fn sqe_cid(sqe: &[u8; SQE_LEN]) -> u16 {
    Sqe::new_unchecked(&sqe[..]).cid()
}

/// Waits for a script started by [`RawCtrl::spawn`]; its panic (a failed assertion
/// on what the host sent) becomes the caller's.
pub fn join(script: JoinHandle<()>) {
    if let Err(e) = script.join() {
        std::panic::resume_unwind(e);
    }
}

/// The controller end of one connection.
pub struct RawCtrl {
    sock: TcpStream,
    reader: PduReader,
    writer: PduWriter,
    icreq: IcReqParams,
    rx: Vec<u8>,
    pos: usize,
}

impl RawCtrl {
    /// A listener on 127.0.0.1 whose first connection runs `script` in a thread
    /// (after the ICReq is answered).
    pub fn spawn(
        cfg: ControllerConfig,
        script: impl FnOnce(RawCtrl) + Send + 'static,
    ) -> (SocketAddr, JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let h = thread::spawn(move || script(RawCtrl::accept(&l, cfg)));
        (addr, h)
    }

    /// Accepts a connection and answers its ICReq.
    pub fn accept(l: &TcpListener, cfg: ControllerConfig) -> RawCtrl {
        let (sock, _) = l.accept().unwrap_or_else(|e| panic!("accept: {e}"));
        RawCtrl::from_stream(sock, cfg)
    }

    /// Answers the ICReq on an accepted connection.
    pub fn from_stream(sock: TcpStream, cfg: ControllerConfig) -> RawCtrl {
        sock.set_read_timeout(Some(CTRL_TIMEOUT))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut c = RawCtrl {
            sock,
            reader: PduReader::controller(cfg).unwrap_or_else(|e| panic!("{e}")),
            // Replaced once the ICReq is in.
            writer: PduWriter::new(
                Role::Controller,
                &Negotiated {
                    header_digest: false,
                    data_digest: false,
                    hpda: 0,
                    cpda: 0,
                    maxh2cdata: 4096,
                    maxr2t: 0,
                },
            ),
            icreq: IcReqParams {
                pfv: 0xFFFF,
                hpda: 0,
                digest: 0,
                maxr2t: 0,
            },
            rx: Vec::new(),
            pos: 0,
        };
        loop {
            assert!(c.fill(), "closed before the ICReq");
            let n = c
                .reader
                .feed(c.rx.get(c.pos..).unwrap_or(&[]))
                .unwrap_or_else(|e| panic!("ICReq: {e}"));
            c.pos += n;
            match c.reader.poll() {
                None => continue,
                Some(Ok(Pdu::IcReq(p))) => {
                    c.icreq = p;
                    break;
                }
                other => panic!("expected ICReq, got {other:?}"),
            }
        }
        let n = c
            .reader
            .negotiated()
            .unwrap_or_else(|| panic!("ICReq without parameters"));
        c.writer = PduWriter::new(Role::Controller, &n);
        let mut b = Vec::new();
        encode_icresp(&icresp_params(&n), &mut b);
        c.send(&b);
        c
    }

    /// The host's ICReq.
    pub fn icreq(&self) -> IcReqParams {
        self.icreq
    }

    /// Waits for the host without a deadline from now on (a bridge serving a real host,
    /// which may stay idle as long as it likes).
    pub fn wait_forever(&self) {
        self.sock
            .set_read_timeout(None)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The controller's PDU writer (for PDUs to corrupt before sending).
    pub fn writer(&self) -> PduWriter {
        self.writer
    }

    /// Reads more bytes into `rx` when it is used up; false at the end of the stream.
    fn fill(&mut self) -> bool {
        if self.pos < self.rx.len() {
            return true;
        }
        let mut b = vec![0u8; 256 * 1024];
        let n = match self.sock.read(&mut b) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => 0,
            Err(e) => panic!("controller read: {e}"),
        };
        b.truncate(n);
        self.rx = b;
        self.pos = 0;
        n > 0
    }

    /// The next PDU from the host, owned.
    pub fn recv(&mut self) -> Got {
        loop {
            if !self.fill() {
                return Got::Eof;
            }
            match self.reader.feed(self.rx.get(self.pos..).unwrap_or(&[])) {
                Ok(n) => self.pos += n,
                Err(e) => return Got::Error(e),
            }
            return match self.reader.poll() {
                None => continue,
                Some(Err(e)) => Got::Error(e),
                Some(Ok(Pdu::CapsuleCmd { sqe, data })) => Got::Cmd {
                    sqe: *sqe,
                    data: data.to_vec(),
                },
                Some(Ok(Pdu::H2CData {
                    cid,
                    ttag,
                    datao,
                    last,
                    data,
                    ..
                })) => Got::H2C {
                    cid,
                    ttag,
                    datao,
                    last,
                    data: data.to_vec(),
                },
                Some(Ok(Pdu::H2CTermReq { fes, fei, data })) => Got::Term {
                    fes,
                    fei,
                    hdr: data.to_vec(),
                },
                Some(Ok(other)) => panic!("a host sent controller-to-host PDU {other:?}"),
            };
        }
    }

    /// The next PDU, which must be a CapsuleCmd: its SQE and in-capsule data.
    pub fn cmd(&mut self) -> ([u8; SQE_LEN], Vec<u8>) {
        match self.recv() {
            Got::Cmd { sqe, data } => (sqe, data),
            other => panic!("expected CapsuleCmd, got {other:?}"),
        }
    }

    /// Every PDU until the host closes, the close (`Got::Eof`) included.
    pub fn rest(&mut self) -> Vec<Got> {
        let mut after = Vec::new();
        loop {
            let g = self.recv();
            let end = g == Got::Eof;
            after.push(g);
            if end {
                return after;
            }
        }
    }

    /// Sends bytes as they are.
    pub fn send(&mut self, b: &[u8]) {
        self.sock
            .write_all(b)
            .unwrap_or_else(|e| panic!("controller write: {e}"));
    }

    /// Closes the write half (the host sees EOF).
    pub fn shutdown_write(&self) {
        self.sock
            .shutdown(Shutdown::Write)
            .unwrap_or_else(|e| panic!("shutdown: {e}"));
    }

    /// Sends a CapsuleResp for `cid` with `status`, `dw0` and SQHD 3.
    pub fn resp(&mut self, cid: u16, status: Status, dw0: u32) {
        let mut c = Cqe::new_unchecked([0u8; CQE_LEN]);
        c.set_cid(cid);
        c.set_status(status);
        c.set_dw0(dw0);
        c.set_sqhd(3);
        self.resp_cqe(&c.into_inner());
    }

    /// Sends a CapsuleResp carrying `cqe` as it is.
    pub fn resp_cqe(&mut self, cqe: &[u8; CQE_LEN]) {
        let mut b = Vec::new();
        self.writer
            .capsule_resp(cqe, &mut b)
            .unwrap_or_else(|e| panic!("encode CapsuleResp: {e}"));
        self.send(&b);
    }

    /// Sends a C2HData PDU.
    pub fn c2h(&mut self, cid: u16, datao: u32, data: &[u8], last: bool, success: bool) {
        let mut b = Vec::new();
        self.writer
            .c2h_data(cid, datao, data, last, success, &mut b)
            .unwrap_or_else(|e| panic!("encode C2HData: {e}"));
        self.send(&b);
    }

    /// Sends an R2T.
    pub fn r2t(&mut self, cid: u16, ttag: u16, offset: u32, length: u32) {
        let mut b = Vec::new();
        self.writer
            .r2t(cid, ttag, offset, length, &mut b)
            .unwrap_or_else(|e| panic!("encode R2T: {e}"));
        self.send(&b);
    }
}
