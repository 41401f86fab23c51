//! The perf report: per-job and total IOPS, bandwidth, latency percentiles, CPU time,
//! verification results; as text (fio-like) or JSON (fio's field names where they
//! fit: `iops`, `bw_bytes`, `io_bytes`, `lat_ns { min, max, mean, stddev, percentile }`).

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::ioqueue::PathIos;

use super::job::{DirStats, JobOutcome, VerifySummary, TIMELINE_BUCKET};
use super::parse::format_bytes;
use super::PerfOptions;
use crate::controller::NamespaceInfo;
use crate::error::Error;
use crate::queue::CommandAges;

/// Percentiles reported, as fio prints them.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];
const NS_PER_US: f64 = 1_000.0;
const BYTES_PER_KIB: f64 = 1024.0;
const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;
const BYTES_PER_MB: f64 = 1_000_000.0;
const PERCENT: f64 = 100.0;
/// The header's `cpus=` when the threads were not pinned.
const UNPINNED: &str = "unpinned";

/// Process CPU time (getrusage RUSAGE_SELF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuUsage {
    pub user: Duration,
    pub system: Duration,
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let us = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(us))
}

impl CpuUsage {
    /// CPU time used by this process so far (zero if getrusage fails).
    pub fn now() -> CpuUsage {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes one `struct rusage` into the pointer, which points to
        // a properly sized and aligned (zeroed) value.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
        if rc != 0 {
            return CpuUsage::default();
        }
        // SAFETY: zero-initialised and, on success, filled in by the kernel.
        let ru = unsafe { ru.assume_init() };
        CpuUsage {
            user: timeval(ru.ru_utime),
            system: timeval(ru.ru_stime),
        }
    }

    /// The CPU time between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuUsage) -> CpuUsage {
        CpuUsage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct PerfReport {
    pub options: PerfOptions,
    pub namespace: NamespaceInfo,
    pub span_blocks: u64,
    pub jobs: Vec<JobOutcome>,
    /// CPU time of the process over the measured window.
    pub cpu: CpuUsage,
    /// The measured window (longest job).
    pub elapsed: Duration,
    pub read: DirStats,
    pub write: DirStats,
    pub verify: VerifySummary,
    /// Completions per [`TIMELINE_BUCKET`], all jobs.
    pub timeline: Vec<u64>,
    /// Polling threads the jobs ran on.
    pub threads: usize,
    /// The CPUs they were pinned to (`--cpus`, as a list like `0-1,3`); `None`: unpinned.
    pub thread_cpus: Option<String>,
    /// Commands reported stuck and the longest command age, all jobs.
    pub ages: CommandAges,
}

impl PerfReport {
    pub fn new(
        options: PerfOptions,
        namespace: NamespaceInfo,
        span_blocks: u64,
        jobs: Vec<JobOutcome>,
        cpu: CpuUsage,
    ) -> Result<PerfReport, Error> {
        let mut read = DirStats::new()?;
        let mut write = DirStats::new()?;
        let mut verify = VerifySummary::default();
        let mut timeline: Vec<u64> = Vec::new();
        let mut elapsed = Duration::ZERO;
        let mut ages = CommandAges::default();
        for j in &jobs {
            ages.merge(j.ages);
            read.merge(&j.read);
            write.merge(&j.write);
            verify.merge(&j.verify);
            elapsed = elapsed.max(j.elapsed);
            if timeline.len() < j.timeline.len() {
                timeline.resize(j.timeline.len(), 0);
            }
            for (t, v) in timeline.iter_mut().zip(&j.timeline) {
                *t += v;
            }
        }
        Ok(PerfReport {
            options,
            namespace,
            span_blocks,
            jobs,
            cpu,
            elapsed,
            read,
            write,
            verify,
            timeline,
            threads: 1,
            thread_cpus: None,
            ages,
        })
    }

    pub fn errors(&self) -> u64 {
        self.jobs.iter().map(|j| j.errors).sum()
    }

    /// True when any I/O failed or any block failed verification.
    pub fn failed(&self) -> bool {
        self.errors() > 0 || self.verify.failure_count > 0
    }

    pub fn total_ios(&self) -> u64 {
        self.read.ios + self.write.ios
    }

    /// Commands completed per path, summed over the jobs (empty with one path). They
    /// include the ramp and verify read-back, so they add up to at least `total_ios`.
    pub fn path_ios(&self) -> Vec<PathIos> {
        let mut out: Vec<PathIos> = Vec::new();
        for p in self.jobs.iter().flat_map(|j| j.paths.iter()) {
            match out.iter_mut().find(|o| o.path == p.path) {
                Some(o) => o.ios += p.ios,
                None => out.push(p.clone()),
            }
        }
        out.sort_by_key(|p| p.path);
        out
    }

