//! A poll group's shared receive queue: one SRQ per group (per device), as SPDK does by
//! default, so a group's receive memory is bounded by the SRQ depth rather than by
//! queues × queue depth.
//!
//! Ownership: the group thread owns its [`GroupSrq`] (the SRQ, one registered buffer
//! of `depth` capsule-sized receive buffers, and the reposts a pass queued); QPs the
//! listener creates on the group hold the SRQ too (through [`QpInit::srq`]), so it
//! outlives them. A receive buffer `b` is, at any time, exactly one of: posted to the
//! SRQ; named by a completion not yet routed (the CQ, or the group's orphans); held by
//! a command slot of one queue ([`SrqSlots`]) or waiting in that queue's backlog; or
//! queued for repost. Every path back to "posted" goes through [`GroupSrq::repost`]:
//! the slot is recycled, the queue is freed with buffers still held, a receive
//! completes for a dead queue, in error, or for an orphan that expired.
//!
//! Ordering: a receive completion names its QP (`qp_num`), which the group maps to a
//! queue; the capsule takes a free command slot of that queue (the host cannot have
//! more commands outstanding than the queue has slots, but its next capsule may arrive
//! before the send completion that frees a slot is polled: it waits in the queue's
//! backlog, in arrival order, until a slot is recycled). Reposts are posted with one
//! doorbell per pass, after the queues' sends.
//!
//! [`QpInit::srq`]: nvmf_verbs::QpInit::srq

use std::collections::VecDeque;
use std::sync::Arc;

use nvmf_verbs::{
    post_srq_recv_slots, Access, DmaBuffer, MemoryRegion, ProtectionDomain, SharedReceiveQueue,
    SrqCaps, VerbsError,
};

use super::{verbs_wr_id, wr_kind};

/// A slot's "no receive buffer" mark.
const NO_BUF: u16 = u16::MAX;

/// The group's SRQ and its receive buffers.
pub struct GroupSrq {
    pub srq: Arc<dyn SharedReceiveQueue>,
    /// `depth` receive buffers of `capsule_size` bytes, registered once.
    pub buf: Arc<DmaBuffer>,
    mr: Arc<dyn MemoryRegion>,
    capsule_size: usize,
    depth: u16,
    /// Buffers to post with the pass's doorbell.
    reposts: Vec<u16>,
    /// Receives posted and not yet seen completing (a gauge for leak checks).
    posted: usize,
}

impl GroupSrq {
    /// Creates an SRQ of `depth` receives in `pd`, registers its buffers and posts
    /// every receive. `Err` when the device cannot (the caller falls back to per-queue
    /// receives).
    pub fn new(
        pd: &dyn ProtectionDomain,
        depth: u32,
        capsule_size: usize,
    ) -> Result<GroupSrq, VerbsError> {
        let depth = u16::try_from(depth)
            .ok()
            .filter(|&d| d > 0 && d < NO_BUF)
            .ok_or(VerbsError::InvalidArgument("SRQ depth must be 1..=65534"))?;
        let srq = pd.create_srq(SrqCaps {
            max_wr: u32::from(depth),
            max_sge: 1,
        })?;
        let bytes = usize::from(depth)
            .checked_mul(capsule_size)
            .ok_or(VerbsError::InvalidArgument("SRQ buffers too large"))?;
        let buf = Arc::new(
            DmaBuffer::new(bytes)
                .ok_or_else(|| VerbsError::Provider("out of memory for SRQ buffers".into()))?,
        );
        let mr = pd.register(buf.clone(), Access::LOCAL_WRITE)?;
        let mut g = GroupSrq {
            srq,
            buf,
            mr,
            capsule_size,
            depth,
            reposts: (0..depth).collect(),
            posted: 0,
        };
        g.flush()?;
        Ok(g)
    }

    /// Bytes of receive buffers registered.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Offset of buffer `b` in [`GroupSrq::buf`], if `b` is one of ours.
    pub fn offset(&self, b: u16) -> Option<usize> {
        (b < self.depth).then(|| usize::from(b) * self.capsule_size)
    }

    /// Receives posted to the SRQ whose completion has not been seen.
    pub fn posted(&self) -> usize {
        self.posted
    }

