//! Registered data buffers for transfers that do not fit in the capsule.
//!
//! One arena per poll group, registered once with the protection domain (local write
//! only: the target is always the active side of RDMA READ/WRITE, so the host never
//! needs a key to our memory). Buffers are carved in power-of-two size classes from
//! 4 KiB to the maximum I/O size and recycled through per-class free lists, so the
//! data path never allocates or registers memory.
//!
//! Ownership: a [`PoolBuf`] is held by exactly one request from allocation until its
//! response send completed (and any backend I/O on it finished); then it goes back
//! with [`BufferPool::free`].

use std::sync::Arc;

use nvmf_common::verbs::{Access, DmaBuffer, MemoryRegion, ProtectionDomain, VerbsError};

use crate::backend::DmaSlice;

const MIN_CLASS_SHIFT: u32 = 12;

/// A buffer handed out by the pool.
#[derive(Debug, Clone)]
pub struct PoolBuf {
    pub slice: DmaSlice,
    class: u8,
}

impl PoolBuf {
    pub fn addr(&self) -> u64 {
        self.slice.buf.addr() + self.slice.offset as u64
    }
}

pub struct BufferPool {
    arena: Arc<DmaBuffer>,
    mr: Arc<dyn MemoryRegion>,
    bump: usize,
    free: Vec<Vec<usize>>,
    max_shift: u32,
    /// Buffers handed out and not yet freed.
    in_use: usize,
}

impl BufferPool {
    /// Allocates and registers an arena of `bytes` for transfers up to `max_io` bytes.
    pub fn new(pd: &dyn ProtectionDomain, bytes: usize, max_io: u32) -> Result<Self, VerbsError> {
        let max_shift = max_io
            .max(1 << MIN_CLASS_SHIFT)
            .next_power_of_two()
            .trailing_zeros();
        let bytes = bytes.max(1usize << max_shift);
        let arena = Arc::new(
            DmaBuffer::new(bytes)
                .ok_or(VerbsError::Provider("cannot allocate data arena".into()))?,
        );
        let mr = pd.register(arena.clone(), Access::LOCAL_WRITE)?;
        Ok(BufferPool {
            arena,
            mr,
            bump: 0,
            free: vec![Vec::new(); (max_shift - MIN_CLASS_SHIFT + 1) as usize],
            max_shift,
            in_use: 0,
        })
    }

    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// A buffer of at least `len` bytes (the slice is exactly `len`), or None when the
    /// arena is exhausted (the caller retries after buffers come back).
    pub fn alloc(&mut self, len: u32) -> Option<PoolBuf> {
        let shift = len
            .max(1)
            .next_power_of_two()
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
        let slice = DmaSlice::new(self.arena.clone(), off, len as usize)?;
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

    /// Buffers handed out and not yet freed (a leak check: 0 once the group is idle).
    pub fn in_use(&self) -> usize {
        self.in_use
    }
}
