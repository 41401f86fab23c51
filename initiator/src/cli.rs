//! The `nvmf-initiator` command line: nvme-cli's connection flags, fio's perf flags.
//!
//! Owned by the CLI (binary) side of the crate; everything it does goes through the
//! library. Exit codes: 0 success, 1 an I/O or NVMe error (the status name and
//! SCT/SC are printed), 2 a usage error. This file holds the top-level parser, the
//! error type and the dispatch; the flags and each group of commands live in the
//! submodules.

use std::process::ExitCode;

mod admin_cmd;
mod args;
mod connect_all_cmd;
mod io_cmd;
mod log_cmd;
mod log_print;
#[cfg(test)]
mod log_tests;
mod map_cmd;
mod mapd_cmd;
mod ns_cmd;
mod nvm_cmd;
mod perf_cmd;
mod query_cmd;
mod reconnect_args;
mod resv_cmd;
mod session;
#[cfg(test)]
mod tests;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use nvmf_initiator::error::Error;

use args::{
    ConnArgs, DiscoverArgs, IdentifyArgs, ListArgs, OutputFormat, PerfArgs, ReadArgs,
    TransportKind, WriteArgs,
};
use session::{connect_options, open};

/// Exit code for an I/O or NVMe error.
const EXIT_FAILURE: u8 = 1;
/// Exit code for a usage error.
const EXIT_USAGE: u8 = 2;

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
    /// Discover (following referrals) and connect every subsystem found through all
    /// its paths, then list them (like `nvme connect-all` and `nvme list-subsys`).
    ConnectAll(connect_all_cmd::ConnectAllArgs),
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
    /// Map every namespace of every subsystem found through discovery (NBD sockets
    /// or ublk devices), follow namespace and discovery changes, until SIGTERM.
    Mapd(mapd_cmd::MapdArgs),
    /// Print what a running `mapd` maps (paths, namespaces, devices).
    MapdStatus(mapd_cmd::MapdStatusArgs),
    /// Register, unregister or replace a reservation key (like `nvme resv-register`).
    ResvRegister(resv_cmd::ResvRegisterArgs),
    /// Acquire or preempt a reservation (like `nvme resv-acquire`).
    ResvAcquire(resv_cmd::ResvAcquireArgs),
    /// Release or clear a reservation (like `nvme resv-release`).
    ResvRelease(resv_cmd::ResvReleaseArgs),
    /// Print the reservation status (like `nvme resv-report --eds`).
    ResvReport(resv_cmd::ResvReportArgs),
    /// Print the ANA log page (like `nvme ana-log`).
    AnaLog(resv_cmd::AnaLogArgs),
    /// Read any log page (like `nvme get-log`).
    GetLog(admin_cmd::GetLogArgs),
    /// Read a feature (like `nvme get-feature`).
    GetFeature(admin_cmd::GetFeatureArgs),
    /// Change a feature (like `nvme set-feature`).
    SetFeature(admin_cmd::SetFeatureArgs),
    /// Flush the volatile write cache (like `nvme flush`).
    Flush(admin_cmd::FlushArgs),
    /// Zero blocks (like `nvme write-zeroes`).
    WriteZeroes(admin_cmd::WriteZeroesArgs),
    /// Deallocate ranges (like `nvme dsm --ad`).
    Dsm(admin_cmd::DsmArgs),
    /// Print the SMART / Health Information log (like `nvme smart-log`).
    SmartLog(log_cmd::SmartLogArgs),
    /// Print the Error Information log (like `nvme error-log`).
    ErrorLog(log_cmd::ErrorLogArgs),
    /// Print the Firmware Slot Information log (like `nvme fw-log`).
    FwLog(log_cmd::FwLogArgs),
    /// Print the Changed Namespace List log (like `nvme changed-ns-list-log`).
    ChangedNsListLog(log_cmd::ChangedNsListLogArgs),
    /// Print the Commands Supported and Effects log (like `nvme effects-log`).
    EffectsLog(log_cmd::EffectsLogArgs),
    /// Compare blocks with a file or stdin (like `nvme compare`).
    Compare(ns_cmd::CompareArgs),
    /// Copy source ranges to a destination inside a namespace (like `nvme copy`).
    Copy(nvm_cmd::CopyArgs),
    /// Have the target read blocks back without transferring them (like `nvme verify`).
    Verify(nvm_cmd::VerifyArgs),
    /// Fused Compare and Write: replace blocks only if they hold the expected data.
    CompareWrite(nvm_cmd::CompareWriteArgs),
    /// Print the Namespace Identification Descriptor list (like `nvme ns-descs`).
    NsDescs(ns_cmd::NsDescsArgs),
    /// Write man pages and shell completions into DIR (packaging).
    #[command(hide = true)]
    GenDocs { dir: std::path::PathBuf },
    /// Print how many nanoseconds a cache line takes from CPU A to CPU B and back
    /// (benchmarks record it: on shared VMs it changes for minutes at a time).
    #[command(hide = true)]
    CpuRoundTrip { a: usize, b: usize },
}