    /// A receive of the SRQ completed (whatever its status and wherever it goes).
    pub fn consumed(&mut self) {
        self.posted = self.posted.saturating_sub(1);
    }

    /// Queues buffer `b` for the pass's repost (ignored unless it is one of ours).
    pub fn repost(&mut self, b: u16) {
        if b < self.depth {
            self.reposts.push(b);
        }
    }

    /// Posts the queued reposts with one doorbell; returns how many.
    pub fn flush(&mut self) -> Result<usize, VerbsError> {
        if self.reposts.is_empty() {
            return Ok(0);
        }
        let n = self.reposts.len();
        let r = post_srq_recv_slots(
            self.srq.as_ref(),
            self.mr.as_ref(),
            self.capsule_size,
            &self.reposts,
            |b| verbs_wr_id(wr_kind::SRQ_RECV, b),
        );
        self.reposts.clear();
        r.map(|()| {
            self.posted += n;
            n
        })
    }
}

/// A queue's command slots when its capsules arrive in SRQ buffers: which buffer each
/// slot holds, the free slots, and capsules waiting for one.
pub struct SrqSlots {
    buf_of: Vec<u16>,
    free: Vec<u16>,
    /// Capsules (buffer, byte count) that arrived while every slot was busy.
    backlog: VecDeque<(u16, u32)>,
}

impl SrqSlots {
    pub fn new(slots: u16) -> SrqSlots {
        SrqSlots {
            buf_of: vec![NO_BUF; usize::from(slots)],
            free: (0..slots).rev().collect(),
            backlog: VecDeque::new(),
        }
    }

    /// Gives a free slot to the capsule in buffer `b`; `None`: it waits in the backlog.
    pub fn take(&mut self, b: u16, byte_len: u32) -> Option<u16> {
        if !self.backlog.is_empty() {
            self.backlog.push_back((b, byte_len));
            return None;
        }
        let Some(si) = self.free.pop() else {
            self.backlog.push_back((b, byte_len));
            return None;
        };
        if let Some(e) = self.buf_of.get_mut(usize::from(si)) {
            *e = b;
        }
        Some(si)
    }

    /// The oldest waiting capsule gets a free slot: (slot, buffer, byte count).
    pub fn take_backlog(&mut self) -> Option<(u16, u16, u32)> {
        if self.free.is_empty() {
            return None;
        }
        let (b, len) = self.backlog.pop_front()?;
        let si = self.free.pop()?;
        if let Some(e) = self.buf_of.get_mut(usize::from(si)) {
            *e = b;
        }
        Some((si, b, len))
    }

    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// The buffer of slot `si`.
    pub fn buf(&self, si: u16) -> Option<u16> {
        self.buf_of
            .get(usize::from(si))
            .copied()
            .filter(|&b| b != NO_BUF)
    }

    /// Slot `si` is free again: returns the buffer it held.
    pub fn release(&mut self, si: u16) -> Option<u16> {
        let e = self.buf_of.get_mut(usize::from(si))?;
        let b = std::mem::replace(e, NO_BUF);
        if b == NO_BUF {
            return None;
        }
        self.free.push(si);
        Some(b)
    }

    /// Every buffer the queue still holds: its slots' and its backlog's (for a queue
    /// being freed, whose buffers all go back to the SRQ).
    pub fn held(&self) -> impl Iterator<Item = u16> + '_ {
        let slots = self.buf_of.iter().copied().filter(|&b| b != NO_BUF);
        slots.chain(self.backlog.iter().map(|&(b, _)| b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hand_out_buffers_and_backlog_in_order() {
        let mut s = SrqSlots::new(2);
        let a = s.take(10, 64).expect("a slot");
        let b = s.take(11, 64).expect("a slot");
        assert_ne!(a, b);
        assert_eq!(s.take(12, 70), None);
        assert_eq!(s.take(13, 80), None);
        assert_eq!(s.take_backlog(), None, "no free slot yet");
        assert_eq!(s.release(a), Some(10));
        assert_eq!(s.release(a), None, "released once");
        assert_eq!(s.take_backlog(), Some((a, 12, 70)));
        assert_eq!(s.buf(a), Some(12));
        assert!(s.has_backlog());
        let mut left: Vec<u16> = s.held().collect();
        left.sort_unstable();
        assert_eq!(left, vec![11, 12, 13]);
    }
}
