//! Remote access errors and teardown: what an error does to both QPs, flushes.

use super::kit::*;

// ---------------------------------------------------------------------------------
// Remote access errors.

/// The regions of a remote-failure scenario: `remote` in the passive side's PD, `local`
/// (source or sink) in the active side's.
pub(super) struct Failure {
    pub(super) remote_access: Access,
    pub(super) local_access: Access,
    /// The failing work request, built from (remote, local).
    pub(super) op: fn(&Arc<dyn MemoryRegion>) -> SendOp,
    /// Drop the remote region before posting (its rkey is then stale).
    pub(super) deregister_remote: bool,
    /// The failing request's length.
    pub(super) len: u32,
}

/// Posts the failing RDMA request (unsignaled: errors complete anyway) from `a`, chained
/// before a SEND, with a receive posted on each side, and checks: the request completes
/// with `RemoteAccessError`, the SEND and both receives are flushed, both QPs end in
/// error, the remote region is unchanged, and another pair of the same device works.
pub(super) fn remote_access_error(f: &Fabric, s: Failure) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let mut remote = Some(reg(&pb, 4096, s.remote_access)?);
    let local = reg(&pa, 4096, s.local_access)?;
    let ra = reg(&pa, 64, Access::LOCAL_WRITE)?;
    let rb = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let tail = reg(&pa, 64, Access::empty())?;
    fill(&local, 0, &[0xff; 4096])?;
    let victim = connect(f, &pa, &pb)?;
    let bystander = connect(f, &pa, &pb)?;
    let op = match &remote {
        Some(r) => (s.op)(r),
        None => return Err("no remote region".into()),
    };
    if s.deregister_remote {
        remote = None;
    }
    let (a, b) = (&victim.a.qp, &victim.b.qp);
    post_recv(a, 50, &[sge(&ra, 0, 64)])?;
    post_recv(b, 60, &[sge(&rb, 0, 64)])?;
    post_send(
        a,
        &[
            SendWr {
                wr_id: 1,
                op,
                sg_list: &[sge(&local, 0, s.len)],
                signaled: false,
            },
            send(2, &[sge(&tail, 0, 4)]),
        ],
    )?;
    expect(
        f,
        &victim.a.send_cq,
        &[failed(1, WcStatus::RemoteAccessError, a), flushed(2, a)],
        "requester's send CQ",
    )?;
    expect(
        f,
        &victim.a.recv_cq,
        &[flushed(50, a)],
        "requester's receive CQ",
    )?;
    expect(
        f,
        &victim.b.recv_cq,
        &[flushed(60, b)],
        "responder's receive CQ",
    )?;
    quiet(f, &victim.b.send_cq, "responder's send CQ")?;
    if let Some(r) = &remote {
        ensure!(
            bytes(r, 0, 4096)? == vec![0; 4096],
            "the refused request changed the remote region"
        );
    }
    if s.local_access.contains(Access::LOCAL_WRITE) {
        ensure!(
            bytes(&local, 0, 4096)? == vec![0xff; 4096],
            "the refused READ changed the local sink"
        );
    }
    unusable(f, &victim.a, &ra, "requester")?;
    unusable(f, &victim.b, &rb, "responder")?;
    let (src, dst) = (
        reg(&pa, 64, Access::empty())?,
        reg(&pb, 64, Access::LOCAL_WRITE)?,
    );
    works(f, &bystander, &src, &dst).map_err(|e| format!("another QP pair: {e}"))
}

/// An RDMA WRITE under a wrong rkey fails with `RemoteAccessError`.
pub fn wrong_rkey_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            local_access: Access::empty(),
            op: |r| SendOp::RdmaWrite {
                remote_addr: r.addr(),
                rkey: r.rkey() ^ 0x0001_0000,
            },
            deregister_remote: false,
            len: 16,
        },
    )
}

