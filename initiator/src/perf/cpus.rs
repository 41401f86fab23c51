//! `perf --cpus LIST`: which CPUs the polling threads run on, and how many threads.
//!
//! Owned by `perf`. A [`CpuList`] is parsed from the command line or a job file's
//! `cpus_allowed` (Linux's cpu-list syntax: `0-1,3`); [`ThreadPlan::new`] turns it (or
//! its absence) into the threads of a run: one thread per listed CPU, pinned there
//! with `sched_setaffinity`, or by default one unpinned thread per CPU this process
//! may run on (`sched_getaffinity`); never more threads than jobs. Parsing checks the
//! syntax and the range a CPU set can hold; whether the process may use a CPU is only
//! known at run time, so [`ThreadPlan::new`] checks that.

use crate::error::Error;

/// The list type, shared with the target's `transport.cpus`: one spelling in both.
pub use nvmf_common::cpus::CpuList;

/// The CPUs this process may run on (its affinity mask).
pub fn allowed() -> Result<CpuList, Error> {
    nvmf_common::cpus::allowed_cpus()
        .and_then(CpuList::from_cpus)
        .ok_or_else(|| Error::InvalidArgument("sched_getaffinity gave no CPU".into()))
}

/// `--cpus` / `cpus_allowed` as given, with the reason when refused.
pub fn parse(s: &str) -> Result<CpuList, Error> {
    s.parse()
        .map_err(|e| Error::InvalidArgument(format!("cpu list {s:?}: {e}")))
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
        let allowed = allowed()?;
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
        self.pins
            .as_ref()
            .and_then(|p| CpuList::from_cpus(p.clone()))
            .map(|l| l.to_string())
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), Error> {
    nvmf_common::cpus::pin_current_thread(cpu).map_err(|e| {
        Error::InvalidArgument(format!("could not pin a perf thread to CPU {cpu}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_with_the_reason_when_refused() {
        assert_eq!(parse("3,0-1").unwrap().cpus(), &[0, 1, 3]);
        let e = parse("a-b").unwrap_err().to_string();
        assert!(
            e.contains("cpu list \"a-b\"") && e.contains("not a CPU number"),
            "{e}"
        );
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn plans() {
        let allowed = allowed().unwrap();
        let n = allowed.cpus().len();
        assert!(n >= 1);
        let p = ThreadPlan::new(8, None).unwrap();
        assert_eq!((p.threads, p.pins.clone()), (n.min(8), None));
        assert_eq!(ThreadPlan::new(1, None).unwrap().threads, 1);
        let first = allowed.cpus().first().copied().unwrap();
        let one = CpuList::from_cpus(vec![first]).unwrap();
        let p = ThreadPlan::new(4, Some(&one)).unwrap();
        assert_eq!((p.threads, p.pin(0)), (1, Some(first)));
        assert!((0..4).all(|j| p.thread_of(j) == 0));
        let e = ThreadPlan::new(
            1,
            Some(&CpuList::from_cpus(vec![nvmf_common::cpus::MAX_CPU]).unwrap()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not one this process may run on"), "{e}");
    }
}
