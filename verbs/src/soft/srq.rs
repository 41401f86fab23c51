//! Shared receive queues (`ibv_create_srq`, `ibv_post_srq_recv`).
//!
//! An SRQ is a receive ring of its own with its own credits; QPs created with it
//! ([`crate::QpInit::srq`]) hold an `Arc` to it and take their receives from
//! its ring instead of theirs. Ownership and ordering:
//!
//! - The ring is behind one mutex, taken by `post_srq_recv` and, as a leaf, by a
//!   sender delivering a SEND to any QP attached to the SRQ (under that sender's send
//!   lock, like a plain QP's receive queue). Receives are consumed oldest first across
//!   all attached QPs: arrival order, whichever QP the SEND came for.
//! - A receive holds its SRQ slot until its completion is polled, as on a QP; the
//!   completion names the QP it completed for (`qp_num`) and goes to that QP's
//!   receive CQ, which gives the slot back to the SRQ's credits. QPs with different
//!   receive CQs may share one SRQ, so several CQs' pollers release into the same
//!   credits (an atomic add, see `cq.rs`).
//! - The SRQ never enters an error state: a QP of it that fails, disconnects or is
//!   dropped leaves the SRQ's receives posted for the other QPs.
//! - Its receives must name memory of the SRQ's protection domain, and only QPs of
//!   that PD may use it (the provider checks SGEs against the receiving QP's PD).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::counters::bump;
use super::cq::Credits;
use super::mr::SoftPd;
use super::recv_ring::{RecvRing, MAX_SGE, MAX_WR};
use super::DevShared;
use crate::{RecvWr, SharedReceiveQueue, SrqCaps, VerbsError};

pub(super) struct SoftSrq {
    dev: Arc<DevShared>,
    pub(super) pd: Arc<SoftPd>,
    caps: SrqCaps,
    /// Slots given back by polled receive completions of any attached QP.
    pub(super) credits: Arc<Credits>,
    pub(super) ring: Mutex<RecvRing>,
}

impl SoftSrq {
    pub(super) fn new(
        dev: &Arc<DevShared>,
        pd: Arc<SoftPd>,
        caps: SrqCaps,
    ) -> Result<Arc<SoftSrq>, VerbsError> {
        if !dev.srq_supported.load(Ordering::Relaxed) {
            return Err(VerbsError::Unsupported("shared receive queues"));
        }
        if caps.max_wr == 0 || caps.max_wr > MAX_WR {
            return Err(VerbsError::InvalidArgument("SRQ max_wr must be 1..=65536"));
        }
        if caps.max_sge == 0 || caps.max_sge > MAX_SGE {
            return Err(VerbsError::InvalidArgument("SRQ max_sge must be 1..=32"));
        }
        let srq = Arc::new(SoftSrq {
            dev: Arc::clone(dev),
            pd,
            caps,
            credits: Arc::new(Credits::default()),
            ring: Mutex::new(RecvRing::new(caps.max_wr as usize, caps.max_sge as usize)),
        });
        dev.srqs.insert(&srq);
        Ok(srq)
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn post_srq_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), VerbsError> {
        let shard = self.dev.counters.shard();
        bump(&shard.post_recv_calls, 1);
        let max_sge = self.caps.max_sge as usize;
        if wrs.iter().any(|wr| wr.sg_list.len() > max_sge) {
            return Err(VerbsError::InvalidArgument(
                "more SGEs in a receive work request than the SRQ's max_sge",
            ));
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let n =
            u32::try_from(wrs.len()).map_err(|_| VerbsError::QueueFull("shared receive queue"))?;
        let mut ring = self.ring.lock();
        let released = self.credits.rq_released.load(Ordering::Acquire);
        let outstanding = ring.posted.wrapping_sub(released);
        if u64::from(outstanding) + u64::from(n) > u64::from(self.caps.max_wr) {
            return Err(VerbsError::QueueFull("shared receive queue"));
        }
        for wr in wrs {
            if !ring.push(wr.wr_id, wr.sg_list) {
                // Unreachable: the credits never undercount the ring.
                return Err(VerbsError::QueueFull("shared receive queue"));
            }
            ring.posted = ring.posted.wrapping_add(1);
        }
        bump(&shard.recv_wrs, u64::from(n));
        Ok(())
    }

    fn caps(&self) -> SrqCaps {
        self.caps
    }
}

impl Drop for SoftSrq {
    fn drop(&mut self) {
        self.dev.srqs.remove(self);
    }
}

#[cfg(test)]
mod tests {
    //! Soft-provider details of SRQs (the rest is the conformance suite's `srq_*`).