/// An RDMA WRITE that runs past the end of the region fails with `RemoteAccessError`
/// and writes nothing.
pub fn out_of_bounds_write_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            local_access: Access::empty(),
            op: |r| SendOp::RdmaWrite {
                remote_addr: r.addr() + 4096 - 15,
                rkey: r.rkey(),
            },
            deregister_remote: false,
            len: 16,
        },
    )
}

/// An RDMA READ starting before the region fails with `RemoteAccessError`.
pub fn read_below_region_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::REMOTE_READ,
            local_access: Access::LOCAL_WRITE,
            op: |r| SendOp::RdmaRead {
                remote_addr: r.addr() - 1,
                rkey: r.rkey(),
            },
            deregister_remote: false,
            len: 16,
        },
    )
}

/// An RDMA WRITE into a region without `REMOTE_WRITE` fails with `RemoteAccessError`.
pub fn missing_remote_write_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::LOCAL_WRITE | Access::REMOTE_READ,
            local_access: Access::empty(),
            op: |r| SendOp::RdmaWrite {
                remote_addr: r.addr(),
                rkey: r.rkey(),
            },
            deregister_remote: false,
            len: 16,
        },
    )
}

/// An RDMA READ from a region without `REMOTE_READ` fails with `RemoteAccessError`.
pub fn missing_remote_read_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            local_access: Access::LOCAL_WRITE,
            op: |r| SendOp::RdmaRead {
                remote_addr: r.addr(),
                rkey: r.rkey(),
            },
            deregister_remote: false,
            len: 16,
        },
    )
}

/// The rkey of a deregistered region fails with `RemoteAccessError`.
pub fn deregistered_rkey_is_remote_access_error(f: &Fabric) -> Outcome {
    remote_access_error(
        f,
        Failure {
            remote_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            local_access: Access::empty(),
            op: |r| SendOp::RdmaWrite {
                remote_addr: r.addr(),
                rkey: r.rkey(),
            },
            deregister_remote: true,
            len: 16,
        },
    )
}

// ---------------------------------------------------------------------------------
// Disconnection.

/// `disconnect` flushes the QP's posted receives with `WrFlushError` and kills it; the
/// peer learns of it (`is_dead`) and its receives are flushed too; a second
/// `disconnect` changes nothing.
pub fn disconnect_flushes_receives(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let ma = reg(&pa, 64, Access::LOCAL_WRITE)?;
    let mb = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    post_recv(&p.a.qp, 1, &[sge(&ma, 0, 64)])?;
    post_recv(&p.a.qp, 2, &[sge(&ma, 0, 64)])?;
    post_recv(&p.b.qp, 3, &[sge(&mb, 0, 64)])?;
    p.a.qp.disconnect();
    ensure!(
        p.a.qp.is_dead(),
        "is_dead() is false right after disconnect()"
    );
    expect(
        f,
        &p.a.recv_cq,
        &[flushed(1, &p.a.qp), flushed(2, &p.a.qp)],
        "the disconnecting side's receives",
    )?;
    becomes_dead(f, &p.b.qp, "the peer")?;
    expect(
        f,
        &p.b.recv_cq,
        &[flushed(3, &p.b.qp)],
        "the peer's receives",
    )?;
    unusable(f, &p.a, &ma, "the disconnecting side")?;
    unusable(f, &p.b, &mb, "the peer")?;
    p.a.qp.disconnect();
    quiet(f, &p.a.recv_cq, "after a second disconnect")?;
    quiet(f, &p.a.send_cq, "after a second disconnect")
}

/// Dropping a QP disconnects it: the peer becomes dead and its receives are flushed.
pub fn dropped_qp_disconnects_the_peer(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let mb = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let Pair { a, b, _listener } = connect(f, &pa, &pb)?;
    post_recv(&b.qp, 3, &[sge(&mb, 0, 64)])?;
    drop(a);
    becomes_dead(f, &b.qp, "the peer of a dropped QP")?;
    expect(f, &b.recv_cq, &[flushed(3, &b.qp)], "the peer's receives")?;
    unusable(f, &b, &mb, "the peer")
}
