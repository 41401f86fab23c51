//! A connection's send queue, either end: PDU bytes and, for large data, references to
//! the buffer the data lies in, written together with one `writev`.
//!
//! Small PDUs (capsules, responses, R2Ts, headers, short data) are appended to one
//! byte buffer; a data PDU whose data is large gets its head and digest there (encoded
//! by the [`PduWriter`](super::PduWriter), the one place PDU layouts are computed) and
//! its data as a segment that refers to where the data lies (the target's pool buffer,
//! the host's I/O buffer), so the data is not copied before the kernel takes it. A data
//! segment is held until its last byte is written; [`SendQueue::advance`] hands it
//! back. What a data segment is, and why its bytes stay put while it is queued, is the
//! driver's ([`SendData`]).

use std::collections::VecDeque;
use std::io::IoSlice;

/// Data at least this long is sent from where it lies instead of being copied.
pub const ZERO_COPY_MIN: usize = 1024;
/// Most iovecs per `writev`.
const MAX_IOV: usize = 1024;
/// The byte buffer is compacted when this much of its front has been written.
const COMPACT_AT: usize = 1 << 20;

/// Data queued by reference: its bytes must stay as they are, and nothing may write
/// them, while the queue holds it.
pub trait SendData {
    fn bytes(&self) -> &[u8];
}

enum Seg<D> {
    /// `bytes[start..end]`.
    Bytes { start: usize, end: usize },
    /// Data queued by reference, and its length.
    Data { data: D, len: usize },
}

impl<D: SendData> Seg<D> {
    fn len(&self) -> usize {
        match self {
            Seg::Bytes { start, end } => end - start,
            Seg::Data { len, .. } => *len,
        }
    }
}

/// The send queue of one connection.
pub struct SendQueue<D> {
    /// PDU bytes; writers append here directly.
    pub bytes: Vec<u8>,
    /// Bytes up to here belong to a segment.
    sealed: usize,
    segs: VecDeque<Seg<D>>,
    /// Bytes of the front segment already written.
    front_done: usize,
    /// Bytes in segments not yet written.
    queued: usize,
}

impl<D> Default for SendQueue<D> {
    fn default() -> Self {
        SendQueue {
            bytes: Vec::new(),
            sealed: 0,
            segs: VecDeque::new(),
            front_done: 0,
            queued: 0,
        }
    }
}

impl<D: SendData> SendQueue<D> {
    /// Whether anything waits to be written.
    pub fn pending(&self) -> bool {
        !self.segs.is_empty() || self.bytes.len() > self.sealed
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.queued + self.bytes.len().saturating_sub(self.sealed)
    }

    /// Turns bytes appended since the last call into a segment.
    #[inline]
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

    /// Queues `data` (by reference) after what is queued; it comes back from
    /// [`advance`](SendQueue::advance) once it is written.
    #[inline]
    pub fn push_data(&mut self, data: D) {
        self.seal();
        let len = data.bytes().len();
        self.queued += len;
        self.segs.push_back(Seg::Data { data, len });
    }

    /// Up to `MAX_IOV` slices of what is queued, in order, for `writev`.
    pub fn iovecs(&mut self) -> Vec<IoSlice<'_>> {
        self.seal();
        let mut out = Vec::with_capacity(self.segs.len().min(MAX_IOV));
        for (i, seg) in self.segs.iter().take(MAX_IOV).enumerate() {
            let skip = if i == 0 { self.front_done } else { 0 };
            let s: &[u8] = match seg {
                Seg::Bytes { start, end } => self.bytes.get(start + skip..*end).unwrap_or(&[]),
                Seg::Data { data, .. } => data.bytes().get(skip..).unwrap_or(&[]),
            };
            out.push(IoSlice::new(s));
        }
        out
    }

    /// Records that `n` bytes were written; hands back the data now written.
    pub fn advance(&mut self, mut n: usize, written: &mut Vec<D>) {
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
            if let Some(Seg::Data { data, .. }) = self.segs.pop_front() {
                written.push(data);
            }
        }
        self.compact();
    }

    /// Drops everything queued; hands back the data it held.
    pub fn clear(&mut self, dropped: &mut Vec<D>) {
        for s in self.segs.drain(..) {
            if let Seg::Data { data, .. } = s {
                dropped.push(data);
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

    /// Data owned by the test.
    struct Owned(Vec<u8>);

    impl SendData for Owned {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    #[test]
    fn segments_are_written_in_order_and_data_handed_back() {
        let mut q = SendQueue::default();
        q.bytes.extend_from_slice(b"head");
        q.push_data(Owned(vec![0xAB; 30_000]));
        q.bytes.extend_from_slice(b"mid");
        q.push_data(Owned(vec![0xCD; 10_000]));
        q.bytes.extend_from_slice(b"tail");
        assert_eq!(q.queued(), 4 + 30_000 + 3 + 10_000 + 4);
        // Drain in odd-sized writes and check the byte stream.
        let mut stream = Vec::new();
        let mut written = Vec::new();
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
            q.advance(n, &mut written);
        }
        let mut want = b"head".to_vec();
        want.extend(vec![0xAB; 30_000]);
        want.extend_from_slice(b"mid");
        want.extend(vec![0xCD; 10_000]);
        want.extend_from_slice(b"tail");
        assert_eq!(stream, want);
        assert_eq!(written.len(), 2);
        assert!(q.bytes.is_empty());
        // Clearing hands back what is still queued.
        q.push_data(Owned(vec![1; 100]));
        let mut dropped = Vec::new();
        q.clear(&mut dropped);
        assert_eq!(dropped.len(), 1);
        assert!(!q.pending());
    }

    #[test]
    fn compaction_keeps_the_stream() {
        let mut q = SendQueue::<Owned>::default();
        let mut want = Vec::new();
        let mut got = Vec::new();
        let mut written = Vec::new();
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
            q.advance(n, &mut written);
        }
        assert!(q.bytes.len() < 2 * COMPACT_AT + 10_000, "{}", q.bytes.len());
        while q.pending() {
            let v = q.iovecs();
            let n: usize = v.iter().map(|s| s.len()).sum();
            for s in v.iter() {
                got.extend_from_slice(s);
            }
            drop(v);
            q.advance(n, &mut written);
        }
        assert_eq!(got, want);
    }
}
