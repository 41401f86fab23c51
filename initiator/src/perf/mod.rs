//! `perf`: a fio-like load generator on the host library.
//!
//! Owned by the host library. [`run`] takes a connected [`Controller`]'s I/O queues
//! (from [`Controller::take_io_queues`]) and runs `numjobs` jobs, each on its own queue,
//! each keeping `iodepth` commands in flight (see [`job`] for the measured loop). Jobs
//! are dealt round-robin to a bounded set of polling threads ([`threads`]): one per
//! CPU of `--cpus` (pinned), else one per CPU the process may run on, never more than
//! jobs ([`cpus::ThreadPlan`]); so `numjobs` beyond the cores does not leave threads
//! spinning against each other for the same cores. Jobs work on disjoint slices of the LBA span (like fio's
//! `offset_increment`), so `--verify` can check every block exactly. Latency is
//! recorded per I/O into HDR histograms (nanoseconds); the report has IOPS and
//! bandwidth per job and in total, percentiles, CPU time of the process, an IOPS
//! timeline, and renders as text, JSON (fio-like field names) or an SVG plot.
//! [`run_recovering`] survives a lost connection: jobs go on, on the queues of the
//! reconnected controller.

mod clock;
pub mod cpus;
mod idle;
pub mod job;
pub mod jobfile;
pub mod parse;
pub mod report;
pub mod rng;
pub mod svg;
mod threads;
pub mod verify;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing::debug;

use nvmf_common::types::Nsid;

use crate::controller::{Controller, NamespaceInfo};
use crate::error::Error;
use crate::ioqueue::IoQueue;
use crate::multipath::{IoPolicy, PathQueues, PathSet};
use crate::namespace::max_blocks_per_command;
use crate::queue::Queue;
use crate::requeue::{Recovery, Requeue};
use crate::transport::{Fabric, IoBuf};

pub use job::{DirStats, JobOutcome, VerifySummary};
pub use parse::{parse_duration, parse_size, BsSpec, Rw};
pub use report::{CpuUsage, PerfReport};

/// The default seed: fixed, so a `--verify` read run checks what an earlier write run
/// with default options wrote.
pub const DEFAULT_SEED: u64 = 0x6E76_6D66_7065_7266;
/// Most units (I/O-sized slices) a verifying job tracks: 4 bytes each.
pub const MAX_VERIFY_UNITS: u64 = 64 * 1024 * 1024;
/// How often the progress line is redrawn.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// How often the coordinator checks whether the jobs finished.
const COORDINATOR_TICK: Duration = Duration::from_millis(20);
/// Bytes per megabyte in the progress line (decimal, like fio's MB/s).
const MB: f64 = 1_000_000.0;

/// What to run (fio's names).
#[derive(Debug, Clone)]
pub struct PerfOptions {
    pub rw: Rw,
    /// Percentage of reads in `randrw`.
    pub rwmixread: u8,
    pub bs: BsSpec,
    pub iodepth: u32,
    /// Jobs = I/O queues used.
    pub numjobs: u32,
    /// CPUs of the polling threads, one pinned thread each (`--cpus`); `None`: one
    /// unpinned thread per CPU the process may run on. Never more threads than jobs.
    pub cpus: Option<cpus::CpuList>,
    /// Measured time (after the ramp). `None`: one pass over the span.
    pub runtime: Option<Duration>,
    /// Bytes of the namespace to use (from LBA 0); `None`: all of it.
    pub size: Option<u64>,
    /// Time run before measuring.
    pub ramp_time: Duration,
    /// Stamp written blocks and check reads (and read back writes after the run).
    pub verify: bool,
    /// The checksum each stamped block carries (fio's `--verify=ALG`).
    pub verify_alg: verify::VerifyAlg,
    pub nsid: Nsid,
    pub seed: u64,
    /// Draw a live progress line on stderr (only when it is a terminal).
    pub progress: bool,
    /// How long a polling thread spins without a completion before it blocks
    /// (`--idle-spin`); zero blocks at once, for a host that must leave its CPU to others
    /// while its commands wait in the target.
    pub idle_spin: Duration,
}

