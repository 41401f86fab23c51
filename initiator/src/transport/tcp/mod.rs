//! NVMe/TCP, host side, on a std `TcpStream` around the sans-IO PDU framer
//! ([`nvmf_common::transport::tcp`]).
//!
//! One TCP connection per queue. Connecting sends an ICReq (PFV 0, HPDA 0, the
//! digests asked for, MAXR2T 0: one R2T at a time per command, as Linux) and checks the
//! ICResp; then the socket goes non-blocking and the queue is driven by
//! [`HostQueue::submit`] / [`HostQueue::flush`] / [`HostQueue::poll`]:
//!
//! - A command without data carries a zero-length Transport SGL Data Block (Linux
//!   `nvme_tcp_set_sg_null`). Write data that fits the queue's in-capsule size follows
//!   the SQE in the CapsuleCmd (`in_capsule(0, len)`); the admin queue accepts
//!   [`NVME_TCP_ADMIN_CCSZ`] bytes even before Identify (the Connect data goes in the
//!   capsule), as Linux does. Larger writes and every read carry a Transport SGL Data
//!   Block (`transport(len)`): the controller asks for write data with R2Ts, answered
//!   with H2CData PDUs of at most MAXH2CDATA bytes each, and sends read data in
//!   C2HData PDUs.
//! - PDUs to send are encoded into one output buffer; `flush` (and every `poll`)
//!   writes as much of it as the socket takes and keeps the rest.
//! - `poll` reads what the socket has, feeds the framer and handles every PDU: R2T,
//!   C2HData (copied into the command's buffer at DATAO, bounds-checked; with SUCCESS
//!   the completion is synthesised, no CapsuleResp follows), CapsuleResp, C2HTermReq.
//! - A C2HData PDU whose data digest fails fails its command with Data Transfer Error
//!   (its data is not copied) and the queue goes on, as the Linux host does.
//! - Anything else the controller gets wrong (a PDU the framer rejects, data or an
//!   R2T for a command id that has none outstanding or outside the command's buffer,
//!   a C2HTermReq, the connection closing) ends the queue: an H2CTermReq is sent when
//!   the specification calls for one, the socket is closed, and this call and every
//!   later one return [`TransportError::Dead`] with the reason.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use tracing::{debug, warn};

use nvmf_common::transport::tcp::negotiate::{icreq_params, MAX_PDU_DATA};
use nvmf_common::transport::tcp::{
    encode_icreq, encode_term_req, DataProgress, FramerError, HostConfig, Negotiated, Pdu,
    PduReader, PduWriter, Role,
};
use nvmf_common::types::Qid;
use nvmf_common::verbs::DmaBuffer;
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::offset as sqe_offset;
use nvmf_common::wire::status::{generic, Status};
use nvmf_common::wire::tcp::{
    flags, offset, pdu_type, pdu_type_name, term_fes, term_fes_name, MAX_TERM_DATA,
    NVME_TCP_ADMIN_CCSZ,
};

use super::{DataDir, Fabric, HostQueue, IoBuf, QueueParams, TransportError};

#[cfg(test)]
mod tests;

/// Byte range of DPTR (SGL1) in the SQE.
const DPTR: std::ops::Range<usize> = sqe_offset::DPTR as usize..sqe_offset::DPTR as usize + 16;
/// Bytes read from the socket at a time.
const RX_CHUNK: usize = 128 * 1024;
/// C2HData still missing at least this many bytes is received straight into its
/// command's buffer instead of through the receive buffer and the framer.
const DIRECT_MIN: usize = 16 * 1024;
/// Bytes read into the receive buffer after a large C2HData PDU: the next PDUs'
/// headers, not the next PDU's data (which then goes straight into its buffer).
const SMALL_RX: usize = 256;
/// Socket reads per `poll` at most, so one busy queue cannot hold its caller forever.
const READS_PER_POLL: usize = 16;
/// Written bytes after which the output buffer is compacted (when more than half of
/// it has been written).
const OUT_COMPACT: usize = 1024 * 1024;
/// How long a dying queue tries to get its termination request out.
const TERM_SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// The status a command gets when its read data failed the data digest (Linux
/// `NVME_SC_DATA_XFER_ERROR`).
pub const DATA_DIGEST_STATUS: Status = Status::generic(generic::DATA_TRANSFER_ERROR);

