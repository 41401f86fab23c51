//! The flags of every subcommand except `map`: nvme-cli's connection flags
//! ([`ConnArgs`]), each command's own arguments, and their value parsers.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use nvmf_initiator::error::Error;
use nvmf_initiator::perf::{self, BsSpec, Rw};

use super::reconnect_args;

/// `--stuck-warn` by default: the library's default bound, in seconds.
pub const DEFAULT_STUCK_WARN_SECS: u64 =
    nvmf_initiator::controller::DEFAULT_STUCK_COMMAND_WARN.as_secs();

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
    /// Transport address (IP address for rdma and tcp). Repeat it for more paths to
    /// the same subsystem (NVMe/TCP): `perf` fails over to the next one when a path is
    /// lost or its ANA group becomes inaccessible.
    #[arg(short = 'a', long)]
    pub traddr: Vec<String>,
    /// Transport service id (port); repeated, the n-th goes with the n-th -a (the last
    /// one with the rest).
    #[arg(short = 's', long, default_value = "4420")]
    pub trsvcid: Vec<String>,
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
    /// DH-HMAC-CHAP secret of this host (`DHHC-1:XX:...:`, as `nvme gen-dhchap-key`
    /// prints it), used when the controller asks for authentication.
    #[arg(short = 'S', long = "dhchap-secret", value_name = "DHHC-1:..")]
    pub dhchap_secret: Option<SecretArg>,
    /// DH-HMAC-CHAP secret the controller must prove it knows (bidirectional
    /// authentication); needs --dhchap-secret.
    #[arg(
        short = 'C',
        long = "dhchap-ctrl-secret",
        value_name = "DHHC-1:..",
        requires = "dhchap_secret"
    )]
    pub dhchap_ctrl_secret: Option<SecretArg>,
    /// NVMe/TCP: secure every queue with TLS 1.3 (a pre-shared key from --tls-key or
    /// --tls-key-file).
    #[arg(long = "tls")]
    pub tls: bool,
    /// NVMe/TCP: the configured TLS PSK in the interchange format
    /// (`NVMeTLSkey-1:01:...:`, as `nvme gen-tls-key` prints it); implies --tls.
    #[arg(
        long = "tls-key",
        value_name = "NVMeTLSkey-1:..",
        conflicts_with = "tls_key_file"
    )]
    pub tls_key: Option<SecretArg>,
    /// NVMe/TCP: a file holding the configured TLS PSK (mode 0600); implies --tls.
    #[arg(long = "tls-key-file", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// NVMe/TCP TLS: keep the records in user space (OpenSSL) even where the kernel
    /// has kernel TLS (for comparing the two).
    #[arg(long = "no-ktls")]
    pub no_ktls: bool,
    /// Per-command timeout in seconds.
    #[arg(long = "timeout", default_value_t = 30)]
    pub timeout: u64,
    /// Seconds a command may be outstanding before it is reported, once, as a stuck
    /// command (a warning with its queue, command id, opcode, age and where it is);
    /// 0 turns the warning off. Keep it under --timeout.
    #[arg(long = "stuck-warn", value_name = "SECS", default_value_t = DEFAULT_STUCK_WARN_SECS)]
    pub stuck_warn: u64,
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
    /// map: seconds after a lost connection before I/O fails with EIO while
    /// reconnecting goes on (-1, the default: I/O waits up to --ctrl-loss-tmo).
    #[arg(
        long = "fast-io-fail-tmo",
        default_value_t = -1,
        allow_negative_numbers = true
    )]
    pub fast_io_fail_tmo: i64,
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
#[command(after_help = "Examples:\n  \
    nvmf-initiator perf -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --rw randread --bs 4k --iodepth 32 --numjobs 4 --runtime 30\n  \
    nvmf-initiator perf -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --rw randwrite --size 1G --verify=crc32c\n  \
    # an fio job file ([global] and job sections, run one after another); the\n  \
    # command line overrides it\n  \
    nvmf-initiator perf -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --job-file mixed.fio --runtime 5")]
pub struct PerfArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// An fio job file: rw, rwmixread, bs/blocksize, iodepth, numjobs, runtime,
    /// time_based, size, ramp_time, verify, randseed, nsid and cpus_allowed; other options are
    /// refused with their line. Options given on the command line override it.
    #[arg(long = "job-file", value_name = "FILE")]
    pub job_file: Option<PathBuf>,
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
    /// Jobs, each with its own I/O queue, dealt round-robin to the polling threads
    /// (see --cpus).
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,
    /// CPUs of the polling threads ("0-1,3"): one thread pinned to each (never more
    /// threads than jobs). Default: one unpinned thread per CPU this process may run
    /// on. A job file's cpus_allowed means the same.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<nvmf_initiator::perf::cpus::CpuList>,
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
    /// Stamp and check data (writes are read back after the run); fio's
    /// `--verify=crc32c|crc32|md5|sha256|sha512|meta|pattern` picks the checksum each
    /// block carries besides its header and pattern (a bare `--verify`: none).
    #[arg(long, num_args = 0..=1, require_equals = false, default_missing_value = "pattern", value_parser = parse_verify)]
    pub verify: Option<nvmf_initiator::perf::verify::VerifyAlg>,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Seed for offsets and verify stamps.
    #[arg(long, default_value_t = perf::DEFAULT_SEED)]
    pub seed: u64,
    /// How long a polling thread spins without a completion before it sleeps ("1ms",
    /// "0": sleep at once). Spinning answers sooner; sleeping leaves the CPU to others,
    /// e.g. a second perf throttled by the target's QoS on the same CPU.
    #[arg(long = "idle-spin", default_value = "1ms", value_parser = parse_duration)]
    pub idle_spin: Duration,
    #[arg(long = "output-format", value_enum, default_value = "normal")]
    pub output_format: OutputFormat,
    /// Write an SVG with the latency histogram and IOPS over time.
    #[arg(long = "latency-plot")]
    pub latency_plot: Option<PathBuf>,
    /// With several paths (-a repeated, NVMe/TCP): every path connected, each command
    /// down the path this policy picks among the optimized ones (the Linux host's
    /// iopolicy names): numa (the first; default), round-robin, queue-depth. The
    /// report counts the commands each path carried.
    #[arg(long = "iopolicy", value_name = "POLICY", default_value = "numa")]
    pub iopolicy: nvmf_initiator::multipath::IoPolicy,
}

fn parse_verify(s: &str) -> Result<nvmf_initiator::perf::verify::VerifyAlg, String> {
    use nvmf_initiator::perf::verify::VerifyAlg;
    VerifyAlg::from_fio(s).ok_or_else(|| format!("{s:?}: one of {}", VerifyAlg::NAMES))
}

pub(super) fn parse_byte(s: &str) -> Result<u8, String> {
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
fn parse_cpus(s: &str) -> Result<nvmf_initiator::perf::cpus::CpuList, String> {
    nvmf_initiator::perf::cpus::parse(s).map_err(|e| e.to_string())
}
fn parse_size(s: &str) -> Result<u64, String> {
    perf::parse_size(s).map_err(|e| e.to_string())
}

/// A secret given on the command line: kept as typed (parsed later, so an error never
/// echoes it), zeroed on drop, and never shown by Debug.
#[derive(Clone)]
pub struct SecretArg(pub zeroize::Zeroizing<String>);

impl std::str::FromStr for SecretArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretArg(zeroize::Zeroizing::new(s.to_owned())))
    }
}

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
