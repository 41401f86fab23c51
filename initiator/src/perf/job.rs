//! One perf job: one I/O queue (or, with several paths, one queue per path behind
//! [`IoQueue`]) driven at a fixed depth, as a [`JobRunner`] that a polling thread steps
//! round-robin with its other jobs ([`super::threads`]), or alone ([`run_job`]).
//!
//! Ownership: a job owns its queue (borrowed mutably for the run), its slots, its
//! statistics and its verify state; it shares only atomics (progress counters, the
//! stop flag), so the jobs of one thread never lock and never wait for each other.
//! Ordering: each [`JobRunner::step`] refills every free slot, flushes once, polls once,
//! and records each completion's latency (submit to reap) in nanoseconds. It never
//! blocks on its queue: a job with nothing to reap hands the thread to the next job,
//! and the thread blocks (on all its queues, or in one queue's `wait`) only when all
//! its jobs have been idle for [`SPIN_TIME`](super::idle::SPIN_TIME). Everything the
//! loop touches is allocated before it starts: one registered buffer per slot, the slot table, the completion vector, the histograms.
//! Per I/O there is no allocation, no lock and no formatting; clocks are read once per
//! submit batch and once per poll. Housekeeping (end of run, command timeouts,
//! progress counters) runs every [`HOUSEKEEPING`].
//!
//! With a [`Recovery`] a broken queue (lost connection, command timeout) does not end
//! the job: the commands in flight on it are retried on the queue of the reconnected
//! controller ([`RetryPolicy::Retry`]: same blocks, same data, the original submit time
//! so the latency includes the outage) or counted as errors ([`RetryPolicy::Fail`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use nvmf_common::types::Nsid;
use nvmf_common::wire::status::Sct;

use super::parse::Rw;
use super::rng::{splitmix64, Permutation, Rng};
use super::verify::{self, VerifyFailure};
use crate::command;
use crate::error::Error;
use crate::ioqueue::{IoQueue, PathIos};
use crate::queue::{CommandAges, Completion};
use crate::reconnect::RetryPolicy;
use crate::requeue::{Generation, Recovery, MAX_FRUITLESS_RECONNECTS};
use crate::transport::{DataDir, IoBuf, WaitOn};

use super::clock::{JobClock, Now};
use super::idle::{wait_all, IdleSpin, IDLE_CLOCK_EVERY, WAIT_ALL, WAIT_SLICE};

/// How often the loop checks the clock-driven conditions.
pub const HOUSEKEEPING: Duration = Duration::from_millis(10);
/// Width of one bucket of the IOPS timeline.
pub const TIMELINE_BUCKET: Duration = Duration::from_millis(100);
const TIMELINE_BUCKET_NS: u64 = TIMELINE_BUCKET.as_nanos() as u64;
/// Highest latency the histograms track (longer ones saturate): 10 minutes.
pub const MAX_LATENCY_NS: u64 = 600_000_000_000;
/// Significant digits of the latency histograms.
pub const HIST_SIGFIG: u8 = 3;
/// Verification failures kept per job (all are counted).
pub const MAX_FAILURES_KEPT: usize = 16;
/// Percent scale of `rwmixread`.
const PERCENT: u64 = 100;

/// A latency histogram with the perf bounds.
pub fn new_histogram() -> Result<Histogram<u64>, Error> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, HIST_SIGFIG)
        .map_err(|e| Error::InvalidArgument(format!("histogram: {e}")))
}

/// What one job does.
#[derive(Debug, Clone)]
pub struct JobConfig {
    pub index: u32,
    pub rw: Rw,
    pub rwmixread: u8,
    pub nsid: Nsid,
    pub block_size: u32,
    /// Blocks per I/O, inclusive range.
    pub min_blocks: u32,
    pub max_blocks: u32,
    /// First LBA of this job's region; the region is `units` units of `max_blocks`.
    pub region_start: u64,
    pub units: u64,
    pub iodepth: u32,
    /// How long the polling loop spins without a completion before it blocks.
    pub idle_spin: Duration,
    /// Stop after one pass over the region (size-based run without a runtime).
    pub one_pass: bool,
    pub verify: bool,
    pub verify_alg: verify::VerifyAlg,
    pub seed: u64,
    pub ramp_end: Instant,
    pub end: Option<Instant>,
}