/// NVMe/TCP connection options (nvme-cli `--hdr-digest`, `--data-digest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpOptions {
    /// Ask for header digests (CRC32C) on every queue.
    pub hdr_digest: bool,
    /// Ask for data digests (CRC32C) on every queue.
    pub data_digest: bool,
    /// The largest C2HData PDU accepted. Controllers such as Linux nvmet send a read's
    /// whole transfer in one PDU, so this must cover the largest read. The framer
    /// buffers one whole PDU per queue; the buffer is zero-allocated, so pages are only
    /// committed when a PDU that large arrives. At most 16 MiB.
    pub max_c2h_data: u32,
}

impl Default for TcpOptions {
    /// No digests; C2HData PDUs up to the framer's 16 MiB limit.
    fn default() -> Self {
        TcpOptions {
            hdr_digest: false,
            data_digest: false,
            max_c2h_data: MAX_PDU_DATA,
        }
    }
}

/// An NVMe/TCP fabric endpoint: one target address.
#[derive(Debug, Clone)]
pub struct TcpFabric {
    addr: SocketAddr,
    opts: TcpOptions,
}

impl TcpFabric {
    /// A fabric to the controller at `addr` (port 4420 for I/O, 8009 for discovery).
    pub fn new(addr: SocketAddr, opts: TcpOptions) -> Self {
        TcpFabric { addr, opts }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn options(&self) -> TcpOptions {
        self.opts
    }

    /// Connects one queue (what [`Fabric::connect_queue`] does, with the concrete type).
    pub fn connect(&self, p: &QueueParams) -> Result<TcpHostQueue, TransportError> {
        TcpHostQueue::connect(self, p)
    }
}

impl Fabric for TcpFabric {
    fn connect_queue(&self, p: &QueueParams) -> Result<Box<dyn HostQueue>, TransportError> {
        Ok(Box::new(self.connect(p)?))
    }

    fn alloc(&self, len: usize) -> Result<IoBuf, TransportError> {
        let buf = DmaBuffer::new(len)
            .ok_or_else(|| TransportError::Invalid(format!("cannot allocate {len} bytes")))?;
        Ok(IoBuf {
            buf: std::sync::Arc::new(buf),
            mr: None,
            offset: 0,
            len,
        })
    }

    fn name(&self) -> &'static str {
        "tcp"
    }

    fn keyed_sgls(&self) -> bool {
        false
    }
}

/// One outstanding command.
struct Cmd {
    /// The caller's buffer, kept until the command completes.
    buf: Option<IoBuf>,
    dir: DataDir,
    /// Bytes described by SGL1.
    len: u32,
    /// The write data went in the capsule (no R2T expected).
    in_capsule: bool,
    /// Write data asked for by R2Ts so far (the end of the last R2T).
    r2t_end: u32,
    /// The status the command completes with whatever the controller says (a data
    /// digest error on its read data).
    failed: Option<Status>,
}

/// A fatal error: why, and the termination request to send (FES, FEI) if any.
struct Fatal {
    reason: String,
    term: Option<(u16, u32)>,
}

impl Fatal {
    fn new(reason: String, fes: u16, fei: u32) -> Self {
        Fatal {
            reason,
            term: Some((fes, fei)),
        }
    }

    fn quiet(reason: String) -> Self {
        Fatal { reason, term: None }
    }
}

/// The connection state the PDU handlers work on (everything but the socket and the
/// reader, so a PDU borrowed from the reader can be handled).
struct Conn {
    qid: Qid,
    writer: PduWriter,
    maxh2cdata: u32,
    slots: Vec<Option<Cmd>>,
    /// Encoded PDUs; `out[out_pos..]` is still to be written.
    out: Vec<u8>,
    out_pos: usize,
    /// Completions ready for the caller.
    cqes: Vec<[u8; CQE_LEN]>,
    /// The first bytes of the PDU being read: its header, echoed in a termination
    /// request, and its flags when the framer reports a data digest error.
    peek: [u8; MAX_TERM_DATA],
    peek_len: usize,
    /// The C2HData PDU being read is being received straight into its command's
    /// buffer; the first this many of its data bytes went to the framer.
    direct: Option<usize>,
    /// The last C2HData PDU was received that way (see `SMALL_RX`).
    large_data: bool,
}

/// One NVMe/TCP queue (one TCP connection).
pub struct TcpHostQueue {
    qid: Qid,
    depth: u16,
    icd: u32,
    peer: SocketAddr,
    sock: TcpStream,
    reader: PduReader,
    negotiated: Negotiated,
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    conn: Conn,
    dead: Option<String>,
}

fn io_connect_err(addr: SocketAddr, e: std::io::Error) -> TransportError {
    match e.kind() {
        ErrorKind::ConnectionRefused => {
            TransportError::Refused(format!("{addr}: connection refused"))
        }
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            TransportError::Timeout(format!("TCP connect to {addr}"))
        }
        _ => TransportError::Other(format!("TCP connect to {addr}: {e}")),
    }
}

