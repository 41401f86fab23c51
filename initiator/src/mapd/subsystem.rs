//! One subsystem followed: watcher controllers on their own thread keep every
//! namespace mapped and in step with the target.
//!
//! Owned by the daemon, one per subsystem found by discovery. The watcher keeps an
//! admin-only controller on every path, each with Namespace Attribute Changed and ANA
//! Change notices enabled and an Asynchronous Event Request outstanding; the ANA log
//! of each gives the path's state (shown in the status, and the order in which new
//! mappings try the paths). When a path connects and after each namespace notice it
//! reads the active namespaces and reconciles:
//! a new namespace gets a [`Mapping`], a removed one is drained and unmapped, one
//! whose size changed is drained and mapped again at its new size (NBD clients see a
//! size only at their handshake). A lost path is reconnected every
//! `reconnect_delay`; the mappings meanwhile go on (each has its own controller and
//! its own reconnect policy). A mapping that ended by itself (its controller lost past
//! `ctrl_loss_tmo`) is started again at the next reconcile after `reconnect_delay`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{debug, info, warn};

use nvmf_common::types::Nqn;
use nvmf_common::wire::admin::aen_cfg;

use crate::autoconnect::{Connector, Profile, SubsystemPath};
use crate::controller::{AsyncEvent, Controller, NamespaceInfo};
use crate::error::Error;
use crate::map::Stopper;
use crate::multipath::PathState;
use crate::reconnect::path_state;
use crate::transport::Fabric;

use super::mapping::{MapTarget, Mapping};
use super::status::{Board, PathStatus};
use super::Mode;

/// How often the watcher looks for events and ended mappings.
const WATCH_TICK: Duration = Duration::from_millis(100);

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

/// One path as the watcher keeps it.
struct PathWatch {
    path: SubsystemPath,
    ctrl: Option<Controller>,
    ana: Option<PathState>,
    /// Why it is not connected (while it is not).
    down: String,
    next_try: Instant,
}

impl PathWatch {
    fn new(path: SubsystemPath) -> PathWatch {
        PathWatch {
            path,
            ctrl: None,
            ana: None,
            down: "not connected yet".into(),
            next_try: Instant::now(),
        }
    }

    fn status(&self) -> PathStatus {
        PathStatus {
            address: self.path.addr.to_string(),
            state: match &self.ctrl {
                Some(_) => "live".into(),
                None => format!("down: {}", self.down),
            },
            ana: self.ana.filter(|_| self.ctrl.is_some()).map(ana_words),
        }
    }
}

fn ana_words(s: PathState) -> String {
    match s {
        PathState::Optimized => "optimized",
        PathState::NonOptimized => "non-optimized",
        PathState::Unusable => "inaccessible",
    }
    .into()
}

struct Watcher {
    spec: WatchSpec,
    /// What discovery lists now (written by the daemon).
    listed: Arc<Mutex<Vec<SubsystemPath>>>,
    stop: Arc<Stopper>,
    paths: Vec<PathWatch>,
    /// The namespaces the target reported last.
    seen: Vec<NamespaceInfo>,
    mappings: BTreeMap<u32, Mapping>,
    /// Namespaces whose mapping ended by itself, and when they may be tried again.
    retry_at: BTreeMap<u32, Instant>,
    /// Namespaces whose mapping failed for good, as they were then: tried again only
    /// once the target reports them changed.
    refused: BTreeMap<u32, NamespaceInfo>,
}

