//! `nvmf-initiator mapd`: map every namespace of every subsystem found through
//! discovery, follow changes, until SIGTERM; `mapd-status`: ask a running one.
//!
//! Owned by the CLI; the work is the library's [`nvmf_initiator::mapd`]. Signals are
//! blocked in every thread before anything starts and read from a signalfd by one
//! thread: SIGINT/SIGTERM drain every mapping and exit, SIGHUP re-reads the discovery
//! configuration (as `systemctl reload` sends it) and applies the difference.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;

use nvmf_initiator::autoconnect::NetConnector;
use nvmf_initiator::error::Error;
use nvmf_initiator::map::Stopper;
use nvmf_initiator::mapd::status::{self, NsState, Status};
use nvmf_initiator::mapd::{self, MapdOptions, Mode};

use super::args::OutputFormat;
use super::connect_all_cmd::{prepare, specs, ConnectAllArgs};
use super::{print_json, CliError, CliResult};

/// Where the status socket is unless told.
pub const DEFAULT_STATUS_SOCKET: &str = "/run/nvmf-mapd.sock";
/// Where ublk devices get their stable names unless told.
const DEFAULT_LINK_DIR: &str = "/dev/disk/by-id";
/// Where NBD sockets go when ublk is unavailable and no --nbd-dir was given.
const DEFAULT_NBD_DIR: &str = "/run/nvmf-mapd";
/// What exists when the kernel can make ublk devices.
const UBLK_CONTROL: &str = "/dev/ublk-control";

/// I/O queues per mapped namespace unless -i says otherwise.
const DEFAULT_MAPD_QUEUES: u16 = 2;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator mapd --ublk                               # every line of /etc/nvme/discovery.conf\n  \
    nvmf-initiator mapd -t tcp -a 192.168.1.10 --nbd-dir /run/nvmf-nbd\n  \
    nvmf-initiator mapd-status")]
pub struct MapdArgs {
    #[command(flatten)]
    pub conn: ConnectAllArgs,
    /// Serve each namespace over NBD on DIR/<name>.sock. Without --nbd-dir or
    /// --ublk: ublk where the kernel has it (/dev/ublk-control), else NBD sockets in
    /// /run/nvmf-mapd.
    #[arg(long = "nbd-dir", value_name = "DIR")]
    pub nbd_dir: Option<PathBuf>,
    /// Map each namespace as a ublk block device (needs the ublk_drv module).
    #[arg(long, conflicts_with = "nbd_dir")]
    pub ublk: bool,
    /// With --ublk: the directory of the stable names (links to /dev/ublkbN).
    #[arg(long = "link-dir", value_name = "DIR", default_value = DEFAULT_LINK_DIR)]
    pub link_dir: PathBuf,
    /// The admin socket `mapd-status` reads.
    #[arg(long = "status-socket", value_name = "PATH", default_value = DEFAULT_STATUS_SOCKET)]
    pub status_socket: PathBuf,
    /// Commands in flight per I/O queue (default: what the queue allows).
    #[arg(long)]
    pub iodepth: Option<u32>,
    /// Seconds between discovery walks when no discovery controller sends a notice.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub rediscover: u64,
}

