//! The transport-independent command path, shaped like Linux nvmet.
//!
//! The poll-group runtime ([`crate::runtime`]) owns queues ([`QueueCtx`]) and request
//! slots ([`Request`]) and drives each command through the same steps on every fabric:
//!
//! 1. **parse** ([`parse`]): route by queue (connect / admin / I/O), validate the
//!    command against the controller state and the data length the SGL describes,
//!    and return a [`Plan`] (direction and length) or a precise [`Status`].
//! 2. the runtime **gets the data** (in-capsule, or by the fabric: R2T/H2CData, RDMA
//!    READ) into `req.data`.
//! 3. **execute** ([`execute`]): run it; either complete at once or submit backend
//!    I/O tagged with the runtime's tag ([`Outcome::Pending`]), or hold it
//!    (Asynchronous Event Request: [`Outcome::Held`]). A successful Connect installs
//!    the queue ([`QueueCtx::install`]).
//! 4. backend completions come back through [`ExecCtx::poll_backends`] and
//!    [`io_done`]; when it returns true the request is complete.
//! 5. the fabric sends controller-to-host data and the response built by
//!    [`QueueCtx::fill_cqe`]; the slot is recycled. Every request completes once.

#![forbid(unsafe_code)]

mod admin;
mod auth;
mod connect;
mod copy;
mod discovery;
mod fabrics;
mod identify;
mod io;
mod logs;
mod passthru;
mod resv;

use std::sync::Arc;
use std::time::Instant;

use nvmf_common::types::{Nsid, Qid};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::FABRICS_OPCODE;
use nvmf_common::wire::sqe::{self, Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};
use nvmf_verbs::DmaBuffer;

use crate::backend::{BackendError, DmaSlice, IoChannel, IoCompletion, IoOp};
use crate::controller::Controller;
use crate::namespace::Namespace;
use crate::params::PortInfo;
use crate::target::Target;

/// Direction of a command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDir {
    None,
    HostToCtrl,
    CtrlToHost,
}

/// What the transport must move for a parsed command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub dir: DataDir,
    pub len: u32,
}

impl Plan {
    pub const NONE: Plan = Plan {
        dir: DataDir::None,
        len: 0,
    };
}

/// Result of [`execute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `req.status` / `req.dw0` are final.
    Done,
    /// Backend I/O is in flight; finish with [`io_done`].
    Pending,
    /// An Asynchronous Event Request: keep the slot until an event arrives.
    Held,
}

/// One command's transport-independent state. Transports embed it in their slots.
pub struct Request {
    pub sqe: [u8; SQE_LEN],
    pub plan: Plan,
    /// Data buffer (registered memory) of `plan.len` bytes, when there is data.
    pub data: Option<DmaSlice>,
    pub status: Status,
    pub dw0: u32,
    pub dw1: u32,
    /// Backend operations still in flight.
    pending: u32,
    /// The namespace the command targets, kept alive while I/O runs.
    ns: Option<Arc<Namespace>>,
    /// Compare: the data read back from the backend; Verify and Copy: what they read.
    scratch: Option<Arc<DmaBuffer>>,
    /// What a command of several rounds (Copy) still has to issue.
    step: copy::Step,
}

impl Default for Request {
    fn default() -> Self {
        Request::new()
    }
}

impl Request {
    pub fn new() -> Self {
        Request {
            sqe: [0; SQE_LEN],
            plan: Plan::NONE,
            data: None,
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            pending: 0,
            ns: None,
            scratch: None,
            step: copy::Step::None,
        }
    }