fn remaining(deadline: Instant, addr: SocketAddr) -> Result<Duration, TransportError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(TransportError::Timeout(format!(
            "no ICResp from {addr} in time"
        )))
    } else {
        Ok(left)
    }
}

/// Describes a termination request from the controller.
fn describe_term(fes: u16, fei: u32) -> String {
    format!(
        "controller terminated the connection (C2HTermReq): {} (FES {fes:#x}, FEI {fei:#x})",
        term_fes_name(fes)
    )
}

impl TcpHostQueue {
    fn connect(f: &TcpFabric, p: &QueueParams) -> Result<Self, TransportError> {
        let addr = f.addr;
        let depth = p.depth.max(2);
        if p.connect_timeout.is_zero() {
            return Err(TransportError::Invalid(
                "connect timeout must not be zero".into(),
            ));
        }
        let cfg = HostConfig {
            header_digest: f.opts.hdr_digest,
            data_digest: f.opts.data_digest,
            hpda: 0,
            maxr2t: 0,
            max_c2h_data: f.opts.max_c2h_data,
        };
        let mut reader =
            PduReader::host(cfg).map_err(|e| TransportError::Invalid(format!("NVMe/TCP: {e}")))?;
        let deadline = Instant::now() + p.connect_timeout;
        let mut sock = TcpStream::connect_timeout(&addr, p.connect_timeout)
            .map_err(|e| io_connect_err(addr, e))?;
        let sockerr = |what: &str, e: std::io::Error| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => TransportError::Timeout(format!(
                "no ICResp from {addr} within {:?}",
                p.connect_timeout
            )),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                TransportError::Rejected(format!("{addr} reset the connection ({what})"))
            }
            _ => TransportError::Other(format!("{addr}: {what}: {e}")),
        };
        sock.set_nodelay(true)
            .map_err(|e| sockerr("TCP_NODELAY", e))?;

        let mut icreq = Vec::with_capacity(128);
        encode_icreq(&icreq_params(&cfg), &mut icreq);
        sock.set_write_timeout(Some(remaining(deadline, addr)?))
            .map_err(|e| sockerr("set write timeout", e))?;
        sock.write_all(&icreq)
            .map_err(|e| sockerr("sending ICReq", e))?;

        // Read until the ICResp is complete; bytes after it stay in `rx` for `poll`.
        let mut rx = vec![0u8; RX_CHUNK].into_boxed_slice();
        let (mut rx_start, mut rx_end) = (0usize, 0usize);
        loop {
            if rx_start == rx_end {
                sock.set_read_timeout(Some(remaining(deadline, addr)?))
                    .map_err(|e| sockerr("set read timeout", e))?;
                let n = match sock.read(&mut rx) {
                    Ok(0) => {
                        return Err(TransportError::Rejected(format!(
                            "{addr} closed the connection instead of answering the ICReq"
                        )))
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(sockerr("reading ICResp", e)),
                };
                (rx_start, rx_end) = (0, n);
            }
            let input = rx.get(rx_start..rx_end).unwrap_or(&[]);
            match reader.feed(input) {
                Ok(n) => rx_start += n,
                Err(e) => return Err(icresp_failed(&mut sock, &reader, addr, e)),
            }
            match reader.poll() {
                None => continue,
                Some(Ok(Pdu::IcResp(_))) => break,
                Some(Ok(Pdu::C2HTermReq { fes, fei, .. })) => {
                    let _ = sock.shutdown(Shutdown::Both);
                    return Err(TransportError::Rejected(format!(
                        "{addr}: {}",
                        describe_term(fes, fei)
                    )));
                }
                Some(Ok(other)) => {
                    // The framer lets nothing but an ICResp or a termination request
                    // through before initialization.
                    let t = other.pdu_type();
                    let _ = sock.shutdown(Shutdown::Both);
                    return Err(TransportError::Rejected(format!(
                        "{addr}: {} instead of ICResp",
                        pdu_type_name(t)
                    )));
                }
                Some(Err(e)) => return Err(icresp_failed(&mut sock, &reader, addr, e)),
            }
        }
        let negotiated = reader
            .negotiated()
            .ok_or_else(|| TransportError::Other("ICResp accepted but not recorded".into()))?;
        sock.set_read_timeout(None)
            .and_then(|()| sock.set_write_timeout(None))
            .and_then(|()| sock.set_nonblocking(true))
            .map_err(|e| sockerr("set non-blocking", e))?;
        let icd = if p.qid.is_admin() {
            p.in_capsule_data.max(NVME_TCP_ADMIN_CCSZ as u32)
        } else {
            p.in_capsule_data
        };
        debug!(qid = %p.qid, depth, %addr, icd,
            hdgst = negotiated.header_digest, ddgst = negotiated.data_digest,
            cpda = negotiated.cpda, maxh2cdata = negotiated.maxh2cdata,
            "NVMe/TCP queue connected");
        let mut slots = Vec::with_capacity(usize::from(depth));
        slots.resize_with(usize::from(depth), || None);
        Ok(TcpHostQueue {
            qid: p.qid,
            depth,
            icd,
            peer: addr,
            sock,
            reader,
            negotiated,
            rx,
            rx_start,
            rx_end,
            conn: Conn {
                qid: p.qid,
                writer: PduWriter::new(Role::Host, &negotiated),
                maxh2cdata: negotiated.maxh2cdata,
                slots,
                out: Vec::with_capacity(64 * 1024),
                out_pos: 0,
                cqes: Vec::with_capacity(usize::from(depth)),
                peek: [0u8; MAX_TERM_DATA],
                peek_len: 0,
                direct: None,
                large_data: false,
            },
            dead: None,
        })
    }

    /// What the ICReq/ICResp exchange settled.
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// Bytes of write data this queue sends in the capsule.
    pub fn in_capsule_data(&self) -> u32 {
        self.icd
    }

    /// Encoded bytes not yet taken by the socket.
    pub fn pending_output(&self) -> usize {
        self.conn.out.len() - self.conn.out_pos
    }

    fn check(&self) -> Result<(), TransportError> {
        match &self.dead {
            Some(why) => Err(TransportError::Dead(why.clone())),
            None => Ok(()),
        }
    }

    /// Ends the queue: sends the termination request if there is one (after what is
    /// already queued, so the controller's framer sees whole PDUs), closes the socket,
    /// and remembers why.
    fn die(&mut self, f: Fatal) -> TransportError {
        let why = f.reason;
        warn!(qid = %self.qid, peer = %self.peer, "NVMe/TCP queue failed: {why}");
        if let Some((fes, fei)) = f.term {
            let hdr = self.conn.peek_header();
            let mut term = Vec::new();
            encode_term_req(Role::Host, fes, fei, hdr, &mut term);
            self.conn.out.extend_from_slice(&term);
            let rest = self.conn.out.get(self.conn.out_pos..).unwrap_or(&[]);
            let _ = self
                .sock
                .set_nonblocking(false)
                .and_then(|()| self.sock.set_write_timeout(Some(TERM_SEND_TIMEOUT)))
                .and_then(|()| self.sock.write_all(rest));
        }
        let _ = self.sock.shutdown(Shutdown::Both);
        self.conn.out.clear();
        self.conn.out_pos = 0;
        self.dead = Some(why.clone());
        TransportError::Dead(why)
    }

    /// A framer error: fatal ones end the queue (with the termination request the
    /// framer prepared); a data digest error fails its command.
    fn framer_error(&mut self, e: FramerError) -> Result<(), Fatal> {
        if let FramerError::DataDigest {
            pdu_type: t, cid, ..
        } = e
        {
            if t == pdu_type::C2H_DATA {
                return self.conn.on_data_digest_error(cid, &e);
            }
        }
        let mut term = Vec::new();
        let sent = self.reader.termination_request(&mut term);
        let reason = format!("invalid PDU from the controller: {e}");
        if sent {
            // The framer built it from the header it rejected; queue it as is.
            self.conn.out.extend_from_slice(&term);
            self.write_out_best_effort();
        }
        Err(Fatal::quiet(reason))
    }

    fn write_out_best_effort(&mut self) {
        let rest = self.conn.out.get(self.conn.out_pos..).unwrap_or(&[]);
        let _ = self
            .sock
            .set_nonblocking(false)
            .and_then(|()| self.sock.set_write_timeout(Some(TERM_SEND_TIMEOUT)))
            .and_then(|()| self.sock.write_all(rest));
        self.conn.out.clear();
        self.conn.out_pos = 0;
    }

    /// Writes queued PDUs until the socket would block.
    fn write_out(&mut self) -> Result<(), Fatal> {
        let c = &mut self.conn;
        while c.out_pos < c.out.len() {
            let rest = c.out.get(c.out_pos..).unwrap_or(&[]);
            match self.sock.write(rest) {
                Ok(0) => return Err(Fatal::quiet("the connection takes no more data".into())),
                Ok(n) => c.out_pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fatal::quiet(format!("send failed: {e}"))),
            }
        }
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
        } else if c.out_pos >= OUT_COMPACT && c.out_pos * 2 >= c.out.len() {
            c.out.drain(..c.out_pos);
            c.out_pos = 0;
        }
        Ok(())
    }

    /// Reads and handles what the socket has.
    fn read_in(&mut self) -> Result<(), Fatal> {
        let mut reads = 0;
        // The last read took what the socket had.
        let mut drained = false;
        loop {
            // Hand every complete PDU in `rx` to the handlers. A PDU that lies whole
            // in `rx` is handled where it is; the data of a larger C2HData PDU is
            // copied from `rx` straight into its command's buffer.
            while self.rx_start < self.rx_end {
                let input = self.rx.get(self.rx_start..self.rx_end).unwrap_or(&[]);
                let progress = self.reader.data_in_progress();
                if let Some(d) = progress {
                    if let Some(dst) = self.conn.direct_dst(&d, 0) {
                        let n = dst.len().min(input.len());
                        if let (Some(to), Some(from)) = (dst.get_mut(..n), input.get(..n)) {
                            to.copy_from_slice(from);
                        }
                        self.conn.direct.get_or_insert(d.received);
                        self.reader.skip_data(n);
                        self.rx_start += n;
                        self.take_ready()?;
                        continue;
                    }
                }
                let (n, out) = if progress.is_some() {
                    // Not for a buffer of ours: the ordinary path reports it.
                    self.reader.read(input)
                } else {
                    self.reader.read_to_data(input)
                };
                self.conn.peek_extend(input.get(..n).unwrap_or(&[]));
                self.rx_start += n;
                let r = match out {
                    // Stopped at the start of data (see above), or all consumed.
                    None if n > 0 => continue,
                    None => break,
                    Some(Ok(pdu)) => self.conn.on_pdu(pdu),
                    Some(Err(e)) => {
                        let r = self.framer_error(e);
                        self.conn.peek_len = 0;
                        r
                    }
                };
                r?;
                self.conn.peek_len = 0;
            }
            // Another read would most likely find nothing (one system call saved).
            if reads >= READS_PER_POLL || drained {
                return Ok(());
            }
            self.rx_start = 0;
            self.rx_end = 0;
            // The rest of a large C2HData PDU goes straight into its command's buffer.
            if let Some(d) = self.reader.data_in_progress() {
                if let Some(dst) = self.conn.direct_dst(&d, DIRECT_MIN) {
                    let want = dst.len();
                    match self.sock.read(dst) {
                        Ok(0) => {
                            return Err(Fatal::quiet(
                                "the controller closed the connection in the middle of a PDU"
                                    .into(),
                            ))
                        }
                        Ok(n) => {
                            reads += 1;
                            drained = n < want;
                            self.conn.direct.get_or_insert(d.received);
                            self.reader.skip_data(n);
                            self.take_ready()?;
                            continue;
                        }
                        Err(e) => return self.read_error(e),
                    }
                }
            }
            // After a large C2HData PDU another is likely: read little, so that its
            // data goes straight into its buffer rather than through `rx`.
            let cap = if self.conn.large_data {
                SMALL_RX
            } else {
                self.rx.len()
            };
            match self.sock.read(self.rx.get_mut(..cap).unwrap_or(&mut [])) {
                Ok(0) => {
                    let mid = if self.reader.has_partial_pdu() {
                        " in the middle of a PDU"
                    } else {
                        ""
                    };
                    return Err(Fatal::quiet(format!(
                        "the controller closed the connection{mid}"
                    )));
                }
                Ok(n) => {
                    self.rx_end = n;
                    reads += 1;
                    drained = n < cap;
                }
                Err(e) => return self.read_error(e),
            }
        }
    }

    /// Handles the PDU that data skipped in the framer completed, if it did.
    fn take_ready(&mut self) -> Result<(), Fatal> {
        let (_, out) = self.reader.read(&[]);
        let r = match out {
            None => return Ok(()),
            Some(Ok(pdu)) => self.conn.on_pdu(pdu),
            Some(Err(e)) => self.framer_error(e),
        };
        self.conn.peek_len = 0;
        r
    }

    /// A failed socket read: nothing to read (or interrupted) is not an error.
    fn read_error(&self, e: std::io::Error) -> Result<(), Fatal> {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::Interrupted => Ok(()),
            ErrorKind::ConnectionReset => {
                Err(Fatal::quiet("the controller reset the connection".into()))
            }
            _ => Err(Fatal::quiet(format!("receive failed: {e}"))),
        }
    }
}

