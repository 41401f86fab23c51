//! The receive side: bytes in arbitrary chunks in, validated PDUs out.

use super::negotiate::{accept_icreq, accept_icresp, ConfigError};
use super::DataDigester;
use super::Role;
use super::{data_digest, encode_term_req, header_digest, pda_bytes, type_info, Kind, TypeInfo};
use super::{ControllerConfig, FramerError, HostConfig, IcReqParams, IcRespParams, Negotiated};
use crate::wire::cqe::CQE_LEN;
use crate::wire::sqe::{self, SQE_LEN};
use crate::wire::tcp::{flags, offset, pdu_type, CapsuleCmd, CapsuleResp, DataPdu, Header, IcReq};
use crate::wire::tcp::{IcResp, R2t, TermReq, DIGEST_LEN, HDR_LEN, ICREQ_LEN, MAX_TERM_DATA};
use crate::wire::tcp::{MAX_TERM_PLEN_ACCEPTED, TERM_HDR_LEN};
use crate::wire::{get_bytes, get_bytes_n, get_u16, get_u32};

/// What a CapsuleCmd too short for its SQE would carry (never: its HLEN is checked).
static NO_SQE: [u8; SQE_LEN] = [0; SQE_LEN];

/// The largest PDU data offset (`pdo` is one byte).
const MAX_PDO: usize = u8::MAX as usize;

/// A data PDU being collected (see [`PduReader::data_in_progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataProgress {
    pub cid: u16,
    pub ttag: u16,
    /// DATAO: where the PDU's data goes in the command's data.
    pub datao: u32,
    /// Data bytes already in the reader's buffer.
    pub received: usize,
    /// DATAL: the PDU's data length.
    pub len: usize,
    /// Part of the data was already received elsewhere
    /// ([`PduReader::skip_data`]): the rest must go there too.
    pub placing: bool,
}

impl DataProgress {
    /// Data bytes not received yet.
    #[inline]
    pub fn missing(&self) -> usize {
        self.len.saturating_sub(self.received)
    }

    /// Where the missing bytes start in the command's data (DATAO + received).
    #[inline]
    pub fn missing_at(&self) -> usize {
        self.datao as usize + self.received
    }

    /// Where the PDU's data ends in the command's data (DATAO + DATAL), if that fits
    /// in 32 bits.
    #[inline]
    pub fn end(&self) -> Option<u32> {
        self.datao.checked_add(u32::try_from(self.len).ok()?)
    }
}

