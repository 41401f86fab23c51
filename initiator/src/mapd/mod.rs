//! `mapd`: every namespace of every subsystem this host may use, mapped locally and
//! kept in step with the targets.
//!
//! Owned by the host library; `nvmf-initiator mapd` runs [`run`] until SIGTERM.
//! Layers, each owning the next:
//!
//! - the daemon loop ([`run`]): resolves the discovery specs (nvme-cli's
//!   discovery.conf syntax), keeps a persistent controller on each starting discovery
//!   controller with Discovery Log Page Change notices enabled, walks discovery (with
//!   referrals) at start, on each notice, on reload and every `rediscover`, and
//!   starts or stops one watcher per subsystem found. A subsystem is dropped only
//!   when a walk that read every starting controller no longer lists it, so a
//!   discovery controller that is down unmaps nothing;
//! - [`subsystem`]: a watcher controller per subsystem following Namespace Attribute
//!   Changed, with one mapping per namespace;
//! - [`mapping`]: one namespace served as an NBD socket or a ublk device, by its own
//!   controller with failover over the subsystem's paths and the profile's
//!   `ctrl_loss_tmo` / `reconnect_delay`;
//! - [`status`]: the state board and its admin socket.
//!
//! Departure from the Linux host, on purpose: each mapped namespace has its own
//! controller (I/O queues are not shared between namespaces), so one namespace's
//! drain, resize or failure never touches another's queues; the cost is one
//! association per namespace and path on the target.

pub mod mapping;
pub mod status;
pub mod subsystem;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use nvmf_common::types::Nqn;
use nvmf_common::wire::admin::aen_cfg;

use crate::autoconnect::{
    walk, ConnectAllOptions, Connector, DiscoverySpec, FabricLogReader, PortAddr, Problem, Profile,
};
use crate::controller::{AsyncEvent, Controller, DEFAULT_KATO_MS};
use crate::error::Error;
use crate::map::Stopper;

use status::{Board, StatusServer};
use subsystem::{SubsystemWatch, WatchSpec};

/// How often the loop looks at its discovery controllers and the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// How namespaces are mapped.
#[derive(Debug, Clone)]
pub enum Mode {
    /// An NBD server per namespace on `dir/<stable name>.sock`.
    Nbd { dir: PathBuf },
    /// A ublk device per namespace, linked as `link_dir/<stable name>`.
    Ublk { link_dir: PathBuf },
}

#[derive(Debug, Clone)]
pub struct MapdOptions {
    pub mode: Mode,
    /// I/O queues per mapped namespace.
    pub io_queues: u16,
    /// Commands in flight per queue (None: the queue's capacity).
    pub depth: Option<usize>,
    /// Walk discovery this often even without a notice (a safety net for discovery
    /// controllers that send none).
    pub rediscover: Duration,
    pub status_socket: Option<PathBuf>,
}

/// Where [`run`] gets its specs (again on reload).
pub type LoadSpecs<'a> = &'a dyn Fn() -> Result<Vec<DiscoverySpec>, Error>;

/// Resolved specs: the profiles, the starting controllers (with their discovery
/// NQNs), and the problems of the specs that cannot be used.
type Resolved = (Vec<Profile>, Vec<(PortAddr, String)>, Vec<String>);

/// A starting discovery controller kept connected for its notices.
struct DiscoveryWatch {
    addr: PortAddr,
    subnqn: String,
    profile: usize,
    ctrl: Option<Controller>,
    next_try: Instant,
}

struct Daemon<'a> {
    copts: &'a ConnectAllOptions,
    o: &'a MapdOptions,
    connector: Arc<dyn Connector>,
    board: Board,
    profiles: Vec<Profile>,
    starts: Vec<(PortAddr, String)>,
    discovery: Vec<DiscoveryWatch>,
    watches: BTreeMap<String, SubsystemWatch>,
}

/// Runs the daemon until `stop`; `reload` (set by SIGHUP) re-reads the specs and
/// applies the difference. Fails only when no spec can be used at start.
pub fn run(
    load: LoadSpecs<'_>,
    copts: &ConnectAllOptions,
    o: &MapdOptions,
    connector: Arc<dyn Connector>,
    stop: Arc<Stopper>,
    reload: &AtomicBool,
) -> Result<(), Error> {
    let board = Board::default();
    let _status = match &o.status_socket {
        Some(p) => Some(StatusServer::start(p, board.clone(), stop.clone())?),
        None => None,
    };
    let mut d = Daemon {
        copts,
        o,
        connector,
        board,
        profiles: Vec::new(),
        starts: Vec::new(),
        discovery: Vec::new(),
        watches: BTreeMap::new(),
    };
    let (profiles, starts, problems) = d.resolve(&load()?);
    d.apply(profiles, starts);
    if d.starts.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "no usable discovery controller: {}",
            problems.join("; ")
        )));
    }
    let mut next_walk = Instant::now();
    while !stop.is_triggered() {
        if reload.swap(false, Ordering::SeqCst) {
            // A reload applies whole or not at all: one bad line keeps the running
            // configuration (as the target's reload does).
            let resolved = load().and_then(|specs| {
                let (profiles, starts, problems) = d.resolve(&specs);
                match problems.is_empty() {
                    true => Ok((profiles, starts)),
                    false => Err(Error::InvalidArgument(problems.join("; "))),
                }
            });
            match resolved {
                Ok((profiles, starts)) => {
                    info!(
                        controllers = starts.len(),
                        "discovery configuration reloaded"
                    );
                    d.apply(profiles, starts);
                    d.board.set_reload_refused(None);
                    next_walk = Instant::now();
                }
                Err(e) => {
                    warn!("reload refused, the running configuration stays: {e}");
                    d.board.set_reload_refused(Some(format!(
                        "reload refused, the running configuration stays: {e}"
                    )));
                }
            }
        }
        if d.follow_discovery() || Instant::now() >= next_walk {
            d.walk_and_apply();
            next_walk = Instant::now() + o.rediscover;
        }
        stop.sleep(TICK);
    }
    info!("stopping: unmapping every namespace");
    for (_, w) in std::mem::take(&mut d.watches) {
        w.stop();
    }
    Ok(())
}

