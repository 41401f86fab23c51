//! The TLS 1.3 handshake of an NVMe/TCP connection (TP 8011), before the ICReq:
//! pre-shared keys only (no certificates), TLS 1.3 only, the cipher suites
//! TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384, no session tickets.
//!
//! The controller ([`accept`]) learns from the host's PSK identity which host and
//! subsystem it speaks for (`NVMe0R01 <hostnqn> <subnqn>`), derives that pair's TLS
//! PSK from the host's configured key ([`PskLookup`]) and accepts only if the identity
//! the key yields is the one offered. The host ([`connect`]) offers its identity and
//! the PSK derived from its configured key. Both run on a blocking-free socket with
//! one deadline for the whole exchange, so a peer that stalls mid-handshake costs a
//! thread at most until then.

#![forbid(unsafe_code)]

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use openssl::ex_data::Index;
use openssl::ssl::{
    ErrorCode, HandshakeError, Ssl, SslContext, SslContextBuilder, SslMethod, SslMode,
    SslSessionCacheMode, SslStream, SslVersion,
};
use parking_lot::Mutex;

use super::ffi;
use super::ktls::{self, Offload, TrafficSecrets};
use super::psk::{ConfiguredPsk, Derivation, Derived, IdentityVersion, PskHash};
use super::role::{ControllerPsk, HostPsk, PskRole};
pub use super::role::{PskLookup, TlsPeer};
use super::socket::TlsStream;

/// The TLS record content type of a handshake message (RFC 8446 5.1): the first byte
/// of a ClientHello, where a plain NVMe/TCP connection starts with an ICReq (PDU type 0).
pub const CONTENT_TYPE_HANDSHAKE: u8 = 22;
/// The cipher suites NVMe/TCP allows (TP 8011 3.6.1.4), in OpenSSL's names.
const CIPHER_SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

/// Why a handshake failed. Never contains a key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS setup failed: {0}")]
    Setup(String),
    #[error("TLS handshake I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("TLS handshake did not finish within {0:?}")]
    Timeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
}

fn base_context() -> Result<SslContextBuilder, TlsError> {
    let setup = |e: openssl::error::ErrorStack| TlsError::Setup(e.to_string());
    let mut b = SslContextBuilder::new(SslMethod::tls()).map_err(setup)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_ciphersuites(CIPHER_SUITES).map_err(setup)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    // Tickets would be records after the handshake that neither side uses (and that
    // kernel TLS would have to skip).
    b.set_num_tickets(0).map_err(setup)?;
    // Non-blocking sockets: a write may stop between records and resume with the same
    // bytes at another address.
    b.set_mode(SslMode::ENABLE_PARTIAL_WRITE | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    // The application traffic secrets, for kernel TLS (nothing else is kept).
    b.set_keylog_callback(|ssl, line| {
        if let Some(m) = secrets_index().ok().and_then(|i| ssl.ex_data(i)) {
            m.lock().record(line);
        }
    });
    Ok(b)
}

/// The ex-data slot of a connection's traffic secrets.
fn secrets_index() -> Result<Index<Ssl, Mutex<TrafficSecrets>>, openssl::error::ErrorStack> {
    static INDEX: OnceLock<Index<Ssl, Mutex<TrafficSecrets>>> = OnceLock::new();
    if let Some(i) = INDEX.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index::<Mutex<TrafficSecrets>>()?;
    Ok(*INDEX.get_or_init(|| i))
}

fn context(host: bool) -> Result<&'static SslContext, TlsError> {
    static CONTROLLER: OnceLock<Result<SslContext, String>> = OnceLock::new();
    static HOST: OnceLock<Result<SslContext, String>> = OnceLock::new();
    let cell = if host { &HOST } else { &CONTROLLER };
    let built = cell.get_or_init(|| {
        let mut b = base_context().map_err(|e| e.to_string())?;
        if host {
            ffi::install_use_session(&mut b);
        } else {
            ffi::install_find_session(&mut b);
        }
        Ok(b.build())
    });
    built.as_ref().map_err(|e| TlsError::Setup(e.clone()))
}

fn new_ssl(host: bool, role: PskRole) -> Result<Ssl, TlsError> {
    let setup = |e: openssl::error::ErrorStack| TlsError::Setup(e.to_string());
    let mut ssl = Ssl::new(context(host)?).map_err(setup)?;
    ssl.set_ex_data(ffi::role_index().map_err(setup)?, role);
    ssl.set_ex_data(
        secrets_index().map_err(setup)?,
        Mutex::new(TrafficSecrets::default()),
    );
    Ok(ssl)
}

/// Waits until `sock` is readable (or writable) or the deadline passes.
fn wait(
    sock: &TcpStream,
    writable: bool,
    deadline: Instant,
    limit: Duration,
) -> Result<(), TlsError> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(TlsError::Timeout(limit))?;
    let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
    let flags = if writable {
        PollFlags::POLLOUT
    } else {
        PollFlags::POLLIN
    };
    let mut fds = [PollFd::new(sock.as_fd(), flags)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(TlsError::Io(e.into())),
    }
}

/// Runs a handshake to its end on a non-blocking socket.
fn drive(
    mut step: Result<SslStream<TcpStream>, HandshakeError<TcpStream>>,
    limit: Duration,
) -> Result<SslStream<TcpStream>, TlsError> {
    let deadline = Instant::now() + limit;
    loop {
        match step {
            Ok(s) => return Ok(s),
            Err(HandshakeError::SetupFailure(e)) => return Err(TlsError::Setup(e.to_string())),
            Err(HandshakeError::Failure(mid)) => {
                let why = outcome_reason(mid.ssl()).unwrap_or_else(|| describe(mid.error()));
                return Err(TlsError::Handshake(why));
            }
            Err(HandshakeError::WouldBlock(mid)) => {
                let writable = mid.error().code() == ErrorCode::WANT_WRITE;
                wait(mid.get_ref(), writable, deadline, limit)?;
                step = mid.handshake();
            }
        }
    }
}

