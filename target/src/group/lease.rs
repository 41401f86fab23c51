//! Ownership of a group's ANA groups by leases.
//!
//! Each gateway has a home ANA group (given when it joined). An ANA group's owner is
//! the gateway that holds its lease ([`LeaseStore::try_lock`]: a `cls_lock` exclusive
//! lock with a duration in RADOS); the owner reports the group optimized on its
//! listeners, every other gateway non-optimized. Every [`LeaseParams::tick`] a gateway:
//!
//! 1. beats (a counter only it writes), and reads the other gateways' beats: a gateway
//!    whose beat has not moved for a lease duration (by this gateway's own clock) is
//!    dead;
//! 2. renews the leases it holds; a renewal refused means the lease moved on: the group
//!    is dropped at once;
//! 3. takes its home group's lease when it is free, and the lease of a dead gateway's
//!    group when it has lapsed. Before it reports a taken group optimized it **fences**
//!    the lease's previous holder ([`LeaseStore::fence`]: its RADOS client is
//!    blocklisted), so a holder that was only stopped cannot write after the takeover;
//! 4. gives a group back (unlocks it) once its home gateway has been beating for
//!    [`LeaseParams::failback`] (failback), so its home gateway takes it on its next
//!    tick; a lease released this way has no holder to fence.
//!
//! A gateway whose own beat is refused as fenced reports every group inaccessible.
//!
//! Ordering: the lease thread alone changes this gateway's [`Ownership`]; after each
//! change it applies the group's state again ([`super::GroupApply::apply_ownership`]),
//! so the ANA states hosts see follow the leases within one tick.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::config::Ownership;

use super::GroupLink;

/// How long a fenced gateway keeps reporting its groups inaccessible before it
/// starts again (hosts read the ANA log on the change notice).
pub const FENCED_GRACE: Duration = Duration::from_secs(1);

/// Why a lease call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    /// This gateway's RADOS client is fenced (blocklisted).
    Fenced,
    Other(String),
}

impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseError::Fenced => f.write_str("this gateway's RADOS client is fenced"),
            LeaseError::Other(e) => f.write_str(e),
        }
    }
}

/// Where the leases and beats live (RADOS: [`super::rados_store::RadosLeases`]).
pub trait LeaseStore: Send + Sync {
    /// Writes this gateway's beat.
    fn beat(&self, beat: u64) -> Result<(), LeaseError>;
    /// The beats of `gateways` (absent: never beat).
    fn beats(&self, gateways: &[String]) -> Result<BTreeMap<String, u64>, LeaseError>;
    /// The address of the client holding ANA group `grpid`'s lease, if anyone holds
    /// it (a lapsed lease has no holder: RADOS drops lapsed lockers when it lists
    /// them, so the lease module remembers the holders it saw).
    fn holder(&self, grpid: u32) -> Result<Option<Holder>, LeaseError>;
    /// Takes (`renew`: extends) ANA group `grpid`'s lease for `duration`; whether this
    /// gateway holds it now.
    fn try_lock(&self, grpid: u32, renew: bool, duration: Duration) -> Result<bool, LeaseError>;
    /// Gives up ANA group `grpid`'s lease.
    fn unlock(&self, grpid: u32) -> Result<(), LeaseError>;
    /// Fences the client at `addr`: its writes are refused from now on.
    fn fence(&self, addr: &str) -> Result<(), LeaseError>;
    /// This gateway's own client address (never fenced by itself).
    fn my_addr(&self) -> String;
}

/// Who holds a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its RADOS client's address (what fencing blocklists).
    pub addr: String,
    /// Its gateway name (the lock's cookie).
    pub gateway: String,
}

/// Lease timing (`gateway_group.lease_ms`, `failback_ms`).
#[derive(Debug, Clone, Copy)]
pub struct LeaseParams {
    /// How long a lease lasts unless renewed; a dead gateway's groups move after it.
    pub lease: Duration,
    /// Renewals and checks happen this often (a third of the lease).
    pub tick: Duration,
    /// How long a gateway must be back before its home group returns; `None`: never.
    pub failback: Option<Duration>,
}

