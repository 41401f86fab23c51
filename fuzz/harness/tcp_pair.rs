//! A host [`Connection`] against a controller [`Connection`], each with a small
//! driver that keeps its commands' transfer state ([`HostTransfer`],
//! [`R2tWindows`]) and lends its commands' buffers to the connection's receive loop
//! ([`Receiver`]) as the real drivers do, with the bytes between them split,
//! corrupted and dropped where the input says.
//!
//! Input: a control byte (bit 0: header digests, bit 1: data digests, bits 2-3:
//! MAXR2T, bits 4-5: MAXH2CDATA step), a command count byte, three bytes per command
//! (kind, length), then one or three bytes per step: send the next command, deliver
//! some bytes one way, flip or drop bytes in flight, or let the controller send read
//! data. Once the input is used up every byte still in flight is delivered.
//!
//! Invariants: no byte of a command's data lands outside it, nor twice in one write;
//! with nothing corrupted or dropped every command completes successfully with
//! exactly the data that was sent, each byte landing once; with both digests on, a
//! command that completes successfully has exactly its data whatever happened on the
//! wire; a side that refuses a PDU ends its connection with a termination request.

use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::{
    data_pieces, Connection, ControllerConfig, DataProgress, Event, FramerError, HostConfig,
    HostData, HostTransfer, Pdu, PduWriter, R2tWindows, Receiver, TransferError, DIRECT_MIN,
};
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::{offset as sqe_offset, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};
use nvmf_common::wire::tcp::{flags, offset, pdu_type, term_fes, DataPdu, DATA_HDR_LEN};

use super::input::Input;

const TIMEOUT: Duration = Duration::from_secs(30);
/// In-capsule data the controller takes (what it would advertise in IOCCSZ).
const MAX_ICD: u32 = 8192;
const OP_WRITE: u8 = 0x01;
const OP_READ: u8 = 0x02;
const MAX_CMDS: usize = 4;
/// The driver's receive buffer, when it reads the socket.
const RX_CAP: usize = 64 * 1024;
/// Delivery rounds once the input is used up (each moves every byte in flight), at
/// most: far more than the longest transfer takes.
const DRAIN_ROUNDS: usize = 100_000;

/// The data byte at `at` of command `cid` (what a write sends, what a read returns).
fn pattern(cid: u16, at: usize) -> u8 {
    (at as u8)
        .wrapping_mul(31)
        .wrapping_add(cid as u8)
        .wrapping_add(1)
}

/// One command as both ends see it.
struct Cmd {
    write: bool,
    len: u32,
    /// Host: sent.
    sent: bool,
    /// Host: the command's buffer (a read's destination).
    host_buf: Vec<u8>,
    /// Host: how many times each byte of a read landed.
    host_landed: Vec<u8>,
    host: HostTransfer,
    /// Host: the status it completed with.
    done: Option<Status>,
    /// Host: data of this read failed its digest.
    host_failed: bool,
    /// Controller: the command arrived.
    arrived: bool,
    /// Controller: a write's data as received, and how often each byte landed.
    ctrl_buf: Vec<u8>,
    ctrl_landed: Vec<u8>,
    r2t: R2tWindows,
    /// Controller: data of this write failed its digest.
    ctrl_failed: bool,
    /// Controller: read data sent so far; the response went out.
    c2h_sent: u32,
    answered: bool,
}

/// One end's connection, the bytes it sends, and whether it ended.
struct End {
    conn: Connection,
    writer: Option<PduWriter>,
    out: Vec<u8>,
    ended: bool,
}

struct Pair {
    host: End,
    ctrl: End,
    cmds: Vec<Cmd>,
    maxh2c: u32,
    r2t_limit: usize,
    /// The controller's C2HData size.
    c2h_chunk: u32,
    /// Bytes were flipped or dropped in flight.
    damaged: bool,
    /// Both digests are on (header and data).
    digests: bool,
    /// Delivered bytes go through socket reads, as the drivers' reads do (the missing
    /// data of a large data PDU straight into its buffer, the rest through a receive
    /// buffer); otherwise all at once to `Connection::receive`.
    socket: bool,
}

/// What a handled event means for the connection.
enum Next {
    Go,
    /// End with a termination request.
    Refuse(TransferError),
    /// Something a real driver refuses further up (a capsule the core would reject):
    /// end with a termination request too.
    Close,
    /// The connection ended (the peer's termination request, or a framer error whose
    /// termination request the handler queued): close.
    Ended,
}