    /// Resets the slot for a new command whose SQE is `sqe`.
    pub fn reset(&mut self, sqe: &[u8]) {
        let n = sqe.len().min(SQE_LEN);
        if let (Some(dst), Some(src)) = (self.sqe.get_mut(..n), sqe.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.plan = Plan::NONE;
        self.data = None;
        self.status = Status::SUCCESS;
        self.dw0 = 0;
        self.dw1 = 0;
        self.pending = 0;
        self.ns = None;
        self.scratch = None;
        self.step = copy::Step::None;
    }

    /// A copy of the command (64 bytes), so it can be read while `self` is mutated.
    pub fn cmd(&self) -> Sqe<[u8; SQE_LEN]> {
        Sqe::new_unchecked(self.sqe)
    }

    pub fn cid(&self) -> u16 {
        self.cmd().cid()
    }

    pub fn opcode(&self) -> u8 {
        self.cmd().opcode()
    }

    /// The namespace the command targets, once parsed (I/O commands).
    pub fn namespace(&self) -> Option<&Arc<Namespace>> {
        self.ns.as_ref()
    }

    /// Fails the request with `status`.
    pub fn fail(&mut self, status: Status) {
        self.status = status;
    }

    /// Writes `bytes` into the data buffer at `offset` (controller-to-host data).
    /// Bytes past the buffer are dropped; the caller sized the buffer from the command.
    pub fn write_data(&self, offset: usize, bytes: &[u8]) {
        if let Some(d) = &self.data {
            let room = d.len.saturating_sub(offset);
            let n = bytes.len().min(room);
            if let Some(src) = bytes.get(..n) {
                d.buf.write_at(d.offset + offset, src);
            }
        }
    }

    /// Reads host-to-controller data at `offset` into `out`; false if it is short.
    pub fn read_data(&self, offset: usize, out: &mut [u8]) -> bool {
        match &self.data {
            Some(d) if offset.checked_add(out.len()).is_some_and(|e| e <= d.len) => {
                d.buf.read_at(d.offset + offset, out)
            }
            _ => false,
        }
    }

    /// Drops the buffers and namespace reference once the request is finished.
    pub fn release(&mut self) {
        self.data = None;
        self.ns = None;
        self.scratch = None;
        self.step = copy::Step::None;
    }
}

/// Per-queue state, owned by the transport connection.
pub struct QueueCtx {
    /// The queue id, set by a successful Connect (0 before).
    pub qid: Qid,
    /// The queue id the fabric named before the Connect (NVMe/RDMA: the CM private
    /// data), which the Connect must repeat. None where the Connect alone names the
    /// queue (NVMe/TCP).
    pub bound_qid: Option<Qid>,
    /// 0-based size of the submission queue (Connect SQSIZE).
    pub sqsize: u16,
    /// Connect CATTR asked to disable SQ flow control (SQHD not reported as such; on
    /// NVMe/TCP a successful read may end with its last C2HData).
    pub sq_flow_disabled: bool,
    pub ctrl: Option<Arc<Controller>>,
    pub port: Arc<PortInfo>,
    /// Submission queue head, reported in every CQE.
    pub sq_head: u16,
    /// The queue ends after the current response (Disconnect, fatal controller).
    pub disconnect: bool,
    /// Transport tags of held Asynchronous Event Requests.
    pub held_aers: Vec<u64>,
    /// DH-HMAC-CHAP state, when the queue's controller asks for authentication.
    pub auth: Option<Box<nvmf_common::auth::ControllerAuth>>,
    /// When the authentication transaction under way expires.
    pub auth_deadline: Option<Instant>,
    /// The host and subsystem the connection's TLS PSK identity named (NVMe/TCP on a
    /// TLS port): its Connect must name the same.
    pub tls: Option<Arc<nvmf_common::tls::TlsPeer>>,
}

impl QueueCtx {
    /// A queue the fabric bound to `qid` with `sqsize` before its Connect.
    pub fn new(qid: Qid, sqsize: u16, port: Arc<PortInfo>) -> Self {
        QueueCtx {
            qid,
            bound_qid: Some(qid),
            sqsize,
            sq_flow_disabled: false,
            ctrl: None,
            port,
            sq_head: 0,
            disconnect: false,
            held_aers: Vec::new(),
            auth: None,
            auth_deadline: None,
            tls: None,
        }
    }

