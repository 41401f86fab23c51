//! The target: its subsystems (including discovery), ports and limits.
//!
//! Built once from a [`Config`]; shared (`Arc`) by every transport listener and poll
//! group. Subsystems can be added or removed while running; the discovery generation
//! counter changes whenever the set does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use nvmf_common::config::{Config, PortConfig, TrType};
use nvmf_common::types::Nqn;

use crate::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use crate::params::{PortInfo, TargetParams};
use crate::subsystem::{ControllerModel, Namespace, Subsystem, SubsystemKind, SubsystemParams};

/// Model number reported for subsystems that do not set one.
pub const DEFAULT_MODEL: &str = "nvmf-rs";

/// Why the target could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("subsystem {nqn} namespace {nsid}: {source}")]
    Backend {
        nqn: String,
        nsid: u32,
        #[source]
        source: crate::backend::spec::OpenError,
    },
    #[error("{0}")]
    Invalid(String),
}

pub struct Target {
    pub params: Arc<TargetParams>,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    pub discovery: Arc<Subsystem>,
    ports: RwLock<Vec<Arc<PortInfo>>>,
    genctr: AtomicU64,
}

/// A serial number derived from the NQN when the config gives none (20 hex digits).
fn default_serial(nqn: &str) -> String {
    // FNV-1a: stable across runs and machines for the same NQN.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nqn.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:016x}", h)
}

/// A stable 16-byte identifier (NGUID) from (subsystem NQN, nsid, salt).
fn stable_id(nqn: &str, nsid: u32, salt: u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(salt);
    for (i, slot) in out.iter_mut().enumerate() {
        for b in nqn.bytes().chain(nsid.to_le_bytes()).chain([i as u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        *slot = (h >> 24) as u8;
    }
    out
}

impl Target {
    /// An empty target with the discovery subsystem only.
    pub fn new(params: TargetParams) -> Arc<Self> {
        let discovery = Subsystem::new(SubsystemParams {
            nqn: Nqn::discovery(),
            kind: SubsystemKind::Discovery,
            serial: default_serial(nvmf_common::types::DISCOVERY_NQN),
            model: DEFAULT_MODEL.to_string(),
            allow_any_host: true,
            allowed_hosts: Vec::new(),
            cntlid_min: 1,
            cntlid_max: 0xFFEF,
            controller_model: ControllerModel::Dynamic,
        });
        Arc::new(Target {
            params: Arc::new(params),
            subsystems: RwLock::new(BTreeMap::new()),
            discovery,
            ports: RwLock::new(Vec::new()),
            genctr: AtomicU64::new(1),
        })
    }

    /// Builds the target from a validated config, opening every backend. A backend that
    /// cannot be opened stops startup with an error naming it.
    pub fn from_config(cfg: &Config) -> Result<Arc<Self>, StartError> {
        let target = Target::new(TargetParams::from_config(&cfg.transport));
        for s in &cfg.subsystems {
            let sub = Subsystem::new(SubsystemParams {
                serial: s.serial(),
                model: s.model().to_string(),
                nqn: s.nqn.clone(),
                kind: SubsystemKind::Nvm,
                allow_any_host: s.allow_any_host,
                allowed_hosts: s.allowed_hosts.clone(),
                cntlid_min: s.cntlid_min.0,
                cntlid_max: s.cntlid_max.0,
                controller_model: s.controller_model,
            });
            for n in s.namespaces.iter().filter(|n| n.enable) {
                let spec: NamespaceSpec = n
                    .device_path
                    .parse()
                    .map_err(|e: String| StartError::Invalid(format!("{}: {e}", n.device_path)))?;
                let backend = open_backend(
                    &spec,
                    &OpenOptions {
                        buffered_io: n.buffered_io,
                        block_size: n.block_size,
                        min_size: 0,
                    },
                )
                .map_err(|source| StartError::Backend {
                    nqn: s.nqn.to_string(),
                    nsid: n.nsid.0,
                    source,
                })?;
                let uuid = *n.uuid(&s.nqn).as_bytes();
                let nguid = n
                    .nguid_bytes()
                    .unwrap_or_else(|| stable_id(s.nqn.as_str(), n.nsid.0, 1));
                sub.add_namespace(Namespace::new(n.nsid, backend, uuid, nguid))
                    .map_err(StartError::Invalid)?;
            }
            target.add_subsystem(sub);
        }
        for p in &cfg.ports {
            target.add_port(port_info(p));
        }
        Ok(target)
    }

    pub fn add_subsystem(&self, s: Arc<Subsystem>) {
        self.subsystems
            .write()
            .insert(s.nqn.as_str().to_string(), s);
        self.bump_genctr();
    }

    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let s = self.subsystems.write().remove(nqn);
        if s.is_some() {
            self.bump_genctr();
        }
        s
    }

    pub fn add_port(&self, p: PortInfo) -> Arc<PortInfo> {
        let p = Arc::new(p);
        self.ports.write().push(p.clone());
        self.bump_genctr();
        p
    }

    pub fn ports(&self) -> Vec<Arc<PortInfo>> {
        self.ports.read().clone()
    }

    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.subsystems.read().values().cloned().collect()
    }

    /// Finds a subsystem (or the discovery subsystem) by NQN.
    pub fn find_subsystem(&self, nqn: &Nqn) -> Option<Arc<Subsystem>> {
        if nqn.is_discovery() {
            return Some(self.discovery.clone());
        }
        self.subsystems.read().get(nqn.as_str()).cloned()
    }

    pub fn subsystem_by_name(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems.read().get(nqn).cloned()
    }

    pub fn genctr(&self) -> u64 {
        self.genctr.load(Ordering::Acquire)
    }

    /// Records a change of anything the discovery log lists and tells discovery hosts.
    pub fn bump_genctr(&self) {
        self.genctr.fetch_add(1, Ordering::AcqRel);
        for c in self.discovery.controllers() {
            c.discovery_changed();
        }
    }
}

/// The port description used by discovery and Identify Controller.
pub fn port_info(p: &PortConfig) -> PortInfo {
    PortInfo {
        portid: p.portid,
        trtype: p.trtype,
        traddr: p.traddr.clone(),
        trsvcid: p.trsvcid.clone(),
        keyed_sgls: matches!(p.trtype, TrType::Rdma | TrType::Loopback),
        msdbd: 1,
        subsystems: p
            .subsystems
            .iter()
            .map(|n| n.as_str().to_string())
            .collect(),
    }
}
