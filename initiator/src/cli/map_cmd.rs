//! `nvmf-initiator map`: export one remote namespace locally until SIGINT/SIGTERM.
//!
//! Owned by the CLI. SIGINT and SIGTERM are blocked in every thread before anything
//! starts (so no thread dies of them) and read from a signalfd by one thread, which
//! asks the server to drain. Then the I/O queues are given back and the controller is
//! shut down (Disconnect, CC.SHN), so the target sees a clean exit.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;

use nvmf_common::types::Nsid;
use nvmf_initiator::error::Error;
use nvmf_initiator::map::{self, Endpoint, Listen, Listener, MapOptions, Ready, Stopper};

use super::{connect_options, open, reconnect_args, CliError, CliResult, ConnArgs};

/// I/O queues (= NBD worker threads) when `-i` is not given.
const DEFAULT_MAP_QUEUES: u16 = 2;
/// The address `--tcp PORT` listens on.
const DEFAULT_TCP_HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[derive(Debug, Args)]
pub struct MapArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Serve NBD on this Unix socket.
    #[arg(long, conflicts_with = "tcp", required_unless_present_any = ["tcp", "ublk"])]
    pub socket: Option<PathBuf>,
    /// Serve NBD on TCP: PORT (on 127.0.0.1) or ADDR:PORT.
    #[arg(long)]
    pub tcp: Option<String>,
    /// The NBD export name (the default export "" is served too).
    #[arg(long = "export-name", default_value = "")]
    pub export_name: String,
    /// Commands in flight per I/O queue (default: what the queue allows); with
    /// --ublk also the ublk queue depth.
    #[arg(long)]
    pub iodepth: Option<u32>,
    /// Create a ublk block device (/dev/ublkbN: one ublk queue per I/O queue, the
    /// queue's depth) instead of an NBD server. Needs the ublk_drv module.
    #[arg(long, conflicts_with_all = ["socket", "tcp", "export_name"])]
    pub ublk: bool,
}

/// `--tcp PORT` or `--tcp ADDR:PORT`.
fn parse_tcp(s: &str) -> Result<SocketAddr, CliError> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(DEFAULT_TCP_HOST, port));
    }
    s.parse()
        .map_err(|_| CliError::Usage(format!("--tcp {s:?}: expected PORT or ADDR:PORT")))
}