/// Counters the progress display reads while the job runs.
#[derive(Debug, Default)]
pub struct JobProgress {
    pub ios: AtomicU64,
    pub bytes: AtomicU64,
    pub done: AtomicBool,
}

/// Totals for one direction.
#[derive(Debug, Clone)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    /// Latency in nanoseconds.
    pub hist: Histogram<u64>,
}

impl DirStats {
    pub fn new() -> Result<DirStats, Error> {
        Ok(DirStats {
            ios: 0,
            bytes: 0,
            hist: new_histogram()?,
        })
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &DirStats) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        // Same bounds on both sides: addition cannot fail; keep going if it somehow does.
        let _ = self.hist.add(&other.hist);
    }
}

/// Verification results of one job.
#[derive(Debug, Clone, Default)]
pub struct VerifySummary {
    pub blocks_checked: u64,
    pub failure_count: u64,
    pub failures: Vec<VerifyFailure>,
}

impl VerifySummary {
    fn fail(&mut self, f: VerifyFailure) {
        self.failure_count += 1;
        if self.failures.len() < MAX_FAILURES_KEPT {
            self.failures.push(f);
        }
    }

    pub fn merge(&mut self, o: &VerifySummary) {
        self.blocks_checked += o.blocks_checked;
        self.failure_count += o.failure_count;
        for f in &o.failures {
            if self.failures.len() < MAX_FAILURES_KEPT {
                self.failures.push(f.clone());
            }
        }
    }
}

/// What one job measured.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub index: u32,
    pub qid: u16,
    pub read: DirStats,
    pub write: DirStats,
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the end of the ramp to the last recorded completion.
    pub elapsed: Duration,
    /// Completions per [`TIMELINE_BUCKET`] since the end of the ramp.
    pub timeline: Vec<u64>,
    pub verify: VerifySummary,
    /// Commands completed per path (multipath; empty with one queue).
    pub paths: Vec<PathIos>,
    /// Commands reported stuck, and the longest any command took or was seen
    /// outstanding (ramp and read-back included; timed-out commands count).
    pub ages: CommandAges,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    unit: u64,
    lba: u64,
    nblocks: u32,
    write: bool,
    gen: u32,
    /// Submitted at (the job clock's nanoseconds).
    t0: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The measured run.
    Main,
    /// Reading back what the run wrote (write-then-read verify).
    Readback,
}

#[derive(Clone, Copy)]
struct Planned {
    unit: u64,
    nblocks: u32,
    write: bool,
}

struct Job<'a> {
    cfg: &'a JobConfig,
    bufs: &'a [IoBuf],
    progress: &'a JobProgress,
    stop: &'a AtomicBool,
    slots: Vec<Slot>,
    rng: Rng,
    perm: Permutation,
    seq_next: u64,
    issued: u64,
    readback_next: u64,
    /// Last completed write generation per unit (verify only; 0 = not written).
    gens: Vec<u32>,
    next_gen: u32,
    scratch: Vec<u8>,
    out: JobOutcome,
    clock: JobClock,
    /// The end of the ramp on the job clock.
    ramp_end_ns: u64,
    /// The longest any command took (folded into `out.ages` at the end).
    longest_ns: u64,
    /// The last recorded completion, on the job clock.
    last_record: Option<u64>,
    failed: bool,
    /// Slots with no command in flight (a stack).
    free: Vec<usize>,
    /// Slots whose command was in flight on a queue that broke: submitted again first.
    retry: Vec<usize>,
    /// Commands in flight on the current queue.
    inflight: usize,
    /// An I/O planned while every command identifier was in use (iodepth above the
    /// queue's size): the next one submitted.
    pending: Option<Planned>,
    /// Commands the path refused (path-related status) since the last recovery.
    path_errors: u32,
    /// Whether host timeouts are retried after a reconnect rather than counted.
    recovering: bool,
    /// Successful completions in every phase (progress between reconnects).
    completed: u64,
    /// Every successful completion, ramp included (for the progress line).
    done_ios: u64,
    done_bytes: u64,
}

