//! A conformance suite for the verbs interface, written once against the traits and run
//! on every provider: the software provider in `cargo test` (`soft/tests.rs`), and the
//! rdma-sys provider over soft-RoCE in the interop lab (`examples/verbs-conformance.rs`,
//! case `rdma-verbs-conformance`).
//!
//! Each property is one function taking a [`Fabric`] (a device and a source of fresh
//! listen addresses) and returning `Err(reason)` when the provider breaks it; none
//! panics on a provider's misbehaviour. [`PROPERTIES`] lists them all; [`run`] runs one.
//!
//! Only what verbs guarantee on every RC implementation is checked, so both providers
//! must pass the same code:
//! - completions are awaited with a deadline (hardware completes asynchronously) and
//!   "nothing more arrived" is checked after [`Fabric::grace`];
//! - send and receive completions go to separate CQs, because the order between the two
//!   queues' completions on one CQ is not defined;
//! - error completions are matched by `wr_id`, status and QP only (verbs define opcode
//!   and byte count for successful completions), and send completions' byte counts
//!   are checked only for RDMA READ;
//! - private data is compared as a prefix followed by zeros (rdma_cm pads it to the
//!   size of the CM message);
//! - a QP "in error" is one that [`QueuePair::is_dead`] reports and on which new work
//!   requests do not execute: posting fails with [`VerbsError::QpError`] or the work
//!   request completes with [`WcStatus::WrFlushError`].
//!
//! Provider-specific behaviour (the soft provider's RNR timeout, queue-depth accounting,
//! key layout, counters; errors that on hardware stay local to one QP) is tested by the
//! provider's own tests.
//!
//! Compiled for tests and with the `conformance` feature (on by default for this crate,
//! off for the target and host binaries, which depend on `nvmf-common` without default
//! features): it is test scaffolding, but public so the rdma runner, an example, can use it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{
    Access, CompletionQueue, Device, DmaBuffer, Listener, MemoryRegion, ProtectionDomain, QpCaps,
    QpInit, QueuePair, RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

/// What a property returns: `Err` says what the provider got wrong.
pub type Outcome = Result<(), String>;

/// Something a property needs that not every provider can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Regions registered through [`ProtectionDomain::register`] can be invalidated by a
    /// peer's SEND with invalidate. ibverbs allows remote invalidation only of
    /// fast-registration MRs and type-2 memory windows, never of `ibv_reg_mr` regions,
    /// so the rdma-sys provider lacks it (the NVMe target still sends with invalidate:
    /// the Linux host's keys are fast-registration MRs).
    RemoteInvalidate,
}

/// The provider under test: a device, listen addresses, and timing.
pub struct Fabric {
    device: Arc<dyn Device>,
    next_addr: Box<dyn Fn() -> String + Send + Sync>,
    timeout: Duration,
    grace: Duration,
    lacks: Vec<(Need, &'static str)>,
}

impl Fabric {
    /// `next_addr` returns a listen address no earlier call returned (every connection
    /// a property makes listens on a fresh one). Defaults: 10 s timeout, 100 ms grace.
    pub fn new(
        device: Arc<dyn Device>,
        next_addr: impl Fn() -> String + Send + Sync + 'static,
    ) -> Fabric {
        Fabric {
            device,
            next_addr: Box::new(next_addr),
            timeout: Duration::from_secs(10),
            grace: Duration::from_millis(100),
            lacks: Vec::new(),
        }
    }

    /// `IP:PORT` addresses on `ip` from port `first_port` upwards.
    pub fn ip_ports(ip: &str, first_port: u16) -> impl Fn() -> String + Send + Sync + 'static {
        let ip = ip.to_string();
        let next = AtomicU32::new(u32::from(first_port));
        move || format!("{ip}:{}", next.fetch_add(1, Ordering::Relaxed))
    }

    /// How long anything that must happen may take (connections, completions).
    pub fn with_timeout(mut self, timeout: Duration) -> Fabric {
        self.timeout = timeout;
        self
    }

    /// How long to wait before concluding that something did not happen (no further
    /// completion, no event). Zero for a provider that completes synchronously.
    pub fn with_grace(mut self, grace: Duration) -> Fabric {
        self.grace = grace;
        self
    }

    /// Declares that the provider cannot offer `need`, and why.
    pub fn lacking(mut self, need: Need, why: &'static str) -> Fabric {
        self.lacks.push((need, why));
        self
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn addr(&self) -> String {
        (self.next_addr)()
    }

    /// Why the provider cannot offer `need`, if it cannot.
    pub fn lacks(&self, need: Need) -> Option<&'static str> {
        self.lacks
            .iter()
            .find(|(n, _)| *n == need)
            .map(|(_, why)| *why)
    }
}

