//! nvme-cli's named log page commands for a userspace host: `smart-log`, `error-log`,
//! `fw-log`, `changed-ns-list-log` and `effects-log`, with nvme-cli's flags (`--nsid`
//! is long only: `-n` names the subsystem here), `-b` for the raw page and `-o json`.
//! This file fetches the pages; `log_print.rs` shapes them.

use std::io::Write as _;

use clap::Args;

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{csi, offset};
use nvmf_common::wire::fabrics::cap_css;
use nvmf_common::wire::log::{
    lid, CHANGED_NS_LIST_LEN, CMD_EFFECTS_LOG_LEN, ERROR_INFO_ENTRY_LEN, FW_SLOT_LOG_LEN,
    SMART_LOG_LEN,
};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::error::Error;

use super::admin_cmd::with_admin_dev;
use super::log_print as p;
use super::{print_json, CliError, CliResult, ConnArgs, OutputFormat};

/// Entries `error-log` asks for unless `-e` says otherwise (nvme-cli's default).
const DEFAULT_ERROR_LOG_ENTRIES: u32 = 64;

/// The output flags every log command shares: `-b` (raw page) and `-o`.
#[derive(Debug, Clone, Args)]
pub struct LogOutput {
    /// Write the page to stdout as it is.
    #[arg(short = 'b', long = "raw-binary")]
    pub raw_binary: bool,
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator smart-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1\n  \
    nvmf-initiator smart-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -o json -H\n  \
    nvmf-initiator smart-log -t loopback --namespace ram:64M --nsid 1")]
pub struct SmartLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Namespace (default: the controller, FFFFFFFFh).
    #[arg(long, default_value_t = Nsid::BROADCAST.0)]
    pub nsid: u32,
    /// Decode the critical warning bits (also with -v).
    #[arg(short = 'H', long = "human-readable")]
    pub human_readable: bool,
    #[command(flatten)]
    pub out: LogOutput,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator error-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1\n  \
    nvmf-initiator error-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -e 4 -o json")]
pub struct ErrorLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Entries to read (at most what the controller keeps, ELPE + 1).
    #[arg(short = 'e', long = "log-entries", default_value_t = DEFAULT_ERROR_LOG_ENTRIES)]
    pub log_entries: u32,
    #[command(flatten)]
    pub out: LogOutput,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator fw-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1\n  \
    nvmf-initiator fw-log -t rdma -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -o json")]
pub struct FwLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub out: LogOutput,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator changed-ns-list-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1\n  \
    nvmf-initiator changed-ns-list-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -o json")]
pub struct ChangedNsListLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub out: LogOutput,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator effects-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1\n  \
    nvmf-initiator effects-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -H\n  \
    nvmf-initiator effects-log -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 --csi 0 -o json")]
pub struct EffectsLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Decode each entry's effects (also with -v).
    #[arg(short = 'H', long = "human-readable")]
    pub human_readable: bool,
    /// Command set (default: every set CAP.CSS reports, as nvme-cli).
    #[arg(short = 'c', long = "csi")]
    pub csi: Option<u8>,
    #[command(flatten)]
    pub out: LogOutput,
}

/// Get Log Page `lid` in one command (these pages are far below any MDTS), with RAE
/// and the command set identifier (CDW14 31:24) as nvme-cli sends them.
fn read_log(
    c: &Controller,
    log: u8,
    nsid: Nsid,
    len: usize,
    rae: bool,
    command_set: u8,
) -> Result<Vec<u8>, Error> {
    let mut sqe = command::get_log_page(log, nsid, len as u64, 0, rae)?;
    if let Some(b) = sqe.get_mut(usize::from(offset::LOG_CSI)) {
        *b = command_set;
    }
    c.admin_read(sqe, len)
}

/// Writes `page` raw (`-b`), or prints `plain` / `json` built from it.
fn emit(
    out: &LogOutput,
    page: &[u8],
    plain: impl FnOnce() -> Option<String>,
    json: impl FnOnce() -> Option<serde_json::Value>,
) -> CliResult {
    if out.raw_binary {
        std::io::stdout().write_all(page)?;
        return Ok(());
    }
    let short = || CliError::Failed(Error::Protocol("short log page".into()));
    match out.output_format {
        OutputFormat::Normal => print!("{}", plain().ok_or_else(short)?),
        OutputFormat::Json => {
            if let Some(v) = json() {
                print_json(&v)?;
            }
        }
    }
    Ok(())
}

