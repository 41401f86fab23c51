//! The `nvmf-initiator` command line: nvme-cli's connection flags, fio's perf flags.
//!
//! Owned by the CLI (binary) side of the crate; everything it does goes through the
//! library. Exit codes: 0 success, 1 an I/O or NVMe error (the status name and
//! SCT/SC are printed), 2 a usage error.

use std::io::Write as _;
use std::net::ToSocketAddrs as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod map_cmd;
mod reconnect_args;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use serde_json::json;
use tracing_subscriber::EnvFilter;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::verbs::Device;
use nvmf_common::wire::identify::{flbas_index, IdentifyNamespace};

use nvmf_initiator::controller::{ConnectOptions, Controller, NamespaceInfo};
use nvmf_initiator::discovery::{discover_log_with, format_discovery_log};
use nvmf_initiator::error::Error;
use nvmf_initiator::hostnqn::{HostIdentity, IdentitySource};
use nvmf_initiator::loopback::{start_loopback, LoopbackTarget};
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::perf::{self, parse::format_bytes, BsSpec, PerfOptions, PerfTarget, Rw};
use nvmf_initiator::requeue::{Requeue, SharedSession};
use nvmf_initiator::transport::rdma::RdmaFabric;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;

/// Exit code for an I/O or NVMe error.
const EXIT_FAILURE: u8 = 1;
/// Exit code for a usage error.
const EXIT_USAGE: u8 = 2;
/// Milliseconds per second (KATO is given in seconds, carried in ms).
const MS_PER_SEC: u32 = 1000;
/// Bytes per hexdump line.
const HEXDUMP_WIDTH: usize = 16;

#[derive(Debug, Parser)]
#[command(
    name = "nvmf-initiator",
    version,
    about = "NVMe over Fabrics host: discover, identify, read, write and measure remote namespaces"
)]
pub struct Cli {
    /// More logging: -v info, -vv debug (RUST_LOG overrides).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read the discovery log page (like `nvme discover`).
    Discover(DiscoverArgs),
    /// Print Identify Controller and Identify Namespace (like `nvme id-ctrl` / `id-ns`).
    Identify(IdentifyArgs),
    /// List the active namespaces.
    List(ListArgs),
    /// Read blocks (hexdump to stdout, or to a file).
    Read(ReadArgs),
    /// Write blocks from a file or a byte pattern.
    Write(WriteArgs),
    /// Measure a namespace (fio-like).
    Perf(PerfArgs),
    /// Export a namespace locally as an NBD server until SIGINT/SIGTERM.
    Map(map_cmd::MapArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportKind {
    Rdma,
    Tcp,
    /// An in-process target (software RDMA): `--config FILE` or `--namespace SPEC`.
    Loopback,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Normal,
    Json,
}

/// Connection flags (nvme-cli names).
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Transport.
    #[arg(short = 't', long, value_enum)]
    pub transport: TransportKind,
    /// Transport address (IP address for rdma and tcp).
    #[arg(short = 'a', long)]
    pub traddr: Option<String>,
    /// Transport service id (port).
    #[arg(short = 's', long, default_value = "4420")]
    pub trsvcid: String,
    /// Subsystem NQN (loopback: defaults to the in-process target's first subsystem).
    #[arg(short = 'n', long)]
    pub nqn: Option<String>,
    /// Host NQN (default: /etc/nvme/hostnqn, else generated for this run).
    #[arg(short = 'q', long)]
    pub hostnqn: Option<String>,
    /// Host identifier, a UUID (default: /etc/nvme/hostid).
    #[arg(short = 'I', long)]
    pub hostid: Option<String>,
    /// I/O queues to request.
    #[arg(short = 'i', long = "nr-io-queues")]
    pub nr_io_queues: Option<u16>,
    /// I/O queue size (entries).
    #[arg(short = 'Q', long = "queue-size")]
    pub queue_size: Option<u16>,
    /// Keep-alive timeout in seconds (0 disables).
    #[arg(short = 'k', long = "keep-alive-tmo")]
    pub keep_alive_tmo: Option<u32>,
    /// NVMe/TCP header digest.
    #[arg(long = "hdr-digest")]
    pub hdr_digest: bool,
    /// NVMe/TCP data digest.
    #[arg(long = "data-digest")]
    pub data_digest: bool,
    /// Per-command timeout in seconds.
    #[arg(long = "timeout", default_value_t = 30)]
    pub timeout: u64,
    /// perf, map: seconds to keep reconnecting after a lost connection (-1: forever,
    /// 0: no reconnect); interrupted I/O is retried on the reconnected controller.
    #[arg(
        long = "ctrl-loss-tmo",
        default_value_t = reconnect_args::DEFAULT_CTRL_LOSS_TMO_SECS,
        allow_negative_numbers = true
    )]
    pub ctrl_loss_tmo: i64,
    /// perf, map: seconds before the second reconnect attempt (doubling up to 60 s).
    #[arg(long = "reconnect-delay", default_value_t = reconnect_args::DEFAULT_RECONNECT_DELAY_SECS)]
    pub reconnect_delay: u64,
    /// Loopback: the target's YAML config.
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
    /// Loopback: a namespace of the in-process target (ram:1G, null:1G, a file path);
    /// may be repeated.
    #[arg(long = "namespace")]
    pub namespace: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DiscoverArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(
        long = "output-format",
        short = 'o',
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct IdentifyArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Only this namespace (default: the controller and every namespace).
    #[arg(long)]
    pub nsid: Option<u32>,
    #[arg(
        long = "output-format",
        short = 'o',
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(
        long = "output-format",
        short = 'o',
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long, short = 'l', default_value_t = 0)]
    pub lba: u64,
    /// Number of blocks.
    #[arg(long, short = 'c', default_value_t = 1)]
    pub count: u64,
    /// Write the data to this file instead of a hexdump on stdout.
    #[arg(long, short = 'O')]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long, short = 'l', default_value_t = 0)]
    pub lba: u64,
    /// Number of blocks (default: the input file's size, rounded up; 1 with --pattern).
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Data to write (zero-padded to whole blocks).
    #[arg(long, conflicts_with = "pattern")]
    pub input: Option<PathBuf>,
    /// Fill every byte with this value (decimal or 0x hex).
    #[arg(long, value_parser = parse_byte)]
    pub pattern: Option<u8>,
}

