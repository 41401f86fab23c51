//! `nvmf-target`: serve NVM subsystems over NVMe-oF.
//!
//!     nvmf-target --config configs/loopback.yaml
//!     nvmf-target --transport rdma --listen 10.0.0.1:4420 --namespace /dev/nvme0n1
//!     nvmf-target check-config FILE

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tracing::{error, info, warn};

use nvmf_common::types::Nqn;
use nvmf_target::config::{Config, PollMode, TrType};
use nvmf_target::group::lease::{self, LeaseStore};
use nvmf_target::group::GroupLink;
use nvmf_target::live::ctl::{self, CtlServer};
use nvmf_target::live::hooks::TcpPorts;
use nvmf_target::live::rdma_hooks::{RdmaPorts, TransportPorts};
use nvmf_target::live::Live;
use nvmf_target::live::{ctl_cmd, endpoint};
use nvmf_target::management::ManagementServer;
use nvmf_target::metrics::http::{MetricsServer, METRICS_PATH};
use nvmf_target::params::PortInfo;
use nvmf_target::rdma::{listen_addr, DevicePorts, RdmaServer};
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpOptions;
use nvmf_verbs::soft::SoftDevice;
use nvmf_verbs::Device;

#[derive(Parser, Debug)]
#[command(name = "nvmf-target", version, about = "NVMe-over-Fabrics target")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// YAML configuration (ports, subsystems, namespaces, hosts, transport tuning).
    #[arg(short, long, conflicts_with_all = ["transport", "listen", "nqn", "namespace"])]
    config: Option<PathBuf>,
    /// Transport of the single port: rdma, tcp or loopback.
    #[arg(short, long)]
    transport: Option<String>,
    /// Address and port to listen on (ADDR:PORT); default 127.0.0.1:4420.
    #[arg(short, long)]
    listen: Option<String>,
    /// Subsystem NQN; default nqn.2024-01.io.nvmf-rs:default.
    #[arg(short, long)]
    nqn: Option<String>,
    /// Namespace: a file or block device path, ram:SIZE, null:SIZE or rbd:POOL/IMAGE
    /// (repeatable).
    #[arg(long = "namespace")]
    namespace: Vec<String>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
    /// Admin socket for `nvmf-target ctl` (live changes, status).
    #[arg(long, default_value = ctl::DEFAULT_SOCKET)]
    ctl_socket: PathBuf,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Validate a configuration file without starting.
    CheckConfig { file: PathBuf },
    /// Change or inspect a running target through its admin socket, or a remote
    /// one through its management API (--server, with a client certificate).
    Ctl {
        /// The running target's admin socket.
        #[arg(long, default_value = ctl::DEFAULT_SOCKET)]
        socket: PathBuf,
        #[command(flatten)]
        remote: Box<nvmf_target::management::client::RemoteArgs>,
        #[command(subcommand)]
        op: Box<ctl_cmd::CtlCommand>,
    },
    /// Write man pages and shell completions into DIR (packaging).
    #[command(hide = true)]
    GenDocs { dir: PathBuf },
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

fn parse_transport(s: &str) -> Result<TrType, String> {
    match s {
        "rdma" => Ok(TrType::Rdma),
        "tcp" => Ok(TrType::Tcp),
        "loopback" | "loop" => Ok(TrType::Loopback),
        other => Err(format!("unknown transport {other:?} (rdma, tcp, loopback)")),
    }
}