/// What one [`JobRunner::step`] did, for the thread that multiplexes jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Reaped completions (or changed phase or queue): step again soon.
    Busy,
    /// Nothing came back this time: the thread may serve another job, or wait.
    Idle,
    /// The job is over; [`JobRunner::finish`] has its outcome.
    Done,
}

/// What one pass of [`Job::drive_once`] saw.
enum Tick {
    Reaped,
    Empty,
    /// The phase is over (nothing left to submit, nothing in flight).
    Finished,
}

/// The loop state of one phase on one queue; begun afresh after a phase change or
/// a queue replacement.
struct DriveState {
    comps: Vec<Completion>,
    stop_submit: bool,
    next_housekeeping: Instant,
    /// Whether the commands left over from a broken queue were submitted again.
    resubmitted: bool,
    /// Polls in a row that completed nothing (see [`IDLE_CLOCK_EVERY`]).
    idle_polls: u32,
}

impl DriveState {
    fn new(depth: usize) -> DriveState {
        DriveState {
            comps: Vec::with_capacity(depth * 2),
            stop_submit: false,
            next_housekeeping: Instant::now() + HOUSEKEEPING,
            resubmitted: false,
            idle_polls: 0,
        }
    }
}

/// One job as a state machine that a polling thread steps, round-robin with the other
/// jobs it owns ([`super::threads`]). It owns nothing shared: its queue, slots,
/// statistics and verify state are its own, so jobs on one thread never lock.
pub struct JobRunner<'a, Q: IoQueue> {
    job: Job<'a>,
    q: &'a mut Q,
    recovery: Option<Recovery<'a>>,
    phase: Phase,
    drive: DriveState,
    generation: Generation,
    /// Reconnects in a row without a completion, and the count at the last loss.
    fruitless: u32,
    done_at_loss: u64,
    done: bool,
}

