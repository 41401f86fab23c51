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
//! limited one). Each pass the group retries every queue's FIFO in order, the first
//! command of each namespace that cannot go stopping the later ones of that
//! namespace ([`Runtime::retry_held`]); nothing is refused for rate. The admin queue
//! is never limited, and a shutdown lets held commands through so they are answered
//! within the drain.

use super::group::Runtime;
use super::request::{queue_at, ReqState};
use super::watch;
use super::Transport;
use crate::core::Request;
use crate::qos::{Cost, IoClass};
use nvmf_common::wire::nvm;

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
        watch::enter(slot, ReqState::Throttled, now, &self.stats.states);
        q.held.push_back(si);
        if was_empty {
            self.held_queues.push((qi, gen));
        }
    }

    /// Lets held commands through, in each queue's order, while their budgets allow;
    /// the first of a namespace that cannot go keeps the later ones of that namespace.
    /// Returns how many went on.
    pub(super) fn retry_held(&mut self, t: &mut T) -> usize {
        let now = self.now_ns;
        let draining = self.draining();
        let mut done = 0;
        let mut i = 0;
        while let Some(&(qi, gen)) = self.held_queues.get(i) {
            let Some(q) = self.live_queue(qi, gen) else {
                self.held_queues.swap_remove(i);
                continue;
            };
            let held = std::mem::take(&mut q.held);
            let mut keep = std::collections::VecDeque::with_capacity(held.len());
            let mut go = Vec::new();
            // Namespaces whose first held command could not go this pass.
            let mut blocked: Vec<u32> = Vec::new();
            for si in held {
                let Some(q) = self.live_queue(qi, gen) else {
                    break;
                };
                let Some(slot) = q.slots.get(usize::from(si)) else {
                    continue;
                };
                let nsid = nsid_of(&slot.req);
                if blocked.contains(&nsid) {
                    keep.push_back(si);
                    continue;
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
                        keep.push_back(si);
                        continue;
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
                go.push(si);
            }
            let emptied = keep.is_empty();
            if let Some(q) = self.live_queue(qi, gen) {
                q.held = keep;
            }
            if emptied {
                self.held_queues.swap_remove(i);
            } else {
                i += 1;
            }
            for si in go {
                done += 1;
                self.proceed(t, qi, si);
            }
        }
        done
    }

    /// Queue `qi` ends: its held commands leave their namespaces' counts.
    pub(super) fn drop_held(&mut self, qi: u16) {
        let now = self.now_ns;
        let Some(q) = self.queue_mut(qi) else { return };
        let held = std::mem::take(&mut q.held);
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
