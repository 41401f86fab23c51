//! Shared receive queues: several QPs take their receives from one SRQ; a receive
//! completion names the QP the SEND came for; reposted receives are used again; the
//! SRQ outlives a QP that used it.
//!
//! Which of the SRQ's receives a SEND consumes is not checked against posting order
//! (verbs promise none across QPs): a completion's `wr_id` names the receive, and the
//! bytes must be in that receive's buffer.

use super::kit::*;

/// Bytes of each SRQ receive buffer in these properties.
const SRQ_BUF: u32 = 64;

fn srq(pd: &Arc<dyn ProtectionDomain>, max_wr: u32) -> Result<Arc<dyn SharedReceiveQueue>, String> {
    pd.create_srq(SrqCaps { max_wr, max_sge: 1 })
        .map_err(|e| format!("create_srq(max_wr {max_wr}): {e}"))
}

/// Posts receive `wr_id` naming buffer `wr_id` (of [`SRQ_BUF`] bytes) of `mr`.
fn post_srq(srq: &Arc<dyn SharedReceiveQueue>, mr: &Arc<dyn MemoryRegion>, ids: &[u64]) -> Outcome {
    let sges: Vec<Sge> = ids
        .iter()
        .map(|&id| sge(mr, id * u64::from(SRQ_BUF), SRQ_BUF))
        .collect();
    let wrs: Vec<RecvWr<'_>> = ids
        .iter()
        .zip(&sges)
        .map(|(&wr_id, g)| RecvWr {
            wr_id,
            sg_list: std::slice::from_ref(g),
        })
        .collect();
    srq.post_srq_recv(&wrs)
        .map_err(|e| format!("post_srq_recv({ids:?}): {e}"))
}

/// The memory and the shared receive CQ of a property: SENDs go from `src` (of the
/// active side's PD) into SRQ buffers of `dst`, completing on `cq`.
struct Rig {
    cq: Arc<dyn CompletionQueue>,
    src: Arc<dyn MemoryRegion>,
    dst: Arc<dyn MemoryRegion>,
}

impl Rig {
    fn new(
        f: &Fabric,
        pa: &Arc<dyn ProtectionDomain>,
        pb: &Arc<dyn ProtectionDomain>,
    ) -> Result<Rig, String> {
        Ok(Rig {
            cq: cq(f)?,
            src: reg(pa, 4096, Access::empty())?,
            dst: reg(pb, 4096, Access::LOCAL_WRITE)?,
        })
    }

    /// Sends `msg` from `from` and checks that one receive of `posted` completed for
    /// `to`, with the bytes in that receive's buffer. Returns the receive's `wr_id`.
    fn send_lands(
        &self,
        f: &Fabric,
        from: &End,
        to: &Arc<dyn QueuePair>,
        posted: &[u64],
        msg: &[u8],
    ) -> Result<u64, String> {
        fill(&self.src, 0, msg)?;
        let len = msg.len() as u32;
        post_send(&from.qp, &[send(7, &[sge(&self.src, 0, len)])])?;
        expect(
            f,
            &from.send_cq,
            &[ok_send(7, WcOpcode::Send, &from.qp)],
            "send",
        )?;
        let got = poll_n(f, &self.cq, 1);
        let [wc] = got.as_slice() else {
            return Err(format!("expected one receive completion, got {got:?}"));
        };
        ensure!(
            posted.contains(&wc.wr_id),
            "receive completion names wr_id {} but {posted:?} were posted: {wc:?}",
            wc.wr_id
        );
        ensure!(
            matches(wc, &ok_recv(wc.wr_id, len, to)),
            "receive completion {wc:?}: expected success, {len} bytes, qp_num {}",
            to.qp_num()
        );
        let at = (wc.wr_id * u64::from(SRQ_BUF)) as usize;
        let landed = bytes(&self.dst, at, msg.len())?;
        ensure!(
            landed == msg,
            "buffer {} holds {landed:?}, not the SEND's bytes",
            wc.wr_id
        );
        Ok(wc.wr_id)
    }