/// The end of an event that is not a PDU for the driver: the connection is over.
fn ended(out: &mut Vec<u8>, ev: Event<'_>) -> Next {
    if let Event::Failed { send, .. } = ev {
        out.extend_from_slice(send);
    }
    Next::Ended
}

/// CCCID, TTAG, DATAO and DATAL of a data PDU's header.
fn data_fields(header: &[u8]) -> Option<(u16, u16, u32, u32)> {
    let h = DataPdu::new_unchecked(header.get(..DATA_HDR_LEN)?);
    Some((h.command_id(), h.ttag(), h.data_offset(), h.data_length()))
}

impl Pair {
    fn send_command(&mut self, cid: u16) {
        let Some(w) = self.host.writer else { return };
        let Some(c) = self.cmds.get_mut(usize::from(cid)) else {
            return;
        };
        if c.sent {
            return;
        }
        c.sent = true;
        let mut sqe = [0u8; SQE_LEN];
        sqe[sqe_offset::OPCODE as usize] = if c.write { OP_WRITE } else { OP_READ };
        let at = sqe_offset::CID as usize;
        sqe[at..at + 2].copy_from_slice(&cid.to_le_bytes());
        let in_capsule = c.write && c.len <= MAX_ICD;
        let desc = if in_capsule {
            SglDescriptor::in_capsule(0, c.len)
        } else {
            SglDescriptor::transport(c.len)
        };
        let dptr = sqe_offset::DPTR as usize;
        let _ = desc.emit(&mut sqe[dptr..dptr + 16]);
        let data: Vec<u8> = if in_capsule {
            (0..c.len as usize).map(|i| pattern(cid, i)).collect()
        } else {
            Vec::new()
        };
        let _ = w.capsule_cmd(&sqe, &data, &mut self.host.out);
    }

    /// The controller sends the next piece of read `cid`'s data (and its response
    /// with the last piece, or after it).
    fn send_read_data(&mut self, cid: u16, resp_apart: bool) {
        let Some(w) = self.ctrl.writer else { return };
        let chunk = self.c2h_chunk;
        let Some(c) = self.cmds.get_mut(usize::from(cid)) else {
            return;
        };
        if !c.arrived || c.write || c.answered {
            return;
        }
        if c.c2h_sent < c.len {
            let at = c.c2h_sent;
            let n = (c.len - at).min(chunk);
            let data: Vec<u8> = (at..at + n).map(|i| pattern(cid, i as usize)).collect();
            let last = at + n == c.len;
            let success = last && !resp_apart;
            let _ = w.c2h_data(cid, at, &data, last, success, &mut self.ctrl.out);
            c.c2h_sent += n;
            c.answered = success;
            return;
        }
        respond(&w, cid, Status::SUCCESS, &mut self.ctrl.out);
        c.answered = true;
    }

    /// The controller asks for more of write `cid`'s data.
    fn issue_r2ts(&mut self, cid: u16) {
        let (Some(w), maxh2c, limit) = (self.ctrl.writer, self.maxh2c, self.r2t_limit) else {
            return;
        };
        let Some(c) = self.cmds.get_mut(usize::from(cid)) else {
            return;
        };
        c.r2t
            .send_r2ts(&w, cid, cid, c.len, maxh2c, limit, &mut self.ctrl.out);
    }
}

fn respond(w: &PduWriter, cid: u16, status: Status, out: &mut Vec<u8>) {
    let mut cqe = Cqe::new_unchecked([0u8; CQE_LEN]);
    cqe.set_cid(cid);
    cqe.set_status(status);
    let _ = w.capsule_resp(&cqe.into_inner(), out);
}

/// Lands `data` at `at` of `buf`, counting each byte in `landed`; false if it does
/// not fit.
fn land(buf: &mut [u8], landed: &mut [u8], at: usize, data: &[u8]) -> bool {
    let end = at + data.len();
    let (Some(to), Some(count)) = (buf.get_mut(at..end), landed.get_mut(at..end)) else {
        return false;
    };
    to.copy_from_slice(data);
    for n in count {
        *n = n.saturating_add(1);
    }
    true
}

