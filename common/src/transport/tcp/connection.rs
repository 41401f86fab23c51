//! One NVMe/TCP connection, either end, without I/O: bytes in, events and bytes out,
//! and a deadline.
//!
//! [`Connection`] owns what the target's and the host's socket drivers used to keep
//! each on their own: the framer ([`PduReader`]), connection initialization (the host
//! queues its ICReq at construction, the controller answers the ICReq with its ICResp,
//! either end builds its [`PduWriter`] from the outcome), the header of the PDU being
//! read (echoed in a termination request, and what a data digest error names), the
//! termination requests themselves, and the stall deadline.
//!
//! The driver owns the socket and the send queue. It hands received bytes to
//! [`Connection::receive`] (`super::receive`), which runs the PDUs, calls the
//! driver's handler with what each gives ([`Event`]) and puts large data PDUs' data
//! straight into their commands' buffers; [`Connection::read`] runs one PDU through
//! the framer's buffer. Bytes the connection wants sent come out through the caller's
//! buffer ([`Connection::host`], [`Connection::terminate`]) or inside the event
//! ([`Event::Established`], [`Event::Failed`]), so they go after whatever the driver
//! already queued. Capsules and data PDUs are encoded by the driver with the
//! event's [`PduWriter`] straight into its send queue (the hot path stays zero-copy).
//!
//! Order of a connection's life: `Initializing` (only an ICReq/ICResp or a termination
//! request gets through the framer) → [`Event::Established`] → PDUs → at most one of
//! [`Event::PeerTerminated`], [`Event::Failed`] or [`Connection::terminate`], after
//! which the connection yields nothing more and the driver closes the socket.

use std::time::{Duration, Instant};

use super::negotiate::{icreq_params, icresp_params};
use super::{encode_icreq, encode_icresp, encode_term_req};
use super::{ConfigError, ControllerConfig, DataProgress, FramerError, HostConfig, Negotiated};
use super::{Pdu, PduReader, PduWriter, Role};
use crate::wire::tcp::{offset, CMD_HDR_LEN};

/// Bytes kept of each PDU's start: the longest header after initialization (a
/// CapsuleCmd's), which is what termination requests echo and data digest errors name.
pub const HEADER_KEEP: usize = CMD_HDR_LEN;