    /// A connection whose passive QP takes receives from `srq` and completes them on
    /// the rig's CQ.
    fn connect(
        &self,
        f: &Fabric,
        pa: &Arc<dyn ProtectionDomain>,
        pb: &Arc<dyn ProtectionDomain>,
        srq: &Arc<dyn SharedReceiveQueue>,
    ) -> Result<Pair, String> {
        connect_into(f, pa, pb, Arc::clone(&self.cq), Some(Arc::clone(srq)))
    }
}

/// Two QPs created with one SRQ both receive into its buffers; each completion (on
/// their shared receive CQ) names the QP the SEND came for.
pub fn srq_two_qps_share_receives(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let r = Rig::new(f, &pa, &pb)?;
    let s = srq(&pb, 16)?;
    let p1 = r.connect(f, &pa, &pb, &s)?;
    let p2 = r.connect(f, &pa, &pb, &s)?;
    ensure!(
        p1.b.qp.qp_num() != p2.b.qp.qp_num(),
        "two QPs share qp_num {}",
        p1.b.qp.qp_num()
    );
    let mut posted = vec![0, 1, 2, 3];
    post_srq(&s, &r.dst, &posted)?;
    for (i, (from, to)) in [
        (&p1.a, &p1.b.qp),
        (&p2.a, &p2.b.qp),
        (&p1.a, &p1.b.qp),
        (&p2.a, &p2.b.qp),
    ]
    .into_iter()
    .enumerate()
    {
        let msg = format!("message {i} for qp {}", to.qp_num());
        let used = r.send_lands(f, from, to, &posted, msg.as_bytes())?;
        posted.retain(|&id| id != used);
    }
    quiet(f, &r.cq, "the shared receive CQ")?;
    quiet(f, &p1.b.recv_cq, "p1's own receive CQ")
}

/// Receives reposted to an SRQ after their completions were polled are used again: an
/// SRQ of two receives carries any number of SENDs when they are reposted.
pub fn srq_reposted_receives_are_reused(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let r = Rig::new(f, &pa, &pb)?;
    let s = srq(&pb, 2)?;
    let granted = s.caps().max_wr;
    ensure!(
        granted >= 2,
        "asked for 2 SRQ receives, got max_wr {granted}"
    );
    let p1 = r.connect(f, &pa, &pb, &s)?;
    let p2 = r.connect(f, &pa, &pb, &s)?;
    post_srq(&s, &r.dst, &[0, 1])?;
    for round in 0..4u32 {
        let mut posted = vec![0, 1];
        for (from, to) in [(&p1.a, &p1.b.qp), (&p2.a, &p2.b.qp)] {
            let msg = format!("round {round} to {}", to.qp_num());
            let used = r.send_lands(f, from, to, &posted, msg.as_bytes())?;
            posted.retain(|&id| id != used);
        }
        ensure!(
            posted.is_empty(),
            "round {round}: receives {posted:?} unused"
        );
        post_srq(&s, &r.dst, &[0, 1])?;
    }
    quiet(f, &r.cq, "the shared receive CQ")
}

/// A QP destroyed while its SRQ lives takes none of the SRQ's receives with it: the
/// other QP keeps receiving into them, and nothing is flushed.
pub fn srq_survives_a_destroyed_qp(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let r = Rig::new(f, &pa, &pb)?;
    let s = srq(&pb, 8)?;
    let p1 = r.connect(f, &pa, &pb, &s)?;
    let p2 = r.connect(f, &pa, &pb, &s)?;
    let mut posted = vec![0, 1, 2, 3];
    post_srq(&s, &r.dst, &posted)?;
    let used = r.send_lands(f, &p1.a, &p1.b.qp, &posted, b"before")?;
    posted.retain(|&id| id != used);
    // Destroy the first connection's passive QP (and the active one with it).
    drop(p1);
    quiet(f, &r.cq, "the shared receive CQ after a QP was destroyed")?;
    for i in 0..3 {
        let msg = format!("after {i}");
        let used = r.send_lands(f, &p2.a, &p2.b.qp, &posted, msg.as_bytes())?;
        posted.retain(|&id| id != used);
    }
    // The SRQ still takes new receives.
    post_srq(&s, &r.dst, &[4])?;
    r.send_lands(f, &p2.a, &p2.b.qp, &[4], b"reposted")?;
    quiet(f, &r.cq, "the shared receive CQ")
}