#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// read, write, randread, randwrite or randrw.
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    pub rw: Rw,
    /// Percentage of reads for randrw.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u8,
    /// Block size ("4k") or range ("4k-64k").
    #[arg(long, default_value = "4k", value_parser = parse_bs)]
    pub bs: BsSpec,
    /// Commands in flight per job.
    #[arg(long, default_value_t = 32)]
    pub iodepth: u32,
    /// Jobs, each a thread with its own I/O queue.
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,
    /// Measured time ("10", "10s", "500ms"); default 10 s unless --size is given
    /// (then one pass over it).
    #[arg(long, value_parser = parse_duration)]
    pub runtime: Option<Duration>,
    /// Bytes of the namespace to use ("1G").
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Time to run before measuring.
    #[arg(long = "ramp_time", alias = "ramp-time", value_parser = parse_duration)]
    pub ramp_time: Option<Duration>,
    /// Stamp and check data (writes are read back after the run).
    #[arg(long)]
    pub verify: bool,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Seed for offsets and verify stamps.
    #[arg(long, default_value_t = perf::DEFAULT_SEED)]
    pub seed: u64,
    #[arg(long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
    /// Write an SVG with the latency histogram and IOPS over time.
    #[arg(long = "latency-plot")]
    pub latency_plot: Option<PathBuf>,
}

fn parse_byte(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a byte (0..=255 or 0x00..=0xff)"))
}

fn parse_rw(s: &str) -> Result<Rw, String> {
    s.parse().map_err(|e: Error| e.to_string())
}
fn parse_bs(s: &str) -> Result<BsSpec, String> {
    s.parse().map_err(|e: Error| e.to_string())
}
fn parse_duration(s: &str) -> Result<Duration, String> {
    perf::parse_duration(s).map_err(|e| e.to_string())
}
fn parse_size(s: &str) -> Result<u64, String> {
    perf::parse_size(s).map_err(|e| e.to_string())
}

/// A CLI failure with its exit code.
#[derive(Debug)]
pub enum CliError {
    Usage(String),
    Failed(Error),
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidArgument(m) => CliError::Usage(m),
            Error::Unsupported(m) => CliError::Usage(format!("not supported: {m}")),
            other => CliError::Failed(other),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Failed(Error::Io(e))
    }
}

type CliResult = Result<(), CliError>;

/// The local RDMA device that reaches `addr` (`IP:PORT`), for `-t rdma`.
#[cfg(feature = "rdma")]
fn rdma_device(addr: &str, timeout: Duration) -> Result<Arc<dyn Device>, CliError> {
    use nvmf_common::verbs::rdma::RdmaDevice;
    match RdmaDevice::for_remote_addr(addr, timeout) {
        Ok(d) => Ok(d),
        Err(e) => Err(CliError::Failed(Error::Transport(
            nvmf_initiator::transport::TransportError::Other(format!("-t rdma to {addr}: {e}")),
        ))),
    }
}

#[cfg(not(feature = "rdma"))]
fn rdma_device(_addr: &str, _timeout: Duration) -> Result<Arc<dyn Device>, CliError> {
    Err(CliError::Usage(
        "-t rdma: real RDMA verbs are not built into this binary (cargo feature `rdma`)".into(),
    ))
}

