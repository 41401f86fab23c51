//! The target: its subsystems (including discovery), ports and limits.
//!
//! Built once from a [`Config`]; shared (`Arc`) by every transport listener and poll
//! group. Subsystems can be added or removed while running; the discovery generation
//! counter changes whenever the set does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::config::{Config, NamespaceConfig, PortConfig, SubsystemConfig, TrType};
use nvmf_common::types::Nqn;

use crate::backend::spec::{open_backend, NamespaceSpec, OpenOptions, RbdOptions};
use crate::namespace::Namespace;
use crate::params::{PortInfo, ReferralInfo, TargetParams};
use crate::subsystem::{ControllerModel, Subsystem, SubsystemKind, SubsystemParams};

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
    /// DH-HMAC-CHAP policies of the configured hosts.
    pub hosts: crate::auth::HostAuthDb,
    /// ANA states per port.
    pub ana: crate::ana::AnaPorts,
    /// What the data path counts, for the metrics endpoint and `ctl top`.
    pub metrics: crate::metrics::Registry,
    /// What happened, for subscribers (the management API's event stream).
    pub events: crate::events::EventBus,
    /// LBA range locks across poll groups (fused Compare and Write).
    pub locks: crate::locks::RangeLocks,
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
            hosts: crate::auth::HostAuthDb::default(),
            ana: crate::ana::AnaPorts::default(),
            metrics: crate::metrics::Registry::default(),
            events: crate::events::EventBus::default(),
            locks: crate::locks::RangeLocks::default(),
        })
    }

    /// Builds the target from a validated config, opening every backend. A backend that
    /// cannot be opened stops startup with an error naming it.
    pub fn from_config(cfg: &Config) -> Result<Arc<Self>, StartError> {
        let mut params = TargetParams::from_config(&cfg.transport);
        params.rdma = cfg.rdma.clone();
        let target = Target::new(params);
        for s in &cfg.subsystems {
            target.add_subsystem(build_subsystem(s)?);
        }
        for p in &cfg.ports {
            let info = target.port_info(p);
            info.ana.0.apply(&p.ana_groups);
            target.add_port(info);
        }
        let policies = crate::auth::HostPolicies::build(&cfg.hosts).map_err(StartError::Invalid)?;
        target.hosts.replace(policies);
        Ok(target)
    }

    /// Adds (or replaces) a subsystem. Discovery hosts on the ports that export it
    /// are told.
    pub fn add_subsystem(&self, s: Arc<Subsystem>) {
        let nqn = s.nqn.as_str().to_string();
        let old = self.subsystems.write().insert(nqn.clone(), s.clone());
        // Only hosts allowed on the new (or the replaced) subsystem see a change.
        self.discovery_changed_for(DiscoveryScope::Exporting(&nqn), &|h| {
            s.host_allowed(h) || old.as_ref().is_some_and(|o| o.host_allowed(h))
        });
    }

    /// Removes a subsystem; its controllers are ended (their queues tear down).
    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let s = self.subsystems.write().remove(nqn);
        if let Some(sub) = &s {
            for c in sub.controllers() {
                c.fatal("subsystem removed");
            }
            // Its namespaces are no longer served: poll groups close the backend
            // channels (and descriptors) they opened for them.
            crate::namespace::retire_namespace();
            self.discovery_changed_for(DiscoveryScope::Exporting(nqn), &|h| sub.host_allowed(h));
        }
        s
    }

    /// Adds a port, or replaces the one with the same port id (its subsystem links and
    /// referrals changed).
    pub fn add_port(&self, p: PortInfo) -> Arc<PortInfo> {
        let p = Arc::new(p);
        {
            let mut ports = self.ports.write();
            match ports.iter_mut().find(|q| q.portid == p.portid) {
                Some(slot) => *slot = p.clone(),
                None => ports.push(p.clone()),
            }
        }
        self.discovery_changed(DiscoveryScope::Port(p.portid));
        p
    }

    /// Removes a port; controllers that connected through it are ended.
    pub fn remove_port(&self, portid: u16) -> Option<Arc<PortInfo>> {
        let removed = {
            let mut ports = self.ports.write();
            let i = ports.iter().position(|q| q.portid == portid)?;
            ports.remove(i)
        };
        for s in self.subsystems().iter().chain([&self.discovery]) {
            for c in s.controllers() {
                if c.port.portid == portid {
                    c.fatal("port removed");
                }
            }
        }
        self.discovery_changed(DiscoveryScope::Port(portid));
        Some(removed)
    }

    pub fn ports(&self) -> Vec<Arc<PortInfo>> {
        self.ports.read().clone()
    }

    /// The current description of port `portid`.
    pub fn port(&self, portid: u16) -> Option<Arc<PortInfo>> {
        self.ports
            .read()
            .iter()
            .find(|p| p.portid == portid)
            .cloned()
    }

    /// Whether port `portid` currently exports subsystem `nqn` (configfs
    /// `ports/N/subsystems` link). The discovery subsystem is reachable on every port.
    pub fn port_exports(&self, portid: u16, nqn: &Nqn) -> bool {
        nqn.is_discovery()
            || self
                .port(portid)
                .is_some_and(|p| p.subsystems.iter().any(|s| s == nqn.as_str()))
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

    /// Records a change of anything a discovery log lists: the generation counter
    /// moves, and discovery controllers connected through an affected port get a
    /// Discovery Log Page Change notice (if they enabled it), as nvmet's
    /// `nvmet_port_disc_changed` does.
    pub fn discovery_changed(&self, scope: DiscoveryScope<'_>) {
        self.discovery_changed_for(scope, &|_| true);
    }

    /// [`Target::discovery_changed`], with the notice sent only to the discovery
    /// hosts for which `view_changed` holds (a subsystem or its host list changed:
    /// hosts never allowed on it before or after see the same log as before).
    pub fn discovery_changed_for(
        &self,
        scope: DiscoveryScope<'_>,
        view_changed: &dyn Fn(&Nqn) -> bool,
    ) {
        self.genctr.fetch_add(1, Ordering::AcqRel);
        let affected: Option<Vec<u16>> = match scope {
            DiscoveryScope::All => None,
            DiscoveryScope::Port(id) => Some(vec![id]),
            DiscoveryScope::Exporting(nqn) => Some(
                self.ports
                    .read()
                    .iter()
                    .filter(|p| p.subsystems.iter().any(|s| s == nqn))
                    .map(|p| p.portid)
                    .collect(),
            ),
        };
        for c in self.discovery.controllers() {
            if affected
                .as_ref()
                .is_none_or(|ids| ids.contains(&c.port.portid))
                && view_changed(&c.hostnqn)
            {
                c.discovery_changed();
            }
        }
    }

    /// Makes every namespace's completed writes durable (shutdown). Returns how many
    /// namespaces were synced; failures are logged with the namespace they concern.
    pub fn sync_backends(&self) -> usize {
        let mut n = 0;
        for s in self.subsystems() {
            n += s.sync_namespaces();
        }
        n
    }

    /// [`Target::discovery_changed`] for every port.
    pub fn bump_genctr(&self) {
        self.discovery_changed(DiscoveryScope::All);
    }
}

