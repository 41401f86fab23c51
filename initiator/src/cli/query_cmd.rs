//! The commands that only look: `discover`, `identify` and `list`, with their
//! text (nvme-cli style) and JSON output.

use std::time::Duration;

use serde_json::json;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::identify::{flbas_index, IdentifyNamespace};

use nvmf_initiator::controller::{ConnectOptions, NamespaceInfo};
use nvmf_initiator::discovery::{discover_log_with, format_discovery_log};
use nvmf_initiator::perf::parse::format_bytes;

use super::session::{connect_options, open, MS_PER_SEC};
use super::{print_json, CliError, CliResult, DiscoverArgs, IdentifyArgs, ListArgs, OutputFormat};

pub(super) fn discover(a: &DiscoverArgs) -> CliResult {
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
    o.stuck_command_warn = Duration::from_secs(a.conn.stuck_warn);
    o.connect_timeout = s.timeout;
    o.dhchap = super::session::dhchap_keys(&a.conn)?;
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

pub(super) fn ns_json(n: &NamespaceInfo) -> serde_json::Value {
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

pub(super) fn identify(a: &IdentifyArgs) -> CliResult {
    let s = open(&a.conn)?;
    let o = connect_options(&a.conn, &s, 0, 0)?;
    let ctrl = super::session::connect_any(&a.conn, &s, o)?;
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

pub(super) fn list(a: &ListArgs) -> CliResult {
    let s = open(&a.conn)?;
    let o = connect_options(&a.conn, &s, 0, 0)?;
    let ctrl = super::session::connect_any(&a.conn, &s, o)?;
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
