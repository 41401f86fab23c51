//! NVM subsystems.
//!
//! A [`Subsystem`] owns its namespaces ([`crate::namespace`]) and the set of live
//! controllers (their ids here; the typed view, and what the subsystem tells them, in
//! [`crate::subsystem_ctrls`]). It is shared (`Arc`) by the target and every controller of
//! it. Namespaces are `Arc`s so that a
//! namespace removed while I/O runs stays alive until that I/O completes.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use nvmf_common::types::{Cntlid, Nqn, Nsid};

use crate::namespace::retire_namespace;
use crate::passthru::serve::{PassthruSubsystem, ServedNamespaces};
// Namespaces have a file of their own; the integration tests (and embedders) name
// them here, where they lived before.
pub use crate::namespace::Namespace;

/// Largest NSID a subsystem accepts (Identify Controller NN).
pub const MAX_NAMESPACES: u32 = 1024;

/// Whether a subsystem is an NVM subsystem or the discovery subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubsystemKind {
    Nvm,
    Discovery,
}

pub use crate::config::ControllerModel;

/// Static identity and policy of a subsystem.
#[derive(Debug, Clone)]
pub struct SubsystemParams {
    pub nqn: Nqn,
    pub kind: SubsystemKind,
    pub serial: String,
    pub model: String,
    pub allow_any_host: bool,
    pub allowed_hosts: Vec<Nqn>,
    pub cntlid_min: u16,
    pub cntlid_max: u16,
    pub controller_model: ControllerModel,
}

pub struct Subsystem {
    pub nqn: Nqn,
    pub kind: SubsystemKind,
    pub serial: String,
    pub model: String,
    pub controller_model: ControllerModel,
    allow_any_host: RwLock<bool>,
    hosts: RwLock<HashSet<Nqn>>,
    namespaces: RwLock<BTreeMap<u32, Arc<Namespace>>>,
    pub(crate) ctrls: Mutex<CtrlTable>,
    /// The device of a passthru subsystem, whose namespaces these are.
    passthru: std::sync::OnceLock<Arc<PassthruSubsystem>>,
}

pub(crate) struct CtrlTable {
    next: u16,
    min: u16,
    max: u16,
    /// Live controllers by id, each a `Controller` (typed in `crate::subsystem_ctrls`, so
    /// that this file, below `controller.rs`, does not name it).
    pub(crate) live: HashMap<u16, Weak<dyn Any + Send + Sync>>,
}

impl Subsystem {
    pub fn new(p: SubsystemParams) -> Arc<Self> {
        let min = p.cntlid_min.max(Cntlid::MIN.0);
        let max = p.cntlid_max.clamp(min, Cntlid::MAX.0);
        Arc::new(Subsystem {
            nqn: p.nqn,
            kind: p.kind,
            serial: p.serial,
            model: p.model,
            controller_model: p.controller_model,
            allow_any_host: RwLock::new(p.allow_any_host),
            hosts: RwLock::new(p.allowed_hosts.into_iter().collect()),
            namespaces: RwLock::new(BTreeMap::new()),
            passthru: std::sync::OnceLock::new(),
            ctrls: Mutex::new(CtrlTable {
                next: min,
                min,
                max,
                live: HashMap::new(),
            }),
        })
    }

    /// The device this subsystem passes commands to, if it is a passthru subsystem.
    #[inline]
    pub fn passthru(&self) -> Option<&Arc<PassthruSubsystem>> {
        self.passthru.get()
    }

    /// Makes this a passthru subsystem of `dev` and adds the device's namespaces;
    /// once only.
    pub fn attach_passthru(self: &Arc<Self>, dev: Arc<PassthruSubsystem>) -> Result<(), String> {
        self.passthru
            .set(dev.clone())
            .map_err(|_| format!("{} already has a passthru device", self.nqn))?;
        let me: Arc<dyn ServedNamespaces> = self.clone();
        dev.attach(&me)
    }

    pub fn is_discovery(&self) -> bool {
        self.kind == SubsystemKind::Discovery
    }

    /// Whether `host` may connect (and see this subsystem in discovery).
    pub fn host_allowed(&self, host: &Nqn) -> bool {
        *self.allow_any_host.read() || self.hosts.read().contains(host)
    }

    pub fn set_allow_any_host(&self, v: bool) {
        *self.allow_any_host.write() = v;
    }

    pub fn add_host(&self, host: Nqn) {
        self.hosts.write().insert(host);
    }

    pub fn remove_host(&self, host: &Nqn) -> bool {
        self.hosts.write().remove(host)
    }

    pub fn allowed_hosts(&self) -> Vec<Nqn> {
        self.hosts.read().iter().cloned().collect()
    }

    pub fn allows_any_host(&self) -> bool {
        *self.allow_any_host.read()
    }

    pub fn namespace(&self, nsid: Nsid) -> Option<Arc<Namespace>> {
        self.namespaces.read().get(&nsid.0).cloned()
    }

