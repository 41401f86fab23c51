//! A connection's send queue: PDU bytes and, for large controller-to-host data,
//! references to the command's pool buffer, written together with one `writev`.
//!
//! Small PDUs (responses, R2Ts, headers, short data) are appended to one byte buffer;
//! a C2HData PDU whose data is large gets its head and digest there (encoded by the
//! `PduWriter`, the one place PDU layouts are computed) and its data as
//! a segment pointing into the pool buffer the backend read into, so the data is not
//! copied again before the kernel takes it. The pool buffer belongs to the queue until
//! its last byte is written; [`TxQueue::advance`] hands it back.

use std::collections::VecDeque;
use std::io::IoSlice;

use crate::backend::DmaSlice;
use crate::runtime::PoolBuf;

/// Data at least this long is sent from the pool buffer instead of being copied.
pub const ZERO_COPY_MIN: usize = 1024;
/// Most iovecs per `writev`.
const MAX_IOV: usize = 1024;
/// The byte buffer is compacted when this much of its front has been written.
const COMPACT_AT: usize = 1 << 20;

enum Seg {
    /// `bytes[start..end]`.
    Bytes { start: usize, end: usize },
    /// Data in a pool buffer; `release` is the buffer to return once this segment
    /// (the last one using it) is written.
    Data {
        slice: DmaSlice,
        release: Option<PoolBuf>,
    },
}

impl Seg {
    fn len(&self) -> usize {
        match self {
            Seg::Bytes { start, end } => end - start,
            Seg::Data { slice, .. } => slice.len,
        }
    }
}

/// The send queue of one connection.
#[derive(Default)]
pub struct TxQueue {
    /// PDU bytes; writers append here directly.
    pub bytes: Vec<u8>,
    /// Bytes up to here belong to a segment.
    sealed: usize,
    segs: VecDeque<Seg>,
    /// Bytes of the front segment already written.
    front_done: usize,
    /// Bytes in segments not yet written.
    queued: usize,
}

impl TxQueue {
    /// Whether anything waits to be written.
    pub fn pending(&self) -> bool {
        !self.segs.is_empty() || self.bytes.len() > self.sealed
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.queued + self.bytes.len().saturating_sub(self.sealed)
    }

    /// Turns bytes appended since the last call into a segment.
    fn seal(&mut self) {
        let len = self.bytes.len();
        if len <= self.sealed {
            return;
        }
        match self.segs.back_mut() {
            Some(Seg::Bytes { end, .. }) if *end == self.sealed => *end = len,
            _ => self.segs.push_back(Seg::Bytes {
                start: self.sealed,
                end: len,
            }),
        }
        self.queued += len - self.sealed;
        self.sealed = len;
    }

    /// Queues `slice` (data of a pool buffer) after what is queued; `release` goes
    /// back to the pool once it is written.
    pub fn push_data(&mut self, slice: DmaSlice, release: Option<PoolBuf>) {
        self.seal();
        self.queued += slice.len;
        self.segs.push_back(Seg::Data { slice, release });
    }

