//! The target's configuration: ports, subsystems, namespaces, allowed hosts and
//! transport tuning, in the vocabulary of the Linux kernel target's configfs.
//!
//! ```yaml
//! transport:                  # tuning, all optional
//!   max_queue_size: 128
//! rdma:                       # NVMe/RDMA tuning, all optional
//!   srq: true                 # one shared receive queue per poll group
//!   srq_depth: 1024
//! ports:
//!   - portid: 1
//!     trtype: tcp             # loopback | rdma | tcp
//!     traddr: 127.0.0.1
//!     trsvcid: "4420"
//!     subsystems: [nqn.2024-01.io.nvmf-rs:ram0]
//! subsystems:
//!   - nqn: nqn.2024-01.io.nvmf-rs:ram0
//!     allow_any_host: true
//!     namespaces:
//!       - nsid: 1
//!         device_path: "ram:1G"
//! ```
//!
//! [`Config::load`] reads, parses and validates a file; every error names the file, the
//! line and column, and the key path (`configs/x.yaml:12:7:
//! subsystems[0].namespaces[1].nsid: ...`). Unknown keys are errors, so a typo never
//! silently falls back to a default.

mod ana;
mod error;
mod group;
mod hosts;
mod io_path;
mod locate;
mod management;
mod metrics;
mod passthru;
mod qos;
mod rdma;
mod serde_util;
pub mod spec;
mod tcp;
mod tls;
mod validate;
pub mod visibility;

#[cfg(test)]
mod passthru_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use nvmf_common::types::{Cntlid, Nqn, Nsid};

pub use ana::{AnaGroupConfig, AnaState};
pub use error::{ConfigError, ConfigErrorKind};
use error::{KeyPath, Seg};
pub use group::{
    namespace_key, GatewayGroupConfig, GatewayRecord, GroupState, Ownership, GROUP_NAME_MAX,
    GROUP_OWNED_KEYS,
};
pub use hosts::{HostConfig, KeyText};
pub use io_path::IoPath;
pub use management::{ManagementConfig, ManagementRole, MANAGEMENT_EXAMPLE_PORT};
pub use metrics::{MetricsConfig, METRICS_EXAMPLE_PORT};
pub use nvmf_common::keyfile::read_key_file;
pub use passthru::{PassthruAdminClass, PassthruConfig, PASSTHRU_ADMIN_TIMEOUT_MAX_MS};
pub use qos::{QosConfig, QOS_KEYS, QOS_KINDS, QOS_MAX_BYTES_PER_SEC, QOS_MAX_IOS_PER_SEC};
pub use rdma::{RdmaConfig, RDMA_DEFAULT_SRQ_DEPTH, RDMA_SRQ_DEPTH_RANGE};
pub use tcp::TcpConfig;
pub use tls::{PortTls, Treq, Tsas};

/// NQN of the subsystem [`Config::single`] creates when none is given.
pub const DEFAULT_SUBSYSTEM_NQN: &str = "nqn.2024-01.io.nvmf-rs:default";
/// Model number reported when a subsystem sets none.
pub const DEFAULT_MODEL: &str = "nvmf-rs";
/// Origin [`Config::single`] reports in its errors.
pub const COMMAND_LINE_ORIGIN: &str = "<command line>";
/// Largest serial number (SN field of Identify Controller), in ASCII characters.
pub const SERIAL_MAX_LEN: usize = 20;
/// Largest model number (MN field of Identify Controller), in ASCII characters.
pub const MODEL_MAX_LEN: usize = 40;

/// Transport type of a port (configfs `addr_trtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrType {
    /// In-process loopback (the software verbs provider); `loop` is accepted too.
    #[serde(alias = "loop")]
    Loopback,
    Rdma,
    Tcp,
}

