//! The group's state in RADOS: one object per group, `nvmf.group.<NAME>`, in the
//! group's pool, whose omap holds `version` (decimal) and `state` (the [`GroupState`]
//! as YAML). A commit is one RADOS write op that compares `version` and sets both keys
//! ([`RadosPool::omap_cas`]), so two gateways committing at once cannot both win. A
//! commit is announced with a notify on the object, which every gateway watches; a
//! watch that fails is set up again at the next wait (the gateway re-reads the version
//! every [`super::SYNC_INTERVAL`] anyway, so a lost notify delays a change, never loses
//! it).
//!
//! Threads: the store is shared by the gateway's `Live` (reads, commits) and its sync
//! thread (waits); librados' watch callback only bumps a counter and wakes the waiter.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tracing::{info, warn};

use crate::config::{GatewayGroupConfig, GroupState};

use super::{GroupStore, Versioned};
use crate::backend::rbd::rados::{Cas, RadosPool, Watch, WatchEvent};
use crate::backend::spec::RbdOptions;

const MS_PER_SEC: u64 = 1_000;
/// The omap key of the version.
const VERSION_KEY: &str = "version";
/// The omap key of the state.
const STATE_KEY: &str = "state";
/// How long an announcement waits for the other gateways' acknowledgements (it runs
/// on its own thread: a dead gateway's watch only delays that thread).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The name of group `name`'s state object.
pub fn state_object(name: &str) -> String {
    format!("nvmf.group.{name}")
}

/// Announcements seen, and the watch that delivers them.
#[derive(Default)]
struct Signal {
    seen: Mutex<Seen>,
    changed: Condvar,
}

#[derive(Default)]
struct Seen {
    count: u64,
    /// The watch failed: set it up again.
    broken: bool,
}

impl Signal {
    fn on_event(&self, e: WatchEvent) {
        let mut s = self.seen.lock();
        s.count = s.count.wrapping_add(1);
        if let WatchEvent::Error(errno) = e {
            s.broken = true;
            warn!(errno, "the group's watch failed: watching again");
        }
        self.changed.notify_all();
    }
}

pub struct RadosStore {
    pool: Arc<RadosPool>,
    oid: String,
    signal: Arc<Signal>,
    watch: Mutex<Option<Watch>>,
}

impl RadosStore {
    /// Connects to the group's pool and watches its state object (created empty, at
    /// version 0, if the group is new). The client is also the one of the gateway's RBD
    /// images of the same cluster settings (`rbd::shared`), so fencing it fences them.
    pub fn open(g: &GatewayGroupConfig) -> Result<RadosStore, String> {
        // RADOS calls of the group give up rather than hang past a lease: a gateway cut
        // off from the cluster must notice it, not wait in a renewal.
        let timeout = g.lease_ms.div_ceil(MS_PER_SEC).max(1).to_string();
        // Images served by several gateways must not be cached in one of them.
        let mut ceph_options: std::collections::BTreeMap<String, String> = [
            ("rados_osd_op_timeout".to_string(), timeout.clone()),
            ("rados_mon_op_timeout".to_string(), timeout),
            ("rbd_cache".to_string(), "false".to_string()),
        ]
        .into();
        // The operator's options win.
        ceph_options.extend(g.ceph_options.clone());
        let opts = RbdOptions {
            ceph_conf: g.ceph_conf.clone(),
            client_id: g.client_id.clone(),
            ceph_options,
            ..Default::default()
        };
        let pool = RadosPool::open(&opts, &g.pool)
            .map_err(|e| format!("gateway group {}: pool {}: {e}", g.name, g.pool))?;
        let store = RadosStore {
            pool: Arc::new(pool),
            oid: state_object(&g.name),
            signal: Arc::new(Signal::default()),
            watch: Mutex::new(None),
        };
        // Images opened from now on with the group's ceph_conf and client_id use this
        // client, its op timeouts (the lease) included: librbd's ETIMEDOUT then maps to
        // Namespace Not Ready, retryable (rbd::map_errno).
        crate::backend::rbd::shared::share_client(
            store.pool.clone(),
            g.ceph_conf.clone(),
            g.client_id.clone(),
        );
        let empty = GroupState::default().to_bytes()?;
        let created = store
            .pool
            .omap_cas(
                &store.oid,
                VERSION_KEY,
                None,
                &[(VERSION_KEY, b"0"), (STATE_KEY, &empty)],
                &[],
            )
            .map_err(|e| format!("gateway group {}: {e}", g.name))?;
        if created == Cas::Done {
            info!(group = %g.name, object = %store.oid, "created the group's state object");
        }
        store.rewatch()?;
        Ok(store)
    }