    /// Up to `MAX_IOV` slices of what is queued, in order, for `writev`.
    pub fn iovecs(&mut self) -> Vec<IoSlice<'_>> {
        self.seal();
        let mut out = Vec::with_capacity(self.segs.len().min(MAX_IOV));
        for (i, seg) in self.segs.iter().take(MAX_IOV).enumerate() {
            let skip = if i == 0 { self.front_done } else { 0 };
            let s: &[u8] = match seg {
                Seg::Bytes { start, end } => self.bytes.get(start + skip..*end).unwrap_or(&[]),
                Seg::Data { slice, .. } => {
                    // SAFETY: the slice lies in a pool buffer whose backend read completed
                    // before it was queued; the queue owns the buffer until the segment
                    // is written, and nothing writes it meanwhile. The borrow ends with
                    // the `writev` that uses it (it is tied to `&mut self`).
                    let whole = unsafe { slice.buf.slice(slice.offset, slice.len) };
                    whole.and_then(|w| w.get(skip..)).unwrap_or(&[])
                }
            };
            out.push(IoSlice::new(s));
        }
        out
    }

    /// Records that `n` bytes were written; returns the pool buffers now free.
    pub fn advance(&mut self, mut n: usize, freed: &mut Vec<PoolBuf>) {
        self.queued = self.queued.saturating_sub(n);
        while n > 0 {
            let Some(front) = self.segs.front() else {
                break;
            };
            let rest = front.len() - self.front_done;
            if n < rest {
                self.front_done += n;
                break;
            }
            n -= rest;
            self.front_done = 0;
            if let Some(Seg::Data {
                release: Some(b), ..
            }) = self.segs.pop_front()
            {
                freed.push(b);
            }
        }
        self.compact();
    }

    /// Drops everything queued; returns the pool buffers it held.
    pub fn clear(&mut self, freed: &mut Vec<PoolBuf>) {
        for s in self.segs.drain(..) {
            if let Seg::Data {
                release: Some(b), ..
            } = s
            {
                freed.push(b);
            }
        }
        self.bytes.clear();
        self.sealed = 0;
        self.front_done = 0;
        self.queued = 0;
    }

    fn compact(&mut self) {
        if self.segs.is_empty() {
            // Everything sealed was written; keep bytes appended since (none, normally).
            self.bytes.drain(..self.sealed);
            self.sealed = 0;
            self.front_done = 0;
            return;
        }
        // The first byte still needed.
        let first = self.segs.iter().enumerate().find_map(|(i, s)| match s {
            Seg::Bytes { start, .. } => Some(start + if i == 0 { self.front_done } else { 0 }),
            Seg::Data { .. } => None,
        });
        let cut = first.unwrap_or(self.sealed);
        if cut < COMPACT_AT {
            return;
        }
        self.bytes.drain(..cut);
        self.sealed -= cut;
        for (i, s) in self.segs.iter_mut().enumerate() {
            if let Seg::Bytes { start, end } = s {
                if i == 0 && self.front_done > 0 {
                    // The written part of the front segment went with the drain.
                    *start = *start + self.front_done - cut;
                    *end -= cut;
                    self.front_done = 0;
                } else {
                    *start -= cut;
                    *end -= cut;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_written_in_order_and_buffers_released() {
        let mut pool = crate::runtime::BufferPool::new(1 << 20, 64 * 1024).unwrap();
        let b = pool.alloc(40_000).unwrap();
        b.slice.buf.write_at(b.slice.offset, &vec![0xAB; 40_000]);
        let mut q = TxQueue::default();
        q.bytes.extend_from_slice(b"head");
        let first = DmaSlice::new(b.slice.buf.clone(), b.slice.offset, 30_000).unwrap();
        let second = DmaSlice::new(b.slice.buf.clone(), b.slice.offset + 30_000, 10_000).unwrap();
        q.push_data(first, None);
        q.bytes.extend_from_slice(b"mid");
        q.push_data(second, Some(b));
        q.bytes.extend_from_slice(b"tail");
        assert_eq!(q.queued(), 4 + 30_000 + 3 + 10_000 + 4);
        // Drain in odd-sized writes and check the byte stream.
        let mut stream = Vec::new();
        let mut freed = Vec::new();
        while q.pending() {
            let v = q.iovecs();
            let mut n = 0;
            for s in v.iter() {
                let take = (7777 - n).min(s.len());
                stream.extend_from_slice(&s[..take]);
                n += take;
                if n == 7777 {
                    break;
                }
            }
            drop(v);
            q.advance(n, &mut freed);
        }
        let mut want = b"head".to_vec();
        want.extend(vec![0xAB; 30_000]);
        want.extend_from_slice(b"mid");
        want.extend(vec![0xAB; 10_000]);
        want.extend_from_slice(b"tail");
        assert_eq!(stream, want);
        assert_eq!(freed.len(), 1);
        assert!(q.bytes.is_empty());
        // Clearing hands back what is still queued.
        let b = pool.alloc(100).unwrap();
        q.push_data(b.slice.clone(), Some(b));
        q.clear(&mut freed);
        assert_eq!(freed.len(), 2);
        assert!(!q.pending());
    }

    #[test]
    fn compaction_keeps_the_stream() {
        let mut q = TxQueue::default();
        let mut want = Vec::new();
        let mut got = Vec::new();
        let mut freed = Vec::new();
        // Keep appending while only part is written, past the compaction point.
        for round in 0..400u32 {
            let chunk: Vec<u8> = (0..5000u32).map(|i| (i + round) as u8).collect();
            q.bytes.extend_from_slice(&chunk);
            want.extend_from_slice(&chunk);
            let v = q.iovecs();
            let mut n = 0;
            for s in v.iter() {
                let take = (4000 - n).min(s.len());
                got.extend_from_slice(&s[..take]);
                n += take;
            }
            drop(v);
            q.advance(n, &mut freed);
        }
        assert!(q.bytes.len() < 2 * COMPACT_AT + 10_000, "{}", q.bytes.len());
        while q.pending() {
            let v = q.iovecs();
            let n: usize = v.iter().map(|s| s.len()).sum();
            for s in v.iter() {
                got.extend_from_slice(s);
            }
            drop(v);
            q.advance(n, &mut freed);
        }
        assert_eq!(got, want);
    }
}
