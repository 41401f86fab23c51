//! Moving bytes: writing queued PDUs to the non-blocking socket, reading what it
//! has into the framer (or straight into a read command's buffer), and ending the
//! queue on a fatal error.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;

use tracing::warn;

use nvmf_common::transport::tcp::{encode_term_req, FramerError, Role};
use nvmf_common::wire::tcp::pdu_type;

use super::{
    Fatal, TcpHostQueue, TransportError, DIRECT_MIN, OUT_COMPACT, READS_PER_POLL, SMALL_RX,
    TERM_SEND_TIMEOUT,
};

impl TcpHostQueue {
    pub(super) fn check(&self) -> Result<(), TransportError> {
        match &self.dead {
            Some(why) => Err(TransportError::Dead(why.clone())),
            None => Ok(()),
        }
    }

    /// Ends the queue: sends the termination request if there is one (after what is
    /// already queued, so the controller's framer sees whole PDUs), closes the socket,
    /// and remembers why.
    pub(super) fn die(&mut self, f: Fatal) -> TransportError {
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
    pub(super) fn write_out(&mut self) -> Result<(), Fatal> {
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
    pub(super) fn read_in(&mut self) -> Result<(), Fatal> {
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