/// One property of the interface.
pub struct Property {
    pub name: &'static str,
    pub needs: Option<Need>,
    pub check: fn(&Fabric) -> Outcome,
}

/// The result of running a property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    /// The provider declared that it lacks what the property needs (see [`Need`]).
    NotApplicable(&'static str),
}

/// Runs `p` on `f`.
pub fn run(f: &Fabric, p: &Property) -> Verdict {
    if let Some(why) = p.needs.and_then(|n| f.lacks(n)) {
        return Verdict::NotApplicable(why);
    }
    match (p.check)(f) {
        Ok(()) => Verdict::Pass,
        Err(e) => Verdict::Fail(e),
    }
}

/// The property called `name`.
pub fn property(name: &str) -> Option<&'static Property> {
    PROPERTIES.iter().find(|p| p.name == name)
}

macro_rules! properties {
    ($($name:ident $(needs $need:ident)?),* $(,)?) => {
        /// Every property, in the order the runner reports them.
        pub const PROPERTIES: &[Property] = &[
            $(Property {
                name: stringify!($name),
                needs: properties!(@need $($need)?),
                check: $name,
            }),*
        ];
    };
    (@need) => { None };
    (@need $need:ident) => { Some(Need::$need) };
}

properties![
    cm_accept_exchanges_private_data,
    cm_reject_returns_private_data,
    cm_failed_accept_rejects_with_reject_data,
    cm_dropped_request_is_refused,
    cm_connect_without_listener_fails,
    registration_keys_and_rights,
    send_recv_delivers_bytes_and_byte_len,
    rdma_write_lands_bytes,
    rdma_read_lands_bytes,
    rc_orders_unsignaled_write_before_send,
    rnr_retry_delivers_to_a_late_receive,
    wrong_rkey_is_remote_access_error,
    out_of_bounds_write_is_remote_access_error,
    read_below_region_is_remote_access_error,
    missing_remote_write_is_remote_access_error,
    missing_remote_read_is_remote_access_error,
    deregistered_rkey_is_remote_access_error,
    disconnect_flushes_receives,
    dropped_qp_disconnects_the_peer,
    send_with_invalidate_revokes_the_rkey needs RemoteInvalidate,
    cq_event_fd_is_armed_one_shot,
    cq_wait_wakes_on_completion,
];

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

// ---------------------------------------------------------------------------------
// Set-up helpers.

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
    }
}

fn pd(f: &Fabric) -> Result<Arc<dyn ProtectionDomain>, String> {
    f.device.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))
}

fn cq(f: &Fabric) -> Result<Arc<dyn CompletionQueue>, String> {
    f.device
        .create_cq(64)
        .map_err(|e| format!("create_cq: {e}"))
}

fn reg(
    pd: &Arc<dyn ProtectionDomain>,
    len: usize,
    access: Access,
) -> Result<Arc<dyn MemoryRegion>, String> {
    let buf = DmaBuffer::new(len).ok_or_else(|| format!("allocating {len} bytes"))?;
    pd.register(Arc::new(buf), access)
        .map_err(|e| format!("register({len} bytes, {access:?}): {e}"))
}

fn sge(mr: &Arc<dyn MemoryRegion>, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

fn bytes(mr: &Arc<dyn MemoryRegion>, off: usize, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0; len];
    ensure!(
        mr.buffer().read_at(off, &mut v),
        "reading {len} bytes at {off}"
    );
    Ok(v)
}

fn fill(mr: &Arc<dyn MemoryRegion>, off: usize, data: &[u8]) -> Outcome {
    ensure!(
        mr.buffer().write_at(off, data),
        "writing {} bytes at {off}",
        data.len()
    );
    Ok(())
}

fn send(wr_id: u64, sgl: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: sgl,
        signaled: true,
    }
}

fn post_send(qp: &Arc<dyn QueuePair>, wrs: &[SendWr<'_>]) -> Outcome {
    qp.post_send(wrs).map_err(|e| format!("post_send: {e}"))
}

fn post_recv(qp: &Arc<dyn QueuePair>, wr_id: u64, sgl: &[Sge]) -> Outcome {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: sgl,
    }])
    .map_err(|e| format!("post_recv: {e}"))
}

