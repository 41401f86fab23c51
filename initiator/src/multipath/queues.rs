//! One I/O thread's side of multipath: its queue on each path, the path each command
//! takes, and the commands that must go down another path.
//!
//! Every command in flight is kept here (its SQE, its buffer, its direction) until it
//! completes, so a command whose path fails is sent again, with the same tag, down
//! another path: the thread above sees one completion per command, as with one queue.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use nvmf_common::types::{Cid, Qid};
use nvmf_common::wire::status::{path, Sct, Status};

use super::{IoPolicy, PathSet, PathState};
use crate::command::SqeBytes;
use crate::error::Error;
use crate::ioqueue::{IoQueue, PathIos};
use crate::queue::{CommandAges, Completion, Queue};
use crate::transport::{DataDir, IoBuf};

/// The status of a command that no path could carry within `ctrl-loss-tmo` (Linux:
/// `NVME_SC_HOST_PATH_ERROR`).
const NO_PATH_STATUS: Status = Status::dnr(Sct::PathRelated, path::HOST_PATHING_ERROR);

/// A command in flight, as submitted.
struct Held {
    sqe: SqeBytes,
    data: Option<IoBuf>,
    dir: DataDir,
    /// The path it was sent down; None while it waits for one.
    path: Option<usize>,
}

/// One thread's queues over a [`PathSet`].
pub struct PathQueues {
    set: Arc<PathSet>,
    worker: usize,
    policy: IoPolicy,
    /// This thread's queue on each path, with the generation of its controller.
    queues: Vec<Option<(Queue, u64)>>,
    /// Paths with commands submitted since the last flush.
    dirty: Vec<bool>,
    /// Commands completed through each path.
    ios: Vec<u64>,
    /// The last path round-robin chose.
    rr: usize,
    /// Commands in flight or waiting, by tag.
    held: Vec<Option<Held>>,
    /// Tags waiting for a path.
    waiting: VecDeque<u64>,
    /// Since when no path could be used (while commands wait).
    no_path_since: Option<Instant>,
    /// Completions made here (commands no path could carry).
    failed: Vec<Completion>,
    scratch: Vec<Completion>,
    qid: Qid,
    /// What the stuck-command scans saw on queues since dropped (lost paths).
    retired_ages: CommandAges,
}

impl PathQueues {
    /// Thread `worker`'s queues: its queue of every path connected now (the others
    /// join when they connect).
    pub fn new(set: Arc<PathSet>, worker: usize, policy: IoPolicy) -> PathQueues {
        let n = set.len();
        let mut queues: Vec<Option<(Queue, u64)>> = (0..n).map(|_| None).collect();
        for (i, slot) in queues.iter_mut().enumerate() {
            *slot = set.take(i, worker, 0);
        }
        let qid = queues
            .iter()
            .flatten()
            .map(|(q, _)| q.qid())
            .next()
            .unwrap_or(Qid(0));
        PathQueues {
            set,
            worker,
            policy,
            queues,
            dirty: vec![false; n],
            ios: vec![0; n],
            rr: n.saturating_sub(1),
            held: Vec::new(),
            waiting: VecDeque::new(),
            no_path_since: None,
            failed: Vec::new(),
            scratch: Vec::new(),
            qid,
            retired_ages: CommandAges::default(),
        }
    }

    fn live(&self, i: usize) -> bool {
        self.queues
            .get(i)
            .is_some_and(|q| q.as_ref().is_some_and(|(q, _)| !q.is_broken()))
    }

    /// The path for the next command, per the policy, among the best usable ones.
    fn pick(&mut self) -> Option<usize> {
        let n = self.queues.len();
        let best = (0..n)
            .filter(|&i| self.live(i))
            .map(|i| self.set.state(i))
            .max()
            .filter(|s| *s != PathState::Unusable)?;
        let ok = |me: &PathQueues, i: usize| me.live(i) && me.set.state(i) == best;
        let chosen = match self.policy {
            IoPolicy::Numa => (0..n).find(|&i| ok(self, i)),
            IoPolicy::RoundRobin => (1..=n).map(|k| (self.rr + k) % n).find(|&i| ok(self, i)),
            IoPolicy::QueueDepth => (0..n).filter(|&i| ok(self, i)).min_by_key(|&i| {
                self.set
                    .paths
                    .get(i)
                    .map_or(usize::MAX, |p| p.outstanding.load(Ordering::Relaxed))
            }),
        }?;
        self.rr = chosen;
        Some(chosen)
    }