/// A fabric and what keeps it alive.
struct Session {
    fabric: Arc<dyn Fabric>,
    default_nqn: Option<Nqn>,
    host: HostIdentity,
    timeout: Duration,
    // Declared last: dropped after the fabric, so the in-process target outlives every
    // host-side queue.
    _loopback: Option<LoopbackTarget>,
}

fn open(conn: &ConnArgs) -> Result<Session, CliError> {
    if (conn.hdr_digest || conn.data_digest) && conn.transport != TransportKind::Tcp {
        return Err(CliError::Usage(
            "--hdr-digest/--data-digest: not supported on this transport".into(),
        ));
    }
    if conn.timeout == 0 {
        return Err(CliError::Usage(
            "--timeout must be at least 1 second".into(),
        ));
    }
    let host = HostIdentity::load(conn.hostnqn.as_deref(), conn.hostid.as_deref())?;
    if host.source == IdentitySource::Generated {
        eprintln!(
            "note: no host identity configured (/etc/nvme/hostnqn, /etc/nvme/hostid); \
             using {} with host id {} for this run only (pass -q/-I to fix one)",
            host.hostnqn,
            host.hostid_string()
        );
    }
    let timeout = Duration::from_secs(conn.timeout);
    match conn.transport {
        TransportKind::Loopback => {
            let (fabric, target, nqn) = start_loopback(conn.config.as_deref(), &conn.namespace)?;
            Ok(Session {
                fabric,
                default_nqn: Some(nqn),
                host,
                timeout,
                _loopback: Some(target),
            })
        }
        TransportKind::Tcp => Ok(Session {
            fabric: Arc::new(tcp_fabric(conn)?),
            default_nqn: None,
            host,
            timeout,
            _loopback: None,
        }),
        TransportKind::Rdma => {
            let traddr = conn
                .traddr
                .as_deref()
                .ok_or_else(|| CliError::Usage("-t rdma needs -a/--traddr".into()))?;
            let addr = format!("{traddr}:{}", conn.trsvcid);
            let device = rdma_device(&addr, timeout)?;
            let fabric = RdmaFabric::new(device, addr).map_err(Error::Transport)?;
            Ok(Session {
                fabric: Arc::new(fabric),
                default_nqn: None,
                host,
                timeout,
                _loopback: None,
            })
        }
    }
}

/// The NVMe/TCP fabric for `-t tcp -a ADDR -s PORT [--hdr-digest] [--data-digest]`.
fn tcp_fabric(conn: &ConnArgs) -> Result<TcpFabric, CliError> {
    let traddr = conn
        .traddr
        .as_deref()
        .ok_or_else(|| CliError::Usage("-t tcp needs -a/--traddr".into()))?;
    let port: u16 = conn.trsvcid.parse().map_err(|_| {
        CliError::Usage(format!(
            "-s/--trsvcid {:?}: not a TCP port number",
            conn.trsvcid
        ))
    })?;
    // An IPv6 address may come bracketed ("[fe80::1]").
    let host = traddr
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(traddr);
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| CliError::Usage(format!("-a/--traddr {traddr:?}: {e}")))?
        .next()
        .ok_or_else(|| CliError::Usage(format!("-a/--traddr {traddr:?}: no address")))?;
    Ok(TcpFabric::new(
        addr,
        TcpOptions {
            hdr_digest: conn.hdr_digest,
            data_digest: conn.data_digest,
            ..TcpOptions::default()
        },
    ))
}

/// Connection options for an I/O subsystem from the flags.
fn connect_options(
    conn: &ConnArgs,
    s: &Session,
    io_queues: u16,
    min_queue_size: u16,
) -> Result<ConnectOptions, CliError> {
    let nqn = match (&conn.nqn, &s.default_nqn) {
        (Some(n), _) => {
            Nqn::new(n.as_str()).map_err(|e| CliError::Usage(format!("-n/--nqn {n:?}: {e}")))?
        }
        (None, Some(d)) => d.clone(),
        (None, None) => return Err(CliError::Usage("-n/--nqn is required".into())),
    };
    let mut o = ConnectOptions::new(nqn, s.host.hostnqn.clone(), s.host.hostid);
    o.nr_io_queues = conn.nr_io_queues.unwrap_or(io_queues).max(io_queues);
    if let Some(q) = conn.queue_size {
        o.queue_size = q;
    } else {
        o.queue_size = o.queue_size.max(min_queue_size);
    }
    if let Some(k) = conn.keep_alive_tmo {
        o.kato_ms = k.saturating_mul(MS_PER_SEC);
    }
    o.command_timeout = s.timeout;
    o.connect_timeout = s.timeout;
    Ok(o)
}

fn print_json(v: &serde_json::Value) -> CliResult {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::Failed(Error::Protocol(format!("JSON: {e}"))))?;
    println!("{s}");
    Ok(())
}