impl Daemon<'_> {
    /// Resolves specs: the profiles and starting controllers of the usable ones, and
    /// the problems of the others.
    fn resolve(&self, specs: &[DiscoverySpec]) -> Resolved {
        let mut problems = Vec::new();
        let mut profiles = Vec::new();
        let mut starts = Vec::new();
        for s in specs {
            let start = s
                .trtype()
                .map(|t| (PortAddr::new(t, &s.traddr, &s.trsvcid), s.subnqn.clone()));
            match (Profile::resolve(s, self.copts), start) {
                (Ok(p), Some(start)) => {
                    starts.push(start);
                    profiles.push(p);
                }
                (Err(e), _) => problems.push(e.to_string()),
                (Ok(_), None) => {
                    problems.push(format!("{}: unknown transport {:?}", s.source, s.transport))
                }
            }
        }
        for p in &problems {
            warn!("{p}");
        }
        (profiles, starts, problems)
    }

    /// Starts from these discovery controllers from now on (the next walk applies
    /// the difference to the subsystems).
    fn apply(&mut self, profiles: Vec<Profile>, starts: Vec<(PortAddr, String)>) {
        self.profiles = profiles;
        self.starts = starts;
        self.discovery = self
            .starts
            .iter()
            .enumerate()
            .map(|(i, (addr, subnqn))| DiscoveryWatch {
                addr: addr.clone(),
                subnqn: subnqn.clone(),
                profile: i,
                ctrl: None,
                next_try: Instant::now(),
            })
            .collect();
    }

    /// Keeps the discovery controllers connected; true when one reported a change.
    fn follow_discovery(&mut self) -> bool {
        let mut changed = false;
        for w in &mut self.discovery {
            let Some(profile) = self.profiles.get(w.profile) else {
                continue;
            };
            if w.ctrl.is_none() && Instant::now() >= w.next_try {
                match connect_discovery(self.connector.as_ref(), w, profile) {
                    Ok(c) => {
                        debug!(addr = %w.addr, "discovery notices enabled");
                        w.ctrl = Some(c);
                        // Whatever changed while it was away.
                        changed = true;
                    }
                    Err(e) => {
                        debug!(addr = %w.addr, "no persistent discovery controller: {e}");
                        w.next_try = Instant::now() + profile.reconnect.reconnect_delay;
                    }
                }
            }
            let Some(c) = &w.ctrl else {
                continue;
            };
            match c.poll_events() {
                Ok(evs) if c.is_alive() => {
                    changed |= evs.contains(&AsyncEvent::DiscoveryLogChanged);
                }
                Ok(_) | Err(_) => {
                    warn!(addr = %w.addr, "discovery controller lost");
                    w.ctrl = None;
                    w.next_try = Instant::now() + profile.reconnect.reconnect_delay;
                }
            }
        }
        changed
    }

    fn walk_and_apply(&mut self) {
        let found = walk(
            &self.starts,
            &self.profiles,
            self.copts,
            &FabricLogReader(self.connector.as_ref()),
        );
        let complete = !found
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Discovery(_)));
        self.board
            .set_problems(found.problems.iter().map(ToString::to_string).collect());
        for sub in &found.subsystems {
            if let Some(w) = self.watches.get(&sub.subnqn) {
                w.set_paths(sub.paths.clone());
                continue;
            }
            let Some(profile) = self.profiles.get(sub.profile) else {
                continue;
            };
            let spec = WatchSpec {
                subnqn: sub.subnqn.clone(),
                profile: profile.clone(),
                connector: self.connector.clone(),
                mode: self.o.mode.clone(),
                io_queues: self.o.io_queues,
                depth: self.o.depth,
                board: self.board.clone(),
            };
            match SubsystemWatch::start(spec, sub.paths.clone()) {
                Ok(w) => {
                    info!(subnqn = %sub.subnqn, paths = sub.paths.len(), "subsystem found");
                    self.watches.insert(sub.subnqn.clone(), w);
                }
                Err(e) => warn!(subnqn = %sub.subnqn, "cannot watch: {e}"),
            }
        }
        if !complete {
            return;
        }
        let gone: Vec<String> = self
            .watches
            .keys()
            .filter(|n| !found.subsystems.iter().any(|s| &s.subnqn == *n))
            .cloned()
            .collect();
        for n in gone {
            info!(subnqn = %n, "subsystem no longer listed by discovery; unmapping it");
            if let Some(w) = self.watches.remove(&n) {
                w.stop();
            }
        }
    }
}

fn connect_discovery(
    connector: &dyn Connector,
    w: &DiscoveryWatch,
    profile: &Profile,
) -> Result<Controller, Error> {
    let nqn = Nqn::new(w.subnqn.as_str())
        .map_err(|e| Error::InvalidArgument(format!("discovery NQN {:?}: {e}", w.subnqn)))?;
    let fabric = connector.fabric(&w.addr, &w.subnqn, profile, profile.tls_psk.is_some())?;
    let mut o = profile.discovery_options(&nqn);
    // A persistent discovery controller needs keep-alive (the Linux host uses its
    // default KATO for them too).
    if o.kato_ms == 0 {
        o.kato_ms = DEFAULT_KATO_MS;
    }
    let c = Controller::connect(fabric, o)?;
    c.enable_events(aen_cfg::DISCOVERY_LOG_CHANGE)?;
    Ok(c)
}
