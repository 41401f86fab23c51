//! `nvmf-initiator connect-all`: `nvme connect-all` followed by `nvme list-subsys`.
//!
//! Owned by the CLI; the work is the library's [`nvmf_initiator::autoconnect`]. With
//! `-t`/`-a` it starts from that discovery controller; without, from every line of
//! the discovery configuration file (nvme-cli's `/etc/nvme/discovery.conf`; the
//! command line's other options are defaults for every line, as nvme-cli copies
//! them). It prints each connected subsystem with its paths (address, state, ANA
//! state) and namespaces, and each problem on stderr; the exit code is 0 only when at
//! least one subsystem connected and nothing failed. The connections last as long as
//! the process: this host has no kernel to hand them to.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use nvmf_initiator::autoconnect::{
    connect_all, read_discovery_conf, ConnectAllOptions, ConnectAllReport, ConnectedSubsystem,
    DiscoverySpec, NetConnector, Secret, DISCOVERY_CONF,
};
use nvmf_initiator::hostnqn::{HostIdentity, IdentitySource};
use nvmf_initiator::multipath::{PathLink, PathState};

use super::args::{OutputFormat, SecretArg, DEFAULT_STUCK_WARN_SECS};
use super::query_cmd::{format_list, ns_json};
use super::{print_json, CliError, CliResult};

/// Where the starting controller of `-t/-a` comes from, in messages.
const COMMAND_LINE: &str = "command line";

/// nvme-cli's `connect-all` options (those this host honours), plus the file to read.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator connect-all -t tcp -a 192.168.1.10           # discovery port 8009\n  \
    nvmf-initiator connect-all                                  # every line of /etc/nvme/discovery.conf\n  \
    nvmf-initiator connect-all --discovery-conf ./discovery.conf -o json")]
pub struct ConnectAllArgs {
    /// Transport of the discovery controller: tcp or rdma.
    #[arg(short = 't', long)]
    pub transport: Option<String>,
    /// Discovery subsystem NQN (default: the well-known discovery NQN).
    #[arg(short = 'n', long)]
    pub nqn: Option<String>,
    /// Transport address of the discovery controller.
    #[arg(short = 'a', long)]
    pub traddr: Option<String>,
    /// Its service id (default: 8009 for tcp, 4420 for rdma).
    #[arg(short = 's', long)]
    pub trsvcid: Option<String>,
    /// Local address to connect from (not supported by this host: refused).
    #[arg(short = 'w', long = "host-traddr")]
    pub host_traddr: Option<String>,
    /// Local interface to connect from (not supported by this host: refused).
    #[arg(short = 'f', long = "host-iface")]
    pub host_iface: Option<String>,
    /// Host NQN (default: /etc/nvme/hostnqn).
    #[arg(short = 'q', long)]
    pub hostnqn: Option<String>,
    /// Host identifier (default: /etc/nvme/hostid).
    #[arg(short = 'I', long)]
    pub hostid: Option<String>,
    /// DH-HMAC-CHAP secret of this host (`DHHC-1:..`).
    #[arg(short = 'S', long = "dhchap-secret", value_name = "DHHC-1:..")]
    pub dhchap_secret: Option<SecretArg>,
    /// DH-HMAC-CHAP secret the controllers must prove they know.
    #[arg(short = 'C', long = "dhchap-ctrl-secret", value_name = "DHHC-1:..")]
    pub dhchap_ctrl_secret: Option<SecretArg>,
    /// NVMe/TCP: TLS 1.3 on every connection (with --tls-key or --tls-key-file).
    #[arg(long)]
    pub tls: bool,
    /// NVMe/TCP: the configured TLS PSK (`NVMeTLSkey-1:..`); implies --tls.
    #[arg(
        long = "tls-key",
        value_name = "NVMeTLSkey-1:..",
        conflicts_with = "tls_key_file"
    )]
    pub tls_key: Option<SecretArg>,
    /// NVMe/TCP: a file holding the configured TLS PSK (mode 0600); implies --tls.
    #[arg(long = "tls-key-file", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// NVMe/TCP TLS: keep the records in user space even where kernel TLS exists.
    #[arg(long = "no-ktls")]
    pub no_ktls: bool,
    /// I/O queues per path (default 1).
    #[arg(short = 'i', long = "nr-io-queues")]
    pub nr_io_queues: Option<u16>,
    /// I/O queue size.
    #[arg(short = 'Q', long = "queue-size")]
    pub queue_size: Option<u16>,
    /// Keep-alive timeout in seconds.
    #[arg(short = 'k', long = "keep-alive-tmo")]
    pub keep_alive_tmo: Option<u32>,
    /// Seconds between reconnect attempts of a lost path.
    #[arg(short = 'c', long = "reconnect-delay")]
    pub reconnect_delay: Option<u32>,
    /// Seconds to keep reconnecting a lost path (-1: forever).
    #[arg(short = 'l', long = "ctrl-loss-tmo", allow_negative_numbers = true)]
    pub ctrl_loss_tmo: Option<i32>,
    /// Seconds after a lost connection before I/O fails while reconnecting goes on
    /// (-1: never; used by mapd).
    #[arg(
        short = 'F',
        long = "fast-io-fail-tmo",
        alias = "fast_io_fail_tmo",
        allow_negative_numbers = true
    )]
    pub fast_io_fail_tmo: Option<i32>,
    /// NVMe/TCP header digest.
    #[arg(short = 'g', long = "hdr-digest")]
    pub hdr_digest: bool,
    /// NVMe/TCP data digest.
    #[arg(short = 'G', long = "data-digest")]
    pub data_digest: bool,
    /// The discovery configuration file read when no -t/-a is given (nvme-cli has
    /// no option for it and always reads /etc/nvme/discovery.conf).
    #[arg(long = "discovery-conf", value_name = "FILE", default_value = DISCOVERY_CONF)]
    pub discovery_conf: PathBuf,
    /// Per-command and connect timeout in seconds.
    #[arg(long = "timeout", default_value_t = 30)]
    pub timeout: u64,
    /// Seconds before an outstanding command is reported as stuck (0: never).
    #[arg(long = "stuck-warn", value_name = "SECS", default_value_t = DEFAULT_STUCK_WARN_SECS)]
    pub stuck_warn: u64,
    /// normal (like `nvme list-subsys`) or json.
    #[arg(
        long = "output-format",
        short = 'o',
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

