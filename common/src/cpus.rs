//! CPU lists (`0-3,6,8-9`), as taskset, fio's `cpus_allowed` and the kernel's
//! `Cpus_allowed_list` write them, and pinning the calling thread to one CPU.
//!
//! The target pins its poll groups with `transport.cpus`; the host pins its polling
//! threads with `perf --cpus`. Both parse with [`CpuList`], so one spelling works in
//! both places.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Highest CPU number accepted in a list: what a `cpu_set_t` (glibc's `CPU_SETSIZE`,
/// nix's `CpuSet`) can name, so every listed CPU can be pinned to.
pub const MAX_CPU: usize = 1023;

/// A non-empty, sorted set of CPU numbers without duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

/// Why a CPU list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("empty CPU list")]
    Empty,
    #[error("\"{0}\" is not a CPU number or range (e.g. 0-3,6)")]
    Syntax(String),
    #[error("range \"{0}\" runs backwards")]
    Backwards(String),
    #[error("CPU {0} is beyond the largest CPU number {MAX_CPU}")]
    TooLarge(usize),
}

impl CpuList {
    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// A list of these CPUs (sorted, each once), or `None` when empty or beyond
    /// [`MAX_CPU`].
    pub fn from_cpus(mut cpus: Vec<usize>) -> Option<Self> {
        cpus.sort_unstable();
        cpus.dedup();
        (!cpus.is_empty() && cpus.iter().all(|&c| c <= MAX_CPU)).then_some(CpuList(cpus))
    }

    /// How many CPUs the list names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: a parsed list names at least one CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPU for the `index`-th of several threads: the list taken round-robin.
    pub fn for_index(&self, index: usize) -> usize {
        // Non-empty by construction; 0 would only pin to CPU 0.
        self.0
            .get(index % self.0.len().max(1))
            .copied()
            .unwrap_or(0)
    }

    /// CPUs of the list the calling thread may not run on (outside its affinity
    /// mask, or offline), so a bad list is refused before any thread starts.
    pub fn not_allowed(&self) -> Vec<usize> {
        match allowed_cpus() {
            Some(allowed) => self
                .0
                .iter()
                .copied()
                .filter(|c| !allowed.contains(c))
                .collect(),
            None => Vec::new(),
        }
    }
}

impl FromStr for CpuList {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut cpus = Vec::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                if s.trim().is_empty() {
                    return Err(CpuListError::Empty);
                }
                return Err(CpuListError::Syntax(s.to_string()));
            }
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (cpu(a, part)?, cpu(b, part)?),
                None => {
                    let c = cpu(part, part)?;
                    (c, c)
                }
            };
            if hi < lo {
                return Err(CpuListError::Backwards(part.to_string()));
            }
            cpus.extend(lo..=hi);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }
}

fn cpu(s: &str, part: &str) -> Result<usize, CpuListError> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::Syntax(part.to_string()));
    }
    let n: usize = s
        .parse()
        .map_err(|_| CpuListError::Syntax(part.to_string()))?;
    if n > MAX_CPU {
        return Err(CpuListError::TooLarge(n));
    }
    Ok(n)
}

