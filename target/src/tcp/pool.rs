//! Data buffers for transfers that do not fit in a command capsule.
//!
//! One arena per poll group, allocated once at start (plain memory: NVMe/TCP needs no
//! registration) and carved in power-of-two size classes from 4 KiB to the maximum
//! I/O size, recycled through per-class free lists, so the data path never allocates.
//! The arena is zero-filled lazily by the kernel, so untouched parts cost nothing.
//!
//! Ownership: a [`PoolBuf`] is held by exactly one command from allocation until its
//! data went into the connection's send buffer (reads) or its backend write finished
//! (writes), and any backend I/O on it completed; then it goes back with
//! [`BufferPool::free`].

use std::sync::Arc;

use nvmf_common::verbs::DmaBuffer;

use crate::backend::DmaSlice;

const MIN_CLASS_SHIFT: u32 = 12;

/// A buffer handed out by the pool.
#[derive(Debug, Clone)]
pub struct PoolBuf {
    pub slice: DmaSlice,
    class: u8,
}

/// A fixed arena of data buffers.
pub struct BufferPool {
    arena: Arc<DmaBuffer>,
    bump: usize,
    free: Vec<Vec<usize>>,
    max_shift: u32,
    in_use: usize,
}

impl BufferPool {
    /// Allocates an arena of `bytes` (at least one buffer of `max_io` bytes) for
    /// transfers up to `max_io` bytes; `None` when the memory cannot be had.
    pub fn new(bytes: usize, max_io: u32) -> Option<Self> {
        let max_shift = max_io
            .max(1 << MIN_CLASS_SHIFT)
            .checked_next_power_of_two()?
            .trailing_zeros();
        let bytes = bytes.max(1usize << max_shift);
        let arena = Arc::new(DmaBuffer::new(bytes)?);
        Some(BufferPool {
            arena,
            bump: 0,
            free: vec![Vec::new(); (max_shift - MIN_CLASS_SHIFT + 1) as usize],
            max_shift,
            in_use: 0,
        })
    }

    /// A buffer of at least `len` bytes (the slice is exactly `len`), or `None` when
    /// the arena is exhausted (the caller retries after buffers come back) or `len`
    /// exceeds the largest class.
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
            // Cannot happen (the class fits in the arena); keep the space usable.
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

    /// Buffers handed out and not yet freed.
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
        // 4 KiB + 32 KiB used; another 32 KiB does not fit next to the one in use.
        let d = p.alloc(16 * 1024).unwrap();
        assert!(p.alloc(32 * 1024).is_none());
        p.free(a);
        p.free(c);
        p.free(d);
        assert_eq!(p.in_use(), 0);
    }
}