impl TrType {
    pub fn as_str(self) -> &'static str {
        match self {
            TrType::Loopback => "loopback",
            TrType::Rdma => "rdma",
            TrType::Tcp => "tcp",
        }
    }

    /// Whether ports of this type listen on a network address (`traddr`/`trsvcid`).
    pub fn is_network(self) -> bool {
        matches!(self, TrType::Rdma | TrType::Tcp)
    }
}

impl fmt::Display for TrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TrType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "loopback" | "loop" => Ok(TrType::Loopback),
            "rdma" => Ok(TrType::Rdma),
            "tcp" => Ok(TrType::Tcp),
            _ => Err(format!(
                "unknown transport type {s:?}: expected loopback, rdma or tcp"
            )),
        }
    }
}

/// Address family of a port (configfs `addr_adrfam`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdrFam {
    Ipv4,
    Ipv6,
    /// InfiniBand (RDMA only).
    Ib,
    /// In-process loopback; `loop` is accepted too.
    #[serde(alias = "loop")]
    Loopback,
}

impl AdrFam {
    pub fn as_str(self) -> &'static str {
        match self {
            AdrFam::Ipv4 => "ipv4",
            AdrFam::Ipv6 => "ipv6",
            AdrFam::Ib => "ib",
            AdrFam::Loopback => "loopback",
        }
    }

    /// The family implied by a transport type and address: loopback for loopback
    /// ports, IPv6 when `traddr` is an IPv6 literal, IPv4 otherwise.
    pub fn for_port(trtype: TrType, traddr: &str) -> AdrFam {
        match trtype {
            TrType::Loopback => AdrFam::Loopback,
            TrType::Rdma | TrType::Tcp => {
                if traddr.parse::<std::net::Ipv6Addr>().is_ok() {
                    AdrFam::Ipv6
                } else {
                    AdrFam::Ipv4
                }
            }
        }
    }
}

impl fmt::Display for AdrFam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a subsystem assigns controller ids (Identify Controller FCATT bit 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControllerModel {
    /// A fresh controller per association; hosts ask for CNTLID 0xFFFF (nvmet's model).
    #[default]
    Dynamic,
    /// Hosts may ask for a specific CNTLID (or 0xFFFE for any free one).
    Static,
}

fn is_dynamic(m: &ControllerModel) -> bool {
    *m == ControllerModel::Dynamic
}

/// How queues wait for work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Busy-poll while busy (yielding the CPU while it waits on a single backend I/O),
    /// sleep on completion events when idle or when several backend I/Os are in flight.
    #[default]
    Adaptive,
    /// Always busy-poll (lowest latency, burns a core per poll group).
    Poll,
    /// Always wait for completion events.
    Interrupt,
}

/// Transport-independent tuning (`transport:`); every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Entries per I/O queue the target accepts (CAP.MQES + 1): 2..=1024.
    pub max_queue_size: u16,
    /// Entries of the admin queue the target accepts: 2..=4096.
    pub max_admin_queue_size: u16,
    /// I/O queues per controller: 1..=1024.
    pub max_io_queues: u16,
    /// Bytes of in-capsule data per command (IOCCSZ - 64): a multiple of 16, at least
    /// 4096 (8192 when a port is rdma or tcp), at most 1 MiB.
    pub in_capsule_data_size: u32,
    /// Largest transfer in bytes (MDTS): a power of two from 4 KiB to 8 MiB.
    pub max_io_size: u32,
    pub poll_mode: PollMode,
    /// Worker threads serving queues: 1..=256.
    pub poll_groups: usize,
    /// CPUs the poll groups are pinned to (`"0-3,6"` or a list), group `i` to the
    /// `i`-th taken round-robin; unpinned when absent (SPDK's core mask, `-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<nvmf_common::cpus::CpuList>,
    /// Keep-alive timeout (ms) of a discovery controller whose host asks for none
    /// (nvmet's and SPDK's 120 s). Hosts choose their own KATO otherwise, kept as asked:
    /// a host is not told of a shorter one and would be dropped by it.
    pub keep_alive_timeout_ms: u32,
    /// How long (ms) a DH-HMAC-CHAP transaction may wait for the host's next message
    /// before its controller ends; keep-alive does not run meanwhile. nvmet uses the
    /// keep-alive timeout (120 s without one): a host computing an ffdhe8192
    /// exchange on a slow CPU needs more than the usual 5 s KATO.
    pub auth_timeout_ms: u32,
    /// A command outstanding longer than this (ms) is a stuck command: logged once at
    /// warn with its queue, CID, opcode, state and what it waits for, listed by `ctl
    /// status` and counted in the metrics. Well under the Linux host's 30 s I/O
    /// timeout, so the target says so before the host gives up.
    pub stuck_command_ms: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_queue_size: 128,
            max_admin_queue_size: 32,
            max_io_queues: 128,
            in_capsule_data_size: 8192,
            max_io_size: 1 << 20,
            poll_mode: PollMode::Adaptive,
            poll_groups: 1,
            cpus: None,
            keep_alive_timeout_ms: 120_000,
            auth_timeout_ms: 30_000,
            stuck_command_ms: 10_000,
        }
    }
}