    use std::time::Duration;

    use super::*;
    use crate::soft::SoftDevice;
    use crate::{
        Access, Device, DmaBuffer, QpCaps, QpInit, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
    };

    const CAPS: QpCaps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
    };

    /// A connected pair whose passive QP takes receives from a fresh SRQ of `max_wr`.
    #[allow(clippy::type_complexity)]
    fn pair(
        max_wr: u32,
    ) -> (
        Arc<SoftDevice>,
        Arc<dyn SharedReceiveQueue>,
        Arc<dyn crate::QueuePair>,
        Arc<dyn crate::QueuePair>,
        Arc<dyn crate::CompletionQueue>,
        Arc<dyn crate::MemoryRegion>,
    ) {
        let dev = SoftDevice::new();
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(64).expect("cq");
        let srq = pd.create_srq(SrqCaps { max_wr, max_sge: 1 }).expect("srq");
        let mr = pd
            .register(
                Arc::new(DmaBuffer::new(4096).expect("buffer")),
                Access::LOCAL_WRITE,
            )
            .expect("register");
        let listener = dev.listen("srq").expect("listen");
        let init = |srq: Option<Arc<dyn SharedReceiveQueue>>| QpInit {
            pd: pd.clone(),
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            caps: CAPS,
            srq,
        };
        let passive_init = init(Some(srq.clone()));
        let server = std::thread::spawn(move || {
            let req = listener
                .next_request(Duration::from_secs(5))
                .expect("request");
            req.accept(passive_init, b"", b"", &mut |_| Ok(()))
                .expect("accept")
        });
        let (active, _) = dev
            .connect(
                "srq",
                init(None),
                b"",
                &mut |_| Ok(()),
                Duration::from_secs(5),
            )
            .expect("connect");
        let passive = server.join().expect("server thread");
        (dev, srq, active, passive, cq, mr)
    }

    fn sge(mr: &Arc<dyn crate::MemoryRegion>, off: u64) -> Sge {
        Sge {
            addr: mr.addr() + off,
            length: 64,
            lkey: mr.lkey(),
        }
    }

    fn poll_all(cq: &Arc<dyn crate::CompletionQueue>) -> Vec<WorkCompletion> {
        let mut out = [WorkCompletion::EMPTY; 16];
        let n = cq.poll(&mut out);
        out[..n].to_vec()
    }

    #[test]
    fn an_empty_srq_is_rnr_for_the_sender() {
        let (dev, _srq, active, passive, cq, mr) = pair(4);
        dev.set_rnr_timeout(Duration::ZERO);
        let g = [sge(&mr, 0)];
        active
            .post_send(&[SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sg_list: &g,
                signaled: true,
            }])
            .expect("post_send");
        let wcs = poll_all(&cq);
        assert!(
            wcs.iter()
                .any(|wc| wc.wr_id == 1 && wc.status == WcStatus::RnrRetryExceeded),
            "{wcs:?}"
        );
        assert!(passive.is_dead());
    }

    #[test]
    fn a_qp_with_an_srq_refuses_its_own_receives_and_the_srq_is_bounded() {
        let (_dev, srq, _active, passive, cq, mr) = pair(2);
        let g = [sge(&mr, 0)];
        let wr = RecvWr {
            wr_id: 9,
            sg_list: &g,
        };
        assert!(matches!(
            passive.post_recv(&[wr]),
            Err(VerbsError::InvalidArgument(_))
        ));
        srq.post_srq_recv(&[wr, wr]).expect("two fit");
        assert_eq!(
            srq.post_srq_recv(&[wr]),
            Err(VerbsError::QueueFull("shared receive queue"))
        );
        // A QP in error leaves the SRQ's receives posted (nothing flushed).
        passive.disconnect();
        assert!(poll_all(&cq)
            .iter()
            .all(|wc| wc.opcode != crate::WcOpcode::Recv));
        assert_eq!(
            srq.post_srq_recv(&[wr]),
            Err(VerbsError::QueueFull("shared receive queue"))
        );
    }
}
