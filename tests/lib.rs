//! Helpers shared by the end-to-end tests: an in-process target on the loopback
//! transport (NVMe/RDMA on the software verbs provider) and a host connected to it.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::Nqn;
use nvmf_common::types::Nsid;
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::loopback::{start_loopback_config, LoopbackTarget};
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::{DataDir, Fabric, IoBuf, QueueParams};
use nvmf_target::config::{Config, TrType};

// One file for every crate that starts a test cluster (see its module docs).
#[path = "../target/tests/support/ceph_cluster.rs"]
pub mod ceph_cluster;
pub mod ops_support;
pub mod proxy;
pub mod raw_tcp;

/// The subsystem every test target serves.
pub const TEST_NQN: &str = "nqn.2024-01.io.nvmf-rs:test";
/// The host NQN tests connect as.
pub const TEST_HOSTNQN: &str =
    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
pub const TEST_HOSTID: [u8; 16] = [0x11; 16];

/// A running loopback target and a fabric to it.
pub struct Env {
    pub target: LoopbackTarget,
    pub fabric: Arc<dyn Fabric>,
    pub nqn: Nqn,
}

/// The log filter without `RUST_LOG`: warnings and errors, which the test harness
/// shows only for a test that failed (a stuck command's report names where it waits).
const DEFAULT_LOG_FILTER: &str = "warn";

/// Logs to the test output (`RUST_LOG`, else [`DEFAULT_LOG_FILTER`]).
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A config with one loopback port and one subsystem holding `namespaces`.
pub fn config(namespaces: &[&str]) -> Config {
    let nqn = Nqn::new(TEST_NQN).ok();
    let mut cfg = Config::single(
        TrType::Loopback,
        None,
        nqn,
        namespaces.iter().map(|s| s.to_string()).collect(),
    )
    .unwrap_or_else(|e| panic!("test config: {e}"));
    cfg.transport.max_queue_size = 256;
    cfg
}

/// Starts a target for `cfg`.
pub fn start(cfg: &Config) -> Env {
    init_logs();
    let (fabric, target, nqn) =
        start_loopback_config(cfg).unwrap_or_else(|e| panic!("start loopback target: {e}"));
    Env {
        target,
        fabric,
        nqn,
    }
}

pub fn hostnqn() -> Nqn {
    Nqn::new(TEST_HOSTNQN).unwrap_or_else(|e| panic!("{e}"))
}

/// Options for the test host: `nr_io` queues of `queue_size` entries.
pub fn options(env: &Env, nr_io: u16, queue_size: u16) -> ConnectOptions {
    let mut o = ConnectOptions::new(env.nqn.clone(), hostnqn(), TEST_HOSTID);
    o.nr_io_queues = nr_io;
    o.queue_size = queue_size;
    o.command_timeout = Duration::from_secs(10);
    o
}