fn discover(a: &DiscoverArgs) -> CliResult {
    let s = open(&a.conn)?;
    let subnqn = match &a.conn.nqn {
        Some(n) => {
            Nqn::new(n.as_str()).map_err(|e| CliError::Usage(format!("-n/--nqn {n:?}: {e}")))?
        }
        None => Nqn::discovery(),
    };
    let mut o = ConnectOptions::new(subnqn, s.host.hostnqn.clone(), s.host.hostid);
    // Discovery controllers get no keep-alive unless asked (-k), as nvme-cli does.
    o.kato_ms = a
        .conn
        .keep_alive_tmo
        .map_or(0, |k| k.saturating_mul(MS_PER_SEC));
    o.command_timeout = s.timeout;
    o.connect_timeout = s.timeout;
    let log = discover_log_with(s.fabric.clone(), o)?;
    match a.output_format {
        OutputFormat::Normal => print!("{}", format_discovery_log(&log)),
        OutputFormat::Json => print_json(&json!(log))?,
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn uuid_str(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

fn ns_json(n: &NamespaceInfo) -> serde_json::Value {
    json!({
        "nsid": n.nsid.0,
        "nsze": n.nsze,
        "ncap": n.ncap,
        "nuse": n.nuse,
        "block_size": n.block_size,
        "size_bytes": n.size_bytes(),
        "nguid": hex(&n.nguid),
        "eui64": hex(&n.eui64),
        "uuid": n.uuid.as_ref().map(uuid_str),
    })
}

/// `nvme id-ns`-style text for one namespace.
fn id_ns_text(nsid: Nsid, raw: &[u8], info: Option<&NamespaceInfo>) -> String {
    use std::fmt::Write as _;
    let id = IdentifyNamespace::new_unchecked(raw);
    let mut s = String::new();
    let _ = writeln!(s, "NVME Identify Namespace {nsid}:");
    let _ = writeln!(s, "nsze    : {:#x}", id.nsze());
    let _ = writeln!(s, "ncap    : {:#x}", id.ncap());
    let _ = writeln!(s, "nuse    : {:#x}", id.nuse());
    let _ = writeln!(s, "nsfeat  : {:#x}", id.nsfeat());
    let _ = writeln!(s, "nlbaf   : {}", id.nlbaf());
    let _ = writeln!(s, "flbas   : {:#x}", id.flbas());
    let _ = writeln!(s, "nmic    : {:#x}", id.nmic());
    let _ = writeln!(s, "dlfeat  : {}", id.dlfeat());
    let _ = writeln!(s, "nguid   : {}", hex(&id.nguid()));
    let _ = writeln!(s, "eui64   : {}", hex(&id.eui64()));
    if let Some(u) = info.and_then(|i| i.uuid.as_ref()) {
        let _ = writeln!(s, "uuid    : {}", uuid_str(u));
    }
    let in_use = usize::from(flbas_index(id.flbas()));
    for i in 0..=usize::from(id.nlbaf()) {
        let f = id.lbaf(i);
        let _ = writeln!(
            s,
            "lbaf {i:>2} : ms:{:<3} lbads:{:<2} rp:{:#x}{}",
            f.ms,
            f.ds,
            f.rp,
            if i == in_use { " (in use)" } else { "" }
        );
    }
    s
}

fn identify(a: &IdentifyArgs) -> CliResult {
    let s = open(&a.conn)?;
    let o = connect_options(&a.conn, &s, 0, 0)?;
    let ctrl = Controller::connect(s.fabric.clone(), o)?;
    let id = ctrl.id_ctrl();
    let nsids: Vec<Nsid> = match a.nsid {
        Some(n) => vec![Nsid(n)],
        None => ctrl.namespaces().iter().map(|n| n.nsid).collect(),
    };
    let mut raws = Vec::with_capacity(nsids.len());
    for &n in &nsids {
        raws.push((n, ctrl.identify_namespace(n)?));
    }
    match a.output_format {
        OutputFormat::Json => {
            let nss: Vec<serde_json::Value> = nsids
                .iter()
                .filter_map(|&n| ctrl.namespace(n).ok().map(ns_json))
                .collect();
            print_json(&json!({
                "controller": id,
                "cntlid": ctrl.cntlid().0,
                "cap": ctrl.cap().0,
                "vs": ctrl.vs(),
                "namespaces": nss,
            }))?;
        }
        OutputFormat::Normal => {
            println!("NVME Identify Controller:");
            let rows: Vec<(&str, String)> = vec![
                ("vid", format!("{:#x}", id.vid)),
                ("ssvid", format!("{:#x}", id.ssvid)),
                ("sn", id.sn.clone()),
                ("mn", id.mn.clone()),
                ("fr", id.fr.clone()),
                ("rab", id.rab.to_string()),
                ("ieee", hex(&id.ieee)),
                ("cmic", format!("{:#x}", id.cmic)),
                ("mdts", id.mdts.to_string()),
                ("cntlid", format!("{:#x}", id.cntlid)),
                ("ver", format!("{:#x}", id.ver)),
                ("rtd3e", id.rtd3e.to_string()),
                ("oaes", format!("{:#x}", id.oaes)),
                ("ctratt", format!("{:#x}", id.ctratt)),
                ("cntrltype", id.cntrltype.to_string()),
                ("oacs", format!("{:#x}", id.oacs)),
                ("acl", id.acl.to_string()),
                ("aerl", id.aerl.to_string()),
                ("frmw", format!("{:#x}", id.frmw)),
                ("lpa", format!("{:#x}", id.lpa)),
                ("elpe", id.elpe.to_string()),
                ("kas", id.kas.to_string()),
                ("sqes", format!("{:#x}", id.sqes)),
                ("cqes", format!("{:#x}", id.cqes)),
                ("maxcmd", id.maxcmd.to_string()),
                ("nn", id.nn.to_string()),
                ("oncs", format!("{:#x}", id.oncs)),
                ("fuses", format!("{:#x}", id.fuses)),
                ("vwc", format!("{:#x}", id.vwc)),
                ("sgls", format!("{:#x}", id.sgls)),
                ("mnan", id.mnan.to_string()),
                ("subnqn", id.subnqn.clone()),
                ("ioccsz", id.ioccsz.to_string()),
                ("iorcsz", id.iorcsz.to_string()),
                ("icdoff", id.icdoff.to_string()),
                ("fcatt", format!("{:#x}", id.fcatt)),
                ("msdbd", id.msdbd.to_string()),
            ];
            for (k, v) in rows {
                println!("{k:<10}: {v}");
            }
            for (n, raw) in &raws {
                println!();
                print!("{}", id_ns_text(*n, raw, ctrl.namespace(*n).ok()));
            }
        }
    }
    ctrl.shutdown()?;
    Ok(())
}

fn list(a: &ListArgs) -> CliResult {
    let s = open(&a.conn)?;
    let o = connect_options(&a.conn, &s, 0, 0)?;
    let ctrl = Controller::connect(s.fabric.clone(), o)?;
    match a.output_format {
        OutputFormat::Json => {
            let v: Vec<serde_json::Value> = ctrl.namespaces().iter().map(ns_json).collect();
            print_json(&json!({
                "subnqn": ctrl.options().subnqn.as_str(),
                "namespaces": v,
            }))?;
        }
        OutputFormat::Normal => print!("{}", format_list(ctrl.namespaces())),
    }
    ctrl.shutdown()?;
    Ok(())
}

/// The namespace table of `list`.
pub fn format_list(nss: &[NamespaceInfo]) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "{:<6} {:>10} {:>10} {:>14}  {}\n",
        "NSID", "Size", "Block", "Blocks", "NGUID / UUID"
    );
    for n in nss {
        let id = n
            .uuid
            .as_ref()
            .map(uuid_str)
            .unwrap_or_else(|| hex(&n.nguid));
        let _ = writeln!(
            s,
            "{:<6} {:>10} {:>10} {:>14}  {id}",
            n.nsid.0,
            format_bytes(n.size_bytes()),
            n.block_size,
            n.nsze
        );
    }
    s
}

/// `hexdump -C` style: offset, 16 hex bytes, ASCII; repeated lines become `*`.
pub fn hexdump(data: &[u8], base: u64) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in data.chunks(HEXDUMP_WIDTH).enumerate() {
        let off = base + (i * HEXDUMP_WIDTH) as u64;
        if prev == Some(line) && line.len() == HEXDUMP_WIDTH {
            if !starred {
                s.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(line);
        let _ = write!(s, "{off:08x} ");
        for j in 0..HEXDUMP_WIDTH {
            if j == HEXDUMP_WIDTH / 2 {
                s.push(' ');
            }
            match line.get(j) {
                Some(b) => {
                    let _ = write!(s, " {b:02x}");
                }
                None => s.push_str("   "),
            }
        }
        s.push_str("  |");
        for &b in line {
            s.push(if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            });
        }
        s.push_str("|\n");
    }
    let _ = writeln!(s, "{:08x}", base + data.len() as u64);
    s
}

/// Connects with one I/O queue and runs `f` on namespace `nsid`.
fn with_ns<T>(
    conn: &ConnArgs,
    nsid: u32,
    f: impl FnOnce(&mut NsIo<'_>) -> Result<T, Error>,
) -> Result<T, CliError> {
    let s = open(conn)?;
    let o = connect_options(conn, &s, 1, 0)?;
    let mut ctrl = Controller::connect(s.fabric.clone(), o)?;
    let mut qs = ctrl.take_io_queues();
    let q = qs
        .first_mut()
        .ok_or_else(|| CliError::Failed(Error::Protocol("no I/O queue was granted".into())))?;
    let r = {
        let mut io = NsIo::new(&ctrl, q, Nsid(nsid))?;
        f(&mut io)
    };
    drop(qs);
    let out = r?;
    ctrl.shutdown()?;
    Ok(out)
}

fn read(a: &ReadArgs) -> CliResult {
    if a.count == 0 {
        return Err(CliError::Usage("--count must be at least 1".into()));
    }
    let (data, bs) = with_ns(&a.conn, a.nsid, |io| {
        let bs = u64::from(io.info().block_size);
        let len = a
            .count
            .checked_mul(bs)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| Error::InvalidArgument("--count is too large".into()))?;
        let mut buf = vec![0u8; len];
        io.read(a.lba, &mut buf)?;
        Ok((buf, bs))
    })?;
    match &a.output {
        Some(p) => std::fs::write(p, &data)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(hexdump(&data, a.lba * bs).as_bytes())?;
        }
    }
    Ok(())
}