#[derive(Debug, Args)]
pub struct MapdStatusArgs {
    /// The daemon's admin socket.
    #[arg(long = "status-socket", value_name = "PATH", default_value = DEFAULT_STATUS_SOCKET)]
    pub status_socket: PathBuf,
    #[arg(
        long = "output-format",
        short = 'o',
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

pub(super) fn mapd_cmd(a: &MapdArgs) -> CliResult {
    if a.iodepth == Some(0) {
        return Err(CliError::Usage("--iodepth must be at least 1".into()));
    }
    if a.rediscover == 0 {
        return Err(CliError::Usage("--rediscover must be at least 1".into()));
    }
    let (_, copts) = prepare(&a.conn)?;
    let ublk = Mode::Ublk {
        link_dir: a.link_dir.clone(),
    };
    let nbd = |dir: &Path| -> Result<Mode, CliError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Usage(format!("--nbd-dir {}: {e}", dir.display())))?;
        Ok(Mode::Nbd {
            dir: dir.to_path_buf(),
        })
    };
    let mode = match (&a.nbd_dir, a.ublk) {
        (Some(dir), _) => nbd(dir)?,
        (None, true) => ublk,
        (None, false) if Path::new(UBLK_CONTROL).exists() => ublk,
        (None, false) => {
            eprintln!(
                "mapd: no {UBLK_CONTROL} (ublk_drv not loaded, or a container without it): \
                 serving each namespace over NBD in {DEFAULT_NBD_DIR} instead"
            );
            nbd(Path::new(DEFAULT_NBD_DIR))?
        }
    };
    let o = MapdOptions {
        mode,
        io_queues: a.conn.nr_io_queues.unwrap_or(DEFAULT_MAPD_QUEUES),
        depth: a.iodepth.map(|d| d as usize),
        rediscover: Duration::from_secs(a.rediscover),
        status_socket: Some(a.status_socket.clone()),
    };
    let signals = block_signals()?;
    let stop = Arc::new(Stopper::new()?);
    let reload = Arc::new(AtomicBool::new(false));
    watch_signals(signals, stop.clone(), reload.clone())?;
    let load = || {
        specs(&a.conn).map_err(|e| match e {
            CliError::Failed(e) => e,
            CliError::Usage(m) | CliError::Reported(m) => Error::InvalidArgument(m),
        })
    };
    eprintln!(
        "mapd: mapping every namespace found; status on {}; stop with SIGTERM, reload with SIGHUP",
        a.status_socket.display()
    );
    mapd::run(&load, &copts, &o, Arc::new(NetConnector), stop, &reload)?;
    eprintln!("mapd: stopped");
    Ok(())
}

fn block_signals() -> Result<SignalFd, CliError> {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    mask.add(Signal::SIGHUP);
    mask.thread_block()
        .and_then(|()| SignalFd::new(&mask))
        .map_err(|e| CliError::Failed(Error::Io(e.into())))
}

fn watch_signals(signals: SignalFd, stop: Arc<Stopper>, reload: Arc<AtomicBool>) -> CliResult {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(Some(si)) = signals.read_signal() {
                match Signal::try_from(si.ssi_signo as i32) {
                    Ok(Signal::SIGHUP) => {
                        eprintln!("SIGHUP: reloading the discovery configuration");
                        reload.store(true, Ordering::SeqCst);
                    }
                    other => {
                        let name = other.map(|s| s.as_str()).unwrap_or("signal");
                        eprintln!("{name}: draining every mapping and disconnecting");
                        stop.trigger();
                        return;
                    }
                }
            }
            stop.trigger();
        })
        .map(|_| ())
        .map_err(|e| CliError::Failed(Error::Io(e)))
}

pub(super) fn mapd_status_cmd(a: &MapdStatusArgs) -> CliResult {
    let s = status::query(&a.status_socket)?;
    match a.output_format {
        OutputFormat::Json => print_json(
            &serde_json::to_value(&s)
                .map_err(|e| CliError::Failed(Error::Protocol(format!("status: {e}"))))?,
        ),
        OutputFormat::Normal => {
            print!("{}", format_status(&s));
            Ok(())
        }
    }
}

/// The status as a person reads it: each subsystem, its paths, its namespaces.
fn format_status(s: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if s.subsystems.is_empty() {
        out.push_str("no subsystem found\n");
    }
    for (nqn, sub) in &s.subsystems {
        let _ = writeln!(out, "{nqn}");
        for p in &sub.paths {
            match &p.ana {
                Some(ana) => {
                    let _ = writeln!(out, "  path {} {} {ana}", p.address, p.state);
                }
                None => {
                    let _ = writeln!(out, "  path {} {}", p.address, p.state);
                }
            }
        }
        for ns in sub.namespaces.values() {
            let state = match ns.state {
                NsState::Connecting => "connecting",
                NsState::Mapped => "mapped",
                NsState::Failed => "failed",
            };
            let _ = writeln!(
                out,
                "  nsid {} {} {} bytes ({}-byte blocks) {state} {}",
                ns.nsid, ns.name, ns.size_bytes, ns.block_size, ns.detail
            );
        }
    }
    for p in &s.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    if let Some(r) = &s.reload_refused {
        let _ = writeln!(out, "problem: {r}");
    }
    out
}
