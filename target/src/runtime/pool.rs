//! A poll group's data buffers: one arena allocated once, carved into power-of-two
//! size classes (4 KiB up to the largest transfer), reused through per-class free lists.
//!
//! Owned by one poll group thread, so no locking. On NVMe/RDMA the arena is
//! registered once as a local-write memory region ([`BufferPool::register`]) and every
//! buffer is a sub-range of it; NVMe/TCP uses the plain arena. Nothing is registered
//! or allocated per I/O.

use std::sync::Arc;

use nvmf_common::verbs::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

use crate::backend::DmaSlice;

/// The smallest size class: 4 KiB.
const MIN_CLASS_SHIFT: u32 = 12;

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

/// Size-class allocator over one arena.
pub struct BufferPool {
    arena: Arc<DmaBuffer>,
    /// The arena's registration, on transports that need one.
    mr: Option<Arc<dyn MemoryRegion>>,
    /// Its local key (read on every post: kept here, not asked of the region).
    lkey: u32,
    bump: usize,
    free: Vec<Vec<usize>>,
    max_shift: u32,
    in_use: usize,
}

impl BufferPool {
    /// An arena of `bytes` (at least one buffer of `max_io`) for transfers of up to
    /// `max_io` bytes. None when the memory cannot be had.
    pub fn new(bytes: usize, max_io: u32) -> Option<Self> {
        let max_shift = max_io
            .max(1 << MIN_CLASS_SHIFT)
            .checked_next_power_of_two()?
            .trailing_zeros();
        let bytes = bytes.max(1usize << max_shift);
        let arena = Arc::new(DmaBuffer::new(bytes)?);
        Some(BufferPool {
            arena,
            mr: None,
            lkey: 0,
            bump: 0,
            free: vec![Vec::new(); (max_shift - MIN_CLASS_SHIFT + 1) as usize],
            max_shift,
            in_use: 0,
        })
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

    /// A buffer of `len` bytes, or None when the arena is exhausted (or `len` is
    /// larger than the largest class).
    pub fn alloc(&mut self, len: u32) -> Option<PoolBuf> {
        let shift = len
            .max(1)
            .checked_next_power_of_two()?
            .trailing_zeros()
            .max(MIN_CLASS_SHIFT);
        if shift > self.max_shift {
            return None;
        }
        let class = (shift - MIN_CLASS_SHIFT) as usize;
        let size = 1usize << shift;
        let off = match self.free.get_mut(class).and_then(Vec::pop) {
            Some(off) => off,
            None => {
                let off = self.bump;
                if off + size > self.arena.len() {
                    return None;
                }
                self.bump += size;
                off
            }
        };
        let Some(slice) = DmaSlice::new(self.arena.clone(), off, len as usize) else {
            if let Some(list) = self.free.get_mut(class) {
                list.push(off);
            }
            return None;
        };
        self.in_use += 1;
        Some(PoolBuf {
            slice,
            class: class as u8,
        })
    }

    pub fn free(&mut self, b: PoolBuf) {
        if let Some(list) = self.free.get_mut(usize::from(b.class)) {
            list.push(b.slice.offset);
            self.in_use = self.in_use.saturating_sub(1);
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
}
