//! The NVMe side of a map worker: block requests in, NVMe commands out, answers back.
//!
//! Owned by `map`; used by the NBD worker and the ublk queue loop alike. An [`Engine`]
//! owns one command slot per command it may keep in flight on its queue, each with a
//! registered buffer allocated once. Requests ([`Engine::start`]) are split by
//! [`super::plan`] and their commands issued as slots free up ([`Engine::submit`]); a
//! request is [`Done`] when its last command completed ([`Engine::complete`]), with
//! the READ data assembled and the first error (as an NBD/errno value) kept.
//! When the queue breaks, [`Engine::lost`] retries the commands that were in flight on
//! the next queue or fails their requests with EIO.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use nvmf_common::types::Nsid;
use nvmf_common::wire::nvm::{self, control};
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{generic, Sct, Status};

use super::plan::{Geometry, Op, Piece, Plan};
use super::proto::{errno, Request};
use crate::command::{self, SqeBytes};
use crate::error::Error;
use crate::queue::{Completion, Queue};
use crate::transport::{DataDir, Fabric, IoBuf};

/// A finished request.
#[derive(Debug)]
pub struct Done {
    /// The caller's token given to [`Engine::start`].
    pub token: u64,
    pub kind: u16,
    pub handle: u64,
    pub offset: u64,
    /// READ data (empty for other commands); give it back with [`Engine::recycle`].
    pub data: Vec<u8>,
    /// The error to report (an errno value) and why.
    pub error: Option<(u32, String)>,
}

struct Slot {
    buf: IoBuf,
    req: usize,
    piece: Piece,
    /// Times the command was issued again after a status without DNR.
    retries: u8,
}

/// How many times a command answered with a status without Do Not Retry is issued
/// again before its request fails: Linux's `nvme_max_retries` default. A controller
/// ending an association answers what it cannot run any more that way (Command
/// Aborted due to SQ Deletion, Command Sequence Error) and the command belongs on the
/// next queue, not in an EIO to the block device.
pub(super) const MAX_RETRIES: u8 = 5;

struct Req {
    token: u64,
    kind: u16,
    handle: u64,
    offset: u64,
    plan: Plan,
    /// WRITE payload, or READ data being assembled.
    data: Vec<u8>,
    outstanding: u32,
    error: Option<(u32, String)>,
}

pub struct Engine {
    nsid: Nsid,
    geometry: Geometry,
    slots: Vec<Slot>,
    free_slots: Vec<usize>,
    reqs: Vec<Option<Req>>,
    free_reqs: Vec<usize>,
    /// Requests with commands still to issue, oldest first.
    ready: VecDeque<usize>,
    pool: Vec<Vec<u8>>,
    inflight: usize,
    commands: u64,
    /// Slots whose command was in flight on a queue that broke: issued again first.
    retry: Vec<usize>,
}

