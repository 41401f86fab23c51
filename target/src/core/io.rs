//! NVM I/O commands: Read, Write, Compare, Flush, Write Zeroes, Dataset Management;
//! Verify and Copy in [`super::copy`].
//!
//! Parse validates the namespace, the LBA range and the transfer length; execute turns
//! the command into backend operations on this thread's channel, tagged with the
//! transport's tag. A request completes when its last operation does ([`super::io_done`]).

use std::sync::Arc;

use tracing::debug;

use nvmf_common::types::Nsid;
use nvmf_common::wire::nvm::{self, dsm_attr, opcode, DsmRange, DSM_RANGE_LEN};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{generic, media, Status};
use nvmf_verbs::DmaBuffer;

use super::{DataDir, ExecCtx, Outcome, Plan, Request};
use crate::backend::{DmaSlice, IoOp};
use crate::controller::Controller;
use crate::namespace::Namespace;

fn lba_out_of_range() -> Status {
    Status::generic_dnr(generic::LBA_OUT_OF_RANGE).at(nvm::offset::SLBA, 0)
}

/// Checks `[slba, slba + nlb)` against the namespace and returns (offset, length) in bytes.
fn byte_range(ns: &Namespace, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    let end = slba.checked_add(nlb).ok_or_else(lba_out_of_range)?;
    if end > ns.nblocks {
        return Err(lba_out_of_range());
    }
    Ok((slba << ns.block_size_shift, nlb << ns.block_size_shift))
}

/// The namespace an I/O command targets, if this controller's path may reach it now:
/// its ANA group's state on the controller's port decides (nvmet_check_ana_state).
#[inline]
pub(super) fn io_ns(ctrl: &Controller, nsid: u32) -> Result<Arc<Namespace>, Status> {
    let ns = super::find_ns(ctrl, nsid)?;
    match ctrl.port.ana.0.state(ns.anagrpid).io_status() {
        None => Ok(ns),
        Some(st) => Err(st),
    }
}

pub(super) fn parse(ctrl: &Controller, req: &mut Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    let op = cmd.opcode();
    let nsid = cmd.nsid();
    if op == opcode::FLUSH && nsid == Nsid::BROADCAST.0 {
        return Ok(Plan::NONE);
    }
    let plan = match op {
        opcode::READ | opcode::WRITE | opcode::COMPARE => {
            let ns = io_ns(ctrl, nsid)?;
            let (_, len) = byte_range(&ns, nvm::rw_slba(&cmd), u64::from(nvm::rw_nlb(&cmd)))?;
            if len > u64::from(ctrl.params.max_io_size) {
                debug!(len, "transfer larger than MDTS");
                return Err(Status::generic_dnr(generic::INVALID_FIELD).at(nvm::offset::NLB, 0));
            }
            req.ns = Some(ns);
            Plan {
                dir: if op == opcode::READ {
                    DataDir::CtrlToHost
                } else {
                    DataDir::HostToCtrl
                },
                len: len as u32,
            }
        }
        opcode::FLUSH => {
            req.ns = Some(io_ns(ctrl, nsid)?);
            Plan::NONE
        }
        opcode::WRITE_ZEROES => {
            let ns = io_ns(ctrl, nsid)?;
            byte_range(&ns, nvm::rw_slba(&cmd), u64::from(nvm::rw_nlb(&cmd)))?;
            req.ns = Some(ns);
            Plan::NONE
        }
        opcode::VERIFY => {
            let ns = io_ns(ctrl, nsid)?;
            let plan = super::copy::parse_verify(&ns, req)?;
            req.ns = Some(ns);
            plan
        }
        opcode::COPY => {
            req.ns = Some(io_ns(ctrl, nsid)?);
            super::copy::parse_copy(req)?
        }
        opcode::DATASET_MANAGEMENT => {
            req.ns = Some(io_ns(ctrl, nsid)?);
            Plan {
                dir: DataDir::HostToCtrl,
                len: nvm::dsm_nr(&cmd) * DSM_RANGE_LEN as u32,
            }
        }
        op if super::resv::is_resv(op) => {
            let plan = super::resv::plan(ctrl, req)?;
            req.ns = Some(io_ns(ctrl, nsid)?);
            plan
        }
        other => {
            debug!(opcode = other, "unsupported I/O opcode");
            return Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0));
        }
    };
    if let Some(ns) = &req.ns {
        super::resv::check(ctrl, ns, op)?;
    }
    Ok(plan)
}

pub(super) fn execute(
    ctrl: &Arc<Controller>,
    ex: &mut ExecCtx,
    req: &mut Request,
    tag: u64,
) -> Outcome {
    if super::resv::is_resv(req.opcode()) {
        if let Err(s) = super::resv::execute(ctrl, req) {
            req.fail(s);
        }
        return Outcome::Done;
    }
    match submit(ctrl, ex, req, tag) {
        Ok(0) => Outcome::Done,
        Ok(n) => {
            req.pending = n;
            Outcome::Pending
        }
        Err(s) => {
            req.fail(s);
            if req.pending > 0 {
                // Some operations were already issued: wait for them before completing.
                Outcome::Pending
            } else {
                Outcome::Done
            }
        }
    }
}