/// The controller's handling of one event.
fn on_ctrl_event(p: &mut Pair, ev: Event<'_>) -> Next {
    match ev {
        Event::Established { writer, send, .. } => {
            p.ctrl.out.extend_from_slice(send);
            p.ctrl.writer = Some(writer);
            Next::Go
        }
        Event::Pdu(Pdu::CapsuleCmd { sqe, data }) => {
            let at = sqe_offset::CID as usize;
            let cid = u16::from_le_bytes([sqe[at], sqe[at + 1]]);
            let dptr = sqe_offset::DPTR as usize;
            let len = SglDescriptor::parse(&sqe[dptr..dptr + 16])
                .ok()
                .and_then(|d| d.data_len());
            let write = sqe[sqe_offset::OPCODE as usize] == OP_WRITE;
            let Some(c) = p.cmds.get_mut(usize::from(cid)) else {
                return Next::Close;
            };
            // In-capsule data must be exactly what SGL1 says (the core refuses the
            // command otherwise).
            let icd_ok = data.is_empty() || Some(data.len() as u32) == len;
            if c.arrived || len != Some(c.len) || write != c.write || !icd_ok {
                // A corrupted capsule the framer could not tell: the target's core
                // would refuse the command; here it ends the run.
                return Next::Close;
            }
            c.arrived = true;
            if write && !data.is_empty() {
                let ok = land(&mut c.ctrl_buf, &mut c.ctrl_landed, 0, data);
                assert!(ok, "in-capsule data longer than the command");
                if let Some(w) = p.ctrl.writer {
                    respond(&w, cid, Status::SUCCESS, &mut p.ctrl.out);
                }
                c.answered = true;
            } else if write {
                p.issue_r2ts(cid);
            }
            Next::Go
        }
        Event::Pdu(Pdu::H2CData {
            cid,
            ttag,
            datao,
            datal,
            data,
            ..
        }) => on_h2c(p, cid, ttag, datao, Some(data), datal as usize),
        Event::DataDigest {
            error: FramerError::DataDigest {
                pdu_type: t, cid, ..
            },
            header,
        } => match (t, data_fields(header)) {
            (pdu_type::H2C_DATA, Some((cid, ttag, datao, datal))) => {
                on_h2c(p, cid, ttag, datao, None, datal as usize)
            }
            // A write's in-capsule data failed: the command fails, never executes.
            (pdu_type::CMD, _) => {
                let Some(w) = p.ctrl.writer else {
                    return Next::Close;
                };
                let Some(c) = p.cmds.get_mut(usize::from(cid)) else {
                    return Next::Close;
                };
                if c.arrived || !c.write {
                    return Next::Close;
                }
                c.arrived = true;
                c.ctrl_failed = true;
                c.answered = true;
                respond(&w, cid, transient(), &mut p.ctrl.out);
                Next::Go
            }
            _ => Next::Close,
        },
        ev @ (Event::Failed { .. } | Event::PeerTerminated { .. }) => ended(&mut p.ctrl.out, ev),
        _ => Next::Close,
    }
}

fn transient() -> Status {
    Status::generic_retryable(generic::TRANSIENT_TRANSPORT_ERROR)
}

/// H2CData of `datal` bytes (`data`: those the framer held, the others were received
/// in place; None: it failed its digest).
fn on_h2c(
    p: &mut Pair,
    cid: u16,
    ttag: u16,
    datao: u32,
    data: Option<&[u8]>,
    datal: usize,
) -> Next {
    let Some(c) = p.cmds.get_mut(usize::from(ttag)) else {
        return Next::Close;
    };
    if ttag != cid || !c.arrived || !c.write || c.answered {
        return Next::Close;
    }
    if let Err(e) = c.r2t.accept_h2c(cid, datao, datal as u32) {
        return Next::Refuse(e);
    }
    match data {
        Some(d) if !c.ctrl_failed => {
            // Bytes received in place are in the buffer already: copy the rest.
            let head = d;
            let ok = land(&mut c.ctrl_buf, &mut c.ctrl_landed, datao as usize, head);
            assert!(ok, "accepted H2CData outside its command");
            let placed = datal - head.len();
            if let Some(n) = c
                .ctrl_landed
                .get_mut(datao as usize + head.len()..datao as usize + datal)
            {
                assert_eq!(n.len(), placed);
                for n in n {
                    *n = n.saturating_add(1);
                }
            }
        }
        Some(_) => {}
        None => c.ctrl_failed = true,
    }
    let len = c.len;
    let Some(w) = p.ctrl.writer else {
        return Next::Close;
    };
    if c.ctrl_failed {
        if c.r2t.drained() {
            respond(&w, cid, transient(), &mut p.ctrl.out);
            c.answered = true;
        }
    } else if c.r2t.complete(len) {
        respond(&w, cid, Status::SUCCESS, &mut p.ctrl.out);
        c.answered = true;
    } else {
        p.issue_r2ts(cid);
    }
    Next::Go
}

