//! One NVMe queue pair as the host drives it: command identifiers, per-command tags
//! and deadlines, completion matching, timeouts, and a blocking `execute` for admin
//! style use.
//!
//! Owned by the host library. [`Queue`] sits on a transport [`HostQueue`], which moves
//! capsules and knows nothing of NVMe semantics. A `Queue` is used by one thread at a
//! time (the admin queue lives behind the controller's mutex; each I/O queue belongs to
//! the thread that took it).
//!
//! Rules this module enforces:
//! - Command ids come from a free list of `0..depth-1`, so at most `depth - 1`
//!   commands are outstanding (the NVMe flow-control rule: a full queue has one empty
//!   slot), and a cid is never handed out while the target may still use it.
//! - A response whose cid is unknown or not outstanding is a protocol error: it is
//!   logged and reported as [`Error::Protocol`]; it never panics and never completes
//!   another command.
//! - A command that passes its deadline is completed host-side with status
//!   [`TIMEOUT_STATUS`] (Path Related, "Command Aborted By Host", as Linux reports a
//!   command it cancels). Its cid stays reserved until the queue is closed, because the
//!   target may still answer it (such a late answer is logged and dropped), and the
//!   queue is marked broken: the caller should tear the connection down.
//! - Every outstanding command is known with its submit time, so the commands that
//!   take too long can be listed ([`Queue::outstanding_commands`]) and each is
//!   reported once, with a `stuck command` warning, when it passes the queue's stuck
//!   bound ([`Queue::set_stuck_warn`]), well before its timeout. That check runs in the
//!   timeout scan ([`Queue::expire`], and [`Queue::execute`] while it waits), never per
//!   I/O; see `stuck.rs`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use nvmf_common::types::{Cid, Qid};
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{Sct, Status};

use crate::command::SqeBytes;
use crate::error::Error;
use crate::transport::{DataDir, HostQueue, IoBuf, WaitOn};

mod stuck;

pub use crate::transport::CommandPhase;
pub use stuck::{CommandAges, OutstandingCommand};

/// Command Aborted By Host (Linux `NVME_SC_HOST_ABORTED_CMD`): what a timed-out
/// command completes with.
pub const HOST_ABORTED_CMD: u8 = nvmf_common::wire::status::path::COMMAND_ABORTED_BY_HOST;

/// The status a command gets when the host gives up on it (see the module docs).
pub const TIMEOUT_STATUS: Status = Status::dnr(Sct::PathRelated, HOST_ABORTED_CMD);

/// Polls of the transport before [`Queue::execute`] blocks in `wait`: a response on a
/// fast fabric arrives within microseconds, and sleeping costs more than spinning.
const EXECUTE_SPIN_POLLS: u32 = 256;
/// The longest single `wait` in [`Queue::execute`], so its deadline is honoured.
const EXECUTE_WAIT_SLICE: Duration = Duration::from_millis(10);
/// How often [`Queue::execute`] looks for stuck commands while it waits (the I/O loops
/// do it from their own housekeeping, through [`Queue::expire`]).
const EXECUTE_STUCK_SCAN: Duration = Duration::from_millis(100);

/// A completed command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The caller's tag given at submit.
    pub tag: u64,
    pub cid: Cid,
    pub status: Status,
    /// Command specific result, dword 0.
    pub dw0: u32,
    /// Dword 1 (upper half of 64-bit results such as Property Get of CAP).
    pub dw1: u32,
    /// Submission queue head pointer reported by the target.
    pub sqhd: u16,
}

impl Completion {
    /// `dw0 | dw1 << 32`.
    pub fn result_u64(&self) -> u64 {
        u64::from(self.dw0) | (u64::from(self.dw1) << 32)
    }

    /// True when the host gave up on the command (timeout), not the target.
    pub fn is_host_timeout(&self) -> bool {
        self.status.is(TIMEOUT_STATUS.sct, TIMEOUT_STATUS.sc)
    }
}

/// What a command id is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Outstanding,
    /// Timed out host-side; reserved until the queue closes.
    TimedOut,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    tag: u64,
    deadline: Option<Instant>,
    /// When it was submitted (always set while outstanding).
    submitted: Option<Instant>,
    /// Its place in submission order (compared with `Queue::flush_seq`).
    seq: u64,
    /// It was reported as a stuck command (once per command).
    warned: bool,
    opcode: u8,
}

