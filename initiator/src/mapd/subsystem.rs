//! One subsystem followed: a watcher controller on its own thread keeps every
//! namespace mapped and in step with the target.
//!
//! Owned by the daemon, one per subsystem found by discovery. The watcher connects an
//! admin-only controller over the first path that answers, enables Namespace
//! Attribute Changed notices and keeps an Asynchronous Event Request outstanding.
//! At connect and after each notice it reads the active namespaces and reconciles:
//! a new namespace gets a [`Mapping`], a removed one is drained and unmapped, one
//! whose size changed is drained and mapped again at its new size (NBD clients see a
//! size only at their handshake). A lost watcher is reconnected every
//! `reconnect_delay`; the mappings meanwhile go on (each has its own controller and
//! its own reconnect policy). A mapping that ended by itself (its controller lost past
//! `ctrl_loss_tmo`) is started again at the next reconcile after `reconnect_delay`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{info, warn};

use nvmf_common::types::Nqn;
use nvmf_common::wire::admin::aen_cfg;

use crate::autoconnect::{Connector, Profile, SubsystemPath};
use crate::controller::{AsyncEvent, Controller, NamespaceInfo};
use crate::error::Error;
use crate::map::Stopper;
use crate::transport::Fabric;

use super::mapping::{MapTarget, Mapping};
use super::status::{Board, PathStatus};
use super::Mode;

/// How often the watcher looks for events and ended mappings.
const WATCH_TICK: Duration = Duration::from_millis(100);

/// A path's address and its fabric (or why there is none).
type PathFabric = (String, Result<Arc<dyn Fabric>, Error>);

/// What a watcher needs to know about its subsystem.
pub struct WatchSpec {
    pub subnqn: String,
    pub profile: Profile,
    pub connector: Arc<dyn Connector>,
    pub mode: Mode,
    pub io_queues: u16,
    pub depth: Option<usize>,
    pub board: Board,
}

/// A running watcher.
pub struct SubsystemWatch {
    paths: Arc<Mutex<Vec<SubsystemPath>>>,
    stop: Arc<Stopper>,
    join: Option<JoinHandle<()>>,
}

impl SubsystemWatch {
    pub fn start(spec: WatchSpec, paths: Vec<SubsystemPath>) -> Result<SubsystemWatch, Error> {
        let paths = Arc::new(Mutex::new(paths));
        let stop = Arc::new(Stopper::new()?);
        let (p2, s2) = (paths.clone(), stop.clone());
        let join = std::thread::Builder::new()
            .name("mapd-watch".into())
            .spawn(move || Watcher::new(spec, p2, s2).run())?;
        Ok(SubsystemWatch {
            paths,
            stop,
            join: Some(join),
        })
    }

    /// The paths discovery lists now (used from the next connection on).
    pub fn set_paths(&self, paths: Vec<SubsystemPath>) {
        *self.paths.lock() = paths;
    }

    /// Unmaps every namespace (draining each) and ends the watcher.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        self.stop.trigger();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for SubsystemWatch {
    fn drop(&mut self) {
        self.finish();
    }
}

struct Watcher {
    spec: WatchSpec,
    paths: Arc<Mutex<Vec<SubsystemPath>>>,
    stop: Arc<Stopper>,
    ctrl: Option<Controller>,
    /// The namespaces the target reported last.
    seen: Vec<NamespaceInfo>,
    mappings: BTreeMap<u32, Mapping>,
    /// Namespaces whose mapping ended by itself, and when they may be tried again.
    retry_at: BTreeMap<u32, Instant>,
    next_connect: Instant,
}

impl Watcher {
    fn new(spec: WatchSpec, paths: Arc<Mutex<Vec<SubsystemPath>>>, stop: Arc<Stopper>) -> Self {
        Watcher {
            spec,
            paths,
            stop,
            ctrl: None,
            seen: Vec::new(),
            mappings: BTreeMap::new(),
            retry_at: BTreeMap::new(),
            next_connect: Instant::now(),
        }
    }

    fn run(mut self) {
        while !self.stop.is_triggered() {
            if self.ctrl.is_none() && Instant::now() >= self.next_connect {
                self.connect();
            }
            self.follow();
            self.reap();
            self.stop.sleep(WATCH_TICK);
        }
        // Drain and unmap every namespace, then the watcher's controller goes.
        for (_, m) in std::mem::take(&mut self.mappings) {
            m.stop();
        }
        if let Some(c) = self.ctrl.take() {
            let _ = c.shutdown();
        }
        self.spec.board.remove_subsystem(&self.spec.subnqn);
    }

    fn reconnect_delay(&self) -> Duration {
        self.spec.profile.reconnect.reconnect_delay
    }

    /// Every path's fabric, in discovery order.
    fn fabrics(&self) -> Vec<PathFabric> {
        let paths = self.paths.lock().clone();
        paths
            .iter()
            .map(|p| {
                let tls = p.requires_tls() || self.spec.profile.tls_psk.is_some();
                let f =
                    self.spec
                        .connector
                        .fabric(&p.addr, &self.spec.subnqn, &self.spec.profile, tls);
                (p.addr.to_string(), f)
            })
            .collect()
    }

