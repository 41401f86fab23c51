//! Moving bytes: writing queued PDUs to the non-blocking socket, reading what it
//! has into the connection (or straight into a read command's buffer), and ending
//! the queue on a fatal error.

use std::io::ErrorKind;
use std::net::Shutdown;
use std::os::fd::AsFd;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use tracing::warn;

use nvmf_common::transport::tcp::{Receiver, DIRECT_MIN};

use super::{Fatal, TcpHostQueue, TransportError, READS_PER_POLL, TERM_SEND_TIMEOUT};

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
            self.tcp.terminate(fes, fei, &mut self.conn.tx.bytes);
        }
        let tx = &mut self.conn.tx;
        let mut written = Vec::new();
        if f.flush {
            let blocking = self
                .sock
                .set_nonblocking(false)
                .and_then(|()| self.sock.set_write_timeout(Some(TERM_SEND_TIMEOUT)));
            while blocking.is_ok() && tx.pending() {
                let iov = tx.iovecs();
                let r = self.sock.write_vectored(&iov);
                drop(iov);
                match r {
                    Ok(n) if n > 0 => tx.advance(n, &mut written),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    _ => break,
                }
            }
        }
        let _ = self.sock.shutdown(Shutdown::Both);
        tx.clear(&mut written);
        self.dead = Some(why.clone());
        TransportError::Dead(why)
    }

    /// Writes queued PDUs until the socket would block.
    pub(super) fn write_out(&mut self) -> Result<(), Fatal> {
        let tx = &mut self.conn.tx;
        let sent = &mut self.conn.sent;
        // Written data segments are only dropped (their buffers are the caller's).
        let mut written = Vec::new();
        while tx.pending() {
            let iov = tx.iovecs();
            let r = self.sock.write_vectored(&iov);
            drop(iov);
            match r {
                Ok(0) => return Err(Fatal::quiet("the connection takes no more data".into())),
                Ok(n) => {
                    tx.advance(n, &mut written);
                    *sent += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fatal::quiet(format!("send failed: {e}"))),
            }
        }
        Ok(())
    }

    /// Reads and handles what the socket has.
    pub(super) fn read_in(&mut self) -> Result<(), Fatal> {
        // A poll loop that spins on `recv` finding nothing takes the socket's lock each
        // time, and the softirq delivering the controller's data then queues it on the
        // socket's backlog instead of the receive queue. `poll(2)` reads the socket's
        // state without that lock: after an empty read, ask it first.
        if self.empty && self.rx_start >= self.rx_end && !self.sock.buffered() {
            let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
            // Ready, or poll itself failed: the read below tells which.
            if let Ok(0) = nix::poll::poll(&mut fds, PollTimeout::ZERO) {
                return Ok(());
            }
        }
        let mut reads = 0;
        // The last read took what the socket had. A TLS read returns one record at
        // most, so a short one says nothing: TLS reads go on until `WouldBlock`.
        let mut drained = false;
        let tls = self.sock.is_tls();
        loop {
            // Hand every complete PDU in `rx` to the handlers (the connection puts the
            // data of a C2HData PDU that `rx` does not hold whole straight into its
            // command's buffer).
            if self.rx_start < self.rx_end {
                let input = self.rx.get(self.rx_start..self.rx_end).unwrap_or(&[]);
                self.rx_start = self.rx_end;
                self.tcp.receive(input, &mut self.conn)?;
            }
            // Another read would most likely find nothing (one system call saved).
            if (reads >= READS_PER_POLL && !self.sock.buffered()) || drained {
                return Ok(());
            }
            self.rx_start = 0;
            self.rx_end = 0;
            // The rest of a large C2HData PDU goes straight into its command's buffer.
            let wanted = self.tcp.wants_in_place(DIRECT_MIN);
            if let Some(dst) = wanted.and_then(|d| self.conn.destination(&d)) {
                let want = dst.len();
                match self.sock.read(dst) {
                    Ok(0) => {
                        return Err(Fatal::quiet(
                            "the controller closed the connection in the middle of a PDU".into(),
                        ))
                    }
                    Ok(n) => {
                        reads += 1;
                        self.empty = false;
                        drained = n < want && !tls;
                        self.tcp.placed(dst.get(..n).unwrap_or(&[]));
                        // The PDU those bytes completed, if they did.
                        self.tcp.receive_placed(&mut self.conn)?;
                        continue;
                    }
                    Err(e) => return self.read_error(e),
                }
            }
            // After a large C2HData PDU another is likely: read little, so that its
            // data goes straight into its buffer rather than through `rx`.
            let cap = self.tcp.read_len(self.rx.len());
            match self.sock.read(self.rx.get_mut(..cap).unwrap_or(&mut [])) {
                Ok(0) => {
                    let mid = if self.tcp.awaiting_peer() {
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
                    self.empty = false;
                    drained = n < cap && !tls;
                }
                Err(e) => return self.read_error(e),
            }
        }
    }

    /// A failed socket read: nothing to read (or interrupted) is not an error.
    fn read_error(&mut self, e: std::io::Error) -> Result<(), Fatal> {
        match e.kind() {
            ErrorKind::WouldBlock => {
                self.empty = true;
                Ok(())
            }
            ErrorKind::Interrupted => Ok(()),
            ErrorKind::ConnectionReset => {
                Err(Fatal::quiet("the controller reset the connection".into()))
            }
            _ => Err(Fatal::quiet(format!("receive failed: {e}"))),
        }
    }
}