impl LeaseParams {
    /// The timing `g` asks for.
    pub fn of(g: &crate::config::GatewayGroupConfig) -> LeaseParams {
        /// Renewals per lease duration.
        const TICKS_PER_LEASE: u32 = 3;
        let lease = Duration::from_millis(g.lease_ms);
        LeaseParams {
            lease,
            tick: lease / TICKS_PER_LEASE,
            failback: g
                .failback
                .then(|| Duration::from_millis(g.failback_delay_ms)),
        }
    }
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Move::Took {
                grpid,
                fenced,
                silent_ms,
            } => {
                write!(f, "took ANA group {grpid}")?;
                if let Some(ms) = silent_ms {
                    write!(f, " after its gateway was silent {ms} ms")?;
                }
                if let Some(a) = fenced {
                    write!(f, ", fenced the previous holder {a}")?;
                }
                Ok(())
            }
            Move::Lost { grpid, why } => write!(f, "lost ANA group {grpid}: {why}"),
            Move::Released { grpid } => {
                write!(f, "gave ANA group {grpid} back to its home gateway")
            }
            Move::Fenced => f.write_str("fenced: this gateway serves nothing of the group"),
        }
    }
}

/// One ANA group's lease as a gateway sees it (`ctl status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub grpid: u32,
    /// The gateway whose home group it is.
    pub home: String,
    /// Who holds it: this gateway, or the holder it last saw (None: not known here).
    pub owner: Option<String>,
    /// For a lease this gateway holds: milliseconds until it ends unless renewed.
    pub expires_in_ms: Option<u64>,
}

/// What a tick changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Move {
    /// This gateway took ANA group `grpid` (`fenced`: the previous holder it fenced;
    /// `silent_ms`: how long its home gateway had not beaten, when it was another's).
    Took {
        grpid: u32,
        fenced: Option<String>,
        silent_ms: Option<u64>,
    },
    /// Its lease moved on (renewal refused).
    Lost { grpid: u32, why: String },
    /// Given back to its home gateway.
    Released { grpid: u32 },
    /// This gateway is fenced: it serves nothing of the group.
    Fenced,
}

/// What a gateway knows of another's beat.
#[derive(Debug, Clone, Copy)]
struct Peer {
    beat: Option<u64>,
    /// When the beat last moved (or when first seen).
    moved: Instant,
    /// Since when it has been beating without a gap, if it is alive.
    alive_since: Option<Instant>,
}

/// One gateway's lease state.
pub struct Owner {
    me: String,
    params: LeaseParams,
    beat: u64,
    peers: BTreeMap<String, Peer>,
    own: Ownership,
    /// The holder of each ANA group's lease when this gateway last looked: the client
    /// to fence if the lease lapses.
    seen: BTreeMap<u32, Holder>,
    /// When each held lease was last taken or renewed (the start of that tick: no
    /// later than the call, so the lease runs at least until this plus the lease).
    renewed: BTreeMap<u32, Instant>,
}

impl Owner {
    pub fn new(me: &str, params: LeaseParams) -> Owner {
        Owner {
            me: me.to_string(),
            params,
            beat: 0,
            peers: BTreeMap::new(),
            own: Ownership::default(),
            seen: BTreeMap::new(),
            renewed: BTreeMap::new(),
        }
    }

    pub fn ownership(&self) -> &Ownership {
        &self.own
    }

    /// Each ANA group of `homes` as this gateway sees it at `now`: who holds its lease
    /// (this gateway, or the holder it last saw) and, for its own, when the lease ends
    /// unless renewed.
    pub fn leases(&self, homes: &BTreeMap<String, u32>, now: Instant) -> Vec<LeaseView> {
        let mut v: Vec<LeaseView> = homes
            .iter()
            .map(|(home, &grpid)| {
                let mine = self.own.owned.contains(&grpid);
                LeaseView {
                    grpid,
                    home: home.clone(),
                    owner: if mine {
                        Some(self.me.clone())
                    } else {
                        self.seen.get(&grpid).map(|h| h.gateway.clone())
                    },
                    expires_in_ms: self.renewed.get(&grpid).filter(|_| mine).map(|t| {
                        let end = *t + self.params.lease;
                        u64::try_from(end.saturating_duration_since(now).as_millis())
                            .unwrap_or(u64::MAX)
                    }),
                }
            })
            .collect();
        v.sort_by_key(|l| l.grpid);
        v
    }

    fn alive(&self, gateway: &str, now: Instant) -> bool {
        gateway == self.me
            || self
                .peers
                .get(gateway)
                .is_some_and(|p| now.duration_since(p.moved) < self.params.lease)
    }