fn listen_addr(a: &MapArgs) -> Result<Listen, CliError> {
    match (&a.socket, &a.tcp) {
        (Some(p), _) => Ok(Listen::Unix(p.clone())),
        (None, Some(t)) => {
            let addr = parse_tcp(t)?;
            if !addr.ip().is_loopback() {
                eprintln!(
                    "warning: NBD has no authentication; anyone who reaches {addr} can read and \
                     write namespace {}",
                    a.nsid
                );
            }
            Ok(Listen::Tcp(addr))
        }
        (None, None) => Err(CliError::Usage(
            "map needs --socket PATH or --tcp [ADDR:]PORT".into(),
        )),
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and every thread started after) and
/// returns a signalfd that receives them.
fn block_stop_signals() -> Result<SignalFd, CliError> {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    mask.thread_block()
        .and_then(|()| SignalFd::new(&mask))
        .map_err(|e| CliError::Failed(Error::Io(e.into())))
}

pub fn map_cmd(a: &MapArgs) -> CliResult {
    let listen = if a.ublk { None } else { Some(listen_addr(a)?) };
    if a.iodepth == Some(0) {
        return Err(CliError::Usage("--iodepth must be at least 1".into()));
    }
    let policy = reconnect_args::policy(a.conn.ctrl_loss_tmo, a.conn.reconnect_delay)?;
    let signals = block_stop_signals()?;
    let s = open(&a.conn)?;
    let min_q = a
        .iodepth
        .and_then(|d| u16::try_from(d.saturating_add(1)).ok())
        .unwrap_or(0);
    let mut o = connect_options(&a.conn, &s, 1, min_q)?;
    if a.conn.nr_io_queues.is_none() {
        o.nr_io_queues = DEFAULT_MAP_QUEUES;
    }
    // More paths (-a repeated): a lost connection fails over to the next one.
    let session = reconnect_args::connect(s.fabric.clone(), o, policy)?
        .with_paths(super::session::more_paths(&a.conn, &s.host.hostnqn)?);
    let opts = MapOptions {
        nsid: Nsid(a.nsid),
        export_name: a.export_name.clone(),
        depth: a.iodepth.map(|d| d as usize),
        fast_io_fail: reconnect_args::fast_io_fail(a.conn.fast_io_fail_tmo),
    };
    let listener = match &listen {
        Some(l) => Some(Listener::bind(l).map_err(|e| {
            CliError::Failed(Error::Io(std::io::Error::new(
                e.kind(),
                format!("{l}: {e}"),
            )))
        })?),
        None => None,
    };
    let endpoint = match &listener {
        Some(l) => Endpoint::Nbd(l),
        None => Endpoint::Ublk,
    };
    let stop = Arc::new(Stopper::new()?);
    watch_signals(signals, stop.clone())?;
    let nsid = opts.nsid;
    let ublk = a.ublk;
    // Worker i drives queue i; after a lost connection it takes queue i of the
    // reconnected controller (unless --ctrl-loss-tmo 0).
    let served = map::serve_session(
        session,
        endpoint,
        &opts,
        policy.is_some(),
        &stop,
        move |r: &Ready| {
            if ublk {
                println!(
                    "nsid {nsid} of {} exported as {} ({} queues x {}); stop with SIGINT/SIGTERM",
                    r.subnqn, r.device, r.queues, r.depth
                );
            } else {
                println!(
                    "nsid {nsid} of {} ({} bytes, {}-byte blocks) exported over NBD at {} ({} \
                     queues x {} commands); stop with SIGINT/SIGTERM",
                    r.subnqn, r.size_bytes, r.block_size, r.device, r.queues, r.depth
                );
            }
            let _ = std::io::stdout().flush();
        },
    )?;
    drop(listener);
    let stats = served.stats;
    if ublk {
        eprintln!(
            "stopped: {} requests ({} failed), {} NVMe commands, {} reconnect(s){}",
            stats.requests,
            stats.errors,
            stats.commands,
            served.reconnects,
            stuck_note(&stats)
        );
    } else {
        eprintln!(
            "stopped: {} connections, {} requests ({} failed), {} NVMe commands{}",
            stats.connections,
            stats.requests,
            stats.errors,
            stats.commands,
            stuck_note(&stats)
        );
    }
    Ok(())
}

/// The end of the "stopped" line: the commands that were reported stuck, if any (the
/// warnings themselves went to the log as they happened).
fn stuck_note(stats: &map::MapStats) -> String {
    if stats.ages.stuck == 0 {
        return String::new();
    }
    format!(
        "; {} stuck command(s) reported, the longest outstanding {:.1} s",
        stats.ages.stuck,
        stats.ages.longest.as_secs_f64()
    )
}

/// Triggers `stop` on the first SIGINT/SIGTERM.
fn watch_signals(signals: SignalFd, stop: Arc<Stopper>) -> CliResult {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Ok(Some(si)) = signals.read_signal() {
                let name = Signal::try_from(si.ssi_signo as i32)
                    .map(|s| s.as_str())
                    .unwrap_or("signal");
                eprintln!("{name}: draining in-flight I/O and disconnecting");
            }
            stop.trigger();
        })
        .map(|_| ())
        .map_err(|e| CliError::Failed(Error::Io(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_addresses() {
        assert_eq!(
            parse_tcp("10809").unwrap(),
            "127.0.0.1:10809".parse().unwrap()
        );
        assert_eq!(
            parse_tcp("[::1]:10809").unwrap(),
            "[::1]:10809".parse().unwrap()
        );
        assert!(parse_tcp("localhost").is_err());
    }
}