/// The host's handling of one event.
fn on_host_event(p: &mut Pair, ev: Event<'_>) -> Next {
    match ev {
        Event::Established { writer, .. } => {
            p.host.writer = Some(writer);
            Next::Go
        }
        Event::Pdu(Pdu::CapsuleResp { cqe }) => {
            let v = Cqe::new_unchecked(&cqe[..]);
            let (cid, st) = (v.cid(), v.status());
            let Some(c) = p.cmds.get_mut(usize::from(cid)) else {
                return Next::Close;
            };
            if c.done.is_some() || !c.sent {
                return Next::Close;
            }
            c.done = Some(if c.host_failed { generic_dte() } else { st });
            Next::Go
        }
        Event::Pdu(Pdu::C2HData {
            cid,
            datao,
            datal,
            success,
            data,
            ..
        }) => {
            let Some(c) = p.cmds.get_mut(usize::from(cid)) else {
                return Next::Close;
            };
            if c.done.is_some() || !c.sent {
                return Next::Close;
            }
            let datal = datal as usize;
            if let Err(e) = c.host.accept_c2h(cid, datao, datal) {
                return Next::Refuse(e);
            }
            // Bytes received in place are in the buffer already: copy the rest.
            let ok = land(&mut c.host_buf, &mut c.host_landed, datao as usize, data);
            assert!(ok, "accepted C2HData outside its command");
            let start = datao as usize + data.len();
            if let Some(n) = c.host_landed.get_mut(start..datao as usize + datal) {
                for n in n {
                    *n = n.saturating_add(1);
                }
            }
            if success {
                c.done = Some(if c.host_failed {
                    generic_dte()
                } else {
                    Status::SUCCESS
                });
            }
            Next::Go
        }
        Event::Pdu(Pdu::R2T {
            cid,
            ttag,
            offset,
            length,
        }) => {
            let (maxh2c, Some(w)) = (p.maxh2c, p.host.writer) else {
                return Next::Close;
            };
            let Some(c) = p.cmds.get_mut(usize::from(cid)) else {
                return Next::Close;
            };
            if c.done.is_some() || !c.sent {
                return Next::Close;
            }
            if let Err(e) = c.host.accept_r2t(cid, offset, length) {
                return Next::Refuse(e);
            }
            for piece in data_pieces(offset, length, maxh2c, false) {
                let data: Vec<u8> = piece.range().map(|i| pattern(cid, i)).collect();
                let _ = w.h2c_data(cid, ttag, piece.datao, &data, piece.last, &mut p.host.out);
            }
            Next::Go
        }
        Event::DataDigest { header, .. } => {
            let fl = header.get(offset::FLAGS as usize).copied().unwrap_or(0);
            let success = fl & flags::DATA_SUCCESS != 0;
            let cid = data_fields(header).map(|f| f.0);
            let Some(c) = cid.and_then(|cid| p.cmds.get_mut(usize::from(cid))) else {
                return Next::Close;
            };
            if c.done.is_some() || !c.sent || c.write {
                return Next::Close;
            }
            c.host_failed = true;
            if success {
                c.done = Some(generic_dte());
            }
            Next::Go
        }
        ev @ (Event::Failed { .. } | Event::PeerTerminated { .. }) => ended(&mut p.host.out, ev),
        _ => Next::Close,
    }
}

fn generic_dte() -> Status {
    Status::generic_dnr(generic::DATA_TRANSFER_ERROR)
}

/// One end's driver as the connection's receive loop sees it: the commands'
/// buffers it lends, and its handling of events (anything but `Next::Go` stops the
/// loop and comes back as the error).
struct Driver<'a> {
    p: &'a mut Pair,
    host: bool,
}

impl Receiver for Driver<'_> {
    type Error = Next;

    fn destination(&mut self, d: &DataProgress) -> Option<&mut [u8]> {
        let host = self.host;
        let c = self
            .p
            .cmds
            .get_mut(usize::from(if host { d.cid } else { d.ttag }))?;
        let (at, missing) = (d.missing_at(), d.missing());
        if host {
            if !c.host.fits_c2h(d.datao, d.len) || c.host_failed || c.done.is_some() || !c.sent {
                return None;
            }
            c.host_buf.get_mut(at..at + missing)
        } else {
            let end = d.end()?;
            if d.cid != d.ttag || !c.write || c.ctrl_failed || !c.r2t.continues_window(d.datao, end)
            {
                return None;
            }
            c.ctrl_buf.get_mut(at..at + missing)
        }
    }

    fn on_event(&mut self, ev: Event<'_>) -> Result<(), Next> {
        let next = if self.host {
            on_host_event(self.p, ev)
        } else {
            on_ctrl_event(self.p, ev)
        };
        match next {
            Next::Go => Ok(()),
            other => Err(other),
        }
    }
}

