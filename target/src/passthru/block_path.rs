//! `io_path: passthru` on a block namespace whose backing is an NVMe namespace
//! (`/dev/nvmeXnY`): the same backend (size, block size, sync at shutdown), but each
//! poll group's channel sends the block operations as NVMe commands through io_uring
//! NVMe passthrough on the namespace's generic device `/dev/ngXnY`, past the block
//! layer.
//!
//! Owns the translation from [`IoOp`] to NVM commands (Read, Write with FUA, Flush,
//! Write Zeroes, Dataset Management deallocate) and the lookup of the generic device
//! of a block device. The block path stays the default until a benchmark on real
//! drives says otherwise (docs/peers.md).

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvmf_common::wire::nvm::{self, DSM_RANGE_LEN};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_verbs::DmaBuffer;

use super::uring::UringChannel;
use crate::backend::{
    Backend, BackendError, BackendInfo, CqeResult, DmaSlice, IoChannel, IoCompletion, IoOp,
    PassthruCmd,
};
use std::collections::HashMap;

/// Write FUA: CDW12 bit 30.
const RW_FUA: u32 = 1 << 30;
/// Dataset Management attribute: Deallocate (CDW11 bit 2).
const DSM_AD: u32 = 1 << 2;
/// NLB is a 0-based 16-bit count.
const MAX_BLOCKS_PER_CMD: u64 = 1 << 16;
/// `'N'` and `NVME_IOCTL_ID`: the NSID of a namespace node.
const NVME_IOCTL_TYPE: u8 = b'N';
const NVME_IOCTL_ID_NR: u8 = 0x40;

mod sys {
    nix::ioctl_none!(
        nvme_ioctl_id,
        super::NVME_IOCTL_TYPE,
        super::NVME_IOCTL_ID_NR
    );
}

/// The NSID of the NVMe namespace node (block or generic) at `path`.
fn node_nsid(path: &Path) -> Result<u32, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: NVME_IOCTL_ID takes no argument and only returns a number; the
    // descriptor is open for the whole call.
    let id = unsafe { sys::nvme_ioctl_id(f.as_raw_fd()) }
        .map_err(|e| format!("{}: not an NVMe namespace ({e})", path.display()))?;
    u32::try_from(id).map_err(|_| format!("{}: NSID {id}", path.display()))
}

/// The generic device of an NVMe namespace block device, as [`generic_of_block`]
/// finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericNode {
    pub path: PathBuf,
    pub nsid: u32,
    /// The most one passthrough command may move (the queue's `max_hw_sectors_kb`):
    /// unlike the block layer, passthrough does not split.
    pub max_transfer: usize,
}

/// Bytes per KiB, for `max_hw_sectors_kb`.
const KIB: usize = 1024;
/// When sysfs does not say: 128 KiB, what every NVMe controller takes (MDTS 5).
const FALLBACK_MAX_TRANSFER: usize = 128 * KIB;

/// `max_hw_sectors_kb` of block device `name`, in bytes.
fn max_transfer(name: &str) -> usize {
    std::fs::read_to_string(format!("/sys/block/{name}/queue/max_hw_sectors_kb"))
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .and_then(|kb| kb.checked_mul(KIB))
        .filter(|&b| b > 0)
        .unwrap_or(FALLBACK_MAX_TRANSFER)
}

/// The generic device `/dev/ngXnY` of NVMe namespace block device `block`
/// (`/dev/nvmeXnY`), checked to be the same namespace (its NSID).
pub fn generic_of_block(block: &Path) -> Result<GenericNode, String> {
    let real = std::fs::canonicalize(block).map_err(|e| format!("{}: {e}", block.display()))?;
    let name = real
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: no device name", real.display()))?;
    let rest = name
        .strip_prefix("nvme")
        .filter(|r| r.contains('n') && !r.contains('c') && !r.contains('p'))
        .ok_or_else(|| {
            format!(
                "{}: not an NVMe namespace block device (/dev/nvmeXnY)",
                real.display()
            )
        })?;
    let generic = real.with_file_name(format!("ng{rest}"));
    let meta = std::fs::metadata(&generic).map_err(|e| {
        format!(
            "{}: no generic device {} ({e}): the kernel needs NVMe generic character devices (5.13+)",
            real.display(),
            generic.display()
        )
    })?;
    if !meta.file_type().is_char_device() {
        return Err(format!("{} is not a character device", generic.display()));
    }
    let (a, b) = (node_nsid(&real)?, node_nsid(&generic)?);
    if a != b {
        return Err(format!(
            "{} is NSID {a} but {} is NSID {b}: not the same namespace",
            real.display(),
            generic.display()
        ));
    }
    Ok(GenericNode {
        path: generic,
        nsid: a,
        max_transfer: max_transfer(name),
    })
}

