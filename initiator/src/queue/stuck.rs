//! Stuck commands on one [`Queue`]: the outstanding commands listed with their age and
//! phase, a one-time `stuck command` warning per command, and the ages the scans saw.
//!
//! Owned by the queue, whose slots hold each command's submit time and submission
//! order. Nothing here runs per I/O: the warning comes from the timeout scan
//! ([`Queue::expire`], which the I/O loops call from their housekeeping, and
//! [`Queue::execute`] while it waits), the list and the ages only when asked.
//!
//! This is the host's view of a command the target accepted and never answered (issue
//! 32): without it such a command is silent until its timeout (30 s by default), and
//! then it only says that it timed out, not where it was. The warning names the queue,
//! command id, opcode, age and phase, once per command, when the command passes the
//! stuck bound (default 10 s, a third of the default timeout); if it completes after
//! all, that is logged too.

use std::time::{Duration, Instant};

use tracing::warn;

use nvmf_common::types::{Cid, Qid};
use nvmf_common::wire::admin::opcode as admin_op;

use super::{Queue, Slot, SlotState};
use crate::command::opcode_name;
use crate::transport::{CommandPhase, HostQueue};

/// One outstanding command, as [`Queue::outstanding_commands`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutstandingCommand {
    pub qid: Qid,
    pub cid: Cid,
    pub opcode: u8,
    /// The opcode's name (admin opcodes on the admin queue, NVM opcodes elsewhere).
    pub name: &'static str,
    /// Time since it was submitted.
    pub age: Duration,
    /// Where it is, as far as the host can tell.
    pub phase: CommandPhase,
    /// It has been reported as a stuck command.
    pub warned: bool,
}

impl std::fmt::Display for OutstandingCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue {} cid {} {} (opcode {:#04x}) {} for {:.3} s",
            self.qid,
            self.cid.0,
            self.name,
            self.opcode,
            self.phase,
            self.age.as_secs_f64()
        )
    }
}

/// What the stuck-command scans of one queue (or, merged, of several) saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandAges {
    /// Commands reported as stuck (each once).
    pub stuck: u64,
    /// The greatest age of an outstanding command that a scan saw.
    pub longest: Duration,
}

impl CommandAges {
    /// Adds `o` into `self` (counts add up, the longest age is the greater).
    pub fn merge(&mut self, o: CommandAges) {
        self.stuck += o.stuck;
        self.longest = self.longest.max(o.longest);
    }
}

/// An Asynchronous Event Request stays outstanding until the controller has an event
/// to report, which may be never: it is not a stuck command.
fn waits_by_design(qid: Qid, opcode: u8) -> bool {
    qid == Qid::ADMIN && opcode == admin_op::ASYNC_EVENT_REQUEST
}

/// Where the command in slot `cid` is: the transport's answer when it has one,
/// else queued until the queue was flushed after it, then sent.
fn phase(t: &dyn HostQueue, cid: u16, s: &Slot, flushed: u64) -> CommandPhase {
    match t.command_phase(cid) {
        Some(p) => p,
        None if s.seq > flushed => CommandPhase::Queued,
        None => CommandPhase::Sent,
    }
}

/// One pass of the stuck check over a queue's slots (inside [`Queue::expire`]'s loop,
/// or alone): copies what it needs of the queue, so the slots can be borrowed.
pub(super) struct Scan {
    qid: Qid,
    now: Instant,
    bound: Option<Duration>,
    flushed: u64,
    seen: CommandAges,
}

impl Scan {
    pub(super) fn new(q: &Queue, now: Instant) -> Scan {
        Scan {
            qid: q.qid,
            now,
            bound: q.stuck_warn,
            flushed: q.flush_seq,
            seen: CommandAges::default(),
        }
    }