/// The bytes `write` sends: the input (or pattern) zero-padded to `count` blocks.
fn write_payload(
    input: Option<&Path>,
    pattern: Option<u8>,
    count: Option<u64>,
    bs: u64,
) -> Result<Vec<u8>, Error> {
    let src = match (input, pattern) {
        (Some(p), _) => std::fs::read(p)?,
        (None, Some(_)) | (None, None) => Vec::new(),
    };
    let blocks = match count {
        Some(c) => c,
        None if input.is_some() => (src.len() as u64).div_ceil(bs).max(1),
        None => 1,
    };
    if blocks == 0 {
        return Err(Error::InvalidArgument("--count must be at least 1".into()));
    }
    let len = blocks
        .checked_mul(bs)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or_else(|| Error::InvalidArgument("--count is too large".into()))?;
    if src.len() > len {
        return Err(Error::InvalidArgument(format!(
            "the input has {} bytes, more than {blocks} blocks of {bs}",
            src.len()
        )));
    }
    let mut data = match (input, pattern) {
        (None, Some(b)) => vec![b; len],
        _ => vec![0u8; len],
    };
    if let Some(dst) = data.get_mut(..src.len()) {
        dst.copy_from_slice(&src);
    }
    Ok(data)
}

fn write(a: &WriteArgs) -> CliResult {
    if a.input.is_none() && a.pattern.is_none() {
        return Err(CliError::Usage(
            "write needs --input FILE or --pattern BYTE".into(),
        ));
    }
    with_ns(&a.conn, a.nsid, |io| {
        let bs = u64::from(io.info().block_size);
        let data = write_payload(a.input.as_deref(), a.pattern, a.count, bs)?;
        io.write(a.lba, &data)?;
        io.flush()
    })?;
    Ok(())
}

