//! NVMe/RDMA, host side, on the verbs interface (software provider for loopback,
//! rdma-sys for NICs).
//!
//! One RC QP and one CQ per queue. Command capsules are sent from a registered
//! capsule buffer (one 64-byte SQE slot per command id); write data that fits the
//! target's in-capsule size is gathered straight from the caller's buffer as a second
//! SGE (no copy), larger data is described by a keyed SGL naming the caller's
//! registered buffer, which the target reads or writes with RDMA. Responses land in
//! one 16-byte receive slot each, reposted in batches.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use nvmf_common::types::Qid;
use nvmf_common::wire::cqe::CQE_LEN;
use nvmf_common::wire::rdma::{
    reject_status_name, CmAccept, CmReject, CmRequest, CM_REQ_LEN, NVME_RDMA_CM_FMT_1_0,
};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::sqe::{offset, SQE_LEN};
use nvmf_verbs::{
    post_recv_slots, Access, CompletionQueue, Device, DmaBuffer, MemoryRegion, ProtectionDomain,
    QpCaps, QpInit, QueuePair, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use super::{DataDir, Fabric, HostQueue, IoBuf, QueueParams, TransportError};

/// Byte range of DPTR (SGL1) in the SQE.
const DPTR: std::ops::Range<usize> = offset::DPTR as usize..offset::DPTR as usize + 16;
/// Send completions requested every this many sends (frees send-queue entries).
const SIGNAL_INTERVAL: u32 = 16;
const POLL_BATCH: usize = 64;
const WR_RECV: u64 = 1 << 48;
const WR_SEND: u64 = 2 << 48;

/// An RDMA fabric endpoint: one device, one protection domain, one target address.
pub struct RdmaFabric {
    device: Arc<dyn Device>,
    pd: Arc<dyn ProtectionDomain>,
    addr: String,
    name: &'static str,
}

impl RdmaFabric {
    /// A fabric to `addr` ("IP:PORT") on `device`.
    pub fn new(device: Arc<dyn Device>, addr: String) -> Result<Self, TransportError> {
        let pd = device.alloc_pd().map_err(verbs_err)?;
        Ok(RdmaFabric {
            device,
            pd,
            addr,
            name: "rdma",
        })
    }

    /// The same, reported as the loopback transport.
    pub fn loopback(device: Arc<dyn Device>, addr: String) -> Result<Self, TransportError> {
        let mut f = RdmaFabric::new(device, addr)?;
        f.name = "loopback";
        Ok(f)
    }
}

fn verbs_err(e: VerbsError) -> TransportError {
    match e {
        VerbsError::Rejected(pd) => TransportError::Rejected(describe_reject(&pd)),
        VerbsError::NoListener(a) => TransportError::Refused(format!("no listener at {a}")),
        VerbsError::ConnectionRefused => TransportError::Refused("connection refused".into()),
        VerbsError::Timeout => TransportError::Timeout("RDMA connect".into()),
        VerbsError::QpError => TransportError::Dead("queue pair in error state".into()),
        other => TransportError::Other(other.to_string()),
    }
}

fn describe_reject(pd: &[u8]) -> String {
    if pd.len() >= 4 {
        let r = CmReject::new_unchecked(pd);
        format!(
            "NVMe/RDMA reject: {} ({:#x})",
            reject_status_name(r.sts()),
            r.sts()
        )
    } else {
        "rejected without NVMe/RDMA status".to_string()
    }
}

impl Fabric for RdmaFabric {
    fn connect_queue(&self, p: &QueueParams) -> Result<Box<dyn HostQueue>, TransportError> {
        Ok(Box::new(RdmaHostQueue::connect(self, p)?))
    }

    fn alloc(&self, len: usize) -> Result<IoBuf, TransportError> {
        let buf = Arc::new(
            DmaBuffer::new(len)
                .ok_or_else(|| TransportError::Invalid(format!("cannot allocate {len} bytes")))?,
        );
        let mr = self
            .pd
            .register(
                buf.clone(),
                Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
            )
            .map_err(verbs_err)?;
        Ok(IoBuf {
            buf,
            mr: Some(mr),
            offset: 0,
            len,
        })
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn keyed_sgls(&self) -> bool {
        true
    }
}

/// A send waiting for the next doorbell.
struct Pending {
    slot: u16,
    data: Option<Sge>,
}

pub struct RdmaHostQueue {
    qid: Qid,
    depth: u16,
    icd: u32,
    qp: Arc<dyn QueuePair>,
    cq: Arc<dyn CompletionQueue>,
    cmd_buf: Arc<DmaBuffer>,
    cmd_mr: Arc<dyn MemoryRegion>,
    rsp_buf: Arc<DmaBuffer>,
    rsp_mr: Arc<dyn MemoryRegion>,
    pending: Vec<Pending>,
    reposts: Vec<u16>,
    wcs: Vec<WorkCompletion>,
    sends: u32,
    /// Sends between signaled ones: unsignaled sends hold send-queue entries until a
    /// later signaled one completes, so this stays below the spare send-queue room.
    signal_every: u32,
    dead: Option<String>,
    /// The connection ended under us (the target disconnected or vanished): seen while
    /// waiting, acted on once the responses already received are drained.
    peer_gone: bool,
    sges: Vec<Sge>,
}

impl RdmaHostQueue {
    fn connect(f: &RdmaFabric, p: &QueueParams) -> Result<Self, TransportError> {
        let depth = p.depth.max(2);
        let cq = f
            .device
            .create_cq(u32::from(depth) * 3)
            .map_err(verbs_err)?;
        let nomem = || TransportError::Other("out of memory for queue buffers".into());
        let cmd_buf = Arc::new(DmaBuffer::new(usize::from(depth) * SQE_LEN).ok_or_else(nomem)?);
        let rsp_buf = Arc::new(DmaBuffer::new(usize::from(depth) * CQE_LEN).ok_or_else(nomem)?);
        let cmd_mr =
            f.pd.register(cmd_buf.clone(), Access::LOCAL_WRITE)
                .map_err(verbs_err)?;
        let rsp_mr =
            f.pd.register(rsp_buf.clone(), Access::LOCAL_WRITE)
                .map_err(verbs_err)?;
        let mut req = [0u8; CM_REQ_LEN];
        {
            let mut r = CmRequest::new_unchecked(&mut req[..]);
            r.set_recfmt(NVME_RDMA_CM_FMT_1_0);
            r.set_qid(p.qid.0);
            r.set_hrqsize(depth);
            r.set_hsqsize(depth - 1);
        }
        let init = QpInit {
            pd: f.pd.clone(),
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            caps: QpCaps {
                max_send_wr: u32::from(depth) * 2,
                max_recv_wr: u32::from(depth),
                max_send_sge: 2,
                max_recv_sge: 1,
            },
            srq: None,
        };
        let rmr = rsp_mr.clone();
        let all: Vec<u16> = (0..depth).collect();
        let mut pre_post = move |qp: &dyn QueuePair| -> Result<(), VerbsError> {
            post_recv_slots(qp, rmr.as_ref(), CQE_LEN, &all, |i| WR_RECV | u64::from(i))
        };
        let (qp, rep) = f
            .device
            .connect(&f.addr, init, &req, &mut pre_post, p.connect_timeout)
            .map_err(verbs_err)?;
        if rep.len() >= 4 {
            let a = CmAccept::new_unchecked(&rep[..]);
            if a.crqsize() < depth - 1 {
                warn!(qid = %p.qid, crqsize = a.crqsize(), depth, "target receive queue smaller than requested");
            }
        }
        debug!(qid = %p.qid, depth, addr = %f.addr, "NVMe/RDMA queue connected");
        Ok(RdmaHostQueue {
            qid: p.qid,
            depth,
            icd: p.in_capsule_data,
            qp,
            cq,
            cmd_buf,
            cmd_mr,
            rsp_buf,
            rsp_mr,
            pending: Vec::with_capacity(usize::from(depth)),
            reposts: Vec::with_capacity(usize::from(depth)),
            wcs: vec![WorkCompletion::EMPTY; POLL_BATCH],
            sends: 0,
            signal_every: SIGNAL_INTERVAL.min(u32::from(depth)).max(1),
            dead: None,
            peer_gone: false,
            sges: Vec::with_capacity(usize::from(depth) * 2),
        })
    }

    fn check(&self) -> Result<(), TransportError> {
        match &self.dead {
            Some(why) => Err(TransportError::Dead(why.clone())),
            None => Ok(()),
        }
    }

    fn die(&mut self, why: String) -> TransportError {
        warn!(qid = %self.qid, "queue failed: {why}");
        self.qp.disconnect();
        self.dead = Some(why.clone());
        TransportError::Dead(why)
    }

    fn repost(&mut self) -> Result<(), TransportError> {
        if self.reposts.is_empty() {
            return Ok(());
        }
        let r = post_recv_slots(
            self.qp.as_ref(),
            self.rsp_mr.as_ref(),
            CQE_LEN,
            &self.reposts,
            |s| WR_RECV | u64::from(s),
        );
        self.reposts.clear();
        r.map_err(|e| self.die(format!("post_recv: {e}")))
    }
}

impl HostQueue for RdmaHostQueue {
    fn qid(&self) -> Qid {
        self.qid
    }

    fn depth(&self) -> u16 {
        self.depth
    }

    fn submit(
        &mut self,
        slot: u16,
        sqe: &[u8; 64],
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<(), TransportError> {
        self.check()?;
        if slot >= self.depth {
            return Err(TransportError::Invalid(format!(
                "slot {slot} >= depth {}",
                self.depth
            )));
        }
        let mut capsule = *sqe;
        let dptr = capsule
            .get_mut(DPTR)
            .ok_or_else(|| TransportError::Invalid("SQE too short".into()))?;
        let mut data_sge = None;
        let desc = match (data, dir) {
            (Some(b), DataDir::ToCtrl) if b.len as u64 <= u64::from(self.icd) && b.len > 0 => {
                let mr =
                    b.mr.as_ref()
                        .ok_or_else(|| TransportError::Invalid("unregistered buffer".into()))?;
                data_sge = Some(Sge {
                    addr: b.addr(),
                    length: b.len as u32,
                    lkey: mr.lkey(),
                });
                SglDescriptor::in_capsule(0, b.len as u32)
            }
            (Some(b), DataDir::ToCtrl | DataDir::FromCtrl) if b.len > 0 => {
                let mr =
                    b.mr.as_ref()
                        .ok_or_else(|| TransportError::Invalid("unregistered buffer".into()))?;
                SglDescriptor::keyed(b.addr(), b.len as u32, mr.rkey(), false)
            }
            _ => SglDescriptor::keyed(0, 0, 0, false),
        };
        desc.emit(dptr)
            .map_err(|e| TransportError::Invalid(format!("SGL: {e}")))?;
        if !self.cmd_buf.write_at(usize::from(slot) * SQE_LEN, &capsule) {
            return Err(TransportError::Invalid("capsule slot out of range".into()));
        }
        self.pending.push(Pending {
            slot,
            data: data_sge,
        });
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        self.check()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        self.sges.clear();
        let (addr, lkey) = (self.cmd_mr.addr(), self.cmd_mr.lkey());
        for p in &self.pending {
            self.sges.push(Sge {
                addr: addr + (usize::from(p.slot) * SQE_LEN) as u64,
                length: SQE_LEN as u32,
                lkey,
            });
            self.sges.push(p.data.unwrap_or(Sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }));
        }
        let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(self.pending.len());
        for (i, p) in self.pending.iter().enumerate() {
            self.sends = self.sends.wrapping_add(1);
            let n = if p.data.is_some() { 2 } else { 1 };
            let sg = self.sges.get(i * 2..i * 2 + n).unwrap_or(&[]);
            wrs.push(SendWr {
                wr_id: WR_SEND | u64::from(p.slot),
                op: SendOp::Send,
                sg_list: sg,
                signaled: self.sends.is_multiple_of(self.signal_every),
            });
        }
        let r = self.qp.post_send(&wrs);
        drop(wrs);
        self.pending.clear();
        r.map_err(|e| self.die(format!("post_send: {e}")))
    }

    fn poll(&mut self, out: &mut Vec<[u8; 16]>) -> Result<usize, TransportError> {
        // Responses already received are delivered even when the queue failed since:
        // the target answered them before the connection went.
        let n = self.cq.poll(&mut self.wcs);
        let mut got = 0;
        let mut failure: Option<String> = None;
        for i in 0..n {
            let wc = self.wcs[i];
            if wc.status != WcStatus::Success {
                failure
                    .get_or_insert_with(|| format!("{:?} completion: {:?}", wc.opcode, wc.status));
                continue;
            }
            if wc.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = (wc.wr_id & 0xFFFF) as u16;
            if (wc.byte_len as usize) < CQE_LEN {
                failure.get_or_insert_with(|| format!("response capsule of {} bytes", wc.byte_len));
                continue;
            }
            let mut cqe = [0u8; CQE_LEN];
            self.rsp_buf.read_at(usize::from(slot) * CQE_LEN, &mut cqe);
            out.push(cqe);
            self.reposts.push(slot);
            got += 1;
        }
        if let Some(why) = failure {
            if self.dead.is_none() {
                let _ = self.die(why);
            }
        }
        if self.dead.is_some() {
            // Nothing is reposted on a dead queue; the next poll reports it.
            self.reposts.clear();
            return if got > 0 {
                Ok(got)
            } else {
                self.check().map(|()| 0)
            };
        }
        if got == 0 && self.peer_gone {
            return Err(self.die("the target closed the connection".into()));
        }
        self.repost()?;
        Ok(got)
    }

    fn wait(&mut self, timeout: Duration) {
        self.cq.wait(timeout);
        // Only here, off the spinning path: on real verbs this reads the connection's
        // rdma_cm events, so a target that disconnects or dies fails outstanding
        // commands at once instead of at their timeouts.
        if self.dead.is_none() && self.qp.is_dead() {
            self.peer_gone = true;
        }
    }

    fn close(&mut self) {
        if self.dead.is_none() {
            self.dead = Some("closed".into());
        }
        self.qp.disconnect();
    }
}

impl Drop for RdmaHostQueue {
    fn drop(&mut self) {
        self.qp.disconnect();
    }
}