impl Default for PerfOptions {
    fn default() -> Self {
        PerfOptions {
            rw: Rw::RandRead,
            rwmixread: 50,
            bs: BsSpec::fixed(4096),
            iodepth: 32,
            numjobs: 1,
            cpus: None,
            runtime: Some(Duration::from_secs(10)),
            size: None,
            ramp_time: Duration::ZERO,
            verify: false,
            verify_alg: verify::VerifyAlg::default(),
            nsid: Nsid(1),
            seed: DEFAULT_SEED,
            progress: false,
            idle_spin: idle::SPIN_TIME,
        }
    }
}

/// What perf needs to know about the target besides the queues.
#[derive(Clone)]
pub struct PerfTarget {
    pub fabric: Arc<dyn Fabric>,
    pub ns: NamespaceInfo,
    /// MDTS in bytes, `None` when unlimited.
    pub max_transfer: Option<u64>,
}

impl PerfTarget {
    pub fn from_controller(ctrl: &Controller, nsid: Nsid) -> Result<PerfTarget, Error> {
        Ok(PerfTarget {
            fabric: ctrl.fabric().clone(),
            ns: ctrl.namespace(nsid)?.clone(),
            max_transfer: ctrl.max_transfer(),
        })
    }
}

/// Runs `opts` on namespace `opts.nsid` of `ctrl` using the first `numjobs` of
/// `queues`. I/O errors and verification failures are in the report
/// ([`PerfReport::failed`]); an `Err` means the run could not start.
pub fn run(
    ctrl: &Controller,
    queues: &mut [Queue],
    opts: &PerfOptions,
) -> Result<PerfReport, Error> {
    run_on(&PerfTarget::from_controller(ctrl, opts.nsid)?, queues, opts)
}

/// How the span divides into jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    min_blocks: u32,
    max_blocks: u32,
    /// Units (of `max_blocks` blocks) per job.
    units: u64,
    span_blocks: u64,
}

fn plan<Q>(t: &PerfTarget, queues: &[Q], o: &PerfOptions) -> Result<Layout, Error> {
    let ns = &t.ns;
    if o.numjobs == 0 {
        return Err(Error::InvalidArgument("numjobs must be at least 1".into()));
    }
    if o.numjobs as usize > queues.len() {
        return Err(Error::InvalidArgument(format!(
            "numjobs {} needs {} I/O queues, the controller has {} (raise -i/--nr-io-queues)",
            o.numjobs,
            o.numjobs,
            queues.len()
        )));
    }
    if o.iodepth == 0 {
        return Err(Error::InvalidArgument("iodepth must be at least 1".into()));
    }
    // An iodepth above what a queue holds is allowed, as fio and SPDK's perf allow it:
    // the excess waits in the job until a command identifier frees (see `job`).
    if o.rwmixread > 100 {
        return Err(Error::InvalidArgument(
            "rwmixread is a percentage (0..=100)".into(),
        ));
    }
    let (min_blocks, max_blocks) = o.bs.blocks(ns.block_size)?;
    let limit = max_blocks_per_command(t.max_transfer, ns.block_size);
    if max_blocks > limit {
        return Err(Error::InvalidArgument(format!(
            "bs {} exceeds the largest transfer of one command ({} bytes, MDTS)",
            o.bs.max,
            u64::from(limit) * u64::from(ns.block_size)
        )));
    }
    let span_blocks = match o.size {
        Some(sz) => {
            let b = sz / u64::from(ns.block_size);
            if b > ns.nsze {
                return Err(Error::InvalidArgument(format!(
                    "size {sz} exceeds the namespace ({} bytes)",
                    ns.size_bytes()
                )));
            }
            b
        }
        None => ns.nsze,
    };
    let per_job = span_blocks / u64::from(o.numjobs);
    let units = per_job / u64::from(max_blocks);
    if units == 0 {
        return Err(Error::InvalidArgument(format!(
            "the span ({} blocks) is too small for {} jobs of {}-byte I/Os",
            span_blocks, o.numjobs, o.bs.max
        )));
    }
    if o.verify {
        if units <= u64::from(o.iodepth) {
            return Err(Error::InvalidArgument(format!(
                "verify needs more than iodepth ({}) I/O-sized units per job; each job has {units}",
                o.iodepth
            )));
        }
        if units > MAX_VERIFY_UNITS {
            return Err(Error::InvalidArgument(format!(
                "verify tracks at most {MAX_VERIFY_UNITS} units per job; limit --size"
            )));
        }
    }
    Ok(Layout {
        min_blocks,
        max_blocks,
        units,
        span_blocks,
    })
}

