//! The remote management API: gRPC (tonic) over mutual TLS (rustls), published as
//! `target/proto/nvmf/target/v1/management.proto`.
//!
//! Ownership: one control-plane thread (`nvmf-mgmt`) runs a current-thread tokio
//! runtime with the listener, its connections and the event streams; changes and
//! queries go through [`Live`] (on tokio's blocking pool), exactly as the admin
//! socket's do, so both see one operation model, one lock and one durable state.
//! Poll-group threads never see this runtime. Dropping the [`ManagementServer`] ends
//! the event streams, stops the server and joins the thread.
//!
//! Security: a client must present a certificate that chains to `management.ca` and
//! is within its validity dates (rustls' client verifier, during the handshake);
//! the certificate's subject CN or DNS subjectAltName must be in `management.admins`
//! (every call) or `management.readers` (queries), read at each call so a reload
//! changes roles at once.

pub mod client;
mod convert;
mod service;

/// The generated messages, server and client.
#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used)]
pub mod proto {
    tonic::include_proto!("nvmf.target.v1");
}

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tracing::{info, warn};

use crate::config::ManagementConfig;

use crate::live::Live;

/// A TLS handshake must finish within this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle connections are probed this often (HTTP/2 keep-alive), so a vanished
/// client's event stream ends.
const KEEPALIVE: Duration = Duration::from_secs(30);
/// After shutdown is asked, calls in flight get this long to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// A running management API.
pub struct ManagementServer {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

/// Reads one PEM file of the `management:` section.
fn pem(key: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("management.{key} {}: {e}", path.display()))
}

impl ManagementServer {
    /// Binds `cfg.listen` and serves `live`.
    pub fn start(live: Arc<Live>, cfg: &ManagementConfig) -> Result<ManagementServer, String> {
        let listen = cfg
            .socket_addr()
            .ok_or_else(|| format!("management.listen {:?} is not ADDR:PORT", cfg.listen))?;
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(
                pem("cert", &cfg.cert)?,
                pem("key", &cfg.key)?,
            ))
            .client_ca_root(Certificate::from_pem(pem("ca", &cfg.ca)?))
            .client_auth_optional(false)
            .timeout(HANDSHAKE_TIMEOUT);
        let router = Server::builder()
            .tls_config(tls)
            .map_err(|e| format!("management API TLS (cert, key, ca): {e}"))?
            .http2_keepalive_interval(Some(KEEPALIVE));
        let std_listener = std::net::TcpListener::bind(listen)
            .map_err(|e| format!("management API {listen}: {e}"))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| format!("management API {listen}: {e}"))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| format!("management API {listen}: {e}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("management API runtime: {e}"))?;
        let (stop, stopping) = watch::channel(false);
        let service = service::Service {
            live,
            stopping: stopping.clone(),
        };
        let mut router = router;
        let thread = std::thread::Builder::new()
            .name("nvmf-mgmt".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => {
                            warn!("management API listener: {e}");
                            return;
                        }
                    };
                    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                    let mut stop_wait = stopping.clone();
                    let shutdown = async move {
                        let _ = stop_wait.wait_for(|s| *s).await;
                    };
                    let serve = router
                        .add_service(proto::management_server::ManagementServer::new(service))
                        .serve_with_incoming_shutdown(incoming, shutdown);
                    let mut drain_wait = stopping;
                    let drained = async move {
                        let _ = drain_wait.wait_for(|s| *s).await;
                        tokio::time::sleep(DRAIN).await;
                    };
                    tokio::select! {
                        r = serve => if let Err(e) = r {
                            warn!("management API stopped: {e}");
                        },
                        _ = drained => warn!("management API: calls still running at shutdown were cut off"),
                    }
                })
            })
            .map_err(|e| format!("management API thread: {e}"))?;
        info!(%addr, "management API listening (gRPC, mutual TLS)");
        Ok(ManagementServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ManagementServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                warn!("management API thread panicked");
            }
        }
    }
}
