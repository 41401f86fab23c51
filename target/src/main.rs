//! `nvmf-target`: serve NVM subsystems over NVMe-oF.
//!
//!     nvmf-target --config configs/loopback.yaml
//!     nvmf-target --transport rdma --listen 10.0.0.1:4420 --namespace /dev/nvme0n1
//!     nvmf-target check-config FILE

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tracing::{error, info};

use nvmf_common::config::{Config, TrType};
use nvmf_common::types::Nqn;
use nvmf_common::verbs::soft::SoftDevice;
use nvmf_common::verbs::Device;
use nvmf_target::rdma::{listen_addr, RdmaServer};
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;

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
    /// Namespace: a file or block device path, ram:SIZE or null:SIZE (repeatable).
    #[arg(long = "namespace")]
    namespace: Vec<String>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Validate a configuration file without starting.
    CheckConfig { file: PathBuf },
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
    if let Some(Cmd::CheckConfig { file }) = &cli.cmd {
        return match Config::load(file) {
            Ok(_) => {
                println!("{}: OK", file.display());
                ExitCode::SUCCESS
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
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            eprintln!("nvmf-target: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The verbs device for ports of `trtype`.
fn device_for(trtype: TrType) -> Result<Arc<dyn Device>, String> {
    match trtype {
        TrType::Loopback => Ok(SoftDevice::global()),
        TrType::Rdma => Err(
            "RDMA on real verbs (rdma-sys) is not built into this version yet; \
                             use trtype loopback (see issue: NVMe/RDMA on real verbs)"
                .into(),
        ),
        TrType::Tcp => Err("NVMe/TCP ports are served by the TCP transport, not by verbs".into()),
    }
}

fn run(cfg: &Config) -> Result<(), String> {
    let target = Target::from_config(cfg).map_err(|e| e.to_string())?;
    let ports = target.ports();
    let mut servers = Vec::new();
    let mut tcp_servers = Vec::new();
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
            let s =
                TcpServer::start(target.clone(), &these).map_err(|e| format!("NVMe/TCP: {e}"))?;
            tcp_servers.push(s);
            continue;
        }
        let dev = device_for(trtype)?;
        servers.push(RdmaServer::start(target.clone(), dev, &these).map_err(|e| e.to_string())?);
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
    for s in &tcp_servers {
        for a in s.local_addrs() {
            println!("NVMe/TCP listening on {a}");
        }
    }
    wait_for_signal();
    info!("shutting down");
    for s in servers {
        s.shutdown();
    }
    for s in tcp_servers {
        s.shutdown();
    }
    Ok(())
}

fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it spawns afterwards),
/// so that [`wait_for_signal`] receives them synchronously.
fn block_stop_signals() {
    if let Err(e) = stop_signals().thread_block() {
        eprintln!("nvmf-target: cannot block signals: {e}");
    }
}

/// Blocks until SIGINT or SIGTERM.
fn wait_for_signal() {
    match stop_signals().wait() {
        Ok(sig) => info!("received {sig:?}"),
        Err(e) => error!("sigwait failed: {e}"),
    }
}
