//! A RAM disk: one anonymous private mapping reserved up front with `MAP_NORESERVE`, so
//! a namespace costs only the pages that have been written.
//!
//! Reads copy out of the mapping into the [`DmaSlice`], writes copy into it; Write
//! Zeroes and Deallocate zero the range, returning whole pages to the kernel with
//! `madvise(MADV_DONTNEED)` (they then read back as zeroes) and `memset`ting the rest.
//! Channels complete inline, like the null backend's.
//!
//! # Concurrency
//!
//! The mapping is shared by every channel of every thread and is only ever accessed
//! through raw pointers (`ptr::copy_nonoverlapping`, `ptr::write_bytes`, `madvise`),
//! never through Rust references, exactly as a device DMAs into memory. I/O to
//! different ranges is therefore independent. Overlapping concurrent writes (or a read
//! concurrent with a write) to the same blocks are the host's problem, as on a real
//! disk: NVMe gives no ordering between outstanding commands, and the blocks end up
//! with some mix of the data. Such a race is a data race on plain bytes (`u8`, for
//! which every bit pattern is valid); it cannot corrupt anything but the racing bytes,
//! and no Rust reference to this memory exists whose invariants it could break.

use std::ptr::NonNull;
use std::sync::Arc;

use super::options::{check_memory_size, OpenError};
use super::{Backend, BackendError, BackendInfo, InlineChannel, InlineExec, IoChannel, IoOp};

/// Zeroed ranges at least this large give their whole pages back with `madvise`;
/// smaller ones are `memset` (cheaper than a system call and a TLB shootdown).
const MADVISE_MIN: usize = 64 * 1024;

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The anonymous mapping behind a RAM namespace.
struct Region {
    base: NonNull<u8>,
    len: usize,
    page: usize,
}

// SAFETY: the region is plain memory with no thread affinity; it is accessed only by
// raw-pointer copies on disjoint or host-raced ranges (see the module docs).
unsafe impl Send for Region {}
// SAFETY: as for Send; no `&`/`&mut` to the memory is ever created.
unsafe impl Sync for Region {}

