//! Helpers of the operations tests (`ops_*`): NVMe/TCP targets built from YAML whose
//! tcp ports listen on an OS-chosen port number, and hosts with distinct identities.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::log::{lid, DISC_LOG_ENTRY_LEN, DISC_LOG_HEADER_LEN};
use nvmf_initiator::controller::{ConnectOptions, Controller};
use nvmf_initiator::discovery::{parse_discovery_log, read_discovery_log, DiscoveryLog};
use nvmf_initiator::error::Error;
use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
use nvmf_initiator::transport::Fabric;
use nvmf_target::config::{Config, TrType};
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;

use crate::init_logs;

/// A target serving a YAML config over NVMe/TCP.
pub struct OpsTarget {
    pub server: TcpServer,
    pub target: Arc<Target>,
    /// The bound address of each port, in config order.
    pub addrs: Vec<SocketAddr>,
    pub config: Config,
}

impl OpsTarget {
    /// A host fabric to port number `i` (config order), at 127.0.0.1.
    pub fn fabric(&self, i: usize) -> Arc<dyn Fabric> {
        let a = self.addrs[i];
        let addr = SocketAddr::new([127, 0, 0, 1].into(), a.port());
        Arc::new(TcpFabric::new(addr, TcpOptions::default()))
    }
}

