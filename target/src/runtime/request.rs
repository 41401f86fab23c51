//! One request life cycle for every fabric, on the queues and slots of
//! [`super::queue`].
//!
//! A queue has one slot per submission queue entry. A slot moves through
//! [`ReqState`] (named after SPDK's `spdk_nvmf_*_req_state`):
//!
//! `Free` → capsule received (`New`: SGL decoded, command parsed) →
//! `NeedBuffer` (a pool buffer, in arrival order) →
//! `TransferringHostToController` (R2T/H2CData, RDMA READ) → `Executing` (backend
//! I/O) or `Held` (an Asynchronous Event Request waiting for an event) →
//! `TransferringControllerToHost` (C2HData and CapsuleResp, RDMA WRITE + SEND) →
//! `Free` once the transport says the response is on its way ([`Runtime::sent`]).
//! A command that fails anywhere skips to the response with a precise status; every
//! command is answered exactly once.
//!
//! A queue that fails stops taking commands and is torn down at once; slots waiting
//! for the backend (and, on fabrics whose transfers settle after close, for the
//! transport) keep the queue until they finish, then it is freed.

use std::sync::Arc;

use tracing::{debug, warn};

use nvmf_common::types::{Nsid, Qid};
use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::sqe::{self, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};
use nvmf_verbs::DmaBuffer;

use super::fused;
use super::group::Runtime;
use super::queue::{self, queue_at, FuseLink, InCapsule, OpenFused, Queue, ReqState, Slot};
use super::sgl::{self, HostData};
use super::stats::{self, bump};
use super::{tag, tag_parts, PoolBuf, Transport};
use crate::backend::DmaSlice;
use crate::core::{self, DataDir, Outcome, QueueCtx, Request};
use crate::metrics::cell::{CLASS_OTHER, CLASS_READ, CLASS_WRITE};
use nvmf_common::wire::{admin, nvm};

/// Nanoseconds per millisecond (command ages are kept in ms).
const NS_PER_MS: u64 = 1_000_000;