    /// A queue whose id and size its Connect will name.
    pub fn unbound(port: Arc<PortInfo>) -> Self {
        QueueCtx {
            bound_qid: None,
            ..QueueCtx::new(Qid(0), 0, port)
        }
    }

    /// Installs the queue a successful Connect named. The Connect was the queue's
    /// first command, so the SQ head has moved past exactly one entry.
    pub(crate) fn install(&mut self, qid: Qid, sqsize: u16, cattr: u8) {
        self.qid = qid;
        self.sqsize = sqsize;
        self.sq_head = 1;
        self.sq_flow_disabled = cattr & nvmf_common::wire::fabrics::cattr::DISABLE_SQFLOW != 0;
    }

    /// Advances the SQ head for a newly fetched command (flow control).
    #[inline]
    pub fn advance_sq_head(&mut self) {
        self.sq_head = if self.sq_head >= self.sqsize {
            0
        } else {
            self.sq_head + 1
        };
    }

    /// Encodes the response capsule for `req` into `out` (16 bytes), and records
    /// failures in the controller's error log.
    pub fn fill_cqe(&self, req: &Request, out: &mut [u8]) {
        if !req.status.is_success() {
            if let Some(c) = &self.ctrl {
                let cmd = req.cmd();
                c.record_error(self.qid, cmd.cid(), cmd.opcode(), cmd.nsid(), req.status);
            }
        }
        let mut cqe = Cqe::new_unchecked(out);
        cqe.set_dw0(req.dw0);
        cqe.set_dw1(req.dw1);
        cqe.set_sqhd(self.sq_head);
        cqe.set_sqid(self.qid.0);
        cqe.set_cid(req.cid());
        cqe.set_status(req.status);
    }

    /// Pairs the oldest held Asynchronous Event Request with the controller's next
    /// event: returns the request's transport tag and its completion dword 0.
    pub fn next_aer_completion(&mut self) -> Option<(u64, u32)> {
        if self.held_aers.is_empty() {
            return None;
        }
        let ctrl = self.ctrl.as_ref()?;
        if !ctrl.has_events() {
            return None;
        }
        let ev = ctrl.pop_event()?;
        Some((self.held_aers.remove(0), ev))
    }

    /// Whether keep-alive waits: the queue's authentication has not completed or a
    /// re-authentication is under way (the transaction has its own deadline).
    pub fn keep_alive_paused(&self) -> bool {
        self.auth
            .as_ref()
            .is_some_and(|a| !a.is_authenticated() || a.in_transaction())
    }

    /// Why this queue's controller must end now, if it must: its authentication
    /// failed (and the grace passed) or its transaction stalled past the deadline.
    pub fn auth_expired(&self, now: Instant) -> Option<&'static str> {
        if self.auth_deadline.is_none_or(|d| now < d) {
            return None;
        }
        Some(match &self.auth {
            Some(a) if a.must_end() => "DH-HMAC-CHAP authentication failed",
            _ => "DH-HMAC-CHAP transaction timed out",
        })
    }

    /// Releases what the queue holds in its controller; called once when it ends.
    pub fn teardown(&mut self) {
        if let (Some(a), Some(c)) = (&self.auth, &self.ctrl) {
            if !a.is_authenticated() && !a.must_end() {
                tracing::warn!(
                    qid = %self.qid, cntlid = %c.cntlid, host = %c.hostnqn,
                    "queue closed before DH-HMAC-CHAP authentication completed"
                );
            }
        }
        if let Some(c) = self.ctrl.take() {
            if self.qid.is_admin() {
                c.release();
            } else {
                c.release_io_queue(self.qid);
            }
        }
        self.held_aers.clear();
    }
}

