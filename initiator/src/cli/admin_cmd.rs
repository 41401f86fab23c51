//! nvme-cli's `get-log`, `get-feature`, `set-feature`, `flush`, `write-zeroes` and
//! `dsm` for a userspace host, with nvme-cli's flag names where they do not collide with
//! the connection flags (`-i`, `-s`, `-a`, `-v` are connection or global flags here, so
//! `--log-id`, `--sel`, `--start-block`, `--slbs`, `--value` are long only) and nvme-cli's
//! output lines.

use std::io::Write as _;

use clap::Args;

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{fid, sel};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::error::Error;
use nvmf_initiator::transport::DataDir;

use super::io_cmd::hexdump;
use super::session::{connect_options, open, with_ns};
use super::{CliError, CliResult, ConnArgs};

#[derive(Debug, Args)]
pub struct GetLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Log page identifier.
    #[arg(long = "log-id", value_parser = super::args::parse_byte)]
    pub log_id: u8,
    /// Bytes to read (a multiple of 4).
    #[arg(short = 'l', long = "log-len")]
    pub log_len: usize,
    /// Log page offset in bytes.
    #[arg(long = "lpo", default_value_t = 0)]
    pub lpo: u64,
    /// Namespace (default: all, FFFFFFFFh).
    #[arg(long, default_value_t = u32::MAX)]
    pub nsid: u32,
    /// Write the page to stdout as it is.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw_binary: bool,
}

#[derive(Debug, Args)]
pub struct GetFeatureArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Feature identifier.
    #[arg(short = 'f', long = "feature-id", value_parser = super::args::parse_byte)]
    pub feature_id: u8,
    #[arg(long, default_value_t = 0)]
    pub nsid: u32,
    /// 0 current, 1 default, 2 saved, 3 supported capabilities.
    #[arg(long = "sel", default_value_t = 0)]
    pub sel: u8,
    /// Command dword 11 (some features take a parameter).
    #[arg(long = "cdw11", default_value_t = 0)]
    pub cdw11: u32,
}

#[derive(Debug, Args)]
pub struct SetFeatureArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(short = 'f', long = "feature-id", value_parser = super::args::parse_byte)]
    pub feature_id: u8,
    #[arg(long, default_value_t = 0)]
    pub nsid: u32,
    /// The new value (command dword 11), decimal or 0x hex.
    #[arg(long = "value", value_parser = parse_u32)]
    pub value: u32,
    /// Ask the controller to keep it across resets.
    #[arg(long = "save")]
    pub save: bool,
}

#[derive(Debug, Args)]
pub struct FlushArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
}

#[derive(Debug, Args)]
pub struct WriteZeroesArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long = "start-block")]
    pub start_block: u64,
    /// Blocks, 0-based as in nvme-cli (0 = one block).
    #[arg(short = 'c', long = "block-count")]
    pub block_count: u32,
}

#[derive(Debug, Args)]
pub struct DsmArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Deallocate the ranges (the one attribute this target acts on).
    #[arg(short = 'd', long = "ad")]
    pub ad: bool,
    /// Starting blocks, comma-separated.
    #[arg(long = "slbs", value_delimiter = ',')]
    pub slbs: Vec<u64>,
    /// Block counts, comma-separated, one per starting block.
    #[arg(long = "blocks", value_delimiter = ',')]
    pub blocks: Vec<u32>,
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    }
    .map_err(|_| format!("{s:?} is not a 32-bit number (decimal or 0x hex)"))
}

/// Connects (admin queue only) and runs `f`.
fn with_admin<T>(
    conn: &ConnArgs,
    f: impl FnOnce(&Controller) -> Result<T, Error>,
) -> Result<T, CliError> {
    with_admin_dev(conn, |c, _| f(c))
}

/// Connects (admin queue only) and runs `f` with the controller and the name nvme-cli's
/// headers give the device (`nvme0` there): the subsystem NQN here.
pub(super) fn with_admin_dev<T>(
    conn: &ConnArgs,
    f: impl FnOnce(&Controller, &str) -> Result<T, Error>,
) -> Result<T, CliError> {
    let s = open(conn)?;
    let dev = conn
        .nqn
        .clone()
        .or_else(|| s.default_nqn.as_ref().map(|n| n.to_string()))
        .unwrap_or_else(|| "-".into());
    let o = connect_options(conn, &s, 0, 0)?;
    let ctrl = super::session::connect_any(conn, &s, o)?;
    let r = f(&ctrl, &dev);
    ctrl.shutdown()?;
    Ok(r?)
}