/// A complete, validated PDU. Data slices borrow the reader's buffer until the next
/// [`PduReader::feed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu<'a> {
    /// Initialize Connection Request (controller side; already accepted: see
    /// [`PduReader::negotiated`]).
    IcReq(IcReqParams),
    /// Initialize Connection Response (host side; already accepted).
    IcResp(IcRespParams),
    /// The host terminates the connection; `data` is the header of the PDU it
    /// rejected. Close the connection.
    H2CTermReq { fes: u16, fei: u32, data: &'a [u8] },
    /// The controller terminates the connection; `data` is the header of the PDU it
    /// rejected. Close the connection.
    C2HTermReq { fes: u16, fei: u32, data: &'a [u8] },
    /// A command capsule: the SQE and its in-capsule data (possibly empty), both
    /// borrowed where the PDU lies (so handing the PDU on copies no SQE).
    CapsuleCmd {
        sqe: &'a [u8; SQE_LEN],
        data: &'a [u8],
    },
    /// A response capsule.
    CapsuleResp { cqe: [u8; CQE_LEN] },
    /// Write data the controller asked for with an R2T: DATAL bytes at DATAO, of
    /// which `data` holds those that went through the reader (all of them, unless the
    /// rest was received elsewhere: see [`PduReader::skip_data`]).
    H2CData {
        cid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        last: bool,
        data: &'a [u8],
    },
    /// Read data, DATAL bytes at DATAO (`data` as for H2CData). With `success` the
    /// command completed successfully and no CapsuleResp follows.
    C2HData {
        cid: u16,
        ttag: u16,
        datao: u32,
        datal: u32,
        last: bool,
        success: bool,
        data: &'a [u8],
    },
    /// The controller is ready for `length` bytes of write data at `offset`.
    R2T {
        cid: u16,
        ttag: u16,
        offset: u32,
        length: u32,
    },
}

impl Pdu<'_> {
    /// The PDU type on the wire.
    pub fn pdu_type(&self) -> u8 {
        match self {
            Pdu::IcReq(_) => pdu_type::ICREQ,
            Pdu::IcResp(_) => pdu_type::ICRESP,
            Pdu::H2CTermReq { .. } => pdu_type::H2C_TERM,
            Pdu::C2HTermReq { .. } => pdu_type::C2H_TERM,
            Pdu::CapsuleCmd { .. } => pdu_type::CMD,
            Pdu::CapsuleResp { .. } => pdu_type::RSP,
            Pdu::H2CData { .. } => pdu_type::H2C_DATA,
            Pdu::C2HData { .. } => pdu_type::C2H_DATA,
            Pdu::R2T { .. } => pdu_type::R2T,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Controller(ControllerConfig),
    Host(HostConfig),
}

/// Where the reader is in the current PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Collecting the 8-byte common header.
    Common,
    /// Collecting the PDU specific header and the header digest.
    Header,
    /// Collecting padding, data and the data digest.
    Payload,
    /// A complete PDU waits for [`PduReader::poll`].
    Ready,
    /// The PDU was handed out; the buffer is reused on the next feed.
    Taken,
}

/// The validated layout of the PDU being read.
#[derive(Debug, Clone, Copy)]
struct Frame {
    kind: Kind,
    flags: u8,
    hlen: usize,
    plen: usize,
    hdgst: bool,
    ddgst: bool,
    data_start: usize,
    data_len: usize,
}

impl Frame {
    const EMPTY: Frame = Frame {
        kind: Kind::IcReq,
        flags: 0,
        hlen: 0,
        plen: 0,
        hdgst: false,
        ddgst: false,
        data_start: 0,
        data_len: 0,
    };
}

/// The sans-IO NVMe/TCP PDU reader of one connection.
///
/// [`feed`](PduReader::feed) it the bytes read from the socket, in chunks of any size;
/// it consumes them until one PDU is complete, then [`poll`](PduReader::poll) hands
/// that PDU out. Every field is checked before anything is trusted, in this order
/// (the first failure is reported, with the FES and FEI of [`FramerError`]):
///
/// 1. the common header, as soon as its 8 bytes are in: the type is known and travels
///    towards this role (FEI 0); nothing but ICReq (ICResp) before initialization and
///    never a second one (PDU sequence error); the flags are valid for the type, C2H
///    SUCCESS comes with LAST_PDU, HDGSTF matches the negotiated header digest (FEI 1);
///    `hlen` is the type's (FEI 2); `plen` covers the header and digest (FEI 4); a PDU
///    without data has `pdo` 0 (FEI 3) and `plen` exactly its header (FEI 4); a PDU
///    with data has `hlen` (+ digest) <= `pdo` < `plen` and `pdo` aligned to this
///    side's CPDA/HPDA (FEI 3), DDGSTF as negotiated (FEI 1), room for the data digest
///    (FEI 4) and no more data than configured (data transfer limit exceeded).
///    Termination requests only need `hlen` 24 and `plen` 24..=176; otherwise the
///    connection closes without a reply.
/// 2. the header, once the rest of it is in: the header digest; an ICReq (ICResp) is
///    negotiated against the configuration; H2CData / C2HData DATAL equals the PDU's
///    data length (FEI 16).
/// 3. the data digest, once the PDU is complete: a mismatch is reported by `poll` as
///    [`FramerError::DataDigest`] and the reader carries on.
///
/// A fatal error poisons the reader: `feed` and `poll` return it from then on. The
/// buffer is allocated once, at construction, to the largest PDU the configuration
/// allows ([`PduReader::max_pdu_len`]), and reused for every PDU.
#[derive(Debug)]
pub struct PduReader {
    side: Side,
    negotiated: Option<Negotiated>,
    buf: Box<[u8]>,
    filled: usize,
    stage: Stage,
    frame: Frame,
    digest_error: Option<FramerError>,
    /// The data digest of the current PDU's data so far, once part of the data was
    /// received elsewhere ([`skip_data`](PduReader::skip_data)): the buffer then
    /// lacks those bytes.
    skipped_digest: Option<DataDigester>,
    /// How many data bytes of the current PDU the buffer held when the rest started
    /// to be received elsewhere ([`skip_data`](PduReader::skip_data)).
    placed_from: Option<usize>,
    /// DATAL of the last data PDU handed out, when part of its data was received
    /// elsewhere (None when it all went through the reader).
    last_placed: Option<usize>,
    error: Option<FramerError>,
    error_header_len: usize,
}

impl PduReader {
    /// A reader for the controller end of a new connection.
    pub fn controller(cfg: ControllerConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new(
            Side::Controller(cfg),
            cfg.maxh2cdata.max(cfg.max_icd),
        ))
    }

    /// A reader for the host end of a new connection.
    pub fn host(cfg: HostConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new(Side::Host(cfg), cfg.max_c2h_data))
    }

    fn new(side: Side, max_data: u32) -> Self {
        let data_pdu = MAX_PDO + max_data as usize + DIGEST_LEN;
        let cap = data_pdu.max(ICREQ_LEN).max(MAX_TERM_PLEN_ACCEPTED);
        PduReader {
            side,
            negotiated: None,
            buf: vec![0u8; cap].into_boxed_slice(),
            filled: 0,
            stage: Stage::Common,
            frame: Frame::EMPTY,
            digest_error: None,
            skipped_digest: None,
            placed_from: None,
            last_placed: None,
            error: None,
            error_header_len: 0,
        }
    }

    /// Which end of the connection this reader serves.
    pub fn role(&self) -> Role {
        match self.side {
            Side::Controller(_) => Role::Controller,
            Side::Host(_) => Role::Host,
        }
    }

    /// The connection parameters, once the ICReq (controller) or ICResp (host) has
    /// been accepted.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    /// The size of the PDU buffer: the longest PDU this reader accepts.
    pub fn max_pdu_len(&self) -> usize {
        self.buf.len()
    }

    /// DATAL of the last data PDU handed out, if part of its data was received
    /// elsewhere ([`skip_data`](PduReader::skip_data)); None if all of it went
    /// through the reader.
    pub fn last_data_placed(&self) -> Option<usize> {
        self.last_placed
    }

    /// The fatal error that poisoned the reader, if any.
    pub fn error(&self) -> Option<FramerError> {
        self.error
    }

    /// The data PDU (H2CData or C2HData) whose data is being collected, once its
    /// header passed every check and until its last data byte: the caller may then
    /// receive the rest of its data straight where it belongs and account for it with
    /// [`skip_data`](PduReader::skip_data) instead of feeding it. A data digest that
    /// follows is fed as usual, and checked against the digest of the data as it was
    /// fed and skipped.
    pub fn data_in_progress(&self) -> Option<DataProgress> {
        let f = &self.frame;
        let collecting = self.error.is_none() && self.skippable() && self.filled >= f.data_start;
        if !collecting {
            return None;
        }
        let d = DataPdu::new_unchecked(get_bytes(&self.buf, 0..f.hlen));
        Some(DataProgress {
            cid: d.command_id(),
            ttag: d.ttag(),
            datao: d.data_offset(),
            received: self.filled - f.data_start,
            len: f.data_len,
            placing: self.placed_from.is_some(),
        })
    }

    /// Counts the next data bytes of the PDU [`data_in_progress`] describes as
    /// received: `data` are those bytes where the caller put them (the reader does not
    /// keep them; with a data digest it digests them). Returns how many were counted:
    /// at most what the data still lacks, 0 when no such PDU is in progress. The PDU's
    /// `data` as handed out later holds only its first [`DataProgress::received`]
    /// bytes (at the first skip), and every later data byte must be skipped too.
    ///
    /// [`data_in_progress`]: PduReader::data_in_progress
    pub fn skip_data(&mut self, data: &[u8]) -> usize {
        let Some(d) = self.data_in_progress() else {
            return 0;
        };
        let take = data.len().min(d.missing());
        self.placed_from.get_or_insert(d.received);
        if self.frame.ddgst {
            let f = self.frame;
            let have = get_bytes(&self.buf, f.data_start..self.filled);
            let digest = self.skipped_digest.get_or_insert_with(|| {
                let mut dg = DataDigester::new();
                dg.update(have);
                dg
            });
            digest.update(data.get(..take).unwrap_or(&[]));
        }
        self.filled += take;
        if self.filled == self.frame.plen {
            self.on_payload();
        }
        take
    }

    /// Starts the next PDU once the last one was handed out.
    fn next_pdu(&mut self) {
        self.filled = 0;
        self.digest_error = None;
        self.skipped_digest = None;
        self.placed_from = None;
        self.stage = Stage::Common;
    }

    /// Whether part of a PDU has been fed but not completed (an end of stream now
    /// would cut a PDU short).
    pub fn has_partial_pdu(&self) -> bool {
        matches!(self.stage, Stage::Common | Stage::Header | Stage::Payload) && self.filled > 0
    }

    /// After a fatal error: the received header of the offending PDU (at most
    /// [`MAX_TERM_DATA`] bytes), for the termination request's data.
    pub fn error_header(&self) -> &[u8] {
        match self.error {
            Some(_) => get_bytes(&self.buf, 0..self.error_header_len),
            None => &[],
        }
    }

    /// After a fatal error that calls for one: appends the termination request to
    /// send before closing (C2HTermReq from a controller, H2CTermReq from a host) and
    /// returns `true`. Returns `false` (appending nothing) otherwise.
    pub fn termination_request(&self, out: &mut Vec<u8>) -> bool {
        match self.error.and_then(|e| e.fes().map(|fes| (fes, e.fei()))) {
            Some((fes, fei)) => {
                encode_term_req(self.role(), fes, fei, self.error_header(), out);
                true
            }
            None => false,
        }
    }

    /// Consumes bytes of the stream until one PDU is complete or `bytes` runs out and
    /// returns how many were consumed. Consumes nothing while a complete PDU waits for
    /// [`poll`](PduReader::poll). A fatal error poisons the reader and is returned
    /// by every later call.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, FramerError> {
        self.feed_inner(bytes, false)
    }

    /// [`read`](PduReader::read), except that the data of a data PDU that
    /// [`data_in_progress`](PduReader::data_in_progress) can describe is not consumed
    /// unless the whole PDU lies in `bytes`: the reader stops at the data's start and
    /// returns `(used, None)` with bytes left over, and the caller puts the data where
    /// it belongs and accounts for it with [`skip_data`](PduReader::skip_data). So no
    /// data byte is copied into the reader's buffer.
    pub fn read_to_data<'a>(
        &'a mut self,
        bytes: &'a [u8],
    ) -> (usize, Option<Result<Pdu<'a>, FramerError>>) {
        if self.stage == Stage::Taken {
            self.next_pdu();
        }
        if self.error.is_none() && self.stage == Stage::Common && self.filled == 0 {
            if let Some(done) = self.read_in_place(bytes) {
                return done;
            }
        }
        match self.feed_inner(bytes, true) {
            Ok(n) => (n, self.poll()),
            Err(e) => (0, Some(Err(e))),
        }
    }

    /// Whether the data of the PDU being read can be received elsewhere and skipped
    /// (see [`data_in_progress`](PduReader::data_in_progress)).
    fn skippable(&self) -> bool {
        let f = &self.frame;
        let data_end = f.data_start + f.data_len;
        let ddgst = if f.ddgst { DIGEST_LEN } else { 0 };
        self.stage == Stage::Payload
            && matches!(f.kind, Kind::H2CData | Kind::C2HData)
            && f.data_len > 0
            && data_end + ddgst == f.plen
            && self.filled < data_end
    }

    fn feed_inner(&mut self, bytes: &[u8], stop_at_data: bool) -> Result<usize, FramerError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut used = 0;
        loop {
            match self.stage {
                Stage::Ready => return Ok(used),
                Stage::Taken => self.next_pdu(),
                Stage::Common | Stage::Header | Stage::Payload => {}
            }
            let want = match self.stage {
                Stage::Common => HDR_LEN,
                Stage::Header => self.frame.hlen + if self.frame.hdgst { DIGEST_LEN } else { 0 },
                _ => self.frame.plen,
            };
            let stop = stop_at_data && self.skippable();
            let want = if stop { self.frame.data_start } else { want };
            if self.filled < want {
                let rest = bytes.get(used..).unwrap_or(&[]);
                let n = (want - self.filled).min(rest.len());
                match (
                    self.buf.get_mut(self.filled..self.filled + n),
                    rest.get(..n),
                ) {
                    (Some(dst), Some(src)) => {
                        dst.copy_from_slice(src);
                        // Data fed after some was skipped: the buffer will not hold
                        // it all, so the digest goes on over it here.
                        if let Some(dg) = self.skipped_digest.as_mut() {
                            let f = &self.frame;
                            let from = self.filled.max(f.data_start);
                            let to = (self.filled + n).min(f.data_start + f.data_len);
                            if from < to {
                                dg.update(get_bytes(&self.buf, from..to));
                            }
                        }
                    }
                    _ => {
                        let e = FramerError::header(offset::PLEN, "PDU longer than the buffer");
                        return Err(self.fail(e));
                    }
                }
                self.filled += n;
                used += n;
                if self.filled < want {
                    return Ok(used);
                }
            }
            if stop {
                return Ok(used);
            }
            let step = match self.stage {
                Stage::Common => self.on_common_header(),
                Stage::Header => self.on_header(),
                _ => {
                    self.on_payload();
                    Ok(())
                }
            };
            if let Err(e) = step {
                return Err(self.fail(e));
            }
        }
    }

    /// The PDU completed by the last [`feed`](PduReader::feed), once: `Ok(pdu)`,
    /// or `Err(DataDigest)` for a PDU whose data failed its digest. `None` while the
    /// PDU is incomplete. After a fatal error, that error.
    pub fn poll(&mut self) -> Option<Result<Pdu<'_>, FramerError>> {
        if let Some(e) = self.error {
            return Some(Err(e));
        }
        if self.stage != Stage::Ready {
            return None;
        }
        self.stage = Stage::Taken;
        if let Some(e) = self.digest_error {
            return Some(Err(e));
        }
        Some(Ok(self.parse()))
    }

    /// [`feed`](PduReader::feed) and [`poll`](PduReader::poll) in one call, without
    /// copying when it can: consumes bytes up to the end of one PDU and returns how
    /// many, with what `poll` would then return. A PDU that lies whole in `bytes` (and
    /// starts it, with no partial PDU buffered) is checked where it is and handed out
    /// borrowing `bytes`; every check, error and later state is the same as when it
    /// goes through the reader's buffer. `None` means every byte was consumed and the
    /// PDU is not complete yet. After a fatal error the count is 0 and the error is
    /// returned (the reader is poisoned, as with `feed`).
    pub fn read<'a>(
        &'a mut self,
        bytes: &'a [u8],
    ) -> (usize, Option<Result<Pdu<'a>, FramerError>>) {
        if self.stage == Stage::Taken {
            self.next_pdu();
        }
        if self.error.is_none() && self.stage == Stage::Common && self.filled == 0 {
            if let Some(done) = self.read_in_place(bytes) {
                return done;
            }
        }
        match self.feed(bytes) {
            Ok(n) => (n, self.poll()),
            Err(e) => (0, Some(Err(e))),
        }
    }

    /// The PDU at the start of `bytes` when it is complete there and passes every
    /// check; `None` sends the bytes through the buffer instead (an incomplete PDU, an
    /// ICReq/ICResp, whose acceptance changes the reader, or an error, which the
    /// buffered path reports with its exact state).
    #[allow(clippy::type_complexity)]
    fn read_in_place<'b>(
        &mut self,
        bytes: &'b [u8],
    ) -> Option<(usize, Option<Result<Pdu<'b>, FramerError>>)> {
        let f = self.check_common(bytes.get(..HDR_LEN)?).ok()?;
        if matches!(f.kind, Kind::IcReq | Kind::IcResp) || f.plen > self.buf.len() {
            return None;
        }
        let pdu = bytes.get(..f.plen)?;
        check_header(&f, pdu).ok()?;
        let out = match data_digest_error(&f, pdu, None) {
            Some(e) => Err(e),
            None => {
                if matches!(f.kind, Kind::H2CData | Kind::C2HData) {
                    self.last_placed = None;
                }
                Ok(parse(&f, pdu, f.data_len))
            }
        };
        Some((f.plen, Some(out)))
    }

    fn fail(&mut self, e: FramerError) -> FramerError {
        // The header to echo: `hlen` bytes when `hlen` is sane, else the common header
        // (FreeBSD `nvmf_tcp_validate_pdu`), never more than was received.
        let ch = Header::new_unchecked(get_bytes(&self.buf, 0..HDR_LEN));
        let hlen = usize::from(ch.hlen());
        let h = if hlen < HDR_LEN || hlen > ch.plen() as usize {
            HDR_LEN
        } else {
            hlen
        };
        self.error_header_len = h.min(self.filled).min(MAX_TERM_DATA);
        self.error = Some(e);
        e
    }

    fn rx_align(&self) -> usize {
        pda_bytes(match self.side {
            Side::Controller(c) => c.cpda,
            Side::Host(h) => h.hpda,
        })
    }

    fn data_limit(&self, kind: Kind) -> u32 {
        match (self.side, kind) {
            (Side::Controller(c), Kind::Cmd) => c.max_icd,
            (Side::Controller(c), Kind::H2CData) => c.maxh2cdata,
            (Side::Host(h), Kind::C2HData) => h.max_c2h_data,
            _ => 0,
        }
    }

    fn on_common_header(&mut self) -> Result<(), FramerError> {
        self.frame = self.check_common(get_bytes(&self.buf, 0..HDR_LEN))?;
        self.stage = Stage::Header;
        Ok(())
    }

    /// Checks the common header `ch` (8 bytes) and returns the layout of its PDU, in
    /// stages: the type may come this way; a termination request has its own layout;
    /// the connection is (or is not yet) initialized; the flags fit the type and the
    /// negotiated digests; the lengths fit the type; then where the data is, if any.
    fn check_common(&self, ch: &[u8]) -> Result<Frame, FramerError> {
        let ch = Header::new_unchecked(ch);
        let fl = ch.flags();
        let hlen = usize::from(ch.hlen());
        let pdo = usize::from(ch.pdo());
        let plen = ch.plen() as usize;
        let info = self.receivable(ch.pdu_type())?;
        if matches!(info.kind, Kind::H2CTerm | Kind::C2HTerm) {
            return term_frame(info.kind, fl, hlen, plen);
        }
        self.check_sequence(info.kind)?;
        let (want_hdgst, want_ddgst) = self
            .negotiated
            .map_or((false, false), |n| (n.header_digest, n.data_digest));
        let hdgst = want_hdgst && info.hdgst;
        check_flags(&info, fl, hdgst)?;
        let full = check_lengths(&info, hlen, plen, hdgst)?;
        let mut frame = Frame {
            kind: info.kind,
            flags: fl,
            hlen,
            plen,
            hdgst,
            ddgst: false,
            data_start: full,
            data_len: 0,
        };
        if !info.data {
            check_no_data(pdo, plen, full)?;
        } else if plen > full {
            self.place_data(&mut frame, fl, pdo, want_ddgst)?;
        } else {
            self.check_empty_data(fl, pdo, full)?;
        }
        Ok(frame)
    }

    /// The type's facts, if this side receives that type.
    fn receivable(&self, t: u8) -> Result<TypeInfo, FramerError> {
        match type_info(t) {
            Some(info) if self.role().receives(t) => Ok(info),
            _ => Err(FramerError::header(
                offset::TYPE,
                "unknown PDU type or wrong direction",
            )),
        }
    }

    /// ICReq/ICResp first and only once; everything else after them.
    fn check_sequence(&self, kind: Kind) -> Result<(), FramerError> {
        let initializing = matches!(kind, Kind::IcReq | Kind::IcResp);
        match (self.negotiated, initializing) {
            (None, false) => Err(FramerError::PduSequence {
                reason: "PDU before the connection was initialized",
            }),
            (Some(_), true) => Err(FramerError::PduSequence {
                reason: "connection already initialized",
            }),
            _ => Ok(()),
        }
    }

    /// A PDU that carries data (`plen` beyond the header and its digest): where the
    /// data starts (PDO, aligned as negotiated), the data digest flag as negotiated,
    /// and the data length within this side's limit for the type.
    fn place_data(
        &self,
        frame: &mut Frame,
        fl: u8,
        pdo: usize,
        want_ddgst: bool,
    ) -> Result<(), FramerError> {
        use FramerError as E;
        let (full, plen) = (frame.data_start, frame.plen);
        if pdo < full {
            return Err(E::header(offset::PDO, "data offset inside the header"));
        }
        if pdo >= plen {
            return Err(E::header(offset::PDO, "data offset beyond the PDU"));
        }
        if !pdo.is_multiple_of(self.rx_align()) {
            return Err(E::header(
                offset::PDO,
                "data offset not aligned to the PDU data alignment",
            ));
        }
        if (fl & flags::DDGST != 0) != want_ddgst {
            return Err(E::header(
                offset::FLAGS,
                "DDGSTF does not match the negotiated data digest",
            ));
        }
        let digest = if want_ddgst { DIGEST_LEN } else { 0 };
        let data_len = plen - pdo;
        if data_len <= digest {
            return Err(E::header(offset::PLEN, "PDU too short for its data digest"));
        }
        let data_len = data_len - digest;
        let limit = self.data_limit(frame.kind);
        if data_len > limit as usize {
            return Err(E::DataLimitExceeded {
                len: u32::try_from(data_len).unwrap_or(u32::MAX),
                limit,
            });
        }
        frame.ddgst = want_ddgst;
        frame.data_start = pdo;
        frame.data_len = data_len;
        Ok(())
    }

    /// A type that may carry data but this PDU has none: no data digest flag, and a
    /// PDO of 0 or exactly (and aligned) at the end of the header.
    fn check_empty_data(&self, fl: u8, pdo: usize, full: usize) -> Result<(), FramerError> {
        if fl & flags::DDGST != 0 {
            return Err(FramerError::header(
                offset::FLAGS,
                "DDGSTF in a PDU without data",
            ));
        }
        if pdo != 0 && (pdo != full || !pdo.is_multiple_of(self.rx_align())) {
            return Err(FramerError::header(
                offset::PDO,
                "data offset in a PDU without data",
            ));
        }
        Ok(())
    }

    fn on_header(&mut self) -> Result<(), FramerError> {
        let f = self.frame;
        check_header(&f, &self.buf)?;
        let hdr = get_bytes(&self.buf, 0..f.hlen);
        match (f.kind, self.side) {
            (Kind::IcReq, Side::Controller(cfg)) => {
                let v = IcReq::new_unchecked(hdr);
                let req = IcReqParams {
                    pfv: v.pfv(),
                    hpda: v.hpda(),
                    digest: v.digest(),
                    maxr2t: v.maxr2t(),
                };
                self.negotiated = Some(accept_icreq(&cfg, &req)?);
            }
            (Kind::IcResp, Side::Host(cfg)) => {
                let v = IcResp::new_unchecked(hdr);
                let resp = IcRespParams {
                    pfv: v.pfv(),
                    cpda: v.cpda(),
                    digest: v.digest(),
                    maxh2cdata: v.maxdata(),
                };
                self.negotiated = Some(accept_icresp(&cfg, &resp)?);
            }
            _ => {}
        }
        self.stage = Stage::Payload;
        Ok(())
    }

    fn on_payload(&mut self) {
        let skipped = self.skipped_digest.take().map(|dg| dg.value());
        self.digest_error = data_digest_error(&self.frame, &self.buf, skipped);
        self.stage = Stage::Ready;
    }

    fn parse(&mut self) -> Pdu<'_> {
        let f = &self.frame;
        if matches!(f.kind, Kind::H2CData | Kind::C2HData) {
            self.last_placed = self.placed_from.map(|_| f.data_len);
        }
        parse(f, &self.buf, self.placed_from.unwrap_or(f.data_len))
    }
}

