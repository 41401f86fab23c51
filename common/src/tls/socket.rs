//! The byte stream under the NVMe/TCP framer: a plain TCP socket, or TLS records on
//! one ([`TlsStream`], OpenSSL's record layer in user space).
//!
//! Reads and writes are non-blocking and report `WouldBlock` as the plain socket
//! does. TLS reads return at most one record's data per call, and data already
//! decrypted waits in the TLS layer where epoll cannot see it: a reader that stops on
//! a short read must first ask [`Socket::buffered`]. Gathered writes are copied into
//! one record-sized buffer, so a write of a PDU header and its data makes one record.

#![forbid(unsafe_code)]

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use openssl::ssl::SslStream;

/// The most plaintext one TLS record carries (RFC 8446 5.1).
pub const MAX_RECORD_PLAINTEXT: usize = 16 * 1024;

/// A connection's protected stream.
pub struct TlsStream {
    pub(super) ssl: SslStream<TcpStream>,
    /// Gathered bytes of the write in progress.
    stage: Vec<u8>,
}

/// OpenSSL's receive buffer once it reads ahead: several records per `read`.
const READ_AHEAD_BUFFER: usize = 256 * 1024;

impl TlsStream {
    pub(super) fn new(ssl: SslStream<TcpStream>) -> TlsStream {
        TlsStream {
            ssl,
            stage: Vec::with_capacity(MAX_RECORD_PLAINTEXT),
        }
    }

    /// Records stay in user space from here on: read ahead.
    pub(super) fn user_space(self) -> TlsStream {
        // `&mut self`: no one else uses the SSL while its settings change.
        super::ffi::read_ahead(self.ssl.ssl(), READ_AHEAD_BUFFER);
        self
    }

    /// The negotiated cipher suite's name.
    pub fn cipher_name(&self) -> &'static str {
        self.ssl.ssl().current_cipher().map_or("none", |c| c.name())
    }
}

/// The stream under the framer.
pub enum Socket {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Socket {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Plain(s) => s,
            Socket::Tls(t) => t.ssl.get_ref(),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Socket::Tls(_))
    }

    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(s) => s.read(buf),
            Socket::Tls(t) => t.ssl.read(buf),
        }
    }

    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(s) => s.write(buf),
            Socket::Tls(t) => t.ssl.write(buf),
        }
    }

    /// Writes from several buffers; TLS gathers up to a record's worth first. A
    /// write that would block is retried by the caller with the same leading bytes
    /// (what OpenSSL requires), which the unadvanced queue gives.
    pub fn write_vectored(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        let t = match self {
            Socket::Plain(s) => return s.write_vectored(iov),
            Socket::Tls(t) => t,
        };
        let mut parts = iov.iter().filter(|b| !b.is_empty());
        let Some(first) = parts.next() else {
            return Ok(0);
        };
        if first.len() >= MAX_RECORD_PLAINTEXT {
            return t.ssl.write(first);
        }
        t.stage.clear();
        for b in std::iter::once(first).chain(parts) {
            let room = MAX_RECORD_PLAINTEXT - t.stage.len();
            if room == 0 {
                break;
            }
            t.stage
                .extend_from_slice(b.get(..room.min(b.len())).unwrap_or(b));
        }
        t.ssl.write(&t.stage)
    }

    /// Writes all of `buf` (blocking sockets; for last words before a close).
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.write_all(buf),
            Socket::Tls(t) => t.ssl.write_all(buf),
        }
    }

    /// Whether decrypted bytes wait in the TLS layer (a read would return them
    /// without the socket becoming readable).
    pub fn buffered(&self) -> bool {
        match self {
            Socket::Plain(_) => false,
            Socket::Tls(t) => super::ffi::has_pending(t.ssl.ssl()),
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(on)
    }

    pub fn set_write_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        self.tcp().set_write_timeout(t)
    }

    /// Shuts the socket down; a TLS stream first sends its close_notify alert (best
    /// effort: a full socket buffer does not delay the close).
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if let (Socket::Tls(t), Shutdown::Write | Shutdown::Both) = (&mut *self, how) {
            let _ = t.ssl.shutdown();
        }
        self.tcp().shutdown(how)
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl From<TcpStream> for Socket {
    fn from(s: TcpStream) -> Socket {
        Socket::Plain(s)
    }
}

impl From<TlsStream> for Socket {
    /// A connection whose records stay in user space (it reads ahead).
    fn from(t: TlsStream) -> Socket {
        Socket::Tls(Box::new(t.user_space()))
    }
}