impl Engine {
    /// An engine for `depth` commands in flight (at most the queue's capacity), with
    /// buffers from `fabric`.
    pub fn new(
        fabric: &Arc<dyn Fabric>,
        nsid: Nsid,
        geometry: Geometry,
        depth: usize,
    ) -> Result<Engine, Error> {
        let bs = geometry.block_size as usize;
        let slot_len = (geometry.chunk_blocks as usize * bs).max(nvm::DSM_RANGE_LEN);
        let depth = depth.max(1);
        let mut slots = Vec::with_capacity(depth);
        for _ in 0..depth {
            slots.push(Slot {
                buf: fabric.alloc(slot_len)?,
                req: 0,
                piece: Piece::Flush,
                retries: 0,
            });
        }
        Ok(Engine {
            nsid,
            geometry,
            slots,
            free_slots: (0..depth).rev().collect(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            ready: VecDeque::new(),
            pool: Vec::new(),
            inflight: 0,
            commands: 0,
            retry: Vec::new(),
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// NVMe commands in flight.
    pub fn inflight(&self) -> usize {
        self.inflight + self.retry.len()
    }

    /// NVMe commands issued so far.
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// Requests accepted and not yet done.
    pub fn pending(&self) -> usize {
        self.reqs.len() - self.free_reqs.len()
    }

    /// A data vector from the pool (cleared).
    pub fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    /// Gives a [`Done::data`] (or [`Engine::take_buf`]) vector back.
    pub fn recycle(&mut self, mut data: Vec<u8>) {
        data.clear();
        self.pool.push(data);
    }

    /// Accepts a validated request: `op` from [`super::plan::check`], `data` its WRITE
    /// payload (taken) or any vector (reused for READ data).
    pub fn start(&mut self, token: u64, r: &Request, op: Op, mut data: Vec<u8>) {
        if matches!(op, Op::Read) {
            data.clear();
            data.resize(r.length as usize, 0);
        }
        let req = Req {
            token,
            kind: r.kind,
            handle: r.handle,
            offset: r.offset,
            plan: Plan::new(op, r, &self.geometry),
            data,
            outstanding: 0,
            error: None,
        };
        let id = match self.free_reqs.pop() {
            Some(i) => {
                if let Some(s) = self.reqs.get_mut(i) {
                    *s = Some(req);
                }
                i
            }
            None => {
                self.reqs.push(Some(req));
                self.reqs.len() - 1
            }
        };
        self.ready.push_back(id);
    }

    /// Issues commands while slots are free; requests that finish without a command
    /// (zero length, a command that could not be built) go to `done`. Returns true
    /// if anything was submitted (the caller flushes the queue).
    pub fn submit(&mut self, q: &mut Queue, done: &mut Vec<Done>) -> Result<bool, Error> {
        let mut any = false;
        let now = Instant::now();
        while let Some(&s) = self.retry.last() {
            let Some((id, piece)) = self.slots.get(s).map(|sl| (sl.req, sl.piece)) else {
                self.retry.pop();
                continue;
            };
            self.issue(q, s, id, piece, now)?;
            self.retry.pop();
            self.inflight += 1;
            self.commands += 1;
            any = true;
        }
        while let Some(&id) = self.ready.front() {
            let Some(&s) = self.free_slots.last() else {
                break;
            };
            let Some(Some(req)) = self.reqs.get_mut(id) else {
                self.ready.pop_front();
                continue;
            };
            if req.error.is_some() {
                req.plan.abandon();
            }
            let (next, last, outstanding) =
                (req.plan.next_piece(), req.plan.is_done(), req.outstanding);
            let Some(piece) = next else {
                self.ready.pop_front();
                if outstanding == 0 {
                    self.finish(id, done);
                }
                continue;
            };
            if last {
                self.ready.pop_front();
            }
            // A new command: none of its tries used yet.
            if let Some(sl) = self.slots.get_mut(s) {
                sl.retries = 0;
            }
            match self.issue(q, s, id, piece, now) {
                Ok(()) => {
                    self.free_slots.pop();
                    self.inflight += 1;
                    self.commands += 1;
                    any = true;
                    if let Some(Some(req)) = self.reqs.get_mut(id) {
                        req.outstanding += 1;
                    }
                }
                Err(e) if !e.is_fatal() => {
                    // Not sent: the request fails with what it has.
                    let mut finished = false;
                    if let Some(Some(req)) = self.reqs.get_mut(id) {
                        req.error.get_or_insert((errno::EINVAL, e.to_string()));
                        req.plan.abandon();
                        finished = req.outstanding == 0;
                    }
                    if finished {
                        if self.ready.front() == Some(&id) {
                            self.ready.pop_front();
                        }
                        self.finish(id, done);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(any)
    }

    fn issue(
        &mut self,
        q: &mut Queue,
        s: usize,
        id: usize,
        piece: Piece,
        now: Instant,
    ) -> Result<(), Error> {
        let nsid = self.nsid;
        let bs = self.geometry.block_size as usize;
        let slot = self
            .slots
            .get_mut(s)
            .ok_or_else(|| Error::Protocol(format!("no command slot {s}")))?;
        let short = || Error::InvalidArgument("command larger than its buffer".into());
        let (sqe, data, dir): (SqeBytes, Option<IoBuf>, DataDir) = match piece {
            Piece::Read { lba, nblocks, .. } => (
                command::read(nsid, lba, nblocks, false)?,
                Some(slot.buf.slice(0, nblocks as usize * bs).ok_or_else(short)?),
                DataDir::FromCtrl,
            ),
            Piece::Write {
                lba,
                nblocks,
                offset,
                fua,
            } => {
                let len = nblocks as usize * bs;
                let src = self
                    .reqs
                    .get(id)
                    .and_then(Option::as_ref)
                    .and_then(|r| r.data.get(offset..offset + len))
                    .ok_or_else(short)?;
                let d = slot.buf.slice(0, len).ok_or_else(short)?;
                if !d.write_at(0, src) {
                    return Err(short());
                }
                (
                    command::write(nsid, lba, nblocks, fua)?,
                    Some(d),
                    DataDir::ToCtrl,
                )
            }
            Piece::Flush => (command::flush(nsid), None, DataDir::None),
            Piece::Deallocate { lba, nblocks } => {
                let range = command::dsm_range_data(&[(lba, nblocks)]);
                let d = slot.buf.slice(0, range.len()).ok_or_else(short)?;
                if !d.write_at(0, &range) {
                    return Err(short());
                }
                (command::deallocate(nsid, 1)?, Some(d), DataDir::ToCtrl)
            }
            Piece::WriteZeroes {
                lba,
                nblocks,
                deac,
                fua,
            } => {
                let mut b = command::write_zeroes(nsid, lba, nblocks, deac)?;
                let mut sqe = Sqe::new_unchecked(&mut b[..]);
                nvm::set_rw_control_bit(&mut sqe, control::FUA, fua);
                (b, None, DataDir::None)
            }
        };
        slot.req = id;
        slot.piece = piece;
        q.submit_at(sqe, data.as_ref(), dir, s as u64, now)?;
        Ok(())
    }

    /// Accounts one NVMe completion; a request it finishes goes to `done`.
    pub fn complete(&mut self, c: &Completion, done: &mut Vec<Done>) {
        let s = c.tag as usize;
        let Some(slot) = self.slots.get_mut(s) else {
            return;
        };
        let (id, piece) = (slot.req, slot.piece);
        self.inflight = self.inflight.saturating_sub(1);
        if !c.status.is_success() && !c.status.dnr && slot.retries < MAX_RETRIES {
            // Issued again first by the next `submit` (as Linux's nvme_retry_req).
            slot.retries += 1;
            self.retry.push(s);
            return;
        }
        self.free_slots.push(s);
        let Some(Some(req)) = self.reqs.get_mut(id) else {
            return;
        };
        req.outstanding = req.outstanding.saturating_sub(1);
        if !c.status.is_success() {
            let why = if c.is_host_timeout() {
                "no response before the command timeout".to_string()
            } else {
                c.status.to_string()
            };
            req.error.get_or_insert((nbd_errno(c.status), why));
        } else if let Piece::Read {
            nblocks, offset, ..
        } = piece
        {
            let len = nblocks as usize * self.geometry.block_size as usize;
            let ok = match (req.data.get_mut(offset..offset + len), self.slots.get(s)) {
                (Some(dst), Some(slot)) => slot.buf.read_at(0, dst),
                _ => false,
            };
            if !ok {
                req.error
                    .get_or_insert((errno::EIO, "read buffer unreadable".into()));
            }
        }
        if req.outstanding == 0 && (req.plan.is_done() || req.error.is_some()) {
            req.plan.abandon();
            if let Some(p) = self.ready.iter().position(|&r| r == id) {
                self.ready.remove(p);
            }
            self.finish(id, done);
        }
    }

    /// The queue broke: the commands in flight on it are issued again on the next
    /// queue (`retry`) or their requests fail with EIO, and go to `done` once nothing
    /// of them is in flight. Call before giving [`Engine::submit`] a new queue.
    pub fn lost(&mut self, retry: bool, done: &mut Vec<Done>) {
        let lost: Vec<usize> = (0..self.slots.len())
            .filter(|s| !self.free_slots.contains(s) && !self.retry.contains(s))
            .collect();
        self.inflight = 0;
        if retry {
            self.retry.extend(lost);
            return;
        }
        let mut fail: Vec<usize> = std::mem::take(&mut self.retry);
        fail.extend(lost);
        for s in fail {
            self.free_slots.push(s);
            let Some(id) = self.slots.get(s).map(|sl| sl.req) else {
                continue;
            };
            let Some(Some(req)) = self.reqs.get_mut(id) else {
                continue;
            };
            req.outstanding = req.outstanding.saturating_sub(1);
            req.error
                .get_or_insert((errno::EIO, "connection to the target lost".into()));
            if req.outstanding == 0 {
                req.plan.abandon();
                if let Some(p) = self.ready.iter().position(|&r| r == id) {
                    self.ready.remove(p);
                }
                self.finish(id, done);
            }
        }
    }

    /// Fails every request not answered yet with EIO and `why`: those in flight on a
    /// broken queue, those waiting for a retry and those not issued at all
    /// (`fast_io_fail_tmo` passed while reconnecting).
    pub fn fail_all(&mut self, why: &str, done: &mut Vec<Done>) {
        for req in self.reqs.iter_mut().flatten() {
            req.error.get_or_insert((errno::EIO, why.to_owned()));
        }
        self.lost(false, done);
        for id in std::mem::take(&mut self.ready) {
            let idle = match self.reqs.get_mut(id) {
                Some(Some(req)) => {
                    req.plan.abandon();
                    req.outstanding == 0
                }
                _ => false,
            };
            if idle {
                self.finish(id, done);
            }
        }
    }

    fn finish(&mut self, id: usize, done: &mut Vec<Done>) {
        let Some(req) = self.reqs.get_mut(id).and_then(Option::take) else {
            return;
        };
        self.free_reqs.push(id);
        let mut data = req.data;
        if req.kind != super::proto::cmd::READ || req.error.is_some() {
            data.clear();
        }
        done.push(Done {
            token: req.token,
            kind: req.kind,
            handle: req.handle,
            offset: req.offset,
            data,
            error: req.error,
        });
    }
}

/// The NBD error (an errno value) for an NVMe status.
pub fn nbd_errno(s: Status) -> u32 {
    match (s.sct, s.sc) {
        (Sct::Generic, generic::NS_WRITE_PROTECTED) => errno::EPERM,
        (Sct::Generic, generic::CAPACITY_EXCEEDED) => errno::ENOSPC,
        (Sct::Generic, generic::LBA_OUT_OF_RANGE) => errno::EINVAL,
        (Sct::Generic, generic::INVALID_OPCODE) => errno::ENOTSUP,
        (Sct::Generic, generic::INVALID_FIELD) => errno::EINVAL,
        _ => errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::status::media;

    #[test]
    fn errno_mapping() {
        assert_eq!(
            nbd_errno(Status::generic_dnr(generic::NS_WRITE_PROTECTED)),
            errno::EPERM
        );
        assert_eq!(
            nbd_errno(Status::generic_dnr(generic::CAPACITY_EXCEEDED)),
            errno::ENOSPC
        );
        assert_eq!(
            nbd_errno(Status::generic_dnr(generic::INVALID_OPCODE)),
            errno::ENOTSUP
        );
        assert_eq!(
            nbd_errno(Status::media_retryable(media::UNRECOVERED_READ_ERROR)),
            errno::EIO
        );
    }
}