/// A port: where the target listens and which subsystems it exports there
/// (configfs `ports/N`). Discovery is always served on every port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Port id, unique among ports (reported in the discovery log).
    pub portid: u16,
    pub trtype: TrType,
    /// Address to listen on: an IP literal for rdma and tcp; ignored by loopback.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traddr: String,
    /// Service id: the port number for rdma and tcp (`"4420"`); ignored by loopback.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "serde_util::string_or_number"
    )]
    pub trsvcid: String,
    /// Address family; `None`: derived from `trtype` and `traddr` ([`Self::adrfam`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adrfam: Option<AdrFam>,
    /// NQNs of the subsystems exported on this port (configfs `ports/N/subsystems`).
    #[serde(default, with = "serde_util::nqn_list")]
    pub subsystems: Vec<Nqn>,
    /// Other discovery controllers to list in this port's discovery log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub referrals: Vec<ReferralConfig>,
    /// ANA group states on this port; groups not listed are optimized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ana_groups: Vec<AnaGroupConfig>,
    /// Security type (nvmet's `addr_tsas`): `none` or `tls1.3` (tcp ports only).
    #[serde(default, skip_serializing_if = "is_default")]
    pub tsas: Tsas,
    /// Secure channel requirement (nvmet's `addr_treq`); default: `required` on a
    /// TLS port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub treq: Option<Treq>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl PortConfig {
    /// What the port does with TLS.
    pub fn tls(&self) -> PortTls {
        PortTls::of(self.tsas, self.treq)
    }

    /// The address family, explicit or derived.
    pub fn adrfam(&self) -> AdrFam {
        self.adrfam
            .unwrap_or_else(|| AdrFam::for_port(self.trtype, &self.traddr))
    }

    /// The socket address to listen on, for rdma and tcp ports with a valid address.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        let ip: IpAddr = self.traddr.parse().ok()?;
        let port: u16 = self.trsvcid.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    }

    /// Whether `nqn` is exported on this port.
    pub fn exports(&self, nqn: &Nqn) -> bool {
        self.subsystems.contains(nqn)
    }
}

/// A discovery referral: another discovery controller a port's discovery log points
/// hosts to (configfs `ports/N/referrals`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferralConfig {
    /// rdma or tcp.
    pub trtype: TrType,
    /// IP address of the remote discovery controller (any non-empty string for `ib`).
    pub traddr: String,
    /// Its service id (port number).
    #[serde(deserialize_with = "serde_util::string_or_number")]
    pub trsvcid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adrfam: Option<AdrFam>,
    /// Port id of the remote port.
    #[serde(default)]
    pub portid: u16,
}

impl ReferralConfig {
    /// The address family, explicit or derived.
    pub fn adrfam(&self) -> AdrFam {
        self.adrfam
            .unwrap_or_else(|| AdrFam::for_port(self.trtype, &self.traddr))
    }
}