/// Per-thread execution context: backend channels opened by this poll group.
pub struct ExecCtx {
    pub target: Arc<Target>,
    /// The poll loop's clock for this iteration (keep-alive bookkeeping); set with
    /// [`ExecCtx::set_now`].
    pub now: Instant,
    /// `now` on the keep-alive clock ([`crate::controller::keep_alive_ms`]), converted
    /// once a pass: every command touches its controller with it.
    pub now_ms: u64,
    channels: crate::fastmap::FastMap<u64, Box<dyn IoChannel>>,
    dirty: Vec<u64>,
    reaped: Vec<IoCompletion>,
    /// The namespace retirement epoch the channel cache was last pruned at.
    seen_epoch: u64,
}

impl ExecCtx {
    pub fn new(target: Arc<Target>) -> Self {
        let now = Instant::now();
        ExecCtx {
            target,
            now,
            now_ms: crate::controller::keep_alive_ms(now),
            channels: crate::fastmap::FastMap::default(),
            dirty: Vec::new(),
            reaped: Vec::with_capacity(256),
            seen_epoch: crate::namespace::ns_retired_epoch(),
        }
    }

    /// The poll loop's clock for the pass that begins.
    pub fn set_now(&mut self, now: Instant) {
        self.now = now;
        self.now_ms = crate::controller::keep_alive_ms(now);
    }

    /// Closes the backend channels of namespaces no longer served (removed or resized
    /// away) once their I/O has drained. Cheap when nothing was retired: one load.
    fn prune_channels(&mut self) {
        let epoch = crate::namespace::ns_retired_epoch();
        if epoch == self.seen_epoch {
            return;
        }
        let live: std::collections::HashSet<u64> = self
            .target
            .subsystems()
            .iter()
            .flat_map(|s| s.namespace_instances())
            .collect();
        self.channels
            .retain(|id, ch| live.contains(id) || ch.in_flight() > 0);
        // Channels still draining are looked at again on the next flush.
        if self.channels.keys().all(|id| live.contains(id)) {
            self.seen_epoch = epoch;
        }
    }

    /// Backend channels open on this thread (tests: none leak after a removal).
    pub fn open_channels(&self) -> usize {
        self.channels.len()
    }

    /// This thread's channel to `ns`, opened on first use (on every I/O: inline).
    #[inline(always)]
    fn channel(&mut self, ns: &Namespace) -> Result<&mut Box<dyn IoChannel>, BackendError> {
        Ok(match self.channels.entry(ns.instance) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(ns.backend.open_channel()?),
        })
    }

    /// `ns`'s channel has operations for the next [`ExecCtx::flush`].
    #[inline(always)]
    fn mark_dirty(&mut self, ns: &Namespace) {
        if !self.dirty.contains(&ns.instance) {
            self.dirty.push(ns.instance);
        }
    }

    fn submit(&mut self, ns: &Namespace, tag: u64, op: IoOp) -> Result<(), BackendError> {
        self.channel(ns)?.submit(tag, op)?;
        self.mark_dirty(ns);
        Ok(())
    }

    /// [`IoChannel::submit_compare_and_write`] on `ns`'s channel of this thread.
    fn submit_compare_and_write(
        &mut self,
        ns: &Namespace,
        tag: u64,
        op: crate::backend::CompareAndWrite,
    ) -> Result<(), BackendError> {
        self.channel(ns)?.submit_compare_and_write(tag, op)?;
        self.mark_dirty(ns);
        Ok(())
    }

    /// [`IoChannel::submit_passthru`] on `ns`'s channel of this thread.
    fn submit_passthru(
        &mut self,
        ns: &Namespace,
        tag: u64,
        cmd: crate::backend::PassthruCmd,
    ) -> Result<(), BackendError> {
        self.channel(ns)?.submit_passthru(tag, cmd)?;
        self.mark_dirty(ns);
        Ok(())
    }

    /// An admin command of passthru subsystem `pt`, to its admin worker through this
    /// thread's channel for it.
    fn submit_device_admin(
        &mut self,
        pt: &Arc<crate::passthru::serve::PassthruSubsystem>,
        tag: u64,
        cmd: crate::backend::PassthruCmd,
    ) -> Result<(), BackendError> {
        let ch = match self.channels.entry(pt.admin_instance) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(pt.admin_channel()?),
        };
        ch.submit_passthru(tag, cmd)
    }

    /// Issues queued backend I/O (one system call per io_uring channel).
    pub fn flush(&mut self) {
        self.prune_channels();
        for id in self.dirty.drain(..) {
            if let Some(ch) = self.channels.get_mut(&id) {
                ch.flush();
            }
        }
    }

    /// Reaps finished backend I/O into `out`; returns how many.
    pub fn poll_backends(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        self.flush();
        let before = out.len();
        for ch in self.channels.values_mut() {
            if ch.in_flight() > 0 {
                ch.poll(out);
            }
        }
        out.len() - before
    }

    /// Backend I/O not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.channels.values().map(|c| c.in_flight()).sum()
    }

    /// File descriptors to wait on for backend completions, each with the namespace
    /// instance whose channel owns it (a closed channel's number may be reused by the
    /// next channel opened, which must then be watched anew).
    pub fn event_fds(&self) -> Vec<(u64, std::os::fd::RawFd)> {
        self.channels
            .iter()
            .filter_map(|(&id, c)| c.event_fd().map(|fd| (id, fd)))
            .collect()
    }

    /// Scratch vector for callers that reap into a reused buffer.
    pub fn take_reaped(&mut self) -> Vec<IoCompletion> {
        std::mem::take(&mut self.reaped)
    }

    pub fn put_reaped(&mut self, mut v: Vec<IoCompletion>) {
        v.clear();
        self.reaped = v;
    }
}

