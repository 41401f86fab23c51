//! A perf job's clock: each reading is an [`Instant`] (what the queue's deadlines and
//! the job's housekeeping use) and the same moment as nanoseconds since the job's
//! origin, converted once per reading. The loop reads the clock once per submit batch
//! and once per poll; per completion it then only subtracts integers for the latency,
//! the age and the timeline bucket (three `Instant::duration_since` per completion,
//! each normalising a timespec, were about 6% of the host's user-space instructions at
//! 4 KiB QD 32: `scripts/bench-callgrind host randread`).
//!
//! The origin is the job's creation or the end of its ramp, whichever is earlier, so
//! every moment the job measures is at or after it and no difference saturates.

use std::time::{Duration, Instant};

/// One clock reading.
#[derive(Debug, Clone, Copy)]
pub(super) struct Now {
    pub at: Instant,
    /// `at` in nanoseconds since the job's origin.
    pub ns: u64,
}

/// Converts between a job's `Instant`s and its nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct JobClock {
    origin: Instant,
}

impl JobClock {
    /// A clock for a job whose ramp ends at `ramp_end`.
    pub(super) fn new(ramp_end: Instant) -> JobClock {
        JobClock {
            origin: Instant::now().min(ramp_end),
        }
    }

    /// Reads the clock.
    pub(super) fn now(&self) -> Now {
        let at = Instant::now();
        Now {
            at,
            ns: self.ns(at),
        }
    }

    /// `at` in nanoseconds since the origin (0 for a moment before it; `u64::MAX`
    /// after 584 years).
    pub(super) fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The moment `ns` nanoseconds after the origin.
    pub(super) fn instant(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_convert_both_ways_from_an_origin_at_or_before_the_ramp_end() {
        let ramp_end = Instant::now() + Duration::from_secs(5);
        let c = JobClock::new(ramp_end);
        let a = c.now();
        let b = c.now();
        assert!(b.ns >= a.ns);
        assert_eq!(c.instant(a.ns), a.at);
        // The ramp ends after the origin: its offset is the 5 s less the time taken.
        let r = c.ns(ramp_end);
        assert!(r > 4_000_000_000 && r <= 5_000_000_000, "{r}");
        assert_eq!(c.instant(r), ramp_end);
        // A ramp that ended before the job: the origin is the ramp's end.
        let past = Instant::now() - Duration::from_millis(10);
        let c = JobClock::new(past);
        assert_eq!(c.ns(past), 0);
        assert!(c.now().ns >= 10_000_000);
    }
}
