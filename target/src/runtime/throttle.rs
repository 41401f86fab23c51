//! QoS admission in the poll group ([`crate::qos`] holds the budgets).
//!
//! A parsed I/O command whose namespace is limited takes its cost from the group's
//! buckets; when they are in debt it is held: its slot goes to
//! [`ReqState::Throttled`] and its index to the back of its queue's `held` FIFO.
//! While a queue holds commands of a namespace, every later command of that queue
//! for that namespace goes behind them, so nothing is reordered within a queue and
//! namespace; commands for other namespaces go on (as SPDK's per-bdev QoS queues do:
//! NVMe promises no order between commands, and a Linux host shares its queues among
//! all namespaces, so holding them too would make an unlimited neighbour pay for a
//! limited one). The group retries every queue's FIFO in order, the first command of
//! each namespace that cannot go stopping the later ones of that namespace
//! ([`Runtime::retry_held`]); nothing is refused for rate. Budgets refill with time, not
//! with passes, so the retry runs at most once per [`HELD_RETRY_NS`] (SPDK retries its
//! QoS queues once per 1 ms timeslice): a limited namespace's held commands must not
//! cost the group's other queues a walk on every pass. The admin queue
//! is never limited, and a shutdown lets held commands through so they are answered
//! within the drain.

use super::group::Runtime;
use super::queue::{self, queue_at, ReqState};
use super::Transport;
use crate::core::Request;
use crate::qos::{Cost, IoClass};
use nvmf_common::wire::nvm;

/// The shortest time between two retries of the held commands.
pub(super) const HELD_RETRY_NS: u64 = 100_000;

/// What a retry pass does with one held command.
enum Fate {
    /// Still over budget (or behind one of its namespace that is): back in the FIFO.
    Stay,
    /// Admitted: it goes on.
    Go,
    /// Its slot is gone: dropped from the FIFO.
    Gone,
}

/// What `req` costs against its namespace's limits.
fn cost_of(req: &Request) -> Cost {
    let class = match req.opcode() {
        nvm::opcode::READ => IoClass::Read,
        nvm::opcode::WRITE => IoClass::Write,
        _ => IoClass::Other,
    };
    Cost::new(class, u64::from(req.plan.len))
}

/// The namespace a command is ordered within (0: none).
fn nsid_of(req: &Request) -> u32 {
    req.namespace().map_or(0, |n| n.nsid.0)
}

impl<T: Transport> Runtime<T> {
    /// The slow path of [`Runtime::capsule`]: a limited namespace, or a queue that
    /// holds commands already.
    pub(super) fn admit_or_hold(&mut self, t: &mut T, qi: u16, si: u16) {
        let now = self.now_ns;
        let draining = self.draining();
        let Some(q) = self.queue_mut(qi) else { return };
        let admin = q.ctx.qid.is_admin();
        let was_empty = q.held.is_empty();
        let gen = q.gen;
        let Some(nsid) = q.slots.get(usize::from(si)).map(|s| nsid_of(&s.req)) else {
            return;
        };
        // Nothing of this namespace waits on this queue: nothing to stay behind.
        let queue_clear = !q.held.iter().any(|&h| {
            q.slots
                .get(usize::from(h))
                .is_some_and(|s| nsid_of(&s.req) == nsid)
        });
        // Held behind another namespace's commands: the FIFO is mixed from now on.
        let joins_others = !was_empty && queue_clear;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let qos = slot
            .req
            .namespace()
            .filter(|n| n.qos.is_enabled())
            .map(|n| n.qos.clone());
        if queue_clear && (admin || draining || qos.is_none()) {
            return self.proceed(t, qi, si);
        }
        let cost = cost_of(&slot.req);
        let state = qos.as_ref().map(|qs| self.qos.state(qs, now));
        if let Some(i) = state {
            if queue_clear && self.qos.try_admit(i, &cost, now) {
                return self.proceed(t, qi, si);
            }
            self.qos.hold(i, &cost);
        }
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        slot.qos_held = state.is_some();
        queue::enter(slot, ReqState::Throttled, now, &self.stats.states);
        q.held.push_back(si);
        q.held_mixed |= joins_others;
        if was_empty {
            self.held_queues.push((qi, gen));
        }
    }

