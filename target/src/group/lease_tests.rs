//! The lease rules on an in-memory lease store with a hand-driven clock: each gateway
//! takes its home group, a silent gateway's group moves to one other gateway after its
//! lease lapsed (its client fenced first), comes back after the failback delay (with
//! nothing to fence), and a fenced gateway reports everything inaccessible.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::lease::{Holder, LeaseError, LeaseParams, LeaseStore, Move, Owner};

struct Lock {
    gateway: String,
    addr: String,
    expires: Instant,
}

#[derive(Default)]
struct Cluster {
    now: Option<Instant>,
    locks: BTreeMap<u32, Lock>,
    beats: BTreeMap<String, u64>,
    fenced: BTreeSet<String>,
}

/// One gateway's client of the shared [`Cluster`]: cls_lock's rules (identity =
/// client address and cookie; a lapsed lock is not listed).
struct Client {
    cluster: Arc<Mutex<Cluster>>,
    gateway: String,
    addr: String,
}

impl Client {
    fn check(&self, c: &Cluster) -> Result<(), LeaseError> {
        if c.fenced.contains(&self.addr) {
            return Err(LeaseError::Fenced);
        }
        Ok(())
    }
}

fn now_of(c: &Cluster) -> Instant {
    c.now.unwrap_or_else(Instant::now)
}

impl LeaseStore for Client {
    fn beat(&self, beat: u64) -> Result<(), LeaseError> {
        let mut c = self.cluster.lock();
        self.check(&c)?;
        c.beats.insert(self.gateway.clone(), beat);
        Ok(())
    }
    fn beats(&self, gateways: &[String]) -> Result<BTreeMap<String, u64>, LeaseError> {
        let c = self.cluster.lock();
        self.check(&c)?;
        Ok(c.beats
            .iter()
            .filter(|(g, _)| gateways.contains(g))
            .map(|(g, b)| (g.clone(), *b))
            .collect())
    }
    fn holder(&self, grpid: u32) -> Result<Option<Holder>, LeaseError> {
        let c = self.cluster.lock();
        self.check(&c)?;
        // As RADOS: a lapsed lock is not listed.
        let now = now_of(&c);
        Ok(c.locks
            .get(&grpid)
            .filter(|l| l.expires > now)
            .map(|l| Holder {
                addr: l.addr.clone(),
                gateway: l.gateway.clone(),
            }))
    }
    fn try_lock(&self, grpid: u32, renew: bool, duration: Duration) -> Result<bool, LeaseError> {
        let mut c = self.cluster.lock();
        self.check(&c)?;
        let now = now_of(&c);
        let mine = |l: &Lock| l.addr == self.addr && l.gateway == self.gateway;
        match c.locks.get(&grpid) {
            Some(l) if l.expires > now && !mine(l) => return Ok(false),
            Some(l) if l.expires > now && mine(l) && !renew => return Ok(false),
            _ => {}
        }
        c.locks.insert(
            grpid,
            Lock {
                gateway: self.gateway.clone(),
                addr: self.addr.clone(),
                expires: now + duration,
            },
        );
        Ok(true)
    }
    fn unlock(&self, grpid: u32) -> Result<(), LeaseError> {
        let mut c = self.cluster.lock();
        self.check(&c)?;
        if c.locks.get(&grpid).is_some_and(|l| l.addr == self.addr) {
            c.locks.remove(&grpid);
        }
        Ok(())
    }
    fn fence(&self, addr: &str) -> Result<(), LeaseError> {
        let mut c = self.cluster.lock();
        self.check(&c)?;
        c.fenced.insert(addr.to_string());
        Ok(())
    }
    fn my_addr(&self) -> String {
        self.addr.clone()
    }
}

const LEASE: Duration = Duration::from_millis(1000);
const FAILBACK: Duration = Duration::from_millis(2000);
const TICK: Duration = Duration::from_millis(300);

struct Gw {
    owner: Owner,
    client: Client,
}

fn gw(cluster: &Arc<Mutex<Cluster>>, name: &str, addr: &str) -> Gw {
    let params = LeaseParams {
        lease: LEASE,
        tick: TICK,
        failback: Some(FAILBACK),
    };
    Gw {
        owner: Owner::new(name, params),
        client: Client {
            cluster: cluster.clone(),
            gateway: name.to_string(),
            addr: addr.to_string(),
        },
    }
}

fn owned(g: &Gw) -> Vec<u32> {
    g.owner.ownership().owned.iter().copied().collect()
}

