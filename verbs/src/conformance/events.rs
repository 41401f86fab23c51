//! Send with invalidate and completion-queue events.

use super::kit::*;

// ---------------------------------------------------------------------------------
// SEND with invalidate.

/// A SEND with invalidate is delivered like a SEND, its receive completion names the
/// invalidated rkey, and the rkey no longer works (`RemoteAccessError`), while the
/// region stays usable locally.
pub fn send_with_invalidate_revokes_the_rkey(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let host_data = reg(&pa, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let host_rsp = reg(&pa, 64, Access::LOCAL_WRITE)?;
    let tgt = reg(&pb, 4096, Access::empty())?;
    let p = connect(f, &pa, &pb)?;
    fill(&tgt, 0, &[7; 512])?;
    post_recv(&p.a.qp, 1, &[sge(&host_rsp, 0, 64)])?;
    post_recv(&p.a.qp, 2, &[sge(&host_rsp, 0, 64)])?;
    let data = [sge(&tgt, 0, 512)];
    let write = SendWr {
        wr_id: 10,
        op: SendOp::RdmaWrite {
            remote_addr: host_data.addr(),
            rkey: host_data.rkey(),
        },
        sg_list: &data,
        signaled: false,
    };
    let inval = SendWr {
        wr_id: 11,
        op: SendOp::SendWithInvalidate {
            rkey: host_data.rkey(),
        },
        sg_list: &[sge(&tgt, 0, 16)],
        signaled: true,
    };
    post_send(&p.b.qp, &[write, inval])?;
    let mut want = ok_recv(1, 16, &p.a.qp);
    want.invalidated = Some(Some(host_data.rkey()));
    expect(f, &p.a.recv_cq, &[want], "the host's receive")?;
    expect(
        f,
        &p.b.send_cq,
        &[ok_send(11, WcOpcode::Send, &p.b.qp)],
        "the target's send",
    )?;
    ensure!(
        bytes(&host_data, 0, 512)? == [7; 512],
        "the WRITE before it"
    );
    ensure!(
        host_data.buffer().write_at(0, b"local"),
        "the region is no longer usable locally"
    );
    let mut again = write;
    again.wr_id = 12;
    post_send(&p.b.qp, &[again])?;
    expect(
        f,
        &p.b.send_cq,
        &[failed(12, WcStatus::RemoteAccessError, &p.b.qp)],
        "a WRITE under the invalidated rkey",
    )?;
    expect(
        f,
        &p.a.recv_cq,
        &[flushed(2, &p.a.qp)],
        "the host's receives",
    )?;
    becomes_dead(f, &p.a.qp, "the host")?;
    becomes_dead(f, &p.b.qp, "the target")
}

// ---------------------------------------------------------------------------------
// Completion notification.

/// The event fd becomes readable on a completion only after `req_notify`, once per
/// arming; `ack_events` clears it.
pub fn cq_event_fd_is_armed_one_shot(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 64, Access::empty())?;
    let dst = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    let (a, b) = (&p.a.qp, &p.b.qp);
    let fd = p.b.recv_cq.event_fd();
    let d = [sge(&dst, 0, 64)];
    let s = [sge(&src, 0, 5)];
    post_recv(b, 1, &d)?;
    post_send(a, &[send(2, &s)])?;
    expect(f, &p.b.recv_cq, &[ok_recv(1, 5, b)], "unarmed receive")?;
    ensure!(
        !readable(fd, f.grace),
        "the event fd is readable although the CQ was never armed"
    );
    p.b.recv_cq.req_notify();
    post_recv(b, 3, &d)?;
    post_recv(b, 4, &d)?;
    post_send(a, &[send(5, &s)])?;
    ensure!(
        readable(fd, f.timeout),
        "armed: a completion did not make the event fd readable within {:?}",
        f.timeout
    );
    p.b.recv_cq.ack_events();
    ensure!(
        !readable(fd, Duration::ZERO),
        "the event fd is still readable after ack_events"
    );
    post_send(a, &[send(6, &s)])?;
    expect(
        f,
        &p.b.recv_cq,
        &[ok_recv(3, 5, b), ok_recv(4, 5, b)],
        "armed receives",
    )?;
    ensure!(
        !readable(fd, f.grace),
        "the arming fired twice: the event fd is readable again without req_notify"
    );
    expect(
        f,
        &p.a.send_cq,
        &[
            ok_send(2, WcOpcode::Send, a),
            ok_send(5, WcOpcode::Send, a),
            ok_send(6, WcOpcode::Send, a),
        ],
        "sends",
    )
}

/// A thread blocked in `wait` wakes up when a completion arrives.
pub fn cq_wait_wakes_on_completion(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let src = reg(&pa, 64, Access::empty())?;
    let dst = reg(&pb, 64, Access::LOCAL_WRITE)?;
    let p = connect(f, &pa, &pb)?;
    post_recv(&p.b.qp, 1, &[sge(&dst, 0, 64)])?;
    let cq = Arc::clone(&p.b.recv_cq);
    let timeout = f.timeout;
    let waiter = thread::spawn(move || {
        let start = Instant::now();
        let mut out = [WorkCompletion::EMPTY; 4];
        let mut n = 0;
        while n == 0 && start.elapsed() < timeout {
            cq.wait(timeout);
            n = cq.poll(&mut out);
        }
        (n, out[0], start.elapsed())
    });
    thread::sleep(Duration::from_millis(50));
    post_send(&p.a.qp, &[send(2, &[sge(&src, 0, 5)])])?;
    let (n, got, elapsed) = waiter
        .join()
        .map_err(|_| "the waiting thread panicked".to_string())?;
    ensure!(n == 1, "the waiter got {n} completions after {elapsed:?}");
    ensure!(
        matches(&got, &ok_recv(1, 5, &p.b.qp)),
        "the waiter got {got:?}"
    );
    ensure!(
        elapsed < timeout,
        "the waiter was not woken by the completion ({elapsed:?})"
    );
    expect(
        f,
        &p.a.send_cq,
        &[ok_send(2, WcOpcode::Send, &p.a.qp)],
        "send",
    )
}
