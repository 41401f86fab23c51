//! One NBD client connection in transmission: non-blocking input parsing and reply
//! encoding.
//!
//! Owned by `map`'s workers. Bytes read from the socket accumulate in an input buffer
//! until a whole request (header, and payload for WRITE) is there; replies accumulate
//! in an output buffer written whenever the socket takes them. Replies go out in
//! completion order (NBD matches them by handle). With structured replies negotiated
//! a READ is answered with one `NBD_REPLY_TYPE_OFFSET_DATA` chunk (or an error chunk);
//! every other command with a simple reply, as the protocol allows.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use super::proto::{self, chunk, cmd, Request, REQUEST_LEN};
use super::stream::Stream;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 256 * 1024;
/// How long a socket that had nothing to read is not read again.
const EMPTY_READ_BACKOFF: Duration = Duration::from_micros(10);

/// What a non-blocking read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadState {
    /// Bytes arrived.
    Data,
    /// Nothing to read now.
    Empty,
    /// The client closed its side.
    Eof,
}

pub struct Conn {
    pub stream: Stream,
    pub structured: bool,
    /// The largest WRITE payload accepted (larger ones end the connection).
    max_payload: u32,
    /// Input buffer: `rbuf[rstart..rend]` holds bytes not yet parsed. Allocated once
    /// (zeroed once), grown only for a WRITE larger than it.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Bytes the request at `rstart` needs in all (header and payload), once known.
    want: usize,
    /// No read before this instant (after an empty read).
    quiet_until: Option<Instant>,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Requests parsed and not yet answered.
    pub inflight: usize,
    /// False after NBD_CMD_DISC, EOF, a protocol error, or a stop: no more requests.
    pub reading: bool,
    /// An I/O error on the socket: drop the connection without further replies.
    pub broken: bool,
}

impl Conn {
    pub fn new(stream: Stream, structured: bool, max_payload: u32) -> Conn {
        Conn {
            stream,
            structured,
            max_payload,
            rbuf: vec![0; 2 * READ_CHUNK],
            rstart: 0,
            rend: 0,
            want: REQUEST_LEN,
            quiet_until: None,
            wbuf: Vec::with_capacity(READ_CHUNK),
            wpos: 0,
            inflight: 0,
            reading: true,
            broken: false,
        }
    }

    /// Reads what the socket has (non-blocking). After a read that found nothing the
    /// socket is left alone for [`EMPTY_READ_BACKOFF`]: empty reads in a tight loop
    /// contend with the client's writes for the socket.
    pub fn fill(&mut self) -> io::Result<ReadState> {
        let now = Instant::now();
        if self.quiet_until.is_some_and(|t| now < t) {
            return Ok(ReadState::Empty);
        }
        self.quiet_until = None;
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        // Room for a read of READ_CHUNK, or for the rest of the request being parsed.
        let need = READ_CHUNK.max(self.want);
        if self.rbuf.len() - self.rend < need {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rbuf.len() - self.rend < need {
                self.rbuf.resize(self.rend + need, 0);
            }
        }
        let r = loop {
            match self
                .stream
                .read(self.rbuf.get_mut(self.rend..).unwrap_or_default())
            {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match r {
            Ok(0) => Ok(ReadState::Eof),
            Ok(n) => {
                self.rend += n;
                Ok(ReadState::Data)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.quiet_until = Some(now + EMPTY_READ_BACKOFF);
                Ok(ReadState::Empty)
            }
            Err(e) => Err(e),
        }
    }

    /// The next whole request and its payload (copied into `payload`, which is cleared
    /// first); `Ok(None)` when more bytes are needed; `Err` on a protocol violation.
    pub fn next_request(&mut self, payload: &mut Vec<u8>) -> Result<Option<Request>, String> {
        let avail = self.rbuf.get(self.rstart..self.rend).unwrap_or_default();
        let Some(r) = Request::parse(avail) else {
            self.want = REQUEST_LEN;
            return Ok(None);
        };
        if r.magic != proto::REQUEST_MAGIC {
            return Err(format!("request magic {:#x}", r.magic));
        }
        let plen = if r.has_payload() {
            if r.length > self.max_payload {
                return Err(format!(
                    "WRITE of {} bytes exceeds the {}-byte maximum",
                    r.length, self.max_payload
                ));
            }
            r.length as usize
        } else {
            0
        };
        let Some(data) = avail.get(REQUEST_LEN..REQUEST_LEN + plen) else {
            self.want = REQUEST_LEN + plen;
            return Ok(None);
        };
        payload.clear();
        payload.extend_from_slice(data);
        self.rstart += REQUEST_LEN + plen;
        self.want = REQUEST_LEN;
        Ok(Some(r))
    }

    /// Queues the reply to a successful request; `data` is a READ's data.
    pub fn reply_ok(&mut self, kind: u16, handle: u64, offset: u64, data: &[u8]) {
        if kind == cmd::READ && self.structured {
            if data.is_empty() {
                proto::put_chunk_header(
                    &mut self.wbuf,
                    chunk::FLAG_DONE,
                    chunk::TYPE_NONE,
                    handle,
                    0,
                );
            } else {
                proto::put_chunk_header(
                    &mut self.wbuf,
                    chunk::FLAG_DONE,
                    chunk::TYPE_OFFSET_DATA,
                    handle,
                    8 + data.len() as u32,
                );
                self.wbuf.extend_from_slice(&offset.to_be_bytes());
                self.wbuf.extend_from_slice(data);
            }
        } else {
            proto::put_simple_reply(&mut self.wbuf, 0, handle);
            if kind == cmd::READ {
                self.wbuf.extend_from_slice(data);
            }
        }
    }

    /// Queues an error reply.
    pub fn reply_err(&mut self, kind: u16, handle: u64, error: u32, message: &str) {
        if kind == cmd::READ && self.structured {
            proto::put_error_chunk(&mut self.wbuf, handle, error, message);
        } else {
            // A simple error reply carries no data, not even for READ.
            proto::put_simple_reply(&mut self.wbuf, error, handle);
        }
    }

    /// True while replies wait to be written.
    pub fn has_output(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Writes queued replies until the socket would block.
    pub fn flush_out(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            let pending = self.wbuf.get(self.wpos..).unwrap_or_default();
            match self.stream.write(pending) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Done: nothing more to read, answer or write, and no request of this connection
    /// is still in flight (its slot may be reused only then).
    pub fn finished(&self) -> bool {
        self.inflight == 0 && (self.broken || (!self.reading && !self.has_output()))
    }
}
