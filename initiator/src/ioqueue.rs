//! What an I/O loop (a `perf` job) drives: one [`Queue`], or one worker's queues over
//! several paths ([`crate::multipath::PathQueues`]), behind the same calls.

use std::time::{Duration, Instant};

use nvmf_common::types::Qid;

use crate::command::SqeBytes;
use crate::error::Error;
use crate::queue::{CommandAges, Completion, Queue};
use crate::transport::{DataDir, IoBuf, WaitOn};

/// Commands completed through one path (multipath), for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathIos {
    /// The path's index (connection order).
    pub path: usize,
    /// Its address, as the fabric names it.
    pub name: String,
    pub ios: u64,
}

/// A submission queue and its completions, as an I/O loop uses them.
pub trait IoQueue: Send {
    /// The queue id reported for this loop.
    fn qid(&self) -> Qid;
    /// Whether the queue is gone (only a replacement helps).
    fn is_broken(&self) -> bool;
    /// Queues a command with the caller's clock reading; `tag` comes back in its
    /// completion. [`Error::QueueFull`] when no command id is free.
    fn submit_at(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
        now: Instant,
    ) -> Result<(), Error>;
    fn flush(&mut self) -> Result<(), Error>;
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Error>;
    fn wait(&mut self, timeout: Duration);
    /// What [`IoQueue::wait`] would block on, for a thread that blocks on several
    /// queues at once ([`WaitOn::Opaque`] unless the queue can tell).
    fn wait_on(&self) -> WaitOn<'_> {
        WaitOn::Opaque
    }
    /// Clock-driven work (command timeouts; paths rejoining).
    fn expire(&mut self, now: Instant);
    /// Takes a replacement after [`IoQueue::is_broken`] (a reconnected controller's
    /// queue).
    fn install(&mut self, q: Queue) -> Result<(), Error>;
    /// Per-path counts, where there are several paths.
    fn path_ios(&self) -> Vec<PathIos> {
        Vec::new()
    }
    /// What the stuck-command scans (in [`IoQueue::expire`]) saw since the last call:
    /// commands reported as stuck, the greatest age of an outstanding command.
    fn take_command_ages(&mut self) -> CommandAges {
        CommandAges::default()
    }
}

impl IoQueue for Queue {
    fn qid(&self) -> Qid {
        Queue::qid(self)
    }

    fn is_broken(&self) -> bool {
        Queue::is_broken(self)
    }

    fn submit_at(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
        now: Instant,
    ) -> Result<(), Error> {
        Queue::submit_at(self, sqe, data, dir, tag, now).map(drop)
    }

    fn flush(&mut self) -> Result<(), Error> {
        Queue::flush(self)
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Error> {
        Queue::poll(self, out)
    }

    fn wait(&mut self, timeout: Duration) {
        Queue::wait(self, timeout)
    }

    fn wait_on(&self) -> WaitOn<'_> {
        Queue::wait_on(self)
    }

    fn expire(&mut self, now: Instant) {
        let _ = Queue::expire(self, now);
    }

    fn install(&mut self, q: Queue) -> Result<(), Error> {
        *self = q;
        Ok(())
    }

    fn take_command_ages(&mut self) -> CommandAges {
        Queue::take_command_ages(self)
    }
}