fn default_cntlid_min() -> Cntlid {
    Cntlid::MIN
}

fn default_cntlid_max() -> Cntlid {
    Cntlid::MAX
}

/// An NVM subsystem (configfs `subsystems/NQN`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    #[serde(with = "serde_util::nqn")]
    pub nqn: Nqn,
    /// Serial number, at most 20 printable ASCII characters; `None`: derived from the
    /// NQN ([`Self::serial`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Model number, at most 40 printable ASCII characters; `None`: [`DEFAULT_MODEL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Any host may connect (configfs `attr_allow_any_host`); default false.
    #[serde(default)]
    pub allow_any_host: bool,
    /// Host NQNs allowed to connect when `allow_any_host` is false (empty: nobody).
    #[serde(default, with = "serde_util::nqn_list")]
    pub allowed_hosts: Vec<Nqn>,
    /// Smallest controller id handed out (configfs `attr_cntlid_min`), default 1.
    #[serde(default = "default_cntlid_min", with = "serde_util::cntlid")]
    pub cntlid_min: Cntlid,
    /// Largest controller id handed out (configfs `attr_cntlid_max`), default 0xFFEF.
    #[serde(default = "default_cntlid_max", with = "serde_util::cntlid")]
    pub cntlid_max: Cntlid,
    /// `dynamic` (default) or `static` controller model.
    #[serde(default, skip_serializing_if = "is_dynamic")]
    pub controller_model: ControllerModel,
    #[serde(default)]
    pub namespaces: Vec<NamespaceConfig>,
    /// Export a local NVMe controller's namespaces as they are, instead of
    /// `namespaces` ([`PassthruConfig`]); the two exclude each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passthru: Option<PassthruConfig>,
}

impl SubsystemConfig {
    /// A subsystem with defaults: no hosts allowed, no namespaces.
    pub fn new(nqn: Nqn) -> Self {
        SubsystemConfig {
            nqn,
            serial: None,
            model: None,
            allow_any_host: false,
            allowed_hosts: Vec::new(),
            cntlid_min: Cntlid::MIN,
            cntlid_max: Cntlid::MAX,
            controller_model: ControllerModel::Dynamic,
            namespaces: Vec::new(),
            passthru: None,
        }
    }

    /// The serial number: the configured one, or 16 hex digits of a stable hash of the
    /// NQN (the same NQN always gets the same serial).
    pub fn serial(&self) -> String {
        match &self.serial {
            Some(s) => s.clone(),
            None => format!("{:016x}", fnv1a64(self.nqn.as_str().as_bytes())),
        }
    }

    /// The model number: the configured one or [`DEFAULT_MODEL`].
    pub fn model(&self) -> &str {
        self.model.as_deref().unwrap_or(DEFAULT_MODEL)
    }

    /// Whether `host` may connect.
    pub fn allows_host(&self, host: &Nqn) -> bool {
        self.allow_any_host || self.allowed_hosts.contains(host)
    }

