//! Page-aligned memory that RDMA hardware (or the soft provider) and io_uring may access.
//!
//! A `DmaBuffer` is shared (`Arc`) between its owner, the memory region that registers
//! it, and in-flight I/O. Like DMA memory, it may be written by the "device" while the
//! program holds it, so it hands out raw pointers and bounds-checked copies rather than
//! long-lived Rust references. The rule callers follow is the verbs rule: do not touch
//! bytes that a posted, not yet completed work request or I/O may access.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: a page, enough for O_DIRECT on any device.
pub const DMA_ALIGN: usize = 4096;

pub struct DmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: the buffer is plain memory with no thread affinity; concurrent access is
// governed by the verbs ownership rule described in the module docs, as with DMA.
unsafe impl Send for DmaBuffer {}
// SAFETY: see `Send`; all accessors that read or write take raw-pointer copies.
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// Allocates `len` zeroed bytes aligned to [`DMA_ALIGN`]. Returns `None` when `len`
    /// is zero or the allocation fails.
    pub fn new(len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, DMA_ALIGN).ok()?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(DmaBuffer { ptr, len, layout })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte, as registered with verbs.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Raw pointer to the first byte, for io_uring and providers.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Pointer to `offset`, if `offset + len` lies inside the buffer.
    pub fn ptr_at(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: offset <= len of the allocation, checked above.
        Some(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        match self.ptr_at(offset, dst.len()) {
            Some(src) => {
                // SAFETY: src..src+len is inside the allocation; dst is a distinct Rust slice.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
                true
            }
            None => false,
        }
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> bool {
        match self.ptr_at(offset, src.len()) {
            Some(dst) => {
                // SAFETY: dst..dst+len is inside the allocation; src is a distinct Rust slice.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
                true
            }
            None => false,
        }
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> bool {
        match self.ptr_at(offset, len) {
            Some(dst) => {
                // SAFETY: dst..dst+len is inside the allocation.
                unsafe { std::ptr::write_bytes(dst, byte, len) };
                true
            }
            None => false,
        }
    }

    /// Borrows `len` bytes at `offset` immutably.
    ///
    /// # Safety
    /// No posted work request or I/O may write these bytes while the slice lives.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let p = self.ptr_at(offset, len)?;
        // SAFETY: in bounds (ptr_at), and the caller guarantees no concurrent writer.
        Some(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Borrows `len` bytes at `offset` mutably.
    ///
    /// # Safety
    /// No posted work request or I/O may access these bytes, and no other slice of them
    /// may exist, while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let p = self.ptr_at(offset, len)?;
        // SAFETY: in bounds (ptr_at), and the caller guarantees exclusive access.
        Some(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl std::fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DmaBuffer({:#x}, {} bytes)", self.addr(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let b = DmaBuffer::new(8192).unwrap();
        assert_eq!(b.addr() % DMA_ALIGN as u64, 0);
        assert!(b.write_at(8190, &[1, 2]));
        assert!(!b.write_at(8191, &[1, 2]));
        assert!(b.ptr_at(usize::MAX, 2).is_none());
        let mut out = [0u8; 2];
        assert!(b.read_at(8190, &mut out));
        assert_eq!(out, [1, 2]);
        assert!(DmaBuffer::new(0).is_none());
    }
}