    pub fn iops(&self) -> f64 {
        rate(self.total_ios(), self.elapsed)
    }

    /// Latency of reads and writes together.
    pub fn latency(&self) -> Histogram<u64> {
        let mut h = self.read.hist.clone();
        let _ = h.add(&self.write.hist);
        h
    }

    /// CPU use as a percentage of one core over the measured window.
    pub fn cpu_percent(&self) -> f64 {
        pct(self.cpu.total(), self.elapsed)
    }

    /// CPU microseconds per I/O.
    pub fn cpu_us_per_io(&self) -> f64 {
        let ios = self.total_ios();
        if ios == 0 {
            0.0
        } else {
            self.cpu.total().as_secs_f64() * 1e6 / ios as f64
        }
    }

    /// The fio-like text report.
    pub fn format_normal(&self) -> String {
        let o = &self.options;
        let mut s = String::new();
        let runtime = o
            .runtime
            .map_or_else(|| "one pass".to_string(), |r| format!("{r:?}"));
        let _ = writeln!(
            s,
            "perf: rw={} bs={} iodepth={} numjobs={} threads={} cpus={} runtime={runtime} nsid={} (block size {}, span {})",
            o.rw,
            o.bs,
            o.iodepth,
            o.numjobs,
            self.threads,
            self.thread_cpus.as_deref().unwrap_or(UNPINNED),
            self.namespace.nsid,
            self.namespace.block_size,
            format_bytes(self.span_blocks * u64::from(self.namespace.block_size)),
        );
        for j in &self.jobs {
            let _ = writeln!(
                s,
                "job{} (qid {}): errors={} runtime={:.3}s",
                j.index,
                j.qid,
                j.errors,
                j.elapsed.as_secs_f64()
            );
            dir_text(&mut s, "read", &j.read, j.elapsed);
            dir_text(&mut s, "write", &j.write, j.elapsed);
            if let Some(e) = &j.first_error {
                let _ = writeln!(s, "  first error: {e}");
            }
        }
        let _ = writeln!(
            s,
            "total: IOPS={} ios={} runtime={:.3}s",
            si(self.iops()),
            self.total_ios(),
            self.elapsed.as_secs_f64()
        );
        dir_text(&mut s, "read", &self.read, self.elapsed);
        dir_text(&mut s, "write", &self.write, self.elapsed);
        let _ = writeln!(
            s,
            "commands: longest {:.3} ms, {} reported stuck",
            self.ages.longest.as_secs_f64() * 1e3,
            self.ages.stuck
        );
        let _ = writeln!(
            s,
            "cpu: {:.1}% of one core (usr {:.1}%, sys {:.1}%), {:.2} us/IO",
            self.cpu_percent(),
            pct(self.cpu.user, self.elapsed),
            pct(self.cpu.system, self.elapsed),
            self.cpu_us_per_io()
        );
        let paths = self.path_ios();
        if !paths.is_empty() {
            let list: Vec<String> = paths
                .iter()
                .map(|p| format!("path{} {} ios={}", p.path, p.name, p.ios))
                .collect();
            let _ = writeln!(s, "paths: {}", list.join(", "));
        }
        if o.verify {
            if self.verify.failure_count == 0 {
                let _ = writeln!(
                    s,
                    "verify: OK ({} blocks checked)",
                    self.verify.blocks_checked
                );
            } else {
                let _ = writeln!(
                    s,
                    "verify: FAILED: {} bad blocks of {} checked",
                    self.verify.failure_count, self.verify.blocks_checked
                );
                for f in &self.verify.failures {
                    let _ = writeln!(s, "  {f}");
                }
            }
        }
        s
    }

