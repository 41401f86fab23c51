//! Gateway groups: several targets (gateways) serving one configuration that lives in
//! Ceph RADOS (`gateway_group:` in each gateway's file).
//!
//! The group's state ([`GroupState`]: subsystems, namespaces, hosts, each gateway's
//! listeners) is one versioned document in a [`GroupStore`]. A change on any gateway
//! (`ctl`, the API) is planned against the group's current state and committed with
//! compare-and-write on the version, so two gateways changing the group at once never
//! lose an update: the later commit finds the version moved, re-reads, re-plans and
//! commits again ([`crate::live`]'s group path). A committed change is announced; every
//! gateway waits for announcements ([`GroupStore::wait_change`]) and also re-reads the
//! version every [`SYNC_INTERVAL`], so a lost announcement delays a change by at most
//! that, and applies what it has not applied yet ([`GroupApply::apply_latest`]).
//! A gateway that starts reads the state before it serves ([`join`]).
//!
//! Ownership: the [`GroupLink`] is owned by the [`crate::live::Live`] of its gateway;
//! the sync thread holds the `Live`. Ordering: a gateway applies versions in order, each
//! under `Live`'s `running` lock, so a change made here and one arriving from another
//! gateway never interleave.

pub mod lease;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
pub mod memory;
#[cfg(feature = "rbd")]
pub mod rados_lease;
#[cfg(feature = "rbd")]
pub mod rados_store;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{info, warn};

use crate::config::{
    Config, GatewayGroupConfig, GatewayRecord, GroupState, Ownership, GROUP_OWNED_KEYS,
};

/// How often a gateway re-reads the group's version even without an announcement.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(500);
/// How many times a change is planned and committed before it gives up, when other
/// gateways keep changing the group in between.
pub const COMMIT_ATTEMPTS: usize = 16;

/// The group's document and its version (`None`: the group has never been written).
#[derive(Debug, Clone, Default)]
pub struct Versioned {
    pub version: Option<u64>,
    pub state: GroupState,
}

/// Where a group's state lives (RADOS: [`rados_store::RadosStore`]).
pub trait GroupStore: Send + Sync {
    /// The current state.
    fn read(&self) -> Result<Versioned, String>;
    /// Stores `state` as the next version if the stored version is still `expect`
    /// (`None`: nothing stored yet). `Ok(Some(v))`: stored as version `v`; `Ok(None)`:
    /// the version moved (another gateway committed first).
    fn commit(&self, expect: Option<u64>, state: &GroupState) -> Result<Option<u64>, String>;
    /// Tells the other gateways that version `version` is stored (best effort: they
    /// also poll).
    fn announce(&self, version: u64);
    /// Blocks until an announcement arrives or `timeout` passes.
    fn wait_change(&self, timeout: Duration);
}

/// What this gateway applied of the group.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The version in force here (`None`: none yet).
    pub version: Option<u64>,
    /// Why the last version read could not be applied here, if it could not.
    pub error: Option<String>,
    /// When the version in force was applied.
    pub at: Option<Instant>,
}

/// One gateway's membership: its section, its own file's settings, the store.
pub struct GroupLink {
    pub config: GatewayGroupConfig,
    store: Arc<dyn GroupStore>,
    /// The gateway's own configuration (its file): what the group's state is laid on.
    local: Mutex<Config>,
    applied: Mutex<Applied>,
    /// The ANA groups this gateway holds ([`lease`]).
    ownership: Mutex<Ownership>,
    /// The group's state in force here (what an ownership change is laid on, without
    /// reading the store: a fenced gateway cannot).
    last: Mutex<GroupState>,
    /// The latest ownership moves, newest last ([`MOVES_KEPT`]).
    moves: Mutex<std::collections::VecDeque<MoveRecord>>,
    /// Moves counted since start.
    counts: Mutex<MoveCounts>,
    /// The ANA groups' leases as the lease thread last saw them, and when.
    leases: Mutex<(Vec<lease::LeaseView>, Option<Instant>)>,
}

/// Ownership moves counted since start (metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct MoveCounts {
    pub takeovers: u64,
    pub releases: u64,
    pub losses: u64,
    pub last_takeover_silent_ms: u64,
}

/// Ownership moves kept for `status`.
pub const MOVES_KEPT: usize = 32;

