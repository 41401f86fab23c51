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
//!
//! This file holds the options, the fabric, the queue's state and its [`HostQueue`]
//! implementation; `connect` does the ICReq/ICResp exchange, `socket` moves bytes
//! between the socket and the sans-IO [`Connection`], and `pdu` handles the PDUs the controller sends.
//!
//! [`NVME_TCP_ADMIN_CCSZ`]: nvmf_common::wire::tcp::NVME_TCP_ADMIN_CCSZ

use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};

use std::sync::Arc;

use nvmf_common::tls::{ConfiguredPsk, Socket};
use nvmf_common::transport::tcp::negotiate::MAX_PDU_DATA;
use nvmf_common::transport::tcp::{Connection, Negotiated, PduWriter, SendData, SendQueue};
use nvmf_common::transport::tcp::{HostData, HostTransfer, TransferError};
use nvmf_common::types::Qid;
use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::offset as sqe_offset;
use nvmf_common::wire::status::{generic, Status};
use nvmf_common::wire::tcp::term_fes_name;
use nvmf_verbs::DmaBuffer;

use super::{
    poll_timeout, CommandPhase, DataDir, Fabric, HostQueue, IoBuf, QueueParams, TransportError,
    WaitOn,
};

mod connect;
mod pdu;
mod socket;
#[cfg(test)]
mod tests;

/// Byte range of DPTR (SGL1) in the SQE.
const DPTR: std::ops::Range<usize> = sqe_offset::DPTR as usize..sqe_offset::DPTR as usize + 16;
/// Bytes read from the socket at a time.
const RX_CHUNK: usize = 128 * 1024;
/// Socket reads per `poll` at most, so one busy queue cannot hold its caller forever.
const READS_PER_POLL: usize = 16;
/// How long a dying queue tries to get its termination request out.
const TERM_SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// The status a command gets when its read data failed the data digest (Linux
/// `NVME_SC_DATA_XFER_ERROR`).
pub const DATA_DIGEST_STATUS: Status = Status::generic_dnr(generic::DATA_TRANSFER_ERROR);

/// TLS for every queue of a fabric (nvme-cli `--tls --tls-key`): the host's
/// configured PSK and the pair its identity names.
#[derive(Debug, Clone)]
pub struct TlsKey {
    pub psk: ConfiguredPsk,
    pub hostnqn: String,
    pub subnqn: String,
}

impl PartialEq for TlsKey {
    /// Keys are not compared (and never printed): equal names are the same intent.
    fn eq(&self, o: &TlsKey) -> bool {
        self.hostnqn == o.hostnqn && self.subnqn == o.subnqn
    }
}

impl Eq for TlsKey {}

/// NVMe/TCP connection options (nvme-cli `--hdr-digest`, `--data-digest`, `--tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// TLS 1.3 with a pre-shared key before the ICReq (None: plain NVMe/TCP).
    pub tls: Option<Arc<TlsKey>>,
    /// Hand TLS keys to the kernel (kernel TLS) where it has the `tls` module.
    pub ktls: bool,
}