    /// Sends held command `tag` down path `i`. `Ok(false)`: that queue is full.
    fn send(&mut self, i: usize, tag: u64, now: Instant) -> Result<bool, Error> {
        let Some(Some(h)) = self.held.get_mut(tag as usize) else {
            return Ok(true);
        };
        let Some(Some((q, _))) = self.queues.get_mut(i) else {
            return Ok(false);
        };
        match q.submit_at(h.sqe, h.data.as_ref(), h.dir, tag, now) {
            Ok(_) => {
                h.path = Some(i);
                if let Some(d) = self.dirty.get_mut(i) {
                    *d = true;
                }
                if let Some(p) = self.set.paths.get(i) {
                    p.outstanding.fetch_add(1, Ordering::Relaxed);
                }
                Ok(true)
            }
            Err(Error::QueueFull) => Ok(false),
            Err(e) => {
                warn!(path = i, "multipath: submit failed: {e}");
                self.waiting.push_back(tag);
                self.path_lost(i);
                Ok(true)
            }
        }
    }

    /// This thread's queue of path `i` failed: the path is reported lost and the
    /// commands in flight on it wait for another.
    fn path_lost(&mut self, i: usize) {
        if let Some(slot) = self.queues.get_mut(i) {
            if let Some((mut q, generation)) = slot.take() {
                self.retired_ages.merge(q.take_command_ages());
                drop(q);
                self.set.lost(i, generation);
            }
        }
        for (tag, h) in self.held.iter_mut().enumerate() {
            if let Some(h) = h.as_mut().filter(|h| h.path == Some(i)) {
                h.path = None;
                self.waiting.push_back(tag as u64);
                if let Some(p) = self.set.paths.get(i) {
                    p.outstanding.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sends the waiting commands down usable paths; fails them when none has been
    /// usable for `ctrl-loss-tmo`.
    fn resubmit(&mut self, now: Instant) {
        while let Some(&tag) = self.waiting.front() {
            let Some(i) = self.pick() else {
                let since = *self.no_path_since.get_or_insert(now);
                let tmo = self.set.policy.ctrl_loss_tmo;
                if tmo.is_some_and(|t| now.saturating_duration_since(since) >= t) {
                    warn!(
                        waiting = self.waiting.len(),
                        "multipath: no usable path within ctrl-loss-tmo"
                    );
                    while let Some(tag) = self.waiting.pop_front() {
                        if let Some(slot) = self.held.get_mut(tag as usize) {
                            *slot = None;
                        }
                        self.failed.push(Completion {
                            tag,
                            cid: Cid(0),
                            status: NO_PATH_STATUS,
                            dw0: 0,
                            dw1: 0,
                            sqhd: 0,
                        });
                    }
                }
                return;
            };
            self.no_path_since = None;
            match self.send(i, tag, now) {
                Ok(true) => {
                    self.waiting.pop_front();
                }
                Ok(false) | Err(_) => break,
            }
        }
        let _ = self.flush_dirty();
    }

    fn flush_dirty(&mut self) -> Result<(), Error> {
        let mut broken = Vec::new();
        for (i, d) in self.dirty.iter_mut().enumerate() {
            if std::mem::take(d) {
                if let Some(Some((q, _))) = self.queues.get_mut(i) {
                    if q.flush().is_err() {
                        broken.push(i);
                    }
                }
            }
        }
        for i in broken {
            self.path_lost(i);
        }
        Ok(())
    }

    /// A completion from path `i`: final, or the command goes down another path.
    /// True when the path itself failed (it timed the command out).
    fn complete(&mut self, c: Completion, i: usize, out: &mut Vec<Completion>) -> bool {
        let Some(slot) = self.held.get_mut(c.tag as usize) else {
            return false;
        };
        if slot.as_ref().map(|h| h.path) != Some(Some(i)) {
            return false; // already moved to another path
        }
        if let Some(p) = self.set.paths.get(i) {
            p.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
        if c.is_host_timeout() {
            // The path does not answer: give it up and send the command elsewhere.
            if let Some(h) = slot.as_mut() {
                h.path = None;
            }
            self.waiting.push_back(c.tag);
            return true;
        }
        if c.status.sct == Sct::PathRelated && !c.status.dnr {
            // ANA inaccessible, persistent loss, change...: another path may serve it.
            if let Some(h) = slot.as_mut() {
                h.path = None;
            }
            self.set.mark_unusable(i);
            self.waiting.push_back(c.tag);
            return false;
        }
        *slot = None;
        if let Some(n) = self.ios.get_mut(i) {
            *n += 1;
        }
        out.push(c);
        false
    }
}

impl Drop for PathQueues {
    /// The queues go back to the set for the next run on it.
    fn drop(&mut self) {
        for (i, slot) in self.queues.iter_mut().enumerate() {
            if let Some((q, generation)) = slot.take() {
                self.set.give_back(i, self.worker, q, generation);
            }
        }
    }
}

impl IoQueue for PathQueues {
    fn qid(&self) -> Qid {
        self.qid
    }

    /// Never: a lost path is replaced in the background, and commands that no path
    /// can carry complete with an error.
    fn is_broken(&self) -> bool {
        false
    }

    fn submit_at(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
        now: Instant,
    ) -> Result<(), Error> {
        let t = usize::try_from(tag).map_err(|_| Error::InvalidArgument("tag".into()))?;
        if self.held.len() <= t {
            self.held.resize_with(t + 1, || None);
        }
        if let Some(slot) = self.held.get_mut(t) {
            *slot = Some(Held {
                sqe,
                data: data.cloned(),
                dir,
                path: None,
            });
        }
        let Some(i) = self.pick() else {
            self.waiting.push_back(tag);
            return Ok(());
        };
        if self.send(i, tag, now)? {
            Ok(())
        } else {
            if let Some(slot) = self.held.get_mut(t) {
                *slot = None;
            }
            Err(Error::QueueFull)
        }
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.flush_dirty()
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Error> {
        let before = out.len();
        for i in 0..self.queues.len() {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let (r, broken) = match self.queues.get_mut(i) {
                Some(Some((q, _))) => {
                    let r = q.poll(&mut scratch);
                    (r, q.is_broken())
                }
                _ => {
                    self.scratch = scratch;
                    continue;
                }
            };
            let mut lost = r.is_err() || broken;
            for c in scratch.drain(..) {
                lost |= self.complete(c, i, out);
            }
            self.scratch = scratch;
            if lost {
                self.path_lost(i);
            }
        }
        if !self.waiting.is_empty() {
            self.resubmit(Instant::now());
        }
        out.append(&mut self.failed);
        Ok(out.len() - before)
    }

    fn wait(&mut self, timeout: Duration) {
        let busy: Vec<usize> = (0..self.queues.len())
            .filter(|&i| self.held.iter().flatten().any(|h| h.path == Some(i)))
            .collect();
        if busy.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        let slice = timeout / busy.len() as u32;
        for i in busy {
            if let Some(Some((q, _))) = self.queues.get_mut(i) {
                q.wait(slice);
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        for q in self.queues.iter_mut().flatten() {
            let _ = q.0.expire(now);
        }
        // A path this thread has no queue on rejoins once it has a controller again
        // (its spare queues were dropped with the lost one).
        for i in 0..self.queues.len() {
            if !matches!(self.queues.get(i), Some(None)) {
                continue;
            }
            if let Some((q, generation)) = self.set.take(i, self.worker, 0) {
                info!(
                    path = i,
                    worker = self.worker,
                    generation,
                    "multipath: path back in use"
                );
                if let Some(slot) = self.queues.get_mut(i) {
                    *slot = Some((q, generation));
                }
            }
        }
        if !self.waiting.is_empty() {
            self.resubmit(now);
        }
    }

    fn install(&mut self, _q: Queue) -> Result<(), Error> {
        Err(Error::InvalidArgument(
            "multipath queues replace lost paths themselves".into(),
        ))
    }

    fn take_command_ages(&mut self) -> CommandAges {
        let mut ages = std::mem::take(&mut self.retired_ages);
        for (q, _) in self.queues.iter_mut().flatten() {
            ages.merge(q.take_command_ages());
        }
        ages
    }

    fn path_ios(&self) -> Vec<PathIos> {
        self.set
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| PathIos {
                path: i,
                name: p.name.clone(),
                ios: self.ios.get(i).copied().unwrap_or(0),
            })
            .collect()
    }
}
