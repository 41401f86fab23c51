//! Connecting one queue: the TCP connection, the ICReq/ICResp exchange with its
//! deadline, and the errors a failed connect reports.

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tracing::debug;

use nvmf_common::tls::{self, Records, Socket, TlsError};
use nvmf_common::transport::tcp::SendQueue;
use nvmf_common::transport::tcp::{Connection, Event, FramerError, HostConfig, PduWriter, Role};
use nvmf_common::wire::tcp::NVME_TCP_ADMIN_CCSZ;

use super::{describe_term, Conn, QueueParams, TcpFabric, TcpHostQueue, TransportError, RX_CHUNK};

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

/// A failed TLS handshake: refused (wrong key, no key for us there, no TLS), or
/// timed out.
fn tls_error(addr: SocketAddr, e: TlsError) -> TransportError {
    match e {
        TlsError::Timeout(_) => TransportError::Timeout(format!("TLS handshake with {addr}")),
        TlsError::Handshake(why) => {
            TransportError::Rejected(format!("{addr}: TLS handshake failed: {why}"))
        }
        other => TransportError::Other(format!("{addr}: {other}")),
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

impl TcpHostQueue {
    pub(super) fn connect(f: &TcpFabric, p: &QueueParams) -> Result<Self, TransportError> {
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
        let deadline = Instant::now() + p.connect_timeout;
        let mut icreq = Vec::with_capacity(128);
        let mut tcp = Connection::host(cfg, p.connect_timeout, Instant::now(), &mut icreq)
            .map_err(|e| TransportError::Invalid(format!("NVMe/TCP: {e}")))?;
        let tcp_sock = TcpStream::connect_timeout(&addr, p.connect_timeout)
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
        tcp_sock
            .set_nodelay(true)
            .map_err(|e| sockerr("TCP_NODELAY", e))?;
        let mut sock = match &f.opts.tls {
            None => Socket::Plain(tcp_sock),
            Some(k) => {
                let keys = tls::host_keys(&k.psk, &k.hostnqn, &k.subnqn);
                let t = tls::connect(tcp_sock, keys, remaining(deadline, addr)?)
                    .map_err(|e| tls_error(addr, e))?;
                let cipher = t.cipher_name();
                let (sock, records) = if f.opts.ktls {
                    match tls::offload(t).map_err(|e| tls_error(addr, e))? {
                        Records::Kernel(s) => (Socket::Plain(s), "kernel TLS".to_string()),
                        Records::User(t, why) => (t.into(), format!("user space ({why})")),
                    }
                } else {
                    (t.into(), "user space".to_string())
                };
                debug!(qid = %p.qid, %addr, cipher, records, "NVMe/TCP: TLS 1.3 established");
                sock
            }
        };
        sock.set_nonblocking(false)
            .map_err(|e| sockerr("set blocking", e))?;

        sock.set_write_timeout(Some(remaining(deadline, addr)?))
            .map_err(|e| sockerr("set write timeout", e))?;
        sock.write_all(&icreq)
            .map_err(|e| sockerr("sending ICReq", e))?;

        // Read until the ICResp is complete; bytes after it stay in `rx` for `poll`.
        let mut rx = vec![0u8; RX_CHUNK].into_boxed_slice();
        let (mut rx_start, mut rx_end) = (0usize, 0usize);
        let negotiated = loop {
            if rx_start == rx_end {
                sock.tcp()
                    .set_read_timeout(Some(remaining(deadline, addr)?))
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
            let (used, out) = tcp.read(input, |ev| match ev {
                Event::Established { negotiated, .. } => Ok(negotiated),
                Event::PeerTerminated { fes, fei } => Err(Refusal::Terminated(fes, fei)),
                Event::Failed { error, send } => Err(Refusal::Invalid(error, send.to_vec())),
                // Nothing else gets through before the ICResp.
                Event::Pdu(_) | Event::DataDigest { .. } => Err(Refusal::Unexpected),
            });
            rx_start += used;
            match out {
                None => continue,
                Some(Ok(n)) => break n,
                Some(Err(r)) => return Err(r.into_error(&mut sock, addr)),
            }
        };
        sock.tcp()
            .set_read_timeout(None)
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
            tcp,
            negotiated,
            rx,
            rx_start,
            rx_end,
            conn: Conn {
                qid: p.qid,
                writer: PduWriter::new(Role::Host, &negotiated),
                maxh2cdata: negotiated.maxh2cdata,
                slots,
                tx: SendQueue::default(),
                sent: 0,
                cqes: Vec::with_capacity(usize::from(depth)),
            },
            dead: None,
            empty: false,
        })
    }
}

/// Why initialization failed, as the connection reported it.
enum Refusal {
    /// The controller sent a termination request instead of an ICResp.
    Terminated(u16, u32),
    /// The ICResp was invalid; the termination request to send.
    Invalid(FramerError, Vec<u8>),
    Unexpected,
}

impl Refusal {
    /// Sends the termination request (if any), closes, and says why.
    fn into_error(self, sock: &mut Socket, addr: SocketAddr) -> TransportError {
        let why = match self {
            Refusal::Terminated(fes, fei) => describe_term(fes, fei),
            Refusal::Invalid(e, term) => {
                let _ = sock.write_all(&term);
                format!("invalid ICResp: {e}")
            }
            Refusal::Unexpected => "a PDU other than ICResp before initialization".into(),
        };
        let _ = sock.shutdown(Shutdown::Both);
        TransportError::Rejected(format!("{addr}: {why}"))
    }
}