    /// The JSON report.
    pub fn to_json(&self) -> Value {
        let o = &self.options;
        let jobs: Vec<Value> = self
            .jobs
            .iter()
            .map(|j| {
                json!({
                    "jobname": format!("job{}", j.index),
                    "qid": j.qid,
                    "error": j.errors,
                    "first_error": j.first_error,
                    "job_runtime": j.elapsed.as_millis() as u64,
                    "read": dir_json(&j.read, j.elapsed),
                    "write": dir_json(&j.write, j.elapsed),
                    "verify": verify_json(&j.verify),
                    "stuck_commands": j.ages.stuck,
                    "longest_command_age_ns": nanos(j.ages.longest),
                })
            })
            .collect();
        json!({
            "nvmf_initiator_version": env!("CARGO_PKG_VERSION"),
            "options": {
                "rw": o.rw.as_str(),
                "rwmixread": o.rwmixread,
                "bs": o.bs.to_string(),
                "iodepth": o.iodepth,
                "numjobs": o.numjobs,
                "threads": self.threads,
                "cpus": self.thread_cpus,
                "runtime": o.runtime.map(|r| r.as_millis() as u64),
                "ramp_time": o.ramp_time.as_millis() as u64,
                "size": self.span_blocks * u64::from(self.namespace.block_size),
                "verify": o.verify,
                "nsid": self.namespace.nsid.0,
                "block_size": self.namespace.block_size,
                "seed": o.seed,
            },
            "jobs": jobs,
            "total": {
                "iops": self.iops(),
                "total_ios": self.total_ios(),
                "error": self.errors(),
                "runtime": self.elapsed.as_millis() as u64,
                "read": dir_json(&self.read, self.elapsed),
                "write": dir_json(&self.write, self.elapsed),
                "lat_ns": lat_json(&self.latency()),
                "stuck_commands": self.ages.stuck,
                "longest_command_age_ns": nanos(self.ages.longest),
            },
            "cpu": {
                "usr": pct(self.cpu.user, self.elapsed),
                "sys": pct(self.cpu.system, self.elapsed),
                "total_pct_of_core": self.cpu_percent(),
                "usec_per_io": self.cpu_us_per_io(),
            },
            "verify": verify_json(&self.verify),
            "paths": self.path_ios().iter().map(|p| json!({
                "path": p.path,
                "name": p.name,
                "ios": p.ios,
            })).collect::<Vec<Value>>(),
            "iops_timeline": {
                "interval_ms": TIMELINE_BUCKET.as_millis() as u64,
                "completions": self.timeline,
            },
        })
    }
}

/// A duration in whole nanoseconds, as the latencies are reported.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn rate(n: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

fn pct(part: Duration, whole: Duration) -> f64 {
    let w = whole.as_secs_f64();
    if w > 0.0 {
        part.as_secs_f64() / w * PERCENT
    } else {
        0.0
    }
}

/// "123k", "1.23M": fio's IOPS notation.
fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn us(ns: f64) -> f64 {
    ns / NS_PER_US
}

fn dir_text(s: &mut String, name: &str, d: &DirStats, elapsed: Duration) {
    if d.ios == 0 {
        return;
    }
    let bw = rate(d.bytes, elapsed);
    let h = &d.hist;
    let _ = writeln!(
        s,
        "  {name}: IOPS={}, BW={:.1}MiB/s ({:.1}MB/s) ({} in {} ios)",
        si(rate(d.ios, elapsed)),
        bw / BYTES_PER_MIB,
        bw / BYTES_PER_MB,
        format_bytes(d.bytes),
        d.ios
    );
    let _ = writeln!(
        s,
        "    lat (usec): min={:.2}, max={:.2}, avg={:.2}, stdev={:.2}",
        us(h.min() as f64),
        us(h.max() as f64),
        us(h.mean()),
        us(h.stdev())
    );
    let mut p = String::new();
    for q in PERCENTILES {
        let _ = write!(p, "p{q}={:.2} ", us(h.value_at_percentile(q) as f64));
    }
    let _ = writeln!(
        s,
        "    lat percentiles (usec): {p}max={:.2}",
        us(h.max() as f64)
    );
}

fn lat_json(h: &Histogram<u64>) -> Value {
    let mut pm = Map::new();
    for q in PERCENTILES {
        pm.insert(format!("{q:.6}"), json!(h.value_at_percentile(q)));
    }
    let empty = h.is_empty();
    json!({
        "min": if empty { 0 } else { h.min() },
        "max": h.max(),
        "mean": h.mean(),
        "stddev": h.stdev(),
        "N": h.len(),
        "percentile": pm,
    })
}

fn dir_json(d: &DirStats, elapsed: Duration) -> Value {
    let bw = rate(d.bytes, elapsed);
    json!({
        "io_bytes": d.bytes,
        "io_kbytes": d.bytes / 1024,
        "bw_bytes": bw as u64,
        "bw": (bw / BYTES_PER_KIB) as u64,
        "iops": rate(d.ios, elapsed),
        "runtime": elapsed.as_millis() as u64,
        "total_ios": d.ios,
        "lat_ns": lat_json(&d.hist),
    })
}

fn verify_json(v: &VerifySummary) -> Value {
    json!({
        "blocks_checked": v.blocks_checked,
        "failures": v.failure_count,
        "first_failures": v.failures,
    })
}
