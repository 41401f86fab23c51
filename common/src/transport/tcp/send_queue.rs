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
//!
//! # Deferred PDUs (responses after the data)
//!
//! A controller queues each command's response capsule in [`SendQueue::deferred`]
//! rather than right after the command's data, and releases the deferred responses
//! into the stream together: before each write ([`SendQueue::iovecs`]); when half as
//! many are waiting as the largest burst of responses a recent write carried; and
//! before the data PDU that would put more than [`DEFER_MAX_DATA`] bytes behind them
//! ([`SendQueue::before_data`], called before the PDU's head is appended).
//!
//! Why: a host completes a command on its response, and submits the next commands
//! when it has completed some. Interleaved (data, response, data, response), a large
//! write reaches the host as a few segments over tens of microseconds, the host
//! completes the commands each segment answers and sends a few new ones at a time:
//! SPDK's perf at 4 KiB QD 128 sent our target 8 commands per segment, against 20 to
//! SPDK's target, whose responses follow their data (it queues a response when the
//! write of its data has completed). Every segment costs both ends their TCP input.
//! Released together, the responses reach the host as one burst and it answers with
//! one batch (docs/bench-tcp.md: 64 commands per segment at QD 128).
//!
//! Why half the largest burst: responses held to the end of each write made the
//! host's whole queue one batch at QD 32, and then host and target took turns instead
//! of overlapping. With bursts of half the queue (the largest write burst estimates
//! the host's depth; two windows of [`BURST_WINDOW`] writes keep it current) two
//! batches are in flight. A fresh connection, or a host that keeps one or two
//! commands outstanding, gets each response right after its data, as before.
//!
//! Order within a command is kept: its response is deferred after its data was
//! queued, and every release puts responses before anything queued later.

use std::collections::VecDeque;
use std::io::IoSlice;

/// Data at least this long is sent from where it lies instead of being copied.
pub const ZERO_COPY_MIN: usize = 1024;
/// Most iovecs per `writev`.
const MAX_IOV: usize = 1024;
/// Most data (by reference) queued behind a deferred PDU before it is released into the
/// stream: 1 MiB is 256 responses to 4 KiB reads, or eight to 128 KiB reads (half of a
/// QD 16 host's queue, so that it completes and resubmits them in one batch). SPDK's
/// target holds a response until the write of its data has completed, behind a whole
/// flush (1.5 MB at 128 KiB QD 16 in docs/bench-tcp.md).
pub const DEFER_MAX_DATA: usize = 1 << 20;
/// Writes with responses per window of the burst estimate: the largest burst of the
/// last one to two windows counts.
const BURST_WINDOW: u32 = 1024;
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
    /// Small PDUs that go after the data queued so far (module docs: deferred PDUs).
    deferred: Vec<u8>,
    /// Data queued by reference since `deferred` was last empty.
    deferred_behind: usize,
    /// PDUs in `deferred`.
    deferred_count: u32,
    /// Deferred PDUs released since the last write: one write's burst of responses.
    released: u32,
    /// The largest write burst in this window and in the one before: the estimate of
    /// how many commands the peer keeps outstanding.
    burst_max: u32,
    burst_max_prev: u32,
    /// Writes with responses in this window.
    window_writes: u32,
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
            deferred: Vec::new(),
            deferred_behind: 0,
            deferred_count: 0,
            released: 0,
            burst_max: 0,
            burst_max_prev: 0,
            window_writes: 0,
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
        !self.segs.is_empty() || self.bytes.len() > self.sealed || !self.deferred.is_empty()
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        self.queued + self.bytes.len().saturating_sub(self.sealed) + self.deferred.len()
    }

    /// Where to append one PDU that should go after the data queued so far, in the next
    /// write (a response capsule; module docs: deferred PDUs). Each call is one PDU.
    pub fn deferred(&mut self) -> &mut Vec<u8> {
        if self.deferred_count >= self.burst_limit() {
            self.release_deferred();
        }
        self.deferred_count += 1;
        &mut self.deferred
    }

    /// How many PDUs are deferred together at most: half the largest burst of recent
    /// writes (module docs: two bursts in flight, so that neither end waits for the
    /// other), at least 1.
    fn burst_limit(&self) -> u32 {
        (self.burst_max.max(self.burst_max_prev) / 2).max(1)
    }

    /// Counts `len` bytes of data about to be queued behind the deferred PDUs, and
    /// releases them first if that would put more than [`DEFER_MAX_DATA`] behind them.
    /// Called before the data PDU's head is appended (a release after it would split
    /// the PDU).
    pub fn before_data(&mut self, len: usize) {
        if self.deferred.is_empty() {
            return;
        }
        self.deferred_behind += len;
        if self.deferred_behind > DEFER_MAX_DATA || self.deferred_count >= self.burst_limit() {
            self.release_deferred();
        }
    }

    /// Puts the deferred PDUs into the stream now: before something that must follow
    /// them (a termination request), and before each write.
    pub fn release_deferred(&mut self) {
        if !self.deferred.is_empty() {
            self.bytes.extend_from_slice(&self.deferred);
            self.deferred.clear();
        }
        self.released += self.deferred_count;
        self.deferred_count = 0;
        self.deferred_behind = 0;
    }

    /// Before a write: the responses it carries are one burst for the estimate.
    fn note_write(&mut self) {
        self.release_deferred();
        if self.released == 0 {
            return;
        }
        self.burst_max = self.burst_max.max(self.released);
        self.released = 0;
        self.window_writes += 1;
        if self.window_writes >= BURST_WINDOW {
            self.burst_max_prev = self.burst_max;
            self.burst_max = 0;
            self.window_writes = 0;
        }
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
        let len = data.bytes().len();
        self.seal();
        self.queued += len;
        self.segs.push_back(Seg::Data { data, len });
    }

    /// Up to `MAX_IOV` slices of what is queued, in order, for `writev`.
    pub fn iovecs(&mut self) -> Vec<IoSlice<'_>> {
        self.note_write();
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
        self.deferred.clear();
        self.deferred_behind = 0;
        self.deferred_count = 0;
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
pub(super) mod tests {
    use super::*;