impl<'a, Q: IoQueue> JobRunner<'a, Q> {
    /// A job on `q` with one buffer per slot (`bufs.len() >= iodepth`, each at least
    /// `max_blocks` blocks). Only a bad setup is an `Err`.
    pub fn new(
        q: &'a mut Q,
        cfg: &'a JobConfig,
        bufs: &'a [IoBuf],
        progress: &'a JobProgress,
        stop: &'a AtomicBool,
        recovery: Option<Recovery<'a>>,
    ) -> Result<JobRunner<'a, Q>, Error> {
        let depth = cfg.iodepth as usize;
        if bufs.len() < depth || cfg.units == 0 {
            return Err(Error::InvalidArgument(
                "job set up without buffers or region".into(),
            ));
        }
        let max_len = cfg.max_blocks as usize * cfg.block_size as usize;
        let clock = JobClock::new(cfg.ramp_end);
        let now = clock.now();
        // The report covers this job's commands only.
        let _ = q.take_command_ages();
        let job = Job {
            cfg,
            bufs,
            progress,
            stop,
            slots: vec![
                Slot {
                    unit: 0,
                    lba: 0,
                    nblocks: 0,
                    write: false,
                    gen: 0,
                    t0: now.ns,
                };
                depth
            ],
            rng: Rng::new(cfg.seed ^ u64::from(cfg.index)),
            perm: Permutation::new(cfg.units, cfg.seed.wrapping_add(u64::from(cfg.index))),
            seq_next: 0,
            issued: 0,
            readback_next: 0,
            gens: if cfg.verify {
                vec![0; usize::try_from(cfg.units).unwrap_or(0)]
            } else {
                Vec::new()
            },
            next_gen: 1,
            scratch: if cfg.verify {
                vec![0; max_len]
            } else {
                Vec::new()
            },
            out: JobOutcome {
                index: cfg.index,
                qid: q.qid().0,
                read: DirStats::new()?,
                write: DirStats::new()?,
                errors: 0,
                first_error: None,
                elapsed: Duration::ZERO,
                timeline: Vec::with_capacity(timeline_capacity(cfg)),
                verify: VerifySummary::default(),
                paths: Vec::new(),
                ages: CommandAges::default(),
            },
            clock,
            ramp_end_ns: clock.ns(cfg.ramp_end),
            longest_ns: 0,
            last_record: None,
            failed: false,
            free: (0..depth).rev().collect(),
            retry: Vec::new(),
            inflight: 0,
            pending: None,
            path_errors: 0,
            recovering: recovery.is_some_and(|r| r.source.retry_policy() == RetryPolicy::Retry),
            completed: 0,
            done_ios: 0,
            done_bytes: 0,
        };
        Ok(JobRunner {
            job,
            q,
            recovery,
            phase: Phase::Main,
            drive: DriveState::new(depth),
            generation: Generation::default(),
            fruitless: 0,
            done_at_loss: 0,
            done: false,
        })
    }

    /// One pass: refill free slots, flush, poll once, account what came back, and
    /// (every [`HOUSEKEEPING`]) the clock-driven checks. Never blocks on the queue;
    /// only a lost connection blocks, in [`Requeue::replace`](crate::requeue::Requeue),
    /// while the controller reconnects (the other jobs of its thread share that
    /// controller, so they could not run meanwhile either).
    pub fn step(&mut self) -> Step {
        if self.done {
            return Step::Done;
        }
        let cfg = self.job.cfg;
        let depth = cfg.iodepth as usize;
        match self.job.drive_once(self.q, self.phase, &mut self.drive) {
            Ok(Tick::Reaped) => Step::Busy,
            Ok(Tick::Empty) => Step::Idle,
            Ok(Tick::Finished)
                if self.phase == Phase::Main
                    && cfg.verify
                    && cfg.rw.writes()
                    && !self.job.failed =>
            {
                self.phase = Phase::Readback;
                self.drive = DriveState::new(depth);
                Step::Busy
            }
            Ok(Tick::Finished) => self.end(),
            Err(e) => {
                let Some(rc) = self.recovery.filter(|_| self.q.is_broken() || e.is_fatal()) else {
                    // A broken queue ends the job; what was measured so far is reported.
                    self.job.record_error(&e);
                    return self.end();
                };
                let job = &mut self.job;
                self.fruitless = if job.completed == self.done_at_loss {
                    self.fruitless + 1
                } else {
                    0
                };
                self.done_at_loss = job.completed;
                if self.fruitless > MAX_FRUITLESS_RECONNECTS {
                    job.record_error(&Error::Timeout(format!(
                        "{MAX_FRUITLESS_RECONNECTS} reconnects in a row without a completed command; last error: {e}"
                    )));
                    return self.end();
                }
                match job.recover(self.q, rc, &mut self.generation, &e) {
                    Ok(true) => {
                        self.drive = DriveState::new(depth);
                        Step::Busy
                    }
                    Ok(false) => self.end(),
                    Err(e) => {
                        // Lost past ctrl-loss-tmo: each command waiting for a retry failed.
                        let waiting = job.retry.len().max(1) as u64;
                        job.retry.clear();
                        job.record_error(&e);
                        job.out.errors += waiting - 1;
                        self.end()
                    }
                }
            }
        }
    }

    fn end(&mut self) -> Step {
        self.done = true;
        Step::Done
    }

    /// Blocks up to `timeout` for this job's queue to have something (when every job of
    /// the thread has been idle a while).
    pub fn wait(&mut self, timeout: Duration) {
        self.q.wait(timeout);
    }

    /// What the job's queue would block on (see [`wait_all`]).
    pub fn wait_on(&self) -> WaitOn<'_> {
        self.q.wait_on()
    }

    /// The job's index (its place in the report).
    pub fn index(&self) -> u32 {
        self.job.cfg.index
    }

    /// How long its polling loop spins before it blocks.
    pub fn idle_spin(&self) -> Duration {
        self.job.cfg.idle_spin
    }

    /// What the job measured (after [`Step::Done`]).
    pub fn finish(self) -> JobOutcome {
        let mut job = self.job;
        job.publish();
        job.out.paths = self.q.path_ios();
        job.out.ages.merge(self.q.take_command_ages());
        let cfg = job.cfg;
        let longest = Duration::from_nanos(job.longest_ns);
        job.out.ages.longest = job.out.ages.longest.max(longest);
        let end = job
            .last_record
            .map_or(cfg.ramp_end, |ns| job.clock.instant(ns));
        job.out.elapsed = end.saturating_duration_since(cfg.ramp_end);
        job.progress.done.store(true, Ordering::Relaxed);
        job.out
    }
}

