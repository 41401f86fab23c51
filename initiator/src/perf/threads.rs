//! The polling threads of a perf run: each owns a few jobs and steps them in turn.
//!
//! Owned by `perf` ([`super::run_recovering`] starts them in a thread scope and joins
//! them). A thread takes its jobs' queues, buffers and configs by (mutable) borrow for
//! the run; jobs share nothing but the stop flag and their progress atomics, so a
//! thread never locks. Ordering: a pass calls [`JobRunner::step`] once on every live
//! job (submit, flush, poll once, account); a job with nothing to reap costs one poll
//! and does not hold the others up. Only when a whole pass reaped nothing for
//! [`SPIN_TIME`](super::idle::SPIN_TIME) does the thread block: on all its queues at
//! once when each can say what it would block on (a socket: [`super::idle::wait_all`]),
//! so any answer wakes it; otherwise in one job's queue `wait` at a time, taking the
//! jobs in turn, for a share of [`WAIT_SLICE`], so an idle thread sleeps and a woken
//! queue is served within about one slice. With one job per thread this is exactly
//! [`super::job::run_job`]'s loop.
//!
//! What a thread cannot hide: a call that blocks inside the transport holds up every
//! job of its thread. Two do: a reconnect (all jobs share that controller, so they could
//! not go on anyway) and, on loopback only, the software RDMA provider's SEND, which
//! waits (up to its RNR timeout, 100 ms) for the target to repost a receive; on a
//! machine so loaded that the target's poll group gets no CPU for that long the SEND
//! fails and the queue reconnects, as it would with one thread per job.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::cpus::pin_current_thread;
use super::idle::{wait_all, IdleSpin, SPIN_TIME, WAIT_ALL, WAIT_SLICE};
use super::job::{JobConfig, JobOutcome, JobProgress, JobRunner, Step};
use crate::error::Error;
use crate::ioqueue::IoQueue;
use crate::requeue::Recovery;
use crate::transport::IoBuf;

/// The shortest block in one queue's `wait` when a thread shares [`WAIT_SLICE`] among
/// many idle jobs (below this the wake-up costs more than the wait saves).
const MIN_WAIT_SLICE: Duration = Duration::from_micros(50);

/// What one job brings to its thread.
pub(super) struct JobInput<'a, Q> {
    pub q: &'a mut Q,
    pub cfg: &'a JobConfig,
    pub bufs: &'a [IoBuf],
    pub progress: &'a JobProgress,
    pub recovery: Option<Recovery<'a>>,
}

/// Each job's index and what it measured (an `Err` only for a job that could not be
/// set up, or whose thread could not be pinned).
pub(super) type ThreadResult = Vec<(u32, Result<JobOutcome, Error>)>;