/// Connects a controller with `nr_io` I/O queues.
pub fn connect(env: &Env, nr_io: u16, queue_size: u16) -> Controller {
    Controller::connect(env.fabric.clone(), options(env, nr_io, queue_size))
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Connects one raw queue (no NVMe Connect yet) for protocol-level tests.
pub fn raw_queue(env: &Env, qid: u16, depth: u16) -> Queue {
    let t = env
        .fabric
        .connect_queue(&QueueParams {
            qid: nvmf_common::types::Qid(qid),
            depth,
            in_capsule_data: 0,
            connect_timeout: Duration::from_secs(5),
        })
        .unwrap_or_else(|e| panic!("raw queue: {e}"));
    let mut q = Queue::new(t);
    q.set_timeout(Duration::from_secs(10));
    q
}

/// Runs one command on a raw queue and returns its completion.
pub fn exec(q: &mut Queue, sqe: [u8; 64], data: Option<&IoBuf>, dir: DataDir) -> Completion {
    q.execute(sqe, data, dir, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("execute: {e}"))
}

/// Deterministic pattern for block `lba` of a test run `seed`.
pub fn pattern(seed: u64, lba: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes distinct data to `count` extents of `bs` bytes with `qd` commands in flight,
/// reads every extent back at the same depth and compares.
pub fn write_read_verify(ctrl: &mut Controller, bs: usize, qd: usize, count: usize) {
    let mut queues = ctrl.take_io_queues();
    write_read_verify_on(ctrl, &mut queues[0], 0, bs, qd, count);
    drop(queues);
}

/// [`write_read_verify`] on queue `q` of `ctrl`, the extents from block `base` on.
pub fn write_read_verify_on(
    ctrl: &Controller,
    q: &mut Queue,
    base: u64,
    bs: usize,
    qd: usize,
    count: usize,
) {
    let mut io = NsIo::new(ctrl, q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let block = io.info().block_size as usize;
    let nblocks = (bs / block) as u32;
    let bufs: Vec<_> = (0..qd)
        .map(|_| ctrl.alloc(bs).unwrap_or_else(|e| panic!("alloc: {e}")))
        .collect();
    let seed = (bs as u64) << 20 | qd as u64 | base << 40;
    let lba_of = |i: usize| base + (i as u64) * u64::from(nblocks);
    let mut done: Vec<Completion> = Vec::new();
    // Writes.
    let mut next = 0usize;
    let mut free: Vec<usize> = (0..qd).collect();
    let mut completed = 0usize;
    while completed < count {
        while next < count {
            let Some(b) = free.pop() else { break };
            bufs[b].write_at(0, &pattern(seed, lba_of(next), bs));
            io.submit_write(
                (b as u64) << 32 | next as u64,
                lba_of(next),
                nblocks,
                &bufs[b],
                false,
            )
            .unwrap_or_else(|e| panic!("submit write: {e}"));
            next += 1;
        }
        io.queue().flush().unwrap_or_else(|e| panic!("flush: {e}"));
        done.clear();
        io.queue()
            .poll(&mut done)
            .unwrap_or_else(|e| panic!("poll: {e}"));
        for c in &done {
            assert!(
                c.status.is_success(),
                "write {} failed: {}",
                c.tag & 0xFFFF_FFFF,
                c.status
            );
            free.push((c.tag >> 32) as usize);
            completed += 1;
        }
    }
    // Reads.
    let (mut next, mut completed) = (0usize, 0usize);
    let mut free: Vec<usize> = (0..qd).collect();
    let mut got = vec![0u8; bs];
    while completed < count {
        while next < count {
            let Some(b) = free.pop() else { break };
            bufs[b].fill(0);
            io.submit_read(
                (b as u64) << 32 | next as u64,
                lba_of(next),
                nblocks,
                &bufs[b],
            )
            .unwrap_or_else(|e| panic!("submit read: {e}"));
            next += 1;
        }
        io.queue().flush().unwrap_or_else(|e| panic!("flush: {e}"));
        done.clear();
        io.queue()
            .poll(&mut done)
            .unwrap_or_else(|e| panic!("poll: {e}"));
        for c in &done {
            let (b, i) = ((c.tag >> 32) as usize, (c.tag & 0xFFFF_FFFF) as usize);
            assert!(c.status.is_success(), "read {i} failed: {}", c.status);
            assert!(bufs[b].read_at(0, &mut got));
            assert!(
                got == pattern(seed, lba_of(i), bs),
                "data mismatch at extent {i} (bs {bs}, qd {qd})"
            );
            free.push(b);
            completed += 1;
        }
    }
    drop(io);
}

/// A target served over NVMe/TCP on 127.0.0.1 (an OS-chosen port) and a host fabric to it.
pub struct TcpEnv {
    pub server: nvmf_target::tcp::TcpServer,
    pub target: Arc<nvmf_target::target::Target>,
    pub fabric: Arc<dyn Fabric>,
    pub nqn: Nqn,
    /// The listener's address (for hosts made by hand).
    pub addr: std::net::SocketAddr,
}

/// Starts `cfg` with its port turned into a TCP port on 127.0.0.1:0; the host side uses
/// `opts` (digests).
pub fn start_tcp(cfg: &Config, opts: nvmf_initiator::transport::tcp::TcpOptions) -> TcpEnv {
    start_tcp_with(cfg, opts, nvmf_target::tcp::TcpOptions::default())
}

/// [`start_tcp`] with explicit target transport tuning (stall timeout, MAXH2CDATA...).
pub fn start_tcp_with(
    cfg: &Config,
    opts: nvmf_initiator::transport::tcp::TcpOptions,
    target_opts: nvmf_target::tcp::TcpOptions,
) -> TcpEnv {
    init_logs();
    let mut cfg = cfg.clone();
    for p in &mut cfg.ports {
        p.trtype = TrType::Tcp;
        p.traddr = "127.0.0.1".into();
        p.trsvcid = "0".into();
    }
    let target =
        nvmf_target::target::Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let server =
        nvmf_target::tcp::TcpServer::start_with(target.clone(), &target.ports(), target_opts)
            .unwrap_or_else(|e| panic!("tcp server: {e}"));
    let addr = server.local_addrs()[0];
    let fabric = nvmf_initiator::transport::tcp::TcpFabric::new(addr, opts);
    let nqn = cfg.subsystems[0].nqn.clone();
    TcpEnv {
        server,
        target,
        fabric: Arc::new(fabric),
        nqn,
        addr,
    }
}

impl TcpEnv {
    /// The poll groups' data-path counters, summed.
    pub fn counters(&self) -> nvmf_target::tcp::GroupCounters {
        use nvmf_target::runtime::PortServer;
        self.server.counters()
    }

    /// Waits (up to 10 s) until the poll groups' counters satisfy `f`: they are
    /// updated by the group threads, after the fact.
    pub fn wait_counters(&self, what: &str, f: impl Fn(&nvmf_target::tcp::GroupCounters) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let c = self.counters();
            if f(&c) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: {c:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A well-behaved host connects over `fabric`, writes a 4 KiB pattern at `lba` of
/// namespace 1, reads it back and disconnects: the target still serves hosts.
pub fn assert_serves(fabric: &Arc<dyn Fabric>, nqn: &Nqn, lba: u64) {
    let mut ctrl = connect_to(fabric, nqn, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    {
        let mut io = NsIo::new(&ctrl, &mut q, Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let d = pattern(0xA11CE ^ lba, lba, 4096);
        io.write(lba, &d)
            .unwrap_or_else(|e| panic!("healthy host write: {e}"));
        let mut back = vec![0u8; 4096];
        io.read(lba, &mut back)
            .unwrap_or_else(|e| panic!("healthy host read: {e}"));
        assert!(back == d, "healthy host read back other data");
    }
    drop(q);
    ctrl.shutdown()
        .unwrap_or_else(|e| panic!("healthy host shutdown: {e}"));
}

/// Connects a controller over `fabric` to `nqn` with `nr_io` queues of `queue_size`.
pub fn connect_to(fabric: &Arc<dyn Fabric>, nqn: &Nqn, nr_io: u16, queue_size: u16) -> Controller {
    connect_with_timeout(fabric, nqn, nr_io, queue_size, Duration::from_secs(10))
}

/// [`connect_to`] with another per-command timeout.
pub fn connect_with_timeout(
    fabric: &Arc<dyn Fabric>,
    nqn: &Nqn,
    nr_io: u16,
    queue_size: u16,
    command_timeout: Duration,
) -> Controller {
    let mut o = ConnectOptions::new(nqn.clone(), hostnqn(), TEST_HOSTID);
    o.nr_io_queues = nr_io;
    o.queue_size = queue_size;
    o.command_timeout = command_timeout;
    Controller::connect(fabric.clone(), o).unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Log lines kept for a test to read: a `tracing_subscriber` writer (clone it into
/// `with_writer(move || capture.clone())`).
#[derive(Clone, Default)]
pub struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Everything written so far.
    pub fn text(&self) -> String {
        self.0
            .lock()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    }
}

/// Replaces namespace 1 of the test subsystem with `inner` behind a fault-injecting
/// wrapper (`nvmf_target::backend::fault`); returns its control.
pub fn wrap_ns1(
    target: &nvmf_target::target::Target,
    inner: Arc<dyn nvmf_target::backend::Backend>,
) -> Arc<nvmf_target::backend::fault::FaultControl> {
    let sub = target
        .subsystem_by_name(TEST_NQN)
        .unwrap_or_else(|| panic!("no test subsystem"));
    let (b, ctl) = nvmf_target::backend::fault::FaultBackend::wrap(inner);
    let ns = nvmf_target::subsystem::Namespace::new(Nsid(1), b, [0x42; 16], [0x43; 16]);
    sub.remove_namespace(Nsid(1));
    sub.add_namespace(ns)
        .unwrap_or_else(|e| panic!("add namespace: {e}"));
    ctl
}

/// A RAM backend of `size` bytes (to wrap with [`wrap_ns1`]).
pub fn ram_backend(size: u64) -> Arc<dyn nvmf_target::backend::Backend> {
    use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
    open_backend(&NamespaceSpec::Ram { size }, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
}