pub(super) fn smart_log(a: &SmartLogArgs, verbose: bool) -> CliResult {
    let (page, dev) = with_admin_dev(&a.conn, |c, dev| {
        let page = read_log(c, lid::SMART, Nsid(a.nsid), SMART_LOG_LEN, false, csi::NVM)?;
        Ok((page, dev.to_owned()))
    })?;
    let human = a.human_readable || verbose;
    emit(
        &a.out,
        &page,
        || p::format_smart(&page, a.nsid, &dev, human),
        || p::smart_json(&page, human),
    )
}

pub(super) fn error_log(a: &ErrorLogArgs) -> CliResult {
    if a.log_entries == 0 {
        return Err(CliError::Usage("non-zero --log-entries is required".into()));
    }
    let (page, entries, dev) = with_admin_dev(&a.conn, |c, dev| {
        let kept = u32::from(c.id_ctrl().elpe) + 1;
        let entries = a.log_entries.min(kept) as usize;
        let len = entries * ERROR_INFO_ENTRY_LEN;
        let page = read_log(c, lid::ERROR_INFO, Nsid::BROADCAST, len, false, csi::NVM)?;
        Ok((page, entries, dev.to_owned()))
    })?;
    emit(
        &a.out,
        &page,
        || Some(p::format_error_log(&page, entries, &dev)),
        || Some(p::error_log_json(&page, entries)),
    )
}

pub(super) fn fw_log(a: &FwLogArgs) -> CliResult {
    let (page, dev) = with_admin_dev(&a.conn, |c, dev| {
        let page = read_log(
            c,
            lid::FW_SLOT,
            Nsid::BROADCAST,
            FW_SLOT_LOG_LEN,
            false,
            csi::NVM,
        )?;
        Ok((page, dev.to_owned()))
    })?;
    emit(
        &a.out,
        &page,
        || p::format_fw_log(&page, &dev),
        || p::fw_log_json(&page, &dev),
    )
}

pub(super) fn changed_ns_list_log(a: &ChangedNsListLogArgs) -> CliResult {
    // RAE set, as nvme-cli: reading the list does not consume the event for whoever
    // else is watching this controller's asynchronous events.
    let (page, dev) = with_admin_dev(&a.conn, |c, dev| {
        let page = read_log(
            c,
            lid::CHANGED_NS,
            Nsid::BROADCAST,
            CHANGED_NS_LIST_LEN,
            true,
            csi::NVM,
        )?;
        Ok((page, dev.to_owned()))
    })?;
    emit(
        &a.out,
        &page,
        || Some(p::format_changed_ns(&page)),
        || p::changed_ns_json(&page, &dev),
    )
}

/// The command sets whose effects page `effects-log` reads without `--csi`: NVM when
/// CAP.CSS has it, and ZNS when CAP.CSS says more I/O command sets exist (nvme-cli).
pub fn effects_command_sets(cap_css_bits: u8) -> Vec<u8> {
    let mut v = Vec::new();
    if cap_css_bits & cap_css::NVM != 0 {
        v.push(csi::NVM);
    }
    if cap_css_bits & cap_css::CSI != 0 {
        v.push(csi::ZNS);
    }
    v
}

pub(super) fn effects_log(a: &EffectsLogArgs, verbose: bool) -> CliResult {
    let pages = with_admin_dev(&a.conn, |c, _| {
        let sets = match a.csi {
            Some(s) => vec![s],
            None => effects_command_sets(c.cap().css()),
        };
        sets.into_iter()
            .map(|s| {
                read_log(
                    c,
                    lid::CMD_EFFECTS,
                    Nsid::BROADCAST,
                    CMD_EFFECTS_LOG_LEN,
                    false,
                    s,
                )
                .map(|page| (s, page))
            })
            .collect::<Result<Vec<_>, Error>>()
    })?;
    let human = a.human_readable || verbose;
    if a.out.raw_binary {
        let mut out = std::io::stdout().lock();
        for (_, page) in &pages {
            out.write_all(page)?;
        }
        return Ok(());
    }
    let short = || CliError::Failed(Error::Protocol("short log page".into()));
    match a.out.output_format {
        OutputFormat::Normal => {
            for (s, page) in &pages {
                print!("{}", p::format_effects(page, *s, human).ok_or_else(short)?);
            }
        }
        OutputFormat::Json => {
            let all = pages
                .iter()
                .map(|(s, page)| p::effects_json(page, *s).ok_or_else(short))
                .collect::<Result<Vec<_>, _>>()?;
            print_json(&serde_json::Value::Array(all))?;
        }
    }
    Ok(())
}
