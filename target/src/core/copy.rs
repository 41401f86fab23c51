//! Verify and Copy: the NVM commands that move data inside the namespace.
//!
//! Both run on every backend with the ordinary read and write operations, so what
//! the host is told in Identify holds whatever the namespace is backed by:
//!
//! - **Verify** reads the range back in chunks of at most MDTS into one scratch
//!   buffer and drops the data: a block that cannot be read fails the command with
//!   the backend's status (Unrecovered Read Error), as a drive's verify would. No data
//!   crosses the fabric.
//! - **Copy** (Source Range Entries, Descriptor Format 0h only, advertised in OCFS)
//!   reads every source range into one scratch buffer, then writes it to the
//!   destination in a second round ([`Step::CopyWrite`], started by
//!   [`continue_copy`] from [`super::io_done`]). Sources are read whole before the
//!   destination is written, so overlapping sources, or a destination overlapping a
//!   source, give the data as it was before the command. The limits come from that
//!   one buffer: MCL (all ranges) and MSSRL (one range) are MDTS in blocks, MSRC
//!   allows all 256 ranges an NR field can name.

use std::sync::Arc;

use tracing::debug;

use nvmf_common::wire::nvm::{self, copy, CopyRange, COPY_RANGE_LEN};
use nvmf_common::wire::sqe;
use nvmf_common::wire::status::{cmd_specific, generic, Status};
use nvmf_verbs::DmaBuffer;

use super::{DataDir, ExecCtx, Plan, Request};
use crate::backend::{DmaSlice, IoOp};
use crate::controller::Controller;
use crate::namespace::Namespace;

/// A command that needs a second round of backend operations once the first is done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Step {
    #[default]
    None,
    /// Copy: the sources are being read into the scratch buffer; then write it all
    /// at byte `offset`.
    CopyWrite { offset: u64, fua: bool },
}

/// The copy limits of `ns` as Identify Namespace reports them: (MSSRL, MCL, MSRC),
/// in blocks (MSRC 0-based).
pub(crate) fn limits(ns: &Namespace, max_io_size: u32) -> (u16, u32, u8) {
    let mcl = max_io_size >> ns.block_size_shift;
    let mssrl = u16::try_from(mcl).unwrap_or(u16::MAX);
    let msrc = u8::try_from(copy::MAX_RANGES - 1).unwrap_or(u8::MAX);
    (mssrl, mcl, msrc)
}

fn size_limit() -> Status {
    Status::cmd_specific_dnr(cmd_specific::COMMAND_SIZE_LIMIT_EXCEEDED)
}

fn lba_out_of_range(at: u16) -> Status {
    Status::generic_dnr(generic::LBA_OUT_OF_RANGE).at(at, 0)
}

/// Verify: the range must lie in the namespace; nothing is transferred.
pub(super) fn parse_verify(ns: &Namespace, req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    let end = nvm::rw_slba(&cmd)
        .checked_add(u64::from(nvm::rw_nlb(&cmd)))
        .ok_or_else(|| lba_out_of_range(nvm::offset::SLBA))?;
    if end > ns.nblocks {
        return Err(lba_out_of_range(nvm::offset::SLBA));
    }
    Ok(Plan::NONE)
}

/// Copy: descriptor format 0h only; the host sends NR + 1 source ranges.
pub(super) fn parse_copy(req: &Request) -> Result<Plan, Status> {
    let cmd = req.cmd();
    let desfmt = nvm::copy_desfmt(&cmd);
    if desfmt != copy::DESFMT_0 {
        debug!(desfmt, "Copy descriptor format not supported");
        return Err(Status::generic_dnr(generic::INVALID_FIELD).at(copy::DESFMT_OFFSET, 0));
    }
    Ok(Plan {
        dir: DataDir::HostToCtrl,
        len: nvm::copy_ranges(&cmd) * COPY_RANGE_LEN as u32,
    })
}

/// Verify: reads the range in MDTS-sized chunks into one scratch buffer.
pub(super) fn verify(
    ex: &mut ExecCtx,
    req: &mut Request,
    ns: &Arc<Namespace>,
    tag: u64,
) -> Result<u32, Status> {
    let cmd = req.cmd();
    let offset = nvm::rw_slba(&cmd) << ns.block_size_shift;
    let len = u64::from(nvm::rw_nlb(&cmd)) << ns.block_size_shift;
    let chunk = u64::from(ex.target.params.max_io_size).min(len).max(1);
    let scratch = scratch(chunk as usize)?;
    let mut done = 0u64;
    let mut n = 0u32;
    while done < len {
        let this = chunk.min(len - done);
        let buf = DmaSlice::new(scratch.clone(), 0, this as usize).ok_or_else(internal)?;
        let op = IoOp::Read {
            offset: offset + done,
            buf,
        };
        if let Err(e) = ex.submit(ns, tag, op) {
            req.pending = n;
            return Err(e.status());
        }
        n += 1;
        done += this;
    }
    req.scratch = Some(scratch);
    Ok(n)
}

