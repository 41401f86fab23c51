//! TLS ports (`tsas: tls1.3`): what happens between accept and the poll group.
//!
//! The listener hands every connection of a TLS port to a short-lived thread of its
//! own, so a host that stalls its handshake holds nothing but that thread until
//! `tcp.tls_handshake_timeout_ms`. The thread peeks at the first byte (as nvmet does):
//! a TLS record starts the handshake; an ICReq is admitted in plain only where the
//! port does not require TLS. A refused connection is closed and logged with the
//! reason; nothing else is affected. Established connections go to the least loaded
//! poll group with their PSK identity, which their Connect must match.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::config::PortTls;
use nvmf_common::tls::{self, ConfiguredPsk, PskLookup, Records, Socket, TlsError, TlsStream};

use super::pick_group;
use super::poll_group::{GroupHandle, NewConn};
use crate::params::PortInfo;
use crate::target::Target;

/// Handshakes under way at most; connections beyond are closed at once (a flood of
/// stalled handshakes must not exhaust threads).
pub const MAX_PENDING_HANDSHAKES: usize = 256;

/// The target's hosts as the handshake asks for their keys (the current
/// configuration, so a reload applies to the next connection).
struct TargetPsks(Arc<Target>);

impl PskLookup for TargetPsks {
    fn configured_psk(&self, hostnqn: &str) -> Option<ConfiguredPsk> {
        self.0.hosts.tls_psk(hostnqn)
    }
}

/// What the listener needs for TLS ports.
#[derive(Clone)]
pub(super) struct Secure {
    psks: Arc<dyn PskLookup>,
    limit: Duration,
    /// Hand the keys to the kernel where it has TLS.
    ktls: bool,
    pending: Arc<AtomicUsize>,
    groups: Arc<Vec<GroupHandle>>,
}

impl Secure {
    pub(super) fn new(
        target: Arc<Target>,
        limit: Duration,
        ktls: bool,
        groups: Vec<GroupHandle>,
    ) -> Secure {
        Secure {
            psks: Arc::new(TargetPsks(target)),
            limit,
            ktls,
            pending: Arc::new(AtomicUsize::new(0)),
            groups: Arc::new(groups),
        }
    }

    /// Takes a connection accepted on a TLS port.
    pub(super) fn admit(&self, stream: TcpStream, peer: SocketAddr, port: Arc<PortInfo>) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_HANDSHAKES {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            warn!(%peer, port = port.portid, "NVMe/TCP: {MAX_PENDING_HANDSHAKES} TLS handshakes under way; connection closed");
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("nvmf-tcp-tls".into())
            .spawn(move || {
                me.handshake(stream, peer, port);
                me.pending.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            warn!(%peer, "NVMe/TCP: cannot start a TLS handshake thread: {e}");
        }
    }

    /// Where the connection's records go: the kernel's TLS if allowed and there, else
    /// user space. Names the choice for the log.
    fn records(&self, t: TlsStream) -> Result<(Socket, String), TlsError> {
        if !self.ktls {
            return Ok((Socket::from(t), "user space (tcp.ktls off)".into()));
        }
        Ok(match tls::offload(t)? {
            Records::Kernel(s) => (Socket::Plain(s), "kernel TLS".into()),
            Records::User(t, why) => (Socket::from(t), format!("user space ({why})")),
        })
    }

    fn handshake(&self, stream: TcpStream, peer: SocketAddr, port: Arc<PortInfo>) {
        let portid = port.portid;
        let first_is_tls = match tls::starts_with_tls(&stream, self.limit) {
            Ok(t) => t,
            // A probe (a health check, a port scan) connects and closes at once.
            Err(TlsError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                debug!(%peer, port = portid, "NVMe/TCP: connection closed before sending anything");
                return;
            }
            Err(e) => {
                warn!(%peer, port = portid, "NVMe/TCP: connection closed before its first PDU or handshake: {e}");
                return;
            }
        };
        let (sock, who) = if first_is_tls {
            match tls::accept(stream, self.psks.clone(), self.limit) {
                Ok((t, who)) => {
                    let cipher = t.cipher_name();
                    let (sock, records) = match self.records(t) {
                        Ok(r) => r,
                        Err(e) => {
                            warn!(%peer, port = portid, "NVMe/TCP: TLS closed: {e}");
                            return;
                        }
                    };
                    info!(%peer, port = portid, host = %who.hostnqn, subsystem = %who.subnqn,
                        cipher, records, "NVMe/TCP: TLS 1.3 established");
                    (sock, Some(Arc::new(who)))
                }
                Err(e) => {
                    warn!(%peer, port = portid, "NVMe/TCP: TLS refused: {e}");
                    return;
                }
            }
        } else if port.tls == PortTls::Optional {
            (Socket::Plain(stream), None)
        } else {
            warn!(%peer, port = portid, "NVMe/TCP: plain connection (ICReq) on a port that requires TLS; closed");
            return;
        };
        let mut rr = peer.port() as usize;
        let Some(g) = pick_group(&self.groups, &mut rr) else {
            return;
        };
        if !g.add(NewConn {
            stream: sock,
            peer,
            port,
            tls: who,
        }) {
            warn!(%peer, "NVMe/TCP: poll group is gone; dropping the connection");
        }
    }
}