    fn connect(&mut self) {
        let nqn = match Nqn::new(self.spec.subnqn.as_str()) {
            Ok(n) => n,
            Err(e) => {
                warn!(subnqn = %self.spec.subnqn, "not a valid subsystem NQN: {e}");
                self.next_connect = Instant::now() + self.reconnect_delay();
                return;
            }
        };
        let mut o = self.spec.profile.io_options(&nqn, 0);
        o.nr_io_queues = 0;
        let mut states = Vec::new();
        let mut connected = None;
        for (addr, f) in self.fabrics() {
            if connected.is_some() {
                states.push(PathStatus {
                    address: addr,
                    state: "standby".into(),
                });
                continue;
            }
            let r = f.and_then(|f| {
                let c = Controller::connect(f, o.clone())?;
                c.enable_events(aen_cfg::NS_ATTR)?;
                Ok(c)
            });
            match r {
                Ok(c) => {
                    connected = Some(c);
                    states.push(PathStatus {
                        address: addr,
                        state: "live".into(),
                    });
                }
                Err(e) => states.push(PathStatus {
                    address: addr,
                    state: format!("down: {e}"),
                }),
            }
        }
        self.spec.board.set_paths(&self.spec.subnqn, states);
        match connected {
            Some(c) => {
                info!(subnqn = %self.spec.subnqn, namespaces = c.namespaces().len(), "subsystem watched");
                self.seen = c.namespaces().to_vec();
                self.ctrl = Some(c);
                self.reconcile();
            }
            None => {
                warn!(subnqn = %self.spec.subnqn, "no path answered; trying again in {:?}", self.reconnect_delay());
                self.next_connect = Instant::now() + self.reconnect_delay();
            }
        }
    }

    /// Reads events; a namespace notice means a rescan and a reconcile.
    fn follow(&mut self) {
        let Some(c) = self.ctrl.as_mut() else {
            return;
        };
        let changed = match c.poll_events() {
            Ok(evs) => evs
                .iter()
                .any(|e| matches!(e, AsyncEvent::NamespacesChanged(_))),
            Err(e) => return self.lost(e),
        };
        if !c.is_alive() {
            return self.lost(Error::Protocol("keep-alive failed".into()));
        }
        if changed {
            match c.rescan_namespaces() {
                Ok(list) => {
                    info!(subnqn = %self.spec.subnqn, namespaces = list.len(), "namespaces changed");
                    self.seen = list.to_vec();
                    self.reconcile();
                }
                Err(e) => self.lost(e),
            }
        }
    }

    fn lost(&mut self, e: Error) {
        warn!(subnqn = %self.spec.subnqn, "watcher controller lost: {e}");
        self.ctrl = None;
        let paths = self.paths.lock().clone();
        let states = paths
            .iter()
            .map(|p| PathStatus {
                address: p.addr.to_string(),
                state: format!("down: {e}"),
            })
            .collect();
        self.spec.board.set_paths(&self.spec.subnqn, states);
        self.next_connect = Instant::now() + self.reconnect_delay();
    }

    /// Mappings that ended by themselves are forgotten (tried again later).
    fn reap(&mut self) {
        let ended: Vec<u32> = self
            .mappings
            .iter()
            .filter(|(_, m)| m.is_finished())
            .map(|(&n, _)| n)
            .collect();
        if ended.is_empty() {
            if self.ctrl.is_some() && self.retry_at.values().any(|&t| t <= Instant::now()) {
                self.reconcile();
            }
            return;
        }
        let again = Instant::now() + self.reconnect_delay();
        for n in ended {
            self.mappings.remove(&n);
            self.retry_at.insert(n, again);
        }
    }

    /// Brings the mappings in line with `seen`.
    fn reconcile(&mut self) {
        let now = Instant::now();
        let wanted: BTreeMap<u32, &NamespaceInfo> =
            self.seen.iter().map(|n| (n.nsid.0, n)).collect();
        let gone: Vec<u32> = self
            .mappings
            .iter()
            .filter(|(n, m)| {
                wanted
                    .get(n)
                    .is_none_or(|ns| ns.size_bytes() != m.size_bytes)
            })
            .map(|(&n, _)| n)
            .collect();
        for n in gone {
            if let Some(m) = self.mappings.remove(&n) {
                info!(subnqn = %self.spec.subnqn, nsid = n, name = %m.name, "unmapping");
                m.stop();
            }
            self.spec
                .board
                .remove_ns(&self.spec.subnqn, nvmf_common::types::Nsid(n));
        }
        self.retry_at.retain(|n, _| wanted.contains_key(n));
        let fabrics: Vec<Arc<dyn Fabric>> = self
            .fabrics()
            .into_iter()
            .filter_map(|(_, f)| f.ok())
            .collect();
        let Ok(nqn) = Nqn::new(self.spec.subnqn.as_str()) else {
            return;
        };
        let target = MapTarget {
            subnqn: self.spec.subnqn.clone(),
            fabrics,
            opts: self.spec.profile.io_options(&nqn, self.spec.io_queues),
            policy: self.spec.profile.reconnect,
            mode: self.spec.mode.clone(),
            depth: self.spec.depth,
            board: self.spec.board.clone(),
        };
        for (n, ns) in wanted {
            if self.mappings.contains_key(&n) || self.retry_at.get(&n).is_some_and(|&t| t > now) {
                continue;
            }
            self.retry_at.remove(&n);
            match Mapping::start(&target, ns) {
                Ok(m) => {
                    self.mappings.insert(n, m);
                }
                Err(e) => warn!(subnqn = %self.spec.subnqn, nsid = n, "mapping not started: {e}"),
            }
        }
    }
}
