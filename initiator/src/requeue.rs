//! Replacement I/O queues after a lost connection, for work spread over threads.
//!
//! Owned by the host library. `perf` jobs and `map` workers each drive one I/O queue
//! on their own thread. When a queue breaks (the connection died, a command timed
//! out, the target broke the protocol), the thread hands its in-flight commands to
//! its retry policy and asks a [`Requeue`] for a new queue. [`SharedSession`] is the
//! one behind the CLI: the first thread to report a loss starts reconnecting the
//! controller on a thread of its own (with the [`Session`]'s back-off, bounded by
//! `ctrl_loss_tmo`), and every thread, then or later, takes its own queue of the new
//! controller. Each queue comes with a generation number, so a thread reporting the
//! loss of an older controller's queue does not tear down the new one. With a
//! `fast_io_fail_tmo`, a thread that asks after that long since the loss gets
//! [`Error::Reconnecting`] (after a short wait) instead of waiting, so its I/O fails
//! fast while reconnecting goes on, as with the Linux host.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tracing::warn;

use crate::error::Error;
use crate::queue::Queue;
use crate::reconnect::{RetryPolicy, Session};

/// Longest a thread waits for a reconnect once `fast_io_fail_tmo` has passed (how
/// late a new request may be failed).
const FAST_FAIL_POLL: Duration = Duration::from_millis(100);

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
    /// `None` while the reconnect thread holds it.
    session: Option<Session>,
    generation: Generation,
    /// The current controller's I/O queues not yet handed out, by worker index.
    spare: Vec<Option<Queue>>,
    /// When the current controller was lost (while reconnecting).
    lost_at: Option<Instant>,
    /// Why reconnecting gave up (`ctrl_loss_tmo`); every later call fails with it.
    failed: Option<String>,
    reconnects: u32,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Signalled when a reconnect ends, either way.
    done: Condvar,
}

/// A [`Session`] shared by the threads that each drive one of its I/O queues.
pub struct SharedSession {
    shared: Arc<Shared>,
    retry: RetryPolicy,
    fast_io_fail: Option<Duration>,
}

impl SharedSession {
    /// Takes the session's current I/O queues (generation 0) for the caller to hand
    /// to its workers, index by index.
    pub fn new(mut session: Session) -> Result<(SharedSession, Vec<Queue>), Error> {
        let retry = session.policy().retry;
        let queues = session.controller()?.take_io_queues();
        let reconnects = session.reconnects();
        let shared = SharedSession {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    session: Some(session),
                    generation: Generation::default(),
                    spare: Vec::new(),
                    lost_at: None,
                    failed: None,
                    reconnects,
                    thread: None,
                }),
                done: Condvar::new(),
            }),
            retry,
            fast_io_fail: None,
        };
        Ok((shared, queues))
    }

    /// Fails I/O fast once the controller has been reconnecting this long (`None`:
    /// I/O waits up to `ctrl_loss_tmo`, the default, as nvme-cli's `-1`).
    pub fn with_fast_io_fail(mut self, after: Option<Duration>) -> SharedSession {
        self.fast_io_fail = after;
        self
    }

    /// How many times the controller was re-established.
    pub fn reconnects(&self) -> u32 {
        self.shared.inner.lock().reconnects
    }

    /// Gives the session back (for an orderly shutdown of its controller), after a
    /// reconnect in progress has ended.
    pub fn into_session(self) -> Result<Session, Error> {
        let thread = self.shared.inner.lock().thread.take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        // Only the reconnect thread takes it, and it was joined above: it is missing
        // only if that thread panicked.
        self.shared
            .inner
            .lock()
            .session
            .take()
            .ok_or_else(|| Error::Protocol("the reconnect thread ended without the session".into()))
    }

    /// Starts reconnecting on a thread of its own (the caller holds the lock and saw
    /// the loss of the current generation).
    fn start_reconnect(&self, g: &mut Inner, lost: Generation) -> Result<(), Error> {
        let Some(mut session) = g.session.take() else {
            return Ok(());
        };
        g.spare.clear();
        g.lost_at = Some(Instant::now());
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("nvmf-reconnect".into())
            .spawn(move || {
                let r = session.reconnect().map(|c| c.take_io_queues());
                let mut g = shared.inner.lock();
                g.reconnects = session.reconnects();
                g.session = Some(session);
                g.lost_at = None;
                match r {
                    Ok(queues) => {
                        g.spare = queues.into_iter().map(Some).collect();
                        g.generation = Generation(lost.0.saturating_add(1));
                    }
                    Err(e) => {
                        warn!("reconnecting gave up: {e}");
                        g.failed = Some(e.to_string());
                    }
                }
                shared.done.notify_all();
            });
        match spawned {
            Ok(t) => {
                g.thread = Some(t);
                Ok(())
            }
            Err(e) => Err(Error::Io(e)),
        }
    }
}

impl Requeue for SharedSession {
    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    fn replace(&self, index: usize, lost: Generation) -> Result<(Queue, Generation), Error> {
        let mut g = self.shared.inner.lock();
        if g.generation <= lost && g.failed.is_none() && g.session.is_some() {
            // This worker is the first to see the loss of the current controller.
            if let Some(t) = g.thread.take() {
                // The previous reconnect's thread gave the session back: it has ended.
                let _ = t.join();
            }
            self.start_reconnect(&mut g, lost)?;
        }
        loop {
            if let Some(why) = &g.failed {
                return Err(Error::Timeout(why.clone()));
            }
            if g.generation > lost {
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
                return Ok((q, generation));
            }
            match (self.fast_io_fail, g.lost_at) {
                (Some(after), Some(at)) => {
                    let deadline = at + after;
                    let now = Instant::now();
                    if now >= deadline {
                        self.shared.done.wait_for(&mut g, FAST_FAIL_POLL);
                        if g.generation <= lost && g.failed.is_none() {
                            return Err(Error::Reconnecting(format!(
                                "lost {:.1} s ago, past fast_io_fail_tmo ({} s)",
                                at.elapsed().as_secs_f64(),
                                after.as_secs()
                            )));
                        }
                    } else {
                        self.shared.done.wait_for(&mut g, deadline - now);
                    }
                }
                _ => self.shared.done.wait(&mut g),
            }
        }
    }
}