/// What one PDU (or the lack of one) means for the driver.
#[derive(Debug)]
pub enum Event<'a> {
    /// Initialization completed: encode PDUs with `writer`. `send` holds the
    /// controller's ICResp (empty on the host), to be sent before anything else.
    Established {
        negotiated: Negotiated,
        writer: PduWriter,
        send: &'a [u8],
    },
    /// A capsule, data or R2T PDU that passed every check of the framer.
    Pdu(Pdu<'a>),
    /// A PDU whose data failed its digest: its data is dropped and the command it
    /// names fails; the connection goes on. `header` is the PDU's header (CapsuleCmd:
    /// with its SQE).
    DataDigest {
        error: FramerError,
        header: &'a [u8],
    },
    /// The peer sent a termination request: close without answering.
    PeerTerminated { fes: u16, fei: u32 },
    /// The peer broke the protocol. `send` is the termination request to send before
    /// closing (empty when the error calls for none, as a malformed termination
    /// request).
    Failed { error: FramerError, send: &'a [u8] },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Initializing,
    Established,
    /// Terminated by either side: nothing more is read.
    Closed,
}

/// One NVMe/TCP connection's protocol state (see the module documentation).
#[derive(Debug)]
pub struct Connection {
    pub(super) reader: PduReader,
    state: State,
    negotiated: Option<Negotiated>,
    /// The first bytes of the PDU being read (of the last one until the next starts).
    hdr: [u8; HEADER_KEEP],
    hdr_len: usize,
    /// The last PDU was handed out: the next byte read starts a new one.
    pdu_done: bool,
    /// A PDU the connection sends itself (ICResp, a termination request), lent out in
    /// an event.
    control: Vec<u8>,
    /// How long the peer may leave us waiting (see [`Connection::deadline`]).
    timeout: Duration,
    last_progress: Instant,
    wait_start: Option<Instant>,
}

impl Connection {
    /// The controller end of an accepted connection; the peer owes an ICReq within
    /// `timeout` of `now`, and later any PDU it started.
    pub fn controller(
        cfg: ControllerConfig,
        timeout: Duration,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(PduReader::controller(cfg)?, timeout, now))
    }

    /// The host end of a new connection: appends the ICReq to `out` (send it first).
    pub fn host(
        cfg: HostConfig,
        timeout: Duration,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Result<Self, ConfigError> {
        let reader = PduReader::host(cfg)?;
        encode_icreq(&icreq_params(&cfg), out);
        Ok(Self::new(reader, timeout, now))
    }

    fn new(reader: PduReader, timeout: Duration, now: Instant) -> Self {
        Connection {
            reader,
            state: State::Initializing,
            negotiated: None,
            hdr: [0; HEADER_KEEP],
            hdr_len: 0,
            pdu_done: false,
            control: Vec::new(),
            timeout,
            last_progress: now,
            wait_start: Some(now),
        }
    }

    pub fn role(&self) -> Role {
        self.reader.role()
    }

    /// What initialization settled, once it did.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Whether the peer owes us something: the ICReq/ICResp, or the rest of a PDU.
    pub fn awaiting_peer(&self) -> bool {
        self.state == State::Initializing || self.reader.has_partial_pdu()
    }

    /// The header of the PDU being read (or of the last one handed out, until the
    /// next starts), as far as it has arrived and at most its HLEN.
    pub fn header(&self) -> &[u8] {
        header_of(&self.hdr, self.hdr_len)
    }

    /// Feeds `input` and runs at most one PDU: returns the bytes consumed and, when a
    /// PDU completed (or the connection failed), what `handle` made of its event.
    /// `None`: every byte was consumed and no PDU is complete yet (or the connection
    /// is closed and reads nothing more).
    #[inline]
    pub fn read<R>(
        &mut self,
        input: &[u8],
        handle: impl FnOnce(Event<'_>) -> R,
    ) -> (usize, Option<R>) {
        self.read_with(input, false, handle)
    }

    /// [`read`](Connection::read), except that the reader stops at the start of a data
    /// PDU's data when the whole PDU is not in `input` (see
    /// [`PduReader::read_to_data`]): the driver then receives the data where it
    /// belongs and accounts for it with [`skip_data`](Connection::skip_data).
    #[inline]
    pub fn read_to_data<R>(
        &mut self,
        input: &[u8],
        handle: impl FnOnce(Event<'_>) -> R,
    ) -> (usize, Option<R>) {
        self.read_with(input, true, handle)
    }

    /// The data PDU whose data may be received elsewhere (see
    /// [`PduReader::data_in_progress`]).
    pub fn data_in_progress(&self) -> Option<DataProgress> {
        match self.state {
            State::Established => self.reader.data_in_progress(),
            _ => None,
        }
    }

    /// Counts the data bytes `data` the driver put where they belong (see
    /// [`PduReader::skip_data`]); returns how many were counted. Once the PDU is
    /// complete, [`read`](Connection::read) hands it out (with no input, or with the
    /// data digest's bytes when the PDU has one).
    pub fn skip_data(&mut self, data: &[u8]) -> usize {
        match self.state {
            State::Established => self.reader.skip_data(data),
            _ => 0,
        }
    }

    // Inlined into the driver's receive loop, with the handler called at one place:
    // the event and its PDU are built where the handler takes them.
    #[inline(always)]
    fn read_with<R>(
        &mut self,
        input: &[u8],
        to_data: bool,
        handle: impl FnOnce(Event<'_>) -> R,
    ) -> (usize, Option<R>) {
        match self.state {
            State::Closed => (0, None),
            State::Initializing => {
                let (used, event) = self.initialization_event(input);
                (used, event.map(handle))
            }
            State::Established => {
                if self.pdu_done && !input.is_empty() {
                    self.hdr_len = 0;
                    self.pdu_done = false;
                }
                let (used, out) = if to_data {
                    self.reader.read_to_data(input)
                } else {
                    self.reader.read(input)
                };
                keep_header(&mut self.hdr, &mut self.hdr_len, input.get(..used));
                let event = match out {
                    None => return (used, None),
                    Some(Ok(
                        Pdu::H2CTermReq { fes, fei, .. } | Pdu::C2HTermReq { fes, fei, .. },
                    )) => {
                        self.state = State::Closed;
                        Event::PeerTerminated { fes, fei }
                    }
                    Some(Ok(pdu)) => {
                        self.pdu_done = true;
                        Event::Pdu(pdu)
                    }
                    Some(Err(error)) if !error.is_fatal() => {
                        self.pdu_done = true;
                        let header = header_of(&self.hdr, self.hdr_len);
                        Event::DataDigest { error, header }
                    }
                    // The reader is poisoned: nothing borrows it any more.
                    Some(Err(error)) => self.fail(error),
                };
                // Handed over where it is built (not through an `Option` first).
                (used, Some(handle(event)))
            }
        }
    }

    /// Before initialization completed: only an ICReq (controller) or ICResp (host)
    /// or a termination request gets through the framer, so nothing borrows input.
    fn initialization_event(&mut self, input: &[u8]) -> (usize, Option<Event<'_>>) {
        let used = match self.reader.feed(input) {
            Ok(n) => n,
            Err(error) => return (0, Some(self.fail(error))),
        };
        enum Outcome {
            Ready,
            Term(u16, u32),
            Unexpected,
        }
        let outcome = match self.reader.poll() {
            None => return (used, None),
            Some(Err(error)) => return (used, Some(self.fail(error))),
            Some(Ok(Pdu::IcReq(_) | Pdu::IcResp(_))) => Outcome::Ready,
            Some(Ok(Pdu::H2CTermReq { fes, fei, .. } | Pdu::C2HTermReq { fes, fei, .. })) => {
                Outcome::Term(fes, fei)
            }
            Some(Ok(_)) => Outcome::Unexpected,
        };
        let negotiated = match (outcome, self.reader.negotiated()) {
            (Outcome::Ready, Some(n)) => n,
            (Outcome::Term(fes, fei), _) => {
                self.state = State::Closed;
                return (used, Some(Event::PeerTerminated { fes, fei }));
            }
            // The framer lets nothing else through before initialization, and records
            // what it accepted; should that ever not hold, the connection ends.
            _ => {
                let error = FramerError::PduSequence {
                    reason: "PDU before connection initialization",
                };
                return (used, Some(self.fail(error)));
            }
        };
        self.state = State::Established;
        self.negotiated = Some(negotiated);
        self.wait_start = None;
        let role = self.role();
        self.control.clear();
        if role == Role::Controller {
            encode_icresp(&icresp_params(&negotiated), &mut self.control);
        }
        let event = Event::Established {
            negotiated,
            writer: PduWriter::new(role, &negotiated),
            send: &self.control,
        };
        (used, Some(event))
    }

    /// A fatal framer error: the termination request it calls for goes out in the
    /// event, and the connection reads nothing more.
    fn fail(&mut self, error: FramerError) -> Event<'_> {
        self.state = State::Closed;
        self.control.clear();
        self.reader.termination_request(&mut self.control);
        Event::Failed {
            error,
            send: &self.control,
        }
    }

    /// Ends the connection for an error the driver found in a PDU the framer accepted
    /// (an unknown command id, data outside its window): appends the termination
    /// request naming field `fei` of the current PDU's header (`fes`: a
    /// `wire::tcp::term_fes` code) to `out`. Nothing is read after it.
    pub fn terminate(&mut self, fes: u16, fei: u32, out: &mut Vec<u8>) {
        encode_term_req(self.role(), fes, fei, self.header(), out);
        self.state = State::Closed;
    }

    /// Bytes moved in either direction at `now`: the peer is making progress.
    pub fn progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    /// When the connection should end for want of progress, given whether the driver
    /// waits for the peer (`outstanding`: data it asked for, bytes it cannot send)
    /// besides what the connection itself waits for ([`awaiting_peer`]). `None` while
    /// nothing is owed. The clock starts at the first call that finds something owed
    /// (at construction for initialization) and restarts with every
    /// [`progress`](Connection::progress).
    ///
    /// [`awaiting_peer`]: Connection::awaiting_peer
    pub fn deadline(&mut self, now: Instant, outstanding: bool) -> Option<Instant> {
        if self.state == State::Closed || !(outstanding || self.awaiting_peer()) {
            self.wait_start = None;
            return None;
        }
        let since = (*self.wait_start.get_or_insert(now)).max(self.last_progress);
        Some(since + self.timeout)
    }
}

/// The kept bytes of a PDU, cut at its HLEN once that byte has arrived.
fn header_of(hdr: &[u8; HEADER_KEEP], len: usize) -> &[u8] {
    let kept = hdr.get(..len).unwrap_or(&[]);
    match kept.get(offset::HLEN as usize) {
        Some(&hlen) => kept.get(..usize::from(hlen)).unwrap_or(kept),
        None => kept,
    }
}

/// Appends the start of a PDU's bytes to the kept header, up to [`HEADER_KEEP`].
#[inline]
fn keep_header(hdr: &mut [u8; HEADER_KEEP], len: &mut usize, bytes: Option<&[u8]>) {
    let bytes = bytes.unwrap_or(&[]);
    let take = HEADER_KEEP.saturating_sub(*len).min(bytes.len());
    if let (Some(dst), Some(src)) = (hdr.get_mut(*len..*len + take), bytes.get(..take)) {
        dst.copy_from_slice(src);
        *len += take;
    }
}
