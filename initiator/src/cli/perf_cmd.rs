//! `perf`: the fio-like measurement, with reconnect-and-retry when the connection
//! is lost.

use nvmf_common::types::Nsid;

use nvmf_initiator::error::Error;
use nvmf_initiator::perf::{self, PerfOptions, PerfTarget};
use nvmf_initiator::requeue::{Requeue, SharedSession};

use super::session::{connect_options, open};
use super::{print_json, reconnect_args, CliError, CliResult, OutputFormat, PerfArgs};

pub(super) fn perf_cmd(a: &PerfArgs) -> CliResult {
    let policy = reconnect_args::policy(a.conn.ctrl_loss_tmo, a.conn.reconnect_delay)?;
    let s = open(&a.conn)?;
    let jobs =
        u16::try_from(a.numjobs).map_err(|_| CliError::Usage("--numjobs is too large".into()))?;
    let min_q = u16::try_from(a.iodepth.saturating_add(1)).unwrap_or(u16::MAX);
    let o = connect_options(&a.conn, &s, jobs.max(1), min_q)?;
    let mut session = reconnect_args::connect(s.fabric.clone(), o, policy)?
        .with_paths(super::session::more_paths(&a.conn)?);
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
        verify: a.verify.is_some(),
        verify_alg: a.verify.unwrap_or_default(),
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