const FREE_SLOT: Slot = Slot {
    state: SlotState::Free,
    tag: 0,
    deadline: None,
    submitted: None,
    seq: 0,
    warned: false,
    opcode: 0,
};

/// A host queue with command id allocation and completion matching.
pub struct Queue {
    t: Box<dyn HostQueue>,
    qid: Qid,
    depth: u16,
    /// Free command ids, used as a stack (recently freed ids are reused first: their
    /// per-slot transport resources are warm in cache).
    free: Vec<u16>,
    /// Indexed by cid; `depth - 1` entries.
    slots: Vec<Slot>,
    outstanding: usize,
    timed_out: usize,
    timeout: Option<Duration>,
    /// Age at which an outstanding command is reported as stuck (None: never).
    stuck_warn: Option<Duration>,
    /// Commands submitted so far, and that count at the last successful flush: a
    /// command whose `seq` is above `flush_seq` has not been handed to the fabric.
    submit_seq: u64,
    flush_seq: u64,
    /// What the stuck-command scans saw on this queue.
    ages: CommandAges,
    /// Raw CQEs from the transport (kept to avoid allocating per poll).
    raw: Vec<[u8; CQE_LEN]>,
    /// Completions already matched but not yet handed to the caller (reaped while
    /// `execute` waited for another command, or synthesised by `expire`).
    pending: VecDeque<Completion>,
    scratch: Vec<Completion>,
    broken: bool,
    closed: bool,
}

impl Queue {
    /// Wraps a connected transport queue. Command ids `0..depth-1` are available.
    pub fn new(t: Box<dyn HostQueue>) -> Queue {
        let qid = t.qid();
        let depth = t.depth();
        let usable = depth.saturating_sub(1);
        // Reverse, so that popping hands out 0, 1, 2, ... first.
        let free: Vec<u16> = (0..usable).rev().collect();
        Queue {
            t,
            qid,
            depth,
            free,
            slots: vec![FREE_SLOT; usize::from(usable)],
            outstanding: 0,
            timed_out: 0,
            timeout: None,
            stuck_warn: None,
            submit_seq: 0,
            flush_seq: 0,
            ages: CommandAges::default(),
            raw: Vec::with_capacity(usize::from(depth)),
            pending: VecDeque::new(),
            scratch: Vec::with_capacity(usize::from(depth)),
            broken: false,
            closed: false,
        }
    }

    pub fn qid(&self) -> Qid {
        self.qid
    }

    /// Queue entries (SQSIZE + 1); at most `depth - 1` commands are outstanding.
    pub fn depth(&self) -> u16 {
        self.depth
    }

    /// The most commands that may be outstanding at once (`depth - 1`).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Commands submitted and not yet completed (timed-out ones excluded).
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Command ids held by timed-out commands.
    pub fn timed_out(&self) -> usize {
        self.timed_out
    }

    /// True after a timeout or protocol error: the connection should be torn down.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Sets the per-command timeout for commands submitted from now on;
    /// `Duration::ZERO` disables timeouts.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = (!timeout.is_zero()).then_some(timeout);
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Queues a command; it is sent at the latest on [`Queue::flush`]. `tag` comes back
    /// in its [`Completion`]. Returns the command id it got, or [`Error::QueueFull`]
    /// when `depth - 1` commands are outstanding (or held by timeouts).
    pub fn submit(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
    ) -> Result<Cid, Error> {
        // Read per command: its age is known even without a timeout (loops that
        // submit in batches use `submit_at` with one reading per batch).
        self.submit_inner(sqe, data, dir, tag, Instant::now())
    }

    /// [`Queue::submit`] with the caller's clock reading, for loops that already read
    /// the clock per batch (the deadline is `now + timeout`).
    pub fn submit_at(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
        now: Instant,
    ) -> Result<Cid, Error> {
        self.submit_inner(sqe, data, dir, tag, now)
    }