/// [`run_recovering`] over several paths at once: each job takes one queue per path of
/// `set`, and `policy` picks the path of each command (see [`crate::multipath`]).
pub fn run_paths(
    set: &Arc<PathSet>,
    policy: IoPolicy,
    o: &PerfOptions,
) -> Result<PerfReport, Error> {
    let t = (0..set.len())
        .find_map(|i| set.with_controller(i, |c| PerfTarget::from_controller(c, o.nsid)))
        .ok_or_else(|| Error::InvalidArgument("no path is connected".into()))??;
    if t.fabric.keyed_sgls() {
        return Err(Error::InvalidArgument(
            "several paths at once need NVMe/TCP (buffers registered for one RDMA device)".into(),
        ));
    }
    let mut queues: Vec<PathQueues> = (0..o.numjobs as usize)
        .map(|w| PathQueues::new(set.clone(), w, policy))
        .collect();
    run_recovering(&t, &mut queues, o, None)
}

/// [`run`] with explicit target facts (for callers that no longer hold the controller).
pub fn run_on(t: &PerfTarget, queues: &mut [Queue], o: &PerfOptions) -> Result<PerfReport, Error> {
    run_recovering(t, queues, o, None)
}

/// [`run_on`] where a job whose queue breaks takes queue `index` (its job number) of
/// the reconnected controller from `requeue` and goes on (see [`job`]).
///
/// Stages: lay the jobs out over the namespace, allocate and fill their buffers (before
/// anything is timed), describe each job, run them on their threads while this thread
/// draws the progress and notes the CPU time after the ramp, then gather one outcome
/// per job into the report.
pub fn run_recovering<Q: IoQueue>(
    t: &PerfTarget,
    queues: &mut [Q],
    o: &PerfOptions,
    requeue: Option<&dyn Requeue>,
) -> Result<PerfReport, Error> {
    let layout = plan(t, queues, o)?;
    let threads = cpus::ThreadPlan::new(o.numjobs, o.cpus.as_ref())?;
    let bufs = job_buffers(t, o, layout.max_blocks as usize * t.ns.block_size as usize)?;
    let start = Instant::now();
    let clock = RunClock {
        start,
        ramp_end: start + o.ramp_time,
        end: o.runtime.map(|rt| start + o.ramp_time + rt),
    };
    let configs = job_configs(t, o, &layout, &clock);
    let progress: Vec<job::JobProgress> = (0..o.numjobs).map(|_| Default::default()).collect();
    let stop = AtomicBool::new(false);
    debug!(?layout, numjobs = o.numjobs, "perf starting");
    let bar = progress_bar(o, layout.units);
    let mut cpu_start: Option<CpuUsage> = None;
    debug!(threads = threads.threads, pins = ?threads.pins, "perf threads");
    let jobs = JobSet {
        configs: &configs,
        bufs: &bufs,
        progress: &progress,
        requeue,
        stop: &stop,
    };
    let results = std::thread::scope(|s| {
        let handles = jobs.spawn(s, &threads, queues);
        watch(&handles, &progress, bar.as_ref(), &clock, &mut cpu_start);
        join_jobs(handles)
    });
    let cpu_end = CpuUsage::now();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let cpu = cpu_end.since(&cpu_start.unwrap_or(cpu_end));
    let jobs = outcomes(results, queues)?;
    let mut report = PerfReport::new(o.clone(), t.ns.clone(), layout.span_blocks, jobs, cpu)?;
    report.threads = threads.threads;
    report.thread_cpus = threads.cpu_list();
    Ok(report)
}

/// When the run started, when the ramp ends, and when it ends (`None`: one pass).
struct RunClock {
    start: Instant,
    ramp_end: Instant,
    end: Option<Instant>,
}

