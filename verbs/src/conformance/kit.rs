//! Set-up and checking helpers shared by the property modules: regions, work requests,
//! connected QP pairs, expected completions.

pub(super) use std::os::fd::RawFd;

pub(super) use std::sync::Arc;
pub(super) use std::thread;
pub(super) use std::time::{Duration, Instant};

pub(super) use crate::{
    Access, CompletionQueue, DmaBuffer, Listener, MemoryRegion, ProtectionDomain, QpCaps, QpInit,
    QueuePair, RecvWr, SendOp, SendWr, Sge, SharedReceiveQueue, SrqCaps, VerbsError, WcOpcode,
    WcStatus, WorkCompletion,
};

pub(super) use super::{Fabric, Outcome};

// ---------------------------------------------------------------------------------
// Set-up helpers.

pub(super) fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
    }
}

pub(super) fn pd(f: &Fabric) -> Result<Arc<dyn ProtectionDomain>, String> {
    f.device.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))
}

pub(super) fn cq(f: &Fabric) -> Result<Arc<dyn CompletionQueue>, String> {
    f.device
        .create_cq(64)
        .map_err(|e| format!("create_cq: {e}"))
}

pub(super) fn reg(
    pd: &Arc<dyn ProtectionDomain>,
    len: usize,
    access: Access,
) -> Result<Arc<dyn MemoryRegion>, String> {
    let buf = DmaBuffer::new(len).ok_or_else(|| format!("allocating {len} bytes"))?;
    pd.register(Arc::new(buf), access)
        .map_err(|e| format!("register({len} bytes, {access:?}): {e}"))
}

pub(super) fn sge(mr: &Arc<dyn MemoryRegion>, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

pub(super) fn bytes(mr: &Arc<dyn MemoryRegion>, off: usize, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0; len];
    ensure!(
        mr.buffer().read_at(off, &mut v),
        "reading {len} bytes at {off}"
    );
    Ok(v)
}

pub(super) fn fill(mr: &Arc<dyn MemoryRegion>, off: usize, data: &[u8]) -> Outcome {
    ensure!(
        mr.buffer().write_at(off, data),
        "writing {} bytes at {off}",
        data.len()
    );
    Ok(())
}

pub(super) fn send(wr_id: u64, sgl: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: sgl,
        signaled: true,
    }
}

pub(super) fn post_send(qp: &Arc<dyn QueuePair>, wrs: &[SendWr<'_>]) -> Outcome {
    qp.post_send(wrs).map_err(|e| format!("post_send: {e}"))
}

pub(super) fn post_recv(qp: &Arc<dyn QueuePair>, wr_id: u64, sgl: &[Sge]) -> Outcome {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: sgl,
    }])
    .map_err(|e| format!("post_recv: {e}"))
}

/// One side of a connection; each queue has its own CQ.
pub(super) struct End {
    pub(super) send_cq: Arc<dyn CompletionQueue>,
    pub(super) recv_cq: Arc<dyn CompletionQueue>,
    pub(super) qp: Arc<dyn QueuePair>,
}

/// A connected pair: `a` connected (the host's side), `b` accepted (the target's).
/// Protection domains and regions are made before the pair, so the QPs are dropped
/// before the memory their work requests name.
pub(super) struct Pair {
    pub(super) a: End,
    pub(super) b: End,
    pub(super) _listener: Arc<dyn Listener>,
}

pub(super) fn qp_init(
    pd: &Arc<dyn ProtectionDomain>,
    send_cq: &Arc<dyn CompletionQueue>,
    recv_cq: &Arc<dyn CompletionQueue>,
) -> QpInit {
    QpInit {
        pd: Arc::clone(pd),
        send_cq: Arc::clone(send_cq),
        recv_cq: Arc::clone(recv_cq),
        caps: caps(),
        srq: None,
    }
}

/// The passive side of a connection attempt, run on its own thread.
type Acceptor = Box<dyn FnOnce(Box<dyn crate::ConnectRequest>) -> Outcome + Send>;

/// How a connection attempt went, on both sides.
pub(super) struct Attempt {
    /// The active side's `connect`.
    pub(super) connected: Result<(Arc<dyn QueuePair>, Vec<u8>), VerbsError>,
    /// The passive side's acceptor (or the failure to listen or to get the request).
    pub(super) accepted: Outcome,
    /// Kept until the caller is done with the connection.
    pub(super) listener: Arc<dyn Listener>,
    pub(super) addr: String,
}