impl fmt::Display for CpuList {
    /// The shortest form: runs of consecutive CPUs as ranges (`0-3,6`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while let Some(&lo) = self.0.get(i) {
            let mut hi = lo;
            while self.0.get(i + 1) == Some(&(hi + 1)) {
                hi += 1;
                i += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

impl Serialize for CpuList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for CpuList {
    /// A string (`"0-3,6"`), one number, or a sequence of numbers.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            One(usize),
            Many(Vec<usize>),
        }
        let text = match Form::deserialize(d)? {
            Form::Text(t) => t,
            Form::One(n) => n.to_string(),
            Form::Many(v) => v.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The CPUs the calling thread may run on, or `None` if the kernel will not say.
pub fn allowed_cpus() -> Option<Vec<usize>> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    Some(
        (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
    )
}

/// How many CPUs the calling thread may run on (at least 1).
pub fn allowed_count() -> usize {
    allowed_cpus().map_or(1, |v| v.len().max(1))
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(std::io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

/// How long one cache line takes from CPU `a` to CPU `b` and back: two threads pinned
/// there bounce an atomic `trips` times. On shared VMs this round trip changes by 5x
/// for minutes at a time, and every cross-CPU benchmark follows it, so benchmarks
/// measure it next to their figures (`nvmf-initiator cpu-round-trip`). Pinning that
/// fails (a CPU the process may not use) leaves the thread where it is.
pub fn cache_line_round_trip(a: usize, b: usize, trips: u64) -> std::time::Duration {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let line = Arc::new(AtomicU64::new(0));
    let other = line.clone();
    let pong = std::thread::spawn(move || {
        let _ = pin_current_thread(b);
        for i in 0..trips {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    let ping = std::thread::spawn(move || {
        let _ = pin_current_thread(a);
        let start = std::time::Instant::now();
        for i in 0..trips {
            line.store(2 * i + 1, Ordering::Release);
            while line.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        start.elapsed()
    });
    let took = ping.join().unwrap_or_default();
    let _ = pong.join();
    took / u32::try_from(trips.max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cache_line_round_trip_takes_time_and_ends() {
        let cpus = allowed_cpus().unwrap_or_default();
        let (a, b) = (
            cpus.first().copied().unwrap_or(0),
            cpus.last().copied().unwrap_or(0),
        );
        // Two threads on one CPU, or on CPUs other tests keep busy, still finish (they
        // take turns, a scheduler time slice at worst), only slower: the bound is loose.
        let t = cache_line_round_trip(a, b, 200);
        assert!(t > std::time::Duration::ZERO, "{t:?}");
        assert!(
            t < std::time::Duration::from_millis(50),
            "{t:?} per round trip"
        );
    }

    use super::*;

    #[test]
    fn lists_parse_sort_and_print_shortest() {
        let l: CpuList = "6,0-3, 2".parse().unwrap();
        assert_eq!(l.cpus(), &[0, 1, 2, 3, 6]);
        assert_eq!(l.to_string(), "0-3,6");
        assert_eq!("5".parse::<CpuList>().unwrap().cpus(), &[5]);
        assert_eq!(l.for_index(0), 0);
        assert_eq!(l.for_index(4), 6);
        assert_eq!(l.for_index(5), 0);
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        assert_eq!("".parse::<CpuList>(), Err(CpuListError::Empty));
        assert_eq!(
            "a-b".parse::<CpuList>(),
            Err(CpuListError::Syntax("a-b".into()))
        );
        assert_eq!(
            "1,,2".parse::<CpuList>(),
            Err(CpuListError::Syntax("1,,2".into()))
        );
        assert_eq!(
            "3-1".parse::<CpuList>(),
            Err(CpuListError::Backwards("3-1".into()))
        );
        assert_eq!(
            "-1".parse::<CpuList>(),
            Err(CpuListError::Syntax("-1".into()))
        );
        assert_eq!("9999".parse::<CpuList>(), Err(CpuListError::TooLarge(9999)));
    }

    #[test]
    fn yaml_takes_text_a_number_or_a_sequence() {
        let a: CpuList = serde_yaml_ng::from_str("\"0-1\"").unwrap();
        let b: CpuList = serde_yaml_ng::from_str("[0, 1]").unwrap();
        let c: CpuList = serde_yaml_ng::from_str("1").unwrap();
        assert_eq!(a, b);
        assert_eq!(c.cpus(), &[1]);
        assert!(serde_yaml_ng::from_str::<CpuList>("\"x\"").is_err());
    }

    #[test]
    fn the_calling_thread_can_be_pinned_to_an_allowed_cpu() {
        let allowed = allowed_cpus().expect("sched_getaffinity");
        let last = *allowed.last().expect("at least one CPU");
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
        let l: CpuList = MAX_CPU.to_string().parse().unwrap();
        assert_eq!(l.not_allowed(), vec![MAX_CPU]);
    }
}