    /// Active namespace ids in increasing order.
    pub fn active_nsids(&self) -> Vec<u32> {
        self.namespaces.read().keys().copied().collect()
    }

    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces.read().values().cloned().collect()
    }

    /// Adds a namespace; fails if the NSID is taken or out of range. Connected
    /// controllers get a Namespace Attribute Changed event.
    pub fn add_namespace(&self, ns: Namespace) -> Result<(), String> {
        let nsid = ns.nsid;
        if nsid.0 == 0 || nsid.0 > MAX_NAMESPACES {
            return Err(format!("nsid {} out of range 1..={}", nsid, MAX_NAMESPACES));
        }
        {
            let mut map = self.namespaces.write();
            if map.contains_key(&nsid.0) {
                return Err(format!("nsid {} already exists in {}", nsid, self.nqn));
            }
            map.insert(nsid.0, Arc::new(ns));
        }
        self.notify_ns_changed(nsid, &|_| false);
        Ok(())
    }

    /// Removes a namespace; in-flight I/O keeps its `Arc` until it completes.
    pub fn remove_namespace(&self, nsid: Nsid) -> Option<Arc<Namespace>> {
        let ns = self.namespaces.write().remove(&nsid.0);
        if let Some(n) = &ns {
            // Before returning: no command executes on it from now on.
            n.mark_removed();
            retire_namespace();
            self.notify_ns_changed(nsid, &|h| n.visible_to(h));
        }
        ns
    }

    /// Swaps the namespace with `ns.nsid` for `ns` in one step (a resize: the backend
    /// was reopened at its new size). Commands already running finish on the old one.
    /// Connected controllers get one Namespace Attribute Changed event.
    pub fn replace_namespace(&self, mut ns: Namespace) -> Result<Arc<Namespace>, String> {
        let nsid = ns.nsid;
        if let Some(old) = self.namespace(nsid) {
            // Registrations and the reservation belong to the namespace, not to the
            // backend instance that serves it.
            ns.resv = old.resv.clone();
            // So are the QoS budgets and counters; the new limits apply to them.
            old.qos.set(&ns.qos.limits());
            ns.qos = old.qos.clone();
        }
        let old = {
            let mut map = self.namespaces.write();
            let Some(slot) = map.get_mut(&nsid.0) else {
                return Err(format!("nsid {} does not exist in {}", nsid, self.nqn));
            };
            std::mem::replace(slot, Arc::new(ns))
        };
        retire_namespace();
        self.notify_ns_changed(nsid, &|h| old.visible_to(h));
        Ok(old)
    }

    /// Replaces the host policy: allow-any-host and the allowed host NQNs.
    /// Controllers already connected stay connected (as with nvmet).
    pub fn set_host_policy(&self, allow_any_host: bool, hosts: &[Nqn]) {
        *self.allow_any_host.write() = allow_any_host;
        *self.hosts.write() = hosts.iter().cloned().collect();
    }

    /// Syncs every namespace's backend (shutdown: SIGTERM or CC.SHN). Returns how many
    /// synced without error; failures are logged.
    pub fn sync_namespaces(&self) -> usize {
        let mut ok = 0;
        for ns in self.namespaces() {
            match ns.backend.sync() {
                Ok(()) => ok += 1,
                Err(e) => {
                    tracing::error!(subnqn = %self.nqn, nsid = %ns.nsid, "backend sync failed: {e}")
                }
            }
        }
        ok
    }

    /// Instances of the namespaces served now (backend channel cache keys).
    pub fn namespace_instances(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .namespaces
            .read()
            .values()
            .map(|n| n.instance)
            .collect();
        // A passthru subsystem's admin commands have a channel of their own.
        v.extend(self.passthru().map(|p| p.admin_instance));
        v
    }

    /// Whether `id` lies in this subsystem's controller id range (configfs
    /// `attr_cntlid_min`..=`attr_cntlid_max`).
    pub fn cntlid_in_range(&self, id: Cntlid) -> bool {
        let t = self.ctrls.lock();
        (t.min..=t.max).contains(&id.0)
    }

    /// Allocates a controller id. `requested` is the Connect data CNTLID.
    /// Returns None when the range is exhausted or a static id is taken.
    pub fn alloc_cntlid(&self, requested: Cntlid) -> Option<Cntlid> {
        let mut t = self.ctrls.lock();
        t.live.retain(|_, w| w.strong_count() > 0);
        if requested != Cntlid::DYNAMIC && requested != Cntlid::STATIC_ANY {
            let free = (t.min..=t.max).contains(&requested.0) && !t.live.contains_key(&requested.0);
            return free.then_some(requested);
        }
        let span = u32::from(t.max - t.min) + 1;
        for _ in 0..span {
            let id = t.next;
            t.next = if id >= t.max { t.min } else { id + 1 };
            if !t.live.contains_key(&id) {
                return Some(Cntlid(id));
            }
        }
        None
    }

    pub fn unregister_controller(&self, cntlid: Cntlid) {
        self.ctrls.lock().live.remove(&cntlid.0);
    }
}

/// What a passthru device's rescans change ([`PassthruSubsystem`]).
impl ServedNamespaces for Subsystem {
    fn nqn(&self) -> &Nqn {
        &self.nqn
    }
    fn active_nsids(&self) -> Vec<u32> {
        Subsystem::active_nsids(self)
    }
    fn contains(&self, nsid: Nsid) -> bool {
        self.namespace(nsid).is_some()
    }
    fn add(&self, ns: Namespace) -> Result<(), String> {
        self.add_namespace(ns)
    }
    fn replace(&self, ns: Namespace) -> Result<(), String> {
        self.replace_namespace(ns).map(|_| ())
    }
    fn remove(&self, nsid: Nsid) {
        self.remove_namespace(nsid);
    }
}