/// One buffer per command slot of every job, allocated (and registered) before
/// anything is timed, filled with random data so that compressing or deduplicating
/// targets are not flattered.
fn job_buffers(t: &PerfTarget, o: &PerfOptions, buf_len: usize) -> Result<Vec<Vec<IoBuf>>, Error> {
    let mut fill = vec![0u8; buf_len];
    let mut r = rng::Rng::new(o.seed);
    for w in fill.chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        let n = w.len();
        w.copy_from_slice(&v[..n]);
    }
    let mut bufs: Vec<Vec<IoBuf>> = Vec::with_capacity(o.numjobs as usize);
    for _ in 0..o.numjobs {
        let mut v = Vec::with_capacity(o.iodepth as usize);
        for _ in 0..o.iodepth {
            let b = t.fabric.alloc(buf_len)?;
            b.write_at(0, &fill);
            v.push(b);
        }
        bufs.push(v);
    }
    Ok(bufs)
}

/// Each job's fixed facts: its own region of the namespace, the workload, the clock.
fn job_configs(
    t: &PerfTarget,
    o: &PerfOptions,
    layout: &Layout,
    clock: &RunClock,
) -> Vec<job::JobConfig> {
    let region_blocks = layout.units * u64::from(layout.max_blocks);
    (0..o.numjobs)
        .map(|i| job::JobConfig {
            index: i,
            rw: o.rw,
            rwmixread: o.rwmixread,
            nsid: t.ns.nsid,
            block_size: t.ns.block_size,
            min_blocks: layout.min_blocks,
            max_blocks: layout.max_blocks,
            region_start: u64::from(i) * region_blocks,
            units: layout.units,
            iodepth: o.iodepth,
            idle_spin: o.idle_spin,
            one_pass: o.runtime.is_none(),
            verify: o.verify,
            verify_alg: o.verify_alg,
            seed: o.seed,
            ramp_end: clock.ramp_end,
            end: clock.end,
        })
        .collect()
}

/// A polling thread: the jobs it runs and its handle (or why it did not start).
type JobThread<'scope> = (
    Vec<u32>,
    std::io::Result<std::thread::ScopedJoinHandle<'scope, threads::ThreadResult>>,
);

/// What the job threads borrow for the run.
struct JobSet<'a> {
    configs: &'a [job::JobConfig],
    bufs: &'a [Vec<IoBuf>],
    progress: &'a [job::JobProgress],
    requeue: Option<&'a dyn Requeue>,
    stop: &'a AtomicBool,
}

impl<'a> JobSet<'a> {
    /// Deals the jobs to the threads of `plan` and starts them; each thread owns its
    /// jobs' queues for the run.
    fn spawn<'scope, Q: IoQueue>(
        &self,
        s: &'scope std::thread::Scope<'scope, '_>,
        plan: &cpus::ThreadPlan,
        queues: &'a mut [Q],
    ) -> Vec<JobThread<'scope>>
    where
        'a: 'scope,
    {
        let mut groups: Vec<Vec<threads::JobInput<'a, Q>>> =
            (0..plan.threads).map(|_| Vec::new()).collect();
        for ((q, cfg), (b, p)) in queues
            .iter_mut()
            .zip(self.configs.iter())
            .zip(self.bufs.iter().zip(self.progress.iter()))
        {
            let recovery = self.requeue.map(|source| Recovery {
                source,
                index: cfg.index as usize,
            });
            if let Some(g) = groups.get_mut(plan.thread_of(cfg.index as usize)) {
                g.push(threads::JobInput {
                    q,
                    cfg,
                    bufs: b,
                    progress: p,
                    recovery,
                });
            }
        }
        let mut handles = Vec::with_capacity(groups.len());
        for (t, jobs) in groups.into_iter().enumerate() {
            let members: Vec<u32> = jobs.iter().map(|j| j.cfg.index).collect();
            let stop = self.stop;
            let pin = plan.pin(t);
            let h = std::thread::Builder::new()
                .name(format!("perf-thread{t}"))
                .spawn_scoped(s, move || threads::poll_jobs(pin, jobs, stop));
            handles.push((members, h));
        }
        handles
    }
}