/// Which discovery logs a change affects.
#[derive(Debug, Clone, Copy)]
pub enum DiscoveryScope<'a> {
    /// Every port's.
    All,
    /// One port's (a port added, removed, its links or referrals changed).
    Port(u16),
    /// Those of the ports exporting this subsystem (a subsystem or its hosts changed).
    Exporting(&'a str),
}

/// A subsystem as `s` describes it, with every enabled namespace's backend open.
pub fn build_subsystem(s: &SubsystemConfig) -> Result<Arc<Subsystem>, StartError> {
    let sub = Subsystem::new(subsystem_params(s));
    if let Some(p) = &s.passthru {
        let dev = crate::passthru::serve::PassthruSubsystem::open(p)
            .map_err(|e| StartError::Invalid(format!("subsystem {}: passthru: {e}", s.nqn)))?;
        sub.attach_passthru(dev)
            .map_err(|e| StartError::Invalid(format!("subsystem {}: passthru: {e}", s.nqn)))?;
        return Ok(sub);
    }
    for n in s.namespaces.iter().filter(|n| n.enable) {
        sub.add_namespace(build_namespace(&s.nqn, n)?)
            .map_err(StartError::Invalid)?;
    }
    Ok(sub)
}

/// The identity and host policy of subsystem `s`.
pub fn subsystem_params(s: &SubsystemConfig) -> SubsystemParams {
    SubsystemParams {
        serial: s.serial(),
        model: s.model().to_string(),
        nqn: s.nqn.clone(),
        kind: SubsystemKind::Nvm,
        allow_any_host: s.allow_any_host,
        allowed_hosts: s.allowed_hosts.clone(),
        cntlid_min: s.cntlid_min.0,
        cntlid_max: s.cntlid_max.0,
        controller_model: s.controller_model,
    }
}

