//! Connecting one queue: the TCP connection, the ICReq/ICResp exchange with its
//! deadline, and the errors a failed connect reports.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tracing::debug;

use nvmf_common::transport::tcp::negotiate::icreq_params;
use nvmf_common::transport::tcp::{
    encode_icreq, FramerError, HostConfig, Pdu, PduReader, PduWriter, Role,
};
use nvmf_common::wire::tcp::{pdu_type_name, MAX_TERM_DATA, NVME_TCP_ADMIN_CCSZ};

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
        let mut reader =
            PduReader::host(cfg).map_err(|e| TransportError::Invalid(format!("NVMe/TCP: {e}")))?;
        let deadline = Instant::now() + p.connect_timeout;
        let mut sock = TcpStream::connect_timeout(&addr, p.connect_timeout)
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
        sock.set_nodelay(true)
            .map_err(|e| sockerr("TCP_NODELAY", e))?;

        let mut icreq = Vec::with_capacity(128);
        encode_icreq(&icreq_params(&cfg), &mut icreq);
        sock.set_write_timeout(Some(remaining(deadline, addr)?))
            .map_err(|e| sockerr("set write timeout", e))?;
        sock.write_all(&icreq)
            .map_err(|e| sockerr("sending ICReq", e))?;

        // Read until the ICResp is complete; bytes after it stay in `rx` for `poll`.
        let mut rx = vec![0u8; RX_CHUNK].into_boxed_slice();
        let (mut rx_start, mut rx_end) = (0usize, 0usize);
        loop {
            if rx_start == rx_end {
                sock.set_read_timeout(Some(remaining(deadline, addr)?))
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
            match reader.feed(input) {
                Ok(n) => rx_start += n,
                Err(e) => return Err(icresp_failed(&mut sock, &reader, addr, e)),
            }
            match reader.poll() {
                None => continue,
                Some(Ok(Pdu::IcResp(_))) => break,
                Some(Ok(Pdu::C2HTermReq { fes, fei, .. })) => {
                    let _ = sock.shutdown(Shutdown::Both);
                    return Err(TransportError::Rejected(format!(
                        "{addr}: {}",
                        describe_term(fes, fei)
                    )));
                }
                Some(Ok(other)) => {
                    // The framer lets nothing but an ICResp or a termination request
                    // through before initialization.
                    let t = other.pdu_type();
                    let _ = sock.shutdown(Shutdown::Both);
                    return Err(TransportError::Rejected(format!(
                        "{addr}: {} instead of ICResp",
                        pdu_type_name(t)
                    )));
                }
                Some(Err(e)) => return Err(icresp_failed(&mut sock, &reader, addr, e)),
            }
        }
        let negotiated = reader
            .negotiated()
            .ok_or_else(|| TransportError::Other("ICResp accepted but not recorded".into()))?;
        sock.set_read_timeout(None)
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
            reader,
            negotiated,
            rx,
            rx_start,
            rx_end,
            conn: Conn {
                qid: p.qid,
                writer: PduWriter::new(Role::Host, &negotiated),
                maxh2cdata: negotiated.maxh2cdata,
                slots,
                out: Vec::with_capacity(64 * 1024),
                out_pos: 0,
                cqes: Vec::with_capacity(usize::from(depth)),
                peek: [0u8; MAX_TERM_DATA],
                peek_len: 0,
                direct: None,
                large_data: false,
            },
            dead: None,
        })
    }
}

/// Connect-time failure of the ICResp: send the termination request the framer
/// prepared (if any), close, and say why.
fn icresp_failed(
    sock: &mut TcpStream,
    reader: &PduReader,
    addr: SocketAddr,
    e: FramerError,
) -> TransportError {
    let mut term = Vec::new();
    if reader.termination_request(&mut term) {
        let _ = sock.write_all(&term);
    }
    let _ = sock.shutdown(Shutdown::Both);
    TransportError::Rejected(format!("{addr}: invalid ICResp: {e}"))
}