/// Connect-time failure of the ICResp: send the termination request the framer
/// prepared (if any), close, and say why.
fn icresp_failed(
    sock: &mut TcpStream,
    reader: &PduReader,
    addr: SocketAddr,
    e: FramerError,
) -> TransportError {
    let mut term = Vec::new();
    if reader.termination_request(&mut term) {
        let _ = sock.write_all(&term);
    }
    let _ = sock.shutdown(Shutdown::Both);
    TransportError::Rejected(format!("{addr}: invalid ICResp: {e}"))
}

impl Conn {
    fn peek_extend(&mut self, bytes: &[u8]) {
        let room = MAX_TERM_DATA - self.peek_len.min(MAX_TERM_DATA);
        let n = room.min(bytes.len());
        if let (Some(dst), Some(src)) = (
            self.peek.get_mut(self.peek_len..self.peek_len + n),
            bytes.get(..n),
        ) {
            dst.copy_from_slice(src);
            self.peek_len += n;
        }
    }

    /// The received header of the current PDU (`hlen` bytes when that many are in).
    fn peek_header(&self) -> &[u8] {
        let hlen = self
            .peek
            .get(offset::HLEN as usize)
            .map_or(0, |&h| usize::from(h));
        self.peek.get(..hlen.min(self.peek_len)).unwrap_or(&[])
    }

