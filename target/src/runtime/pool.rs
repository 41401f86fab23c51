//! A poll group's data buffers: one arena allocated once and managed as a buddy
//! allocator with power-of-two size classes (4 KiB up to the largest transfer).
//!
//! A request for a class takes a free block of that class, or splits the smallest
//! larger free block. A freed block goes back to its class's list as it is, and free
//! buddies are merged when a request finds no block (lazy coalescing: a steady load of
//! one size reuses its blocks without splitting and merging on every I/O). So every
//! byte of the arena serves every class: memory that once held many small buffers
//! serves a large one as soon as they are back. (The first version carved the
//! arena once into per-class free lists and never merged them: after enough traffic
//! of other sizes, a transfer of a class never used before found no free block and no
//! untouched arena, and its command waited for a buffer forever, with every later
//! data command of the group behind it.)
//!
//! Owned by one poll group thread, so no locking; every operation is O(number of
//! classes). On NVMe/RDMA the arena is registered once as a local-write memory region
//! ([`BufferPool::register`]) and every buffer is a sub-range of it; NVMe/TCP uses the
//! plain arena. Nothing is registered or allocated per I/O.

use std::sync::Arc;

use nvmf_verbs::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

use crate::backend::DmaSlice;

/// The smallest size class: 4 KiB (one unit of the arena).
const MIN_CLASS_SHIFT: u32 = 12;
/// End of a free list.
const NIL: u32 = u32::MAX;
/// `head` value of a unit that starts no free block.
const NOT_FREE: u8 = 0;
/// `head` flag of a unit that starts a free block (the low bits are its class).
const FREE: u8 = 0x80;

/// A buffer taken from the pool; give it back with [`BufferPool::free`].
#[derive(Debug, Clone)]
pub struct PoolBuf {
    pub slice: DmaSlice,
    class: u8,
}

impl PoolBuf {
    /// The buffer's virtual address (the address a local SGE names).
    pub fn addr(&self) -> u64 {
        self.slice.buf.addr() + self.slice.offset as u64
    }
}

/// Buddy allocator over one arena.
pub struct BufferPool {
    arena: Arc<DmaBuffer>,
    /// The arena's registration, on transports that need one.
    mr: Option<Arc<dyn MemoryRegion>>,
    /// Its local key (read on every post: kept here, not asked of the region).
    lkey: u32,
    /// Units (4 KiB) the arena holds.
    units: u32,
    /// Per unit: `FREE | class` when a free block starts there, else `NOT_FREE`.
    head: Vec<u8>,
    /// Per unit starting a free block: the next and previous free block of its class.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Per class: the first free block (a unit index) or `NIL`.
    first: Vec<u32>,
    /// The largest class (in classes above the smallest).
    max_class: u8,
    in_use: usize,
    /// Blocks were freed since the last merge of buddies.
    unmerged: bool,
}

impl BufferPool {
    /// An arena of `bytes` (at least one buffer of `max_io`) for transfers of up to
    /// `max_io` bytes. None when the memory cannot be had.
    pub fn new(bytes: usize, max_io: u32) -> Option<Self> {
        let max_shift = max_io
            .max(1 << MIN_CLASS_SHIFT)
            .checked_next_power_of_two()?
            .trailing_zeros();
        let max_class = u8::try_from(max_shift - MIN_CLASS_SHIFT).ok()?;
        let bytes = bytes.max(1usize << max_shift);
        let units = u32::try_from(bytes >> MIN_CLASS_SHIFT)
            .ok()
            .filter(|&u| u < NIL)?;
        let arena = Arc::new(DmaBuffer::new(bytes)?);
        let n = units as usize;
        let mut pool = BufferPool {
            arena,
            mr: None,
            lkey: 0,
            units,
            head: vec![NOT_FREE; n],
            next: vec![NIL; n],
            prev: vec![NIL; n],
            first: vec![NIL; usize::from(max_class) + 1],
            max_class,
            in_use: 0,
            unmerged: false,
        };
        // The arena as blocks of the largest class, then the rest as one block per
        // bit of its size, largest first: every block is aligned to its size, and a
        // block whose buddy would reach past the arena is never merged.
        let mut at = 0u32;
        for class in (0..=max_class).rev() {
            let size = 1u32 << class;
            while units - at >= size {
                pool.push(at, class);
                at += size;
                if class != max_class {
                    break;
                }
            }
        }
        Some(pool)
    }

