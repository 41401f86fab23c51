//! What the daemon is doing, and its admin socket.
//!
//! Owned by the daemon. The [`Board`] is written by the threads that own each piece
//! (the subsystem watcher its paths, each mapping its namespace) and read whole by the
//! status socket: a client connects to the Unix socket, reads one JSON document
//! ([`Status`]) and sees the connection closed (`nvmf-initiator mapd-status` prints
//! it). Nothing is read from the client, so a client cannot block the daemon.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::warn;

use nvmf_common::types::Nsid;

use crate::controller::NamespaceInfo;
use crate::error::Error;
use crate::map::Stopper;

/// How long a status client may take to read the document.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A namespace's mapping state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NsState {
    /// Its controller is being connected.
    Connecting,
    /// Served; `device` says where.
    Mapped,
    /// Not served: `detail` says why (it is tried again at the next rescan).
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsStatus {
    pub nsid: u32,
    /// The stable name (socket file name or link name).
    pub name: String,
    pub size_bytes: u64,
    pub block_size: u32,
    pub state: NsState,
    /// The NBD URI or ublk device when mapped; the error when failed.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathStatus {
    pub address: String,
    /// `live` or `down: <why>`.
    pub state: String,
    /// The path's ANA state while live: `optimized`, `non-optimized` or
    /// `inaccessible` (the worst of the groups holding namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubsystemStatus {
    pub paths: Vec<PathStatus>,
    pub namespaces: BTreeMap<u32, NsStatus>,
}

/// The whole document the status socket returns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub subsystems: BTreeMap<String, SubsystemStatus>,
    /// Problems of the last discovery walk, as a user reads them.
    pub problems: Vec<String>,
    /// Why the last reload was refused, until a reload applies (the walks that
    /// follow a refusal do not hide it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload_refused: Option<String>,
}

/// The shared status board.
#[derive(Clone, Default)]
pub struct Board(Arc<Mutex<Status>>);

impl Board {
    pub fn snapshot(&self) -> Status {
        self.0.lock().clone()
    }

    pub fn set_ns(
        &self,
        subnqn: &str,
        ns: &NamespaceInfo,
        name: &str,
        state: NsState,
        detail: String,
    ) {
        let mut g = self.0.lock();
        let sub = g.subsystems.entry(subnqn.to_owned()).or_default();
        sub.namespaces.insert(
            ns.nsid.0,
            NsStatus {
                nsid: ns.nsid.0,
                name: name.to_owned(),
                size_bytes: ns.size_bytes(),
                block_size: ns.block_size,
                state,
                detail,
            },
        );
    }

    pub fn remove_ns(&self, subnqn: &str, nsid: Nsid) {
        if let Some(s) = self.0.lock().subsystems.get_mut(subnqn) {
            s.namespaces.remove(&nsid.0);
        }
    }

    pub fn set_paths(&self, subnqn: &str, paths: Vec<PathStatus>) {
        self.0
            .lock()
            .subsystems
            .entry(subnqn.to_owned())
            .or_default()
            .paths = paths;
    }

    pub fn remove_subsystem(&self, subnqn: &str) {
        self.0.lock().subsystems.remove(subnqn);
    }

    pub fn set_problems(&self, problems: Vec<String>) {
        self.0.lock().problems = problems;
    }

    /// Records why a reload was refused (None: the last reload applied).
    pub fn set_reload_refused(&self, why: Option<String>) {
        self.0.lock().reload_refused = why;
    }
}

/// Serves the board on a Unix socket until `stop`; the socket file is removed on
/// the way out.
pub struct StatusServer {
    path: PathBuf,
    join: Option<std::thread::JoinHandle<()>>,
}

impl StatusServer {
    pub fn start(path: &Path, board: Board, stop: Arc<Stopper>) -> Result<StatusServer, Error> {
        if std::fs::symlink_metadata(path).is_ok() {
            use std::os::unix::fs::FileTypeExt;
            let is_socket = std::fs::symlink_metadata(path)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(false);
            if !is_socket {
                return Err(Error::InvalidArgument(format!(
                    "status socket {}: exists and is not a socket",
                    path.display()
                )));
            }
            std::fs::remove_file(path)?;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let listener = UnixListener::bind(path).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("status socket {}: {e}", path.display()),
            ))
        })?;
        listener.set_nonblocking(true)?;
        let join = std::thread::Builder::new()
            .name("mapd-status".into())
            .spawn(move || serve(&listener, &board, &stop))?;
        Ok(StatusServer {
            path: path.to_owned(),
            join: Some(join),
        })
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: &UnixListener, board: &Board, stop: &Stopper) {
    while !stop.is_triggered() {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.fd(), PollFlags::POLLIN),
        ];
        if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
            if e != nix::errno::Errno::EINTR {
                warn!("status socket poll: {e}");
                return;
            }
        }
        let Ok((mut stream, _)) = listener.accept() else {
            continue;
        };
        let doc = serde_json::to_vec_pretty(&board.snapshot()).unwrap_or_default();
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
        let _ = stream.write_all(&doc);
        let _ = stream.write_all(b"\n");
    }
}

/// Reads the status document from a daemon's socket.
pub fn query(path: &Path) -> Result<Status, Error> {
    use std::io::Read as _;
    let mut s = std::os::unix::net::UnixStream::connect(path).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!(
                "status socket {}: {e} (is nvmf-initiator mapd running?)",
                path.display()
            ),
        ))
    })?;
    s.set_read_timeout(Some(CLIENT_WRITE_TIMEOUT))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| {
        Error::Protocol(format!(
            "status socket {}: not a status document: {e}",
            path.display()
        ))
    })
}