    /// Where the rest of the C2HData PDU `d` goes when it is put straight into its
    /// command's buffer: when at least `min` bytes are missing (or the PDU is already
    /// being received this way) and the
    /// PDU fits a read command that has not failed (anything else takes the ordinary
    /// path, which reports what is wrong).
    fn direct_dst(&mut self, d: &DataProgress, min: usize) -> Option<&mut [u8]> {
        let missing = d.len.checked_sub(d.received)?;
        // Once started, the whole rest of the PDU's data goes this way (the handler
        // copies only the bytes the framer got first).
        if missing < min && self.direct.is_none() {
            return None;
        }
        let cmd = self.slots.get(usize::from(d.cid))?.as_ref()?;
        let end = (d.datao as usize).checked_add(d.len)?;
        if cmd.dir != DataDir::FromCtrl || cmd.failed.is_some() || end > cmd.len as usize {
            return None;
        }
        let buf = cmd.buf.as_ref()?;
        if end > buf.len {
            return None;
        }
        let at = buf.offset + d.datao as usize + d.received;
        // SAFETY: a read command's buffer belongs to the transport until the command
        // completes: the caller does not touch it and nothing else writes it (TCP has
        // no DMA). The range lies inside the buffer (checked above and by
        // `slice_mut`), and the borrow ends with the socket read into it.
        unsafe { buf.buf.slice_mut(at, missing) }
    }