/// Runs one job alone on the calling thread until it ends (see [`JobRunner`]): spins
/// while completions come, and blocks on its queue once it has gone quiet for
/// [`SPIN_TIME`](super::idle::SPIN_TIME). I/O errors, timeouts and a broken queue end
/// the job and are counted in its outcome (unless `recovery` replaces the queue); only a bad setup is an `Err`.
pub fn run_job<Q: IoQueue>(
    q: &mut Q,
    cfg: &JobConfig,
    bufs: &[IoBuf],
    progress: &JobProgress,
    stop: &AtomicBool,
    recovery: Option<Recovery<'_>>,
) -> Result<JobOutcome, Error> {
    let mut runner = JobRunner::new(q, cfg, bufs, progress, stop, recovery)?;
    let mut spin = IdleSpin::new(cfg.idle_spin);
    loop {
        match runner.step() {
            Step::Done => break,
            Step::Busy => spin.busy(),
            Step::Idle => {
                if spin.idle() && !wait_all(std::slice::from_ref(&runner), WAIT_ALL) {
                    runner.wait(WAIT_SLICE);
                }
            }
        }
    }
    Ok(runner.finish())
}

fn timeline_capacity(cfg: &JobConfig) -> usize {
    const DEFAULT_BUCKETS: usize = 600;
    cfg.end
        .map(|e| {
            let secs = e.saturating_duration_since(cfg.ramp_end).as_millis();
            (secs / TIMELINE_BUCKET.as_millis()) as usize + 2
        })
        .unwrap_or(DEFAULT_BUCKETS)
}

/// The fixed I/O length of `unit` in verify mode (every write and read of a unit
/// must cover the same blocks for the check to be exact).
fn unit_blocks(cfg: &JobConfig, unit: u64) -> u32 {
    let span = u64::from(cfg.max_blocks - cfg.min_blocks) + 1;
    let mut s = cfg.seed ^ unit;
    cfg.min_blocks + (splitmix64(&mut s) % span) as u32
}