/// Delivers `input` to one end, as its driver would (see `Pair::socket`).
fn deliver(p: &mut Pair, host: bool, mut input: &[u8]) {
    let end = if host { &mut p.host } else { &mut p.ctrl };
    if end.ended {
        return;
    }
    let mut conn = std::mem::replace(&mut end.conn, placeholder());
    let socket = p.socket;
    let mut rx = Driver { p, host };
    let mut r = Ok(());
    while r.is_ok() && !input.is_empty() {
        if !socket {
            r = conn.receive(input, &mut rx);
            break;
        }
        // One socket read: straight into a command's buffer, or into the receive
        // buffer.
        let wanted = conn.wants_in_place(DIRECT_MIN);
        if let Some(dst) = wanted.and_then(|d| rx.destination(&d)) {
            let n = dst.len().min(input.len());
            dst[..n].copy_from_slice(&input[..n]);
            conn.placed(&dst[..n]);
            input = &input[n..];
            r = conn.receive(&[], &mut rx);
            continue;
        }
        let n = conn.read_len(RX_CAP).min(input.len());
        r = conn.receive(&input[..n], &mut rx);
        input = &input[n..];
    }
    let end = if host { &mut p.host } else { &mut p.ctrl };
    match r {
        Err(Next::Refuse(e)) => {
            conn.terminate(e.fes, e.fei, &mut end.out);
            end.ended = true;
        }
        Err(Next::Close) => {
            conn.terminate(term_fes::INVALID_HEADER_FIELD, 0, &mut end.out);
            end.ended = true;
        }
        Err(Next::Ended) => end.ended = true,
        Err(Next::Go) | Ok(()) => {}
    }
    end.conn = conn;
}

/// A closed connection that stands in while the real one reads.
fn placeholder() -> Connection {
    match Connection::controller(ControllerConfig::default(), TIMEOUT, Instant::now()) {
        Ok(c) => c,
        Err(e) => panic!("the default configuration is valid: {e}"),
    }
}

