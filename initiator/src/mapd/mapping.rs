//! One mapped namespace: its own controller (with failover over the subsystem's
//! paths) serving it as an NBD socket or a ublk device on its own thread.
//!
//! Owned by the subsystem watcher ([`super::subsystem`]), which starts a [`Mapping`]
//! for each namespace it sees and stops it (drain, then shutdown) when the namespace
//! goes away or changes size. The thread publishes its state in the daemon's
//! [`super::status::Board`]; its stable name ([`stable_name`]) is the socket's file
//! name, or a symlink to the ublk device in the link directory, so the same namespace
//! gets the same name across restarts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tracing::{info, warn};

use crate::controller::{ConnectOptions, NamespaceInfo};
use crate::error::Error;
use crate::map::{self, Endpoint, Listen, Listener, MapOptions, Stopper};
use crate::reconnect::{ReconnectPolicy, Session};
use crate::transport::Fabric;

use super::status::{Board, NsState};
use super::Mode;

/// Everything a mapping needs from its subsystem.
#[derive(Clone)]
pub struct MapTarget {
    pub subnqn: String,
    /// Every path's fabric, the preferred first.
    pub fabrics: Vec<Arc<dyn Fabric>>,
    pub opts: ConnectOptions,
    pub policy: ReconnectPolicy,
    pub fast_io_fail: Option<std::time::Duration>,
    pub mode: Mode,
    pub depth: Option<usize>,
    pub board: Board,
}

/// A running mapping.
pub struct Mapping {
    pub name: String,
    pub size_bytes: u64,
    /// It ended with an error that trying again cannot mend (a block size ublk cannot
    /// take, ...): it is not retried until the namespace changes.
    refused: Arc<AtomicBool>,
    stop: Arc<Stopper>,
    join: Option<JoinHandle<()>>,
}