/// The checks on a PDU's header once it is in (`pdu` holds at least `f.hlen` bytes and
/// the header digest): the header digest, and DATAL of a data PDU against its length.
/// A termination request's layout: a 24-byte header and at most 152 bytes of data
/// (the PDU in error), no digests.
fn term_frame(kind: Kind, fl: u8, hlen: usize, plen: usize) -> Result<Frame, FramerError> {
    if hlen != TERM_HDR_LEN {
        return Err(FramerError::MalformedTermReq {
            reason: "header length is not 24",
        });
    }
    if !(TERM_HDR_LEN..=MAX_TERM_PLEN_ACCEPTED).contains(&plen) {
        return Err(FramerError::MalformedTermReq {
            reason: "PDU length outside 24..=176",
        });
    }
    Ok(Frame {
        kind,
        flags: fl,
        hlen,
        plen,
        hdgst: false,
        ddgst: false,
        data_start: hlen,
        data_len: plen - hlen,
    })
}

/// Flags the type allows, SUCCESS only with LAST_PDU on C2HData, and HDGSTF exactly
/// when a header digest was negotiated for the type.
fn check_flags(info: &TypeInfo, fl: u8, hdgst: bool) -> Result<(), FramerError> {
    if fl & !info.valid_flags != 0 {
        return Err(FramerError::header(
            offset::FLAGS,
            "flag not valid for the PDU type",
        ));
    }
    if info.kind == Kind::C2HData
        && fl & (flags::DATA_LAST | flags::DATA_SUCCESS) == flags::DATA_SUCCESS
    {
        return Err(FramerError::header(
            offset::FLAGS,
            "SUCCESS without LAST_PDU",
        ));
    }
    if (fl & flags::HDGST != 0) != hdgst {
        return Err(FramerError::header(
            offset::FLAGS,
            "HDGSTF does not match the negotiated header digest",
        ));
    }
    Ok(())
}