/// One side of a connection; each queue has its own CQ.
struct End {
    send_cq: Arc<dyn CompletionQueue>,
    recv_cq: Arc<dyn CompletionQueue>,
    qp: Arc<dyn QueuePair>,
}

/// A connected pair: `a` connected (the host's side), `b` accepted (the target's).
/// Protection domains and regions are made before the pair, so the QPs are dropped
/// before the memory their work requests name.
struct Pair {
    a: End,
    b: End,
    _listener: Arc<dyn Listener>,
}

fn qp_init(
    pd: &Arc<dyn ProtectionDomain>,
    send_cq: &Arc<dyn CompletionQueue>,
    recv_cq: &Arc<dyn CompletionQueue>,
) -> QpInit {
    QpInit {
        pd: Arc::clone(pd),
        send_cq: Arc::clone(send_cq),
        recv_cq: Arc::clone(recv_cq),
        caps: caps(),
    }
}

/// The passive side of a connection attempt, run on its own thread.
type Acceptor = Box<dyn FnOnce(Box<dyn super::ConnectRequest>) -> Outcome + Send>;

/// How a connection attempt went, on both sides.
struct Attempt {
    /// The active side's `connect`.
    connected: Result<(Arc<dyn QueuePair>, Vec<u8>), VerbsError>,
    /// The passive side's acceptor (or the failure to listen or to get the request).
    accepted: Outcome,
    /// Kept until the caller is done with the connection.
    listener: Arc<dyn Listener>,
    addr: String,
}

/// Listens on a fresh address, lets `acceptor` answer the first request on another
/// thread, and connects with `private_data`.
fn attempt(f: &Fabric, init: QpInit, private_data: &[u8], acceptor: Acceptor) -> Attempt {
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
struct NoListener;

impl Listener for NoListener {
    fn next_request(&self, _timeout: Duration) -> Option<Box<dyn super::ConnectRequest>> {
        None
    }

    fn local_addr(&self) -> String {
        String::new()
    }
}

/// Connects a pair whose memory lives in `pa` (active side) and `pb` (passive side).
fn connect(
    f: &Fabric,
    pa: &Arc<dyn ProtectionDomain>,
    pb: &Arc<dyn ProtectionDomain>,
) -> Result<Pair, String> {
    let (a_send, a_recv, b_send, b_recv) = (cq(f)?, cq(f)?, cq(f)?, cq(f)?);
    let b_init = qp_init(pb, &b_send, &b_recv);
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
struct Want {
    wr_id: u64,
    status: WcStatus,
    opcode: Option<WcOpcode>,
    byte_len: Option<u32>,
    /// `Some(None)`: must report no invalidation.
    invalidated: Option<Option<u32>>,
    qp_num: u32,
}

fn ok_recv(wr_id: u64, byte_len: u32, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(WcOpcode::Recv),
        byte_len: Some(byte_len),
        invalidated: Some(None),
        qp_num: qp.qp_num(),
    }
}

fn ok_send(wr_id: u64, opcode: WcOpcode, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status: WcStatus::Success,
        opcode: Some(opcode),
        byte_len: None,
        invalidated: None,
        qp_num: qp.qp_num(),
    }
}

fn failed(wr_id: u64, status: WcStatus, qp: &Arc<dyn QueuePair>) -> Want {
    Want {
        wr_id,
        status,
        opcode: None,
        byte_len: None,
        invalidated: None,
        qp_num: qp.qp_num(),
    }
}

fn flushed(wr_id: u64, qp: &Arc<dyn QueuePair>) -> Want {
    failed(wr_id, WcStatus::WrFlushError, qp)
}

fn matches(got: &WorkCompletion, want: &Want) -> bool {
    got.wr_id == want.wr_id
        && got.status == want.status
        && got.qp_num == want.qp_num
        && want.opcode.is_none_or(|o| got.opcode == o)
        && want.byte_len.is_none_or(|l| got.byte_len == l)
        && want.invalidated.is_none_or(|i| got.invalidated_rkey == i)
}

