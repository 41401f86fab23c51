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

/// Sends `msg` from `from` and checks that one receive of `posted` completed on `cq`
/// for `to`, with the bytes in that receive's buffer. Returns the receive's `wr_id`.
fn send_lands(
    f: &Fabric,
    from: &End,
    to: &Arc<dyn QueuePair>,
    cq: &Arc<dyn CompletionQueue>,
    src: &Arc<dyn MemoryRegion>,
    dst: &Arc<dyn MemoryRegion>,
    posted: &[u64],
    msg: &[u8],
) -> Result<u64, String> {
    fill(src, 0, msg)?;
    let len = msg.len() as u32;
    post_send(&from.qp, &[send(7, &[sge(src, 0, len)])])?;
    expect(
        f,
        &from.send_cq,
        &[ok_send(7, WcOpcode::Send, &from.qp)],
        "send",
    )?;
    let got = poll_n(f, cq, 1);
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
    ensure!(
        bytes(dst, at, msg.len())? == msg,
        "buffer {} holds {:?}, not the SEND's bytes",
        wc.wr_id,
        bytes(dst, at, msg.len())?
    );
    Ok(wc.wr_id)
}

/// Two QPs created with one SRQ both receive into its buffers; each completion (on
/// their shared receive CQ) names the QP the SEND came for.
pub fn srq_two_qps_share_receives(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 4096, Access::empty())?;
    let dst = reg(&pb, 4096, Access::LOCAL_WRITE)?;
    let s = srq(&pb, 16)?;
    let recv_cq = cq(f)?;
    let p1 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    let p2 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    ensure!(
        p1.b.qp.qp_num() != p2.b.qp.qp_num(),
        "two QPs share qp_num {}",
        p1.b.qp.qp_num()
    );
    let mut posted = vec![0, 1, 2, 3];
    post_srq(&s, &dst, &posted)?;
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
        let used = send_lands(f, from, to, &recv_cq, &src, &dst, &posted, msg.as_bytes())?;
        posted.retain(|&id| id != used);
    }
    quiet(f, &recv_cq, "the shared receive CQ")?;
    quiet(f, &p1.b.recv_cq, "p1's own receive CQ")
}

/// Receives reposted to an SRQ after their completions were polled are used again: an
/// SRQ of two receives carries any number of SENDs when they are reposted.
pub fn srq_reposted_receives_are_reused(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 4096, Access::empty())?;
    let dst = reg(&pb, 4096, Access::LOCAL_WRITE)?;
    let s = srq(&pb, 2)?;
    let granted = s.caps().max_wr;
    ensure!(
        granted >= 2,
        "asked for 2 SRQ receives, got max_wr {granted}"
    );
    let recv_cq = cq(f)?;
    let p1 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    let p2 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    post_srq(&s, &dst, &[0, 1])?;
    for round in 0..4u32 {
        let mut posted = vec![0, 1];
        for (from, to) in [(&p1.a, &p1.b.qp), (&p2.a, &p2.b.qp)] {
            let msg = format!("round {round} to {}", to.qp_num());
            let used = send_lands(f, from, to, &recv_cq, &src, &dst, &posted, msg.as_bytes())?;
            posted.retain(|&id| id != used);
        }
        ensure!(
            posted.is_empty(),
            "round {round}: receives {posted:?} unused"
        );
        post_srq(&s, &dst, &[0, 1])?;
    }
    quiet(f, &recv_cq, "the shared receive CQ")
}

/// A QP destroyed while its SRQ lives takes none of the SRQ's receives with it: the
/// other QP keeps receiving into them, and nothing is flushed.
pub fn srq_survives_a_destroyed_qp(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 4096, Access::empty())?;
    let dst = reg(&pb, 4096, Access::LOCAL_WRITE)?;
    let s = srq(&pb, 8)?;
    let recv_cq = cq(f)?;
    let p1 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    let p2 = connect_into(f, &pa, &pb, Arc::clone(&recv_cq), Some(Arc::clone(&s)))?;
    let mut posted = vec![0, 1, 2, 3];
    post_srq(&s, &dst, &posted)?;
    let used = send_lands(f, &p1.a, &p1.b.qp, &recv_cq, &src, &dst, &posted, b"before")?;
    posted.retain(|&id| id != used);
    // Destroy the first connection's passive QP (and the active one with it).
    drop(p1);
    quiet(
        f,
        &recv_cq,
        "the shared receive CQ after a QP was destroyed",
    )?;
    for i in 0..3 {
        let msg = format!("after {i}");
        let used = send_lands(
            f,
            &p2.a,
            &p2.b.qp,
            &recv_cq,
            &src,
            &dst,
            &posted,
            msg.as_bytes(),
        )?;
        posted.retain(|&id| id != used);
    }
    // The SRQ still takes new receives.
    post_srq(&s, &dst, &[4])?;
    send_lands(f, &p2.a, &p2.b.qp, &recv_cq, &src, &dst, &[4], b"reposted")?;
    quiet(f, &recv_cq, "the shared receive CQ")
}
