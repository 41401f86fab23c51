//! Replacement I/O queues after a lost connection, for work spread over threads.
//!
//! Owned by the host library. `perf` jobs and `map` workers each drive one I/O queue
//! on their own thread. When a queue breaks (the connection died, a command timed
//! out, the target broke the protocol), the thread hands its in-flight commands to
//! its retry policy and asks a [`Requeue`] for a new queue. [`SharedSession`] is the
//! one behind the CLI: the first thread to report a loss reconnects the controller
//! (with the [`Session`]'s back-off, bounded by `ctrl_loss_tmo`), and every thread,
//! then or later, takes its own queue of the new controller. Each queue comes with a
//! generation number, so a thread reporting the loss of an older controller's queue
//! does not tear down the new one.

use parking_lot::Mutex;

use crate::error::Error;
use crate::queue::Queue;
use crate::reconnect::{RetryPolicy, Session};

/// Reconnects in a row after which a worker that completed nothing in between gives
/// up: a target that accepts the connection and then breaks it at once would
/// otherwise be reconnected to forever.
pub const MAX_FRUITLESS_RECONNECTS: u32 = 8;

/// A queue's generation: which incarnation of the controller it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Generation(pub u64);

/// Where a thread gets a new I/O queue when its queue broke.
pub trait Requeue: Sync {
    /// What to do with commands that were in flight when a queue broke.
    fn retry_policy(&self) -> RetryPolicy;

    /// Worker `index` lost its queue of generation `lost`. Returns that worker's queue
    /// on a live controller and its generation, reconnecting first when no newer
    /// controller exists. Blocks while reconnecting; fails when the controller stays
    /// lost past `ctrl_loss_tmo` (then every later call fails at once).
    fn replace(&self, index: usize, lost: Generation) -> Result<(Queue, Generation), Error>;
}

/// How one worker gets a new queue when its queue breaks.
#[derive(Clone, Copy)]
pub struct Recovery<'a> {
    pub source: &'a dyn Requeue,
    /// The worker's index among the source's queues.
    pub index: usize,
}

impl Recovery<'_> {
    /// Whether commands in flight on a broken queue are retried (else they fail).
    pub fn retries(&self) -> bool {
        self.source.retry_policy() == RetryPolicy::Retry
    }
}

struct Inner {
    session: Session,
    generation: Generation,
    /// The current controller's I/O queues not yet handed out, by worker index.
    spare: Vec<Option<Queue>>,
}

/// A [`Session`] shared by the threads that each drive one of its I/O queues.
pub struct SharedSession {
    inner: Mutex<Inner>,
    retry: RetryPolicy,
}

impl SharedSession {
    /// Takes the session's current I/O queues (generation 0) for the caller to hand
    /// to its workers, index by index.
    pub fn new(mut session: Session) -> Result<(SharedSession, Vec<Queue>), Error> {
        let retry = session.policy().retry;
        let queues = session.controller()?.take_io_queues();
        let shared = SharedSession {
            inner: Mutex::new(Inner {
                session,
                generation: Generation::default(),
                spare: Vec::new(),
            }),
            retry,
        };
        Ok((shared, queues))
    }

    /// How many times the controller was re-established.
    pub fn reconnects(&self) -> u32 {
        self.inner.lock().session.reconnects()
    }

    /// Gives the session back (for an orderly shutdown of its controller).
    pub fn into_session(self) -> Session {
        self.inner.into_inner().session
    }
}

impl Requeue for SharedSession {
    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    fn replace(&self, index: usize, lost: Generation) -> Result<(Queue, Generation), Error> {
        let mut g = self.inner.lock();
        if g.generation <= lost {
            // This worker is the first to see the loss of the current controller.
            g.spare.clear();
            let queues = g.session.reconnect()?.take_io_queues();
            g.spare = queues.into_iter().map(Some).collect();
            g.generation = Generation(lost.0.saturating_add(1));
        }
        let generation = g.generation;
        let q = g
            .spare
            .get_mut(index)
            .and_then(Option::take)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "the reconnected controller has no I/O queue for worker {index}"
                ))
            })?;
        Ok((q, generation))
    }
}
