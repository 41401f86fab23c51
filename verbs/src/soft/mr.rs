//! Protection domains and memory regions: the per-PD key table, and the per-QP key
//! cache that keeps table lookups off the data path.
//!
//! Key layout (lkey and rkey alike): the low 16 bits are the slot index XOR a per-PD
//! salt, the high 16 bits a tag derived from a device-wide registration sequence
//! number `s` (`2s` for the lkey, `2s + 1` for the rkey) through a bijection of 16-bit
//! values. So the lkey and rkey of one region always differ, a key only matches the
//! registration that issued it (a reused slot gets a new tag; tags repeat only after
//! 32768 registrations on the device, and freed slots are reused oldest-first), and a
//! key of another PD lands on a different slot or tag.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::DevShared;
use crate::{Access, DmaBuffer, MemoryRegion, VerbsError};

const INDEX_MASK: u32 = 0xffff;
/// Slots 1..=MAX_INDEX are usable; slot 0 is never handed out.
const MAX_INDEX: u32 = 0xffff;
/// Regions a [`KeyCache`] remembers.
const CACHE_WAYS: usize = 4;

/// A validated piece of registered memory: `len` bytes at `ptr`.
///
/// It holds no reference count: the [`KeyCache`] it was resolved through keeps the
/// buffer alive (in an entry or, once evicted, in its graveyard) until
/// [`KeyCache::end_request`], and segments never outlive the work request they serve.
pub(super) struct Seg {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

// SAFETY: a `Seg` points into a `DmaBuffer`, which is `Send + Sync` plain memory. It is
// only stored in a QP's per-request scratch vectors (behind the QP's send lock) and
// dereferenced while the key cache that resolved it keeps the buffer alive.
unsafe impl Send for Seg {}

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

/// What regions and caches share with their PD.
struct PdShared {
    table: RwLock<KeyTable>,
    /// Moves whenever a key stops being valid (deregistration, invalidation), which
    /// empties every [`KeyCache`] of the PD. Registrations leave it alone: a new key
    /// cannot be in a cache.
    epoch: AtomicU64,
}

impl PdShared {
    fn bump_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::Release);
    }
}

/// A bijection of 16-bit values, so distinct sequence numbers give distinct tags.
fn tag(seq: u32) -> u32 {
    (seq.wrapping_mul(0x9e3b) ^ 0x5a17) & 0xffff
}

struct CacheEntry {
    key: u32,
    remote: bool,
    access: Access,
    buf: Arc<DmaBuffer>,
}

/// A few recently used regions of one PD, valid for one epoch of it. Owned by a QP
/// (under its send lock), so hits take no lock and touch no reference count.
pub(super) struct KeyCache {
    /// The PD the entries belong to.
    pd: Option<Arc<PdShared>>,
    epoch: u64,
    entries: [Option<CacheEntry>; CACHE_WAYS],
    next: usize,
    /// Evicted buffers still named by segments of the current work request.
    graveyard: Vec<Arc<DmaBuffer>>,
}

impl KeyCache {
    pub(super) fn new() -> Self {
        KeyCache {
            pd: None,
            epoch: 0,
            entries: std::array::from_fn(|_| None),
            next: 0,
            graveyard: Vec::with_capacity(CACHE_WAYS * 2),
        }
    }

    /// Releases what the finished work request's segments needed. Call once its
    /// segments are gone.
    pub(super) fn end_request(&mut self) {
        self.graveyard.clear();
    }

    fn clear(&mut self) {
        for e in &mut self.entries {
            if let Some(e) = e.take() {
                self.graveyard.push(e.buf);
            }
        }
    }

    fn insert(&mut self, entry: CacheEntry) -> &CacheEntry {
        let way = self.next % CACHE_WAYS;
        self.next = self.next.wrapping_add(1);
        let slot = &mut self.entries[way];
        if let Some(old) = slot.take() {
            self.graveyard.push(old.buf);
        }
        slot.insert(entry)
    }
}

