//! A backend with no storage, like SPDK's null bdev: reads complete without touching
//! the buffer (or zero it, with [`NullBackend::with_zero_reads`]), writes, Flush, Write
//! Zeroes and Deallocate succeed at once. For measuring the transport without storage.
//!
//! Channels complete inline: `submit` records the completion in a local vector and
//! `poll` hands it out. Nothing allocates per I/O once the vector has grown to the
//! queue depth.

use super::{Backend, BackendError, BackendInfo, InlineChannel, InlineExec, IoChannel, IoOp};

#[derive(Debug)]
pub struct NullBackend {
    info: BackendInfo,
    zero_reads: bool,
}

impl NullBackend {
    /// A null namespace of `size_bytes` (a multiple of `block_size`, which
    /// [`super::spec::open_backend`] checks) whose reads leave the buffer untouched.
    pub fn new(size_bytes: u64, block_size: u32) -> NullBackend {
        NullBackend {
            info: BackendInfo {
                size_bytes,
                block_size,
                volatile_write_cache: false,
                supports_deallocate: true,
                supports_write_zeroes: true,
                deallocated_reads_zero: false,
                description: "null".to_string(),
            },
            zero_reads: false,
        }
    }

    /// Makes reads fill the buffer with zeroes (then deallocated blocks, like all
    /// blocks, read back as zeroes).
    pub fn with_zero_reads(mut self, zero_reads: bool) -> NullBackend {
        self.zero_reads = zero_reads;
        self.info.deallocated_reads_zero = zero_reads;
        self.info.description = if zero_reads {
            "null (zero reads)".to_string()
        } else {
            "null".to_string()
        };
        self
    }

    pub fn zero_reads(&self) -> bool {
        self.zero_reads
    }
}

impl Backend for NullBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        Ok(Box::new(InlineChannel::new(NullExec {
            size_bytes: self.info.size_bytes,
            zero_reads: self.zero_reads,
        })))
    }
}

struct NullExec {
    size_bytes: u64,
    zero_reads: bool,
}

impl InlineExec for NullExec {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn execute(&self, op: &IoOp) -> Result<(), BackendError> {
        if let IoOp::Read { buf, .. } = op {
            if self.zero_reads && !buf.buf.fill(buf.offset, buf.len, 0) {
                return Err(BackendError::Io(libc::EFAULT));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{CqeResult, DmaSlice};
    use nvmf_verbs::DmaBuffer;
    use std::sync::Arc;

    fn slice(buf: &Arc<DmaBuffer>, offset: usize, len: usize) -> DmaSlice {
        DmaSlice::new(buf.clone(), offset, len).unwrap()
    }

    #[test]
    fn null_roundtrip() {
        let b = NullBackend::new(1 << 20, 512);
        assert_eq!(b.info().size_bytes, 1 << 20);
        assert_eq!(b.info().block_size, 512);
        assert!(!b.info().volatile_write_cache);
        let mut ch = b.open_channel().unwrap();
        assert_eq!(ch.event_fd(), None);
        let buf = Arc::new(DmaBuffer::new(8192).unwrap());
        buf.fill(0, 8192, 0xAB);

        ch.submit(
            1,
            IoOp::Write {
                offset: 0,
                buf: slice(&buf, 0, 4096),
                fua: true,
            },
        )
        .unwrap();
        ch.submit(
            2,
            IoOp::Read {
                offset: 4096,
                buf: slice(&buf, 4096, 4096),
            },
        )
        .unwrap();
        ch.submit(3, IoOp::Flush).unwrap();
        ch.submit(
            4,
            IoOp::WriteZeroes {
                offset: 0,
                len: 1 << 20,
            },
        )
        .unwrap();
        ch.submit(
            5,
            IoOp::Deallocate {
                offset: 512,
                len: 512,
            },
        )
        .unwrap();
        assert_eq!(ch.in_flight(), 5);
        ch.flush();
        let mut out = Vec::new();
        assert_eq!(ch.poll(&mut out), 5);
        assert_eq!(
            out,
            vec![
                (1, Ok(CqeResult::NONE)),
                (2, Ok(CqeResult::NONE)),
                (3, Ok(CqeResult::NONE)),
                (4, Ok(CqeResult::NONE)),
                (5, Ok(CqeResult::NONE))
            ]
        );
        assert_eq!(ch.in_flight(), 0);
        assert_eq!(ch.poll(&mut out), 0);
        // The read did not touch the buffer.
        let mut got = [0u8; 16];
        buf.read_at(4096, &mut got);
        assert_eq!(got, [0xAB; 16]);
        // The buffer was released by the channel.
        assert_eq!(Arc::strong_count(&buf), 1);
    }

    #[test]
    fn null_zero_reads() {
        let b = NullBackend::new(1 << 20, 4096).with_zero_reads(true);
        assert!(b.info().deallocated_reads_zero);
        let mut ch = b.open_channel().unwrap();
        let buf = Arc::new(DmaBuffer::new(8192).unwrap());
        buf.fill(0, 8192, 0xAB);
        ch.submit(
            7,
            IoOp::Read {
                offset: 4096,
                buf: slice(&buf, 100, 4096),
            },
        )
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(ch.poll(&mut out), 1);
        assert_eq!(out, vec![(7, Ok(CqeResult::NONE))]);
        let mut got = vec![0u8; 8192];
        buf.read_at(0, &mut got);
        assert!(got[..100].iter().all(|&b| b == 0xAB));
        assert!(got[100..4196].iter().all(|&b| b == 0));
        assert!(got[4196..].iter().all(|&b| b == 0xAB));
    }

    #[test]
    fn null_out_of_range() {
        let b = NullBackend::new(1 << 20, 512);
        let mut ch = b.open_channel().unwrap();
        let buf = Arc::new(DmaBuffer::new(4096).unwrap());
        let r = ch.submit(
            1,
            IoOp::Read {
                offset: (1 << 20) - 512,
                buf: slice(&buf, 0, 1024),
            },
        );
        assert_eq!(r, Err(BackendError::OutOfRange));
        let r = ch.submit(
            2,
            IoOp::WriteZeroes {
                offset: u64::MAX,
                len: 2,
            },
        );
        assert_eq!(r, Err(BackendError::OutOfRange));
        assert_eq!(ch.in_flight(), 0);
    }
}