/// Polls `cq` until `n` completions arrived or the timeout passed.
fn poll_n(f: &Fabric, cq: &Arc<dyn CompletionQueue>, n: usize) -> Vec<WorkCompletion> {
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
fn quiet(f: &Fabric, cq: &Arc<dyn CompletionQueue>, what: &str) -> Outcome {
    thread::sleep(f.grace);
    let mut out = [WorkCompletion::EMPTY; 16];
    let k = cq.poll(&mut out);
    ensure!(k == 0, "{what}: unexpected completion(s) {:?}", &out[..k]);
    Ok(())
}

/// Waits for exactly the completions `want`, in order, on `cq`; nothing more may follow.
fn expect(f: &Fabric, cq: &Arc<dyn CompletionQueue>, want: &[Want], what: &str) -> Outcome {
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
fn becomes_dead(f: &Fabric, qp: &Arc<dyn QueuePair>, what: &str) -> Outcome {
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
fn unusable(f: &Fabric, end: &End, mr: &Arc<dyn MemoryRegion>, what: &str) -> Outcome {
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
fn works(
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
fn readable(fd: RawFd, wait: Duration) -> bool {
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
fn carries(got: &[u8], sent: &[u8]) -> bool {
    got.len() >= sent.len()
        && got.get(..sent.len()) == Some(sent)
        && got.iter().skip(sent.len()).all(|&b| b == 0)
}

// ---------------------------------------------------------------------------------
// Connection management.

/// The passive side sees the connect's private data, the active side the accept's;
/// `pre_post` runs once on each new QP; both QPs are live and distinct.
pub fn cm_accept_exchanges_private_data(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let (a_send, a_recv, b_send, b_recv) = (cq(f)?, cq(f)?, cq(f)?, cq(f)?);
    let b_init = qp_init(&pb, &b_send, &b_recv);
    let slot = Arc::new(parking_lot::Mutex::new(None));
    let slot2 = Arc::clone(&slot);
    let Attempt {
        connected,
        accepted,
        listener,
        addr,
    } = attempt(
        f,
        qp_init(&pa, &a_send, &a_recv),
        b"hello from host",
        Box::new(move |req| {
            ensure!(
                carries(req.private_data(), b"hello from host"),
                "the request carries {:?}",
                req.private_data()
            );
            let mut pre_posted = 0;
            let qp = req
                .accept(b_init, b"welcome", b"", &mut |_| {
                    pre_posted += 1;
                    Ok(())
                })
                .map_err(|e| format!("accept: {e}"))?;
            ensure!(pre_posted == 1, "accept ran pre_post {pre_posted} times");
            *slot2.lock() = Some(qp);
            Ok(())
        }),
    );
    accepted?;
    let (qp, reply) = connected.map_err(|e| format!("connect: {e}"))?;
    ensure!(carries(&reply, b"welcome"), "the accept carries {reply:?}");
    ensure!(
        listener.local_addr() == addr,
        "listener.local_addr() is {:?}, not {addr:?}",
        listener.local_addr()
    );
    let sqp = slot.lock().take().ok_or("accept left no QP")?;
    ensure!(
        qp.qp_num() != sqp.qp_num(),
        "both QPs have number {}",
        qp.qp_num()
    );
    ensure!(!qp.is_dead(), "the active QP is dead after connect");
    ensure!(!sqp.is_dead(), "the passive QP is dead after accept");
    // pre_post on the active side runs once, before the connection is established.
    let mut pre_posted = 0;
    let (c_send, c_recv) = (cq(f)?, cq(f)?);
    let addr2 = f.addr();
    let l2 = f
        .device
        .listen(&addr2)
        .map_err(|e| format!("listen: {e}"))?;
    let (b2_send, b2_recv) = (cq(f)?, cq(f)?);
    let b2_init = qp_init(&pb, &b2_send, &b2_recv);
    let timeout = f.timeout;
    let l3 = Arc::clone(&l2);
    let server = thread::spawn(move || -> Result<Arc<dyn QueuePair>, String> {
        let req = l3.next_request(timeout).ok_or("no request")?;
        req.accept(b2_init, b"", b"", &mut |_| Ok(()))
            .map_err(|e| format!("accept: {e}"))
    });
    let c = f.device.connect(
        &addr2,
        qp_init(&pa, &c_send, &c_recv),
        b"",
        &mut |_| {
            pre_posted += 1;
            Ok(())
        },
        f.timeout,
    );
    let s = server
        .join()
        .unwrap_or_else(|_| Err("accepting thread panicked".into()));
    let _c = c.map_err(|e| format!("second connect: {e}"))?;
    let _s = s?;
    ensure!(pre_posted == 1, "connect ran pre_post {pre_posted} times");
    Ok(())
}

/// A rejected connect fails with the reject's private data.
pub fn cm_reject_returns_private_data(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"x",
        Box::new(|req| {
            req.reject(&[0xde, 0xad]);
            Ok(())
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::Rejected(data)) if carries(&data, &[0xde, 0xad]) => Ok(()),
        Err(e) => Err(format!("expected Rejected([de, ad]), got {e:?}")),
        Ok(_) => Err("the connect succeeded".into()),
    }
}

/// When accept's `pre_post` fails, accept returns that error and the peer is rejected
/// with the reject data.
pub fn cm_failed_accept_rejects_with_reject_data(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let (s, r, bs, br) = (cq(f)?, cq(f)?, cq(f)?, cq(f)?);
    let b_init = qp_init(&pb, &bs, &br);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"hi",
        Box::new(move |req| {
            let r = req.accept(b_init, b"welcome", b"no resources", &mut |_| {
                Err(VerbsError::Provider("receives could not be posted".into()))
            });
            match r {
                Err(VerbsError::Provider(_)) => Ok(()),
                Err(e) => Err(format!("accept returned {e:?}, not pre_post's error")),
                Ok(_) => Err("accept succeeded although pre_post failed".into()),
            }
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::Rejected(data)) if carries(&data, b"no resources") => Ok(()),
        Err(e) => Err(format!("expected Rejected(\"no resources\"), got {e:?}")),
        Ok(_) => Err("the connect succeeded".into()),
    }
}

/// A request dropped unanswered refuses the connection.
pub fn cm_dropped_request_is_refused(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"",
        Box::new(|req| {
            drop(req);
            Ok(())
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::ConnectionRefused) => Ok(()),
        other => Err(format!(
            "expected ConnectionRefused, got {:?}",
            other.map(|_| "a connection")
        )),
    }
}

/// Connecting where nobody listens fails with `NoListener`.
pub fn cm_connect_without_listener_fails(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let addr = f.addr();
    let got = f
        .device
        .connect(&addr, qp_init(&pa, &s, &r), b"", &mut |_| Ok(()), f.timeout);
    match got {
        Err(VerbsError::NoListener(_)) => Ok(()),
        other => Err(format!(
            "connect({addr}) with no listener: expected NoListener, got {:?}",
            other.map(|_| "a connection")
        )),
    }
}

// ---------------------------------------------------------------------------------
// Memory registration.

/// Regions have distinct keys, their buffer's address and length, and `REMOTE_WRITE`
/// without `LOCAL_WRITE` is refused (as `ibv_reg_mr` does).
pub fn registration_keys_and_rights(f: &Fabric) -> Outcome {
    let pd = pd(f)?;
    let mut lkeys = std::collections::HashSet::new();
    let mut rkeys = std::collections::HashSet::new();
    let mut mrs = Vec::new();
    for _ in 0..32 {
        let mr = reg(
            &pd,
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )?;
        ensure!(
            lkeys.insert(mr.lkey()),
            "lkey {:#x} issued twice",
            mr.lkey()
        );
        ensure!(
            rkeys.insert(mr.rkey()),
            "rkey {:#x} issued twice",
            mr.rkey()
        );
        ensure!(mr.len() == 4096, "len() is {}", mr.len());
        ensure!(
            mr.addr() == mr.buffer().addr(),
            "addr() {:#x} is not the buffer's {:#x}",
            mr.addr(),
            mr.buffer().addr()
        );
        mrs.push(mr);
    }
    let buf = DmaBuffer::new(4096).ok_or("allocating")?;
    match pd.register(Arc::new(buf), Access::REMOTE_WRITE) {
        Err(VerbsError::InvalidArgument(_)) => Ok(()),
        Err(e) => Err(format!(
            "REMOTE_WRITE alone: expected InvalidArgument, got {e}"
        )),
        Ok(_) => Err("REMOTE_WRITE without LOCAL_WRITE was registered".into()),
    }
}

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

// ---------------------------------------------------------------------------------
// Remote access errors.

/// The regions of a remote-failure scenario: `remote` in the passive side's PD, `local`
/// (source or sink) in the active side's.
struct Failure {
    remote_access: Access,
    local_access: Access,
    /// The failing work request, built from (remote, local).
    op: fn(&Arc<dyn MemoryRegion>) -> SendOp,
    /// Drop the remote region before posting (its rkey is then stale).
    deregister_remote: bool,
    /// The failing request's length.
    len: u32,
}

/// Posts the failing RDMA request (unsignaled: errors complete anyway) from `a`, chained
/// before a SEND, with a receive posted on each side, and checks: the request completes
/// with `RemoteAccessError`, the SEND and both receives are flushed, both QPs end in
/// error, the remote region is unchanged, and another pair of the same device works.
fn remote_access_error(f: &Fabric, s: Failure) -> Outcome {
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