/// Issues the backend operations; returns how many.
fn submit(
    ctrl: &Arc<Controller>,
    ex: &mut ExecCtx,
    req: &mut Request,
    tag: u64,
) -> Result<u32, Status> {
    let cmd = req.cmd();
    let op = cmd.opcode();
    if op == opcode::FLUSH && cmd.nsid() == Nsid::BROADCAST.0 {
        let all = ctrl.namespaces();
        let mut n = 0;
        for ns in &all {
            ex.submit(ns, tag, IoOp::Flush).map_err(|e| e.status())?;
            n += 1;
        }
        return Ok(n);
    }
    let Some(ns) = req.ns.clone().filter(|n| !n.is_removed()) else {
        return Err(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
    };
    let slba = nvm::rw_slba(&cmd);
    let nlb = u64::from(nvm::rw_nlb(&cmd));
    let data_err = || Status::generic_dnr(generic::DATA_TRANSFER_ERROR);
    let io = match op {
        opcode::READ => {
            let buf = req.data.clone().ok_or_else(data_err)?;
            IoOp::Read {
                offset: slba << ns.block_size_shift,
                buf,
            }
        }
        opcode::WRITE => {
            let buf = req.data.clone().ok_or_else(data_err)?;
            IoOp::Write {
                offset: slba << ns.block_size_shift,
                buf,
                // With the write cache disabled (WCE 0) every write is written through.
                fua: nvm::rw_fua(&cmd) || !ctrl.write_cache_enabled(),
            }
        }
        opcode::COMPARE => {
            let len = req.plan.len as usize;
            let scratch =
                Arc::new(DmaBuffer::new(len).ok_or(Status::generic_dnr(generic::INTERNAL_ERROR))?);
            let buf = DmaSlice::new(scratch.clone(), 0, len).ok_or_else(data_err)?;
            req.scratch = Some(scratch);
            IoOp::Read {
                offset: slba << ns.block_size_shift,
                buf,
            }
        }
        opcode::FLUSH => IoOp::Flush,
        opcode::WRITE_ZEROES => {
            let (offset, len) = byte_range(&ns, slba, nlb)?;
            IoOp::WriteZeroes { offset, len }
        }
        opcode::DATASET_MANAGEMENT => return dsm(ex, req, &ns, tag),
        opcode::VERIFY => return super::copy::verify(ex, req, &ns, tag),
        opcode::COPY => return super::copy::copy(ctrl, ex, req, &ns, tag),
        _ => return Err(Status::generic_dnr(generic::INVALID_OPCODE).at(sqe::offset::OPCODE, 0)),
    };
    ex.submit(&ns, tag, io).map_err(|e| e.status())?;
    Ok(1)
}

/// Dataset Management: deallocate each range when the AD attribute is set. Other
/// attributes are hints and need no action.
fn dsm(ex: &mut ExecCtx, req: &mut Request, ns: &Arc<Namespace>, tag: u64) -> Result<u32, Status> {
    let cmd = req.cmd();
    if nvm::dsm_attributes(&cmd) & dsm_attr::AD == 0 {
        return Ok(0);
    }
    let nr = nvm::dsm_nr(&cmd) as usize;
    let mut ranges = Vec::with_capacity(nr);
    for i in 0..nr {
        let mut raw = [0u8; DSM_RANGE_LEN];
        if !req.read_data(i * DSM_RANGE_LEN, &mut raw) {
            return Err(
                Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0)
            );
        }
        let r = DsmRange::new_unchecked(&raw[..]);
        let (offset, len) = byte_range(ns, r.slba(), u64::from(r.nlb()))?;
        if len > 0 {
            ranges.push((offset, len));
        }
    }
    if !ns.backend.info().supports_deallocate {
        return Ok(0);
    }
    let mut n = 0;
    for (offset, len) in ranges {
        if let Err(e) = ex.submit(ns, tag, IoOp::Deallocate { offset, len }) {
            req.pending = n;
            return Err(e.status());
        }
        n += 1;
    }
    Ok(n)
}

/// Completes what needs the data after the backend finished (Compare); drops the
/// scratch data of Verify and Copy.
#[inline]
pub(super) fn finish(req: &mut Request) {
    if let Some(scratch) = req.scratch.take() {
        if req.status.is_success() && req.opcode() == opcode::COMPARE {
            let len = req.plan.len as usize;
            let mut host = vec![0u8; len];
            let mut disk = vec![0u8; len];
            let ok = req.read_data(0, &mut host) && scratch.read_at(0, &mut disk);
            if !ok || host != disk {
                req.status = Status::media_retryable(media::COMPARE_FAILURE);
            }
        }
    }
}

/// Fused Compare and Write as one backend operation ([`crate::backend::CompareAndWrite`], for
/// a backend with a `compare_and_write_unit`): `first` is the Compare, `write` the
/// Write's data. A difference completes the Compare with Compare Failure
/// ([`crate::backend::BackendError::Miscompare`]).
pub fn compare_and_write(
    ex: &mut super::ExecCtx,
    first: &mut Request,
    write: DmaSlice,
    tag: u64,
) -> Outcome {
    let Some(ns) = first.ns.clone().filter(|n| !n.is_removed()) else {
        first.fail(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
        return Outcome::Done;
    };
    let Some(cmp) = first.data.clone() else {
        first.fail(Status::generic_dnr(generic::DATA_TRANSFER_ERROR));
        return Outcome::Done;
    };
    let offset = nvm::rw_slba(&first.cmd()) << ns.block_size_shift;
    let op = crate::backend::CompareAndWrite {
        offset,
        cmp,
        buf: write,
    };
    match ex.submit_compare_and_write(&ns, tag, op) {
        Ok(()) => {
            first.pending = 1;
            Outcome::Pending
        }
        Err(e) => {
            first.fail(e.status());
            Outcome::Done
        }
    }
}