    fn observe(&mut self, beats: &BTreeMap<String, u64>, gateways: &[String], now: Instant) {
        for g in gateways.iter().filter(|g| **g != self.me) {
            let b = beats.get(g).copied();
            let lease = self.params.lease;
            let p = self.peers.entry(g.clone()).or_insert(Peer {
                beat: b,
                moved: now,
                alive_since: None,
            });
            if p.beat != b {
                p.beat = b;
                p.moved = now;
                p.alive_since.get_or_insert(now);
            } else if now.duration_since(p.moved) >= lease {
                p.alive_since = None;
            }
        }
    }

    /// Takes ANA group `grpid`'s lease if it is free or lapsed, fencing its previous
    /// holder first unless that holder is another gateway still beating (it gave the
    /// group back: failback).
    fn take(
        &mut self,
        s: &dyn LeaseStore,
        gw: &str,
        grpid: u32,
        now: Instant,
    ) -> Result<Option<Move>, LeaseError> {
        let holder = s.holder(grpid)?;
        if let Some(h) = &holder {
            self.seen.insert(grpid, h.clone());
        }
        if !s.try_lock(grpid, false, self.params.lease)? {
            return Ok(None);
        }
        let before = holder.or_else(|| self.seen.remove(&grpid));
        let stale = before
            .filter(|h| h.addr != s.my_addr())
            .filter(|h| h.gateway == self.me || !self.alive(&h.gateway, now))
            .map(|h| h.addr);
        if let Some(addr) = &stale {
            if let Err(e) = s.fence(addr) {
                // Not safe to serve: the old holder could still write. Try again later.
                let _ = s.unlock(grpid);
                return Err(e);
            }
        }
        self.seen.remove(&grpid);
        self.own.owned.insert(grpid);
        self.renewed.insert(grpid, now);
        let silent_ms = (gw != self.me)
            .then(|| self.peers.get(gw))
            .flatten()
            .map(|p| u64::try_from(now.duration_since(p.moved).as_millis()).unwrap_or(u64::MAX));
        Ok(Some(Move::Took {
            grpid,
            fenced: stale,
            silent_ms,
        }))
    }

    /// One round (see the module docs); `homes` maps each gateway of the group to its
    /// home ANA group. Returns what changed.
    pub fn tick(
        &mut self,
        s: &dyn LeaseStore,
        homes: &BTreeMap<String, u32>,
        now: Instant,
    ) -> Vec<Move> {
        let mut moves = Vec::new();
        if self.own.fenced {
            return moves;
        }
        // Leases first: a tick that runs late (slow RADOS calls) must not let a held
        // lease lapse while this gateway still reports its group optimized.
        let held: Vec<u32> = self.own.owned.iter().copied().collect();
        for grpid in held {
            match self.renew(s, grpid, now) {
                Ok(Some(m)) => moves.push(m),
                Ok(None) => {}
                Err(LeaseError::Fenced) => {
                    moves.push(self.fenced());
                    return moves;
                }
                Err(LeaseError::Other(e)) => warn!(grpid, "lease: {e}"),
            }
        }
        self.beat = self.beat.wrapping_add(1);
        if let Err(LeaseError::Fenced) = s.beat(self.beat) {
            moves.push(self.fenced());
            return moves;
        }
        let gateways: Vec<String> = homes.keys().cloned().collect();
        match s.beats(&gateways) {
            Ok(b) => self.observe(&b, &gateways, now),
            Err(e) => warn!("cannot read the gateways' beats: {e}"),
        }
        for (gw, &grpid) in homes {
            let r = if self.own.owned.contains(&grpid) {
                self.give_back(s, gw, grpid, now)
            } else if *gw == self.me || !self.alive(gw, now) {
                self.take(s, gw, grpid, now)
            } else {
                // Someone else's, alive: remember who holds it.
                match s.holder(grpid) {
                    Ok(Some(a)) => {
                        self.seen.insert(grpid, a);
                        Ok(None)
                    }
                    Ok(None) => Ok(None),
                    Err(e) => Err(e),
                }
            };
            match r {
                Ok(Some(m)) => moves.push(m),
                Ok(None) => {}
                Err(LeaseError::Fenced) => {
                    moves.push(self.fenced());
                    return moves;
                }
                Err(LeaseError::Other(e)) => warn!(grpid, "lease: {e}"),
            }
        }
        // Groups no gateway has any more are not held.
        let groups: BTreeSet<u32> = homes.values().copied().collect();
        self.own.owned.retain(|g| groups.contains(g));
        moves
    }

