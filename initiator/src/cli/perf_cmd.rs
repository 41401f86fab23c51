//! `perf`: the fio-like measurement, with reconnect-and-retry when the connection
//! is lost, from command-line options or an fio job file (`--job-file`). As in fio,
//! options given on the command line override the file's, in every job section.

use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::ArgMatches;
use serde_json::{json, Map, Value};

use nvmf_common::types::Nsid;

use nvmf_initiator::error::Error;
use nvmf_initiator::perf::jobfile::{parse_job_file, JobSection, JobSettings};
use nvmf_initiator::perf::{self, PerfOptions, PerfReport, PerfTarget};
use nvmf_initiator::requeue::{Requeue, SharedSession};

use super::session::{connect_options, open, Session};
use super::{print_json, reconnect_args, CliError, CliResult, OutputFormat, PerfArgs};

/// Every option of `a`, defaults included, as job settings.
fn cli_settings(a: &PerfArgs) -> JobSettings {
    JobSettings {
        rw: Some(a.rw),
        rwmixread: Some(a.rwmixread),
        bs: Some(a.bs),
        iodepth: Some(a.iodepth),
        numjobs: Some(a.numjobs),
        runtime: a.runtime,
        time_based: None,
        size: a.size,
        ramp_time: a.ramp_time,
        verify: Some(a.verify),
        randseed: Some(a.seed),
        nsid: Some(a.nsid),
        cpus: a.cpus.clone(),
    }
}

/// The options of `a` typed on the command line (not defaults): they override a job
/// file. `m` is perf's matches (absent in unit tests that build `PerfArgs` directly).
pub fn explicit_settings(a: &PerfArgs, m: Option<&ArgMatches>) -> JobSettings {
    let given = |id: &str| m.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine);
    let all = cli_settings(a);
    JobSettings {
        rw: all.rw.filter(|_| given("rw")),
        rwmixread: all.rwmixread.filter(|_| given("rwmixread")),
        bs: all.bs.filter(|_| given("bs")),
        iodepth: all.iodepth.filter(|_| given("iodepth")),
        numjobs: all.numjobs.filter(|_| given("numjobs")),
        runtime: all.runtime.filter(|_| given("runtime")),
        time_based: None,
        size: all.size.filter(|_| given("size")),
        ramp_time: all.ramp_time.filter(|_| given("ramp_time")),
        verify: all.verify.filter(|_| given("verify")),
        randseed: all.randseed.filter(|_| given("seed")),
        nsid: all.nsid.filter(|_| given("nsid")),
        // No default: given means typed.
        cpus: all.cpus,
    }
}

/// The run `s` describes. perf's runtime is time-based; without one, `size` alone
/// means one pass over it unless `time_based` asks for the default runtime instead.
pub fn perf_options(s: &JobSettings, progress: bool) -> PerfOptions {
    let d = PerfOptions::default();
    let runtime = match (s.runtime, s.size, s.time_based) {
        (Some(r), _, _) => Some(r),
        (None, Some(_), Some(true)) => d.runtime,
        (None, Some(_), _) => None,
        (None, None, _) => d.runtime,
    };
    let verify = s.verify.flatten();
    PerfOptions {
        rw: s.rw.unwrap_or(d.rw),
        rwmixread: s.rwmixread.unwrap_or(d.rwmixread),
        bs: s.bs.unwrap_or(d.bs),
        iodepth: s.iodepth.unwrap_or(d.iodepth),
        numjobs: s.numjobs.unwrap_or(d.numjobs),
        cpus: s.cpus.clone(),
        runtime,
        size: s.size,
        ramp_time: s.ramp_time.unwrap_or(d.ramp_time),
        verify: verify.is_some(),
        verify_alg: verify.unwrap_or_default(),
        nsid: s.nsid.map_or(d.nsid, Nsid),
        seed: s.randseed.unwrap_or(d.seed),
        progress,
        idle_spin: d.idle_spin,
    }
}

/// Connects through `s`, runs `opts`, disconnects; the report and how often it
/// reconnected. Job file sections share `s`: a loopback target (and a RAM namespace's
/// data) lives from the first section to the last, as a real target would.
fn run(a: &PerfArgs, s: &Session, opts: &PerfOptions) -> Result<(PerfReport, u32), CliError> {
    let opts = &PerfOptions {
        idle_spin: a.idle_spin,
        ..opts.clone()
    };
    let policy = reconnect_args::policy(a.conn.ctrl_loss_tmo, a.conn.reconnect_delay)?;
    // A CPU this process may not run on is refused before anything connects (the run
    // plans its threads again; the mask does not change in between).
    perf::cpus::ThreadPlan::new(opts.numjobs, opts.cpus.as_ref())?;
    let jobs =
        u16::try_from(opts.numjobs).map_err(|_| CliError::Usage("numjobs is too large".into()))?;
    let min_q = u16::try_from(opts.iodepth.saturating_add(1)).unwrap_or(u16::MAX);
    let o = connect_options(&a.conn, s, jobs.max(1), min_q)?;
    let more = super::session::more_paths(&a.conn, &s.host.hostnqn)?;
    if !more.is_empty() {
        return run_paths(a, s, opts, o, more, policy);
    }
    let mut session = reconnect_args::connect(s.fabric.clone(), o, policy)?;
    let target = PerfTarget::from_controller(session.controller()?, opts.nsid)?;
    let (shared, mut queues) = SharedSession::new(session)?;
    let requeue = policy.map(|_| &shared as &dyn Requeue);
    let report = perf::run_recovering(&target, &mut queues, opts, requeue)?;
    drop(queues);
    let reconnects = shared.reconnects();
    shared.into_session()?.shutdown()?;
    Ok((report, reconnects))
}