/// Until every job thread has ended: draws the progress (IOPS and bandwidth since
/// the last draw) and notes the CPU time when the ramp ends.
fn watch(
    handles: &[JobThread<'_>],
    progress: &[job::JobProgress],
    bar: Option<&ProgressBar>,
    clock: &RunClock,
    cpu_start: &mut Option<CpuUsage>,
) {
    let mut last_draw = Instant::now();
    let mut last_ios = 0u64;
    let mut last_bytes = 0u64;
    loop {
        let now = Instant::now();
        if cpu_start.is_none() && now >= clock.ramp_end {
            *cpu_start = Some(CpuUsage::now());
        }
        if handles
            .iter()
            .all(|(_, h)| h.as_ref().map_or(true, |h| h.is_finished()))
        {
            return;
        }
        if let Some(bar) = bar {
            if now.duration_since(last_draw) >= PROGRESS_INTERVAL {
                let ios: u64 = progress.iter().map(|p| p.ios.load(Ordering::Relaxed)).sum();
                let bytes: u64 = progress
                    .iter()
                    .map(|p| p.bytes.load(Ordering::Relaxed))
                    .sum();
                let dt = now.duration_since(last_draw).as_secs_f64();
                let iops = ios.saturating_sub(last_ios) as f64 / dt;
                let mbs = bytes.saturating_sub(last_bytes) as f64 / dt / MB;
                match clock.end {
                    Some(_) => bar.set_position(
                        u64::try_from(now.saturating_duration_since(clock.start).as_millis())
                            .unwrap_or(u64::MAX),
                    ),
                    None => bar.set_position(ios),
                }
                let phase = if now < clock.ramp_end { "ramp " } else { "" };
                bar.set_message(format!("{phase}IOPS={iops:.0} BW={mbs:.1}MB/s"));
                last_draw = now;
                last_ios = ios;
                last_bytes = bytes;
            }
        }
        std::thread::sleep(COORDINATOR_TICK);
    }
}

/// Every job's result, by job index (a thread that panicked or never started fails
/// each of its jobs with the reason).
fn join_jobs(handles: Vec<JobThread<'_>>) -> Vec<Result<JobOutcome, Error>> {
    let mut all: Vec<(u32, Result<JobOutcome, Error>)> = Vec::new();
    for (members, h) in handles {
        match h.map(|h| h.join()) {
            Ok(Ok(r)) => all.extend(r),
            Ok(Err(_)) => all.extend(
                members
                    .into_iter()
                    .map(|i| (i, Err(Error::Protocol("perf thread panicked".into())))),
            ),
            Err(e) => {
                let why = e.to_string();
                all.extend(members.into_iter().map(|i| {
                    let e = std::io::Error::new(e.kind(), why.clone());
                    (i, Err(Error::Io(e)))
                }));
            }
        }
    }
    // The report lists jobs by index, as when each job had its own thread.
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// One outcome per job; a job that failed to run counts one error with its reason.
fn outcomes<Q: IoQueue>(
    results: Vec<Result<JobOutcome, Error>>,
    queues: &[Q],
) -> Result<Vec<JobOutcome>, Error> {
    let mut jobs = Vec::with_capacity(results.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(j) => jobs.push(j),
            Err(e) => {
                jobs.push(JobOutcome {
                    index: i as u32,
                    qid: queues.get(i).map_or(0, |q| q.qid().0),
                    read: DirStats::new()?,
                    write: DirStats::new()?,
                    errors: 1,
                    first_error: Some(e.to_string()),
                    elapsed: Duration::ZERO,
                    timeline: Vec::new(),
                    verify: VerifySummary::default(),
                    paths: Vec::new(),
                    ages: Default::default(),
                });
            }
        }
    }
    Ok(jobs)
}

fn progress_bar(o: &PerfOptions, units: u64) -> Option<ProgressBar> {
    if !o.progress || !std::io::stderr().is_terminal() {
        return None;
    }
    let len = match o.runtime {
        Some(rt) => u64::try_from((o.ramp_time + rt).as_millis()).unwrap_or(u64::MAX),
        None => units * u64::from(o.numjobs),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {msg} ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

#[cfg(test)]
mod tests;