/// Opens the backend of namespace `n` of subsystem `subnqn` and binds it to its NSID
/// (with its configured or derived UUID and NGUID).
pub fn build_namespace(subnqn: &Nqn, n: &NamespaceConfig) -> Result<Namespace, StartError> {
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
            rbd: RbdOptions::of(n),
        },
    )
    .map_err(|source| StartError::Backend {
        nqn: subnqn.to_string(),
        nsid: n.nsid.0,
        source,
    })?;
    let backend = match n.io_path {
        crate::config::IoPath::Block => backend,
        crate::config::IoPath::Passthru => {
            let path = std::path::Path::new(&n.device_path);
            let node = crate::passthru::block_path::generic_of_block(path).map_err(|e| {
                StartError::Invalid(format!("{subnqn} nsid {}: io_path passthru: {e}", n.nsid))
            })?;
            tracing::info!(subnqn = %subnqn, nsid = %n.nsid, generic = %node.path.display(), max_transfer = node.max_transfer, "I/O by io_uring NVMe passthrough");
            Arc::new(crate::passthru::block_path::PassthruIoBackend::new(
                backend, node,
            ))
        }
    };
    let uuid = *n.uuid(subnqn).as_bytes();
    let nguid = n
        .nguid_bytes()
        .unwrap_or_else(|| stable_id(subnqn.as_str(), n.nsid.0, 1));
    Ok(Namespace::new(n.nsid, backend, uuid, nguid)
        .with_anagrpid(n.anagrpid())
        .with_ptpl_file(n.ptpl_file.clone())
        .with_visibility(n.auto_visible, &n.visible_to)
        .with_qos(&n.qos))
}

impl Target {
    /// The description of port `p`, sharing the port's ANA states.
    pub fn port_info(&self, p: &PortConfig) -> PortInfo {
        port_info(p, self.ana.for_port(p.portid))
    }

    /// Applies port `p`'s ANA states; controllers connected through it that changed
    /// get an ANA change notice, and event subscribers one AnaChanged per group that
    /// changed. Returns what changed, for the log.
    pub fn apply_ana(&self, p: &PortConfig) -> Vec<String> {
        let changed = self.ana.for_port(p.portid).0.apply(&p.ana_groups);
        if changed.is_empty() {
            return Vec::new();
        }
        for s in self.subsystems() {
            for c in s.controllers() {
                if c.port.portid == p.portid {
                    c.ana_changed();
                }
            }
        }
        let mut lines = Vec::with_capacity(changed.len());
        for (grpid, state) in changed {
            self.events.emit(crate::events::TargetEvent::AnaChanged {
                portid: p.portid,
                grpid,
                state,
            });
            lines.push(format!("port {}: ANA group {grpid} is {state}", p.portid));
        }
        lines
    }
}

/// The port description used by discovery and Identify Controller.
pub fn port_info(p: &PortConfig, ana: crate::ana::AnaRef) -> PortInfo {
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
        referrals: p
            .referrals
            .iter()
            .map(|r| ReferralInfo {
                trtype: r.trtype,
                adrfam: r.adrfam(),
                traddr: r.traddr.clone(),
                trsvcid: r.trsvcid.clone(),
                portid: r.portid,
            })
            .collect(),
        ana,
        tls: p.tls(),
    }
}