    /// The pool client (leases and fencing use it too).
    pub fn pool(&self) -> &Arc<RadosPool> {
        &self.pool
    }

    fn rewatch(&self) -> Result<(), String> {
        let mut w = self.watch.lock();
        // The old watch goes first: its callback must not run after the new one starts.
        *w = None;
        let signal = self.signal.clone();
        let watch = self
            .pool
            .watch(&self.oid, Box::new(move |e| signal.on_event(e)))
            .map_err(|e| format!("cannot watch {}: {e}", self.oid))?;
        *w = Some(watch);
        self.signal.seen.lock().broken = false;
        Ok(())
    }
}

fn version_of(bytes: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("the group's version is not a number: {bytes:?}"))
}

impl GroupStore for RadosStore {
    fn read(&self) -> Result<Versioned, String> {
        let Some(map) = self
            .pool
            .omap_get_all(&self.oid)
            .map_err(|e| e.to_string())?
        else {
            return Ok(Versioned::default());
        };
        let version = map.get(VERSION_KEY).map(|v| version_of(v)).transpose()?;
        let state = match map.get(STATE_KEY) {
            Some(s) => GroupState::from_bytes(s)?,
            None => GroupState::default(),
        };
        Ok(Versioned { version, state })
    }

    fn commit(&self, expect: Option<u64>, state: &GroupState) -> Result<Option<u64>, String> {
        // (The version is read from RADOS: one at its end is refused, not wrapped.)
        let next = match expect {
            None => 0,
            Some(v) => v
                .checked_add(1)
                .ok_or_else(|| format!("the group's version {v} cannot grow further"))?,
        };
        let (old, new) = (expect.map(|v| v.to_string()), next.to_string());
        let bytes = state.to_bytes()?;
        let r = self
            .pool
            .omap_cas(
                &self.oid,
                VERSION_KEY,
                old.as_deref().map(str::as_bytes),
                &[(VERSION_KEY, new.as_bytes()), (STATE_KEY, &bytes)],
                &[],
            )
            .map_err(|e| e.to_string())?;
        Ok((r == Cas::Done).then_some(next))
    }

    fn announce(&self, version: u64) {
        let (pool, oid) = (self.pool.clone(), self.oid.clone());
        let spawned = std::thread::Builder::new()
            .name("nvmf-group-notify".into())
            .spawn(move || {
                if let Err(e) = pool.notify(&oid, version.to_string().as_bytes(), NOTIFY_TIMEOUT) {
                    // The others poll: the change reaches them within SYNC_INTERVAL.
                    info!(version, "group announcement incomplete: {e}");
                }
            });
        if let Err(e) = spawned {
            warn!("cannot announce group version {version}: {e}");
        }
    }

    fn wait_change(&self, timeout: Duration) {
        let broken = {
            let s = self.signal.seen.lock();
            s.broken
        };
        let healthy = !broken
            && self
                .watch
                .lock()
                .as_ref()
                .is_some_and(|w| self.pool.watch_check(w).is_ok());
        if !healthy {
            if let Err(e) = self.rewatch() {
                warn!("{e}");
            }
        }
        let mut s = self.signal.seen.lock();
        let seen = s.count;
        let _ = self
            .signal
            .changed
            .wait_while_for(&mut s, |s| s.count == seen, timeout);
    }
}
