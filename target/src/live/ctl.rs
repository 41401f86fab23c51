//! The admin socket: `nvmf-target ctl` talks to a running target over a Unix stream
//! socket: every change ([`Op`]: namespaces, hosts, keys, ANA, subsystems, ports) and
//! the queries (`reload`, `export`, `status`, `metrics`).
//!
//! Protocol: one JSON request per line, one JSON [`Response`] line back, then the
//! server closes the connection. Requests are tagged by `op`:
//!
//! ```text
//! {"op":"add-ns","nqn":"nqn.2024-01.io.example:disk","device_path":"/srv/d.img"}
//! {"op":"remove-ns","nqn":"...","nsid":2}
//! {"op":"resize-ns","nqn":"...","nsid":1}
//! {"op":"add-host","nqn":"...","host":"nqn.2014-08.org.nvmexpress:uuid:..."}
//! {"op":"remove-host","nqn":"...","host":"..."}
//! {"op":"set-host-key","host":"...","key_file":"/etc/nvmf/h1.key"}
//! {"op":"set-ana","portid":2,"grpid":1,"state":"inaccessible"}
//! {"op":"add-subsystem","nqn":"...","allow_any_host":true}
//! {"op":"remove-subsystem","nqn":"..."}
//! {"op":"add-port","portid":2,"trtype":"tcp","traddr":"0.0.0.0","trsvcid":"4421"}
//! {"op":"remove-port","portid":2}
//! {"op":"link-subsystem","portid":2,"nqn":"..."}
//! {"op":"unlink-subsystem","portid":2,"nqn":"..."}
//! {"op":"reload"}
//! {"op":"export"}
//! {"op":"status"}
//! {"op":"metrics"}
//! ```
//!
//! `metrics` answers with the counters ([`crate::metrics::Snapshot`]) that `ctl top`
//! turns into rates.
//!
//! The socket is created mode 0600: whoever can write it administers the target.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::status::StatusView;
use super::{Live, Op, Refusal, RefusalKind};

/// Where the socket is unless `--ctl-socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/nvmf-target.sock";
/// A client that sends nothing for this long is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);
/// The longest request line accepted.
const MAX_REQUEST: u64 = 64 * 1024;
/// What the log shows instead of a secret.
const REDACTED: &str = "(secret, not logged)";

/// One request on the socket: a change ([`Op`], its own `op` tag) or a query.
// One request per admin call: its size does not matter, boxing the op would.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    Reload,
    /// The running configuration as YAML that starts the same target.
    Export,
    Status,
    /// The data-path counters (for `ctl top`).
    Metrics,
    /// Any other `op`: a change.
    #[serde(untagged)]
    Change(Op),
}

impl From<Op> for Request {
    fn from(op: Op) -> Request {
        Request::Change(op)
    }
}

/// The answer: `ok` with what changed (or the status view), or the reason for refusal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A refusal's kind (what the management API returns as its status code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<RefusalKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<crate::metrics::Snapshot>,
    /// `export`: the running configuration (YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

impl Response {
    fn from_result(r: Result<Vec<String>, Refusal>) -> Response {
        match r {
            Ok(changes) => Response::changed(changes),
            Err(e) => Response {
                refusal: Some(e.kind),
                ..Response::error(e.message)
            },
        }
    }

    /// Accepted, with what changed.
    pub fn changed(changes: Vec<String>) -> Response {
        Response {
            ok: true,
            changes,
            ..Response::default()
        }
    }

    /// Refused or failed, with the reason.
    pub fn error(e: String) -> Response {
        Response {
            ok: false,
            error: Some(e),
            ..Response::default()
        }
    }
}