impl Watcher {
    fn new(spec: WatchSpec, listed: Arc<Mutex<Vec<SubsystemPath>>>, stop: Arc<Stopper>) -> Self {
        Watcher {
            spec,
            listed,
            stop,
            paths: Vec::new(),
            seen: Vec::new(),
            mappings: BTreeMap::new(),
            retry_at: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    fn run(mut self) {
        while !self.stop.is_triggered() {
            self.sync_paths();
            let mut rescan_on = None;
            for i in 0..self.paths.len() {
                if self.connect_path(i) {
                    rescan_on.get_or_insert(i);
                }
                if self.follow_path(i) {
                    rescan_on.get_or_insert(i);
                }
            }
            if let Some(i) = rescan_on {
                self.rescan(i);
            }
            let states = self.paths.iter().map(PathWatch::status).collect();
            self.spec.board.set_paths(&self.spec.subnqn, states);
            self.reap();
            self.stop.sleep(WATCH_TICK);
        }
        // Drain and unmap every namespace, then the watcher's controllers go.
        for (_, m) in std::mem::take(&mut self.mappings) {
            m.stop();
        }
        for p in &mut self.paths {
            if let Some(c) = p.ctrl.take() {
                let _ = c.shutdown();
            }
        }
        self.spec.board.remove_subsystem(&self.spec.subnqn);
    }

    fn reconnect_delay(&self) -> Duration {
        self.spec.profile.reconnect.reconnect_delay
    }

    /// Follows the paths discovery lists: new ones are added, gone ones dropped,
    /// the others keep their controllers.
    fn sync_paths(&mut self) {
        let listed = self.listed.lock().clone();
        let same = listed.len() == self.paths.len()
            && listed
                .iter()
                .zip(&self.paths)
                .all(|(l, p)| l.addr == p.path.addr);
        if same {
            return;
        }
        let mut old = std::mem::take(&mut self.paths);
        for l in listed {
            match old.iter().position(|p| p.path.addr == l.addr) {
                Some(k) => self.paths.push(old.swap_remove(k)),
                None => self.paths.push(PathWatch::new(l)),
            }
        }
        for p in old {
            if let Some(c) = p.ctrl {
                let _ = c.shutdown();
            }
        }
    }

    fn fabric(&self, p: &SubsystemPath) -> Result<Arc<dyn Fabric>, Error> {
        let tls = p.requires_tls() || self.spec.profile.tls_psk.is_some();
        self.spec
            .connector
            .fabric(&p.addr, &self.spec.subnqn, &self.spec.profile, tls)
    }

    /// Connects path `i` when it is down and due; true when it connected.
    fn connect_path(&mut self, i: usize) -> bool {
        let due = self
            .paths
            .get(i)
            .is_some_and(|p| p.ctrl.is_none() && Instant::now() >= p.next_try);
        if !due {
            return false;
        }
        let Some(path) = self.paths.get(i).map(|p| p.path.clone()) else {
            return false;
        };
        let r = Nqn::new(self.spec.subnqn.as_str())
            .map_err(|e| Error::Protocol(format!("not a valid subsystem NQN: {e}")))
            .and_then(|nqn| {
                let mut o = self.spec.profile.io_options(&nqn, 0);
                o.nr_io_queues = 0;
                let c = Controller::connect(self.fabric(&path)?, o)?;
                c.enable_events(aen_cfg::NS_ATTR | aen_cfg::ANA_CHANGE)?;
                Ok(c)
            });
        let delay = self.reconnect_delay();
        let Some(p) = self.paths.get_mut(i) else {
            return false;
        };
        match r {
            Ok(c) => {
                info!(subnqn = %self.spec.subnqn, path = %p.path.addr, namespaces = c.namespaces().len(), "path watched");
                p.ana = Some(path_state(&c));
                p.ctrl = Some(c);
                true
            }
            Err(e) => {
                debug!(subnqn = %self.spec.subnqn, path = %p.path.addr, "path not connected: {e}");
                p.down = e.to_string();
                p.next_try = Instant::now() + delay;
                false
            }
        }
    }

    /// Reads path `i`'s events; true when its namespaces changed.
    fn follow_path(&mut self, i: usize) -> bool {
        let delay = self.reconnect_delay();
        let Some(p) = self.paths.get_mut(i) else {
            return false;
        };
        let Some(c) = p.ctrl.as_ref() else {
            return false;
        };
        let r = c.poll_events().and_then(|evs| {
            if c.is_alive() {
                Ok(evs)
            } else {
                Err(Error::Protocol("keep-alive failed".into()))
            }
        });
        match r {
            Ok(evs) => {
                if evs.contains(&AsyncEvent::AnaChanged) {
                    p.ana = Some(path_state(c));
                }
                evs.iter()
                    .any(|e| matches!(e, AsyncEvent::NamespacesChanged(_)))
            }
            Err(e) => {
                warn!(subnqn = %self.spec.subnqn, path = %p.path.addr, "path lost: {e}");
                p.ctrl = None;
                p.down = e.to_string();
                p.next_try = Instant::now() + delay;
                false
            }
        }
    }

    /// Reads the namespaces through path `i` and reconciles.
    fn rescan(&mut self, i: usize) {
        let Some(c) = self.paths.get_mut(i).and_then(|p| p.ctrl.as_mut()) else {
            return;
        };
        match c.rescan_namespaces() {
            Ok(list) => {
                info!(subnqn = %self.spec.subnqn, namespaces = list.len(), "namespaces read");
                self.seen = list.to_vec();
                self.reconcile();
            }
            Err(e) => {
                warn!(subnqn = %self.spec.subnqn, "namespaces not read: {e}");
                if let Some(p) = self.paths.get_mut(i) {
                    p.ctrl = None;
                    p.down = e.to_string();
                }
            }
        }
    }

    /// Mappings that ended by themselves are forgotten (tried again later).
    fn reap(&mut self) {
        let ended: Vec<(u32, bool)> = self
            .mappings
            .iter()
            .filter(|(_, m)| m.is_finished())
            .map(|(&n, m)| (n, m.is_refused()))
            .collect();
        if ended.is_empty() {
            let live = self.paths.iter().any(|p| p.ctrl.is_some());
            if live && self.retry_at.values().any(|&t| t <= Instant::now()) {
                self.reconcile();
            }
            return;
        }
        let again = Instant::now() + self.reconnect_delay();
        for (n, refused) in ended {
            self.mappings.remove(&n);
            if refused {
                if let Some(ns) = self.seen.iter().find(|s| s.nsid.0 == n) {
                    self.refused.insert(n, ns.clone());
                }
            } else {
                self.retry_at.insert(n, again);
            }
        }
    }

    /// Every path's fabric, optimized paths first, then non-optimized, then the rest
    /// (a new mapping connects through the first that answers).
    fn fabrics_by_preference(&self) -> Vec<Arc<dyn Fabric>> {
        let mut order: Vec<&PathWatch> = self.paths.iter().collect();
        order.sort_by_key(|p| std::cmp::Reverse(p.ana.filter(|_| p.ctrl.is_some())));
        order
            .into_iter()
            .filter_map(|p| self.fabric(&p.path).ok())
            .collect()
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
        self.refused
            .retain(|n, was| wanted.get(n).is_some_and(|now| *now == was));
        let Ok(nqn) = Nqn::new(self.spec.subnqn.as_str()) else {
            return;
        };
        let target = MapTarget {
            subnqn: self.spec.subnqn.clone(),
            fabrics: self.fabrics_by_preference(),
            opts: self.spec.profile.io_options(&nqn, self.spec.io_queues),
            policy: self.spec.profile.reconnect,
            fast_io_fail: self.spec.profile.fast_io_fail,
            mode: self.spec.mode.clone(),
            depth: self.spec.depth,
            board: self.spec.board.clone(),
        };
        for (n, ns) in wanted {
            if self.mappings.contains_key(&n)
                || self.refused.contains_key(&n)
                || self.retry_at.get(&n).is_some_and(|&t| t > now)
            {
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
