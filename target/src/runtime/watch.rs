//! Outstanding commands made visible: every command a queue accepted is either
//! answered or its queue ends, and one that is neither for too long cannot hide.
//!
//! Each slot records when it entered its [`ReqState`] (`Slot::since`) and when its
//! capsule arrived (`Slot::start`). On every state change the time spent in the state
//! left is added to the group's per-state histogram ([`StateTimes`]: a relaxed load and
//! store of lines only this group writes). A few times a second the group's sweep
//! ([`Runtime::watch`]) walks its slots: the oldest age per queue and per group are
//! published ([`WatchView`], the `oldest_command_ms` and `longest_command_ms`
//! counters), and a command outstanding longer than `transport.stuck_command_ms` is
//! logged once at warn with its queue, CID, opcode, state and what it waits for (a
//! buffer, host data, the backend, the transport), counted (`stuck_commands`) and
//! listed by `ctl status` and the metrics until it finishes.
//!
//! Held Asynchronous Event Requests are not outstanding work (they wait for an event
//! by design) and are left out. Queues that ended with backend I/O still in flight are
//! watched too: a backend that never completes shows there.

use std::sync::atomic::Ordering;

use tracing::warn;

use super::group::Runtime;
use super::queue::{watched_index, ReqState};
use super::stats::{bump, set, QueueAge, StuckCommand, WatchView, STATE_NAMES};
use super::Transport;

const NS_PER_MS: u64 = 1_000_000;

fn state_name(s: ReqState) -> &'static str {
    watched_index(s)
        .and_then(|i| STATE_NAMES.get(i))
        .copied()
        .unwrap_or(match s {
            ReqState::New => "new",
            ReqState::Held => "held",
            ReqState::Throttled => "throttled",
            _ => "free",
        })
}

impl<T: Transport> Runtime<T> {
    /// The sweep: ages per queue and group, stuck commands reported once each.
    pub(super) fn watch(&mut self, now: u64) {
        let bound = u64::from(self.target.params.stuck_command_ms) * NS_PER_MS;
        let (in_use, waiting) = (self.pool.in_use(), self.waiters.len());
        let mut view = WatchView::default();
        let mut oldest = 0u64;
        let mut newly_stuck = 0u64;
        for q in self.queues.iter_mut().flatten() {
            let mut q_oldest = 0u64;
            let mut outstanding = 0usize;
            for s in &mut q.slots {
                // Held AERs wait by design, throttled commands by the operator's limit.
                if matches!(
                    s.state,
                    ReqState::Free | ReqState::Held | ReqState::Throttled
                ) {
                    continue;
                }
                let age = now.saturating_sub(s.start);
                outstanding += 1;
                q_oldest = q_oldest.max(age);
                if age < bound {
                    continue;
                }
                let ctrl = q.ctx.ctrl.as_ref();
                let waiting_for = match s.state {
                    ReqState::NeedBuffer => format!(
                        "a data buffer of {} bytes ({in_use} buffers in use, {waiting} commands waiting for one)",
                        s.req.plan.len
                    ),
                    ReqState::TransferringHostToController => {
                        format!("host data ({})", T::describe_transfer(&s.t))
                    }
                    ReqState::Executing => match s.req.namespace() {
                        Some(n) => format!("the backend ({})", n.backend.info().description),
                        None => "its execution".to_string(),
                    },
                    _ => "the transport to send its data and response".to_string(),
                };
                let cmd = StuckCommand {
                    group: self.name.clone(),
                    subsystem: ctrl.map(|c| c.subsys.nqn.to_string()).unwrap_or_default(),
                    host: ctrl.map(|c| c.hostnqn.to_string()).unwrap_or_default(),
                    cntlid: ctrl.map_or(0, |c| c.cntlid.0),
                    qid: q.ctx.qid.0,
                    cid: s.req.cid(),
                    opcode: s.req.opcode(),
                    nsid: s.req.cmd().nsid(),
                    state: state_name(s.state).to_string(),
                    state_ms: now.saturating_sub(s.since) / NS_PER_MS,
                    age_ms: age / NS_PER_MS,
                    waiting_for,
                };
                if !s.reported {
                    s.reported = true;
                    newly_stuck += 1;
                    warn!(group = %self.name, "stuck command: {cmd}");
                }
                view.stuck.push(cmd);
            }
            if outstanding > 0 {
                let ctrl = q.ctx.ctrl.as_ref();
                view.queues.push(QueueAge {
                    group: self.name.clone(),
                    subsystem: ctrl.map(|c| c.subsys.nqn.to_string()).unwrap_or_default(),
                    host: ctrl.map(|c| c.hostnqn.to_string()).unwrap_or_default(),
                    cntlid: ctrl.map_or(0, |c| c.cntlid.0),
                    qid: q.ctx.qid.0,
                    ended: q.dead,
                    outstanding,
                    oldest_ms: q_oldest / NS_PER_MS,
                });
            }
            oldest = oldest.max(q_oldest);
        }
        let oldest_ms = oldest / NS_PER_MS;
        let st = &self.stats;
        bump(&st.stuck_commands, newly_stuck);
        set(&st.oldest_command_ms, oldest_ms);
        if oldest_ms > st.longest_command_ms.load(Ordering::Relaxed) {
            set(&st.longest_command_ms, oldest_ms);
        }
        *st.watch.lock() = view;
    }
}