impl Region {
    fn new(len: usize) -> std::io::Result<Region> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing; it
        // aliases nothing. MAP_NORESERVE: pages are allocated (zeroed) on first touch.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null address"))?;
        Ok(Region {
            base,
            len,
            page: page_size(),
        })
    }

    /// Pointer to `offset` if `offset + len` lies inside the region.
    fn ptr_at(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let offset = usize::try_from(offset).ok()?;
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: offset <= self.len, inside the mapping (checked above).
        Some(unsafe { self.base.as_ptr().add(offset) })
    }

    fn read(&self, offset: u64, dst: *mut u8, len: usize) -> Result<(), BackendError> {
        let src = self.ptr_at(offset, len).ok_or(BackendError::OutOfRange)?;
        // SAFETY: src..src+len is inside the mapping; dst..dst+len is inside a DmaBuffer
        // (checked by the caller with `ptr_at`). They cannot overlap: one is this mmap,
        // the other a heap allocation. Concurrent writers of the same bytes are a host
        // race on plain bytes (module docs).
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        Ok(())
    }

    fn write(&self, offset: u64, src: *const u8, len: usize) -> Result<(), BackendError> {
        let dst = self.ptr_at(offset, len).ok_or(BackendError::OutOfRange)?;
        // SAFETY: as in `read`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        Ok(())
    }

    /// Zeroes `len` bytes at `offset`, giving whole pages of large ranges back.
    fn zero(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        let len = usize::try_from(len).map_err(|_| BackendError::OutOfRange)?;
        let start = self.ptr_at(offset, len).ok_or(BackendError::OutOfRange)? as usize;
        let end = start + len;
        let mut done_inner = false;
        if len >= MADVISE_MIN {
            let inner_start = start.next_multiple_of(self.page);
            let inner_end = end - end % self.page;
            if inner_end > inner_start {
                // SAFETY: [inner_start, inner_end) is page-aligned and inside our private
                // anonymous mapping; MADV_DONTNEED makes those pages read back as zeroes
                // and touches nothing else.
                let rc = unsafe {
                    libc::madvise(
                        inner_start as *mut libc::c_void,
                        inner_end - inner_start,
                        libc::MADV_DONTNEED,
                    )
                };
                if rc == 0 {
                    // SAFETY: head and tail lie inside the range checked above.
                    unsafe {
                        std::ptr::write_bytes(start as *mut u8, 0, inner_start - start);
                        std::ptr::write_bytes(inner_end as *mut u8, 0, end - inner_end);
                    }
                    done_inner = true;
                }
            }
        }
        if !done_inner {
            // SAFETY: start..end is inside the mapping (checked above).
            unsafe { std::ptr::write_bytes(start as *mut u8, 0, len) };
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`; every channel holds an
        // `Arc<Region>`, so no I/O can use it any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A RAM namespace, shared by all threads.
pub struct RamBackend {
    info: BackendInfo,
    region: Arc<Region>,
}

impl std::fmt::Debug for RamBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RamBackend")
            .field("info", &self.info)
            .finish()
    }
}

impl RamBackend {
    /// Reserves `size_bytes` (a non-zero multiple of `block_size`) of address space;
    /// memory is committed as blocks are written.
    pub fn new(size_bytes: u64, block_size: u32) -> Result<RamBackend, OpenError> {
        check_memory_size("ram", size_bytes, block_size, 0)?;
        let len = usize::try_from(size_bytes).map_err(|_| OpenError::Alloc {
            kind: "ram",
            size: size_bytes,
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        let region = Region::new(len).map_err(|source| OpenError::Alloc {
            kind: "ram",
            size: size_bytes,
            source,
        })?;
        Ok(RamBackend {
            info: BackendInfo {
                size_bytes,
                block_size,
                volatile_write_cache: false,
                supports_deallocate: true,
                supports_write_zeroes: true,
                deallocated_reads_zero: true,
                description: "ram".to_string(),
            },
            region: Arc::new(region),
        })
    }
}

impl Backend for RamBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        Ok(Box::new(InlineChannel::new(RamExec {
            region: self.region.clone(),
        })))
    }
}

struct RamExec {
    region: Arc<Region>,
}

impl InlineExec for RamExec {
    fn size_bytes(&self) -> u64 {
        self.region.len as u64
    }

    fn execute(&self, op: &IoOp) -> Result<(), BackendError> {
        match op {
            IoOp::Read { offset, buf } => {
                let dst = buf
                    .buf
                    .ptr_at(buf.offset, buf.len)
                    .ok_or(BackendError::Io(libc::EFAULT))?;
                self.region.read(*offset, dst, buf.len)
            }
            IoOp::Write { offset, buf, .. } => {
                let src = buf
                    .buf
                    .ptr_at(buf.offset, buf.len)
                    .ok_or(BackendError::Io(libc::EFAULT))?;
                self.region.write(*offset, src, buf.len)
            }
            IoOp::Flush => Ok(()),
            IoOp::WriteZeroes { offset, len } | IoOp::Deallocate { offset, len } => {
                self.region.zero(*offset, *len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DmaSlice;
    use nvmf_verbs::DmaBuffer;

    fn slice(buf: &Arc<DmaBuffer>, offset: usize, len: usize) -> DmaSlice {
        DmaSlice::new(buf.clone(), offset, len).unwrap()
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn run(ch: &mut dyn IoChannel, tag: u64, op: IoOp) -> Result<(), BackendError> {
        ch.submit(tag, op)?;
        ch.flush();
        let mut out = Vec::new();
        assert_eq!(ch.poll(&mut out), 1);
        assert_eq!(out[0].0, tag);
        out[0].1.clone().map(|_| ())
    }

    fn read(ch: &mut dyn IoChannel, offset: u64, len: usize) -> Vec<u8> {
        let buf = Arc::new(DmaBuffer::new(len).unwrap());
        buf.fill(0, len, 0xEE);
        run(
            ch,
            99,
            IoOp::Read {
                offset,
                buf: slice(&buf, 0, len),
            },
        )
        .unwrap();
        let mut v = vec![0; len];
        buf.read_at(0, &mut v);
        v
    }

    fn write(ch: &mut dyn IoChannel, offset: u64, data: &[u8]) {
        let buf = Arc::new(DmaBuffer::new(data.len() + 8).unwrap());
        buf.write_at(8, data);
        run(
            ch,
            98,
            IoOp::Write {
                offset,
                buf: slice(&buf, 8, data.len()),
                fua: false,
            },
        )
        .unwrap();
    }

    #[test]
    fn ram_roundtrip() {
        let b = RamBackend::new(4 << 20, 512).unwrap();
        let info = b.info();
        assert_eq!(info.size_bytes, 4 << 20);
        assert!(info.deallocated_reads_zero);
        let mut ch = b.open_channel().unwrap();
        assert_eq!(ch.event_fd(), None);

        // Fresh memory reads as zeroes.
        assert!(read(&mut *ch, 0, 4096).iter().all(|&b| b == 0));

        let data = pattern(1, 3 * 4096 + 512);
        write(&mut *ch, 1536, &data);
        assert_eq!(read(&mut *ch, 1536, data.len()), data);
        // Neighbours untouched.
        assert!(read(&mut *ch, 1024, 512).iter().all(|&b| b == 0));
        assert_eq!(run(&mut *ch, 5, IoOp::Flush), Ok(()));

        // Write Zeroes in the middle (memset path).
        assert_eq!(
            run(
                &mut *ch,
                6,
                IoOp::WriteZeroes {
                    offset: 2048,
                    len: 1024
                }
            ),
            Ok(())
        );
        let got = read(&mut *ch, 1536, data.len());
        assert_eq!(got[..512], data[..512]);
        assert!(got[512..1536].iter().all(|&b| b == 0));
        assert_eq!(got[1536..], data[1536..]);
        assert_eq!(ch.in_flight(), 0);
    }

    #[test]
    fn ram_deallocate_large_unaligned() {
        let b = RamBackend::new(4 << 20, 512).unwrap();
        let mut ch = b.open_channel().unwrap();
        let data = pattern(7, 1 << 20);
        write(&mut *ch, 512, &data);
        // Deallocate 512 KiB + 1 KiB starting mid-page: madvise the inner pages and
        // memset the unaligned head and tail.
        let (off, len) = (512 + 1024, (512 << 10) + 1024);
        assert_eq!(
            run(&mut *ch, 3, IoOp::Deallocate { offset: off, len }),
            Ok(())
        );
        let got = read(&mut *ch, 512, data.len());
        let rel = (off - 512) as usize;
        assert_eq!(got[..rel], data[..rel]);
        assert!(got[rel..rel + len as usize].iter().all(|&b| b == 0));
        assert_eq!(got[rel + len as usize..], data[rel + len as usize..]);

        // Writing the deallocated range again works.
        write(&mut *ch, off, &data[..4096]);
        assert_eq!(read(&mut *ch, off, 4096), data[..4096]);
    }

    #[test]
    fn ram_rejects_out_of_range() {
        let b = RamBackend::new(1 << 20, 4096).unwrap();
        let mut ch = b.open_channel().unwrap();
        let buf = Arc::new(DmaBuffer::new(8192).unwrap());
        assert_eq!(
            ch.submit(
                1,
                IoOp::Write {
                    offset: (1 << 20) - 4096,
                    buf: slice(&buf, 0, 8192),
                    fua: false
                }
            ),
            Err(BackendError::OutOfRange)
        );
        // A slice whose public fields were tampered with is refused, not followed.
        let bad = DmaSlice {
            buf: buf.clone(),
            offset: 4096,
            len: 8192,
        };
        assert_eq!(
            ch.submit(
                2,
                IoOp::Read {
                    offset: 0,
                    buf: bad
                }
            ),
            Err(BackendError::Io(libc::EFAULT))
        );
        assert_eq!(ch.in_flight(), 0);
    }

    #[test]
    fn ram_bad_sizes() {
        assert!(matches!(
            RamBackend::new(0, 512),
            Err(OpenError::ZeroSize { .. })
        ));
        assert!(matches!(
            RamBackend::new(1000, 512),
            Err(OpenError::NotBlockMultiple { .. })
        ));
    }

    #[test]
    fn ram_large_sparse() {
        // 64 GiB of address space; only the written pages are committed.
        let b = RamBackend::new(64 << 30, 4096).unwrap();
        let mut ch = b.open_channel().unwrap();
        let data = pattern(3, 4096);
        write(&mut *ch, (64 << 30) - 4096, &data);
        assert_eq!(read(&mut *ch, (64 << 30) - 4096, 4096), data);
    }

    #[test]
    fn ram_concurrent_channels() {
        let b: Arc<dyn Backend> = Arc::new(RamBackend::new(8 << 20, 512).unwrap());
        let threads: Vec<_> = (0..2u8)
            .map(|t| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut ch = b.open_channel().unwrap();
                    let base = u64::from(t) * (4 << 20);
                    for i in 0..64u64 {
                        let data = pattern(t.wrapping_mul(100).wrapping_add(i as u8), 16384);
                        write(&mut *ch, base + i * 16384, &data);
                    }
                    for i in 0..64u64 {
                        let data = pattern(t.wrapping_mul(100).wrapping_add(i as u8), 16384);
                        assert_eq!(read(&mut *ch, base + i * 16384, 16384), data);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Both threads' data is visible through a third channel.
        let mut ch = b.open_channel().unwrap();
        assert_eq!(read(&mut *ch, 0, 16384), pattern(0, 16384));
        assert_eq!(read(&mut *ch, 4 << 20, 16384), pattern(100, 16384));
    }
}
