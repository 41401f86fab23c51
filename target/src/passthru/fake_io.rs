//! The I/O side of [`super::fake::FakeController`]: an in-memory namespace that takes
//! NVMe I/O commands as a device would, so the passthru I/O path (the host's command
//! reaching the device as formed, the device's status and result dwords coming back
//! unchanged) is tested without a device.
//!
//! Owns the fake's blocks (sparse, per namespace) and the record of I/O commands. It
//! runs Read, Write and Flush of the NVM command set and Zone Append (which returns
//! the LBA it wrote in dwords 0 and 1, as a zoned device does); any other opcode
//! gets the canned I/O answer set for it, or success.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use nvmf_common::wire::nvm;
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

use super::device::DeviceCompletion;
use crate::backend::{BackendError, CqeResult, IoChannel, IoCompletion, IoOp, PassthruCmd};

/// Zone Append (ZNS command set).
pub const ZONE_APPEND: u8 = 0x7D;
/// Zones of the fake: 64 Ki blocks each.
pub const ZONE_BLOCKS: u64 = 1 << 16;

/// One fake namespace's contents and zones.
#[derive(Debug, Default)]
pub struct FakeMedia {
    block_size: usize,
    nblocks: u64,
    blocks: HashMap<u64, Vec<u8>>,
    /// Zone start LBA -> write pointer (blocks written past the start).
    write_pointers: BTreeMap<u64, u64>,
}

/// What the fake's I/O side shares between its channels.
#[derive(Debug, Default)]
pub struct FakeIo {
    media: Mutex<HashMap<u32, FakeMedia>>,
    canned: Mutex<HashMap<u8, DeviceCompletion>>,
    received: Mutex<Vec<[u8; SQE_LEN]>>,
    /// The device was pulled: every command fails as on a vanished device node.
    pub unplugged: std::sync::atomic::AtomicBool,
}

impl FakeIo {
    /// Adds namespace `nsid` of `nblocks` blocks of `block_size` bytes.
    pub fn add_namespace(&self, nsid: u32, block_size: usize, nblocks: u64) {
        self.media.lock().insert(
            nsid,
            FakeMedia {
                block_size,
                nblocks,
                ..FakeMedia::default()
            },
        );
    }

    /// Every later I/O command with `opcode` (other than Read, Write, Flush and
    /// Zone Append) completes with `c`.
    pub fn answer(&self, opcode: u8, c: DeviceCompletion) {
        self.canned.lock().insert(opcode, c);
    }

    /// The I/O commands received so far, in order.
    pub fn received(&self) -> Vec<[u8; SQE_LEN]> {
        self.received.lock().clone()
    }

    /// Runs one command: the completion the device gives.
    fn run(
        &self,
        sqe: &Sqe<[u8; SQE_LEN]>,
        data: &mut Option<crate::backend::DmaSlice>,
    ) -> DeviceCompletion {
        self.received.lock().push(sqe.into_inner());
        let op = sqe.opcode();
        let fail = |s: Status| DeviceCompletion {
            status: s,
            dw0: 0,
            dw1: 0,
        };
        if let Some(c) = self.canned.lock().get(&op) {
            return *c;
        }
        let mut media = self.media.lock();
        let Some(m) = media.get_mut(&sqe.nsid()) else {
            return fail(Status::generic_dnr(generic::INVALID_NAMESPACE));
        };
        let slba = nvm::rw_slba(sqe);
        let nlb = u64::from(nvm::rw_nlb(sqe));
        let len = usize::try_from(nlb)
            .unwrap_or(usize::MAX)
            .saturating_mul(m.block_size);
        let block_io = matches!(op, nvm::opcode::READ | nvm::opcode::WRITE | ZONE_APPEND);
        if block_io && data.as_ref().map(|d| d.len) != Some(len) {
            return fail(Status::generic_dnr(generic::DATA_SGL_LENGTH_INVALID));
        }
        if slba.checked_add(nlb).is_none_or(|end| end > m.nblocks) {
            return fail(Status::generic_dnr(generic::LBA_OUT_OF_RANGE));
        }
        match op {
            nvm::opcode::FLUSH => DeviceCompletion::success(0),
            nvm::opcode::READ => {
                if let Some(d) = data {
                    for i in 0..nlb {
                        let b = m.blocks.get(&(slba + i));
                        let zero = vec![0u8; m.block_size];
                        d.buf
                            .write_at(d.offset + i as usize * m.block_size, b.unwrap_or(&zero));
                    }
                }
                DeviceCompletion::success(0)
            }
            nvm::opcode::WRITE => {
                store(m, slba, nlb, data);
                DeviceCompletion::success(0)
            }
            ZONE_APPEND => {
                let zone = slba - slba % ZONE_BLOCKS;
                let wp = m.write_pointers.entry(zone).or_insert(0);
                let at = zone + *wp;
                if *wp + nlb > ZONE_BLOCKS {
                    return fail(Status::cmd_specific_dnr(ZONE_FULL));
                }
                *wp += nlb;
                store(m, at, nlb, data);
                DeviceCompletion {
                    status: Status::SUCCESS,
                    dw0: at as u32,
                    dw1: (at >> 32) as u32,
                }
            }
            _ => DeviceCompletion::success(0),
        }
    }

    /// A channel to namespace `nsid`.
    pub fn channel(self: &Arc<Self>) -> FakeIoChannel {
        FakeIoChannel {
            io: self.clone(),
            done: Vec::new(),
        }
    }
}

/// Zone Is Full (ZNS command specific status B9h).
const ZONE_FULL: u8 = 0xB9;

fn store(m: &mut FakeMedia, slba: u64, nlb: u64, data: &Option<crate::backend::DmaSlice>) {
    if let Some(d) = data {
        for i in 0..nlb {
            let mut b = vec![0u8; m.block_size];
            d.buf.read_at(d.offset + i as usize * m.block_size, &mut b);
            m.blocks.insert(slba + i, b);
        }
    }
}

/// A channel of the fake: commands run at submit, completions wait for `poll`.
pub struct FakeIoChannel {
    io: Arc<FakeIo>,
    done: Vec<IoCompletion>,
}

impl IoChannel for FakeIoChannel {
    fn submit(&mut self, _tag: u64, _op: IoOp) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    fn submit_passthru(&mut self, tag: u64, mut cmd: PassthruCmd) -> Result<(), BackendError> {
        if self.io.unplugged.load(std::sync::atomic::Ordering::Acquire) {
            let gone = super::device::DeviceError::from_errno(nix::errno::Errno::ENODEV);
            self.done.push((
                tag,
                Err(BackendError::Device {
                    status: gone.status(),
                    result: CqeResult::NONE,
                }),
            ));
            return Ok(());
        }
        let sqe = Sqe::new_unchecked(cmd.sqe);
        let c = self.io.run(&sqe, &mut cmd.buf);
        let result = CqeResult {
            dw0: c.dw0,
            dw1: c.dw1,
        };
        self.done.push((
            tag,
            if c.status.is_success() {
                Ok(result)
            } else {
                Err(BackendError::Device {
                    status: c.status,
                    result,
                })
            },
        ));
        Ok(())
    }

    fn flush(&mut self) {}

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let n = self.done.len();
        out.append(&mut self.done);
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}