    fn slot(&mut self, cid: u16) -> Option<&mut Cmd> {
        self.slots
            .get_mut(usize::from(cid))
            .and_then(Option::as_mut)
    }

    fn complete(&mut self, cid: u16, status: Status) {
        let mut c = Cqe::new_unchecked([0u8; CQE_LEN]);
        c.set_cid(cid);
        c.set_sqid(self.qid.0);
        c.set_status(status);
        self.cqes.push(c.into_inner());
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            *s = None;
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<'_>) -> Result<(), Fatal> {
        let direct = self.direct.take();
        match pdu {
            Pdu::CapsuleResp { cqe } => {
                self.on_resp(cqe);
                Ok(())
            }
            Pdu::C2HData {
                cid,
                datao,
                success,
                data,
                ..
            } => self.on_c2h_data(cid, datao, success, data, direct),
            Pdu::R2T {
                cid,
                ttag,
                offset,
                length,
            } => self.on_r2t(cid, ttag, offset, length),
            Pdu::C2HTermReq { fes, fei, .. } => Err(Fatal::quiet(describe_term(fes, fei))),
            other => Err(Fatal::new(
                format!(
                    "unexpected {} PDU from the controller",
                    pdu_type_name(other.pdu_type())
                ),
                term_fes::PDU_SEQUENCE_ERROR,
                0,
            )),
        }
    }

