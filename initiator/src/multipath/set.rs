//! The shared side of multipath: the paths' controllers, their spare I/O queues, ANA
//! states, and the background threads that reconnect lost paths and re-read ANA logs.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{info, warn};

use nvmf_common::types::Nsid;

use super::PathState;
use crate::controller::{ConnectOptions, Controller};
use crate::error::Error;
use crate::queue::Queue;
use crate::reconnect::{path_state, retryable, ReconnectPolicy, MAX_RECONNECT_DELAY};
use crate::transport::Fabric;

/// How often the ANA log of every connected path is read again (a path whose group
/// turned inaccessible, or back to optimized, is followed within this long).
const ANA_POLL: Duration = Duration::from_millis(250);
/// Background threads check for the end of the set this often while they wait.
const STOP_POLL: Duration = Duration::from_millis(50);

/// What must be equal on every path: the namespace's identifiers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NsIdentity {
    nguid: [u8; 16],
    eui64: [u8; 8],
    uuid: Option<[u8; 16]>,
}

/// One path.
pub(super) struct Path {
    fabric: Arc<dyn Fabric>,
    pub(super) name: String,
    state: AtomicU8,
    /// Bumped with every new controller (0: none yet).
    generation: AtomicU64,
    /// Commands in flight on this path, from every thread (for queue-depth).
    pub(super) outstanding: AtomicUsize,
    inner: Mutex<PathInner>,
}

struct PathInner {
    ctrl: Option<Controller>,
    /// The current controller's I/O queues not yet taken, by thread.
    spare: Vec<Option<Queue>>,
    reconnecting: bool,
    /// Never again (refused, another namespace, lost past ctrl-loss-tmo).
    given_up: bool,
    /// Why the last connect attempt failed (cleared once connected), for reports.
    last_error: Option<String>,
}

/// How one path's connection stands, for reports (`connect-all`, a daemon's status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathLink {
    Connected,
    /// Not connected now; reconnecting in the background.
    Reconnecting {
        last_error: Option<String>,
    },
    /// Not connected, and never tried again (refused, another namespace, lost past
    /// ctrl-loss-tmo).
    GivenUp {
        error: Option<String>,
    },
}

/// Every path to one subsystem's namespace, shared by the I/O threads.
pub struct PathSet {
    pub(super) paths: Vec<Path>,
    opts: ConnectOptions,
    pub(super) policy: ReconnectPolicy,
    /// The namespace every path must serve alike (None: a whole subsystem, checked by
    /// the Connect itself naming the subsystem NQN).
    nsid: Option<Nsid>,
    workers: usize,
    identity: Mutex<Option<NsIdentity>>,
    stop: Arc<AtomicBool>,
}

impl PathSet {
    /// Connects every path (`(name, fabric)`) to `opts.subnqn` with `workers` I/O
    /// queues each (`opts.nr_io_queues` at least that), checks that each reports the
    /// same namespace `nsid` (NGUID, EUI-64, UUID) as the first, and starts the ANA
    /// poller. A path that cannot be reached now is reconnected in the background; one
    /// that refuses the host or serves another namespace is left out. Fails only when
    /// no path connects.
    pub fn connect(
        paths: Vec<(String, Arc<dyn Fabric>)>,
        opts: ConnectOptions,
        policy: ReconnectPolicy,
        nsid: Nsid,
        workers: usize,
    ) -> Result<Arc<PathSet>, Error> {
        Self::connect_inner(paths, opts, policy, Some(nsid), workers)
    }

    /// [`PathSet::connect`] for a whole subsystem (`opts.subnqn`) rather than one of
    /// its namespaces: every path's controller serves all of them, so no namespace's
    /// identity is compared (a subsystem may have none yet).
    pub fn connect_subsystem(
        paths: Vec<(String, Arc<dyn Fabric>)>,
        opts: ConnectOptions,
        policy: ReconnectPolicy,
        workers: usize,
    ) -> Result<Arc<PathSet>, Error> {
        Self::connect_inner(paths, opts, policy, None, workers)
    }