    /// Data owned by the test.
    pub(in crate::transport::tcp) struct Owned(pub(in crate::transport::tcp) Vec<u8>);

    impl SendData for Owned {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    /// Writes everything queued, in writes of at most `chunk` bytes; the byte stream.
    fn drain(q: &mut SendQueue<Owned>, chunk: usize) -> Vec<u8> {
        drain_with(q, chunk).0
    }

    /// The same, and the data segments handed back.
    pub(in crate::transport::tcp) fn drain_with(
        q: &mut SendQueue<Owned>,
        chunk: usize,
    ) -> (Vec<u8>, Vec<Owned>) {
        let mut stream = Vec::new();
        let mut written = Vec::new();
        while q.pending() {
            let v = q.iovecs();
            let mut n = 0;
            for s in v.iter() {
                let take = (chunk - n).min(s.len());
                stream.extend_from_slice(&s[..take]);
                n += take;
                if n == chunk {
                    break;
                }
            }
            drop(v);
            q.advance(n, &mut written);
        }
        (stream, written)
    }

    /// Queues `n` commands as push_data_pdu and the target do (count the data, head,
    /// data by reference, deferred response); returns the expected pieces in order of
    /// queueing: (head, data, response).
    fn queue_commands(q: &mut SendQueue<Owned>, first: u8, n: u8, len: usize) {
        for i in first..first + n {
            q.before_data(len);
            q.bytes.extend_from_slice(&[b'h', i]);
            q.push_data(Owned(vec![i; len]));
            q.deferred().extend_from_slice(&[b'r', i]);
        }
    }

    fn piece(tag: u8, i: u8) -> Vec<u8> {
        vec![tag, i]
    }

    #[test]
    fn a_fresh_queue_interleaves_then_defers_half_its_largest_burst() {
        let mut q = SendQueue::default();
        // No burst seen yet: each response right after its data.
        queue_commands(&mut q, 0, 4, 4096);
        assert_eq!(q.queued(), 4 * (2 + 4096 + 2));
        let mut want = Vec::new();
        for i in 0..4u8 {
            want.extend(piece(b'h', i));
            want.extend(vec![i; 4096]);
            want.extend(piece(b'r', i));
        }
        assert_eq!(drain(&mut q, 5000), want);
        // That write carried 4 responses: now 2 wait behind the data of the next.
        queue_commands(&mut q, 4, 5, 4096);
        let mut want = Vec::new();
        for pair in [vec![4u8, 5], vec![6, 7], vec![8]] {
            for &i in &pair {
                want.extend(piece(b'h', i));
                want.extend(vec![i; 4096]);
            }
            for &i in &pair {
                want.extend(piece(b'r', i));
            }
        }
        assert_eq!(drain(&mut q, 3333), want);
        assert!(!q.pending());
    }

    #[test]
    fn deferred_pdus_go_ahead_of_data_past_the_cap() {
        let mut q = SendQueue::default();
        // A burst of 10 first: up to 5 responses may wait.
        queue_commands(&mut q, 0, 10, 1024);
        drain(&mut q, 100_000);
        let big = DEFER_MAX_DATA / 2 + 1;
        queue_commands(&mut q, 1, 3, big);
        // The third PDU would put more than the cap behind r1: r1 and r2 go before its
        // head, r3 after its data.
        let stream = drain(&mut q, 100_000);
        let mut want = b"h\x01".to_vec();
        want.extend(vec![1; big]);
        want.extend_from_slice(b"h\x02");
        want.extend(vec![2; big]);
        want.extend_from_slice(b"r\x01r\x02h\x03");
        want.extend(vec![3; big]);
        want.extend_from_slice(b"r\x03");
        assert_eq!(stream, want);
    }

    #[test]
    fn released_deferred_pdus_precede_what_is_appended_after() {
        let mut q = SendQueue::<Owned>::default();
        q.deferred().extend_from_slice(b"resp");
        q.release_deferred();
        q.bytes.extend_from_slice(b"term");
        assert_eq!(drain(&mut q, 3), b"respterm");
        q.deferred().extend_from_slice(b"gone");
        let mut dropped = Vec::new();
        q.clear(&mut dropped);
        assert!(!q.pending());
        assert_eq!(q.queued(), 0);
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
        let (stream, written) = drain_with(&mut q, 7777);
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
