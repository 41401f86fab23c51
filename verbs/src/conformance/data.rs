//! Moving data: SEND/RECV, RDMA WRITE and READ, RC ordering, RNR retry.

use super::kit::*;

// ---------------------------------------------------------------------------------
// Data transfer.

/// SENDs are gathered from several SGEs, scattered into the next posted receive in
/// order, and the receive completion reports the byte count (zero for an empty SEND).
pub fn send_recv_delivers_bytes_and_byte_len(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 8192, Access::empty())?;
    let dst = reg(&pb, 8192, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    fill(&src, 0, b"0123456789")?;
    fill(&src, 4096, b"abcdef")?;
    // Gather two SGEs; scatter into two, the first one short.
    post_recv(&p.b.qp, 7, &[sge(&dst, 100, 4), sge(&dst, 300, 100)])?;
    post_recv(&p.b.qp, 8, &[sge(&dst, 1000, 64)])?;
    post_recv(&p.b.qp, 9, &[sge(&dst, 2000, 64)])?;
    post_send(
        &p.a.qp,
        &[
            send(17, &[sge(&src, 0, 10), sge(&src, 4096, 6)]),
            send(18, &[sge(&src, 4096, 3)]),
            send(19, &[]),
        ],
    )?;
    let (a, b) = (&p.a.qp, &p.b.qp);
    expect(
        f,
        &p.b.recv_cq,
        &[ok_recv(7, 16, b), ok_recv(8, 3, b), ok_recv(9, 0, b)],
        "receives",
    )?;
    expect(
        f,
        &p.a.send_cq,
        &[
            ok_send(17, WcOpcode::Send, a),
            ok_send(18, WcOpcode::Send, a),
            ok_send(19, WcOpcode::Send, a),
        ],
        "sends",
    )?;
    ensure!(
        bytes(&dst, 100, 4)? == b"0123",
        "first SGE holds {:?}",
        bytes(&dst, 100, 4)?
    );
    ensure!(
        bytes(&dst, 300, 13)? == b"456789abcdef\0",
        "second SGE holds {:?}",
        bytes(&dst, 300, 13)?
    );
    ensure!(bytes(&dst, 1000, 4)? == b"abc\0", "second message");
    ensure!(bytes(&dst, 2000, 1)? == [0], "the empty SEND wrote");
    quiet(f, &p.a.recv_cq, "the sender's receive CQ")?;
    quiet(f, &p.b.send_cq, "the receiver's send CQ")
}

/// An RDMA WRITE with the right rkey lands the gathered bytes at the remote address,
/// touches nothing else, and completes only at the writer.
pub fn rdma_write_lands_bytes(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 8192, Access::empty())?;
    let target = reg(&pb, 8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    fill(&src, 0, b"RDMA ")?;
    fill(&src, 5000, b"WRITE")?;
    post_send(
        &p.a.qp,
        &[SendWr {
            wr_id: 3,
            op: SendOp::RdmaWrite {
                remote_addr: target.addr() + 4090,
                rkey: target.rkey(),
            },
            sg_list: &[sge(&src, 0, 5), sge(&src, 5000, 5)],
            signaled: true,
        }],
    )?;
    expect(
        f,
        &p.a.send_cq,
        &[ok_send(3, WcOpcode::RdmaWrite, &p.a.qp)],
        "write",
    )?;
    ensure!(
        bytes(&target, 4089, 12)? == b"\0RDMA WRITE\0",
        "the target holds {:?}",
        bytes(&target, 4089, 12)?
    );
    quiet(f, &p.b.recv_cq, "the target's receive CQ")?;
    quiet(f, &p.b.send_cq, "the target's send CQ")
}