/// One ownership move, as `status` shows it.
#[derive(Debug, Clone)]
pub struct MoveRecord {
    pub at: std::time::SystemTime,
    pub what: lease::Move,
}

impl GroupLink {
    pub fn new(config: GatewayGroupConfig, store: Arc<dyn GroupStore>, local: Config) -> GroupLink {
        GroupLink {
            config,
            store,
            local: Mutex::new(local),
            applied: Mutex::new(Applied::default()),
            ownership: Mutex::new(Ownership::default()),
            last: Mutex::new(GroupState::default()),
            moves: Mutex::new(std::collections::VecDeque::new()),
            counts: Mutex::new(MoveCounts::default()),
            leases: Mutex::new((Vec::new(), None)),
        }
    }

    pub fn store(&self) -> &Arc<dyn GroupStore> {
        &self.store
    }

    /// The gateway's own configuration.
    pub fn local(&self) -> Config {
        self.local.lock().clone()
    }

    /// A re-read file replaces the gateway's own configuration.
    pub fn set_local(&self, cfg: Config) {
        *self.local.lock() = cfg;
    }

    /// What this gateway runs for `state`.
    pub fn effective(&self, state: &GroupState) -> Config {
        state.effective(&self.local.lock(), &self.config, &self.ownership.lock())
    }

    /// What this gateway runs for `state` with its own file `local`.
    pub fn effective_with(&self, state: &GroupState, local: &Config) -> Config {
        state.effective(local, &self.config, &self.ownership.lock())
    }

    /// The ANA groups this gateway holds.
    pub fn ownership(&self) -> Ownership {
        self.ownership.lock().clone()
    }

    /// Its leases changed: the next apply reports the new ANA states.
    pub(crate) fn set_ownership(&self, o: Ownership) {
        *self.ownership.lock() = o;
    }

    /// Remembers what the lease thread changed.
    pub(crate) fn record_moves(&self, moves: &[lease::Move]) {
        {
            let mut c = self.counts.lock();
            for what in moves {
                match what {
                    lease::Move::Took {
                        silent_ms: Some(ms),
                        ..
                    } => {
                        c.takeovers += 1;
                        c.last_takeover_silent_ms = *ms;
                    }
                    lease::Move::Took { .. } | lease::Move::Fenced => {}
                    lease::Move::Released { .. } => c.releases += 1,
                    lease::Move::Lost { .. } => c.losses += 1,
                }
            }
        }
        let mut m = self.moves.lock();
        for what in moves {
            if m.len() == MOVES_KEPT {
                m.pop_front();
            }
            m.push_back(MoveRecord {
                at: std::time::SystemTime::now(),
                what: what.clone(),
            });
        }
    }

    pub(crate) fn set_leases(&self, v: Vec<lease::LeaseView>, at: Instant) {
        *self.leases.lock() = (v, Some(at));
    }

    /// The ANA groups' leases, as of now (own leases' remaining time counted down
    /// since the lease thread looked).
    pub fn leases(&self) -> Vec<lease::LeaseView> {
        let (v, at) = self.leases.lock().clone();
        let gone = at.map_or(0, |t| {
            u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
        });
        v.into_iter()
            .map(|mut l| {
                l.expires_in_ms = l.expires_in_ms.map(|ms| ms.saturating_sub(gone));
                l
            })
            .collect()
    }

    /// The figures the metrics endpoint shows.
    pub fn metrics_row(&self) -> crate::metrics::GatewayGroupRow {
        let own = self.ownership();
        let c = *self.counts.lock();
        crate::metrics::GatewayGroupRow {
            group: self.config.name.clone(),
            gateway: self.config.gateway.clone(),
            version: self.applied().version.unwrap_or(0),
            ana_groups: self
                .last()
                .ana_groups()
                .into_iter()
                .map(|g| (g, own.owned.contains(&g)))
                .collect(),
            fenced: own.fenced,
            takeovers: c.takeovers,
            releases: c.releases,
            losses: c.losses,
            last_takeover_silent_ms: c.last_takeover_silent_ms,
        }
    }

    /// The latest ownership moves, oldest first.
    pub fn moves(&self) -> Vec<MoveRecord> {
        self.moves.lock().iter().cloned().collect()
    }

    /// The group's state in force here.
    pub fn last(&self) -> GroupState {
        self.last.lock().clone()
    }