    /// The namespace with id `nsid`.
    pub fn namespace(&self, nsid: Nsid) -> Option<&NamespaceConfig> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

/// Ceph options whose value is a secret (`key`: the client's key itself). A namespace's
/// `ceph_options` may not set them (a keyring file holds the key), and logs never show
/// their values.
pub const SECRET_CEPH_OPTIONS: &[&str] = &["key"];

/// A namespace (configfs `subsystems/NQN/namespaces/NSID`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Namespace id: 1..=0xFFFFFFFE, unique within the subsystem.
    #[serde(with = "serde_util::nsid")]
    pub nsid: Nsid,
    /// A file or block device path (`file:PATH` also works), `ram:SIZE` / `null:SIZE`
    /// with SIZE in bytes or with a K/M/G/T suffix, or `rbd:POOL/IMAGE`.
    pub device_path: String,
    /// Whether the namespace is attached (configfs `enable`); default true.
    #[serde(default = "yes")]
    pub enable: bool,
    /// Use the page cache instead of O_DIRECT (configfs `buffered_io`); default false.
    #[serde(default)]
    pub buffered_io: bool,
    /// Logical block size: a power of two from 512 to 65536; `None`: 512, or the
    /// device's for block devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Namespace UUID; `None`: derived from (subsystem NQN, nsid), see [`Self::uuid`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "serde_util::uuid_opt"
    )]
    pub uuid: Option<Uuid>,
    /// Namespace globally unique identifier; `None`: not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nguid: Option<Nguid>,
    /// ANA group (configfs `ana_grpid`), 1 to 128; `None`: group 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anagrpid: Option<u32>,
    /// Where the reservation state is kept when a host turns Persist Through Power
    /// Loss on (SPDK's `ptpl_file`); `None`: reservations do not survive a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptpl_file: Option<std::path::PathBuf>,
    /// `rbd:` namespaces only: the Ceph configuration file (`None`: librados' default
    /// search, `$CEPH_CONF` then `/etc/ceph/ceph.conf`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<std::path::PathBuf>,
    /// `rbd:` namespaces only: the Ceph client id (`admin` for `client.admin`, the
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// `rbd:` namespaces only: the keyring holding the client's key (`None`: what the
    /// Ceph configuration says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<std::path::PathBuf>,
    /// `rbd:` namespaces only: Ceph client options (SPDK's `bdev_rbd_register_cluster
    /// --config-param`), e.g. `{ rados_osd_op_timeout: "30", rbd_cache: "false" }`. Set
    /// with `rados_conf_set` after `ceph_conf` is read and before connecting, so they
    /// override the file; librados checks each name and value when the namespace is
    /// opened (and `nvmf-target check-config` does the same without connecting).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "serde_util::ceph_options"
    )]
    pub ceph_options: BTreeMap<String, String>,
    /// The target created this backing (`ctl add-ns --size`): `remove-ns
    /// --delete-backing` may delete it. Never set for a backing made by someone else.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub created: bool,
    /// Whether every host that may connect sees the namespace (default true). False
    /// (SPDK's `no_auto_visible`): only the hosts in `visible_to` see it; to the others
    /// it is an inactive NSID. See [`visibility`].
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub auto_visible: bool,
    /// With `auto_visible: false`, the host NQNs that see the namespace (SPDK's
    /// `nvmf_ns_add_host`); refused on an auto-visible namespace.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_util::nqn_list"
    )]
    pub visible_to: Vec<Nqn>,
    /// Rate limits (SPDK's `bdev_set_qos_limit`); all 0 (the default): unlimited.
    #[serde(default, skip_serializing_if = "QosConfig::is_unlimited")]
    pub qos: QosConfig,
    /// How I/O reaches an NVMe namespace's block device: through the block layer
    /// (`block`, the default) or as NVMe commands by io_uring passthrough on its
    /// generic device `/dev/ngXnY` (`passthru`).
    #[serde(default, skip_serializing_if = "IoPath::is_block")]
    pub io_path: IoPath,
}

impl NamespaceConfig {
    /// An enabled namespace with defaults.
    pub fn new(nsid: Nsid, device_path: impl Into<String>) -> Self {
        NamespaceConfig {
            nsid,
            device_path: device_path.into(),
            enable: true,
            buffered_io: false,
            block_size: None,
            uuid: None,
            nguid: None,
            anagrpid: None,
            ptpl_file: None,
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: BTreeMap::new(),
            created: false,
            auto_visible: true,
            visible_to: Vec::new(),
            qos: QosConfig::default(),
            io_path: IoPath::Block,
        }
    }

    /// The namespace's ANA group.
    pub fn anagrpid(&self) -> u32 {
        self.anagrpid
            .unwrap_or(nvmf_common::wire::ana::DEFAULT_GROUP)
    }