/// A block backend whose channels take the passthrough path.
pub struct PassthruIoBackend {
    inner: Arc<dyn Backend>,
    node: GenericNode,
}

impl PassthruIoBackend {
    /// `inner` (the block device opened as usual) served through `node`.
    pub fn new(inner: Arc<dyn Backend>, node: GenericNode) -> Self {
        PassthruIoBackend { inner, node }
    }
}

impl Backend for PassthruIoBackend {
    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        let ring = UringChannel::open(&self.node.path).map_err(|e| {
            tracing::warn!(path = %self.node.path.display(), error = %e, "cannot open the passthrough I/O channel");
            BackendError::Io(libc::EIO)
        })?;
        let lba_shift = self.inner.info().block_size.trailing_zeros();
        Ok(Box::new(NvmeBlockChannel {
            ring,
            nsid: self.node.nsid,
            lba_shift,
            // Whole blocks, and at least one.
            max_transfer: (self.node.max_transfer >> lba_shift << lba_shift).max(1 << lba_shift),
            parts: HashMap::new(),
        }))
    }

    fn sync(&self) -> Result<(), BackendError> {
        self.inner.sync()
    }
}

/// One poll group's channel: block operations as NVM commands.
struct NvmeBlockChannel {
    ring: UringChannel,
    nsid: u32,
    lba_shift: u32,
    /// The most one command moves (bytes, whole blocks).
    max_transfer: usize,
    /// Operations sent as several commands: commands still out, and the first error.
    parts: HashMap<u64, (usize, Option<BackendError>)>,
}

/// Whether `op` goes as one command ([`split`] would leave it whole).
fn fits(op: &IoOp, max: usize, lba_shift: u32) -> bool {
    match op {
        IoOp::Read { buf, .. } | IoOp::Write { buf, .. } => buf.len <= max,
        IoOp::WriteZeroes { len, .. } => *len <= MAX_BLOCKS_PER_CMD << lba_shift,
        IoOp::Flush | IoOp::Deallocate { .. } => true,
    }
}

/// `op` as operations each within `max` bytes of data (Read and Write split at
/// `max`, Write Zeroes at the 16-bit block count; the others whole).
fn split(op: IoOp, max: usize, lba_shift: u32) -> Vec<IoOp> {
    let cut = |offset: u64, len: usize, step: usize| -> Vec<(u64, usize, usize)> {
        (0..len)
            .step_by(step.max(1))
            .map(|at| (offset + at as u64, at, step.min(len - at)))
            .collect()
    };
    match op {
        IoOp::Read { offset, buf } if buf.len > max => cut(offset, buf.len, max)
            .into_iter()
            .filter_map(|(o, at, n)| {
                let b = DmaSlice::new(buf.buf.clone(), buf.offset + at, n)?;
                Some(IoOp::Read { offset: o, buf: b })
            })
            .collect(),
        IoOp::Write { offset, buf, fua } if buf.len > max => cut(offset, buf.len, max)
            .into_iter()
            .filter_map(|(o, at, n)| {
                let b = DmaSlice::new(buf.buf.clone(), buf.offset + at, n)?;
                Some(IoOp::Write {
                    offset: o,
                    buf: b,
                    fua,
                })
            })
            .collect(),
        IoOp::WriteZeroes { offset, len } if len > MAX_BLOCKS_PER_CMD << lba_shift => {
            let step = (MAX_BLOCKS_PER_CMD << lba_shift) as usize;
            match usize::try_from(len) {
                Ok(l) => cut(offset, l, step)
                    .into_iter()
                    .map(|(o, _, n)| IoOp::WriteZeroes {
                        offset: o,
                        len: n as u64,
                    })
                    .collect(),
                Err(_) => vec![IoOp::WriteZeroes { offset, len }],
            }
        }
        op => vec![op],
    }
}