/// Step 1: validates `req.sqe` on queue `q`, given the data length the transport's SGL
/// describes. On success `req.plan` is set.
pub fn parse(q: &QueueCtx, target: &Target, req: &mut Request, sgl_len: u32) -> Result<(), Status> {
    let mut plan = parse_inner(q, target, req, sgl_len)?;
    if plan.len < sgl_len && longer_sgl_allowed(q, req) && sgl_len <= target.params.max_io_size {
        // nvmet_check_data_len_lte: Dataset Management may carry more than its ranges
        // (the Linux host sends a whole page for a discard); SPDK reads only the ranges
        // too. The whole SGL is moved; the ranges are read from its start.
        plan.len = sgl_len;
    }
    if plan.len > target.params.max_io_size {
        // Larger than MDTS (e.g. a Get Log Page with a huge NUMD): no buffer could hold it.
        tracing::debug!(qid = %q.qid, cid = req.cid(), len = plan.len, "transfer larger than MDTS");
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::CDW10, 0));
    }
    if plan.len != sgl_len {
        // nvmet_check_transfer_len: the SGL must describe exactly the command's data.
        tracing::debug!(
            qid = %q.qid, cid = req.cid(), opcode = req.opcode(),
            "data length {} in SGL does not match the command's {}", sgl_len, plan.len
        );
        return Err(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0));
    }
    req.plan = plan;
    Ok(())
}