    /// The configured UUID's 16 bytes (big-endian, as in the Namespace Identification
    /// Descriptor), if one is configured.
    pub fn uuid_bytes(&self) -> Option<[u8; 16]> {
        self.uuid.map(|u| *u.as_bytes())
    }

    /// The configured NGUID's 16 bytes, if one is configured.
    pub fn nguid_bytes(&self) -> Option<[u8; 16]> {
        self.nguid.map(|g| g.0)
    }

    /// The namespace UUID: the configured one, or a version 8 UUID derived from a stable
    /// hash of the subsystem NQN and the nsid (the same pair always gets the same UUID).
    pub fn uuid(&self, subsystem: &Nqn) -> Uuid {
        self.uuid
            .unwrap_or_else(|| derived_uuid(subsystem.as_str(), self.nsid))
    }
}

/// The UUID [`NamespaceConfig::uuid`] derives for a namespace without one.
pub fn derived_uuid(subsystem_nqn: &str, nsid: Nsid) -> Uuid {
    let mut data = Vec::with_capacity(subsystem_nqn.len() + 5);
    data.extend_from_slice(subsystem_nqn.as_bytes());
    data.push(0);
    data.extend_from_slice(&nsid.0.to_le_bytes());
    uuid::Builder::from_custom_bytes(fnv1a128(&data).to_be_bytes()).into_uuid()
}

/// A namespace globally unique identifier (NGUID): 16 bytes, written as 32 hex digits
/// (dashes and a `0x` prefix are ignored when parsing).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Nguid(pub [u8; 16]);

impl Nguid {
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl FromStr for Nguid {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.strip_prefix("0x").unwrap_or(s);
        let hex: Vec<u8> = t.bytes().filter(|&b| b != b'-').collect();
        let bad = || format!("invalid NGUID {s:?}: expected 32 hex digits");
        if hex.len() != 32 {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let digits = std::str::from_utf8(pair).map_err(|_| bad())?;
            *byte = u8::from_str_radix(digits, 16).map_err(|_| bad())?;
        }
        Ok(Nguid(out))
    }
}

impl fmt::Display for Nguid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Nguid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nguid({self})")
    }
}

impl Serialize for Nguid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Nguid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Nguid;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an NGUID string of 32 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Nguid, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Where a configuration came from, to point errors found later at the right line.
struct Source {
    origin: String,
    /// The YAML text, when the config was parsed from one.
    text: Option<String>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.origin)
    }
}

/// The whole target configuration.
///
/// Equality compares the settings only, not where they were loaded from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub transport: TransportConfig,
    /// NVMe/TCP tuning.
    #[serde(default)]
    pub tcp: TcpConfig,
    /// NVMe/RDMA tuning (rdma and loopback ports).
    #[serde(default)]
    pub rdma: RdmaConfig,
    #[serde(default)]
    pub ports: Vec<PortConfig>,
    #[serde(default)]
    pub subsystems: Vec<SubsystemConfig>,
    /// Hosts with DH-HMAC-CHAP keys ([`HostConfig`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostConfig>,
    /// The metrics endpoint ([`MetricsConfig`]); None: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsConfig>,
    /// The remote management API ([`ManagementConfig`]); None: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<ManagementConfig>,
    /// Membership of a gateway group ([`GatewayGroupConfig`]); None: standalone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_group: Option<GatewayGroupConfig>,
    #[serde(skip)]
    source: Option<Arc<Source>>,
}

impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        self.transport == other.transport
            && self.tcp == other.tcp
            && self.rdma == other.rdma
            && self.ports == other.ports
            && self.subsystems == other.subsystems
            && self.hosts == other.hosts
            && self.metrics == other.metrics
            && self.management == other.management
            && self.gateway_group == other.gateway_group
    }
}

impl Eq for Config {}