/// The NVM command for `op` on namespace `nsid` with `lba_shift`-bit blocks, and
/// the buffer it moves.
pub fn nvm_command(op: IoOp, nsid: u32, lba_shift: u32) -> Result<PassthruCmd, BackendError> {
    let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
    s.set_nsid(nsid);
    let blocks = |offset: u64, len: u64| -> Result<(u64, u32), BackendError> {
        let mask = (1u64 << lba_shift) - 1;
        let n = len >> lba_shift;
        if offset & mask != 0 || len & mask != 0 || n == 0 || n > MAX_BLOCKS_PER_CMD {
            return Err(BackendError::Unsupported);
        }
        Ok((offset >> lba_shift, (n - 1) as u32))
    };
    let rw = |s: &mut Sqe<[u8; SQE_LEN]>, slba: u64, nlb0: u32| {
        s.set_cdw10(slba as u32);
        s.set_cdw11((slba >> 32) as u32);
        s.set_cdw12(nlb0);
    };
    let buf = match op {
        IoOp::Read { offset, buf } => {
            let (slba, n) = blocks(offset, buf.len as u64)?;
            s.set_opcode(nvm::opcode::READ);
            rw(&mut s, slba, n);
            Some(buf)
        }
        IoOp::Write { offset, buf, fua } => {
            let (slba, n) = blocks(offset, buf.len as u64)?;
            s.set_opcode(nvm::opcode::WRITE);
            rw(&mut s, slba, n | if fua { RW_FUA } else { 0 });
            Some(buf)
        }
        IoOp::Flush => {
            s.set_opcode(nvm::opcode::FLUSH);
            None
        }
        IoOp::WriteZeroes { offset, len } => {
            let (slba, n) = blocks(offset, len)?;
            s.set_opcode(nvm::opcode::WRITE_ZEROES);
            rw(&mut s, slba, n);
            None
        }
        IoOp::Deallocate { offset, len } => {
            let mask = (1u64 << lba_shift) - 1;
            let nlb = u32::try_from(len >> lba_shift).map_err(|_| BackendError::Unsupported)?;
            if offset & mask != 0 || len & mask != 0 || nlb == 0 {
                return Err(BackendError::Unsupported);
            }
            // One range: context attributes 0, length in blocks, starting LBA.
            let mut range = [0u8; DSM_RANGE_LEN];
            range[4..8].copy_from_slice(&nlb.to_le_bytes());
            range[8..16].copy_from_slice(&(offset >> lba_shift).to_le_bytes());
            let b = Arc::new(DmaBuffer::new(DSM_RANGE_LEN).ok_or(BackendError::Io(libc::ENOMEM))?);
            b.write_at(0, &range);
            s.set_opcode(nvm::opcode::DATASET_MANAGEMENT);
            s.set_cdw10(0); // NR: one range, 0-based
            s.set_cdw11(DSM_AD);
            Some(DmaSlice::new(b, 0, DSM_RANGE_LEN).ok_or(BackendError::Io(libc::EINVAL))?)
        }
    };
    Ok(PassthruCmd {
        sqe: s.into_inner(),
        buf,
        fabric: None,
    })
}