/// Parses `yaml` (tcp ports; their `trsvcid` is replaced by 0, an OS-chosen port) and
/// starts it.
pub fn start_yaml(yaml: &str) -> OpsTarget {
    init_logs();
    let mut cfg = Config::from_yaml_str(yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    for p in &mut cfg.ports {
        assert_eq!(p.trtype, TrType::Tcp, "ops tests use tcp ports");
        p.trsvcid = "0".into();
    }
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let server =
        TcpServer::start(target.clone(), &target.ports()).unwrap_or_else(|e| panic!("tcp: {e}"));
    let addrs = server.local_addrs();
    OpsTarget {
        server,
        target,
        addrs,
        config: cfg,
    }
}

/// Host number `n`: its NQN and host identifier (distinct per `n`).
pub fn host(n: u8) -> (Nqn, [u8; 16]) {
    let nqn = Nqn::new(format!(
        "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000{n:02x}"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    (nqn, [n; 16])
}

/// Connect options for host `n` to `subnqn` with `nr_io` I/O queues and `kato_ms`.
pub fn options_as(n: u8, subnqn: &Nqn, nr_io: u16, kato_ms: u32) -> ConnectOptions {
    let (hostnqn, hostid) = host(n);
    let mut o = ConnectOptions::new(subnqn.clone(), hostnqn, hostid);
    o.nr_io_queues = nr_io;
    o.queue_size = 32;
    o.kato_ms = kato_ms;
    o.command_timeout = Duration::from_secs(10);
    o.connect_timeout = Duration::from_secs(5);
    o
}

/// Connects host `n` to `subnqn`.
pub fn connect_as(
    fabric: &Arc<dyn Fabric>,
    n: u8,
    subnqn: &Nqn,
    nr_io: u16,
    kato_ms: u32,
) -> Result<Controller, Error> {
    Controller::connect(fabric.clone(), options_as(n, subnqn, nr_io, kato_ms))
}

/// Connects host `n` to the discovery controller behind `fabric`.
pub fn discovery_as(fabric: &Arc<dyn Fabric>, n: u8, kato_ms: u32) -> Controller {
    connect_as(fabric, n, &Nqn::discovery(), 0, kato_ms)
        .unwrap_or_else(|e| panic!("discovery connect: {e}"))
}

/// The whole discovery log of a connected discovery controller.
pub fn read_log(ctrl: &Controller) -> DiscoveryLog {
    read_discovery_log(ctrl).unwrap_or_else(|e| panic!("discovery log: {e}"))
}

/// The first `records` entries' worth of the discovery log (header included), parsed
/// leniently: NUMREC may exceed what was read.
pub fn read_log_prefix(ctrl: &Controller, records: usize) -> (u64, u64, Vec<u8>) {
    let len = DISC_LOG_HEADER_LEN + records * DISC_LOG_ENTRY_LEN;
    let page = ctrl
        .get_log_page(lid::DISCOVERY, Nsid::NONE, len, 0)
        .unwrap_or_else(|e| panic!("get log page: {e}"));
    let genctr = u64::from_le_bytes(page[0..8].try_into().unwrap_or_default());
    let numrec = u64::from_le_bytes(page[8..16].try_into().unwrap_or_default());
    (genctr, numrec, page)
}

/// Parses a full page (all NUMREC entries present).
pub fn parse_full(page: &[u8]) -> DiscoveryLog {
    parse_discovery_log(page).unwrap_or_else(|e| panic!("parse: {e}"))
}

/// NQNs of the NVM subsystem entries of a log.
pub fn nvm_nqns(log: &DiscoveryLog) -> Vec<String> {
    log.entries
        .iter()
        .filter(|e| e.is_nvm_subsystem())
        .map(|e| e.subnqn.clone())
        .collect()
}

/// A free TCP port on 127.0.0.1 (bound and released; live-change configs must name
/// real port numbers because a config with port 0 does not validate).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"))
}

/// A target whose configuration can change while it runs.
pub struct LiveTarget {
    pub live: Arc<nvmf_target::live::Live>,
    pub tcp: Arc<nvmf_target::live::hooks::TcpPorts>,
    pub target: Arc<Target>,
}

impl LiveTarget {
    /// A host fabric to port `portid` (at 127.0.0.1, its bound port number).
    pub fn fabric(&self, portid: u16) -> Arc<dyn Fabric> {
        use nvmf_target::live::PortHooks;
        let addr: SocketAddr = self
            .tcp
            .port_addr(portid)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("port {portid} is not listening"));
        let addr = SocketAddr::new([127, 0, 0, 1].into(), addr.port());
        Arc::new(TcpFabric::new(addr, TcpOptions::default()))
    }
}

impl Drop for LiveTarget {
    fn drop(&mut self) {
        self.tcp.shutdown();
    }
}

/// Starts `yaml` (tcp ports with real port numbers) with live changes enabled;
/// `config_path` is what `reload` re-reads.
pub fn start_live(yaml: &str, config_path: Option<std::path::PathBuf>) -> LiveTarget {
    start_live_with(yaml, config_path, nvmf_target::tcp::TcpOptions::default())
}

/// [`start_live`] with explicit NVMe/TCP tuning of the listeners (a small buffer
/// arena, ...).
pub fn start_live_with(
    yaml: &str,
    config_path: Option<std::path::PathBuf>,
    tcp_opts: nvmf_target::tcp::TcpOptions,
) -> LiveTarget {
    init_logs();
    let cfg = Config::from_yaml_str(yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let tcp = Arc::new(
        nvmf_target::live::hooks::TcpPorts::start(target.clone(), &target.ports(), tcp_opts)
            .unwrap_or_else(|e| panic!("tcp: {e}")),
    );
    let live = nvmf_target::live::Live::new(target.clone(), cfg, tcp.clone(), config_path);
    LiveTarget { live, tcp, target }
}

/// A path in the temp directory unique to this process and `name`.
pub fn tmp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("nvmf-ops-{}-{name}", std::process::id()))
}

/// Sends an Asynchronous Event Request and waits for its completion (dword 0).
pub fn wait_aer(ctrl: &Controller) -> u32 {
    let c = ctrl
        .admin_execute(
            nvmf_initiator::command::async_event_request(),
            None,
            nvmf_initiator::transport::DataDir::None,
        )
        .unwrap_or_else(|e| panic!("AER: {e}"));
    assert!(c.status.is_success(), "AER: {}", c.status);
    c.dw0
}

/// Reads (and so clears) the Changed Namespace List.
pub fn changed_ns_list(ctrl: &Controller) -> Vec<u32> {
    let page = ctrl
        .get_log_page(lid::CHANGED_NS, Nsid::BROADCAST, 4096, 0)
        .unwrap_or_else(|e| panic!("Changed Namespace List: {e}"));
    page.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// NSZE of namespace `nsid` (Identify Namespace), 0 when inactive.
pub fn nsze(ctrl: &Controller, nsid: u32) -> u64 {
    let data = ctrl
        .identify_namespace(Nsid(nsid))
        .unwrap_or_else(|e| panic!("Identify Namespace: {e}"));
    u64::from_le_bytes(data[0..8].try_into().unwrap_or_default())
}