/// Runs `jobs` to their end on the calling thread, pinned to `pin` first if given.
pub(super) fn poll_jobs<Q: IoQueue>(
    pin: Option<usize>,
    jobs: Vec<JobInput<'_, Q>>,
    stop: &AtomicBool,
) -> ThreadResult {
    let mut out: ThreadResult = Vec::with_capacity(jobs.len());
    if let Some(cpu) = pin {
        if let Err(e) = pin_current_thread(cpu) {
            let why = e.to_string();
            return jobs
                .into_iter()
                .map(|j| (j.cfg.index, Err(Error::InvalidArgument(why.clone()))))
                .collect();
        }
    }
    let mut active: Vec<JobRunner<'_, Q>> = Vec::with_capacity(jobs.len());
    for j in jobs {
        let index = j.cfg.index;
        match JobRunner::new(j.q, j.cfg, j.bufs, j.progress, stop, j.recovery) {
            Ok(r) => active.push(r),
            Err(e) => out.push((index, Err(e))),
        }
    }
    // The jobs of one run share their options.
    let mut spin = IdleSpin::new(active.first().map_or(SPIN_TIME, |r| r.idle_spin()));
    let mut next_wait = 0usize;
    while !active.is_empty() {
        let mut busy = false;
        let mut i = 0;
        while let Some(r) = active.get_mut(i) {
            match r.step() {
                Step::Done => {
                    // Order does not matter to the report (it sorts by index); removal
                    // happens once per job.
                    let r = active.remove(i);
                    out.push((r.index(), Ok(r.finish())));
                    busy = true;
                }
                Step::Busy => {
                    busy = true;
                    i += 1;
                }
                Step::Idle => i += 1,
            }
        }
        if busy {
            spin.busy();
            continue;
        }
        if spin.idle() && !wait_all(&active, WAIT_ALL) {
            let n = active.len().max(1);
            let slice = (WAIT_SLICE / u32::try_from(n).unwrap_or(u32::MAX)).max(MIN_WAIT_SLICE);
            next_wait = (next_wait + 1) % n;
            if let Some(r) = active.get_mut(next_wait) {
                r.wait(slice);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::time::Instant;

    use nix::poll::PollFlags;

    use nvmf_common::types::{Cid, Nsid, Qid};
    use nvmf_common::wire::status::Status;
    use nvmf_verbs::DmaBuffer;

    use super::*;
    use crate::command::SqeBytes;
    use crate::perf::parse::Rw;
    use crate::perf::verify::VerifyAlg;
    use crate::queue::{Completion, Queue};
    use crate::transport::{DataDir, WaitOn};

    /// How long the slow queue holds its commands.
    const HOLD: Duration = Duration::from_millis(300);
    const DEPTH: u32 = 8;

    /// A queue that answers every command with success: at the next poll, or (slow)
    /// only once `HOLD` has passed since the first submit.
    struct MockQueue {
        qid: u16,
        slow: bool,
        first: Option<Instant>,
        held: Vec<u64>,
        /// What `wait_on` offers: a socket, or nothing (the queue can only wait alone).
        fd: Option<UnixStream>,
    }

    impl MockQueue {
        fn new(qid: u16, slow: bool, fd: Option<UnixStream>) -> MockQueue {
            MockQueue {
                qid,
                slow,
                first: None,
                held: Vec::new(),
                fd,
            }
        }
    }

    impl IoQueue for MockQueue {
        fn qid(&self) -> Qid {
            Qid(self.qid)
        }
        fn is_broken(&self) -> bool {
            false
        }
        fn submit_at(
            &mut self,
            _sqe: SqeBytes,
            _data: Option<&IoBuf>,
            _dir: DataDir,
            tag: u64,
            now: Instant,
        ) -> Result<(), Error> {
            self.first.get_or_insert(now);
            self.held.push(tag);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Error> {
            if self.slow && self.first.is_none_or(|t| t.elapsed() < HOLD) {
                return Ok(0);
            }
            let n = self.held.len();
            out.extend(self.held.drain(..).map(|tag| Completion {
                tag,
                cid: Cid(0),
                status: Status::SUCCESS,
                dw0: 0,
                dw1: 0,
                sqhd: 0,
            }));
            Ok(n)
        }
        fn wait(&mut self, timeout: Duration) {
            std::thread::sleep(timeout);
        }
        fn wait_on(&self) -> WaitOn<'_> {
            match &self.fd {
                Some(s) => WaitOn::Fd(s.as_fd(), PollFlags::POLLIN),
                None => WaitOn::Opaque,
            }
        }
        fn expire(&mut self, _now: Instant) {}
        fn install(&mut self, _q: Queue) -> Result<(), Error> {
            Err(Error::InvalidArgument("mock".into()))
        }
    }

    fn config(index: u32, end: Instant) -> JobConfig {
        JobConfig {
            index,
            rw: Rw::RandRead,
            rwmixread: 100,
            nsid: Nsid(1),
            block_size: 512,
            min_blocks: 8,
            max_blocks: 8,
            region_start: u64::from(index) * 8 * 1024,
            units: 1024,
            iodepth: DEPTH,
            idle_spin: SPIN_TIME,
            one_pass: false,
            verify: false,
            verify_alg: VerifyAlg::default(),
            seed: 1,
            ramp_end: Instant::now(),
            end: Some(end),
        }
    }

    /// One thread, two jobs: the job whose queue answers nothing for 300 ms does not
    /// hold up the other, which completes I/O all along.
    #[test]
    fn a_job_with_nothing_to_reap_does_not_block_the_other() {
        let _serial = crate::perf::tests::spinning();
        let end = Instant::now() + HOLD / 2;
        let cfgs = [config(0, end), config(1, end)];
        let bufs = buffers();
        let progress = [JobProgress::default(), JobProgress::default()];
        let stop = AtomicBool::new(false);
        let mut slow = MockQueue::new(1, true, None);
        let mut fast = MockQueue::new(2, false, None);
        let [c0, c1] = &cfgs;
        let [p0, p1] = &progress;
        let jobs = vec![
            JobInput {
                q: &mut slow,
                cfg: c0,
                bufs: &bufs,
                progress: p0,
                recovery: None,
            },
            JobInput {
                q: &mut fast,
                cfg: c1,
                bufs: &bufs,
                progress: p1,
                recovery: None,
            },
        ];
        let t0 = Instant::now();
        let mut out = poll_jobs(None, jobs, &stop);
        assert!(t0.elapsed() >= HOLD, "the slow job's commands came back");
        out.sort_by_key(|(i, _)| *i);
        let ios: Vec<u64> = out
            .iter()
            .map(|(_, r)| r.as_ref().map(|o| o.read.ios).unwrap())
            .collect();
        assert_eq!(ios.first(), Some(&u64::from(DEPTH)), "one batch, held");
        assert!(
            ios.get(1).is_some_and(|&n| n > 10 * u64::from(DEPTH)),
            "the other job went on meanwhile: {ios:?}"
        );
        assert!(out.iter().all(|(_, r)| r.as_ref().unwrap().errors == 0));
    }

    fn buffers() -> Vec<IoBuf> {
        (0..DEPTH)
            .map(|_| IoBuf {
                buf: Arc::new(DmaBuffer::new(4096).unwrap()),
                mr: None,
                offset: 0,
                len: 4096,
            })
            .collect()
    }

    /// A thread whose queues all offer a socket blocks on all of them in one call: until
    /// its timeout when none has anything, at once when any one is readable; a queue
    /// that offers none makes it wait queue by queue instead (`false`, without blocking).
    #[test]
    fn an_idle_thread_blocks_on_all_its_queues_at_once() {
        let end = Instant::now() + Duration::from_secs(60);
        let cfgs = [config(0, end), config(1, end), config(2, end)];
        let bufs = buffers();
        let progress = [
            JobProgress::default(),
            JobProgress::default(),
            JobProgress::default(),
        ];
        let stop = AtomicBool::new(false);
        let pairs: Vec<(UnixStream, UnixStream)> =
            (0..3).map(|_| UnixStream::pair().unwrap()).collect();
        let mut queues: Vec<MockQueue> = pairs
            .iter()
            .zip(1u16..)
            .map(|((ours, _), qid)| MockQueue::new(qid, false, Some(ours.try_clone().unwrap())))
            .collect();
        let runners: Vec<JobRunner<'_, MockQueue>> = queues
            .iter_mut()
            .zip(cfgs.iter().zip(progress.iter()))
            .map(|(q, (c, p))| JobRunner::new(q, c, &bufs, p, &stop, None).unwrap())
            .collect();

        let t0 = Instant::now();
        assert!(wait_all(&runners, WAIT_ALL));
        assert!(
            t0.elapsed() >= WAIT_ALL,
            "nothing was readable: the whole timeout"
        );

        // The last queue's peer answers: the block ends long before its (long) timeout.
        let long = Duration::from_secs(30);
        pairs
            .last()
            .unwrap()
            .1
            .try_clone()
            .unwrap()
            .write_all(&[1])
            .unwrap();
        let t0 = Instant::now();
        assert!(wait_all(&runners, long));
        assert!(t0.elapsed() < long / 2, "woken by the readable socket");
        drop(runners);

        let mut opaque = MockQueue::new(9, false, None);
        let mut with_fd = MockQueue::new(10, false, Some(pairs[0].0.try_clone().unwrap()));
        let runners = vec![
            JobRunner::new(&mut with_fd, &cfgs[0], &bufs, &progress[0], &stop, None).unwrap(),
            JobRunner::new(&mut opaque, &cfgs[1], &bufs, &progress[1], &stop, None).unwrap(),
        ];
        let t0 = Instant::now();
        assert!(!wait_all(&runners, long), "one queue can only wait alone");
        assert!(t0.elapsed() < long / 2, "and nothing blocked");
    }
}
