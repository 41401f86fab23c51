//! Accepts NVMe/RDMA connections on one port.
//!
//! For each rdma_cm connect request: validate the NVMe/RDMA private data (record
//! format, queue id, host queue sizes) and reject with the NVMe/RDMA status when it is
//! wrong; otherwise pick the queue's poll group (admin queues to group 0, I/O queues
//! spread by qid), allocate its response buffers and, unless the group has a shared
//! receive queue (then the QP is created on it and the group's receives serve it),
//! its receive buffers (one capsule per host SQ entry), register them once, post
//! every receive before the connection is established, accept with our receive queue
//! size, and hand the queue to the group.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{debug, warn};

use nvmf_common::types::Qid;
use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::rdma::{
    reject_status, reject_status_name, CmAccept, CmReject, CmRequest, CM_REQ_LEN,
    NVME_RDMA_CM_FMT_1_0,
};
use nvmf_verbs::{
    post_recv_slots, Access, ConnectRequest, DmaBuffer, Listener, ProtectionDomain, QpCaps, QpInit,
    QueuePair, VerbsError,
};

use super::poll_group::{GroupHandle, NewQueue};
use super::{capsule_size, verbs_wr_id, wr_kind};
use crate::core::QueueCtx;
use crate::params::PortInfo;
use crate::target::Target;

/// Private data sizes of the accept and reject messages.
const CM_ACCEPT_LEN: usize = 32;
const CM_REJECT_LEN: usize = 4;
/// Send work requests per slot: an RDMA READ or WRITE plus the response SEND.
const SEND_WRS_PER_SLOT: u32 = 3;

pub fn spawn(
    listener: Arc<dyn Listener>,
    target: Arc<Target>,
    port: Arc<PortInfo>,
    pd: Arc<dyn ProtectionDomain>,
    groups: Vec<GroupHandle>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("nvmf-listen-{}", port.trsvcid))
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if let Some(req) = listener.next_request(Duration::from_millis(50)) {
                    handle_request(req, &target, &port, &pd, &groups);
                }
            }
        })
        .unwrap_or_else(|e| panic!("cannot spawn listener thread: {e}"))
}

/// What a valid NVMe/RDMA connect request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRequest {
    pub qid: u16,
    /// Host SQ entries (hsqsize + 1): our receive queue depth.
    pub recv_depth: u16,
    /// Host receive queue size: how many responses it can take.
    pub hrqsize: u16,
}

/// Validates a CM connect request: its private data, and `initiator_depth` (how many
/// RDMA READs the host lets us issue, when the provider says); `Err` is the NVMe/RDMA
/// reject status.
///
/// Compared with nvmet (`nvmet_rdma_parse_cm_connect_req`) and SPDK
/// (`nvmf_rdma_connect`), see docs/peers.md: a QID or HSQSIZE out of range is refused
/// here, where both peers refuse the same host at its Connect instead; HRQSIZE only
/// has to be non-zero.
pub fn validate_cm_request(
    pd: &[u8],
    initiator_depth: Option<u8>,
    target: &Target,
) -> Result<QueueRequest, u16> {
    // SPDK refuses private data shorter than the 32-byte request (nvmet only an
    // empty one); we refuse as SPDK does.
    if pd.len() < CM_REQ_LEN {
        return Err(reject_status::INVALID_PRIVATE_DATA_LENGTH);
    }
    let r = CmRequest::new_unchecked(pd);
    if r.recfmt() != NVME_RDMA_CM_FMT_1_0 {
        return Err(reject_status::INVALID_RECFMT);
    }
    // No RDMA READ allowed toward the host: its writes could never be fetched. SPDK
    // refuses with Invalid IRD; nvmet accepts; we refuse.
    if initiator_depth == Some(0) {
        return Err(reject_status::INVALID_IRD);
    }
    let qid = r.qid();
    let p = &target.params;
    // Neither peer checks QID or HSQSIZE here; both refuse the Connect that follows
    // (QID above the limit, SQSIZE 0 or above MQES). We refuse on purpose one step
    // earlier, before allocating the queue's buffers.
    if qid > p.max_io_queues {
        return Err(reject_status::INVALID_QID);
    }
    let limit = if qid == 0 {
        p.max_admin_queue_size
    } else {
        p.max_queue_size
    };
    let recv_depth = u32::from(r.hsqsize()) + 1;
    if r.hsqsize() == 0 || recv_depth > u32::from(limit) {
        return Err(reject_status::INVALID_HSQSIZE);
    }
    // HRQSIZE is the host's receive queue: it costs us nothing, so any size is fine,
    // larger than ours or other than HSQSIZE + 1 (nvmet and SPDK accept both). Zero
    // (a host that can take no response) nvmet and SPDK accept and then fail to use;
    // we refuse it on purpose.
    if r.hrqsize() == 0 {
        return Err(reject_status::INVALID_HRQSIZE);
    }
    Ok(QueueRequest {
        qid,
        recv_depth: recv_depth as u16,
        hrqsize: r.hrqsize(),
    })
}

/// The NVMe/RDMA CM reject private data carrying `sts`.
fn reject_data(sts: u16) -> [u8; CM_REJECT_LEN] {
    let mut rej = [0u8; CM_REJECT_LEN];
    let mut r = CmReject::new_unchecked(&mut rej[..]);
    r.set_recfmt(NVME_RDMA_CM_FMT_1_0);
    r.set_sts(sts);
    rej
}