/// An RDMA READ with the right rkey scatters the remote bytes into the local SGEs and
/// completes only at the reader, with the byte count.
pub fn rdma_read_lands_bytes(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let host_data = reg(&pa, 4096, Access::REMOTE_READ)?;
    let sink = reg(&pb, 4096, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    fill(&host_data, 1000, b"payload!")?;
    post_send(
        &p.b.qp,
        &[SendWr {
            wr_id: 5,
            op: SendOp::RdmaRead {
                remote_addr: host_data.addr() + 1000,
                rkey: host_data.rkey(),
            },
            sg_list: &[sge(&sink, 10, 3), sge(&sink, 20, 5)],
            signaled: true,
        }],
    )?;
    let mut want = ok_send(5, WcOpcode::RdmaRead, &p.b.qp);
    want.byte_len = Some(8);
    expect(f, &p.b.send_cq, &[want], "read")?;
    ensure!(bytes(&sink, 10, 3)? == b"pay", "first SGE");
    ensure!(bytes(&sink, 20, 5)? == b"load!", "second SGE");
    ensure!(
        bytes(&sink, 9, 1)? == [0] && bytes(&sink, 13, 1)? == [0],
        "bytes around"
    );
    quiet(f, &p.a.recv_cq, "the host's receive CQ")?;
    quiet(f, &p.a.send_cq, "the host's send CQ")
}

/// RC ordering, as NVMe/RDMA reads use it: an unsignaled RDMA WRITE chained before a
/// SEND has landed when the SEND's receive completes, and only the SEND completes.
pub fn rc_orders_unsignaled_write_before_send(f: &Fabric) -> Outcome {
    const LEN: usize = 64 * 1024;
    let (pa, pb) = (pd(f)?, pd(f)?);
    let host_data = reg(&pa, LEN, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let host_rsp = reg(&pa, 64, Access::LOCAL_WRITE)?;
    let tgt_data = reg(&pb, LEN, Access::empty())?;
    let tgt_rsp = reg(&pb, 64, Access::empty())?;
    let p = connect(f, &pa, &pb)?;
    let pattern: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    fill(&tgt_data, 0, &pattern)?;
    fill(&tgt_rsp, 0, &[1; 16])?;
    post_recv(&p.a.qp, 1, &[sge(&host_rsp, 0, 64)])?;
    post_send(
        &p.b.qp,
        &[
            SendWr {
                wr_id: 2,
                op: SendOp::RdmaWrite {
                    remote_addr: host_data.addr(),
                    rkey: host_data.rkey(),
                },
                sg_list: &[sge(&tgt_data, 0, LEN as u32)],
                signaled: false,
            },
            send(3, &[sge(&tgt_rsp, 0, 16)]),
        ],
    )?;
    expect(f, &p.a.recv_cq, &[ok_recv(1, 16, &p.a.qp)], "response")?;
    // Read right after the receive completion: RC ordering says the data is there.
    ensure!(
        bytes(&host_data, 0, LEN)? == pattern,
        "the written data was not all there when the response arrived"
    );
    ensure!(bytes(&host_rsp, 0, 16)? == [1; 16], "response payload");
    expect(
        f,
        &p.b.send_cq,
        &[ok_send(3, WcOpcode::Send, &p.b.qp)],
        "only the signaled SEND completes",
    )
}

/// A SEND posted before the peer's receive is delivered once the receive is posted
/// (the receiver-not-ready retry covers the window after accept).
pub fn rnr_retry_delivers_to_a_late_receive(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 64, Access::empty())?;
    let dst = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    fill(&src, 0, b"late")?;
    let b_qp = Arc::clone(&p.b.qp);
    let sgl = [sge(&dst, 0, 64)];
    let poster = thread::spawn(move || {
        thread::sleep(Duration::from_millis(30));
        post_recv(&b_qp, 3, &sgl)
    });
    let sent = post_send(&p.a.qp, &[send(4, &[sge(&src, 0, 4)])]);
    poster
        .join()
        .unwrap_or_else(|_| Err("poster panicked".into()))?;
    sent?;
    expect(f, &p.b.recv_cq, &[ok_recv(3, 4, &p.b.qp)], "late receive")?;
    expect(
        f,
        &p.a.send_cq,
        &[ok_send(4, WcOpcode::Send, &p.a.qp)],
        "send",
    )?;
    ensure!(bytes(&dst, 0, 4)? == b"late", "payload");
    Ok(())
}