    fn submit_inner(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        tag: u64,
        now: Instant,
    ) -> Result<Cid, Error> {
        if self.closed {
            return Err(Error::Transport(crate::transport::TransportError::Dead(
                format!("queue {} is closed", self.qid),
            )));
        }
        let cid = self.free.pop().ok_or(Error::QueueFull)?;
        let mut sqe = sqe;
        let mut s = Sqe::new_unchecked(&mut sqe[..]);
        s.set_cid(cid);
        let opcode = s.opcode();
        let deadline = self.timeout.map(|t| now + t);
        if let Err(e) = self.t.submit(cid, &sqe, data, dir) {
            self.free.push(cid);
            return Err(self.transport_error(e));
        }
        self.submit_seq += 1;
        if let Some(slot) = self.slots.get_mut(usize::from(cid)) {
            *slot = Slot {
                state: SlotState::Outstanding,
                tag,
                deadline,
                submitted: Some(now),
                seq: self.submit_seq,
                warned: false,
                opcode,
            };
        }
        self.outstanding += 1;
        Ok(Cid(cid))
    }

    /// Sends everything submitted since the last flush.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.t.flush().map_err(|e| self.transport_error(e))?;
        self.flush_seq = self.submit_seq;
        Ok(())
    }

    /// A transport error; a dead connection leaves the queue broken (a reconnect is
    /// the only way on), a full queue or a bad argument does not.
    fn transport_error(&mut self, e: crate::transport::TransportError) -> Error {
        if matches!(e, crate::transport::TransportError::Dead(_)) {
            self.broken = true;
        }
        Error::Transport(e)
    }

    /// Appends completions to `out` and returns how many were appended: first those
    /// already matched (see [`Queue::execute`], [`Queue::expire`]), then what the
    /// transport received. A response with an unknown or not outstanding cid yields
    /// [`Error::Protocol`] after the valid ones have been appended.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize, Error> {
        let before = out.len();
        out.extend(self.pending.drain(..));
        self.reap(out)?;
        Ok(out.len() - before)
    }

    /// Receives CQEs from the transport and matches them to outstanding commands.
    fn reap(&mut self, out: &mut Vec<Completion>) -> Result<(), Error> {
        self.raw.clear();
        if let Err(e) = self.t.poll(&mut self.raw) {
            return Err(self.transport_error(e));
        }
        let mut bad: Option<String> = None;
        for raw in &self.raw {
            let c = Cqe::new_unchecked(&raw[..]);
            let cid = c.cid();
            let slot = self.slots.get_mut(usize::from(cid));
            match slot {
                Some(s) if s.state == SlotState::Outstanding => {
                    if s.warned {
                        // Rare (it was reported stuck): the clock is read only then.
                        let age = s.submitted.map(|t| t.elapsed()).unwrap_or_default();
                        info!(qid = %self.qid, cid, opcode = s.opcode, age_ms = age.as_millis() as u64,
                            status = %c.status(), "stuck command completed");
                    }
                    out.push(Completion {
                        tag: s.tag,
                        cid: Cid(cid),
                        status: c.status(),
                        dw0: c.dw0(),
                        dw1: c.dw1(),
                        sqhd: c.sqhd(),
                    });
                    *s = FREE_SLOT;
                    self.free.push(cid);
                    self.outstanding -= 1;
                }
                Some(s) if s.state == SlotState::TimedOut => {
                    // The target answered after we gave up. The cid stays reserved:
                    // the queue is broken and about to be torn down anyway.
                    warn!(qid = %self.qid, cid, status = %c.status(),
                        "late response to a timed-out command, dropped");
                }
                _ => {
                    error!(qid = %self.qid, cid, status = %c.status(),
                        "response for a command id that is not outstanding");
                    self.broken = true;
                    bad.get_or_insert_with(|| {
                        format!(
                            "queue {}: response for command id {cid}, which is not outstanding",
                            self.qid
                        )
                    });
                }
            }
        }
        match bad {
            Some(msg) => Err(Error::Protocol(msg)),
            None => Ok(()),
        }
    }

    /// Blocks until a response may be ready or `timeout` passes (returns at once when
    /// completions are already waiting).
    pub fn wait(&mut self, timeout: Duration) {
        if self.pending.is_empty() {
            self.t.wait(timeout);
        }
    }

    /// What [`Queue::wait`] would block on (see [`WaitOn`]).
    pub fn wait_on(&self) -> WaitOn<'_> {
        if self.pending.is_empty() {
            self.t.wait_on()
        } else {
            WaitOn::Now
        }
    }

    /// Times out every outstanding command whose deadline is before `now`: each is
    /// completed with [`TIMEOUT_STATUS`] (returned by the next [`Queue::poll`]), its
    /// cid stays reserved, and the queue is marked broken. Returns their tags.
    /// Commands that pass the stuck bound on the way are reported (see
    /// [`Queue::set_stuck_warn`]).
    pub fn expire(&mut self, now: Instant) -> Vec<u64> {
        let mut tags = Vec::new();
        let mut scan = stuck::Scan::new(self, now);
        for (cid, s) in self.slots.iter_mut().enumerate() {
            if s.state != SlotState::Outstanding {
                continue;
            }
            if s.deadline.is_none_or(|d| d > now) {
                scan.check(self.t.as_ref(), cid, s);
                continue;
            }
            warn!(qid = %self.qid, cid, opcode = s.opcode, "command timed out");
            s.state = SlotState::TimedOut;
            self.outstanding -= 1;
            self.timed_out += 1;
            self.broken = true;
            tags.push(s.tag);
            self.pending.push_back(Completion {
                tag: s.tag,
                cid: Cid(cid as u16),
                status: TIMEOUT_STATUS,
                dw0: 0,
                dw1: 0,
                sqhd: 0,
            });
        }
        scan.finish(&mut self.ages);
        tags
    }

    /// The earliest deadline among outstanding commands.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::Outstanding)
            .filter_map(|s| s.deadline)
            .min()
    }

    /// Submits one command, flushes, and waits up to `timeout` for its completion
    /// (spinning briefly, then blocking). Completions of other commands that arrive
    /// meanwhile are kept for the next [`Queue::poll`]. On timeout the command's cid
    /// stays reserved, the queue is marked broken, and [`Error::Timeout`] is returned.
    /// The completion's status is returned as is, success or not.
    pub fn execute(
        &mut self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
        timeout: Duration,
    ) -> Result<Completion, Error> {
        let mut all = self.execute_all(&[(sqe, data, dir)], timeout)?;
        all.pop()
            .ok_or_else(|| Error::Protocol("no completion for the command".into()))
    }

    /// [`Queue::execute`] for commands that must be submitted together, back to back
    /// in one flush (a fused pair): their completions in the order given. On timeout
    /// every one still outstanding is timed out.
    pub fn execute_all(
        &mut self,
        cmds: &[(SqeBytes, Option<&IoBuf>, DataDir)],
        timeout: Duration,
    ) -> Result<Vec<Completion>, Error> {
        let what = cmds
            .first()
            .map_or("command", |(sqe, _, _)| crate::command::name(sqe));
        let mut cids = Vec::with_capacity(cmds.len());
        for (sqe, data, dir) in cmds {
            match self.submit(*sqe, *data, *dir, u64::MAX) {
                Ok(cid) => cids.push(cid),
                Err(e) => {
                    // Those already queued are sent; their answers are kept for poll.
                    let _ = self.flush();
                    return Err(e);
                }
            }
        }
        self.flush()?;
        let deadline = Instant::now() + timeout;
        let mut next_stuck_scan = Instant::now() + EXECUTE_STUCK_SCAN;
        let mut spins = 0u32;
        let mut found: Vec<Option<Completion>> = vec![None; cids.len()];
        loop {
            let mut got = std::mem::take(&mut self.scratch);
            got.clear();
            let r = self.reap(&mut got);
            for c in got.drain(..) {
                match cids.iter().position(|&cid| cid == c.cid) {
                    Some(i) if found.get(i).is_some_and(Option::is_none) => {
                        if let Some(f) = found.get_mut(i) {
                            *f = Some(c);
                        }
                    }
                    _ => self.pending.push_back(c),
                }
            }
            self.scratch = got;
            if found.iter().all(Option::is_some) {
                // A protocol error on another response does not undo these completions;
                // the queue is marked broken and the next poll reports nothing more.
                if let Err(e) = r {
                    warn!(qid = %self.qid, error = %e, "while waiting for {what}");
                }
                return Ok(found.into_iter().flatten().collect());
            }
            r?;
            let now = Instant::now();
            if now >= deadline {
                for (cid, f) in cids.iter().zip(&found) {
                    if f.is_none() {
                        self.time_out(*cid);
                    }
                }
                return Err(Error::Timeout(format!(
                    "{what} on queue {} got no response in {timeout:?}",
                    self.qid
                )));
            }
            if now >= next_stuck_scan {
                next_stuck_scan = now + EXECUTE_STUCK_SCAN;
                self.scan_stuck(now);
            }
            spins += 1;
            if spins > EXECUTE_SPIN_POLLS {
                self.t.wait((deadline - now).min(EXECUTE_WAIT_SLICE));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Marks one outstanding command timed out without synthesising a completion
    /// (its caller gets [`Error::Timeout`] instead).
    fn time_out(&mut self, cid: Cid) {
        if let Some(s) = self.slots.get_mut(usize::from(cid.0)) {
            if s.state == SlotState::Outstanding {
                s.state = SlotState::TimedOut;
                self.outstanding -= 1;
                self.timed_out += 1;
                self.broken = true;
            }
        }
    }

    /// Disconnects the transport queue (idempotent). Outstanding commands are lost.
    pub fn close(&mut self) {
        if !self.closed {
            debug!(qid = %self.qid, outstanding = self.outstanding, "closing queue");
            self.closed = true;
            self.t.close();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("qid", &self.qid)
            .field("depth", &self.depth)
            .field("outstanding", &self.outstanding)
            .field("timed_out", &self.timed_out)
            .field("broken", &self.broken)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command;
    use crate::testing::{FakeQueue, Reply};
    use nvmf_common::types::Nsid;
    use nvmf_common::wire::status::generic;

    fn read_sqe() -> SqeBytes {
        command::read(Nsid(1), 0, 1, false).unwrap()
    }

    #[test]
    fn cids_flow_control_and_reuse() {
        let (fq, h) = FakeQueue::new(Qid(1), 4);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        assert_eq!(q.capacity(), 3);
        let mut cids = Vec::new();
        for tag in 0..3 {
            cids.push(q.submit(read_sqe(), None, DataDir::None, tag).unwrap().0);
        }
        assert_eq!(cids, vec![0, 1, 2]);
        // depth - 1 outstanding: the fourth is refused and nothing reaches the wire.
        assert!(matches!(
            q.submit(read_sqe(), None, DataDir::None, 9),
            Err(Error::QueueFull)
        ));
        q.flush().unwrap();
        assert_eq!(h.sent().len(), 3);
        assert_eq!(q.outstanding(), 3);
        // Complete cid 1 only: it becomes the next cid handed out.
        h.complete(1, Status::SUCCESS, 0xAB);
        let mut out = Vec::new();
        assert_eq!(q.poll(&mut out).unwrap(), 1);
        assert_eq!(out[0].tag, 1);
        assert_eq!(out[0].cid, Cid(1));
        assert_eq!(out[0].dw0, 0xAB);
        assert!(out[0].status.is_success());
        assert_eq!(
            q.submit(read_sqe(), None, DataDir::None, 7).unwrap(),
            Cid(1)
        );
        // Every cid on the wire is one the queue owns, and never one outstanding twice.
        let sent: Vec<u16> = h
            .sent()
            .iter()
            .map(|s| Sqe::new_unchecked(&s[..]).cid())
            .collect();
        assert!(sent.iter().all(|&c| c < 3));
    }

    #[test]
    fn unknown_or_duplicate_cid_is_protocol_error() {
        let (fq, h) = FakeQueue::new(Qid(1), 8);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        q.submit(read_sqe(), None, DataDir::None, 5).unwrap();
        q.flush().unwrap();
        h.complete(0, Status::SUCCESS, 0);
        h.complete(0, Status::SUCCESS, 0); // duplicate
        h.complete(6, Status::SUCCESS, 0); // never used
        h.complete(0xFFFF, Status::SUCCESS, 0); // out of range
        let mut out = Vec::new();
        let r = q.poll(&mut out);
        assert!(matches!(r, Err(Error::Protocol(_))));
        // The valid one was still delivered, exactly once.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tag, 5);
        assert!(q.is_broken());
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn timeouts_reserve_the_cid() {
        let (fq, h) = FakeQueue::new(Qid(1), 3);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        q.set_timeout(Duration::from_millis(1));
        q.submit(read_sqe(), None, DataDir::None, 10).unwrap();
        q.set_timeout(Duration::ZERO);
        q.submit(read_sqe(), None, DataDir::None, 11).unwrap();
        q.flush().unwrap();
        let later = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            q.expire(Instant::now() - Duration::from_secs(1)),
            Vec::<u64>::new()
        );
        assert_eq!(q.expire(later), vec![10]);
        assert!(q.is_broken());
        assert_eq!((q.outstanding(), q.timed_out()), (1, 1));
        let mut out = Vec::new();
        q.poll(&mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tag, 10);
        assert!(out[0].is_host_timeout());
        assert_eq!(out[0].status, TIMEOUT_STATUS);
        // The late answer is dropped, not an error, and cid 0 stays reserved.
        h.complete(0, Status::SUCCESS, 0);
        out.clear();
        assert_eq!(q.poll(&mut out).unwrap(), 0);
        h.complete(1, Status::SUCCESS, 0);
        assert_eq!(q.poll(&mut out).unwrap(), 1);
        assert_eq!(
            q.submit(read_sqe(), None, DataDir::None, 12).unwrap(),
            Cid(1)
        );
        assert!(matches!(
            q.submit(read_sqe(), None, DataDir::None, 13),
            Err(Error::QueueFull)
        ));
    }

    #[test]
    fn submit_at_uses_the_callers_clock() {
        let (fq, h) = FakeQueue::new(Qid(1), 8);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        q.set_timeout(Duration::from_secs(10));
        let t0 = Instant::now();
        q.submit_at(read_sqe(), None, DataDir::None, 1, t0).unwrap();
        q.submit_at(
            read_sqe(),
            None,
            DataDir::None,
            2,
            t0 + Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(q.expire(t0 + Duration::from_secs(11)), vec![1]);
        assert_eq!(q.outstanding(), 1);
    }

    #[test]
    fn execute_keeps_other_completions() {
        let (fq, h) = FakeQueue::new(Qid(0), 8);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        q.submit(read_sqe(), None, DataDir::None, 100).unwrap(); // cid 0
        q.flush().unwrap();
        // The fake answers cid 0 first, then the executed command (cid 1).
        h.complete(0, Status::SUCCESS, 1);
        h.set_auto_reply(true);
        h.set_reply(Reply {
            status: Status::generic_dnr(generic::INVALID_FIELD),
            dw0: 0x55,
            dw1: 0,
        });
        let c = q
            .execute(
                command::keep_alive(),
                None,
                DataDir::None,
                Duration::from_secs(5),
            )
            .unwrap();
        assert_eq!(c.cid, Cid(1));
        assert_eq!(c.dw0, 0x55);
        assert!(c.status.is(Sct::Generic, generic::INVALID_FIELD));
        let mut out = Vec::new();
        assert_eq!(q.poll(&mut out).unwrap(), 1);
        assert_eq!((out[0].tag, out[0].dw0), (100, 1));
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn execute_times_out() {
        let (fq, h) = FakeQueue::new(Qid(0), 4);
        h.set_auto_reply(false);
        let mut q = Queue::new(Box::new(fq));
        let r = q.execute(
            command::keep_alive(),
            None,
            DataDir::None,
            Duration::from_millis(20),
        );
        assert!(matches!(r, Err(Error::Timeout(_))));
        assert!(q.is_broken());
        assert_eq!((q.outstanding(), q.timed_out()), (0, 1));
        // Its cid (0) is not handed out again.
        assert_eq!(
            q.submit(read_sqe(), None, DataDir::None, 1).unwrap(),
            Cid(1)
        );
    }

    #[test]
    fn transport_errors_and_close() {
        let (fq, h) = FakeQueue::new(Qid(2), 4);
        let mut q = Queue::new(Box::new(fq));
        h.kill();
        assert!(matches!(
            q.submit(read_sqe(), None, DataDir::None, 1),
            Err(Error::Transport(_))
        ));
        // A failed submit gives its cid back.
        assert_eq!(q.outstanding(), 0);
        q.close();
        assert!(h.closed());
        assert!(q.submit(read_sqe(), None, DataDir::None, 1).is_err());
    }
}