fn reject(req: Box<dyn ConnectRequest>, sts: u16) {
    req.reject(&reject_data(sts));
}

fn handle_request(
    req: Box<dyn ConnectRequest>,
    target: &Arc<Target>,
    port: &Arc<PortInfo>,
    pd: &Arc<dyn ProtectionDomain>,
    groups: &[GroupHandle],
) {
    let qr = match validate_cm_request(req.private_data(), req.initiator_depth(), target) {
        Ok(q) => q,
        Err(sts) => {
            warn!(
                port = %port.trsvcid, len = req.private_data().len(),
                "rejecting NVMe/RDMA connect: {} ({sts:#x})", reject_status_name(sts)
            );
            return reject(req, sts);
        }
    };
    // Whatever fails from here on is the target's shortage, not the host's mistake:
    // the host is told NO_RESOURCES (in the reject's private data) and may retry.
    if let Err(e) = build_queue(req, target, port, pd, groups, qr) {
        warn!(
            qid = qr.qid,
            "could not set up queue, rejected with {}: {e}",
            reject_status_name(reject_status::NO_RESOURCES)
        );
    }
}

fn build_queue(
    req: Box<dyn ConnectRequest>,
    target: &Arc<Target>,
    port: &Arc<PortInfo>,
    pd: &Arc<dyn ProtectionDomain>,
    groups: &[GroupHandle],
    qr: QueueRequest,
) -> Result<(), VerbsError> {
    let slots = qr.recv_depth;
    let capsule_size = capsule_size(target);
    let no_resources = reject_data(reject_status::NO_RESOURCES);
    let buffers = (|| {
        let nomem = || VerbsError::Provider("out of memory for queue buffers".into());
        let group = if qr.qid == 0 || groups.len() <= 1 {
            groups.first()
        } else {
            groups.get((usize::from(qr.qid) - 1) % groups.len())
        }
        .ok_or(VerbsError::InvalidArgument("no poll group"))?;
        let recv = match group.shared.srq {
            Some(_) => None,
            None => {
                let buf =
                    Arc::new(DmaBuffer::new(usize::from(slots) * capsule_size).ok_or_else(nomem)?);
                let mr = pd.register(buf.clone(), Access::LOCAL_WRITE)?;
                Some((buf, mr))
            }
        };
        let resp_buf = Arc::new(DmaBuffer::new(usize::from(slots) * CQE_LEN).ok_or_else(nomem)?);
        let resp_mr = pd.register(resp_buf.clone(), Access::LOCAL_WRITE)?;
        Ok((recv, resp_buf, resp_mr, group))
    })();
    let (recv, resp_buf, resp_mr, group) = match buffers {
        Ok(b) => b,
        Err(e) => {
            req.reject(&no_resources);
            return Err(e);
        }
    };
    let init = QpInit {
        pd: pd.clone(),
        send_cq: group.shared.cq.clone(),
        recv_cq: group.shared.cq.clone(),
        srq: group.shared.srq.clone(),
        caps: QpCaps {
            max_send_wr: u32::from(slots) * SEND_WRS_PER_SLOT,
            max_recv_wr: u32::from(slots),
            max_send_sge: 2,
            max_recv_sge: 1,
        },
    };
    let mut acc = [0u8; CM_ACCEPT_LEN];
    {
        let mut a = CmAccept::new_unchecked(&mut acc[..]);
        a.set_recfmt(NVME_RDMA_CM_FMT_1_0);
        a.set_crqsize(slots);
    }
    let rmr = recv.as_ref().map(|(_, mr)| mr.clone());
    let all: Vec<u16> = (0..slots).collect();
    let mut pre_post = move |qp: &dyn QueuePair| -> Result<(), VerbsError> {
        // With the group's SRQ the receives are already posted there.
        let Some(rmr) = &rmr else { return Ok(()) };
        post_recv_slots(qp, rmr.as_ref(), capsule_size, &all, |i| {
            verbs_wr_id(wr_kind::RECV, i)
        })
    };
    let qp = req.accept(init, &acc, &no_resources, &mut pre_post)?;
    debug!(
        qid = qr.qid,
        slots,
        hrqsize = qr.hrqsize,
        qp = qp.qp_num(),
        "NVMe/RDMA queue accepted"
    );
    let ctx = QueueCtx::new(Qid(qr.qid), slots - 1, port.clone());
    let ok = group.add(NewQueue {
        qp: qp.clone(),
        ctx,
        slots,
        capsule_size,
        recv,
        resp_buf,
        resp_mr,
    });
    if !ok {
        qp.disconnect();
        return Err(VerbsError::Provider("poll group is gone".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::TargetParams;
    use nvmf_common::wire::rdma::cm_request;

    /// The Linux host's request for I/O queue 1 with 32 entries.
    fn linux_io_request() -> [u8; CM_REQ_LEN] {
        cm_request(1, 32, 31, 0)
    }

    #[test]
    fn initiator_depth_0_is_refused_as_spdk_refuses_it() {
        let target = Target::new(TargetParams::default());
        let pd = linux_io_request();
        assert_eq!(
            validate_cm_request(&pd, Some(0), &target),
            Err(reject_status::INVALID_IRD)
        );
        for ird in [Some(1), Some(u8::MAX), None] {
            let q = validate_cm_request(&pd, ird, &target);
            assert_eq!(q.map(|q| q.qid), Ok(1), "initiator depth {ird:?}");
        }
    }
}