/// Listens on a fresh address, lets `acceptor` answer the first request on another
/// thread, and connects with `private_data`.
pub(super) fn attempt(
    f: &Fabric,
    init: QpInit,
    private_data: &[u8],
    acceptor: Acceptor,
) -> Attempt {
    let addr = f.addr();
    let listener = match f.device.listen(&addr) {
        Ok(l) => l,
        Err(e) => {
            return Attempt {
                connected: Err(e.clone()),
                accepted: Err(format!("listen({addr}): {e}")),
                listener: Arc::new(NoListener),
                addr,
            }
        }
    };
    let l2 = Arc::clone(&listener);
    let timeout = f.timeout;
    let server = thread::spawn(move || match l2.next_request(timeout) {
        Some(req) => acceptor(req),
        None => Err(format!("no connection request within {timeout:?}")),
    });
    let connected = f
        .device
        .connect(&addr, init, private_data, &mut |_| Ok(()), f.timeout);
    let accepted = server
        .join()
        .unwrap_or_else(|_| Err("the accepting thread panicked".to_string()));
    Attempt {
        connected,
        accepted,
        listener,
        addr,
    }
}

/// Stands in for a listener that could not be created.
pub(super) struct NoListener;

impl Listener for NoListener {
    fn next_request(&self, _timeout: Duration) -> Option<Box<dyn crate::ConnectRequest>> {
        None
    }

    fn local_addr(&self) -> String {
        String::new()
    }
}

/// Connects a pair whose memory lives in `pa` (active side) and `pb` (passive side).
pub(super) fn connect(
    f: &Fabric,
    pa: &Arc<dyn ProtectionDomain>,
    pb: &Arc<dyn ProtectionDomain>,
) -> Result<Pair, String> {
    connect_into(f, pa, pb, cq(f)?, None)
}

/// [`connect`] whose passive QP completes its receives on `b_recv` and, with `srq`,
/// takes them from that shared receive queue (of `pb`).
pub(super) fn connect_into(
    f: &Fabric,
    pa: &Arc<dyn ProtectionDomain>,
    pb: &Arc<dyn ProtectionDomain>,
    b_recv: Arc<dyn CompletionQueue>,
    srq: Option<Arc<dyn SharedReceiveQueue>>,
) -> Result<Pair, String> {
    let (a_send, a_recv, b_send) = (cq(f)?, cq(f)?, cq(f)?);
    let mut b_init = qp_init(pb, &b_send, &b_recv);
    b_init.srq = srq;
    let slot = Arc::new(parking_lot::Mutex::new(None));
    let slot2 = Arc::clone(&slot);
    let Attempt {
        connected,
        accepted,
        listener,
        addr,
    } = attempt(
        f,
        qp_init(pa, &a_send, &a_recv),
        b"",
        Box::new(move |req| {
            let qp = req
                .accept(b_init, b"", b"", &mut |_| Ok(()))
                .map_err(|e| format!("accept: {e}"))?;
            *slot2.lock() = Some(qp);
            Ok(())
        }),
    );
    accepted?;
    let (a_qp, _) = connected.map_err(|e| format!("connect({addr}): {e}"))?;
    let b_qp = slot
        .lock()
        .take()
        .ok_or("accept succeeded but left no QP")?;
    Ok(Pair {
        a: End {
            send_cq: a_send,
            recv_cq: a_recv,
            qp: a_qp,
        },
        b: End {
            send_cq: b_send,
            recv_cq: b_recv,
            qp: b_qp,
        },
        _listener: listener,
    })
}

// ---------------------------------------------------------------------------------
// Completion helpers.

/// What a completion must look like. `None` fields are not checked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Want {
    pub(super) wr_id: u64,
    pub(super) status: WcStatus,
    pub(super) opcode: Option<WcOpcode>,
    pub(super) byte_len: Option<u32>,
    /// `Some(None)`: must report no invalidation.
    pub(super) invalidated: Option<Option<u32>>,
    pub(super) qp_num: u32,
}

pub(super) fn ok_recv(wr_id: u64, byte_len: u32, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(WcOpcode::Recv),
        byte_len: Some(byte_len),
        invalidated: Some(None),
        qp_num: qp.qp_num(),
    }
}

pub(super) fn ok_send(wr_id: u64, opcode: WcOpcode, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(opcode),
        byte_len: None,
        invalidated: None,
        qp_num: qp.qp_num(),
    }
}

pub(super) fn failed(wr_id: u64, status: WcStatus, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status,
        opcode: None,
        byte_len: None,
        invalidated: None,
        qp_num: qp.qp_num(),
    }
}

pub(super) fn flushed(wr_id: u64, qp: &Arc<dyn QueuePair>) -> Want {
    failed(wr_id, WcStatus::WrFlushError, qp)
}

pub(super) fn matches(got: &WorkCompletion, want: &Want) -> bool {
    got.wr_id == want.wr_id
        && got.status == want.status
        && got.qp_num == want.qp_num
        && want.opcode.is_none_or(|o| got.opcode == o)
        && want.byte_len.is_none_or(|l| got.byte_len == l)
        && want.invalidated.is_none_or(|i| got.invalidated_rkey == i)
}