impl Job<'_> {
    fn next_io(&mut self, phase: Phase) -> Option<Planned> {
        let cfg = self.cfg;
        match phase {
            Phase::Main => {
                if cfg.one_pass && self.issued >= cfg.units {
                    return None;
                }
                self.issued += 1;
                let unit = if cfg.rw.is_random() {
                    self.perm.next_index()
                } else {
                    let u = self.seq_next;
                    self.seq_next = if u + 1 >= cfg.units { 0 } else { u + 1 };
                    u
                };
                let nblocks = if cfg.min_blocks == cfg.max_blocks {
                    cfg.min_blocks
                } else if cfg.verify {
                    unit_blocks(cfg, unit)
                } else {
                    let span = u64::from(cfg.max_blocks - cfg.min_blocks) + 1;
                    cfg.min_blocks + self.rng.below(span) as u32
                };
                let write = match cfg.rw {
                    Rw::Read | Rw::RandRead => false,
                    Rw::Write | Rw::RandWrite => true,
                    Rw::RandRw => self.rng.below(PERCENT) >= u64::from(cfg.rwmixread),
                };
                Some(Planned {
                    unit,
                    nblocks,
                    write,
                })
            }
            Phase::Readback => {
                while let Some(&g) = self.gens.get(self.readback_next as usize) {
                    let unit = self.readback_next;
                    self.readback_next += 1;
                    if g != 0 {
                        return Some(Planned {
                            unit,
                            nblocks: unit_blocks(cfg, unit),
                            write: false,
                        });
                    }
                }
                None
            }
        }
    }

    /// Builds and submits the I/O for slot `s`. `Ok(false)` when the queue has no
    /// free command id (after a timeout): the caller stops submitting.
    fn start<Q: IoQueue>(
        &mut self,
        q: &mut Q,
        s: usize,
        p: Planned,
        now: Now,
    ) -> Result<bool, Error> {
        let cfg = self.cfg;
        let bs = cfg.block_size as usize;
        let lba = cfg.region_start + p.unit * u64::from(cfg.max_blocks);
        let len = p.nblocks as usize * bs;
        let no_buf = || Error::InvalidArgument(format!("slot {s} has no {len}-byte buffer"));
        let whole = self.bufs.get(s).ok_or_else(no_buf)?;
        // A full-size I/O uses the slot's buffer as is; only a shorter one (bs range)
        // takes a sub-slice, which clones two `Arc`s but allocates nothing.
        let sliced;
        let data = if whole.len == len {
            whole
        } else {
            sliced = whole.slice(0, len).ok_or_else(no_buf)?;
            &sliced
        };
        let mut gen = 0;
        let (sqe, dir) = if p.write {
            if cfg.verify {
                gen = self.next_gen;
                self.next_gen = self.next_gen.wrapping_add(1).max(1);
                if let Some(buf) = self.scratch.get_mut(..len) {
                    verify::stamp(buf, lba, bs, cfg.seed, gen, cfg.verify_alg);
                    data.write_at(0, buf);
                }
            }
            (
                command::write(cfg.nsid, lba, p.nblocks, false)?,
                DataDir::ToCtrl,
            )
        } else {
            (
                command::read(cfg.nsid, lba, p.nblocks, false)?,
                DataDir::FromCtrl,
            )
        };
        match q.submit_at(sqe, Some(data), dir, s as u64, now.at) {
            Ok(_) => {}
            Err(Error::QueueFull) => return Ok(false),
            Err(e) => return Err(e),
        }
        if let Some(slot) = self.slots.get_mut(s) {
            *slot = Slot {
                unit: p.unit,
                lba,
                nblocks: p.nblocks,
                write: p.write,
                gen,
                t0: now.ns,
            };
        }
        Ok(true)
    }

    /// Accounts one completion. Returns false when the command is to be retried after
    /// a reconnect (a host timeout while recovering) rather than its slot freed.
    fn finish(&mut self, c: &Completion, now_ns: u64, phase: Phase) -> bool {
        let Some(slot) = self.slots.get(c.tag as usize).copied() else {
            return true;
        };
        let cfg = self.cfg;
        let bs = cfg.block_size as usize;
        let len = slot.nblocks as usize * bs;
        let age_ns = now_ns.saturating_sub(slot.t0);
        self.longest_ns = self.longest_ns.max(age_ns);
        if self.recovering && c.is_host_timeout() {
            return false;
        }
        if self.recovering && c.status.sct == Sct::PathRelated && !c.status.dnr {
            // The path cannot serve it now (ANA): retried on the next path.
            self.path_errors += 1;
            return false;
        }
        if !c.status.is_success() {
            self.out.errors += 1;
            self.failed = true;
            if self.out.first_error.is_none() {
                let op = if slot.write { "Write" } else { "Read" };
                let why = if c.is_host_timeout() {
                    "no response before the command timeout (aborted by host)".to_string()
                } else {
                    c.status.to_string()
                };
                self.out.first_error = Some(format!(
                    "{op} of {} blocks at LBA {}: {why}",
                    slot.nblocks, slot.lba
                ));
            }
            return true;
        }
        self.completed += 1;
        if phase == Phase::Main {
            self.done_ios += 1;
            self.done_bytes += len as u64;
        }
        if cfg.verify {
            self.verify_completion(&slot, c.tag as usize, len, phase);
        }
        if phase == Phase::Main && slot.t0 >= self.ramp_end_ns {
            let d = if slot.write {
                &mut self.out.write
            } else {
                &mut self.out.read
            };
            d.ios += 1;
            d.bytes += len as u64;
            d.hist.saturating_record(age_ns.max(1));
            let bucket = (now_ns.saturating_sub(self.ramp_end_ns) / TIMELINE_BUCKET_NS) as usize;
            if bucket >= self.out.timeline.len() {
                // Grows once per bucket (every 100 ms), not per I/O.
                self.out.timeline.resize(bucket + 1, 0);
            }
            if let Some(b) = self.out.timeline.get_mut(bucket) {
                *b += 1;
            }
            self.last_record = Some(now_ns);
        }
        true
    }

    fn verify_completion(&mut self, slot: &Slot, s: usize, len: usize, phase: Phase) {
        let cfg = self.cfg;
        let unit = slot.unit as usize;
        if slot.write {
            if let Some(g) = self.gens.get_mut(unit) {
                *g = slot.gen;
            }
            return;
        }
        let known = self.gens.get(unit).copied().unwrap_or(0);
        let expect = match (phase, known) {
            (_, g) if g != 0 => Some(g),
            // Read-only runs check data an earlier write run left (any generation).
            (Phase::Main, _) if !cfg.rw.writes() => None,
            // A unit this mixed run has not written yet holds anything: skip it.
            _ => return,
        };
        let (Some(buf), Some(io)) = (self.scratch.get_mut(..len), self.bufs.get(s)) else {
            return;
        };
        if !io.read_at(0, buf) {
            return;
        }
        self.out.verify.blocks_checked += u64::from(slot.nblocks);
        if let Err(f) = verify::check(buf, slot.lba, cfg.block_size as usize, cfg.seed, expect) {
            self.out.verify.fail(f);
        }
    }

    /// One pass of the measured loop (see [`JobRunner::step`]).
    fn drive_once<Q: IoQueue>(
        &mut self,
        q: &mut Q,
        phase: Phase,
        st: &mut DriveState,
    ) -> Result<Tick, Error> {
        if !st.resubmitted {
            st.resubmitted = true;
            self.resubmit_retries(q)?;
        }
        if !st.stop_submit && !self.free.is_empty() {
            let now = self.clock.now();
            let mut submitted = 0usize;
            while let Some(&s) = self.free.last() {
                let Some(p) = self.pending.take().or_else(|| self.next_io(phase)) else {
                    st.stop_submit = true;
                    break;
                };
                if !self.start(q, s, p, now)? {
                    // Every command identifier is in use (iodepth above the queue's
                    // size): the planned I/O waits in the job for a later completion,
                    // while the thread serves its other jobs.
                    self.pending = Some(p);
                    break;
                }
                self.free.pop();
                self.inflight += 1;
                submitted += 1;
            }
            if submitted > 0 {
                q.flush()?;
            }
        }
        st.comps.clear();
        let polled = q.poll(&mut st.comps);
        st.idle_polls = if st.comps.is_empty() {
            st.idle_polls.wrapping_add(1)
        } else {
            0
        };
        // Completions need the time (idle_polls is 0 then); an empty poll reads it
        // only now and then.
        let now = st
            .idle_polls
            .is_multiple_of(IDLE_CLOCK_EVERY)
            .then(|| self.clock.now());
        if let Some(now) = now {
            for c in st.comps.iter() {
                if self.finish(c, now.ns, phase) {
                    self.free.push(c.tag as usize);
                } else {
                    self.retry.push(c.tag as usize);
                }
                self.inflight = self.inflight.saturating_sub(1);
            }
        }
        // A protocol error leaves the queue broken: stop (the caller records it).
        polled?;
        if !self.retry.is_empty() {
            if std::mem::take(&mut self.path_errors) > 0 {
                return Err(Error::Path(format!(
                    "{} command(s) on queue {} refused by the path (ANA)",
                    self.retry.len(),
                    q.qid()
                )));
            }
            return Err(Error::Timeout(format!(
                "{} command(s) on queue {} got no response before the command timeout",
                self.retry.len(),
                q.qid()
            )));
        }
        if self.failed {
            st.stop_submit = true;
        }
        if let Some(now) = now.map(|n| n.at).filter(|n| *n >= st.next_housekeeping) {
            st.next_housekeeping = now + HOUSEKEEPING;
            if phase == Phase::Main && self.cfg.end.is_some_and(|e| now >= e) {
                st.stop_submit = true;
            }
            if self.stop.load(Ordering::Relaxed) {
                st.stop_submit = true;
            }
            // Timed-out commands come back through the next poll as errors.
            q.expire(now);
            self.publish();
        }
        if st.stop_submit && self.inflight == 0 {
            return Ok(Tick::Finished);
        }
        Ok(if st.comps.is_empty() {
            Tick::Empty
        } else {
            Tick::Reaped
        })
    }

    /// Submits again the commands that were in flight when the previous queue broke.
    fn resubmit_retries<Q: IoQueue>(&mut self, q: &mut Q) -> Result<(), Error> {
        if self.retry.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        while let Some(&s) = self.retry.last() {
            let Some(slot) = self.slots.get(s).copied() else {
                self.retry.pop();
                continue;
            };
            let len = slot.nblocks as usize * self.cfg.block_size as usize;
            let no_buf = || Error::InvalidArgument(format!("slot {s} has no {len}-byte buffer"));
            let whole = self.bufs.get(s).ok_or_else(no_buf)?;
            let data = whole.slice(0, len).ok_or_else(no_buf)?;
            // The slot's buffer still holds the write's data (stamp and all).
            let (sqe, dir) = if slot.write {
                (
                    command::write(self.cfg.nsid, slot.lba, slot.nblocks, false)?,
                    DataDir::ToCtrl,
                )
            } else {
                (
                    command::read(self.cfg.nsid, slot.lba, slot.nblocks, false)?,
                    DataDir::FromCtrl,
                )
            };
            q.submit_at(sqe, Some(&data), dir, s as u64, now)?;
            self.retry.pop();
            self.inflight += 1;
        }
        q.flush()
    }

    /// The queue broke with `e`: what was in flight on it is retried or failed per the
    /// policy. `Ok(true)`: the job continues on a new queue (the controller
    /// reconnected); `Ok(false)`: it ends (the failures are recorded).
    fn recover<Q: IoQueue>(
        &mut self,
        q: &mut Q,
        rc: Recovery<'_>,
        generation: &mut Generation,
        e: &Error,
    ) -> Result<bool, Error> {
        let depth = self.cfg.iodepth as usize;
        let mut lost: Vec<usize> = (0..depth)
            .filter(|s| !self.free.contains(s) && !self.retry.contains(s))
            .collect();
        self.inflight = 0;
        tracing::warn!(
            job = self.cfg.index,
            qid = %q.qid(),
            in_flight = lost.len(),
            "I/O queue lost ({e}); waiting for the controller to reconnect"
        );
        match rc.source.retry_policy() {
            RetryPolicy::Retry => self.retry.append(&mut lost),
            RetryPolicy::Fail => {
                // Each command in flight failed; the job ends as on any I/O error
                // (fio without continue_on_error).
                self.retry.clear();
                let failed = lost.len().max(1) as u64;
                self.free.append(&mut lost);
                self.record_error(e);
                self.out.errors += failed - 1;
                return Ok(false);
            }
        }
        let (nq, g) = rc.source.replace(rc.index, *generation)?;
        self.out.ages.merge(q.take_command_ages());
        q.install(nq)?;
        *generation = g;
        Ok(true)
    }

    /// Makes the counters visible to the progress line.
    fn publish(&self) {
        self.progress.ios.store(self.done_ios, Ordering::Relaxed);
        self.progress
            .bytes
            .store(self.done_bytes, Ordering::Relaxed);
    }

    fn record_error(&mut self, e: &Error) {
        self.out.errors += 1;
        self.failed = true;
        if self.out.first_error.is_none() {
            self.out.first_error = Some(e.to_string());
        }
    }
}