impl Default for TcpOptions {
    /// No digests; C2HData PDUs up to the framer's 16 MiB limit.
    fn default() -> Self {
        TcpOptions {
            hdr_digest: false,
            data_digest: false,
            max_c2h_data: MAX_PDU_DATA,
            tls: None,
            ktls: true,
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
        self.opts.clone()
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
    /// Its data: which way, how much (SGL1), and how far R2Ts or C2HData moved it.
    xfer: HostTransfer,
    /// Where in the send stream (see `Conn::sent`) the last bytes queued for this
    /// command end: its capsule, then the H2CData answering its latest R2T.
    tx_end: u64,
    /// The status the command completes with whatever the controller says (a data
    /// digest error on its read data).
    failed: Option<Status>,
}

impl Cmd {
    /// Where the command is, given the bytes of the send stream written so far (what
    /// [`HostQueue::command_phase`] reports).
    fn phase(&self, sent: u64) -> CommandPhase {
        // (0, 0): no data, or it went in the capsule.
        let (moved, len) = self.xfer.moved();
        if sent < self.tx_end {
            // Written in part: the capsule itself, or the data of an R2T.
            return if moved == 0 {
                CommandPhase::Queued
            } else {
                CommandPhase::DataTransfer
            };
        }
        if moved >= len {
            CommandPhase::AwaitingResponse
        } else if moved == 0 {
            CommandPhase::Sent
        } else {
            CommandPhase::DataTransfer
        }
    }
}

/// A fatal error: why, and the termination request to send (FES, FEI) if any.
struct Fatal {
    reason: String,
    term: Option<(u16, u32)>,
    /// Get what is queued out before closing (a termination request the connection
    /// already queued).
    flush: bool,
}

impl Fatal {
    /// A data or R2T PDU that did not fit its command.
    fn transfer(e: TransferError) -> Self {
        Self::new(e.reason, e.fes, e.fei)
    }

    fn new(reason: String, fes: u16, fei: u32) -> Self {
        Fatal {
            reason,
            term: Some((fes, fei)),
            flush: true,
        }
    }

    fn quiet(reason: String) -> Self {
        Fatal {
            reason,
            term: None,
            flush: false,
        }
    }

    fn flushed(reason: String) -> Self {
        Fatal {
            reason,
            term: None,
            flush: true,
        }
    }
}

/// The queue state the PDU handlers work on (everything but the socket and the
/// connection, so a PDU borrowed from the connection can be handled).
struct Conn {
    qid: Qid,
    writer: PduWriter,
    maxh2cdata: u32,
    slots: Vec<Option<Cmd>>,
    /// Encoded PDUs and write data queued from the command's buffer, to be written.
    tx: SendQueue<WriteData>,
    /// Bytes of the send stream written to the socket so far: with `tx.queued()`, the
    /// position a command's last queued bytes end at (its `tx_end`), so the
    /// stuck-command report can tell a command still waiting to go out.
    sent: u64,
    /// Completions ready for the caller.
    cqes: Vec<[u8; CQE_LEN]>,
}

impl Conn {
    /// Where the send stream ends now: the bytes written plus those queued.
    fn tx_position(&self) -> u64 {
        self.sent + self.tx.queued() as u64
    }
}

/// Write data (H2CData) queued from its command's buffer instead of copied; the
/// `Arc` keeps the memory alive while the segment is queued.
struct WriteData {
    buf: Arc<DmaBuffer>,
    offset: usize,
    len: usize,
}

impl SendData for WriteData {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the bytes lie in a write command's buffer: the caller hands it to the
        // command and does not write it until the command completes, which is after
        // the controller received this data (or after the queue died and dropped it);
        // nothing else writes it (TCP has no DMA). The borrow ends with the `writev`
        // that uses it (the queue's iovecs are tied to `&mut` of the queue).
        unsafe { self.buf.slice(self.offset, self.len) }.unwrap_or(&[])
    }
}

/// One NVMe/TCP queue (one TCP connection).
pub struct TcpHostQueue {
    qid: Qid,
    depth: u16,
    icd: u32,
    peer: SocketAddr,
    sock: Socket,
    /// The NVMe/TCP protocol state: framer, header kept for termination requests.
    tcp: Connection,
    negotiated: Negotiated,
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    conn: Conn,
    dead: Option<String>,
    /// The last read found the socket empty: the next poll first asks whether data
    /// arrived (see `socket.rs`).
    empty: bool,
}

/// Describes a termination request from the controller.
fn describe_term(fes: u16, fei: u32) -> String {
    format!(
        "controller terminated the connection (C2HTermReq): {} (FES {fes:#x}, FEI {fei:#x})",
        term_fes_name(fes)
    )
}

impl TcpHostQueue {
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
        self.conn.tx.queued()
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
            .capsule_cmd(&capsule, icd_data, &mut c.tx.bytes)
            .map_err(|e| TransportError::Invalid(format!("CapsuleCmd: {e}")))?;
        let tx_end = c.tx_position();
        if let Some(s) = c.slots.get_mut(usize::from(slot)) {
            let way = match (data.is_some(), dir) {
                (false, _) | (true, DataDir::None) => HostData::None,
                (true, DataDir::ToCtrl) if in_capsule => HostData::InCapsule,
                (true, DataDir::ToCtrl) => HostData::ByR2t,
                (true, DataDir::FromCtrl) => HostData::FromController,
            };
            *s = Some(Cmd {
                buf: data.cloned(),
                xfer: HostTransfer::new(way, len),
                tx_end,
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

    fn command_phase(&self, slot: u16) -> Option<CommandPhase> {
        let cmd = self.conn.slots.get(usize::from(slot))?.as_ref()?;
        Some(cmd.phase(self.conn.sent))
    }

    fn wait(&mut self, timeout: Duration) {
        let WaitOn::Fd(fd, ev) = self.wait_on() else {
            return;
        };
        let mut fds = [PollFd::new(fd, ev)];
        let _ = nix::poll::poll(&mut fds, poll_timeout(timeout));
    }

    fn wait_on(&self) -> WaitOn<'_> {
        if self.dead.is_some()
            || self.rx_start < self.rx_end
            || !self.conn.cqes.is_empty()
            || self.sock.buffered()
        {
            return WaitOn::Now;
        }
        let mut ev = PollFlags::POLLIN;
        if self.pending_output() > 0 {
            ev |= PollFlags::POLLOUT;
        }
        WaitOn::Fd(self.sock.as_fd(), ev)
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
