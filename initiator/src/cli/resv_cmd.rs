//! nvme-cli's reservation commands (`resv-register`, `resv-acquire`, `resv-release`,
//! `resv-report`) and `ana-log`, with nvme-cli's flag names and output shapes (plain and
//! `-o json`). The namespace is `--nsid` (nvme-cli's `-n` names the subsystem on every
//! subcommand that connects here), and nvme-cli's `-k`, `-i` and `-a` are long flags
//! only (`--nrkey`, `--iekey`, `--racqa`, `--rrela`): those letters are connection
//! flags (keep-alive, I/O queues, address).

use std::time::Duration;

use clap::Args;
use serde_json::json;

use nvmf_common::types::Nsid;
use nvmf_common::wire::ana::{decode_log, AnaGroupDesc, LSP_RGO};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::resv::{decode_status_ext, Registrant};
use nvmf_initiator::command;
use nvmf_initiator::error::Error;
use nvmf_initiator::transport::DataDir;

use super::session::{connect_options, open};
use super::{print_json, CliError, CliResult, ConnArgs, OutputFormat};
use nvmf_initiator::controller::Controller;

/// Bytes read by `resv-report` unless `--numd` says otherwise (nvme-cli's default).
const REPORT_LEN: u32 = 4096;
/// Bytes of the ANA log page read by `ana-log`.
const ANA_LOG_LEN: usize = 64 * 1024;

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    }
    .map_err(|_| format!("{s:?} is not a number (decimal or 0x hex)"))
}

#[derive(Debug, Args)]
pub struct ResvRegisterArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long, default_value = "0", value_parser = parse_u64)]
    pub crkey: u64,
    /// New reservation key.
    #[arg(long, default_value = "0", value_parser = parse_u64)]
    pub nrkey: u64,
    /// Action: 0 register, 1 unregister, 2 replace.
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rrega: u8,
    /// Change Persist Through Power Loss: 0 no change, 2 off, 3 on.
    #[arg(short = 'p', long, default_value_t = 0)]
    pub cptpl: u8,
    /// Ignore the existing key.
    #[arg(long)]
    pub iekey: bool,
}

#[derive(Debug, Args)]
pub struct ResvAcquireArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long, default_value = "0", value_parser = parse_u64)]
    pub crkey: u64,
    /// Key of the registrants to preempt.
    #[arg(short = 'p', long, default_value = "0", value_parser = parse_u64)]
    pub prkey: u64,
    /// Reservation type (1-6).
    #[arg(short = 'r', long)]
    pub rtype: u8,
    /// Action: 0 acquire, 1 preempt, 2 preempt and abort.
    #[arg(long, default_value_t = 0)]
    pub racqa: u8,
}

#[derive(Debug, Args)]
pub struct ResvReleaseArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Current reservation key.
    #[arg(short = 'c', long, default_value = "0", value_parser = parse_u64)]
    pub crkey: u64,
    /// Reservation type (1-6; 0 with clear).
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rtype: u8,
    /// Action: 0 release, 1 clear.
    #[arg(long, default_value_t = 0)]
    pub rrela: u8,
}

#[derive(Debug, Args)]
pub struct ResvReportArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Dwords to transfer (0-based, as nvme-cli).
    #[arg(short = 'd', long)]
    pub numd: Option<u32>,
    /// Extended data structure (always used: 128-bit host identifiers).
    #[arg(short = 'e', long)]
    pub eds: bool,
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct AnaLogArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Return groups only (no namespace lists).
    #[arg(long = "groups")]
    pub groups: bool,
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

/// Connects with one I/O queue and runs one command with `data` in direction `dir`;
/// returns the data buffer afterwards.
fn one_command(
    conn: &ConnArgs,
    what: &str,
    sqe: [u8; 64],
    data: &[u8],
    dir: DataDir,
    len: usize,
) -> Result<Vec<u8>, CliError> {
    let s = open(conn)?;
    let o = connect_options(conn, &s, 1, 0)?;
    let mut ctrl = super::session::connect_any(conn, &s, o)?;
    let mut qs = ctrl.take_io_queues();
    let q = qs
        .first_mut()
        .ok_or_else(|| CliError::Failed(Error::Protocol("no I/O queue was granted".into())))?;
    let buf = ctrl.alloc(len.max(1))?;
    if !buf.write_at(0, data) {
        return Err(CliError::Failed(Error::Protocol(
            "data does not fit".into(),
        )));
    }
    let c = q.execute(sqe, Some(&buf), dir, Duration::from_secs(30))?;
    let mut out = vec![0u8; len];
    let _ = buf.read_at(0, &mut out);
    drop(qs);
    ctrl.shutdown()?;
    if !c.status.is_success() {
        return Err(CliError::Failed(Error::nvme(what, c.status)));
    }
    Ok(out)
}

fn keys(a: u64, b: u64) -> Vec<u8> {
    let mut d = a.to_le_bytes().to_vec();
    d.extend_from_slice(&b.to_le_bytes());
    d
}

pub(super) fn register(a: &ResvRegisterArgs) -> CliResult {
    let sqe = command::resv_register(Nsid(a.nsid), a.rrega, a.iekey, a.cptpl);
    one_command(
        &a.conn,
        "Reservation Register",
        sqe,
        &keys(a.crkey, a.nrkey),
        DataDir::ToCtrl,
        16,
    )?;
    println!("NVME Reservation  success");
    Ok(())
}