/// Copy, first round: checks every source range and the destination, then reads the
/// sources one after another into a scratch buffer.
pub(super) fn copy(
    ctrl: &Controller,
    ex: &mut ExecCtx,
    req: &mut Request,
    ns: &Arc<Namespace>,
    tag: u64,
) -> Result<u32, Status> {
    let cmd = req.cmd();
    let (mssrl, mcl, _) = limits(ns, ex.target.params.max_io_size);
    let count = nvm::copy_ranges(&cmd) as usize;
    let mut sources = Vec::with_capacity(count);
    let mut total: u64 = 0;
    for i in 0..count {
        let mut raw = [0u8; COPY_RANGE_LEN];
        if !req.read_data(i * COPY_RANGE_LEN, &mut raw) {
            return Err(
                Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID).at(sqe::offset::DPTR, 0)
            );
        }
        let r = CopyRange::new_unchecked(&raw[..]);
        let nlb = u64::from(r.nlb());
        if nlb > u64::from(mssrl) {
            debug!(range = i, nlb, mssrl, "Copy source range longer than MSSRL");
            return Err(size_limit());
        }
        let end = r.slba().checked_add(nlb);
        if end.is_none_or(|e| e > ns.nblocks) {
            debug!(
                range = i,
                slba = r.slba(),
                nlb,
                "Copy source range beyond the namespace"
            );
            return Err(Status::generic_dnr(generic::LBA_OUT_OF_RANGE));
        }
        total += nlb;
        if total > u64::from(mcl) {
            debug!(total, mcl, "Copy longer than MCL");
            return Err(size_limit());
        }
        sources.push((r.slba() << ns.block_size_shift, nlb << ns.block_size_shift));
    }
    let sdlba = nvm::copy_sdlba(&cmd);
    if sdlba.checked_add(total).is_none_or(|e| e > ns.nblocks) {
        return Err(lba_out_of_range(copy::SDLBA_OFFSET));
    }
    let bytes = (total << ns.block_size_shift) as usize;
    let scratch = scratch(bytes)?;
    req.scratch = Some(scratch.clone());
    req.step = Step::CopyWrite {
        offset: sdlba << ns.block_size_shift,
        // With the write cache disabled (WCE 0) every write is written through.
        fua: nvm::rw_fua(&cmd) || !ctrl.write_cache_enabled(),
    };
    let mut at = 0usize;
    let mut n = 0u32;
    for (offset, len) in sources {
        let buf = DmaSlice::new(scratch.clone(), at, len as usize).ok_or_else(internal)?;
        if let Err(e) = ex.submit(ns, tag, IoOp::Read { offset, buf }) {
            req.pending = n;
            return Err(e.status());
        }
        n += 1;
        at += len as usize;
    }
    Ok(n)
}

/// Copy, second round: the sources are in the scratch buffer; write it to the
/// destination. Returns the operations issued (0: nothing left to do).
pub(super) fn continue_copy(ex: &mut ExecCtx, req: &mut Request, tag: u64) -> Result<u32, Status> {
    let Step::CopyWrite { offset, fua } = std::mem::take(&mut req.step) else {
        return Ok(0);
    };
    let (Some(ns), Some(scratch)) = (req.ns.clone(), req.scratch.clone()) else {
        return Err(internal());
    };
    if ns.is_removed() {
        return Err(Status::generic_dnr(generic::INVALID_NAMESPACE).at(sqe::offset::NSID, 0));
    }
    let len = scratch.len();
    let buf = DmaSlice::new(scratch, 0, len).ok_or_else(internal)?;
    ex.submit(&ns, tag, IoOp::Write { offset, buf, fua })
        .map_err(|e| e.status())?;
    Ok(1)
}

fn internal() -> Status {
    Status::generic_dnr(generic::INTERNAL_ERROR)
}

/// A zeroed scratch buffer of `len` bytes (registered memory the backends accept).
fn scratch(len: usize) -> Result<Arc<DmaBuffer>, Status> {
    DmaBuffer::new(len)
        .map(Arc::new)
        .ok_or(Status::generic_retryable(generic::INTERNAL_ERROR))
}