/// The type's header length, and a PDU length that holds the header and its digest;
/// returns the bytes before any data (header and header digest).
fn check_lengths(
    info: &TypeInfo,
    hlen: usize,
    plen: usize,
    hdgst: bool,
) -> Result<usize, FramerError> {
    if hlen != info.hlen {
        return Err(FramerError::header(
            offset::HLEN,
            "wrong header length for the PDU type",
        ));
    }
    let full = hlen + if hdgst { DIGEST_LEN } else { 0 };
    if plen < full {
        return Err(FramerError::header(
            offset::PLEN,
            "PDU length shorter than its header",
        ));
    }
    Ok(full)
}

/// A type without data: no PDO, and the PDU is exactly its header (and digest).
fn check_no_data(pdo: usize, plen: usize, full: usize) -> Result<(), FramerError> {
    if pdo != 0 {
        return Err(FramerError::header(
            offset::PDO,
            "data offset in a PDU without data",
        ));
    }
    if plen != full {
        return Err(FramerError::header(
            offset::PLEN,
            "PDU length is not its header length",
        ));
    }
    Ok(())
}

fn check_header(f: &Frame, pdu: &[u8]) -> Result<(), FramerError> {
    let hdr = get_bytes(pdu, 0..f.hlen);
    if f.hdgst {
        let received = get_u32(pdu, f.hlen..f.hlen + DIGEST_LEN);
        let computed = header_digest(hdr);
        if received != computed {
            return Err(FramerError::HeaderDigest { received, computed });
        }
    }
    if matches!(f.kind, Kind::H2CData | Kind::C2HData)
        && DataPdu::new_unchecked(hdr).data_length() as usize != f.data_len
    {
        return Err(FramerError::header(
            offset::DATA_LENGTH,
            "DATAL does not match the PDU data length",
        ));
    }
    Ok(())
}