    /// Lets held commands through, in each queue's order, while their budgets allow;
    /// the first of a namespace that cannot go keeps the later ones of that namespace.
    /// Runs at most once per [`HELD_RETRY_NS`], except while draining. Returns how
    /// many went on.
    pub(super) fn retry_held(&mut self, t: &mut T) -> usize {
        let now = self.now_ns;
        let draining = self.draining();
        if !draining && now < self.held_pass.retry_at {
            return 0;
        }
        let mut go = std::mem::take(&mut self.held_pass.go);
        let mut blocked = std::mem::take(&mut self.held_pass.blocked);
        let mut done = 0;
        let mut i = 0;
        while let Some(&(qi, gen)) = self.held_queues.get(i) {
            let Some(q) = self.live_queue(qi, gen) else {
                self.held_queues.swap_remove(i);
                continue;
            };
            go.clear();
            blocked.clear();
            let mixed = q.held_mixed;
            // Each held command once, in order: back to the tail if it stays. With one
            // namespace in the FIFO, the first that stays keeps all the rest: put it
            // back in front and stop (a pass costs one budget check, not a walk).
            for _ in 0..q.held.len() {
                let Some(si) = self.live_queue(qi, gen).and_then(|q| q.held.pop_front()) else {
                    break;
                };
                match self.held_fate(qi, gen, si, now, draining, &mut blocked) {
                    Fate::Stay => {
                        if let Some(q) = self.live_queue(qi, gen) {
                            if mixed {
                                q.held.push_back(si);
                            } else {
                                q.held.push_front(si);
                                break;
                            }
                        }
                    }
                    Fate::Go => go.push(si),
                    Fate::Gone => {}
                }
            }
            let emptied = self.live_queue(qi, gen).is_none_or(|q| {
                if q.held.is_empty() {
                    q.held_mixed = false;
                }
                q.held.is_empty()
            });
            if emptied {
                self.held_queues.swap_remove(i);
            } else {
                i += 1;
            }
            for &si in &go {
                done += 1;
                self.proceed(t, qi, si);
            }
        }
        self.held_pass.go = go;
        self.held_pass.blocked = blocked;
        self.held_pass.retry_at = now.saturating_add(HELD_RETRY_NS);
        done
    }

    /// What becomes of held slot `si` of queue `qi` this pass: it stays when its
    /// namespace is already `blocked` or its budget does not admit it (then the
    /// namespace is blocked for the rest of the queue). A slot that goes leaves the
    /// held counts.
    fn held_fate(
        &mut self,
        qi: u16,
        gen: u16,
        si: u16,
        now: u64,
        draining: bool,
        blocked: &mut Vec<u32>,
    ) -> Fate {
        let Some(slot) = self
            .live_queue(qi, gen)
            .and_then(|q| q.slots.get(usize::from(si)))
        else {
            return Fate::Gone;
        };
        let nsid = nsid_of(&slot.req);
        if blocked.contains(&nsid) {
            return Fate::Stay;
        }
        let cost = cost_of(&slot.req);
        let (counted, since) = (slot.qos_held, slot.since);
        let qos = slot
            .req
            .namespace()
            .filter(|n| n.qos.is_enabled() || slot.qos_held)
            .map(|n| (n.qos.clone(), n.qos.is_enabled()));
        let state = qos.as_ref().map(|(qs, _)| self.qos.state(qs, now));
        let limited = qos.as_ref().is_some_and(|(_, on)| *on) && !draining;
        if let (Some(st), true) = (state, limited) {
            if !self.qos.try_admit(st, &cost, now) {
                blocked.push(nsid);
                return Fate::Stay;
            }
        }
        if let (Some(st), true) = (state, counted) {
            self.qos.unhold(st, &cost, now.saturating_sub(since));
        }
        if let Some(s) = self
            .live_queue(qi, gen)
            .and_then(|q| q.slots.get_mut(usize::from(si)))
        {
            s.qos_held = false;
        }
        Fate::Go
    }

    /// Queue `qi` ends: its held commands leave their namespaces' counts.
    pub(super) fn drop_held(&mut self, qi: u16) {
        let now = self.now_ns;
        let Some(q) = self.queue_mut(qi) else { return };
        let held = std::mem::take(&mut q.held);
        q.held_mixed = false;
        let mut leaving = Vec::new();
        for si in held {
            if let Some(s) = q.slots.get_mut(usize::from(si)) {
                if s.qos_held {
                    s.qos_held = false;
                    if let Some(n) = s.req.namespace() {
                        leaving.push((n.qos.clone(), cost_of(&s.req), s.since));
                    }
                }
            }
        }
        for (qs, cost, since) in leaving {
            let st = self.qos.state(&qs, now);
            self.qos.unhold(st, &cost, now.saturating_sub(since));
        }
    }

    /// Whether commands wait for QoS budget (the group must not sleep long).
    pub(super) fn has_held(&self) -> bool {
        !self.held_queues.is_empty()
    }
}