    /// This gateway's client is fenced: it holds nothing any more.
    fn fenced(&mut self) -> Move {
        self.renewed.clear();
        self.own = Ownership {
            owned: BTreeSet::new(),
            fenced: true,
        };
        Move::Fenced
    }

    /// Renews a held lease; drops the group when the renewal is refused or fails, or
    /// when the lease may have lapsed already (not renewed for a lease duration: then
    /// another gateway may hold it, so this one must not report the group optimized).
    fn renew(
        &mut self,
        s: &dyn LeaseStore,
        grpid: u32,
        now: Instant,
    ) -> Result<Option<Move>, LeaseError> {
        let last = self.renewed.get(&grpid).copied().unwrap_or(now);
        let since = now.saturating_duration_since(last);
        if since >= self.params.lease {
            self.drop_group(grpid);
            return Ok(Some(Move::Lost {
                grpid,
                why: format!(
                    "not renewed for {} ms, a whole lease: it may have lapsed",
                    since.as_millis()
                ),
            }));
        }
        match s.try_lock(grpid, true, self.params.lease) {
            Ok(true) => {
                self.renewed.insert(grpid, now);
                Ok(None)
            }
            Ok(false) => {
                self.drop_group(grpid);
                Ok(Some(Move::Lost {
                    grpid,
                    why: "another gateway holds its lease".into(),
                }))
            }
            Err(LeaseError::Other(e)) => {
                self.drop_group(grpid);
                Ok(Some(Move::Lost { grpid, why: e }))
            }
            Err(e) => Err(e),
        }
    }

    fn drop_group(&mut self, grpid: u32) {
        self.own.owned.remove(&grpid);
        self.renewed.remove(&grpid);
    }

    /// Gives a held group back to its home gateway once that one has been beating for
    /// the failback delay (failback).
    fn give_back(
        &mut self,
        s: &dyn LeaseStore,
        gw: &str,
        grpid: u32,
        now: Instant,
    ) -> Result<Option<Move>, LeaseError> {
        let home_back = gw != self.me
            && self.params.failback.is_some_and(|f| {
                self.peers
                    .get(gw)
                    .and_then(|p| p.alive_since)
                    .is_some_and(|t| now.duration_since(t) >= f)
            });
        if !home_back {
            return Ok(None);
        }
        s.unlock(grpid)?;
        self.drop_group(grpid);
        Ok(Some(Move::Released { grpid }))
    }
}

/// Runs `owner` for `live`'s gateway until `stop`: one tick every
/// [`LeaseParams::tick`], the ANA states applied after every change.
///
/// A fenced gateway reports every group inaccessible, waits [`FENCED_GRACE`] so hosts
/// read the new ANA states, and calls `on_fenced` (the binary starts itself again: a
/// new process has a new RADOS client, which is not fenced, and rejoins the group).
pub fn spawn(
    live: Arc<dyn super::GroupApply>,
    link: Arc<GroupLink>,
    store: Arc<dyn LeaseStore>,
    params: LeaseParams,
    stop: Arc<AtomicBool>,
    on_fenced: Box<dyn Fn() + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("nvmf-lease".into())
        .spawn(move || {
            let mut owner = Owner::new(&link.config.gateway, params);
            let name = link.config.name.clone();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let homes: BTreeMap<String, u32> = link
                    .last()
                    .gateways
                    .iter()
                    .map(|(g, r)| (g.clone(), r.grpid))
                    .collect();
                let moves = owner.tick(store.as_ref(), &homes, started);
                link.set_leases(owner.leases(&homes, Instant::now()), Instant::now());
                if !moves.is_empty() {
                    link.set_ownership(owner.ownership().clone());
                    for m in &moves {
                        info!(group = %name, "ANA ownership: {m}");
                    }
                    if let Err(e) = live.apply_ownership() {
                        warn!(group = %name, "ANA states not applied: {e}");
                    }
                    link.record_moves(&moves);
                    if owner.ownership().fenced {
                        warn!(group = %name, "fenced: this gateway's RADOS client is blocklisted; rejoining with a new one");
                        std::thread::sleep(FENCED_GRACE);
                        on_fenced();
                        return;
                    }
                }
                let spent = started.elapsed();
                std::thread::sleep(params.tick.saturating_sub(spent));
            }
        })
}