/// Why the controller refused the host's identity, when that is why it failed.
fn outcome_reason(ssl: &openssl::ssl::SslRef) -> Option<String> {
    let index = ffi::role_index().ok()?;
    match ssl.ex_data(index)? {
        PskRole::Controller(c) => c.outcome.lock().as_ref().err().cloned(),
        PskRole::Host(_) => None,
    }
}

fn describe(e: &openssl::ssl::Error) -> String {
    if let Some(io) = e.io_error() {
        return format!("connection failed: {io}");
    }
    match e.ssl_error() {
        Some(stack) => stack
            .errors()
            .iter()
            .map(|x| x.reason().unwrap_or("unknown error").to_owned())
            .collect::<Vec<_>>()
            .join("; "),
        None if e.code() == ErrorCode::ZERO_RETURN || e.code() == ErrorCode::SYSCALL => {
            "the peer closed the connection".into()
        }
        None => format!("OpenSSL error code {}", e.code().as_raw()),
    }
}

/// Controller side: the handshake with a host on `stream`, whose first byte was a TLS
/// handshake record. Returns the protected stream and who the host said it is.
pub fn accept(
    stream: TcpStream,
    lookup: Arc<dyn PskLookup>,
    limit: Duration,
) -> Result<(TlsStream, TlsPeer), TlsError> {
    stream.set_nonblocking(true)?;
    let role = PskRole::Controller(ControllerPsk {
        lookup,
        outcome: Mutex::new(Ok(None)),
    });
    let ssl = new_ssl(false, role)?;
    let s = drive(ssl.accept(stream), limit)?;
    let peer = match s
        .ssl()
        .ex_data(ffi::role_index().map_err(|e| TlsError::Setup(e.to_string()))?)
    {
        Some(PskRole::Controller(c)) => c.outcome.lock().clone(),
        _ => Ok(None),
    };
    match peer {
        Ok(Some(p)) => Ok((TlsStream::new(s), p)),
        Ok(None) => Err(TlsError::Handshake("the host offered no PSK".into())),
        Err(why) => Err(TlsError::Handshake(why)),
    }
}

/// Host side: the handshake with a controller on `stream`, offering `keys`.
pub fn connect(stream: TcpStream, keys: Derived, limit: Duration) -> Result<TlsStream, TlsError> {
    stream.set_nonblocking(true)?;
    let cipher = match keys.cipher {
        PskHash::Sha256 => "TLS_AES_128_GCM_SHA256",
        PskHash::Sha384 => "TLS_AES_256_GCM_SHA384",
    };
    let mut ssl = new_ssl(true, PskRole::Host(HostPsk { keys }))?;
    ssl.set_ciphersuites(cipher)
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let s = drive(ssl.connect(stream), limit)?;
    Ok(TlsStream::new(s))
}

/// Where a connection's records are sealed and opened after the handshake.
pub enum Records {
    /// By the kernel: the plain socket carries the connection from here on.
    Kernel(TcpStream),
    /// In user space (OpenSSL), and why the kernel does not.
    User(TlsStream, String),
}

/// Hands the connection's keys to the kernel (kernel TLS) if it can take them. Fails
/// only when the socket was left half set up (the connection must close).
pub fn offload(t: TlsStream) -> Result<Records, TlsError> {
    let ssl = t.ssl.ssl();
    if ssl.pending() > 0 {
        return Ok(Records::User(
            t,
            "data already decrypted in user space".into(),
        ));
    }
    let cipher = match ssl.current_cipher().map(|c| c.name()) {
        Some("TLS_AES_128_GCM_SHA256") => PskHash::Sha256,
        Some("TLS_AES_256_GCM_SHA384") => PskHash::Sha384,
        other => return Ok(Records::User(t, format!("cipher {other:?} not offloaded"))),
    };
    let secrets = secrets_index()
        .ok()
        .and_then(|i| ssl.ex_data(i))
        .map(|m| std::mem::take(&mut *m.lock()))
        .unwrap_or_default();
    match ktls::install(t.ssl.get_ref(), cipher, &secrets, ssl.is_server()) {
        Ok(()) => {
            // A second descriptor of the socket outlives OpenSSL's, which closes with
            // it; nothing more is sent on OpenSSL's side.
            let sock = t.ssl.get_ref().try_clone()?;
            drop(t);
            Ok(Records::Kernel(sock))
        }
        Err(Offload::Unavailable(why)) => Ok(Records::User(t, why)),
        Err(Offload::Broken(why)) => Err(TlsError::Handshake(why)),
    }
}

/// Whether the host on `stream` starts with a TLS record (else an NVMe/TCP PDU), by
/// peeking at its first byte without consuming it. Waits until `limit`.
pub fn starts_with_tls(stream: &TcpStream, limit: Duration) -> Result<bool, TlsError> {
    stream.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    let mut first = [0u8; 1];
    loop {
        match stream.peek(&mut first) {
            Ok(0) => {
                return Err(TlsError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(_) => return Ok(first[0] == CONTENT_TYPE_HANDSHAKE),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait(stream, false, deadline, limit)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The keys a host offers to `subnqn` (identity version 0, as the Linux host's
/// `nvme connect --tls` does, and the Linux tools' derivation).
pub fn host_keys(key: &ConfiguredPsk, hostnqn: &str, subnqn: &str) -> Derived {
    key.derive(hostnqn, subnqn, IdentityVersion::V0, Derivation::Libnvme)
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