/// Polls `cq` until `n` completions arrived or the timeout passed.
pub(super) fn poll_n(f: &Fabric, cq: &Arc<dyn CompletionQueue>, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + f.timeout;
    let mut got = Vec::new();
    let mut out = [WorkCompletion::EMPTY; 16];
    loop {
        let k = cq.poll(&mut out[..(n.saturating_sub(got.len())).clamp(1, 16)]);
        got.extend_from_slice(&out[..k]);
        if got.len() >= n || Instant::now() >= deadline {
            return got;
        }
        if k == 0 {
            thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Checks that nothing arrives on `cq` within the grace period.
pub(super) fn quiet(f: &Fabric, cq: &Arc<dyn CompletionQueue>, what: &str) -> Outcome {
    thread::sleep(f.grace);
    let mut out = [WorkCompletion::EMPTY; 16];
    let k = cq.poll(&mut out);
    ensure!(k == 0, "{what}: unexpected completion(s) {:?}", &out[..k]);
    Ok(())
}

/// Waits for exactly the completions `want`, in order, on `cq`; nothing more may follow.
pub(super) fn expect(
    f: &Fabric,
    cq: &Arc<dyn CompletionQueue>,
    want: &[Want],
    what: &str,
) -> Outcome {
    let got = poll_n(f, cq, want.len());
    ensure!(
        got.len() == want.len(),
        "{what}: expected {} completion(s) {want:?}, got {} within {:?}: {got:?}",
        want.len(),
        got.len(),
        f.timeout
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        ensure!(
            matches(g, w),
            "{what}: completion {i}: expected {w:?}, got {g:?}"
        );
    }
    quiet(f, cq, what)
}

/// Waits until `qp` reports itself dead.
pub(super) fn becomes_dead(f: &Fabric, qp: &Arc<dyn QueuePair>, what: &str) -> Outcome {
    let deadline = Instant::now() + f.timeout;
    while !qp.is_dead() {
        ensure!(
            Instant::now() < deadline,
            "{what}: is_dead() still false after {:?}",
            f.timeout
        );
        thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Checks that `end`'s QP is in error: dead, and new work does not execute (posting
/// fails with `QpError`, or the work request is flushed). `mr` is a local-write
/// region of the QP's PD.
pub(super) fn unusable(f: &Fabric, end: &End, mr: &Arc<dyn MemoryRegion>, what: &str) -> Outcome {
    becomes_dead(f, &end.qp, what)?;
    let sgl = [sge(mr, 0, 8)];
    match end.qp.post_recv(&[RecvWr {
        wr_id: 0xdead_0001,
        sg_list: &sgl,
    }]) {
        Err(VerbsError::QpError) => quiet(f, &end.recv_cq, what)?,
        Ok(()) => expect(
            f,
            &end.recv_cq,
            &[flushed(0xdead_0001, &end.qp)],
            &format!("{what}: a receive posted in error"),
        )?,
        Err(e) => return Err(format!("{what}: post_recv in error: {e}")),
    }
    match end.qp.post_send(&[send(0xdead_0002, &sgl)]) {
        Err(VerbsError::QpError) => quiet(f, &end.send_cq, what),
        Ok(()) => expect(
            f,
            &end.send_cq,
            &[flushed(0xdead_0002, &end.qp)],
            &format!("{what}: a SEND posted in error"),
        ),
        Err(e) => Err(format!("{what}: post_send in error: {e}")),
    }
}

/// A SEND round trip from `a` to `b` works.
pub(super) fn works(
    f: &Fabric,
    p: &Pair,
    src: &Arc<dyn MemoryRegion>,
    dst: &Arc<dyn MemoryRegion>,
) -> Outcome {
    fill(src, 0, b"still alive")?;
    post_recv(&p.b.qp, 900, &[sge(dst, 0, 64)])?;
    post_send(&p.a.qp, &[send(901, &[sge(src, 0, 11)])])?;
    expect(f, &p.b.recv_cq, &[ok_recv(900, 11, &p.b.qp)], "receive")?;
    expect(
        f,
        &p.a.send_cq,
        &[ok_send(901, WcOpcode::Send, &p.a.qp)],
        "send",
    )?;
    ensure!(bytes(dst, 0, 11)? == b"still alive", "SEND payload differs");
    Ok(())
}

/// Whether `fd` becomes readable within `wait`.
pub(super) fn readable(fd: RawFd, wait: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd that outlives the call.
    unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
}

/// Private data as received: what was sent, then only zeros (rdma_cm pads it).
pub(super) fn carries(got: &[u8], sent: &[u8]) -> bool {
    got.len() >= sent.len()
        && got.get(..sent.len()) == Some(sent)
        && got.iter().skip(sent.len()).all(|&b| b == 0)
}