fn parse_inner(
    q: &QueueCtx,
    target: &Target,
    req: &mut Request,
    sgl_len: u32,
) -> Result<Plan, Status> {
    let cmd = req.cmd();
    let flags = cmd.flags();
    if cmd.fuse() != sqe::fuse::NORMAL && !fusable(q, &cmd) {
        // nvmet refuses every fused command; SPDK and we take Compare and Write only.
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::FLAGS, 0));
    }
    if cmd.psdt() != sqe::psdt::SGL_MPTR_CONTIGUOUS {
        // Fabrics commands always describe data with SGLs.
        let _ = flags;
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(sqe::offset::FLAGS, 6));
    }
    let opcode = cmd.opcode();
    let Some(ctrl) = q.ctrl.as_ref() else {
        return fabrics::parse_connect(req);
    };
    if ctrl.is_dead() {
        return Err(Status::generic_retryable(generic::COMMAND_SEQUENCE_ERROR));
    }
    if let Some(st) = auth::gate(q, req) {
        return Err(st);
    }
    if opcode == FABRICS_OPCODE {
        return fabrics::parse(q, req);
    }
    if !ctrl.is_ready() {
        tracing::debug!(qid = %q.qid, opcode, "command while CC.EN == 0 or CSTS.RDY == 0");
        return Err(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
    }
    let device = ctrl.subsys.passthru();
    if q.qid.is_admin() {
        if ctrl.subsys.is_discovery() {
            discovery::parse(ctrl, req)
        } else if let Some(routed) = device.and_then(|d| passthru::parse_admin(d, req, sgl_len)) {
            routed
        } else {
            admin::parse(ctrl, target, req)
        }
    } else if device.is_some() {
        passthru::parse_io(ctrl, req, sgl_len)
    } else {
        io::parse(ctrl, req)
    }
}

/// Whether the command's SGL may describe more data than the command uses: Dataset
/// Management on an I/O queue (the one command nvmet checks with `_lte`).
fn longer_sgl_allowed(q: &QueueCtx, req: &Request) -> bool {
    !q.qid.is_admin() && req.opcode() == nvmf_common::wire::nvm::opcode::DATASET_MANAGEMENT
}

/// Whether `cmd` may be half of a fused operation: Compare (first) and Write (second)
/// on an I/O queue, the only pair FUSES advertises.
fn fusable(q: &QueueCtx, cmd: &Sqe<[u8; SQE_LEN]>) -> bool {
    use nvmf_common::wire::nvm::opcode;
    if q.qid.is_admin() || q.ctrl.is_none() {
        return false;
    }
    matches!(
        (cmd.fuse(), cmd.opcode()),
        (sqe::fuse::FIRST, opcode::COMPARE) | (sqe::fuse::SECOND, opcode::WRITE)
    )
}

/// The bytes a parsed I/O command reads or writes, when its SQE names them (Read,
/// Write, Compare, Write Zeroes, Verify).
pub fn io_extent(req: &Request) -> Option<crate::locks::Extent> {
    use nvmf_common::wire::nvm::{self, opcode};
    let ns = req.ns.as_ref()?;
    match req.opcode() {
        opcode::READ | opcode::WRITE | opcode::COMPARE | opcode::WRITE_ZEROES | opcode::VERIFY => {
            let cmd = req.cmd();
            let start = nvm::rw_slba(&cmd).checked_shl(ns.block_size_shift)?;
            let len = u64::from(nvm::rw_nlb(&cmd)) << ns.block_size_shift;
            Some(crate::locks::Extent {
                ns: ns.instance,
                start,
                end: start.saturating_add(len),
            })
        }
        _ => None,
    }
}

/// What a parsed I/O command may change, for range locks: its range for Write and
/// Write Zeroes, the whole namespace for the commands whose ranges are in their data
/// (Dataset Management, Copy); None for commands that change no data.
pub fn write_extent(req: &Request) -> Option<crate::locks::Extent> {
    use nvmf_common::wire::nvm::opcode;
    let ns = req.ns.as_ref()?;
    match req.opcode() {
        opcode::WRITE | opcode::WRITE_ZEROES => io_extent(req),
        opcode::DATASET_MANAGEMENT | opcode::COPY => Some(crate::locks::Extent::whole(ns.instance)),
        _ => None,
    }
}

pub use io::compare_and_write;