#[test]
fn groups_move_when_their_gateway_falls_silent_and_come_back_after_failback() {
    let t0 = Instant::now();
    let cluster = Arc::new(Mutex::new(Cluster {
        now: Some(t0),
        ..Default::default()
    }));
    let homes: BTreeMap<String, u32> = [("a", 1), ("b", 2), ("c", 3)]
        .map(|(g, n)| (g.to_string(), n))
        .into();
    let mut a = gw(&cluster, "a", "10.0.0.1:0/1");
    let mut b = gw(&cluster, "b", "10.0.0.2:0/1");
    let mut c = gw(&cluster, "c", "10.0.0.3:0/1");
    let mut now = t0;
    let step = |now: &mut Instant, gws: &mut [&mut Gw]| -> Vec<(String, Move)> {
        *now += TICK;
        cluster.lock().now = Some(*now);
        let mut out = Vec::new();
        for g in gws.iter_mut() {
            for m in g.owner.tick(&g.client, &homes, *now) {
                out.push((g.client.gateway.clone(), m));
            }
        }
        out
    };
    step(&mut now, &mut [&mut a, &mut b, &mut c]);
    assert_eq!(
        (owned(&a), owned(&b), owned(&c)),
        (vec![1], vec![2], vec![3])
    );
    // Many ticks later, nothing moved.
    for _ in 0..10 {
        assert!(step(&mut now, &mut [&mut a, &mut b, &mut c]).is_empty());
    }

    // c falls silent: after its lease lapsed one gateway takes group 3, fencing c.
    let silent = now;
    let mut took = Vec::new();
    while took.is_empty() {
        assert!(
            now.duration_since(silent) < LEASE * 3,
            "group 3 never moved"
        );
        took = step(&mut now, &mut [&mut a, &mut b]);
    }
    assert!(
        now.duration_since(silent) >= LEASE,
        "moved before c's lease lapsed"
    );
    assert_eq!(took.len(), 1, "{took:?}");
    let (taker, m) = &took[0];
    let Move::Took {
        grpid: 3,
        fenced: Some(addr),
        silent_ms: Some(ms),
    } = m
    else {
        panic!("{m:?}");
    };
    assert_eq!(addr, "10.0.0.3:0/1");
    assert!(
        *ms >= LEASE.as_millis() as u64 - TICK.as_millis() as u64,
        "{ms}"
    );
    let holder_has = |g: &Gw| owned(g).contains(&3);
    assert!(holder_has(if taker == "a" { &a } else { &b }));
    // The old c, woken, first drops its lease (not renewed for a whole lease), then
    // finds itself fenced: it reports everything inaccessible.
    let woke: Vec<Move> = step(&mut now, &mut [&mut c])
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert!(
        matches!(&woke[0], Move::Lost { grpid: 3, why } if why.contains("may have lapsed")),
        "{woke:?}"
    );
    assert_eq!(woke.last(), Some(&Move::Fenced), "{woke:?}");
    assert!(c.owner.ownership().fenced && owned(&c).is_empty());

    // c comes back as a new client; its group returns after the failback delay, with
    // nothing to fence (the holder released it).
    let mut c2 = gw(&cluster, "c", "10.0.0.3:0/2");
    let back = now;
    let mut moves = Vec::new();
    while !owned(&c2).contains(&3) {
        assert!(
            now.duration_since(back) < FAILBACK * 3,
            "group 3 never came back"
        );
        moves.extend(step(&mut now, &mut [&mut a, &mut b, &mut c2]));
    }
    assert!(
        now.duration_since(back) >= FAILBACK,
        "failback before the delay"
    );
    assert!(
        moves.iter().any(|(_, m)| *m == Move::Released { grpid: 3 }),
        "{moves:?}"
    );
    assert!(
        moves.iter().any(|(g, m)| g == "c"
            && matches!(
                m,
                Move::Took {
                    grpid: 3,
                    fenced: None,
                    ..
                }
            )),
        "{moves:?}"
    );
    assert_eq!(
        (owned(&a), owned(&b), owned(&c2)),
        (vec![1], vec![2], vec![3])
    );
    assert!(!cluster.lock().fenced.contains("10.0.0.3:0/2"));
}

#[test]
fn without_failback_a_group_stays_with_the_gateway_that_took_it() {
    let t0 = Instant::now();
    let cluster = Arc::new(Mutex::new(Cluster {
        now: Some(t0),
        ..Default::default()
    }));
    let homes: BTreeMap<String, u32> = [("a", 1), ("b", 2)].map(|(g, n)| (g.to_string(), n)).into();
    let params = LeaseParams {
        lease: LEASE,
        tick: TICK,
        failback: None,
    };
    let client = |g: &str, addr: &str| Client {
        cluster: cluster.clone(),
        gateway: g.to_string(),
        addr: addr.to_string(),
    };
    // b joined once and is gone: only a ticks.
    let (mut a, ca) = (Owner::new("a", params), client("a", "1:0/1"));
    let mut now = t0;
    let tick = |now: Instant| cluster.lock().now = Some(now);
    for _ in 0..(LEASE.as_millis() / TICK.as_millis() + 3) {
        now += TICK;
        tick(now);
        a.tick(&ca, &homes, now);
    }
    assert!(a.ownership().owned.contains(&2), "a took b's group");
    // b comes back: it waits, its group stays with a.
    let (mut b2, cb2) = (Owner::new("b", params), client("b", "2:0/2"));
    for _ in 0..(FAILBACK.as_millis() / TICK.as_millis() * 2) {
        now += TICK;
        tick(now);
        a.tick(&ca, &homes, now);
        b2.tick(&cb2, &homes, now);
    }
    assert_eq!(a.ownership().owned, [1, 2].into());
    assert!(b2.ownership().owned.is_empty());
}

/// A tick that comes a whole lease after the last renewal (the lease thread was late)
/// drops the group before anything else: the lease may be another gateway's by now.
#[test]
fn a_lease_not_renewed_for_a_whole_lease_is_dropped_at_once() {
    let t0 = Instant::now();
    let cluster = Arc::new(Mutex::new(Cluster {
        now: Some(t0),
        ..Default::default()
    }));
    let homes: BTreeMap<String, u32> = [("a", 1)].map(|(g, n)| (g.to_string(), n)).into();
    let mut a = gw(&cluster, "a", "1:0/1");
    a.owner.tick(&a.client, &homes, t0);
    assert_eq!(owned(&a), vec![1]);
    let late = t0 + LEASE;
    cluster.lock().now = Some(late);
    let moves = a.owner.tick(&a.client, &homes, late);
    assert!(
        matches!(&moves[0], Move::Lost { grpid: 1, why } if why.contains("may have lapsed")),
        "{moves:?}"
    );
    // Its own home group, free again, is taken back in the same tick.
    assert!(
        moves
            .iter()
            .any(|m| matches!(m, Move::Took { grpid: 1, .. })),
        "{moves:?}"
    );
}