fn perf_cmd(a: &PerfArgs) -> CliResult {
    let policy = reconnect_args::policy(a.conn.ctrl_loss_tmo, a.conn.reconnect_delay)?;
    let s = open(&a.conn)?;
    let jobs =
        u16::try_from(a.numjobs).map_err(|_| CliError::Usage("--numjobs is too large".into()))?;
    let min_q = u16::try_from(a.iodepth.saturating_add(1)).unwrap_or(u16::MAX);
    let o = connect_options(&a.conn, &s, jobs.max(1), min_q)?;
    let mut session = reconnect_args::connect(s.fabric.clone(), o, policy)?;
    let target = PerfTarget::from_controller(session.controller()?, Nsid(a.nsid))?;
    let (shared, mut queues) = SharedSession::new(session)?;
    let opts = PerfOptions {
        rw: a.rw,
        rwmixread: a.rwmixread,
        bs: a.bs,
        iodepth: a.iodepth,
        numjobs: a.numjobs,
        runtime: match (a.runtime, a.size) {
            (Some(r), _) => Some(r),
            (None, Some(_)) => None,
            (None, None) => PerfOptions::default().runtime,
        },
        size: a.size,
        ramp_time: a.ramp_time.unwrap_or_default(),
        verify: a.verify,
        nsid: Nsid(a.nsid),
        seed: a.seed,
        progress: a.output_format == OutputFormat::Normal,
    };
    let requeue = policy.map(|_| &shared as &dyn Requeue);
    let report = perf::run_recovering(&target, &mut queues, &opts, requeue)?;
    drop(queues);
    match a.output_format {
        OutputFormat::Normal => print!("{}", report.format_normal()),
        OutputFormat::Json => print_json(&report.to_json())?,
    }
    if let Some(p) = &a.latency_plot {
        perf::svg::write(&report, p)?;
    }
    let reconnects = shared.reconnects();
    if reconnects > 0 {
        eprintln!(
            "note: the connection was lost and the controller reconnected {reconnects} time(s)"
        );
    }
    shared.into_session().shutdown()?;
    if report.failed() {
        return Err(CliError::Failed(Error::Verify(format!(
            "{} I/O errors, {} blocks failed verification",
            report.errors(),
            report.verify.failure_count
        ))));
    }
    Ok(())
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Parses the command line, runs it, and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let r = match &cli.command {
        Command::Discover(a) => discover(a),
        Command::Identify(a) => identify(a),
        Command::List(a) => list(a),
        Command::Read(a) => read(a),
        Command::Write(a) => write(a),
        Command::Perf(a) => perf_cmd(a),
        Command::Map(a) => map_cmd::map_cmd(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(CliError::Failed(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_nvme_cli_and_fio_flags() {
        let c = Cli::try_parse_from([
            "nvmf-initiator",
            "perf",
            "-t",
            "loopback",
            "--namespace",
            "ram:64M",
            "-i",
            "2",
            "-Q",
            "64",
            "-k",
            "0",
            "--rw",
            "randrw",
            "--bs",
            "4k-64k",
            "--iodepth",
            "16",
            "--numjobs",
            "2",
            "--runtime",
            "5s",
            "--ramp_time",
            "1",
            "--size",
            "32M",
            "--verify",
            "--output-format",
            "json",
            "-v",
        ])
        .unwrap();
        assert_eq!(c.verbose, 1);
        let Command::Perf(p) = c.command else {
            panic!("not perf");
        };
        assert_eq!(p.conn.transport, TransportKind::Loopback);
        assert_eq!(p.conn.trsvcid, "4420");
        assert_eq!(
            (p.conn.nr_io_queues, p.conn.queue_size),
            (Some(2), Some(64))
        );
        assert_eq!(p.rw, Rw::RandRw);
        assert_eq!((p.bs.min, p.bs.max), (4096, 65536));
        assert_eq!(p.runtime, Some(Duration::from_secs(5)));
        assert_eq!(p.ramp_time, Some(Duration::from_secs(1)));
        assert_eq!(p.size, Some(32 << 20));
        assert!(p.verify);
        assert_eq!(p.output_format, OutputFormat::Json);
        assert_eq!(p.nsid, 1);

        let c = Cli::try_parse_from([
            "nvmf-initiator",
            "discover",
            "-t",
            "rdma",
            "-a",
            "10.0.0.1",
            "-s",
            "4421",
            "-q",
            "nqn.h",
            "-I",
            "3f6a2c1e-8a4b-4e4e-9b1a-0123456789ab",
        ])
        .unwrap();
        let Command::Discover(d) = c.command else {
            panic!("not discover");
        };
        assert_eq!(d.conn.traddr.as_deref(), Some("10.0.0.1"));
        assert_eq!(d.conn.trsvcid, "4421");

        assert!(
            Cli::try_parse_from(["nvmf-initiator", "list"]).is_err(),
            "-t required"
        );
        assert!(
            Cli::try_parse_from(["nvmf-initiator", "perf", "-t", "loopback", "--bs", "4x"])
                .is_err()
        );
        assert!(Cli::try_parse_from([
            "nvmf-initiator",
            "perf",
            "-t",
            "loopback",
            "--runtime",
            "x"
        ])
        .is_err());
        let c = Cli::try_parse_from([
            "nvmf-initiator",
            "write",
            "-t",
            "loopback",
            "--pattern",
            "0xAB",
            "--lba",
            "3",
        ])
        .unwrap();
        let Command::Write(w) = c.command else {
            panic!("not write");
        };
        assert_eq!(w.pattern, Some(0xAB));
        assert!(Cli::try_parse_from([
            "nvmf-initiator",
            "write",
            "-t",
            "loopback",
            "--pattern",
            "1",
            "--input",
            "f",
        ])
        .is_err());
    }

    #[test]
    fn reconnect_flags_like_nvme_cli() {
        let c = Cli::try_parse_from([
            "nvmf-initiator",
            "perf",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "--ctrl-loss-tmo",
            "-1",
            "--reconnect-delay",
            "2",
        ])
        .unwrap();
        let Command::Perf(p) = c.command else {
            panic!("not perf");
        };
        assert_eq!((p.conn.ctrl_loss_tmo, p.conn.reconnect_delay), (-1, 2));
        let c = Cli::try_parse_from(["nvmf-initiator", "list", "-t", "tcp", "-a", "::1"]).unwrap();
        let Command::List(l) = c.command else {
            panic!("not list");
        };
        assert_eq!(
            (l.conn.ctrl_loss_tmo, l.conn.reconnect_delay),
            (600, 10),
            "the kernel host's defaults"
        );
    }

    #[test]
    fn tcp_flags_build_a_tcp_fabric() {
        let c = Cli::try_parse_from([
            "nvmf-initiator",
            "discover",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "8009",
            "--hdr-digest",
            "--data-digest",
        ])
        .unwrap();
        let Command::Discover(d) = c.command else {
            panic!("not discover");
        };
        assert_eq!(d.conn.transport, TransportKind::Tcp);
        let f = tcp_fabric(&d.conn).unwrap();
        assert_eq!(f.addr(), "127.0.0.1:8009".parse().unwrap());
        let o = f.options();
        assert!(o.hdr_digest && o.data_digest);
        assert_eq!((f.name(), f.keyed_sgls()), ("tcp", false));

        // Default port 4420, no digests, IPv6 with or without brackets.
        for a in ["::1", "[::1]"] {
            let c = Cli::try_parse_from(["nvmf-initiator", "list", "-t", "tcp", "-a", a]).unwrap();
            let Command::List(l) = c.command else {
                panic!("not list");
            };
            let f = tcp_fabric(&l.conn).unwrap();
            assert_eq!(f.addr(), "[::1]:4420".parse().unwrap());
            assert_eq!(f.options(), TcpOptions::default());
        }
    }

    #[test]
    fn usage_errors_before_connecting() {
        let conn = |t: TransportKind| ConnArgs {
            transport: t,
            traddr: None,
            trsvcid: "4420".into(),
            nqn: None,
            hostnqn: Some("nqn.h".into()),
            hostid: Some("3f6a2c1e-8a4b-4e4e-9b1a-0123456789ab".into()),
            nr_io_queues: None,
            queue_size: None,
            keep_alive_tmo: None,
            hdr_digest: false,
            data_digest: false,
            timeout: 30,
            ctrl_loss_tmo: reconnect_args::DEFAULT_CTRL_LOSS_TMO_SECS,
            reconnect_delay: reconnect_args::DEFAULT_RECONNECT_DELAY_SECS,
            config: None,
            namespace: Vec::new(),
        };
        assert!(
            matches!(open(&conn(TransportKind::Rdma)), Err(CliError::Usage(m)) if m.contains("-a/--traddr"))
        );
        // 192.0.2.1 (TEST-NET-1) is unreachable over RDMA from anywhere: without an
        // RDMA stack the device lookup fails at once, with one within the timeout.
        let mut c = conn(TransportKind::Rdma);
        c.traddr = Some("192.0.2.1".into());
        c.timeout = 1;
        match open(&c) {
            Err(CliError::Failed(e)) => {
                assert!(e.to_string().contains("-t rdma to 192.0.2.1:4420"), "{e}")
            }
            Err(CliError::Usage(m)) => panic!("usage error instead of a device error: {m}"),
            Ok(_) => panic!("no RDMA device reaches 192.0.2.1"),
        }
        assert!(
            matches!(open(&conn(TransportKind::Tcp)), Err(CliError::Usage(m)) if m.contains("-a/--traddr"))
        );
        let mut c = conn(TransportKind::Tcp);
        c.traddr = Some("127.0.0.1".into());
        c.trsvcid = "port".into();
        assert!(matches!(open(&c), Err(CliError::Usage(m)) if m.contains("not a TCP port number")));
        let mut c = conn(TransportKind::Loopback);
        c.hdr_digest = true;
        assert!(
            matches!(open(&c), Err(CliError::Usage(m)) if m.contains("not supported on this transport"))
        );
    }

    #[test]
    fn hexdump_like_hexdump_c() {
        let mut d = vec![0u8; 64];
        d[..5].copy_from_slice(b"hello");
        let s = hexdump(&d, 512);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "00000200  68 65 6c 6c 6f 00 00 00  00 00 00 00 00 00 00 00  |hello...........|"
        );
        assert_eq!(
            lines[1],
            "00000210  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|"
        );
        assert_eq!(lines[2], "*");
        assert_eq!(lines[3], "00000240");
        assert_eq!(parse_byte("0xff"), Ok(255));
        assert_eq!(parse_byte("17"), Ok(17));
        assert!(parse_byte("256").is_err());
    }

    #[test]
    fn write_payloads() {
        assert_eq!(
            write_payload(None, Some(7), Some(2), 4).unwrap(),
            vec![7u8; 8]
        );
        assert_eq!(write_payload(None, Some(7), None, 4).unwrap(), vec![7u8; 4]);
        let p = std::env::temp_dir().join(format!("nvmf-cli-{}", std::process::id()));
        std::fs::write(&p, b"abcdef").unwrap();
        assert_eq!(
            write_payload(Some(&p), None, None, 4).unwrap(),
            b"abcdef\0\0".to_vec()
        );
        assert!(
            write_payload(Some(&p), None, Some(1), 4).is_err(),
            "input longer than count"
        );
        let _ = std::fs::remove_file(&p);
        assert!(write_payload(None, Some(1), Some(0), 4).is_err());
    }

    #[test]
    fn list_table() {
        let n = NamespaceInfo {
            nsid: Nsid(1),
            nsze: 2048,
            ncap: 2048,
            nuse: 2048,
            block_size: 512,
            metadata_size: 0,
            nguid: [0xAB; 16],
            eui64: [0; 8],
            uuid: None,
        };
        let t = format_list(&[n]);
        assert!(t
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("1            1MiB        512           2048  abab"));
    }
}