    fn on_resp(&mut self, cqe: [u8; CQE_LEN]) {
        let mut cqe = cqe;
        let cid = Cqe::new_unchecked(&cqe[..]).cid();
        // An unknown cid goes up as is: the queue layer reports it.
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            if let Some(cmd) = s.take() {
                if let Some(st) = cmd.failed {
                    let mut c = Cqe::new_unchecked(&mut cqe[..]);
                    c.set_status(st);
                }
            }
        }
        self.cqes.push(cqe);
    }

    fn on_c2h_data(
        &mut self,
        cid: u16,
        datao: u32,
        success: bool,
        data: &[u8],
        direct: Option<usize>,
    ) -> Result<(), Fatal> {
        self.large_data = direct.is_some() && data.len() >= DIRECT_MIN;
        let Some(cmd) = self.slot(cid) else {
            return Err(Fatal::new(
                format!(
                    "C2HData for command id {cid}, which is not outstanding (unknown command id)"
                ),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        let buf = match (&cmd.buf, cmd.dir) {
            (Some(b), DataDir::FromCtrl) => b,
            _ => {
                return Err(Fatal::new(
                    format!("C2HData for command id {cid}, which reads no data"),
                    term_fes::INVALID_HEADER_FIELD,
                    offset::COMMAND_ID,
                ))
            }
        };
        let end = u64::from(datao) + data.len() as u64;
        if end > u64::from(cmd.len) {
            return Err(Fatal::new(
                format!(
                    "C2HData for command id {cid} at bytes {datao}..{end}, beyond its {}-byte buffer",
                    cmd.len
                ),
                term_fes::DATA_OUT_OF_RANGE,
                0,
            ));
        }
        // Data received straight into the buffer (see `direct_dst`) is there already,
        // all but the first bytes, which the framer holds.
        let data = match direct {
            Some(k) => data.get(..k).unwrap_or(data),
            None => data,
        };
        if cmd.failed.is_none() && !buf.write_at(datao as usize, data) {
            return Err(Fatal::quiet(format!(
                "C2HData for command id {cid}: cannot copy {} bytes at {datao} into its buffer",
                data.len()
            )));
        }
        if success {
            let st = cmd.failed.unwrap_or(Status::SUCCESS);
            self.complete(cid, st);
        }
        Ok(())
    }

    /// A C2HData PDU failed its data digest: its data is dropped and the command
    /// fails with Data Transfer Error (now if the PDU said SUCCESS, else with the
    /// CapsuleResp that follows).
    fn on_data_digest_error(&mut self, cid: u16, e: &FramerError) -> Result<(), Fatal> {
        let fl = self.peek.get(offset::FLAGS as usize).copied().unwrap_or(0);
        let qid = self.qid;
        let Some(cmd) = self.slot(cid) else {
            return Err(Fatal::new(
                format!("C2HData for command id {cid}, which is not outstanding (unknown command id), with {e}"),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        if cmd.dir != DataDir::FromCtrl {
            return Err(Fatal::new(
                format!("C2HData for command id {cid}, which reads no data"),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        }
        warn!(%qid, cid, "{e}: the command fails with Data Transfer Error");
        cmd.failed = Some(DATA_DIGEST_STATUS);
        if fl & flags::DATA_SUCCESS != 0 {
            self.complete(cid, DATA_DIGEST_STATUS);
        }
        Ok(())
    }

    fn on_r2t(&mut self, cid: u16, ttag: u16, r2to: u32, r2tl: u32) -> Result<(), Fatal> {
        let maxh2cdata = self.maxh2cdata.max(1);
        let Some(cmd) = self
            .slots
            .get_mut(usize::from(cid))
            .and_then(Option::as_mut)
        else {
            return Err(Fatal::new(
                format!("R2T for command id {cid}, which is not outstanding (unknown command id)"),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        let buf = match (&cmd.buf, cmd.dir, cmd.in_capsule) {
            (Some(b), DataDir::ToCtrl, false) => b.clone(),
            _ => {
                return Err(Fatal::new(
                    format!("R2T for command id {cid}, which has no data to transfer by R2T"),
                    term_fes::INVALID_HEADER_FIELD,
                    offset::COMMAND_ID,
                ))
            }
        };
        if r2tl == 0 {
            return Err(Fatal::new(
                format!("R2T of 0 bytes for command id {cid}"),
                term_fes::INVALID_HEADER_FIELD,
                offset::R2T_LENGTH,
            ));
        }
        if r2to < cmd.r2t_end {
            return Err(Fatal::new(
                format!(
                    "R2T for command id {cid} at offset {r2to}, but {} bytes were already asked for",
                    cmd.r2t_end
                ),
                term_fes::INVALID_HEADER_FIELD,
                offset::R2T_OFFSET,
            ));
        }
        let end = u64::from(r2to) + u64::from(r2tl);
        if end > u64::from(cmd.len) {
            return Err(Fatal::new(
                format!(
                    "R2T for command id {cid} asks for bytes {r2to}..{end}, beyond its {} bytes of data",
                    cmd.len
                ),
                term_fes::DATA_OUT_OF_RANGE,
                offset::R2T_LENGTH,
            ));
        }
        cmd.r2t_end = r2to + r2tl;
        // SAFETY: the caller does not write a write command's buffer until the command
        // completes, and nothing else writes it (TCP has no DMA); the borrow ends with
        // the copies into H2CData PDUs below.
        let whole = unsafe { buf.buf.slice(buf.offset, buf.len) }.unwrap_or(&[]);
        let mut at = r2to;
        let stop = r2to + r2tl;
        while at < stop {
            let n = (stop - at).min(maxh2cdata);
            let Some(piece) = whole.get(at as usize..(at + n) as usize) else {
                return Err(Fatal::quiet(format!(
                    "R2T for command id {cid}: cannot read bytes {at}..{} of its buffer",
                    at + n
                )));
            };
            let last = at + n == stop;
            self.writer
                .h2c_data(cid, ttag, at, piece, last, &mut self.out)
                .map_err(|e| Fatal::quiet(format!("encoding H2CData: {e}")))?;
            at += n;
        }
        Ok(())
    }
}

impl HostQueue for TcpHostQueue {
    fn qid(&self) -> Qid {
        self.qid
    }

    fn depth(&self) -> u16 {
        self.depth
    }

    fn submit(
        &mut self,
        slot: u16,
        sqe: &[u8; 64],
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<(), TransportError> {
        self.check()?;
        let c = &mut self.conn;
        match c.slots.get(usize::from(slot)) {
            None => {
                return Err(TransportError::Invalid(format!(
                    "slot {slot} >= depth {}",
                    self.depth
                )))
            }
            Some(Some(_)) => {
                return Err(TransportError::Invalid(format!(
                    "slot {slot} already has a command outstanding"
                )))
            }
            Some(None) => {}
        }
        let data = match (data, dir) {
            (Some(b), DataDir::ToCtrl | DataDir::FromCtrl) if b.len > 0 => Some(b),
            _ => None,
        };
        let len = match data {
            Some(b) => u32::try_from(b.len).map_err(|_| {
                TransportError::Invalid(format!("{} bytes do not fit one command", b.len))
            })?,
            None => 0,
        };
        let in_capsule = dir == DataDir::ToCtrl && data.is_some() && len <= self.icd;
        let desc = if in_capsule {
            SglDescriptor::in_capsule(0, len)
        } else {
            // No data: a zero-length transport data block (Linux nvme_tcp_set_sg_null).
            SglDescriptor::transport(len)
        };
        let mut capsule = *sqe;
        let dptr = capsule
            .get_mut(DPTR)
            .ok_or_else(|| TransportError::Invalid("SQE too short".into()))?;
        desc.emit(dptr)
            .map_err(|e| TransportError::Invalid(format!("SGL: {e}")))?;
        let icd_data: &[u8] = match (in_capsule, data) {
            // SAFETY: the caller hands the write buffer to the command and does not
            // write it until the command completes; nothing else writes it (TCP has no
            // DMA). The borrow ends with the copy into the capsule below.
            (true, Some(b)) => unsafe { b.buf.slice(b.offset, b.len) }
                .ok_or_else(|| TransportError::Invalid("cannot read the write buffer".into()))?,
            _ => &[],
        };
        c.writer
            .capsule_cmd(&capsule, icd_data, &mut c.out)
            .map_err(|e| TransportError::Invalid(format!("CapsuleCmd: {e}")))?;
        if let Some(s) = c.slots.get_mut(usize::from(slot)) {
            *s = Some(Cmd {
                buf: data.cloned(),
                dir: if data.is_some() { dir } else { DataDir::None },
                len,
                in_capsule,
                r2t_end: 0,
                failed: None,
            });
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.check()?;
        self.write_out().map_err(|f| self.die(f))
    }

    fn poll(&mut self, out: &mut Vec<[u8; 16]>) -> Result<usize, TransportError> {
        self.check()?;
        let r = self
            .write_out()
            .and_then(|()| self.read_in())
            .and_then(|()| self.write_out());
        let got = self.conn.cqes.len();
        out.append(&mut self.conn.cqes);
        match r {
            Ok(()) => Ok(got),
            Err(f) => Err(self.die(f)),
        }
    }

    fn wait(&mut self, timeout: Duration) {
        if self.dead.is_some() || self.rx_start < self.rx_end || !self.conn.cqes.is_empty() {
            return;
        }
        let mut ev = PollFlags::POLLIN;
        if self.pending_output() > 0 {
            ev |= PollFlags::POLLOUT;
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128);
        let t = PollTimeout::try_from(ms as i32).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.sock.as_fd(), ev)];
        let _ = nix::poll::poll(&mut fds, t);
    }

    fn close(&mut self) {
        if self.dead.is_none() {
            self.dead = Some("closed".into());
        }
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl Drop for TcpHostQueue {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}