/// The data digest check of a complete PDU (`pdu` holds its `f.plen` bytes; its data
/// unless `skipped` is the digest of the data, part of which was received elsewhere).
fn data_digest_error(f: &Frame, pdu: &[u8], skipped: Option<u32>) -> Option<FramerError> {
    if !f.ddgst {
        return None;
    }
    let computed = match skipped {
        Some(d) => d,
        None => data_digest(get_bytes(pdu, f.data_start..f.data_start + f.data_len)),
    };
    let received = get_u32(pdu, f.plen.saturating_sub(DIGEST_LEN)..f.plen);
    (received != computed).then(|| FramerError::DataDigest {
        pdu_type: pdu.first().copied().unwrap_or(0),
        cid: cid(f.kind, pdu),
        received,
        computed,
    })
}

/// The command identifier of a capsule or data PDU.
fn cid(kind: Kind, pdu: &[u8]) -> u16 {
    let at = match kind {
        Kind::Cmd => (offset::CMD + u32::from(sqe::offset::CID)) as usize,
        _ => offset::COMMAND_ID as usize,
    };
    get_u16(pdu, at..at + 2)
}

/// The PDU `f` describes, from its checked bytes, of which the first `held` data
/// bytes are in `pdu` (a data PDU's others were received elsewhere).
fn parse<'b>(f: &Frame, pdu: &'b [u8], held: usize) -> Pdu<'b> {
    let hdr = get_bytes(pdu, 0..f.hlen);
    let data = get_bytes(pdu, f.data_start..f.data_start + f.data_len.min(held));
    // DATAL came from a 32-bit field (and was checked against the PDU length).
    let datal = f.data_len as u32;
    match f.kind {
        Kind::IcReq => {
            let v = IcReq::new_unchecked(hdr);
            Pdu::IcReq(IcReqParams {
                pfv: v.pfv(),
                hpda: v.hpda(),
                digest: v.digest(),
                maxr2t: v.maxr2t(),
            })
        }
        Kind::IcResp => {
            let v = IcResp::new_unchecked(hdr);
            Pdu::IcResp(IcRespParams {
                pfv: v.pfv(),
                cpda: v.cpda(),
                digest: v.digest(),
                maxh2cdata: v.maxdata(),
            })
        }
        Kind::H2CTerm | Kind::C2HTerm => {
            let v = TermReq::new_unchecked(hdr);
            let (fes, fei) = (v.fes(), v.fei());
            if f.kind == Kind::H2CTerm {
                Pdu::H2CTermReq { fes, fei, data }
            } else {
                Pdu::C2HTermReq { fes, fei, data }
            }
        }
        Kind::Cmd => Pdu::CapsuleCmd {
            // The header's length was checked: the SQE is there.
            sqe: CapsuleCmd::new_unchecked(hdr).sqe().unwrap_or(&NO_SQE),
            data,
        },
        Kind::Rsp => Pdu::CapsuleResp {
            cqe: get_bytes_n(CapsuleResp::new_unchecked(hdr).cqe(), 0..CQE_LEN),
        },
        Kind::H2CData => {
            let v = DataPdu::new_unchecked(hdr);
            Pdu::H2CData {
                cid: v.command_id(),
                ttag: v.ttag(),
                datao: v.data_offset(),
                datal,
                last: f.flags & flags::DATA_LAST != 0,
                data,
            }
        }
        Kind::C2HData => {
            let v = DataPdu::new_unchecked(hdr);
            Pdu::C2HData {
                cid: v.command_id(),
                ttag: v.ttag(),
                datao: v.data_offset(),
                datal,
                last: f.flags & flags::DATA_LAST != 0,
                success: f.flags & flags::DATA_SUCCESS != 0,
                data,
            }
        }
        Kind::R2T => {
            let v = R2t::new_unchecked(hdr);
            Pdu::R2T {
                cid: v.command_id(),
                ttag: v.ttag(),
                offset: v.r2t_offset(),
                length: v.r2t_length(),
            }
        }
    }
}