    /// Registers the arena with `pd` (local write: the device writes RDMA READ data
    /// into it and reads RDMA WRITE data from it).
    pub fn register(&mut self, pd: &dyn ProtectionDomain) -> Result<(), VerbsError> {
        let mr = pd.register(self.arena.clone(), Access::LOCAL_WRITE)?;
        self.lkey = mr.lkey();
        self.mr = Some(mr);
        Ok(())
    }

    /// The arena's local key (0 when it is not registered).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// A buffer of `len` bytes, or None when no free block of its class can be had
    /// now (or `len` is larger than the largest class).
    pub fn alloc(&mut self, len: u32) -> Option<PoolBuf> {
        let shift = len
            .max(1)
            .checked_next_power_of_two()?
            .trailing_zeros()
            .max(MIN_CLASS_SHIFT);
        let class = u8::try_from(shift - MIN_CLASS_SHIFT).ok()?;
        if class > self.max_class {
            return None;
        }
        let from = match self.free_class_from(class) {
            Some(c) => c,
            None if self.unmerged => {
                self.merge_buddies();
                self.free_class_from(class)?
            }
            None => return None,
        };
        let mut from = from;
        let unit = *self.first.get(usize::from(from))?;
        self.unlink(unit, from);
        // Split down: the upper halves stay free.
        while from > class {
            from -= 1;
            self.push(unit + (1 << from), from);
        }
        let off = (unit as usize) << MIN_CLASS_SHIFT;
        let Some(slice) = DmaSlice::new(self.arena.clone(), off, len as usize) else {
            self.push(unit, class);
            self.unmerged = true;
            return None;
        };
        self.in_use += 1;
        Some(PoolBuf { slice, class })
    }