/// A CLI failure with its exit code.
#[derive(Debug)]
pub enum CliError {
    Usage(String),
    Failed(Error),
    /// A failure whose details were printed already; this sums it up (exit 1).
    Reported(String),
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

fn print_json(v: &serde_json::Value) -> CliResult {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::Failed(Error::Protocol(format!("JSON: {e}"))))?;
    println!("{s}");
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

/// Round trips `cpu-round-trip` times (about 0.1 s at 50 ns, 0.3 s at 300 ns).
const CPU_ROUND_TRIPS: u64 = 1_000_000;

/// `gen-docs DIR`: man pages and completions from this command line's definition.
fn gen_docs(dir: &std::path::Path) -> CliResult {
    for f in nvmf_common::cli_docs::write(Cli::command(), dir)? {
        println!("{}", f.display());
    }
    Ok(())
}

/// Parses the command line, runs it, and returns the exit code.
pub fn main() -> ExitCode {
    // The matches are kept: `perf --job-file` needs to know which options were typed.
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    init_logging(cli.verbose);
    let r = match &cli.command {
        Command::Discover(a) => query_cmd::discover(a),
        Command::ConnectAll(a) => connect_all_cmd::connect_all_cmd(a, cli.verbose > 0),
        Command::Identify(a) => query_cmd::identify(a),
        Command::List(a) => query_cmd::list(a),
        Command::Read(a) => io_cmd::read(a),
        Command::Write(a) => io_cmd::write(a),
        Command::Perf(a) => perf_cmd::perf_cmd(a, matches.subcommand_matches("perf")),
        Command::Map(a) => map_cmd::map_cmd(a),
        Command::Mapd(a) => mapd_cmd::mapd_cmd(a),
        Command::MapdStatus(a) => mapd_cmd::mapd_status_cmd(a),
        Command::ResvRegister(a) => resv_cmd::register(a),
        Command::ResvAcquire(a) => resv_cmd::acquire(a),
        Command::ResvRelease(a) => resv_cmd::release(a),
        Command::ResvReport(a) => resv_cmd::report(a),
        Command::AnaLog(a) => resv_cmd::ana_log(a),
        Command::GetLog(a) => admin_cmd::get_log(a),
        Command::GetFeature(a) => admin_cmd::get_feature(a),
        Command::SetFeature(a) => admin_cmd::set_feature(a),
        Command::Flush(a) => admin_cmd::flush(a),
        Command::WriteZeroes(a) => admin_cmd::write_zeroes(a),
        Command::Dsm(a) => admin_cmd::dsm(a),
        Command::SmartLog(a) => log_cmd::smart_log(a, cli.verbose > 0),
        Command::ErrorLog(a) => log_cmd::error_log(a),
        Command::FwLog(a) => log_cmd::fw_log(a),
        Command::ChangedNsListLog(a) => log_cmd::changed_ns_list_log(a),
        Command::EffectsLog(a) => log_cmd::effects_log(a, cli.verbose > 0),
        Command::Compare(a) => ns_cmd::compare(a),
        Command::NsDescs(a) => ns_cmd::ns_descs(a, cli.verbose > 0),
        Command::Copy(a) => nvm_cmd::copy(a),
        Command::Verify(a) => nvm_cmd::verify(a),
        Command::CompareWrite(a) => nvm_cmd::compare_write(a),
        Command::GenDocs { dir } => gen_docs(dir),
        Command::CpuRoundTrip { a, b } => {
            let t = nvmf_common::cpus::cache_line_round_trip(*a, *b, CPU_ROUND_TRIPS);
            println!("{}", t.as_nanos());
            Ok(())
        }
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
        Err(CliError::Reported(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