fn secret(a: &Option<SecretArg>) -> Option<Secret> {
    a.as_ref().map(|s| Secret::new(&s.0))
}

/// The command line's settings as a spec (the start when -t/-a are given, the
/// defaults of every line otherwise).
fn cli_spec(a: &ConnectAllArgs) -> Result<DiscoverySpec, CliError> {
    let tls_key = match (&a.tls_key, &a.tls_key_file) {
        (Some(k), _) => Some(Secret::new(&k.0)),
        (None, Some(p)) => Some(Secret(
            nvmf_common::keyfile::read_key_file(p)
                .map_err(|e| CliError::Usage(format!("--tls-key-file: {e}")))?,
        )),
        (None, None) => None,
    };
    let mut s = DiscoverySpec::new(
        COMMAND_LINE,
        a.transport.as_deref().unwrap_or_default(),
        a.traddr.as_deref().unwrap_or_default(),
        a.trsvcid.as_deref(),
    );
    if let Some(n) = &a.nqn {
        s.subnqn.clone_from(n);
    }
    s.host_traddr.clone_from(&a.host_traddr);
    s.host_iface.clone_from(&a.host_iface);
    s.dhchap_secret = secret(&a.dhchap_secret);
    s.dhchap_ctrl_secret = secret(&a.dhchap_ctrl_secret);
    s.tls = a.tls || tls_key.is_some();
    s.tls_key = tls_key;
    s.nr_io_queues = a.nr_io_queues;
    s.queue_size = a.queue_size;
    s.keep_alive_tmo = a.keep_alive_tmo;
    s.reconnect_delay = a.reconnect_delay;
    s.ctrl_loss_tmo = a.ctrl_loss_tmo;
    s.fast_io_fail_tmo = a.fast_io_fail_tmo;
    s.hdr_digest = a.hdr_digest;
    s.data_digest = a.data_digest;
    Ok(s)
}