    pub fn applied(&self) -> Applied {
        self.applied.lock().clone()
    }

    pub(crate) fn set_applied(&self, version: Option<u64>, state: &GroupState) {
        *self.last.lock() = state.clone();
        let mut a = self.applied.lock();
        if a.version != version {
            a.at = Some(Instant::now());
        }
        a.version = version;
        a.error = None;
    }

    pub(crate) fn set_error(&self, e: String) {
        self.applied.lock().error = Some(e);
    }
}

/// Refuses a gateway file that sets what belongs to the group.
pub fn check_local(local: &Config) -> Result<(), String> {
    let set = [
        !local.subsystems.is_empty(),
        !local.hosts.is_empty(),
        !local.ports.is_empty(),
    ];
    let owned: Vec<&str> = GROUP_OWNED_KEYS
        .iter()
        .zip(set)
        .filter_map(|(k, s)| s.then_some(*k))
        .collect();
    if owned.is_empty() {
        return Ok(());
    }
    Err(format!(
        "gateway_group: {} belong to the group (stored in RADOS): remove them from this \
         file and add them with `nvmf-target ctl` or the management API on any gateway",
        owned.join(", ")
    ))
}

/// Joins the group `local` names: reads the group's state and returns what this
/// gateway runs, before it serves anything.
pub fn join(
    local: &Config,
    store: Arc<dyn GroupStore>,
) -> Result<(Config, Arc<GroupLink>), String> {
    let Some(g) = local.gateway_group.clone() else {
        return Err("no gateway_group section".into());
    };
    check_local(local)?;
    let cur = register(&g, store.as_ref())?;
    let link = Arc::new(GroupLink::new(g, store, local.clone()));
    let cfg = link.effective(&cur.state);
    cfg.validate().map_err(|e| {
        format!(
            "gateway group {}: its state does not apply here: {e}",
            link.config.name
        )
    })?;
    link.set_applied(cur.version, &cur.state);
    info!(
        group = %link.config.name,
        gateway = %link.config.gateway,
        version = ?cur.version,
        subsystems = cfg.subsystems.len(),
        "joined the gateway group"
    );
    Ok((cfg, link))
}

/// Records this gateway in the group (its home ANA group) unless it is there already;
/// the group's state afterwards.
fn register(g: &GatewayGroupConfig, store: &dyn GroupStore) -> Result<Versioned, String> {
    let fail = |e: String| format!("gateway group {}: {e}", g.name);
    for _ in 0..COMMIT_ATTEMPTS {
        let cur = store
            .read()
            .map_err(|e| fail(format!("cannot read its state: {e}")))?;
        if cur.state.gateways.contains_key(&g.gateway) {
            return Ok(cur);
        }
        let Some(grpid) = cur.state.free_grpid() else {
            return Err(fail(
                "every ANA group id is taken: the group has its most gateways".into(),
            ));
        };
        let mut next = cur.state.clone();
        next.gateways
            .insert(g.gateway.clone(), GatewayRecord { grpid });
        if let Some(v) = store.commit(cur.version, &next).map_err(fail)? {
            store.announce(v);
            info!(group = %g.name, gateway = %g.gateway, grpid, "joined the group: home ANA group {grpid}");
        }
    }
    Err(fail(
        "the group kept changing while this gateway joined".into(),
    ))
}

/// What the group's threads ask of the gateway they run for (its `Live`, which
/// implements this): apply the group's latest state, or the ANA ownership that just
/// changed; each returns what changed, or why it was not applied. A trait so that this
/// layer stays below the live layer that owns its [`GroupLink`].
pub trait GroupApply: Send + Sync {
    fn apply_latest(&self) -> Result<Vec<String>, String>;
    fn apply_ownership(&self) -> Result<Vec<String>, String>;
}

/// Keeps `live` on the group's latest version until `stop` is set: waits for an
/// announcement or [`SYNC_INTERVAL`], then applies what changed.
pub fn spawn_sync(
    live: Arc<dyn GroupApply>,
    link: Arc<GroupLink>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("nvmf-group".into())
        .spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                link.store.wait_change(SYNC_INTERVAL);
                if let Err(e) = live.apply_latest() {
                    warn!(group = %link.config.name, "group change not applied here: {e}");
                }
            }
        })
}