/// Runs one request against the live target.
pub fn handle(live: &Live, req: &Request) -> Response {
    let op = match req.clone() {
        Request::Status => {
            return Response {
                status: Some(live.status()),
                ..Response::changed(Vec::new())
            }
        }
        Request::Metrics => {
            return Response {
                metrics: Some(crate::metrics::snapshot(live.target())),
                ..Response::changed(Vec::new())
            }
        }
        Request::Export => {
            return match live.export() {
                Ok(yaml) => Response {
                    config: Some(yaml),
                    ..Response::changed(Vec::new())
                },
                Err(e) => Response::error(e),
            }
        }
        Request::Reload => return Response::from_result(live.reload()),
        Request::Change(op) => op,
    };
    Response::from_result(live.execute(&op))
}

/// The admin socket server: one thread; requests are served one at a time.
pub struct CtlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CtlServer {
    /// Listens on `path` (a stale socket file left by a dead target is replaced; a live
    /// one is not).
    pub fn start(live: Arc<Live>, path: &Path) -> std::io::Result<CtlServer> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{}: another target is serving this socket", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("admin socket {}: {e}", path.display()))
        })?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        info!(path = %path.display(), "admin socket listening");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nvmf-ctl".into())
            .spawn(move || serve(listener, live, flag))?;
        Ok(CtlServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: UnixListener, live: Arc<Live>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = serve_one(&live, stream) {
                    warn!("admin socket client: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                warn!("admin socket accept failed: {e}");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

fn serve_one(live: &Live, stream: UnixStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(&stream, MAX_REQUEST)).read_line(&mut line)?;
    let resp = match parse_request(line.trim()) {
        // `ctl top` asks every interval: not worth a log line each time.
        Ok(Request::Metrics) => handle(live, &Request::Metrics),
        Ok(req) => {
            info!(req = ?loggable(&req), "admin request");
            handle(live, &req)
        }
        Err(e) => Response::error(format!("malformed request: {e}")),
    };
    let mut out = serde_json::to_string(&resp).map_err(std::io::Error::other)?;
    out.push('\n');
    (&stream).write_all(out.as_bytes())
}

/// Parses one request line. A query by its `op`; anything else as an [`Op`], whose
/// errors name the field or the unknown `op` (an untagged fallback would not).
pub fn parse_request(line: &str) -> Result<Request, serde_json::Error> {
    let v: serde_json::Value = serde_json::from_str(line)?;
    match v.get("op").and_then(|o| o.as_str()) {
        Some("reload" | "export" | "status" | "metrics") => serde_json::from_value(v),
        _ => serde_json::from_value::<Op>(v).map(Request::Change),
    }
}

/// `req` as the log shows it: the value of a secret Ceph option (refused anyway) is
/// replaced, so a mistaken `--ceph-option key=...` never reaches the log.
pub(crate) fn loggable(req: &Request) -> std::borrow::Cow<'_, Request> {
    use crate::config::SECRET_CEPH_OPTIONS;
    match req {
        Request::Change(Op::AddNs { ceph_options, .. })
            if ceph_options
                .iter()
                .any(|(k, _)| SECRET_CEPH_OPTIONS.contains(&k.as_str())) =>
        {
            let mut shown = req.clone();
            if let Request::Change(Op::AddNs { ceph_options, .. }) = &mut shown {
                for (k, v) in ceph_options.iter_mut() {
                    if SECRET_CEPH_OPTIONS.contains(&k.as_str()) {
                        *v = REDACTED.into();
                    }
                }
            }
            std::borrow::Cow::Owned(shown)
        }
        _ => std::borrow::Cow::Borrowed(req),
    }
}

/// Sends one request to the target listening on `path` and returns its answer.
pub fn request(path: &Path, req: &Request) -> Result<Response, String> {
    let stream = UnixStream::connect(path)
        .map_err(|e| format!("cannot reach the target at {}: {e}", path.display()))?;
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(io)?;
    let mut line = serde_json::to_string(req).map_err(|e| e.to_string())?;
    line.push('\n');
    (&stream).write_all(line.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
    serde_json::from_str(answer.trim())
        .map_err(|e| format!("malformed answer from the target: {e}"))
}