/// Several paths (-a repeated): all connected at once, I/O spread per --iopolicy.
fn run_paths(
    a: &PerfArgs,
    s: &Session,
    opts: &PerfOptions,
    o: nvmf_initiator::controller::ConnectOptions,
    more: Vec<std::sync::Arc<dyn nvmf_initiator::transport::Fabric>>,
    policy: Option<nvmf_initiator::reconnect::ReconnectPolicy>,
) -> Result<(PerfReport, u32), CliError> {
    use nvmf_initiator::multipath::PathSet;
    use nvmf_initiator::reconnect::{ReconnectPolicy, RetryPolicy};
    let names = super::session::path_names(&a.conn);
    let fabrics = std::iter::once(s.fabric.clone()).chain(more);
    let paths = names.into_iter().zip(fabrics).collect();
    // No reconnect asked (--ctrl-loss-tmo 0): a lost path stays lost.
    let policy = policy.unwrap_or(ReconnectPolicy {
        ctrl_loss_tmo: Some(std::time::Duration::ZERO),
        retry: RetryPolicy::Fail,
        ..ReconnectPolicy::default()
    });
    let workers = opts.numjobs as usize;
    let set = PathSet::connect(paths, o, policy, opts.nsid, workers)?;
    let report = perf::run_paths(&set, a.iopolicy, opts)?;
    Ok((report, 0))
}

fn note_reconnects(n: u32) {
    if n > 0 {
        eprintln!("note: the connection was lost and the controller reconnected {n} time(s)");
    }
}

fn failure(reports: &[&PerfReport]) -> CliResult {
    let errors: u64 = reports.iter().map(|r| r.errors()).sum();
    let bad: u64 = reports.iter().map(|r| r.verify.failure_count).sum();
    if reports.iter().any(|r| r.failed()) {
        return Err(CliError::Failed(Error::Verify(format!(
            "{errors} I/O errors, {bad} blocks failed verification"
        ))));
    }
    Ok(())
}

pub(super) fn perf_cmd(a: &PerfArgs, m: Option<&ArgMatches>) -> CliResult {
    let progress = a.output_format == OutputFormat::Normal;
    let Some(path) = &a.job_file else {
        let s = open(&a.conn)?;
        let (report, reconnects) = run(a, &s, &perf_options(&cli_settings(a), progress))?;
        match a.output_format {
            OutputFormat::Normal => print!("{}", report.format_normal()),
            OutputFormat::Json => print_json(&report.to_json())?,
        }
        if let Some(p) = &a.latency_plot {
            perf::svg::write(&report, p)?;
        }
        note_reconnects(reconnects);
        return failure(&[&report]);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--job-file {}: {e}", path.display())))?;
    let sections = parse_job_file(&text, &path.display().to_string())?;
    let explicit = explicit_settings(a, m);
    let all = cli_settings(a);
    let s = open(&a.conn)?;
    let mut done: Vec<(&JobSection, PerfReport)> = Vec::new();
    for (i, sec) in sections.iter().enumerate() {
        if i > 0 && !sec.stonewall {
            eprintln!(
                "note: [{}] runs after the sections before it (fio's stonewall), not beside them",
                sec.name
            );
        }
        let opts = perf_options(&explicit.clone().or(&sec.settings).or(&all), progress);
        let (report, reconnects) = run(a, &s, &opts)?;
        note_reconnects(reconnects);
        if a.output_format == OutputFormat::Normal {
            println!("{}: (groupid={i}, jobs={})", sec.name, opts.numjobs);
            print!("{}", report.format_normal());
        }
        if let Some(p) = &a.latency_plot {
            perf::svg::write(&report, &plot_path(p, &sec.name, sections.len()))?;
        }
        done.push((sec, report));
    }
    if a.output_format == OutputFormat::Json {
        let groups: Vec<Value> = done
            .iter()
            .enumerate()
            .map(|(i, (sec, r))| {
                let mut g = Map::new();
                g.insert("groupid".into(), json!(i));
                g.insert("name".into(), json!(sec.name));
                if let Value::Object(fields) = r.to_json() {
                    g.extend(fields);
                }
                Value::Object(g)
            })
            .collect();
        print_json(&json!({ "job_file": path.display().to_string(), "groups": groups }))?;
    }
    failure(&done.iter().map(|(_, r)| r).collect::<Vec<_>>())
}

/// `--latency-plot` for section `name`: the path itself for a single section, else
/// `STEM.NAME.EXT` beside it.
fn plot_path(p: &Path, name: &str, sections: usize) -> PathBuf {
    if sections <= 1 {
        return p.to_path_buf();
    }
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let ext = p
        .extension()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    // The section name is the file's text: keep it to one path component.
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    p.with_file_name(format!("{stem}.{name}.{ext}"))
}
