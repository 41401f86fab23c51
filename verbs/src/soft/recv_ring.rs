//! The receive ring a soft QP and a soft SRQ both keep their posted receives in, and
//! the queue limits both check. Below the QP and the SRQ.

use crate::Sge;

/// Largest send or receive queue a QP (or SRQ) may ask for.
pub(super) const MAX_WR: u32 = 1 << 16;
/// Most SGEs a work request may carry.
pub(super) const MAX_SGE: u32 = 32;

const EMPTY_SGE: Sge = Sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// Posted receives, in a ring preallocated for `max_recv_wr` requests of
/// `max_recv_sge` SGEs each, so posting never allocates.
pub(super) struct RecvRing {
    wr_ids: Box<[u64]>,
    nsge: Box<[usize]>,
    sges: Box<[Sge]>,
    per: usize,
    head: usize,
    /// Receives waiting.
    pub(super) len: usize,
    /// Receives ever posted (wrapping); minus the released count: slots in use.
    pub(super) posted: u32,
}

impl RecvRing {
    pub(super) fn new(cap: usize, per: usize) -> Self {
        RecvRing {
            wr_ids: vec![0; cap].into_boxed_slice(),
            nsge: vec![0; cap].into_boxed_slice(),
            sges: vec![EMPTY_SGE; cap * per].into_boxed_slice(),
            per,
            head: 0,
            len: 0,
            posted: 0,
        }
    }

    /// Appends a receive. The caller has checked `len < capacity` (through the RQ
    /// credits, which never undercount the ring) and `sgl.len() <= per`.
    pub(super) fn push(&mut self, wr_id: u64, sgl: &[Sge]) -> bool {
        let cap = self.wr_ids.len();
        if self.len >= cap || sgl.len() > self.per {
            return false;
        }
        let slot = (self.head + self.len) % cap;
        let base = slot * self.per;
        match self.sges.get_mut(base..base + sgl.len()) {
            Some(dst) => dst.copy_from_slice(sgl),
            None => return false,
        }
        self.wr_ids[slot] = wr_id;
        self.nsge[slot] = sgl.len();
        self.len += 1;
        true
    }

    /// The oldest receive: its wr_id and SGEs.
    pub(super) fn front(&self) -> Option<(u64, &[Sge])> {
        if self.len == 0 {
            return None;
        }
        let base = self.head * self.per;
        let sges = self.sges.get(base..base + self.nsge[self.head])?;
        Some((self.wr_ids[self.head], sges))
    }

    pub(super) fn pop_front(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let wr_id = self.wr_ids[self.head];
        self.head = (self.head + 1) % self.wr_ids.len();
        self.len -= 1;
        Some(wr_id)
    }
}
