//! Limits and identity the target advertises, fixed at startup.

use std::net::SocketAddr;

use crate::config::{AdrFam, PollMode, RdmaConfig, TrType, TransportConfig};

/// Transport-independent limits (from the config's `transport:` section).
#[derive(Debug, Clone)]
pub struct TargetParams {
    /// Entries per I/O queue (CAP.MQES + 1).
    pub max_queue_size: u16,
    /// Entries of the admin queue.
    pub max_admin_queue_size: u16,
    pub max_io_queues: u16,
    /// Bytes of in-capsule data a command capsule may carry (IOCCSZ - 64).
    pub in_capsule_data_size: u32,
    /// Largest transfer (MDTS).
    pub max_io_size: u32,
    pub poll_mode: PollMode,
    pub poll_groups: usize,
    /// CPUs the poll groups are pinned to, round-robin (`transport.cpus`).
    pub cpus: Option<nvmf_common::cpus::CpuList>,
    /// KATO (ms) of a discovery controller whose host asks for none.
    pub discovery_kato_ms: u32,
    /// How long a DH-HMAC-CHAP transaction may stall, in ms.
    pub auth_timeout_ms: u32,
    /// Age (ms) past which an outstanding command is reported as stuck.
    pub stuck_command_ms: u32,
    /// NVMe/RDMA tuning (the config's `rdma:` section): shared receive queues.
    pub rdma: RdmaConfig,
}

impl TargetParams {
    pub fn from_config(t: &TransportConfig) -> Self {
        TargetParams {
            max_queue_size: t.max_queue_size,
            max_admin_queue_size: t.max_admin_queue_size,
            max_io_queues: t.max_io_queues,
            in_capsule_data_size: t.in_capsule_data_size,
            max_io_size: t.max_io_size,
            poll_mode: t.poll_mode,
            poll_groups: t.poll_groups,
            cpus: t.cpus.clone(),
            discovery_kato_ms: t.keep_alive_timeout_ms,
            auth_timeout_ms: t.auth_timeout_ms,
            stuck_command_ms: t.stuck_command_ms,
            rdma: RdmaConfig::default(),
        }
    }

    /// MDTS: log2 of the max transfer in units of the 4 KiB minimum page size.
    pub fn mdts(&self) -> u8 {
        let pages = (self.max_io_size / MIN_PAGE_SIZE).max(1);
        pages.trailing_zeros() as u8
    }
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams::from_config(&TransportConfig::default())
    }
}

/// CAP.MPSMIN page size.
pub const MIN_PAGE_SIZE: u32 = 4096;

/// A port as the discovery log and Identify Controller describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub portid: u16,
    pub trtype: TrType,
    pub traddr: String,
    pub trsvcid: String,
    /// Whether the transport carries keyed SGLs (RDMA, loopback) and its SGL limits.
    pub keyed_sgls: bool,
    /// Maximum SGL data block descriptors per command.
    pub msdbd: u8,
    /// NQNs of the subsystems exported on this port.
    pub subsystems: Vec<String>,
    /// Other discovery controllers this port's discovery log refers hosts to.
    pub referrals: Vec<ReferralInfo>,
    /// ANA states of the port's groups (shared by every description of the port).
    pub ana: crate::ana::AnaRef,
    /// TLS on an NVMe/TCP port (`tsas`, `treq`).
    pub tls: crate::config::PortTls,
}

impl PortInfo {
    /// Whether `traddr` is the wildcard address (0.0.0.0 or ::): the port listens on
    /// every local address and discovery must report the one a host actually used.
    pub fn is_wildcard(&self) -> bool {
        self.traddr
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
    }

    /// The port as seen by one connection that arrived at `local`: a wildcard address
    /// and a service id of 0 (OS-chosen) are replaced by the real ones, so the discovery
    /// log names an address the host can connect to (nvmet's `disc_traddr`).
    pub fn as_seen_at(&self, local: SocketAddr) -> PortInfo {
        let mut p = self.clone();
        if self.is_wildcard() {
            p.traddr = local.ip().to_string();
        }
        if self.trsvcid.parse::<u16>() == Ok(0) {
            p.trsvcid = local.port().to_string();
        }
        p
    }
}

/// A discovery referral as the discovery log reports it (subtype: discovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferralInfo {
    pub trtype: TrType,
    pub adrfam: AdrFam,
    pub traddr: String,
    pub trsvcid: String,
    pub portid: u16,
}