    fn connect_inner(
        paths: Vec<(String, Arc<dyn Fabric>)>,
        opts: ConnectOptions,
        policy: ReconnectPolicy,
        nsid: Option<Nsid>,
        workers: usize,
    ) -> Result<Arc<PathSet>, Error> {
        let set = Arc::new(PathSet {
            paths: paths
                .into_iter()
                .map(|(name, fabric)| Path {
                    fabric,
                    name,
                    state: AtomicU8::new(PathState::Unusable as u8),
                    generation: AtomicU64::new(0),
                    outstanding: AtomicUsize::new(0),
                    inner: Mutex::new(PathInner {
                        ctrl: None,
                        spare: Vec::new(),
                        reconnecting: false,
                        given_up: false,
                        last_error: None,
                    }),
                })
                .collect(),
            opts,
            policy,
            nsid,
            workers,
            identity: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
        });
        let mut first_err = None;
        let mut connected = 0;
        for i in 0..set.paths.len() {
            match set.connect_path(i) {
                Ok(()) => connected += 1,
                Err(e) => {
                    warn!(path = i, "multipath: path not connected: {e}");
                    if let Some(p) = set.paths.get(i) {
                        p.inner.lock().last_error = Some(e.to_string());
                    }
                    if retryable(&e) {
                        set.start_reconnect(i);
                    } else if let Some(p) = set.paths.get(i) {
                        p.inner.lock().given_up = true;
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        if connected == 0 {
            set.stop.store(true, Ordering::Release);
            return Err(first_err.unwrap_or_else(|| Error::InvalidArgument("no path".into())));
        }
        let weak = Arc::downgrade(&set);
        let stop = set.stop.clone();
        std::thread::Builder::new()
            .name("multipath-ana".into())
            .spawn(move || ana_poller(weak, stop))
            .map_err(Error::Io)?;
        Ok(set)
    }

    /// The number of paths.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Path `i`'s state now.
    pub fn state(&self, i: usize) -> PathState {
        self.paths.get(i).map_or(PathState::Unusable, |p| {
            PathState::from_u8(p.state.load(Ordering::Acquire))
        })
    }

    /// Path `i`'s name, as given to [`PathSet::connect`].
    pub fn name(&self, i: usize) -> Option<&str> {
        self.paths.get(i).map(|p| p.name.as_str())
    }

    /// How path `i`'s connection stands now.
    pub fn link(&self, i: usize) -> PathLink {
        let Some(p) = self.paths.get(i) else {
            return PathLink::GivenUp { error: None };
        };
        let g = p.inner.lock();
        if g.ctrl.is_some() {
            PathLink::Connected
        } else if g.given_up {
            PathLink::GivenUp {
                error: g.last_error.clone(),
            }
        } else {
            PathLink::Reconnecting {
                last_error: g.last_error.clone(),
            }
        }
    }

    /// The controller of path `i` (for the caller's own admin commands), if connected.
    pub fn with_controller<R>(&self, i: usize, f: impl FnOnce(&Controller) -> R) -> Option<R> {
        let p = self.paths.get(i)?;
        let g = p.inner.lock();
        g.ctrl.as_ref().map(f)
    }

    /// Connects path `i` now and makes its queues available.
    fn connect_path(&self, i: usize) -> Result<(), Error> {
        let p = self
            .paths
            .get(i)
            .ok_or_else(|| Error::InvalidArgument(format!("no path {i}")))?;
        let mut ctrl = Controller::connect(p.fabric.clone(), self.opts.clone())?;
        if let Some(nsid) = self.nsid {
            let ns = ctrl.namespace(nsid)?;
            let id = NsIdentity {
                nguid: ns.nguid,
                eui64: ns.eui64,
                uuid: ns.uuid,
            };
            let mut known = self.identity.lock();
            match known.as_ref() {
                None => *known = Some(id),
                Some(k) if *k == id => {}
                Some(_) => {
                    let _ = ctrl.shutdown();
                    return Err(Error::InvalidArgument(format!(
                        "path {} ({}) serves another namespace {} (its NGUID/EUI-64/UUID differ)",
                        i, p.name, nsid
                    )));
                }
            }
        }
        let queues = ctrl.take_io_queues();
        if queues.len() < self.workers {
            let _ = ctrl.shutdown();
            return Err(Error::InvalidArgument(format!(
                "path {i} ({}) granted {} I/O queues, {} threads need one each",
                p.name,
                queues.len(),
                self.workers
            )));
        }
        let state = path_state(&ctrl);
        let mut g = p.inner.lock();
        g.spare = queues.into_iter().map(Some).collect();
        g.ctrl = Some(ctrl);
        g.reconnecting = false;
        g.last_error = None;
        p.state.store(state as u8, Ordering::Release);
        let generation = p.generation.fetch_add(1, Ordering::AcqRel) + 1;
        info!(path = i, name = %p.name, ?state, generation, "multipath: path connected");
        Ok(())
    }

    /// Thread `worker`'s queue of path `i` when the path has a controller newer than
    /// generation `have`, with its generation.
    pub(super) fn take(&self, i: usize, worker: usize, have: u64) -> Option<(Queue, u64)> {
        let p = self.paths.get(i)?;
        let generation = p.generation.load(Ordering::Acquire);
        if generation <= have {
            return None;
        }
        let mut g = p.inner.lock();
        if g.reconnecting {
            return None;
        }
        let q = g.spare.get_mut(worker).and_then(Option::take)?;
        Some((q, generation))
    }

    /// Thread `worker` is done with its queue `q` of path `i` (from generation
    /// `generation`): the next run takes it again, unless that controller is gone.
    pub(super) fn give_back(&self, i: usize, worker: usize, q: Queue, generation: u64) {
        let Some(p) = self.paths.get(i) else { return };
        if q.is_broken() || q.outstanding() > 0 {
            return;
        }
        let mut g = p.inner.lock();
        if p.generation.load(Ordering::Acquire) != generation || g.reconnecting || g.ctrl.is_none()
        {
            return;
        }
        if let Some(slot) = g.spare.get_mut(worker) {
            *slot = Some(q);
        }
    }

    /// A thread lost its queue of path `i` (generation `generation`): the path is
    /// unusable until it is reconnected in the background.
    pub(super) fn lost(self: &Arc<Self>, i: usize, generation: u64) {
        let Some(p) = self.paths.get(i) else { return };
        {
            let mut g = p.inner.lock();
            if p.generation.load(Ordering::Acquire) != generation || g.reconnecting || g.given_up {
                return;
            }
            p.state.store(PathState::Unusable as u8, Ordering::Release);
            g.spare.clear();
            g.ctrl = None;
            warn!(path = i, name = %p.name, "multipath: path lost; reconnecting in the background");
        }
        self.start_reconnect(i);
    }

    /// A command came back with an ANA status: stop using path `i` until its ANA log
    /// says otherwise.
    pub(super) fn mark_unusable(&self, i: usize) {
        if let Some(p) = self.paths.get(i) {
            p.state.store(PathState::Unusable as u8, Ordering::Release);
        }
    }

    fn start_reconnect(self: &Arc<Self>, i: usize) {
        let Some(p) = self.paths.get(i) else { return };
        p.inner.lock().reconnecting = true;
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        let started = std::thread::Builder::new()
            .name(format!("multipath-reconnect{i}"))
            .spawn(move || reconnector(weak, stop, i));
        if let Err(e) = started {
            warn!(path = i, "multipath: cannot start a reconnect thread: {e}");
        }
    }
}

impl Drop for PathSet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for p in &self.paths {
            let mut g = p.inner.lock();
            g.spare.clear();
            if let Some(c) = g.ctrl.take() {
                let _ = c.shutdown();
            }
        }
    }
}

/// Sleeps `d` in slices; false when the set is gone meanwhile.
fn pause(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        std::thread::sleep(STOP_POLL.min(end.saturating_duration_since(Instant::now())));
    }
    !stop.load(Ordering::Acquire)
}

/// Reconnects path `i`: at once, then after the reconnect delay, doubling, until it
/// connects or `ctrl-loss-tmo` has passed.
fn reconnector(set: Weak<PathSet>, stop: Arc<AtomicBool>, i: usize) {
    let lost_at = Instant::now();
    let mut delay = Duration::ZERO;
    loop {
        if !pause(&stop, delay) {
            return;
        }
        let Some(s) = set.upgrade() else { return };
        match s.connect_path(i) {
            Ok(()) => {
                info!(path = i, "multipath: path rejoined");
                return;
            }
            Err(e) => {
                if let Some(p) = s.paths.get(i) {
                    p.inner.lock().last_error = Some(e.to_string());
                }
                let give_up = !retryable(&e)
                    || s.policy
                        .ctrl_loss_tmo
                        .is_some_and(|t| lost_at.elapsed() >= t);
                if give_up {
                    warn!(path = i, "multipath: path given up: {e}");
                    if let Some(p) = s.paths.get(i) {
                        let mut g = p.inner.lock();
                        g.reconnecting = false;
                        g.given_up = true;
                    }
                    return;
                }
                delay = if delay.is_zero() {
                    s.policy.reconnect_delay
                } else {
                    (delay * 2).min(MAX_RECONNECT_DELAY)
                };
            }
        }
    }
}

/// Re-reads every connected path's ANA state; a controller found dead is reported
/// lost (a path no thread sends to would otherwise never notice).
fn ana_poller(set: Weak<PathSet>, stop: Arc<AtomicBool>) {
    while pause(&stop, ANA_POLL) {
        let Some(s) = set.upgrade() else { return };
        for (i, p) in s.paths.iter().enumerate() {
            let generation = p.generation.load(Ordering::Acquire);
            let alive = {
                let g = p.inner.lock();
                match g.ctrl.as_ref() {
                    Some(c) if c.is_alive() => {
                        p.state.store(path_state(c) as u8, Ordering::Release);
                        true
                    }
                    Some(_) => false,
                    None => true,
                }
            };
            if !alive {
                s.lost(i, generation);
            }
        }
    }
}