/// The name a namespace keeps across restarts and hosts: its UUID, else its NGUID,
/// else its EUI-64 (as udev's `nvme-uuid.`/`nvme-eui.` links), else the subsystem NQN
/// and NSID made file-name safe.
pub fn stable_name(subnqn: &str, ns: &NamespaceInfo) -> String {
    if let Some(u) = ns.uuid {
        return format!("nvmf-uuid.{}", uuid::Uuid::from_bytes(u).hyphenated());
    }
    if ns.nguid.iter().any(|&b| b != 0) {
        return format!("nvmf-eui.{}", hex(&ns.nguid));
    }
    if ns.eui64.iter().any(|&b| b != 0) {
        return format!("nvmf-eui.{}", hex(&ns.eui64));
    }
    let safe: String = subnqn
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("nvmf-{safe}-n{}", ns.nsid.0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Mapping {
    /// Starts mapping `ns` on its own thread.
    pub fn start(t: &MapTarget, ns: &NamespaceInfo) -> Result<Mapping, Error> {
        let name = stable_name(&t.subnqn, ns);
        let stop = Arc::new(Stopper::new()?);
        let size_bytes = ns.size_bytes();
        t.board
            .set_ns(&t.subnqn, ns, &name, NsState::Connecting, String::new());
        let refused = Arc::new(AtomicBool::new(false));
        let (t2, ns2, name2, stop2) = (t.clone(), ns.clone(), name.clone(), stop.clone());
        let r2 = refused.clone();
        let join = std::thread::Builder::new()
            .name(format!("mapd-n{}", ns.nsid.0))
            .spawn(move || {
                if run(&t2, &ns2, &name2, &stop2) {
                    r2.store(true, Ordering::SeqCst);
                }
            })?;
        Ok(Mapping {
            name,
            size_bytes,
            refused,
            stop,
            join: Some(join),
        })
    }

    /// The thread ended by itself (the controller was lost for good, or it could not
    /// start).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// It ended with an error that only a change of the namespace can mend.
    pub fn is_refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// Stops serving: in-flight requests are answered, then the controller shuts down.
    pub fn stop(mut self) {
        self.stop.trigger();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.stop.trigger();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Connects over the first path that answers.
fn connect(t: &MapTarget) -> Result<Session, Error> {
    let mut last = None;
    for (i, f) in t.fabrics.iter().enumerate() {
        match Session::connect_once(f.clone(), t.opts.clone(), t.policy) {
            Ok(s) => {
                let others = t
                    .fabrics
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, f)| f.clone())
                    .collect();
                return Ok(s.with_paths(others));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::NotFound("the subsystem has no path".into())))
}

/// Serves until stopped or failed; true when it failed for good (see
/// [`Mapping::is_refused`]).
fn run(t: &MapTarget, ns: &NamespaceInfo, name: &str, stop: &Stopper) -> bool {
    let r = serve(t, ns, name, stop);
    match &r {
        Ok(()) => {
            info!(subnqn = %t.subnqn, nsid = %ns.nsid, name, "namespace unmapped");
            t.board.remove_ns(&t.subnqn, ns.nsid);
            false
        }
        Err(e) => {
            warn!(subnqn = %t.subnqn, nsid = %ns.nsid, name, "namespace not mapped: {e}");
            t.board
                .set_ns(&t.subnqn, ns, name, NsState::Failed, e.to_string());
            matches!(e, Error::Unsupported(_) | Error::InvalidArgument(_))
        }
    }
}

fn serve(t: &MapTarget, ns: &NamespaceInfo, name: &str, stop: &Stopper) -> Result<(), Error> {
    let session = connect(t)?;
    let opts = MapOptions {
        nsid: ns.nsid,
        export_name: String::new(),
        depth: t.depth,
        fast_io_fail: t.fast_io_fail,
    };
    let recover = t.policy.ctrl_loss_tmo != Some(std::time::Duration::ZERO);
    let board = t.board.clone();
    let (subnqn, info) = (t.subnqn.clone(), ns.clone());
    let label = name.to_owned();
    match &t.mode {
        Mode::Nbd { dir } => {
            let path = dir.join(format!("{name}.sock"));
            remove_stale(&path);
            let listener = Listener::bind(&Listen::Unix(path.clone())).map_err(|e| {
                Error::Io(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ))
            })?;
            let r = map::serve_session(
                session,
                Endpoint::Nbd(&listener),
                &opts,
                recover,
                stop,
                move |r| {
                    info!(%subnqn, nsid = %info.nsid, name = %label, device = %r.device, "namespace mapped");
                    board.set_ns(&subnqn, &info, &label, NsState::Mapped, r.device.clone());
                },
            );
            drop(listener);
            remove_stale(&path);
            r.map(|_| ())
        }
        Mode::Ublk { link_dir } => {
            let link = link_dir.join(name);
            let r = map::serve_session(session, Endpoint::Ublk, &opts, recover, stop, {
                let link = link.clone();
                move |r| {
                    if let Err(e) = replace_link(&link, Path::new(&r.device)) {
                        warn!(link = %link.display(), "stable name not created: {e}");
                    }
                    info!(%subnqn, nsid = %info.nsid, name = %label, device = %r.device, "namespace mapped");
                    board.set_ns(&subnqn, &info, &label, NsState::Mapped, r.device.clone());
                }
            });
            remove_stale(&link);
            r.map(|_| ())
        }
    }
}

/// Removes a socket or link left by an earlier run (never a directory or a file
/// that is neither).
fn remove_stale(path: &Path) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let ft = m.file_type();
        if ft.is_socket() || ft.is_symlink() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Points `link` at `dev`, replacing an old link atomically (rename over it).
fn replace_link(link: &Path, dev: &Path) -> std::io::Result<()> {
    let dir = link
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        link.file_name().and_then(|n| n.to_str()).unwrap_or("nvmf")
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(dev, &tmp)?;
    std::fs::rename(&tmp, link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::types::Nsid;

    fn ns() -> NamespaceInfo {
        NamespaceInfo {
            nsid: Nsid(3),
            nsze: 8,
            ncap: 8,
            nuse: 8,
            block_size: 512,
            metadata_size: 0,
            nguid: [0; 16],
            eui64: [0; 8],
            uuid: None,
        }
    }

    #[test]
    fn names_prefer_uuid_then_nguid_then_eui64_then_nqn() {
        let mut n = ns();
        assert_eq!(
            stable_name("nqn.2024-01.io.x:a b/c", &n),
            "nvmf-nqn.2024-01.io.x:a_b_c-n3"
        );
        n.eui64 = [0, 0, 0, 0, 0, 0, 0, 0xab];
        assert_eq!(stable_name("s", &n), "nvmf-eui.00000000000000ab");
        n.nguid[15] = 1;
        assert_eq!(
            stable_name("s", &n),
            "nvmf-eui.00000000000000000000000000000001"
        );
        n.uuid = Some([0x11; 16]);
        assert_eq!(
            stable_name("s", &n),
            "nvmf-uuid.11111111-1111-1111-1111-111111111111"
        );
    }

    #[test]
    fn links_are_replaced_and_stale_entries_removed() {
        let dir = std::env::temp_dir().join(format!("mapd-link-{}", std::process::id()));
        let link = dir.join("nvmf-x");
        replace_link(&link, Path::new("/dev/ublkb0")).unwrap();
        replace_link(&link, Path::new("/dev/ublkb1")).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/dev/ublkb1"));
        remove_stale(&link);
        assert!(std::fs::symlink_metadata(&link).is_err());
        // A regular file is not ours to remove.
        std::fs::write(&link, b"keep").unwrap();
        remove_stale(&link);
        assert!(link.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