impl Config {
    /// Reads, parses and validates the YAML file at `path`. Errors name the file as
    /// given, the line and column, and the key path.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                ConfigErrorKind::Io,
                &origin,
                None,
                String::new(),
                format!("cannot read: {e}"),
            )
        })?;
        Config::from_yaml_str(&text, &origin)
    }

    /// Parses and validates YAML `text`; `origin` (a file name) prefixes every error.
    /// Its warnings ([`Config::warnings`]) are logged: this is reading a file.
    pub fn from_yaml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config = Config::parse_yaml_str(text, origin)?;
        config.validate()?;
        for w in config.warnings() {
            tracing::warn!(origin, "{w}");
        }
        Ok(config)
    }

    /// Parses YAML `text` without the semantic checks of [`Config::validate`]: only the
    /// syntax, the keys, the types and the NQN/UUID/NGUID formats are checked.
    pub fn parse_yaml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(ConfigError::new(
                ConfigErrorKind::Parse,
                origin,
                None,
                String::new(),
                "the configuration is empty".to_string(),
            ));
        }
        let de = serde_yaml_ng::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, Config>(de) {
            Ok(mut config) => {
                config.source = Some(Arc::new(Source {
                    origin: origin.to_string(),
                    text: Some(text.to_string()),
                }));
                Ok(config)
            }
            Err(e) => Err(parse_error(text, origin, e)),
        }
    }

    /// Where this configuration came from (a file name, `<command line>`), if known.
    pub fn origin(&self) -> Option<&str> {
        self.source.as_ref().map(|s| s.origin.as_str())
    }

    /// Checks the rules YAML types cannot express (unique ids, references between
    /// ports and subsystems, limits). Returns the first problem; see
    /// [`Config::validate_all`] for all of them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.validate_all().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every problem [`Config::validate`] would report, in file order.
    pub fn validate_all(&self) -> Vec<ConfigError> {
        self.checked().0
    }

    /// What is allowed but probably not meant: a subsystem on no port, one no host
    /// may connect to, no ports at all.
    pub fn warnings(&self) -> Vec<String> {
        self.checked().1
    }

    fn checked(&self) -> (Vec<ConfigError>, Vec<String>) {
        let (origin, text) = match &self.source {
            Some(s) => (s.origin.as_str(), s.text.as_deref()),
            None => ("<config>", None),
        };
        validate::validate(self, origin, text)
    }

    /// The configuration for the common command-line case: one port of `trtype`
    /// listening on `listen` (`(traddr, trsvcid)`; default 127.0.0.1:4420 for rdma and
    /// tcp, nothing for loopback), exporting one subsystem `nqn` (default
    /// [`DEFAULT_SUBSYSTEM_NQN`]) that allows any host, with `namespaces` (device paths
    /// or `ram:SIZE`/`null:SIZE`) as nsid 1, 2, ... Default transport tuning. Validated.
    pub fn single(
        trtype: TrType,
        listen: Option<(String, String)>,
        nqn: Option<Nqn>,
        namespaces: Vec<String>,
    ) -> Result<Config, ConfigError> {
        let nqn = match nqn {
            Some(n) => n,
            None => Nqn::new(DEFAULT_SUBSYSTEM_NQN).map_err(|e| {
                ConfigError::new(
                    ConfigErrorKind::Invalid,
                    COMMAND_LINE_ORIGIN,
                    None,
                    "subsystems[0].nqn".to_string(),
                    e.to_string(),
                )
            })?,
        };
        let (traddr, trsvcid) = match listen {
            Some(l) => l,
            None if trtype.is_network() => ("127.0.0.1".to_string(), "4420".to_string()),
            None => (String::new(), String::new()),
        };
        let mut subsystem = SubsystemConfig::new(nqn.clone());
        subsystem.allow_any_host = true;
        subsystem.namespaces = namespaces
            .into_iter()
            .zip(1u32..)
            .map(|(path, nsid)| NamespaceConfig::new(Nsid(nsid), path))
            .collect();
        let config = Config {
            transport: TransportConfig::default(),
            tcp: TcpConfig::default(),
            rdma: RdmaConfig::default(),
            ports: vec![PortConfig {
                portid: 1,
                trtype,
                traddr,
                trsvcid,
                adrfam: None,
                subsystems: vec![nqn],
                referrals: Vec::new(),
                ana_groups: Vec::new(),
                tsas: Tsas::None,
                treq: None,
            }],
            subsystems: vec![subsystem],
            hosts: Vec::new(),
            metrics: None,
            management: None,
            gateway_group: None,
            source: Some(Arc::new(Source {
                origin: COMMAND_LINE_ORIGIN.to_string(),
                text: None,
            })),
        };
        config.validate()?;
        Ok(config)
    }

    /// The effective configuration as YAML, for printing: every setting with a plain
    /// default is written out; optional identifiers left unset (serial, model, uuid,
    /// nguid, block_size, adrfam) stay unset.  [`Config::from_yaml_str`] reads it back to an equal `Config`.
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        serde_yaml_ng::to_string(self).map_err(|e| {
            ConfigError::new(
                ConfigErrorKind::Io,
                self.origin().unwrap_or("<config>"),
                None,
                String::new(),
                format!("cannot print the configuration as YAML: {e}"),
            )
        })
    }

    /// The subsystem named `nqn`.
    pub fn subsystem(&self, nqn: &Nqn) -> Option<&SubsystemConfig> {
        self.subsystems.iter().find(|s| &s.nqn == nqn)
    }

    /// The port with id `portid`.
    pub fn port(&self, portid: u16) -> Option<&PortConfig> {
        self.ports.iter().find(|p| p.portid == portid)
    }
}