/// Runs one input.
pub fn run(input: &[u8]) {
    let mut inp = Input(input);
    let ctl = inp.byte();
    let (hd, dd) = (ctl & 1 != 0, ctl & 2 != 0);
    let maxr2t = u32::from((ctl >> 2) & 3);
    let maxh2c = 4096 * (u32::from((ctl >> 4) & 3) + 1);
    let socket = ctl & 0x40 != 0;
    let resp_apart = ctl & 0x80 != 0;
    let n = usize::from(inp.byte()) % MAX_CMDS + 1;
    let mut cmds = Vec::with_capacity(n);
    for cid in 0..n {
        let kind = inp.byte();
        let len = u32::from(inp.u16()) * 5 + 1;
        let write = kind & 1 == 0;
        cmds.push(Cmd {
            write,
            len,
            sent: false,
            host_buf: vec![0; len as usize],
            host_landed: vec![0; len as usize],
            host: HostTransfer::new(
                match (write, len <= MAX_ICD) {
                    (true, true) => HostData::InCapsule,
                    (true, false) => HostData::ByR2t,
                    (false, _) => HostData::FromController,
                },
                len,
            ),
            done: None,
            host_failed: false,
            arrived: false,
            ctrl_buf: vec![0; len as usize],
            ctrl_landed: vec![0; len as usize],
            r2t: R2tWindows::default(),
            ctrl_failed: false,
            c2h_sent: 0,
            answered: false,
        });
        let _ = cid;
    }
    let now = Instant::now();
    let hc = HostConfig {
        header_digest: hd,
        data_digest: dd,
        maxr2t,
        max_c2h_data: 1 << 20,
        ..HostConfig::default()
    };
    let cc = ControllerConfig {
        maxh2cdata: maxh2c,
        max_icd: MAX_ICD,
        ..ControllerConfig::default()
    };
    let mut host_out = Vec::new();
    let (host, ctrl) = match (
        Connection::host(hc, TIMEOUT, now, &mut host_out),
        Connection::controller(cc, TIMEOUT, now),
    ) {
        (Ok(h), Ok(c)) => (h, c),
        _ => panic!("the configurations are valid"),
    };
    let end = |conn, out| End {
        conn,
        writer: None,
        out,
        ended: false,
    };
    let mut p = Pair {
        host: end(host, host_out),
        ctrl: end(ctrl, Vec::new()),
        cmds,
        maxh2c,
        r2t_limit: maxr2t as usize + 1,
        c2h_chunk: 1024 * (u32::from(inp.byte() & 15) + 1),
        damaged: false,
        digests: hd && dd,
        socket,
    };
    // Bytes in flight each way: host to controller, controller to host.
    let mut h2c: Vec<u8> = Vec::new();
    let mut c2h: Vec<u8> = Vec::new();
    while !inp.done() {
        let op = inp.byte();
        collect(&mut p, &mut h2c, &mut c2h);
        match op & 7 {
            0 => {
                let cid = usize::from(op >> 3) % n;
                p.send_command(cid as u16);
            }
            1 | 2 => {
                let k = (usize::from(inp.u16()) + 1).min(h2c.len());
                let bytes: Vec<u8> = h2c.drain(..k).collect();
                deliver(&mut p, false, &bytes);
            }
            3 | 4 => {
                let k = (usize::from(inp.u16()) + 1).min(c2h.len());
                let bytes: Vec<u8> = c2h.drain(..k).collect();
                deliver(&mut p, true, &bytes);
            }
            5 => {
                let cid = usize::from(op >> 3) % n;
                p.send_read_data(cid as u16, resp_apart);
            }
            6 => {
                // Flip a byte in flight.
                let way = if op & 8 != 0 { &mut h2c } else { &mut c2h };
                let at = usize::from(inp.u16());
                let mask = inp.byte() | 1;
                if let Some(b) = way.get_mut(at) {
                    *b ^= mask;
                    p.damaged = true;
                }
            }
            _ => {
                // Drop bytes in flight.
                let way = if op & 8 != 0 { &mut h2c } else { &mut c2h };
                let at = usize::from(inp.u16());
                let k = usize::from(inp.byte()) + 1;
                if at < way.len() {
                    let stop = (at + k).min(way.len());
                    way.drain(at..stop);
                    p.damaged = true;
                }
            }
        }
    }
    // The rest goes through: every command sent, every byte delivered, every read
    // answered.
    for _ in 0..DRAIN_ROUNDS {
        for cid in 0..n {
            p.send_command(cid as u16);
            for _ in 0..=MAX_CMDS {
                p.send_read_data(cid as u16, resp_apart);
            }
        }
        collect(&mut p, &mut h2c, &mut c2h);
        if h2c.is_empty() && c2h.is_empty() {
            break;
        }
        let bytes = std::mem::take(&mut h2c);
        deliver(&mut p, false, &bytes);
        let bytes = std::mem::take(&mut c2h);
        deliver(&mut p, true, &bytes);
    }
    check(&p);
}

/// Moves what each end queued into the bytes in flight.
fn collect(p: &mut Pair, h2c: &mut Vec<u8>, c2h: &mut Vec<u8>) {
    h2c.append(&mut p.host.out);
    c2h.append(&mut p.ctrl.out);
}

/// The invariants once everything was delivered.
fn check(p: &Pair) {
    let clean = !p.damaged;
    for (cid, c) in p.cmds.iter().enumerate() {
        let cid = cid as u16;
        if c.write {
            assert!(
                c.ctrl_landed.iter().all(|&n| n <= 1),
                "a byte of write {cid} landed twice"
            );
        }
        let ok = c.done.is_some_and(|s| s.is_success());
        if clean {
            assert!(!p.host.ended && !p.ctrl.ended, "a clean connection ended");
            assert!(
                ok,
                "command {cid} did not complete successfully: {:?}",
                c.done
            );
        }
        if ok && (clean || p.digests) {
            if c.write {
                assert!(
                    c.ctrl_landed.iter().all(|&n| n == 1),
                    "write {cid}: a byte not landed once"
                );
                let want = (0..c.len as usize).map(|i| pattern(cid, i));
                assert!(
                    c.ctrl_buf.iter().copied().eq(want),
                    "write {cid}: wrong data"
                );
            } else {
                if clean {
                    assert!(
                        c.host_landed.iter().all(|&n| n == 1),
                        "read {cid}: a byte not landed once"
                    );
                }
                let want = (0..c.len as usize).map(|i| pattern(cid, i));
                assert!(
                    c.host_buf.iter().copied().eq(want),
                    "read {cid}: wrong data"
                );
            }
        }
    }
}