impl<T: Transport> Runtime<T> {
    /// Adds a queue with `slots` command slots; returns its index.
    pub fn add_queue(&mut self, ctx: QueueCtx, slots: u16, tq: T::Queue) -> Option<u16> {
        let gen = self.take_gen();
        let q = Queue {
            gen,
            ctx,
            slots: (0..slots).map(|_| Slot::new()).collect(),
            connected: false,
            dead: false,
            icd: None,
            cells: Vec::new(),
            held: std::collections::VecDeque::new(),
            held_mixed: false,
            open_fused: OpenFused::None,
            t: tq,
        };
        let qi = match self.queues.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.queues.push(None);
                self.queues.len() - 1
            }
        };
        let qi16 = u16::try_from(qi).ok()?;
        if let Some(e) = self.queues.get_mut(qi) {
            *e = Some(q);
        }
        bump(&self.stats.accepted, 1);
        stats::set(
            &self.stats.queues,
            self.queues.iter().flatten().count() as u64,
        );
        Some(qi16)
    }

    pub fn queue(&self, qi: u16) -> Option<&Queue<T>> {
        self.queues.get(usize::from(qi)).and_then(Option::as_ref)
    }

    pub fn queue_mut(&mut self, qi: u16) -> Option<&mut Queue<T>> {
        queue_at(&mut self.queues, qi)
    }

    /// Live (not ended) queue `qi` of generation `gen`.
    pub fn live_queue(&mut self, qi: u16, gen: u16) -> Option<&mut Queue<T>> {
        self.queue_mut(qi).filter(|q| q.gen == gen && !q.dead)
    }

    /// Number of queue indices (some may be empty).
    pub fn queue_slots(&self) -> usize {
        self.queues.len()
    }

    pub fn slot_mut(&mut self, qi: u16, si: u16) -> Option<&mut Slot<T::Slot>> {
        self.queue_mut(qi)?.slots.get_mut(usize::from(si))
    }

    /// Encodes the response of slot `si` (and records a failure in the error log).
    pub fn fill_cqe(&self, qi: u16, si: u16) -> Option<[u8; CQE_LEN]> {
        let q = self.queue(qi)?;
        let slot = q.slots.get(usize::from(si))?;
        let mut cqe = [0u8; CQE_LEN];
        q.ctx.fill_cqe(&slot.req, &mut cqe);
        Some(cqe)
    }

    /// The response of a command that gets no slot (its capsule failed the data
    /// digest): the SQ head moves on and the command fails with `status`.
    pub fn respond_unslotted(
        &mut self,
        qi: u16,
        sqe_bytes: &[u8; SQE_LEN],
        status: Status,
    ) -> Option<[u8; CQE_LEN]> {
        let q = self.queue_mut(qi)?;
        let mut req = Request::new();
        req.reset(sqe_bytes);
        req.fail(status);
        q.ctx.advance_sq_head();
        let mut cqe = [0u8; CQE_LEN];
        q.ctx.fill_cqe(&req, &mut cqe);
        bump(&self.stats.responses, 1);
        Some(cqe)
    }

    /// A command capsule arrived in free slot `si` of queue `qi`.
    pub fn capsule(
        &mut self,
        t: &mut T,
        qi: u16,
        si: u16,
        sqe_bytes: &[u8; SQE_LEN],
        icd: InCapsule<'_>,
    ) {
        bump(&self.stats.commands, 1);
        let now = self.now_ns;
        let draining = self.draining();
        let icd_slot = self.icd_slot;
        let target = &self.target;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        if q.dead {
            return;
        }
        let nslots = q.slots.len();
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        slot.state = ReqState::New;
        slot.start = now;
        slot.since = now;
        slot.reported = false;
        slot.req.reset(sqe_bytes);
        slot.host = HostData::None;
        if draining {
            // Shutting down: no new commands, and no answer (the queue closes once the
            // drain ends; the host retries elsewhere).
            bump(&self.stats.refused_at_shutdown, 1);
            return self.release_slot(t, qi, si);
        }
        if q.ctx.ctrl.as_ref().is_some_and(|c| c.is_dead()) {
            // The association ended (keep-alive, fatal error, the host closed its admin
            // queue) and the timer sweep has not torn this queue down yet: end it now,
            // unanswered, as nvmet deletes a dead controller's queues. An answer (Command
            // Sequence Error) would fail the command at a multipath host; a lost
            // connection sends it down another path.
            self.release_slot(t, qi, si);
            return self.kill(t, qi, "controller is gone", true);
        }
        q.ctx.advance_sq_head();
        let parsed = sgl::decode(sqe_bytes, icd.len(), T::SGL)
            .and_then(|host| core::parse(&q.ctx, target, &mut slot.req, host.len()).map(|()| host));
        let fu = sqe::Sqe::new_unchecked(sqe_bytes).fuse();
        if fu != 0 || q.open_fused != OpenFused::None {
            // A fused half, or the command after an open first half (rare).
            let linked = fused::link(q, si, fu, parsed.is_err());
            if let Some(f) = linked.complete {
                self.fused_orphans.push((qi, q.gen, f));
            }
            if let Some(st) = linked.fail {
                if let Some(s) = q.slots.get_mut(usize::from(si)) {
                    s.req.fail(st);
                }
                return self.complete(t, qi, si);
            }
        }
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let host = match parsed {
            Ok(h) => h,
            Err(st) => {
                slot.req.fail(st);
                return self.complete(t, qi, si);
            }
        };
        slot.host = host;
        let plan = slot.req.plan;
        match (plan.dir, host) {
            (_, _) if plan.len == 0 => {}
            (DataDir::HostToCtrl, HostData::InCapsule { offset, len }) => {
                let data = match icd {
                    InCapsule::Registered { offset: base, .. } => T::in_capsule_buffer(&q.t)
                        .and_then(|buf| DmaSlice::new(buf.clone(), base + offset, len as usize)),
                    InCapsule::Bytes(bytes) => {
                        let need = nslots * icd_slot;
                        if q.icd.as_ref().is_none_or(|b| b.len() < need) {
                            q.icd = DmaBuffer::new(need).map(Arc::new);
                        }
                        let base = usize::from(si) * icd_slot;
                        let src = bytes.get(offset..offset + len as usize);
                        let dst = q
                            .icd
                            .as_ref()
                            .and_then(|b| DmaSlice::new(b.clone(), base, len as usize));
                        match (src, dst) {
                            (Some(src), Some(dst)) if dst.buf.write_at(base, src) => Some(dst),
                            _ => None,
                        }
                    }
                };
                match data {
                    Some(d) => slot.req.data = Some(d),
                    None => {
                        warn!(qid = %q.ctx.qid, "no memory for in-capsule data");
                        slot.req
                            .fail(Status::generic_retryable(generic::INTERNAL_ERROR));
                        return self.complete(t, qi, si);
                    }
                }
            }
            (
                DataDir::HostToCtrl | DataDir::CtrlToHost,
                HostData::Transport { .. } | HostData::Keyed { .. },
            ) => {}
            (DataDir::CtrlToHost, _) => {
                // Read data travels by the fabric (C2HData, RDMA WRITE), never in a capsule.
                slot.req.fail(sgl::sgl_type_invalid());
                return self.complete(t, qi, si);
            }
            (DataDir::HostToCtrl | DataDir::None, _) => {
                slot.req.fail(
                    Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0),
                );
                return self.complete(t, qi, si);
            }
        }
        // Unlimited namespaces on a queue with nothing held: one flag, then on.
        if !q.held.is_empty() || slot.req.namespace().is_some_and(|n| n.qos.is_enabled()) {
            return self.admit_or_hold(t, qi, si);
        }
        self.proceed(t, qi, si)
    }

    /// A parsed command that may run now: executes it (no data, or in-capsule data
    /// already in place) or gets its buffer and host data first.
    #[inline]
    pub(super) fn proceed(&mut self, t: &mut T, qi: u16, si: u16) {
        let now = self.now_ns;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let gen = q.gen;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.req.plan.len == 0 || slot.req.data.is_some() {
            return self.execute(t, qi, si);
        }
        queue::enter(slot, ReqState::NeedBuffer, now, &self.stats.states);
        if self.waiters.is_empty() {
            self.start_data(t, qi, si);
        } else {
            // Buffers go to commands in arrival order.
            self.waiters.push_back((qi, gen, si));
        }
    }

    /// Gets a pool buffer for a transfer by the fabric, then fetches host data or
    /// executes. Without a buffer the command waits, first in line.
    fn start_data(&mut self, t: &mut T, qi: u16, si: u16) {
        let max_io = self.target.params.max_io_size;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let gen = q.gen;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let len = slot.req.plan.len;
        let Some(buf) = self.pool.alloc(len) else {
            if len > max_io {
                // Cannot be had at all (parse refuses these; never wait forever).
                slot.req
                    .fail(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0));
                return self.complete(t, qi, si);
            }
            if slot.state != ReqState::NeedBuffer {
                queue::enter(slot, ReqState::NeedBuffer, self.now_ns, &self.stats.states);
            }
            self.waiters.push_back((qi, gen, si));
            return;
        };
        stats::set(&self.stats.buffers_in_use, self.pool.in_use() as u64);
        slot.req.data = Some(buf.slice.clone());
        slot.buf = Some(buf);
        let next = if slot.req.plan.dir == DataDir::HostToCtrl {
            ReqState::TransferringHostToController
        } else {
            ReqState::Executing
        };
        queue::enter(slot, next, self.now_ns, &self.stats.states);
        if next == ReqState::TransferringHostToController {
            t.fetch_data(self, qi, si);
        } else {
            self.execute(t, qi, si);
        }
    }

    /// Commands that waited for a pool buffer try again, oldest first.
    pub(super) fn retry_waiters(&mut self, t: &mut T) {
        for _ in 0..self.waiters.len() {
            let Some((qi, gen, si)) = self.waiters.pop_front() else {
                break;
            };
            let waiting = self.queue(qi).is_some_and(|q| {
                q.gen == gen
                    && !q.dead
                    && q.slots
                        .get(usize::from(si))
                        .is_some_and(|s| s.state == ReqState::NeedBuffer)
            });
            if !waiting {
                continue;
            }
            let before = self.waiters.len();
            self.start_data(t, qi, si);
            if self.waiters.len() > before {
                // Still no buffer: it stays first in line, the rest keep waiting.
                if let Some(w) = self.waiters.pop_back() {
                    self.waiters.push_front(w);
                }
                break;
            }
        }
    }

    /// The host's data for slot `si` is in its buffer: execute (or, when the queue
    /// ended meanwhile, let the slot go).
    pub fn data_ready(&mut self, t: &mut T, qi: u16, si: u16) {
        match self.queue(qi) {
            Some(q) if q.dead => self.settle(t, qi, si),
            Some(_) => self.execute(t, qi, si),
            None => {}
        }
    }

    /// The host's data for slot `si` could not be had intact (a data digest error):
    /// the command completes with `status` and never executes.
    pub fn data_failed(&mut self, t: &mut T, qi: u16, si: u16, status: Status) {
        if let Some(slot) = self.slot_mut(qi, si) {
            slot.req.fail(status);
            self.complete(t, qi, si);
        }
    }

    pub(super) fn execute(&mut self, t: &mut T, qi: u16, si: u16) {
        self.run_gated(t, qi, si, true)
    }

    /// Executes slot `si`'s command now (past the fused and range-lock gates).
    pub(super) fn run(&mut self, t: &mut T, qi: u16, si: u16) {
        self.run_gated(t, qi, si, false)
    }

    /// Runs slot `si`'s command; with `gate`, a fused half or a write while a range is
    /// locked takes the slow path ([`super::fused`]) first. Its completion goes to a
    /// pair's next step when it is a pair's Compare.
    #[inline]
    fn run_gated(&mut self, t: &mut T, qi: u16, si: u16, gate: bool) {
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let tg = tag(q.gen, qi, si);
        let was_connected = q.ctx.ctrl.is_some();
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if gate && (slot.fuse != FuseLink::None || self.target.locks.active()) {
            return self.gated(t, qi, si);
        }
        queue::enter(slot, ReqState::Executing, self.now_ns, &self.stats.states);
        match core::execute(&mut q.ctx, &mut self.ex, &mut slot.req, tg) {
            Outcome::Done => {
                let connected_now = !was_connected && q.ctx.ctrl.is_some();
                if fused::is_pair_compare(slot.fuse) {
                    self.finished(t, qi, si);
                } else {
                    self.complete(t, qi, si);
                }
                if connected_now {
                    self.install_queue(t, qi);
                }
            }
            Outcome::Pending => {}
            Outcome::Held => queue::enter(slot, ReqState::Held, self.now_ns, &self.stats.states),
        }
    }

    /// The slow path of [`Runtime::execute`]: a fused half waits for its other half; a
    /// write overlapping a locked range is held.
    #[cold]
    fn gated(&mut self, t: &mut T, qi: u16, si: u16) {
        let fused = self
            .queue(qi)
            .and_then(|q| q.slots.get(usize::from(si)))
            .is_some_and(|s| s.fuse != FuseLink::None);
        if fused {
            return self.fused_ready(t, qi, si);
        }
        if self.held_by_lock(qi, si) {
            return;
        }
        self.run(t, qi, si)
    }

    /// Once the Connect succeeded: one slot per submission queue entry, then the
    /// transport sizes its own resources.
    fn install_queue(&mut self, t: &mut T, qi: u16) {
        let Some(q) = self.queue_mut(qi) else { return };
        if q.connected || q.dead {
            return;
        }
        q.connected = true;
        let depth = usize::from(q.ctx.sqsize) + 1;
        while q.slots.len() < depth {
            q.slots.push(Slot::new());
        }
        // Sized again on first use.
        q.icd = None;
        debug!(qid = %q.ctx.qid, depth, "{} queue connected", T::NAME);
        t.queue_connected(self, qi);
    }

    /// A backend operation finished.
    pub(super) fn on_backend(&mut self, t: &mut T, tg: u64, res: crate::backend::IoResult) {
        let (gen, qi, si) = tag_parts(tg);
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        if q.gen != gen {
            return;
        }
        let dead = q.dead;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        if slot.state != ReqState::Executing || !core::io_done(&mut self.ex, &mut slot.req, tg, res)
        {
            return;
        }
        if dead {
            self.settle(t, qi, si);
        } else if fused::is_pair_compare(slot.fuse) {
            self.finished(t, qi, si);
        } else {
            self.complete(t, qi, si);
        }
    }

    /// The command in slot `si` is finished: hand its data and response to the
    /// transport.
    pub fn complete(&mut self, t: &mut T, qi: u16, si: u16) {
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        if q.dead {
            return self.settle(t, qi, si);
        }
        let open = q.open_fused != OpenFused::None;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        let slot = if open || slot.fuse != FuseLink::None || slot.lock.is_some() {
            // Half of a fused pair: its other half is settled first (rare).
            self.fused_completing(t, qi, si);
            match queue_at(&mut self.queues, qi).and_then(|q| q.slots.get_mut(usize::from(si))) {
                Some(s) => s,
                None => return,
            }
        } else {
            slot
        };
        queue::enter(
            slot,
            ReqState::TransferringControllerToHost,
            self.now_ns,
            &self.stats.states,
        );
        self.account(qi, si);
        t.send_response(self, qi, si);
    }

    /// Counts a command of a connected queue in its metrics cell: class, bytes,
    /// latency and error status. One clock read and a few owned stores.
    // Once per command, from `complete` only: kept inline as it was before fused
    // commands made `complete` larger.
    #[inline(always)]
    fn account(&mut self, qi: u16, si: u16) {
        let target = &self.target;
        let group = &self.name;
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let Some(ctrl) = q.ctx.ctrl.as_ref() else {
            return;
        };
        let Some(slot) = q.slots.get(usize::from(si)) else {
            return;
        };
        // A command that failed before it took its namespace (a range check, say) is
        // still the namespace's when its NSID names one; the lookup is off the hot
        // path (only commands without a namespace get here).
        let looked_up;
        let ns = match slot.req.namespace() {
            Some(n) => Some(n),
            None => {
                let nsid = slot.req.cmd().nsid();
                looked_up = (nsid != 0 && nsid != Nsid::BROADCAST.0)
                    .then(|| ctrl.namespace(Nsid(nsid)))
                    .flatten();
                looked_up.as_ref()
            }
        };
        let instance = ns.map_or(0, |n| n.instance);
        let cell = match q.cells.iter().find(|(i, _)| *i == instance) {
            Some((_, c)) => c,
            None => {
                let nsid = ns.map_or(0, |n| n.nsid.0);
                q.cells
                    .push((instance, target.metrics.cell_for(ctrl, nsid, group)));
                match q.cells.last() {
                    Some((_, c)) => c,
                    None => return,
                }
            }
        };
        let req = &slot.req;
        let class = if q.ctx.qid.is_admin() {
            CLASS_OTHER
        } else {
            match req.opcode() {
                nvm::opcode::READ => CLASS_READ,
                nvm::opcode::WRITE => CLASS_WRITE,
                _ => CLASS_OTHER,
            }
        };
        let ok = req.status.is_success();
        let bytes = if ok { u64::from(req.plan.len) } else { 0 };
        let error = (!ok).then(|| u16::from(req.status.sct.bits()) << 8 | u16::from(req.status.sc));
        let latency_ns = stats::mono_ns().saturating_sub(slot.start);
        cell.record(class, bytes, latency_ns, error);
        // The high-water mark of command ages (an AER waits for an event by design).
        let longest = &self.stats.longest_command_ms;
        let ms = latency_ns / NS_PER_MS;
        if ms > longest.load(std::sync::atomic::Ordering::Relaxed)
            && !(q.ctx.qid.is_admin() && req.opcode() == admin::opcode::ASYNC_EVENT_REQUEST)
        {
            stats::set(longest, ms);
        }
    }

    /// The transport is done with slot `si`'s response: the slot is free again, and a
    /// Disconnect ends the queue.
    pub fn sent(&mut self, t: &mut T, qi: u16, si: u16) {
        if self.queue(qi).is_some_and(|q| q.dead) {
            return self.settle(t, qi, si);
        }
        if self.draining() {
            // Answered after the shutdown began (it was already executing).
            bump(&self.stats.drained, 1);
        }
        self.release_slot(t, qi, si);
        if self.queue(qi).is_some_and(|q| q.ctx.disconnect && !q.dead) {
            self.kill(t, qi, "host sent Disconnect", true);
        }
    }

    /// Returns a slot and its buffer; a live queue's transport reuses the slot.
    fn release_slot(&mut self, t: &mut T, qi: u16, si: u16) {
        let Some(q) = queue_at(&mut self.queues, qi) else {
            return;
        };
        let dead = q.dead;
        let Some(slot) = q.slots.get_mut(usize::from(si)) else {
            return;
        };
        slot.req.release();
        slot.host = HostData::None;
        slot.fuse = FuseLink::None;
        if let Some(id) = slot.lock.take() {
            self.target.locks.release(id);
        }
        if let Some(b) = slot.buf.take() {
            self.pool.free(b);
            stats::set(&self.stats.buffers_in_use, self.pool.in_use() as u64);
        }
        if slot.state == ReqState::Free {
            return;
        }
        queue::enter(slot, ReqState::Free, self.now_ns, &self.stats.states);
        if !dead {
            t.recycle(self, qi, si);
        }
    }

    /// Slot `si` of an ended queue has nothing more in flight: release it, and free
    /// the queue once none of its slots has.
    pub fn settle(&mut self, t: &mut T, qi: u16, si: u16) {
        self.release_slot(t, qi, si);
        self.maybe_free(t, qi);
    }

    /// Completes held Asynchronous Event Requests of admin queues whose controller
    /// has events.
    pub(super) fn serve_events(&mut self, t: &mut T) {
        for qi in 0..self.queues.len() {
            while let Some(q) = self.queues.get_mut(qi).and_then(Option::as_mut) {
                if q.dead {
                    break;
                }
                let Some((tg, ev)) = q.ctx.next_aer_completion() else {
                    break;
                };
                let (_, _, si) = tag_parts(tg);
                match q.slots.get_mut(usize::from(si)) {
                    Some(slot) if slot.state == ReqState::Held => {
                        slot.req.dw0 = ev;
                        self.complete(t, qi as u16, si);
                    }
                    _ => warn!(qid = %q.ctx.qid, "held AER tag {tg:#x} names no held command"),
                }
            }
        }
    }

    /// Ends queue `qi`: the transport closes its side, the queue leaves its controller,
    /// and slots with nothing in flight are released; the queue is freed once the rest
    /// finish.
    pub fn kill(&mut self, t: &mut T, qi: u16, why: &str, linger: bool) {
        match self.queue(qi) {
            Some(q) if !q.dead => {}
            _ => return,
        }
        t.close(self, qi, why, linger);
        bump(&self.stats.closed, 1);
        self.drop_held(qi);
        let Some(q) = self.queue_mut(qi) else { return };
        q.dead = true;
        q.ctx.teardown();
        q.icd = None;
        let n = q.slots.len();
        for si in 0..n {
            let keep = self
                .queue(qi)
                .and_then(|q| q.slots.get(si))
                .is_some_and(|s| match s.state {
                    ReqState::Executing => true,
                    ReqState::TransferringHostToController
                    | ReqState::TransferringControllerToHost => T::TRANSFERS_SETTLE_AFTER_CLOSE,
                    _ => false,
                });
            if !keep {
                self.release_slot(t, qi, si as u16);
            }
        }
        self.maybe_free(t, qi);
    }

    /// Frees an ended queue once nothing of it is in flight.
    fn maybe_free(&mut self, t: &mut T, qi: u16) {
        let free = self.queue(qi).is_some_and(|q| q.dead && q.in_flight() == 0);
        if !free {
            return;
        }
        if let Some(q) = self.queues.get_mut(usize::from(qi)).and_then(Option::take) {
            debug!(qid = %q.ctx.qid, "{} queue freed", T::NAME);
            t.freed(&q);
            self.load.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            stats::set(
                &self.stats.queues,
                self.queues.iter().flatten().count() as u64,
            );
        }
    }

    /// Returns a buffer the transport kept past its slot (data still being sent).
    pub fn free_buf(&mut self, b: PoolBuf) {
        self.pool.free(b);
        stats::set(&self.stats.buffers_in_use, self.pool.in_use() as u64);
    }

    fn take_gen(&mut self) -> u16 {
        let g = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        g
    }

    /// Queue id of queue `qi` (for logs).
    pub fn qid(&self, qi: u16) -> Qid {
        self.queue(qi).map_or(Qid(0), |q| q.ctx.qid)
    }
}