/// Turns a parse error into a [`ConfigError`] naming the line, column and key path.
fn parse_error(
    text: &str,
    origin: &str,
    e: serde_path_to_error::Error<serde_yaml_ng::Error>,
) -> ConfigError {
    let mut path = KeyPath(
        e.path()
            .iter()
            .map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Seg::Index(*index),
                serde_path_to_error::Segment::Map { key } => Seg::Key(key.clone()),
                serde_path_to_error::Segment::Enum { variant } => Seg::Key(variant.clone()),
                serde_path_to_error::Segment::Unknown => Seg::Key("?".to_string()),
            })
            .collect(),
    );
    let inner = e.into_inner();
    let mut location = inner.location().map(|l| (l.line(), l.column()));
    let mut message = inner.to_string();
    // serde_yaml_ng puts the location at the end and its own path at the front; both
    // are reported separately.
    if let Some((line, column)) = location {
        let at = format!(" at line {line} column {column}");
        if let Some(pos) = message.find(&at) {
            message.replace_range(pos..pos + at.len(), "");
        }
    }
    // serde_yaml_ng's path is this path or, for an error on a key, its parent.
    for n in (1..=path.segs().len()).rev() {
        let prefix = format!("{}: ", KeyPath(path.segs()[..n].to_vec()));
        if let Some(rest) = message.strip_prefix(&prefix) {
            message = rest.to_string();
            break;
        }
    }
    // Make sure an unknown key is named by the path, not only in the message.
    if let Some(key) = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
    {
        if path.segs().last() != Some(&Seg::Key(key.to_string())) {
            path = path.key(key);
        }
    }
    if location.is_none() && !path.segs().is_empty() {
        location = locate::locate_nearest(text, path.segs());
    }
    ConfigError::new(
        ConfigErrorKind::Parse,
        origin,
        location,
        path.to_string(),
        message,
    )
}

/// FNV-1a, 64-bit: a tiny hash whose value never changes between builds.
fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a, 128-bit.
fn fnv1a128(data: &[u8]) -> u128 {
    data.iter()
        .fold(0x6c62_272e_07bb_0142_62b8_2175_6295_c58du128, |h, &b| {
            (h ^ u128::from(b)).wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b)
        })
}