pub(super) fn get_log(a: &GetLogArgs) -> CliResult {
    let (page, dev) = with_admin_dev(&a.conn, |c, dev| {
        let page = c.get_log_page(a.log_id, Nsid(a.nsid), a.log_len, a.lpo)?;
        Ok((page, dev.to_owned()))
    })?;
    if a.raw_binary {
        std::io::stdout().write_all(&page)?;
        return Ok(());
    }
    println!(
        "Device:{dev} log_id:{:#04x} namespace_id:{:#010x}",
        a.log_id, a.nsid
    );
    print!("{}", hexdump(&page, a.lpo));
    Ok(())
}

/// nvme-cli's feature names.
pub fn feature_name(f: u8) -> &'static str {
    match f {
        fid::ARBITRATION => "Arbitration",
        fid::POWER_MGMT => "Power Management",
        fid::TEMPERATURE_THRESHOLD => "Temperature Threshold",
        fid::ERROR_RECOVERY => "Error Recovery",
        fid::VOLATILE_WRITE_CACHE => "Volatile Write Cache",
        fid::NUMBER_OF_QUEUES => "Number of Queues",
        fid::ASYNC_EVENT_CONFIG => "Async Event Configuration",
        fid::KEEP_ALIVE_TIMER => "Keep Alive Timer",
        fid::HOST_IDENTIFIER => "Host Identifier",
        fid::RESERVATION_NOTIFICATION_MASK => "Reservation Notification Mask",
        fid::RESERVATION_PERSISTENCE => "Reservation Persistence",
        _ => "Unknown",
    }
}

/// nvme-cli's `get-feature` line.
pub fn format_feature(f: u8, select: u8, value: u32) -> String {
    let which = match select {
        sel::CURRENT => "Current",
        sel::DEFAULT => "Default",
        sel::SAVED => "Saved",
        _ => "Supported capabilities",
    };
    format!(
        "get-feature:{f:#04x} ({}), {which} value:{value:#010x}\n",
        feature_name(f)
    )
}

pub(super) fn get_feature(a: &GetFeatureArgs) -> CliResult {
    if a.sel > sel::SUPPORTED {
        return Err(CliError::Usage(format!("--sel {}: 0, 1, 2 or 3", a.sel)));
    }
    let v = with_admin(&a.conn, |c| {
        let sqe = command::get_features(a.feature_id, Nsid(a.nsid), a.sel, a.cdw11);
        let r = c.admin_execute(sqe, None, DataDir::None)?;
        nvmf_initiator::error::check_status("Get Features", r.status)?;
        Ok(r.dw0)
    })?;
    print!("{}", format_feature(a.feature_id, a.sel, v));
    Ok(())
}

pub(super) fn set_feature(a: &SetFeatureArgs) -> CliResult {
    let v = with_admin(&a.conn, |c| {
        c.set_features(a.feature_id, Nsid(a.nsid), a.value, a.save)
    })?;
    println!(
        "set-feature:{:#04x} ({}), value:{:#010x}, cdw12:0x00000000, save:{}",
        a.feature_id,
        feature_name(a.feature_id),
        v,
        u8::from(a.save)
    );
    Ok(())
}

pub(super) fn flush(a: &FlushArgs) -> CliResult {
    with_ns(&a.conn, a.nsid, |io| io.flush())?;
    println!("NVMe Flush: success");
    Ok(())
}

pub(super) fn write_zeroes(a: &WriteZeroesArgs) -> CliResult {
    let n = u64::from(a.block_count) + 1;
    with_ns(&a.conn, a.nsid, |io| io.write_zeroes(a.start_block, n))?;
    println!("NVME Write Zeroes Success");
    Ok(())
}

pub(super) fn dsm(a: &DsmArgs) -> CliResult {
    if !a.ad {
        return Err(CliError::Usage("only --ad (deallocate) is acted on".into()));
    }
    if a.slbs.is_empty() || a.slbs.len() != a.blocks.len() {
        return Err(CliError::Usage(
            "--slbs and --blocks need the same number of values".into(),
        ));
    }
    let ranges: Vec<(u64, u32)> = a
        .slbs
        .iter()
        .copied()
        .zip(a.blocks.iter().copied())
        .collect();
    with_ns(&a.conn, a.nsid, |io| io.deallocate(&ranges))?;
    println!("NVMe DSM: success");
    Ok(())
}
