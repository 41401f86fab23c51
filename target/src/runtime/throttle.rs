//! QoS admission in the poll group ([`crate::qos`] holds the budgets).
//!
//! A parsed I/O command whose namespace is limited takes its cost from the group's
//! buckets; when they are in debt it is held: its slot goes to
//! [`ReqState::Throttled`] and its index to the back of its queue's `held` FIFO.
//! While a queue holds anything, every later command of that queue (whatever its
//! namespace) goes behind it, so nothing is reordered within a queue. Each pass the
//! group retries the front of every queue's FIFO ([`Runtime::retry_held`]); nothing
//! is refused for rate. The admin queue is never limited, and a shutdown lets held
//! commands through so they are answered within the drain.

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

impl<T: Transport> Runtime<T> {
    /// The slow path of [`Runtime::capsule`]: a limited namespace, or a queue that
    /// holds commands already.
    pub(super) fn admit_or_hold(&mut self, t: &mut T, qi: u16, si: u16) {
        let now = self.now_ns;
        let draining = self.draining();
        let Some(q) = self.queue_mut(qi) else { return };
        let admin = q.ctx.qid.is_admin();
        let queue_clear = q.held.is_empty();
        let gen = q.gen;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let qos = slot
            .req
            .namespace()
            .filter(|n| n.qos.is_enabled())
            .map(|n| n.qos.clone());
        let (qos, admin_or_draining) = (qos, admin || draining);
        if admin_or_draining && queue_clear {
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
        if queue_clear {
            self.held_queues.push((qi, gen));
        }
    }

    /// Lets held commands through, front of each queue first, while their budgets
    /// allow. Returns how many went on.
    pub(super) fn retry_held(&mut self, t: &mut T) -> usize {
        let now = self.now_ns;
        let draining = self.draining();
        let mut done = 0;
        let mut i = 0;
        while let Some(&(qi, gen)) = self.held_queues.get(i) {
            loop {
                let Some(q) = self.live_queue(qi, gen) else {
                    self.held_queues.swap_remove(i);
                    break;
                };
                let Some(&si) = q.held.front() else {
                    self.held_queues.swap_remove(i);
                    break;
                };
                let Some(slot) = q.slots.get(usize::from(si)) else {
                    q.held.pop_front();
                    continue;
                };
                let cost = cost_of(&slot.req);
                let (counted, since) = (slot.qos_held, slot.since);
                let qos = slot
                    .req
                    .namespace()
                    .filter(|n| n.qos.is_enabled() || slot.qos_held)
                    .map(|n| (n.qos.clone(), n.qos.is_enabled()));
                let state = qos.as_ref().map(|(qs, _)| self.qos.state(qs, now));
                let limited = qos.as_ref().is_some_and(|(_, on)| *on) && !draining;
                if let (Some(si_), true) = (state, limited) {
                    if !self.qos.try_admit(si_, &cost, now) {
                        i += 1;
                        break;
                    }
                }
                if let (Some(st), true) = (state, counted) {
                    self.qos.unhold(st, &cost, now.saturating_sub(since));
                }
                if let Some(q) = self.queue_mut(qi) {
                    q.held.pop_front();
                    if let Some(s) = q.slots.get_mut(usize::from(si)) {
                        s.qos_held = false;
                    }
                }
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
