//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper on tokio).
//!
//! Ownership: one control-plane thread (`nvmf-metrics`) runs a current-thread tokio
//! runtime with the listener and its connections; it reads the data path only through
//! [`super::snapshot::snapshot`]. Poll-group threads never see tokio. Dropping the
//! [`MetricsServer`] stops the runtime and joins the thread.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{oneshot, Semaphore};
use tracing::{debug, info, warn};

use crate::target::Target;

/// The only path served.
pub const METRICS_PATH: &str = "/metrics";
/// A client must send its request headers within this long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection (kept alive across scrapes) is closed after this long; the scraper
/// simply opens another.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 16;
/// Pause after a failed accept (descriptor exhaustion), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A running metrics endpoint.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `listen` (port 0: a free port) and serves `target`'s metrics.
    pub fn start(target: Arc<Target>, listen: SocketAddr) -> io::Result<MetricsServer> {
        let listener = std::net::TcpListener::bind(listen)
            .map_err(|e| io::Error::new(e.kind(), format!("metrics endpoint {listen}: {e}")))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("nvmf-metrics".into())
            .spawn(move || rt.block_on(serve(listener, target, rx)))?;
        info!(%addr, "metrics endpoint listening (GET {METRICS_PATH})");
        Ok(MetricsServer {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    target: Arc<Target>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            warn!("metrics endpoint: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = &mut stop => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!("metrics endpoint accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let target = target.clone();
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |req| respond(target.clone(), req)),
                );
            // A lifetime that ran out is not an error: the scraper reconnects.
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                debug!("metrics client: {e}");
            }
            drop(permit);
        });
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r
}

async fn respond(
    target: Arc<Target>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.uri().path() != METRICS_PATH {
        return Ok(plain(StatusCode::NOT_FOUND, "not found: try /metrics\n"));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    Ok(
        match super::encode::encode(super::snapshot::snapshot(&target)) {
            Ok(text) => {
                let mut r = Response::new(Full::new(Bytes::from(text)));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(super::encode::CONTENT_TYPE),
                );
                r
            }
            Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n"),
        },
    )
}