/// A line's own options win; what it leaves unset comes from the command line.
fn with_defaults(mut line: DiscoverySpec, d: &DiscoverySpec) -> DiscoverySpec {
    fn or<T: Clone>(v: &mut Option<T>, d: &Option<T>) {
        if v.is_none() {
            v.clone_from(d);
        }
    }
    or(&mut line.host_traddr, &d.host_traddr);
    or(&mut line.host_iface, &d.host_iface);
    or(&mut line.dhchap_secret, &d.dhchap_secret);
    or(&mut line.dhchap_ctrl_secret, &d.dhchap_ctrl_secret);
    or(&mut line.tls_key, &d.tls_key);
    or(&mut line.nr_io_queues, &d.nr_io_queues);
    or(&mut line.queue_size, &d.queue_size);
    or(&mut line.keep_alive_tmo, &d.keep_alive_tmo);
    or(&mut line.reconnect_delay, &d.reconnect_delay);
    or(&mut line.ctrl_loss_tmo, &d.ctrl_loss_tmo);
    or(&mut line.fast_io_fail_tmo, &d.fast_io_fail_tmo);
    line.tls |= d.tls;
    line.hdr_digest |= d.hdr_digest;
    line.data_digest |= d.data_digest;
    line
}

/// The discovery controllers to start from.
pub(super) fn specs(a: &ConnectAllArgs) -> Result<Vec<DiscoverySpec>, CliError> {
    let cli = cli_spec(a)?;
    match (&a.transport, &a.traddr) {
        (Some(_), Some(_)) => return Ok(vec![cli]),
        (Some(_), None) => return Err(CliError::Usage("-t needs -a/--traddr".into())),
        (None, Some(_)) => return Err(CliError::Usage("-a needs -t/--transport".into())),
        (None, None) => {}
    }
    let lines = read_discovery_conf(&a.discovery_conf).map_err(|e| match e {
        nvmf_initiator::Error::NotFound(m) => CliError::Usage(m),
        other => other.into(),
    })?;
    if lines.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: no discovery controller in it (lines like `-t tcp -a ADDR [-s PORT]`)",
            a.discovery_conf.display()
        )));
    }
    Ok(lines.into_iter().map(|l| with_defaults(l, &cli)).collect())
}

fn ana_words(s: Option<PathState>) -> Option<&'static str> {
    s.map(|s| match s {
        PathState::Optimized => "optimized",
        PathState::NonOptimized => "non-optimized",
        PathState::Unusable => "inaccessible",
    })
}

/// One subsystem as `nvme list-subsys` shows it, with its namespaces below.
pub(super) fn format_subsystem(s: &ConnectedSubsystem) -> String {
    use std::fmt::Write as _;
    let mut out = format!("NQN={}\nhostnqn={}\n\\\n", s.subnqn, s.hostnqn);
    for p in s.path_reports() {
        let _ = writeln!(out, " +- {} {}", p.path.addr, p.state_words());
    }
    out.push_str(&format_list(&s.namespaces));
    out
}

fn report_json(r: &ConnectAllReport) -> serde_json::Value {
    let subs: Vec<serde_json::Value> = r
        .connected
        .iter()
        .map(|s| {
            let paths: Vec<serde_json::Value> = s
                .path_reports()
                .iter()
                .map(|p| {
                    json!({
                        "transport": nvmf_initiator::discovery::trtype_str(p.path.addr.trtype),
                        "traddr": p.path.addr.traddr,
                        "trsvcid": p.path.addr.trsvcid,
                        "state": match &p.link {
                            PathLink::Connected => "live",
                            PathLink::Reconnecting { .. } => "connecting",
                            PathLink::GivenUp { .. } => "failed",
                        },
                        "ana_state": ana_words(p.ana),
                        "detail": p.state_words(),
                    })
                })
                .collect();
            let nss: Vec<serde_json::Value> = s.namespaces.iter().map(ns_json).collect();
            json!({
                "subnqn": s.subnqn,
                "hostnqn": s.hostnqn,
                "paths": paths,
                "namespaces": nss,
            })
        })
        .collect();
    let problems: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
    json!({
        "subsystems": subs,
        "problems": problems,
        "skipped": r.skipped,
    })
}