    pub fn free(&mut self, b: PoolBuf) {
        let Ok(unit) = u32::try_from(b.slice.offset >> MIN_CLASS_SHIFT) else {
            return;
        };
        let ours = b.class <= self.max_class
            && self.head.get(unit as usize).is_some_and(|&h| h & FREE == 0);
        // Not one of ours, or freed twice: keeping it out is the safe choice.
        debug_assert!(ours, "pool buffer freed twice or foreign");
        if !ours {
            return;
        }
        self.push(unit, b.class);
        self.unmerged = true;
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// The smallest class at or above `class` with a free block.
    fn free_class_from(&self, class: u8) -> Option<u8> {
        let mut c = class;
        while self.first.get(usize::from(c)).is_some_and(|&f| f == NIL) {
            c += 1;
        }
        (usize::from(c) < self.first.len()).then_some(c)
    }

    /// Merges every pair of free buddies, smallest class first (so merged blocks merge
    /// further in the next class).
    fn merge_buddies(&mut self) {
        let mut blocks = Vec::new();
        for class in 0..self.max_class {
            blocks.clear();
            let mut u = self.first.get(usize::from(class)).copied().unwrap_or(NIL);
            while u != NIL {
                blocks.push(u);
                u = self.next.get(u as usize).copied().unwrap_or(NIL);
            }
            let size = 1u32 << class;
            for &u in &blocks {
                // Already merged as the buddy of an earlier block.
                if self.head.get(u as usize) != Some(&(FREE | class)) {
                    continue;
                }
                let buddy = u ^ size;
                let free_buddy = buddy.checked_add(size).is_some_and(|end| end <= self.units)
                    && self.head.get(buddy as usize) == Some(&(FREE | class));
                if free_buddy {
                    self.unlink(u, class);
                    self.unlink(buddy, class);
                    self.push(u.min(buddy), class + 1);
                }
            }
        }
        self.unmerged = false;
    }

    /// Puts free block `unit` of `class` first on its list.
    fn push(&mut self, unit: u32, class: u8) {
        let c = usize::from(class);
        let u = unit as usize;
        let Some(first) = self.first.get_mut(c) else {
            return;
        };
        let old = std::mem::replace(first, unit);
        if let (Some(h), Some(n), Some(p)) = (
            self.head.get_mut(u),
            self.next.get_mut(u),
            self.prev.get_mut(u),
        ) {
            *h = FREE | class;
            *n = old;
            *p = NIL;
        }
        if let Some(p) = self.prev.get_mut(old as usize) {
            *p = unit;
        }
    }

    /// Takes free block `unit` of `class` off its list.
    fn unlink(&mut self, unit: u32, class: u8) {
        let u = unit as usize;
        let (n, p) = (
            self.next.get(u).copied().unwrap_or(NIL),
            self.prev.get(u).copied().unwrap_or(NIL),
        );
        if let Some(x) = self.prev.get_mut(n as usize) {
            *x = p;
        }
        match self.next.get_mut(p as usize) {
            Some(x) => *x = n,
            None => {
                if let Some(f) = self.first.get_mut(usize::from(class)) {
                    *f = n;
                }
            }
        }
        if let Some(h) = self.head.get_mut(u) {
            *h = NOT_FREE;
        }
    }

    /// Buffers handed out and not yet returned.
    pub fn in_use(&self) -> usize {
        self.in_use
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_reused_and_bounded() {
        let mut p = BufferPool::new(64 * 1024, 32 * 1024).unwrap();
        let a = p.alloc(100).unwrap();
        assert_eq!(a.slice.len, 100);
        let b = p.alloc(32 * 1024).unwrap();
        assert!(p.alloc(32 * 1024 + 1).is_none());
        assert_eq!(p.in_use(), 2);
        let off = b.slice.offset;
        p.free(b);
        let c = p.alloc(20_000).unwrap();
        assert_eq!(c.slice.offset, off);
        let d = p.alloc(16 * 1024).unwrap();
        assert!(p.alloc(32 * 1024).is_none());
        p.free(a);
        p.free(c);
        p.free(d);
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.lkey(), 0, "not registered");
    }

    /// Units of one 4 KiB buffer, for the layouts below.
    const K4: u32 = 4 * 1024;

    /// The bug this allocator replaced: once small buffers had taken the whole arena
    /// and come back, a large buffer could never be had again.
    #[test]
    fn memory_of_freed_small_buffers_serves_a_large_one() {
        let mib = 1024 * 1024;
        let mut p = BufferPool::new(4 * mib, mib as u32).unwrap();
        let mut small = Vec::new();
        while let Some(b) = p.alloc(K4) {
            small.push(b);
        }
        assert_eq!(small.len(), 1024, "the whole arena in 4 KiB buffers");
        assert!(
            p.alloc(513 * 512).is_none(),
            "nothing left while they are held"
        );
        for b in small {
            p.free(b);
        }
        assert_eq!(p.in_use(), 0);
        // 513 blocks of 512 bytes (the write that never completed) and then the
        // whole arena in buffers of the largest class.
        let odd = p
            .alloc(513 * 512)
            .expect("a 512 KiB block after the small ones");
        p.free(odd);
        let big: Vec<_> = (0..4).map_while(|_| p.alloc(mib as u32)).collect();
        assert_eq!(big.len(), 4, "the arena merged back into 1 MiB blocks");
        for b in big {
            p.free(b);
        }
        assert_eq!(p.in_use(), 0);
    }

    /// An arena that is not a multiple of the largest class: the tail serves small
    /// buffers and never merges past the arena's end.
    #[test]
    fn an_uneven_arena_tail_is_used_and_kept_inside() {
        let mut p = BufferPool::new(64 * 1024 + 12 * 1024, 64 * 1024).unwrap();
        let mut got = Vec::new();
        while let Some(b) = p.alloc(K4) {
            got.push(b);
        }
        assert_eq!(got.len(), 19);
        let mut offs: Vec<_> = got.iter().map(|b| b.slice.offset).collect();
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len(), 19, "no buffer handed out twice");
        assert!(offs.iter().all(|&o| o + K4 as usize <= 76 * 1024));
        for b in got {
            p.free(b);
        }
        assert!(p.alloc(64 * 1024).is_some());
        assert!(p.alloc(8 * 1024).is_some());
        assert!(p.alloc(K4).is_some());
        assert!(p.alloc(K4).is_none());
    }

    /// Random sizes taken and returned in random order: no two live buffers overlap,
    /// and once all are back the arena is whole again.
    #[test]
    fn random_traffic_never_overlaps_and_merges_back() {
        let arena = 2 * 1024 * 1024;
        let mut p = BufferPool::new(arena, 256 * 1024).unwrap();
        let mut live: Vec<PoolBuf> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            if next() % 3 != 0 || live.is_empty() {
                let len = (next() % (256 * 1024)) as u32 + 1;
                if let Some(b) = p.alloc(len) {
                    let (lo, hi) = (b.slice.offset, b.slice.offset + len as usize);
                    assert!(hi <= arena);
                    for o in &live {
                        let (olo, ohi) = (o.slice.offset, o.slice.offset + o.slice.len);
                        assert!(hi <= olo || ohi <= lo, "overlap at {lo:#x}");
                    }
                    live.push(b);
                }
            } else {
                let i = (next() as usize) % live.len();
                p.free(live.swap_remove(i));
            }
            assert_eq!(p.in_use(), live.len());
        }
        for b in live.drain(..) {
            p.free(b);
        }
        let whole: Vec<_> = (0..8).map_while(|_| p.alloc(256 * 1024)).collect();
        assert_eq!(whole.len(), 8);
    }
}
