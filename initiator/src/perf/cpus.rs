//! `perf --cpus LIST`: which CPUs the polling threads run on, and how many threads.
//!
//! Owned by `perf`. A [`CpuList`] is parsed from the command line or a job file's
//! `cpus_allowed` (Linux's cpu-list syntax: `0-1,3`); [`ThreadPlan::new`] turns it (or
//! its absence) into the threads of a run: one thread per listed CPU, pinned there
//! with `sched_setaffinity`, or by default one unpinned thread per CPU this process
//! may run on (`sched_getaffinity`); never more threads than jobs. Parsing checks the
//! syntax and the range a CPU set can hold; whether the process may use a CPU is only
//! known at run time, so [`ThreadPlan::new`] checks that.

use std::fmt;
use std::str::FromStr;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::error::Error;

/// The calling thread (pid 0 in the sched_*affinity calls).
const THIS_THREAD: i32 = 0;

/// CPUs to run polling threads on, in the order given, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// The CPUs this process may run on (its affinity mask).
    pub fn allowed() -> Result<CpuList, Error> {
        let set = sched_getaffinity(Pid::from_raw(THIS_THREAD))
            .map_err(|e| Error::Io(std::io::Error::from(e)))?;
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect();
        Ok(CpuList(cpus))
    }
}

impl FromStr for CpuList {
    type Err = Error;

    /// `0`, `0-3`, `0-1,3`: numbers and inclusive ranges, separated by commas.
    fn from_str(s: &str) -> Result<CpuList, Error> {
        let bad = |m: String| Error::InvalidArgument(format!("cpu list {s:?}: {m}"));
        if s.trim().is_empty() {
            return Err(bad("empty; give CPU numbers like 0-1,3".into()));
        }
        let max = CpuSet::count() - 1;
        let cpu = |t: &str| -> Result<usize, Error> {
            let n: usize = t
                .trim()
                .parse()
                .map_err(|_| bad(format!("{t:?} is not a CPU number")))?;
            if n > max {
                return Err(bad(format!(
                    "CPU {n} is beyond the largest a CPU set holds ({max})"
                )));
            }
            Ok(n)
        };
        let mut out: Vec<usize> = Vec::new();
        for part in s.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (cpu(a)?, cpu(b)?),
                None => {
                    let c = cpu(part)?;
                    (c, c)
                }
            };
            if lo > hi {
                return Err(bad(format!("range {lo}-{hi} goes backwards")));
            }
            for c in lo..=hi {
                if out.contains(&c) {
                    return Err(bad(format!("CPU {c} is listed twice")));
                }
                out.push(c);
            }
        }
        Ok(CpuList(out))
    }
}

impl fmt::Display for CpuList {
    /// The list with consecutive runs as ranges (`0-1,3`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Runs of consecutive CPUs, as (first, last).
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &c in &self.0 {
            match runs.last_mut() {
                Some((_, hi)) if *hi + 1 == c => *hi = c,
                _ => runs.push((c, c)),
            }
        }
        let parts: Vec<String> = runs
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// The polling threads of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlan {
    pub threads: usize,
    /// The CPU of each thread (`--cpus`), or `None`: unpinned.
    pub pins: Option<Vec<usize>>,
}

impl ThreadPlan {
    /// Threads for `numjobs` jobs: one per CPU of `cpus` (which must all be CPUs this
    /// process may run on), else one per allowed CPU; at most one per job.
    pub fn new(numjobs: u32, cpus: Option<&CpuList>) -> Result<ThreadPlan, Error> {
        let jobs = usize::try_from(numjobs).unwrap_or(usize::MAX).max(1);
        let allowed = CpuList::allowed()?;
        match cpus {
            Some(list) => {
                if let Some(c) = list.cpus().iter().find(|c| !allowed.cpus().contains(c)) {
                    return Err(Error::InvalidArgument(format!(
                        "--cpus {list}: CPU {c} is not one this process may run on (allowed: {allowed})"
                    )));
                }
                let pins: Vec<usize> = list.cpus().iter().copied().take(jobs).collect();
                Ok(ThreadPlan {
                    threads: pins.len().max(1),
                    pins: Some(pins),
                })
            }
            None => Ok(ThreadPlan {
                threads: allowed.cpus().len().clamp(1, jobs),
                pins: None,
            }),
        }
    }

    /// The CPU thread `t` is pinned to, if any.
    pub fn pin(&self, t: usize) -> Option<usize> {
        self.pins.as_ref().and_then(|p| p.get(t).copied())
    }

    /// The thread that runs job `index`: jobs are dealt round-robin, so each thread
    /// gets `numjobs / threads` jobs, give or take one.
    pub fn thread_of(&self, index: usize) -> usize {
        index % self.threads.max(1)
    }

    /// `0-1` (pinned) or `None` (unpinned), for the report.
    pub fn cpu_list(&self) -> Option<String> {
        self.pins.as_ref().map(|p| CpuList(p.clone()).to_string())
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), Error> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| Error::InvalidArgument(format!("CPU {cpu}: {e}")))?;
    sched_setaffinity(Pid::from_raw(THIS_THREAD), &set).map_err(|e| {
        Error::InvalidArgument(format!("could not pin a perf thread to CPU {cpu}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<usize>, String> {
        s.parse::<CpuList>()
            .map(|l| l.cpus().to_vec())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse("0"), Ok(vec![0]));
        assert_eq!(parse("0-1,3"), Ok(vec![0, 1, 3]));
        assert_eq!(parse("3,0-1"), Ok(vec![3, 0, 1]));
        assert_eq!(parse(" 2 - 4 "), Ok(vec![2, 3, 4]));
        let l: CpuList = "0-2,5,7-8".parse().unwrap();
        assert_eq!(l.to_string(), "0-2,5,7-8");
    }

    #[test]
    fn bad_lists_say_why() {
        let e = parse("").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = parse("a-b").unwrap_err();
        assert!(e.contains("\"a\" is not a CPU number"), "{e}");
        let e = parse("9999").unwrap_err();
        assert!(e.contains("CPU 9999 is beyond"), "{e}");
        let e = parse("3-1").unwrap_err();
        assert!(e.contains("backwards"), "{e}");
        let e = parse("0,0").unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = parse("0,").unwrap_err();
        assert!(e.contains("\"\" is not a CPU number"), "{e}");
        let e = parse("-1").unwrap_err();
        assert!(e.contains("not a CPU number"), "{e}");
    }

    #[test]
    fn plans() {
        let allowed = CpuList::allowed().unwrap();
        let n = allowed.cpus().len();
        assert!(n >= 1);
        let p = ThreadPlan::new(8, None).unwrap();
        assert_eq!((p.threads, p.pins.clone()), (n.min(8), None));
        assert_eq!(ThreadPlan::new(1, None).unwrap().threads, 1);
        let first = allowed.cpus().first().copied().unwrap();
        let one = CpuList(vec![first]);
        let p = ThreadPlan::new(4, Some(&one)).unwrap();
        assert_eq!((p.threads, p.pin(0)), (1, Some(first)));
        assert!((0..4).all(|j| p.thread_of(j) == 0));
        let e = ThreadPlan::new(1, Some(&CpuList(vec![CpuSet::count() - 1])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not one this process may run on"), "{e}");
    }
}
