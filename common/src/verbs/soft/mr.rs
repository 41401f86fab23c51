//! Protection domains and memory regions: the per-PD key table.
//!
//! Key layout (lkey and rkey alike): the low 16 bits are the slot index XOR a per-PD
//! salt, the high 16 bits a tag derived from a device-wide registration sequence
//! number `s` (`2s` for the lkey, `2s + 1` for the rkey) through a bijection of 16-bit
//! values. So the lkey and rkey of one region always differ, a key only matches the
//! registration that issued it (a reused slot gets a new tag; tags repeat only after
//! 32768 registrations on the device, and freed slots are reused oldest-first), and a
//! key of another PD lands on a different slot or tag.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::RwLock;

use super::DevShared;
use crate::verbs::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

const INDEX_MASK: u32 = 0xffff;
/// Slots 1..=MAX_INDEX are usable; slot 0 is never handed out.
const MAX_INDEX: u32 = 0xffff;

/// A validated piece of registered memory: `len` bytes at `off` inside `buf`. Holding
/// the `Arc` keeps the memory alive while it is copied, even if the region is
/// deregistered meanwhile.
pub(super) struct Seg {
    pub(super) buf: Arc<DmaBuffer>,
    pub(super) off: usize,
    pub(super) len: usize,
}

struct MrEntry {
    lkey: u32,
    rkey: u32,
    /// Cleared by a SEND with invalidate naming `rkey`.
    remote_valid: bool,
    access: Access,
    buf: Arc<DmaBuffer>,
}

struct KeyTable {
    salt: u32,
    slots: Vec<Option<MrEntry>>,
    free: VecDeque<u32>,
}

impl KeyTable {
    fn entry(&self, key: u32) -> Option<&MrEntry> {
        let idx = (key ^ self.salt) & INDEX_MASK;
        self.slots.get(idx as usize)?.as_ref()
    }

    fn entry_mut(&mut self, key: u32) -> Option<&mut MrEntry> {
        let idx = (key ^ self.salt) & INDEX_MASK;
        self.slots.get_mut(idx as usize)?.as_mut()
    }
}

/// A bijection of 16-bit values, so distinct sequence numbers give distinct tags.
fn tag(seq: u32) -> u32 {
    (seq.wrapping_mul(0x9e3b) ^ 0x5a17) & 0xffff
}

/// A protection domain of the soft provider.
pub(super) struct SoftPd {
    dev: Arc<DevShared>,
    table: Arc<RwLock<KeyTable>>,
}

impl SoftPd {
    pub(super) fn new(dev: &Arc<DevShared>) -> Arc<SoftPd> {
        let salt = dev.random_u32() & INDEX_MASK;
        let pd = Arc::new(SoftPd {
            dev: Arc::clone(dev),
            table: Arc::new(RwLock::new(KeyTable {
                salt,
                // Slot 0 is a placeholder that never holds a region.
                slots: vec![None],
                free: VecDeque::new(),
            })),
        });
        dev.pds.insert(&pd);
        pd
    }

    /// Validates `len` bytes at virtual address `addr` under `key` (an rkey when
    /// `remote`, else an lkey) with rights `need`, with overflow-safe bounds checks.
    pub(super) fn lookup(
        &self,
        key: u32,
        remote: bool,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Option<Seg> {
        let table = self.table.read();
        let e = table.entry(key)?;
        let key_ok = if remote {
            e.rkey == key && e.remote_valid
        } else {
            e.lkey == key
        };
        if !key_ok || !e.access.contains(need) {
            return None;
        }
        let off = addr.checked_sub(e.buf.addr())?;
        let end = off.checked_add(len)?;
        if end > u64::try_from(e.buf.len()).ok()? {
            return None;
        }
        Some(Seg {
            buf: Arc::clone(&e.buf),
            off: usize::try_from(off).ok()?,
            len: usize::try_from(len).ok()?,
        })
    }

    /// Invalidates `rkey` for remote access (SEND with invalidate). False if `rkey`
    /// names no region with remote access still valid.
    pub(super) fn invalidate(&self, rkey: u32) -> bool {
        let mut table = self.table.write();
        match table.entry_mut(rkey) {
            Some(e) if e.rkey == rkey && e.remote_valid => {
                e.remote_valid = false;
                true
            }
            _ => false,
        }
    }
}

impl Drop for SoftPd {
    fn drop(&mut self) {
        self.dev.pds.remove(self);
    }
}

impl ProtectionDomain for SoftPd {
    fn register(
        &self,
        buf: Arc<DmaBuffer>,
        access: Access,
    ) -> Result<Arc<dyn MemoryRegion>, VerbsError> {
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            // As ibv_reg_mr: remote write access requires local write access.
            return Err(VerbsError::InvalidArgument(
                "REMOTE_WRITE requires LOCAL_WRITE",
            ));
        }
        let seq = self.dev.key_seq.fetch_add(1, Ordering::Relaxed);
        let mut table = self.table.write();
        let idx = match table.free.pop_front() {
            Some(idx) => idx,
            None => {
                let idx = u32::try_from(table.slots.len()).unwrap_or(u32::MAX);
                if idx > MAX_INDEX {
                    return Err(VerbsError::QueueFull("memory regions in protection domain"));
                }
                table.slots.push(None);
                idx
            }
        };
        let low = (idx ^ table.salt) & INDEX_MASK;
        let lkey = (tag(seq.wrapping_mul(2)) << 16) | low;
        let rkey = (tag(seq.wrapping_mul(2).wrapping_add(1)) << 16) | low;
        let entry = MrEntry {
            lkey,
            rkey,
            remote_valid: true,
            access,
            buf: Arc::clone(&buf),
        };
        match table.slots.get_mut(idx as usize) {
            Some(slot) => *slot = Some(entry),
            None => return Err(VerbsError::Provider("key table slot missing".into())),
        }
        drop(table);
        Ok(Arc::new(SoftMr {
            table: Arc::clone(&self.table),
            idx,
            lkey,
            rkey,
            buf,
        }))
    }
}

/// A registered region; dropping it deregisters its keys.
struct SoftMr {
    table: Arc<RwLock<KeyTable>>,
    idx: u32,
    lkey: u32,
    rkey: u32,
    buf: Arc<DmaBuffer>,
}

impl MemoryRegion for SoftMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn addr(&self) -> u64 {
        self.buf.addr()
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn buffer(&self) -> &Arc<DmaBuffer> {
        &self.buf
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        let mut table = self.table.write();
        let mine = table.slots.get_mut(self.idx as usize).and_then(|slot| {
            if slot.as_ref().is_some_and(|e| e.lkey == self.lkey) {
                slot.take()
            } else {
                None
            }
        });
        if mine.is_some() {
            table.free.push_back(self.idx);
        }
        drop(table);
        // The entry (and its buffer reference) is released outside the lock.
        drop(mine);
    }
}