    /// Looks at one outstanding command: notes its age, and reports it if it passed
    /// the bound for the first time.
    pub(super) fn check(&mut self, t: &dyn HostQueue, cid: usize, s: &mut Slot) {
        if waits_by_design(self.qid, s.opcode) {
            return;
        }
        let Some(at) = s.submitted else {
            return;
        };
        let age = self.now.saturating_duration_since(at);
        self.seen.longest = self.seen.longest.max(age);
        let Some(bound) = self.bound.filter(|b| age >= *b && !s.warned) else {
            return;
        };
        s.warned = true;
        self.seen.stuck += 1;
        // Slots are indexed by cid, which is a u16.
        let cid = u16::try_from(cid).unwrap_or(u16::MAX);
        let phase = phase(t, cid, s, self.flushed);
        let timeout_ms = s
            .deadline
            .map(|d| d.saturating_duration_since(at).as_millis() as u64);
        warn!(
            qid = %self.qid,
            cid,
            opcode = format_args!("{:#04x}", s.opcode),
            command = opcode_name(self.qid, s.opcode),
            age_ms = age.as_millis() as u64,
            phase = %phase,
            bound_ms = bound.as_millis() as u64,
            timeout_ms,
            "stuck command: submitted {:.3} s ago and still not completed ({phase})",
            age.as_secs_f64()
        );
    }

    /// Adds what this pass saw to the queue's record.
    pub(super) fn finish(self, ages: &mut CommandAges) {
        ages.merge(self.seen);
    }
}

impl Queue {
    /// Reports each outstanding command once, with a `stuck command` warning, when it
    /// has been outstanding for `bound` (checked by [`Queue::expire`] and while
    /// [`Queue::execute`] waits); `Duration::ZERO` turns the warning off. Ages are
    /// recorded either way ([`Queue::command_ages`]).
    pub fn set_stuck_warn(&mut self, bound: Duration) {
        self.stuck_warn = (!bound.is_zero()).then_some(bound);
    }

    pub fn stuck_warn(&self) -> Option<Duration> {
        self.stuck_warn
    }

    /// The outstanding commands (timed-out ones excluded) that have been outstanding
    /// for at least `older_than` at `now`, oldest first, with where each is. Not for
    /// the I/O path: it asks the transport about each command it lists.
    pub fn outstanding_commands(
        &self,
        now: Instant,
        older_than: Duration,
    ) -> Vec<OutstandingCommand> {
        let mut out: Vec<OutstandingCommand> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == SlotState::Outstanding)
            .filter_map(|(cid, s)| {
                let age = now.saturating_duration_since(s.submitted?);
                let cid = u16::try_from(cid).ok()?;
                (age >= older_than).then(|| OutstandingCommand {
                    qid: self.qid,
                    cid: Cid(cid),
                    opcode: s.opcode,
                    name: opcode_name(self.qid, s.opcode),
                    age,
                    phase: phase(self.t.as_ref(), cid, s, self.flush_seq),
                    warned: s.warned,
                })
            })
            .collect();
        out.sort_by(|a, b| b.age.cmp(&a.age).then(a.cid.0.cmp(&b.cid.0)));
        out
    }

    /// How long the oldest outstanding command has been outstanding at `now` (an
    /// Asynchronous Event Request, which waits by design, is not counted).
    pub fn oldest_age(&self, now: Instant) -> Option<Duration> {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::Outstanding && !waits_by_design(self.qid, s.opcode))
            .filter_map(|s| s.submitted)
            .min()
            .map(|t| now.saturating_duration_since(t))
    }

    /// What the scans of this queue saw so far: commands reported as stuck and the
    /// greatest age seen.
    pub fn command_ages(&self) -> CommandAges {
        self.ages
    }

    /// [`Queue::command_ages`], starting the record afresh (for a caller that reports
    /// per run, or keeps its own total across the queues it goes through).
    pub fn take_command_ages(&mut self) -> CommandAges {
        std::mem::take(&mut self.ages)
    }

    /// The stuck check alone (what [`Queue::expire`] does besides timing out).
    pub(super) fn scan_stuck(&mut self, now: Instant) {
        let mut scan = Scan::new(self, now);
        for (cid, s) in self.slots.iter_mut().enumerate() {
            if s.state == SlotState::Outstanding {
                scan.check(self.t.as_ref(), cid, s);
            }
        }
        scan.finish(&mut self.ages);
    }
}

#[cfg(test)]
mod tests;