fn build_config(cli: &Cli) -> Result<Config, String> {
    if let Some(path) = &cli.config {
        return Config::load(path).map_err(|e| e.to_string());
    }
    let Some(t) = &cli.transport else {
        return Err("give --config FILE, or --transport T --namespace SPEC [...]".into());
    };
    let trtype = parse_transport(t)?;
    if cli.namespace.is_empty() {
        return Err("at least one --namespace SPEC is needed".into());
    }
    let listen = match &cli.listen {
        Some(l) => {
            let (a, p) = l
                .rsplit_once(':')
                .ok_or_else(|| format!("--listen {l:?}: expected ADDR:PORT"))?;
            Some((
                a.trim_matches(|c| c == '[' || c == ']').to_string(),
                p.to_string(),
            ))
        }
        // rdma_cm cannot listen on 127.0.0.1 (no RDMA device has it), so rdma has no
        // default: the address picks the device.
        None if trtype == TrType::Rdma => {
            return Err(
                "--transport rdma needs --listen ADDR:PORT: an address of the RDMA device's \
                 network interface (or 0.0.0.0:4420 for every device)"
                    .into(),
            )
        }
        None => None,
    };
    let nqn = match &cli.nqn {
        Some(n) => Some(Nqn::new(n.clone()).map_err(|e| format!("--nqn {n:?}: {e}"))?),
        None => None,
    };
    Config::single(trtype, listen, nqn, cli.namespace.clone()).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(&cli.log_format);
    if let Some(Cmd::Ctl { socket, remote, op }) = &cli.cmd {
        let mut target = match endpoint::Endpoint::new(socket, remote) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("nvmf-target: {e}");
                return ExitCode::FAILURE;
            }
        };
        return if ctl_cmd::run_client(&mut target, op) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if let Some(Cmd::GenDocs { dir }) = &cli.cmd {
        return gen_docs(dir);
    }
    if let Some(Cmd::CheckConfig { file }) = &cli.cmd {
        return match Config::load(file) {
            Ok(cfg) => {
                let refused = nvmf_target::backend::spec::check_ceph_options(&cfg);
                if !refused.is_empty() {
                    for r in &refused {
                        eprintln!("{}: {r}", file.display());
                    }
                    return ExitCode::from(2);
                }
                let need = nvmf_target::limits::descriptors_needed(&cfg);
                match nvmf_target::limits::hard_nofile() {
                    Some(hard) if need > hard => {
                        eprintln!(
                            "{}: needs about {need} open files (namespaces x (1 + poll_groups) + {}), \
                             but the hard limit (ulimit -Hn) is {hard}",
                            file.display(),
                            nvmf_target::limits::RESERVED_DESCRIPTORS
                        );
                        ExitCode::from(2)
                    }
                    _ => {
                        println!("{}: OK", file.display());
                        ExitCode::SUCCESS
                    }
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        };
    }
    let cfg = match build_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.print_config {
        return match cfg.to_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        };
    }
    block_stop_signals();
    match run(&cfg, cli.config.clone(), &cli.ctl_socket) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            eprintln!("nvmf-target: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `gen-docs DIR`: man pages and completions from this command line's definition.
fn gen_docs(dir: &Path) -> ExitCode {
    use clap::CommandFactory;
    match nvmf_common::cli_docs::write(Cli::command(), dir) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvmf-target: gen-docs {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}

/// The verbs devices serving `ports` (all of `trtype`), each with its ports.
fn devices_for(
    trtype: TrType,
    ports: Vec<Arc<PortInfo>>,
    mode: PollMode,
) -> Result<DevicePorts, String> {
    match trtype {
        TrType::Loopback => Ok(vec![(SoftDevice::global() as Arc<dyn Device>, ports)]),
        #[cfg(feature = "rdma")]
        TrType::Rdma => nvmf_target::rdma::devices::open_for_ports(&ports, mode),
        #[cfg(not(feature = "rdma"))]
        TrType::Rdma => {
            let _ = mode;
            Err("RDMA on real verbs is not built into this binary (cargo feature `rdma`)".into())
        }
        TrType::Tcp => Err("NVMe/TCP ports are served by the TCP transport, not by verbs".into()),
    }
}

/// A gateway's membership: the link and its lease store.
type Joined = (Arc<GroupLink>, Arc<dyn LeaseStore>);

/// A gateway of a group runs its own file with the group's state laid on it, read
/// from RADOS before anything is served.
#[cfg(feature = "rbd")]
fn join_group(local: &Config) -> Result<(Config, Option<Joined>), String> {
    use nvmf_target::group::{rados_lease::RadosLeases, rados_store::RadosStore};
    let Some(g) = &local.gateway_group else {
        return Ok((local.clone(), None));
    };
    nvmf_target::group::check_local(local)?;
    let store = Arc::new(RadosStore::open(g)?);
    let leases = RadosLeases::new(
        store.pool().clone(),
        &g.name,
        &g.gateway,
        std::time::Duration::from_millis(g.lease_ms),
    )?;
    let (cfg, link) = nvmf_target::group::join(local, store)?;
    Ok((cfg, Some((link, Arc::new(leases)))))
}

#[cfg(not(feature = "rbd"))]
fn join_group(local: &Config) -> Result<(Config, Option<Joined>), String> {
    match local.gateway_group {
        Some(_) => {
            Err("gateway_group needs nvmf-target built with the `rbd` feature (librados)".into())
        }
        None => Ok((local.clone(), None)),
    }
}

fn run(local: &Config, config_path: Option<PathBuf>, ctl_socket: &Path) -> Result<(), String> {
    let (cfg, group) = join_group(local)?;
    let cfg = &cfg;
    match nvmf_target::limits::raise_nofile() {
        Ok((soft, hard)) => {
            let need = nvmf_target::limits::descriptors_needed(cfg);
            if need > soft {
                tracing::warn!(
                    need,
                    soft,
                    hard,
                    "the open-file limit may be too low for this configuration"
                );
            }
        }
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
    let target = Target::from_config(cfg).map_err(|e| e.to_string())?;
    let ports = target.ports();
    let mut servers = Vec::new();
    let mut tcp_ports = None;
    for trtype in [TrType::Loopback, TrType::Rdma, TrType::Tcp] {
        let these: Vec<_> = ports
            .iter()
            .filter(|p| p.trtype == trtype)
            .cloned()
            .collect();
        if these.is_empty() {
            continue;
        }
        if trtype == TrType::Tcp {
            let opts = TcpOptions::from(&cfg.tcp);
            let s = TcpPorts::start(target.clone(), &these, opts)
                .map_err(|e| format!("NVMe/TCP: {e}"))?;
            tcp_ports = Some(Arc::new(s));
            continue;
        }
        for (dev, ports) in devices_for(trtype, these, target.params.poll_mode)? {
            let s = RdmaServer::start(target.clone(), dev, &ports)
                .map_err(|e| format!("NVMe/RDMA: {e}"))?;
            servers.push(s);
        }
    }
    for s in target.subsystems() {
        let nsids = s.active_nsids();
        println!(
            "serving {} ({} namespace(s): {:?})",
            s.nqn,
            nsids.len(),
            nsids
        );
    }
    for p in &ports {
        println!(
            "port {} {} at {}",
            p.portid,
            p.trtype.as_str(),
            listen_addr(p)
        );
    }
    let tcp_ports = match tcp_ports {
        Some(t) => t,
        None => Arc::new(
            TcpPorts::start(target.clone(), &[], TcpOptions::from(&cfg.tcp))
                .map_err(|e| format!("NVMe/TCP: {e}"))?,
        ),
    };
    for a in tcp_ports.local_addrs() {
        println!("NVMe/TCP listening on {a}");
    }
    let mode = target.params.poll_mode;
    let rdma_ports = Arc::new(RdmaPorts::new(
        target.clone(),
        servers,
        Box::new(move |port: &Arc<PortInfo>| {
            let devices = devices_for(port.trtype, vec![port.clone()], mode)?;
            devices
                .into_iter()
                .next()
                .map(|(d, _)| d)
                .ok_or_else(|| format!("port {}: no verbs device serves it", port.portid))
        }),
    ));
    let hooks = Arc::new(TransportPorts {
        tcp: tcp_ports.clone(),
        rdma: rdma_ports.clone(),
    });
    // The metrics endpoint is part of the control plane: a failure to bind it stops
    // startup, as a port that cannot listen does (the operator asked for it).
    let metrics = match cfg.metrics.as_ref() {
        Some(m) => {
            let addr = m
                .socket_addr()
                .ok_or_else(|| format!("metrics.listen {:?} is not ADDR:PORT", m.listen))?;
            let s = MetricsServer::start(target.clone(), addr).map_err(|e| e.to_string())?;
            println!("metrics at http://{}{}", s.local_addr(), METRICS_PATH);
            Some(s)
        }
        None => None,
    };
    let live = Live::new(target.clone(), cfg.clone(), hooks, config_path);
    let group_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut group_threads = Vec::new();
    if let Some((link, leases)) = group {
        live.join_group(link.clone());
        let figures = link.clone();
        target
            .metrics
            .set_gateway_group(Box::new(move || figures.metrics_row()));
        let e = |e: std::io::Error| format!("cannot start the group's threads: {e}");
        let params = lease::LeaseParams::of(&link.config);
        group_threads.push(
            nvmf_target::group::spawn_sync(live.clone(), link.clone(), group_stop.clone())
                .map_err(e)?,
        );
        group_threads.push(
            lease::spawn(
                live.clone(),
                link,
                leases,
                params,
                group_stop.clone(),
                Box::new(restart_self),
            )
            .map_err(e)?,
        );
    }
    // Like the metrics endpoint: asked for, so a failure to serve it stops startup.
    let management = match cfg.management.as_ref() {
        Some(m) => {
            let s = ManagementServer::start(live.clone(), m)?;
            println!("management API at {} (gRPC, mutual TLS)", s.local_addr());
            Some(s)
        }
        None => None,
    };
    let ctl_server = match CtlServer::start(live.clone(), ctl_socket) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("admin socket unavailable (ctl and live changes by socket disabled): {e}");
            None
        }
    };
    while wait_for_signal() == Wake::Reload {
        match live.reload() {
            Ok(changes) if changes.is_empty() => info!("configuration re-read: no change"),
            Ok(changes) => info!(changes = changes.len(), "configuration re-read and applied"),
            Err(e) => error!("configuration re-read refused, the running one stays: {e}"),
        }
    }
    info!("shutting down: no new connections; finishing commands in flight");
    group_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in group_threads {
        let _ = t.join();
    }
    drop(ctl_server);
    drop(management);
    drop(metrics);
    rdma_ports.shutdown();
    tcp_ports.shutdown();
    let synced = target.sync_backends();
    info!(namespaces = synced, "backends synced; shutdown complete");
    Ok(())
}

/// Replaces this process with a new run of the same binary and arguments: a fenced
/// gateway's RADOS client is blocklisted, and a new process connects with a new one
/// and rejoins its group. Connections end (every socket is close-on-exec); hosts
/// reconnect through their other paths meanwhile.
fn restart_self() {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            error!("cannot find this binary to start again: {e}; exiting");
            std::process::exit(EXIT_RESTART_FAILED);
        }
    };
    let e = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .exec();
    error!("cannot start {} again: {e}; exiting", exe.display());
    std::process::exit(EXIT_RESTART_FAILED);
}

/// Exit status of a fenced gateway that could not start itself again (a service
/// manager restarts it).
const EXIT_RESTART_FAILED: i32 = 75;

fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set
}

/// Why [`wait_for_signal`] returned.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// SIGHUP: re-read the configuration.
    Reload,
    /// SIGINT, SIGTERM (or a failed wait): shut down.
    Stop,
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it spawns afterwards),
/// so that [`wait_for_signal`] receives them synchronously.
fn block_stop_signals() {
    if let Err(e) = stop_signals().thread_block() {
        eprintln!("nvmf-target: cannot block signals: {e}");
    }
}

/// Blocks until SIGINT, SIGTERM or SIGHUP.
fn wait_for_signal() -> Wake {
    match stop_signals().wait() {
        Ok(nix::sys::signal::Signal::SIGHUP) => {
            info!("received SIGHUP: re-reading the configuration");
            Wake::Reload
        }
        Ok(sig) => {
            info!("received {sig:?}");
            Wake::Stop
        }
        Err(e) => {
            error!("sigwait failed: {e}");
            Wake::Stop
        }
    }
}