/// The specs and the options every one of them runs with, checked.
pub(super) fn prepare(
    a: &ConnectAllArgs,
) -> Result<(Vec<DiscoverySpec>, ConnectAllOptions), CliError> {
    if a.timeout == 0 {
        return Err(CliError::Usage(
            "--timeout must be at least 1 second".into(),
        ));
    }
    if let Some(t) = &a.transport {
        if !matches!(t.as_str(), "tcp" | "rdma") {
            return Err(CliError::Usage(format!(
                "-t {t}: connect-all supports tcp and rdma"
            )));
        }
    }
    let specs = specs(a)?;
    let host = HostIdentity::load(a.hostnqn.as_deref(), a.hostid.as_deref())?;
    if host.source == IdentitySource::Generated {
        eprintln!(
            "note: no host identity configured (/etc/nvme/hostnqn, /etc/nvme/hostid); \
             using {} with host id {} for this run only (pass -q/-I to fix one)",
            host.hostnqn,
            host.hostid_string()
        );
    }
    let mut o = ConnectAllOptions::new(host);
    o.timeout = Duration::from_secs(a.timeout);
    o.stuck_warn = Duration::from_secs(a.stuck_warn);
    o.ktls = !a.no_ktls;
    Ok((specs, o))
}

pub(super) fn connect_all_cmd(a: &ConnectAllArgs, verbose: bool) -> CliResult {
    let (specs, o) = prepare(a)?;
    let report = connect_all(&specs, &o, &NetConnector);
    match a.output_format {
        OutputFormat::Normal => {
            let text: Vec<String> = report.connected.iter().map(format_subsystem).collect();
            print!("{}", text.join("\n"));
        }
        OutputFormat::Json => print_json(&report_json(&report))?,
    }
    if verbose {
        for k in &report.skipped {
            eprintln!("note: skipped {} ({}): {}", k.addr, k.subnqn, k.reason);
        }
    }
    for p in &report.problems {
        eprintln!("connect-all: {p}");
    }
    if report.is_success() {
        return Ok(());
    }
    let n = report.problems.len();
    Err(CliError::Reported(
        if report.connected.is_empty() && n == 0 {
            "no NVM subsystem for this host was found through the discovery controllers".into()
        } else {
            format!(
                "{} subsystem(s) connected, {n} problem(s) (listed above)",
                report.connected.len()
            )
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> ConnectAllArgs {
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: ConnectAllArgs,
        }
        let mut v = vec!["connect-all"];
        v.extend_from_slice(argv);
        P::try_parse_from(v)
            .map(|p| p.a)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_command_line_gives_defaults_a_line_overrides() {
        let dir = std::env::temp_dir().join(format!("nvmf-ca-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("discovery.conf");
        std::fs::write(
            &conf,
            "-t tcp -a 10.0.0.1 -k 9\n-t tcp -a 10.0.0.2 -i 2 -g\n",
        )
        .unwrap();
        let c = conf.display().to_string();
        let a = args(&[
            "--discovery-conf",
            &c,
            "-i",
            "4",
            "-k",
            "5",
            "-G",
            "-l",
            "-1",
        ]);
        let s = specs(&a).unwrap_or_else(|_| panic!("specs"));
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].keep_alive_tmo, s[0].nr_io_queues), (Some(9), Some(4)));
        assert_eq!((s[1].keep_alive_tmo, s[1].nr_io_queues), (Some(5), Some(2)));
        assert!(s[1].hdr_digest && s[1].data_digest && !s[0].hdr_digest);
        assert_eq!(s[0].ctrl_loss_tmo, Some(-1));
        assert_eq!(s[0].source, format!("{c}:1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn transport_flags_start_from_the_command_line_only() {
        let a = args(&[
            "-t",
            "tcp",
            "-a",
            "10.0.0.1",
            "--discovery-conf",
            "/nonexistent",
        ]);
        let s = specs(&a).unwrap_or_else(|_| panic!("specs"));
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].source.as_str(), s[0].trsvcid.as_str()),
            (COMMAND_LINE, "8009")
        );
        let a = args(&[
            "-t",
            "rdma",
            "-a",
            "10.0.0.1",
            "-n",
            "nqn.2024-01.io.example:dc",
        ]);
        let s = specs(&a).unwrap_or_else(|_| panic!("specs"));
        assert_eq!(
            (s[0].trsvcid.as_str(), s[0].subnqn.as_str()),
            ("4420", "nqn.2024-01.io.example:dc")
        );
        assert!(
            matches!(specs(&args(&["-t", "tcp"])), Err(CliError::Usage(m)) if m.contains("-a"))
        );
        assert!(matches!(specs(&args(&["-a", "x"])), Err(CliError::Usage(m)) if m.contains("-t")));
    }
}