impl IoChannel for NvmeBlockChannel {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        // The common case, one command: no list built.
        if fits(&op, self.max_transfer, self.lba_shift) {
            let cmd = nvm_command(op, self.nsid, self.lba_shift)?;
            return self.ring.submit_passthru(tag, cmd);
        }
        let ops = split(op, self.max_transfer, self.lba_shift);
        // Every command is built before any is sent: a refusal sends nothing.
        let cmds = ops
            .into_iter()
            .map(|op| nvm_command(op, self.nsid, self.lba_shift))
            .collect::<Result<Vec<_>, _>>()?;
        if cmds.len() > 1 {
            self.parts.insert(tag, (cmds.len(), None));
        }
        for cmd in cmds {
            self.ring.submit_passthru(tag, cmd)?;
        }
        Ok(())
    }

    fn flush(&mut self) {
        self.ring.flush()
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        if self.parts.is_empty() {
            return self.ring.poll(out);
        }
        let mut got = Vec::new();
        self.ring.poll(&mut got);
        let before = out.len();
        for (tag, res) in got {
            let Some((left, err)) = self.parts.get_mut(&tag) else {
                out.push((tag, res));
                continue;
            };
            *left -= 1;
            if let Err(e) = res {
                err.get_or_insert(e);
            }
            if *left == 0 {
                let first_err = err.take();
                self.parts.remove(&tag);
                out.push((tag, first_err.map_or(Ok(CqeResult::NONE), Err)));
            }
        }
        out.len() - before
    }

    fn in_flight(&self) -> usize {
        // Operations, not commands: a split one counts once.
        let extra: usize = self.parts.values().map(|(left, _)| left - 1).sum();
        self.ring.in_flight() - extra.min(self.ring.in_flight())
    }

    fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        self.ring.event_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(len: usize) -> DmaSlice {
        DmaSlice::new(Arc::new(DmaBuffer::new(len).unwrap()), 0, len).unwrap()
    }

    #[test]
    fn block_operations_become_nvm_commands() {
        let c = nvm_command(
            IoOp::Read {
                offset: 8192,
                buf: slice(4096),
            },
            3,
            9,
        )
        .unwrap();
        let s = Sqe::new_unchecked(c.sqe);
        assert_eq!(
            (s.opcode(), s.nsid(), s.cdw10(), s.cdw11(), s.cdw12()),
            (0x02, 3, 16, 0, 7)
        );
        assert_eq!(c.buf.map(|b| b.len), Some(4096));
        let c = nvm_command(
            IoOp::Write {
                offset: 1 << 41,
                buf: slice(4096),
                fua: true,
            },
            1,
            12,
        )
        .unwrap();
        let s = Sqe::new_unchecked(c.sqe);
        // LBA 2^29 of 4 KiB blocks; one block, FUA.
        assert_eq!(
            (s.opcode(), s.cdw10(), s.cdw11(), s.cdw12()),
            (0x01, 1 << 29, 0, RW_FUA)
        );
        let c = nvm_command(IoOp::Flush, 1, 9).unwrap();
        assert_eq!((c.sqe[0], c.buf.is_none()), (0x00, true));
        let c = nvm_command(
            IoOp::WriteZeroes {
                offset: 512,
                len: 1024,
            },
            1,
            9,
        )
        .unwrap();
        let s = Sqe::new_unchecked(c.sqe);
        assert_eq!((s.opcode(), s.cdw10(), s.cdw12()), (0x08, 1, 1));
        let c = nvm_command(
            IoOp::Deallocate {
                offset: 4096,
                len: 1 << 20,
            },
            1,
            9,
        )
        .unwrap();
        let s = Sqe::new_unchecked(c.sqe);
        assert_eq!((s.opcode(), s.cdw10(), s.cdw11()), (0x09, 0, DSM_AD));
        let mut range = [0u8; 16];
        assert!(c.buf.as_ref().unwrap().buf.read_at(0, &mut range));
        assert_eq!(u32::from_le_bytes(range[4..8].try_into().unwrap()), 2048);
        assert_eq!(u64::from_le_bytes(range[8..16].try_into().unwrap()), 8);
    }

    #[test]
    fn operations_larger_than_one_command_are_split() {
        let buf = slice(1 << 20);
        let ops = split(
            IoOp::Write {
                offset: 4096,
                buf,
                fua: true,
            },
            384 << 10,
            9,
        );
        let parts: Vec<(u64, usize, usize, bool)> = ops
            .iter()
            .map(|o| match o {
                IoOp::Write { offset, buf, fua } => (*offset, buf.offset, buf.len, *fua),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            parts,
            [
                (4096, 0, 384 << 10, true),
                (4096 + (384 << 10), 384 << 10, 384 << 10, true),
                (4096 + (768 << 10), 768 << 10, 256 << 10, true),
            ]
        );
        // Within the limit: one operation, untouched.
        assert_eq!(
            split(
                IoOp::Read {
                    offset: 0,
                    buf: slice(4096)
                },
                4096,
                9
            )
            .len(),
            1
        );
        // Write Zeroes moves no data but counts blocks in 16 bits.
        let z = split(
            IoOp::WriteZeroes {
                offset: 0,
                len: (1 << 16) * 512 + 1024,
            },
            4096,
            9,
        );
        assert_eq!(z.len(), 2);
        assert!(z.iter().all(|o| nvm_command(o.clone(), 1, 9).is_ok()));
    }

    #[test]
    fn what_one_command_cannot_say_is_refused() {
        // Not block aligned, or more blocks than a 16-bit NLB holds.
        assert!(nvm_command(
            IoOp::Read {
                offset: 100,
                buf: slice(512)
            },
            1,
            9
        )
        .is_err());
        assert!(nvm_command(
            IoOp::WriteZeroes {
                offset: 0,
                len: (1 << 16) * 512 + 512
            },
            1,
            9
        )
        .is_err());
    }

    #[test]
    fn only_nvme_namespace_block_devices_have_a_generic_device() {
        let e = generic_of_block(Path::new("/dev/null")).unwrap_err();
        assert!(e.contains("not an NVMe namespace block device"), "{e}");
        let e = generic_of_block(Path::new("/dev/nvme-no-such0n1")).unwrap_err();
        assert!(e.contains("nvme-no-such0n1"), "{e}");
    }
}