/// Step 3: runs a parsed command whose data (if host-to-controller) is in `req.data`.
pub fn execute(q: &mut QueueCtx, ex: &mut ExecCtx, req: &mut Request, tag: u64) -> Outcome {
    if let Some(c) = &q.ctrl {
        c.touch_ms(ex.now_ms);
    }
    let opcode = req.opcode();
    if opcode == FABRICS_OPCODE {
        return fabrics::execute(q, ex, req);
    }
    let Some(ctrl) = q.ctrl.as_ref() else {
        req.fail(Status::generic_dnr(generic::COMMAND_SEQUENCE_ERROR));
        return Outcome::Done;
    };
    if ctrl.is_dead() {
        // The association ended while the command waited for its data (R2T/H2CData,
        // RDMA READ): nothing of it reaches the backend. The host may retry elsewhere.
        tracing::debug!(qid = %q.qid, cid = req.cid(), "controller gone before execution");
        req.fail(Status::generic_retryable(generic::ABORTED_SQ_DELETION));
        return Outcome::Done;
    }
    if !q.qid.is_admin() {
        // I/O borrows the controller; only the admin paths below lend `q` out too.
        return if ctrl.subsys.passthru().is_some() {
            passthru::execute_io(ex, req, tag)
        } else {
            io::execute(ctrl, ex, req, tag)
        };
    }
    let ctrl = Arc::clone(ctrl);
    let device = ctrl.subsys.passthru();
    if ctrl.subsys.is_discovery() {
        discovery::execute(q, &ctrl, ex, req, tag)
    } else if let Some(d) = device.filter(|d| passthru::is_device_admin(d, req)) {
        passthru::execute_admin(d, &ctrl, ex, req, tag)
    } else {
        admin::execute(q, &ctrl, ex, req, tag)
    }
}

/// Step 4: a backend operation of `req` (tagged `tag`) finished. Returns true when
/// the request is complete: all its operations are done and no further round (the
/// write of a Copy) is left to issue on `ex`.
pub fn io_done(
    ex: &mut ExecCtx,
    req: &mut Request,
    tag: u64,
    result: crate::backend::IoResult,
) -> bool {
    match result {
        // A passthru command's result dwords go back as the device gave them.
        Ok(r) if r != crate::backend::CqeResult::NONE => (req.dw0, req.dw1) = (r.dw0, r.dw1),
        Ok(_) => {}
        Err(e) => backend_failed(req, e),
    }
    req.pending = req.pending.saturating_sub(1);
    if req.pending > 0 {
        return false;
    }
    if req.step != copy::Step::None {
        if !req.status.is_success() {
            req.step = copy::Step::None;
        } else {
            match copy::continue_copy(ex, req, tag) {
                Ok(0) => {}
                Ok(n) => {
                    req.pending = n;
                    return false;
                }
                Err(s) => req.fail(s),
            }
        }
    }
    io::finish(req);
    true
}

/// Records a failed backend operation of `req`; the first failure is the status.
fn backend_failed(req: &mut Request, e: BackendError) {
    if !req.status.is_success() {
        return;
    }
    match e {
        // The device's own answer: its status and result, unchanged.
        BackendError::Device { status, result } => {
            tracing::debug!(cid = req.cid(), opcode = req.opcode(), %status, "device error status");
            (req.status, req.dw0, req.dw1) = (status, result.dw0, result.dw1);
            return;
        }
        // An answer, not a fault: clustered hosts (VMware's ATS heartbeats)
        // miscompare all the time.
        BackendError::Miscompare => {
            tracing::debug!(cid = req.cid(), "compare and write: miscompare")
        }
        _ => tracing::warn!(cid = req.cid(), opcode = req.opcode(), "backend error: {e}"),
    }
    req.status = e.status();
}

/// Finds namespace `nsid` for an I/O or admin command.
#[inline]
pub(crate) fn find_ns(ctrl: &Controller, nsid: u32) -> Result<Arc<Namespace>, Status> {
    if nsid == 0 || nsid == Nsid::BROADCAST.0 {
        return Err(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
    }
    // A namespace its host may not see is, to it, inactive (SPDK: nvmf_ctrlr_get_ns).
    ctrl.namespace(Nsid(nsid))
        .ok_or(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0))
}