pub(super) fn acquire(a: &ResvAcquireArgs) -> CliResult {
    let sqe = command::resv_acquire(Nsid(a.nsid), a.racqa, a.rtype);
    one_command(
        &a.conn,
        "Reservation Acquire",
        sqe,
        &keys(a.crkey, a.prkey),
        DataDir::ToCtrl,
        16,
    )?;
    println!("NVME Reservation Acquire success");
    Ok(())
}

pub(super) fn release(a: &ResvReleaseArgs) -> CliResult {
    let sqe = command::resv_release(Nsid(a.nsid), a.rrela, a.rtype);
    one_command(
        &a.conn,
        "Reservation Release",
        sqe,
        &a.crkey.to_le_bytes(),
        DataDir::ToCtrl,
        8,
    )?;
    println!("NVME Reservation Release success");
    Ok(())
}

pub(super) fn report(a: &ResvReportArgs) -> CliResult {
    let len = a
        .numd
        .map_or(REPORT_LEN, |n| n.saturating_add(1).saturating_mul(4));
    let sqe = command::resv_report(Nsid(a.nsid), len);
    let page = one_command(
        &a.conn,
        "Reservation Report",
        sqe,
        &[],
        DataDir::FromCtrl,
        len as usize,
    )?;
    let (gen, rtype, ptpls, regs) = decode_status_ext(&page)
        .ok_or_else(|| CliError::Failed(Error::Protocol("short reservation report".into())))?;
    match a.output_format {
        OutputFormat::Normal => print!("{}", format_report(gen, rtype, ptpls, &regs)),
        OutputFormat::Json => print_json(&report_json(gen, rtype, ptpls, &regs))?,
    }
    Ok(())
}

/// nvme-cli's plain layout of the extended report.
pub fn format_report(gen: u32, rtype: u8, ptpls: bool, regs: &[Registrant]) -> String {
    let mut s = format!(
        "\nNVME Reservation status:\n\ngen       : {gen}\nrtype     : {rtype}\nregctl    : {}\nptpls     : {}\n",
        regs.len(),
        u8::from(ptpls)
    );
    for (i, r) in regs.iter().enumerate() {
        s.push_str(&format!(
            "regctlext[{i}] :\n  cntlid     : ffff\n  rcsts      : {}\n  hostid     : {}\n  rkey       : {:x}\n",
            u8::from(r.holds),
            hex(&r.hostid),
            r.rkey
        ));
    }
    s.push('\n');
    s
}

/// nvme-cli's JSON shape of the extended report.
pub fn report_json(gen: u32, rtype: u8, ptpls: bool, regs: &[Registrant]) -> serde_json::Value {
    json!({
        "gen": gen,
        "rtype": rtype,
        "regctl": regs.len(),
        "ptpls": u8::from(ptpls),
        "regctlext": regs.iter().map(|r| json!({
            "cntlid": 0xFFFF,
            "rcsts": u8::from(r.holds),
            "rkey": r.rkey,
            "hostid": hex(&r.hostid),
        })).collect::<Vec<_>>(),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn ana_log(a: &AnaLogArgs) -> CliResult {
    let s = open(&a.conn)?;
    let o = connect_options(&a.conn, &s, 0, 0)?;
    let ctrl = Controller::connect(s.fabric.clone(), o)?;
    let mut sqe = command::get_log_page(lid::ANA, Nsid::NONE, ANA_LOG_LEN as u64, 0, false)?;
    if a.groups {
        // CDW10 bits 11:8 (LSP), byte 41.
        if let Some(b) = sqe.get_mut(41) {
            *b |= LSP_RGO;
        }
    }
    let buf = ctrl.alloc(ANA_LOG_LEN)?;
    let c = ctrl.admin_execute(sqe, Some(&buf), DataDir::FromCtrl)?;
    let mut page = vec![0u8; ANA_LOG_LEN];
    let _ = buf.read_at(0, &mut page);
    ctrl.shutdown()?;
    if !c.status.is_success() {
        return Err(CliError::Failed(Error::nvme(
            "Get Log Page (ANA)",
            c.status,
        )));
    }
    let (chgcnt, groups) = decode_log(&page)
        .ok_or_else(|| CliError::Failed(Error::Protocol("short ANA log page".into())))?;
    match a.output_format {
        OutputFormat::Normal => print!("{}", format_ana(chgcnt, &groups)),
        OutputFormat::Json => print_json(&json!({
            "chgcnt": chgcnt,
            "ngrps": groups.len(),
            "ANA DESC LIST ": groups.iter().map(|g| json!({
                "grpid": g.grpid,
                "nnsids": g.nsids.len(),
                "chgcnt": g.chgcnt,
                "state": g.state.name(),
                "NSIDS": g.nsids.iter().map(|n| json!({ "nsid": n })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }))?,
    }
    Ok(())
}

/// nvme-cli's plain `ana-log` layout.
pub fn format_ana(chgcnt: u64, groups: &[AnaGroupDesc]) -> String {
    let mut s = format!(
        "ANA LOG HEADER :-\nchgcnt\t:\t{chgcnt}\nngrps\t:\t{}\nANA Log Desc :-\n",
        groups.len()
    );
    for g in groups {
        s.push_str(&format!(
            "grpid\t:\t{}\nnnsids\t:\t{}\nchgcnt\t:\t{}\nstate\t:\t{}\n",
            g.grpid,
            g.nsids.len(),
            g.chgcnt,
            g.state.name()
        ));
        for n in &g.nsids {
            s.push_str(&format!("\tnsid\t:\t{n}\n"));
        }
        s.push('\n');
    }
    s
}