/// A protection domain of the soft provider.
pub(super) struct SoftPd {
    pub(super) dev: Arc<DevShared>,
    shared: Arc<PdShared>,
    /// Itself, so shared receive queues can hold the PD.
    pub(super) me: std::sync::Weak<SoftPd>,
}

impl SoftPd {
    /// Registers `buf` with `access` in this PD (what [`ProtectionDomain::register`]
    /// does for it).
    pub(super) fn register_region(
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
        let mut table = self.shared.table.write();
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
            pd: Arc::clone(&self.shared),
            idx,
            lkey,
            rkey,
            buf,
        }))
    }

    pub(super) fn new(dev: &Arc<DevShared>) -> Arc<SoftPd> {
        let salt = dev.random_u32() & INDEX_MASK;
        let pd = Arc::new_cyclic(|me| SoftPd {
            me: me.clone(),
            dev: Arc::clone(dev),
            shared: Arc::new(PdShared {
                table: RwLock::new(KeyTable {
                    salt,
                    // Slot 0 is a placeholder that never holds a region.
                    slots: vec![None],
                    free: VecDeque::new(),
                }),
                epoch: AtomicU64::new(0),
            }),
        });
        dev.pds.insert(&pd);
        pd
    }

    /// Validates `len` bytes at virtual address `addr` under `key` (an rkey when
    /// `remote`, else an lkey) with rights `need`, with overflow-safe bounds checks.
    /// `cache` must only ever be used with this PD's lookups for hits to be likely (it
    /// is correct with any PD).
    pub(super) fn resolve(
        &self,
        cache: &mut KeyCache,
        key: u32,
        remote: bool,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Option<Seg> {
        // Read before any table lookup: a key that dies later moves the epoch past it.
        let epoch = self.shared.epoch.load(Ordering::Acquire);
        let same_pd = cache
            .pd
            .as_ref()
            .is_some_and(|pd| Arc::ptr_eq(pd, &self.shared));
        if !same_pd || cache.epoch != epoch {
            cache.clear();
            if !same_pd {
                cache.pd = Some(Arc::clone(&self.shared));
            }
            cache.epoch = epoch;
        }
        let way = cache.entries.iter().position(|e| {
            e.as_ref()
                .is_some_and(|e| e.key == key && e.remote == remote)
        });
        let entry = if let Some(way) = way {
            cache.entries.get(way)?.as_ref()?
        } else {
            let fresh = {
                let table = self.shared.table.read();
                let e = table.entry(key)?;
                let key_ok = if remote {
                    e.rkey == key && e.remote_valid
                } else {
                    e.lkey == key
                };
                if !key_ok {
                    return None;
                }
                CacheEntry {
                    key,
                    remote,
                    access: e.access,
                    buf: Arc::clone(&e.buf),
                }
            };
            cache.insert(fresh)
        };
        if !entry.access.contains(need) {
            return None;
        }
        let buf = &entry.buf;
        let off = addr.checked_sub(buf.addr())?;
        let end = off.checked_add(len)?;
        if end > u64::try_from(buf.len()).ok()? {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let ptr = buf.ptr_at(usize::try_from(off).ok()?, len)?;
        Some(Seg { ptr, len })
    }

    /// Invalidates `rkey` for remote access (SEND with invalidate). False if `rkey`
    /// names no region with remote access still valid.
    pub(super) fn invalidate(&self, rkey: u32) -> bool {
        let mut table = self.shared.table.write();
        match table.entry_mut(rkey) {
            Some(e) if e.rkey == rkey && e.remote_valid => {
                e.remote_valid = false;
                self.shared.bump_epoch();
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

/// A registered region; dropping it deregisters its keys.
struct SoftMr {
    pd: Arc<PdShared>,
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
        let mut table = self.pd.table.write();
        let mine = table.slots.get_mut(self.idx as usize).and_then(|slot| {
            if slot.as_ref().is_some_and(|e| e.lkey == self.lkey) {
                slot.take()
            } else {
                None
            }
        });
        if mine.is_some() {
            table.free.push_back(self.idx);
            self.pd.bump_epoch();
        }
        drop(table);
        // The entry (and its buffer reference) is released outside the lock.
        drop(mine);
    }
}
