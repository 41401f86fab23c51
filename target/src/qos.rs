//! Per-namespace QoS: IOPS and bytes-per-second limits for reads, writes and both
//! (SPDK's `bdev_set_qos_limit` knobs, with IOPS split by direction too), enforced
//! where the poll groups admit commands.
//!
//! Where the budget lives: each poll group that serves a limited namespace keeps its
//! own token bucket per limit ([`QosGroup`], owned by the group thread, no sharing)
//! and refills it at its *share* of the limit. The shares are set off the data path:
//! every [`REBALANCE_PERIOD_NS`] (the group's timer) each group publishes its demand
//! (units admitted in the last period plus the units of its held commands, per
//! second) into its own slot of the namespace's [`NsQos`] with plain stores, reads
//! every other group's slot, and takes its share by water-filling: a group asking for
//! less than an equal split gets what it asks for, the rest is split among the
//! others; any remainder when the namespace is under its limit is split equally. All
//! groups compute from the same published numbers, so the shares sum to the limit.
//!
//! Per command, a limited namespace costs its group a refill and a compare per limit;
//! an unlimited one a relaxed load of its `enabled` flag. No lock, no shared
//! read-modify-write: the only compare-and-swap is a group claiming its slot, once per
//! (group, namespace).
//!
//! A bucket may go into debt by one command (a command is admitted while the bucket
//! is not negative), so a command larger than a bucket's burst still passes, and the
//! rate over time is the share exactly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{QosConfig, QOS_KINDS};

/// How often the groups publish their demand and recompute their shares.
pub const REBALANCE_PERIOD_NS: u64 = 20_000_000;
/// A slot not refreshed for this long belongs to a group that stopped serving the
/// namespace (or stopped): it is left out of the split.
const STALE_NS: u64 = 5 * REBALANCE_PERIOD_NS;
/// A group drops its state for a namespace it has not seen a command for this long.
const IDLE_DROP_NS: u64 = 2_000_000_000;
/// Tokens a bucket may bank while idle, as time at its rate: small, so that a burst
/// after a pause does not overshoot a 1 s window by more than 1%.
const BURST_NS: f64 = 10_000_000.0;
/// Groups that can serve one limited namespace at once.
pub const MAX_QOS_GROUPS: usize = 64;
const NS_PER_SEC: f64 = 1e9;

/// Limit indices (the [`QosConfig::as_array`] order).
const RW_IOS: usize = 0;
const R_IOS: usize = 1;
const W_IOS: usize = 2;
const RW_BYTES: usize = 3;
const R_BYTES: usize = 4;
const W_BYTES: usize = 5;

/// Every poll group (of every fabric) gets a distinct id for the slots; 0 is "free".
static NEXT_GROUP_UID: AtomicU64 = AtomicU64::new(1);

/// One group's published numbers for one namespace. Written by its owner only.
#[repr(align(64))]
#[derive(Default)]
struct GroupSlot {
    /// The group uid owning the slot; 0 while free.
    owner: AtomicU64,
    /// When the owner last published (monotonic ns).
    stamp_ns: AtomicU64,
    /// Demand per limit, units per second.
    demand: [AtomicU64; QOS_KINDS],
    /// Time commands spent held, summed over commands (ns).
    throttled_ns: AtomicU64,
    /// Commands that were held.
    throttled_commands: AtomicU64,
    /// Commands held now.
    queued: AtomicU64,
}

/// The shared QoS state of one namespace: its limits and one slot per group.
pub struct NsQos {
    /// Any limit set: the flag the unlimited fast path reads.
    enabled: AtomicBool,
    limits: [AtomicU64; QOS_KINDS],
    /// Moves on every change of the limits: groups rebalance at once.
    version: AtomicU64,
    slots: Box<[GroupSlot]>,
}

impl Default for NsQos {
    fn default() -> Self {
        NsQos {
            enabled: AtomicBool::new(false),
            limits: Default::default(),
            version: AtomicU64::new(0),
            slots: (0..MAX_QOS_GROUPS).map(|_| GroupSlot::default()).collect(),
        }
    }
}

/// QoS counters of one namespace, summed over groups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosStats {
    pub limits: QosConfig,
    pub throttled_ns: u64,
    pub throttled_commands: u64,
    pub queued: u64,
}

impl NsQos {
    pub fn new(limits: &QosConfig) -> Self {
        let q = NsQos::default();
        q.set(limits);
        q
    }

    /// Whether any limit is set (one relaxed load: the unlimited fast path).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Sets the limits live; groups pick them up at their next command or timer.
    pub fn set(&self, limits: &QosConfig) {
        for (a, v) in self.limits.iter().zip(limits.as_array()) {
            a.store(v, Ordering::Relaxed);
        }
        // Control plane only (a change of the limits), never per I/O.
        self.version.fetch_add(1, Ordering::Release);
        self.enabled
            .store(!limits.is_unlimited(), Ordering::Release);
    }

    pub fn limits(&self) -> QosConfig {
        let mut a = [0u64; QOS_KINDS];
        for (v, l) in a.iter_mut().zip(&self.limits) {
            *v = l.load(Ordering::Relaxed);
        }
        QosConfig::from_array(a)
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The counters summed over groups.
    pub fn stats(&self) -> QosStats {
        let mut s = QosStats {
            limits: self.limits(),
            ..QosStats::default()
        };
        for g in self.slots.iter() {
            s.throttled_ns += g.throttled_ns.load(Ordering::Relaxed);
            s.throttled_commands += g.throttled_commands.load(Ordering::Relaxed);
            s.queued += g.queued.load(Ordering::Relaxed);
        }
        s
    }

    /// Claims a free slot for group `uid` (or finds its own).
    fn claim(&self, uid: u64) -> Option<usize> {
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.owner.load(Ordering::Acquire) == uid)
        {
            return Some(i);
        }
        self.slots.iter().position(|s| {
            s.owner
                .compare_exchange(0, uid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }
}

/// What a command costs, per limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    units: [u64; QOS_KINDS],
}

/// The direction of an I/O command for QoS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    Read,
    Write,
    /// Every other I/O command: counts against `rw_ios_per_sec` only.
    Other,
}

impl Cost {
    pub fn new(class: IoClass, bytes: u64) -> Cost {
        let mut units = [0u64; QOS_KINDS];
        units[RW_IOS] = 1;
        match class {
            IoClass::Read => {
                units[R_IOS] = 1;
                units[RW_BYTES] = bytes;
                units[R_BYTES] = bytes;
            }
            IoClass::Write => {
                units[W_IOS] = 1;
                units[RW_BYTES] = bytes;
                units[W_BYTES] = bytes;
            }
            IoClass::Other => {}
        }
        Cost { units }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The limit this bucket enforces (0: none), as of the last rebalance.
    limit: u64,
    /// This group's share of the limit, units per second.
    rate: f64,
    tokens: f64,
}

/// One group's state for one limited namespace.
struct NsState {
    qos: Arc<NsQos>,
    slot: Option<usize>,
    version: u64,
    buckets: [Bucket; QOS_KINDS],
    /// Units admitted since the last rebalance.
    admitted: [u64; QOS_KINDS],
    /// Units of the commands held now.
    held_units: [u64; QOS_KINDS],
    held: u64,
    throttled_ns: u64,
    throttled_commands: u64,
    last_refill_ns: u64,
    period_start_ns: u64,
    last_active_ns: u64,
}

/// A poll group's QoS state: its buckets per limited namespace.
pub struct QosGroup {
    uid: u64,
    states: Vec<NsState>,
}

impl Default for QosGroup {
    fn default() -> Self {
        QosGroup {
            uid: NEXT_GROUP_UID.fetch_add(1, Ordering::Relaxed),
            states: Vec::new(),
        }
    }
}

/// This group's share of `limit` given every fresh group's demand (`mine` indexes
/// `demands`): max-min fair (water-filling), the remainder split equally.
pub fn share(limit: f64, demands: &[f64], mine: usize) -> f64 {
    let n = demands.len();
    let Some(&my) = demands.get(mine) else {
        return 0.0;
    };
    if n == 0 {
        return 0.0;
    }
    let total: f64 = demands.iter().sum();
    if total <= limit {
        return my + (limit - total) / n as f64;
    }
    let mut sorted: Vec<f64> = demands.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut left = limit;
    for (i, d) in sorted.iter().enumerate() {
        let fair = left / (n - i) as f64;
        if *d >= fair {
            // Everyone from here on asks for at least the fair level: they get it.
            return my.min(fair);
        }
        left -= d;
    }
    my
}

impl QosGroup {
    /// The index of this group's state for `qos`, made (and balanced) on first use.
    pub fn state(&mut self, qos: &Arc<NsQos>, now: u64) -> usize {
        if let Some(i) = self.states.iter().position(|s| Arc::ptr_eq(&s.qos, qos)) {
            return i;
        }
        let slot = qos.claim(self.uid);
        if slot.is_none() {
            tracing::warn!(
                "more than {MAX_QOS_GROUPS} poll groups serve one limited namespace: this one is not counted in its split"
            );
        }
        if let Some(s) = slot.and_then(|i| qos.slots.get(i)) {
            // Counters continue from the slot's previous owner, so they never go back.
            s.stamp_ns.store(now, Ordering::Relaxed);
        }
        let (throttled_ns, throttled_commands) =
            slot.and_then(|i| qos.slots.get(i)).map_or((0, 0), |s| {
                (
                    s.throttled_ns.load(Ordering::Relaxed),
                    s.throttled_commands.load(Ordering::Relaxed),
                )
            });
        self.states.push(NsState {
            qos: qos.clone(),
            slot,
            version: u64::MAX,
            buckets: Default::default(),
            admitted: [0; QOS_KINDS],
            held_units: [0; QOS_KINDS],
            held: 0,
            throttled_ns,
            throttled_commands,
            last_refill_ns: now,
            period_start_ns: now,
            last_active_ns: now,
        });
        let i = self.states.len() - 1;
        if let Some(st) = self.states.get_mut(i) {
            st.rebalance(now);
        }
        i
    }

    /// Takes `cost` from state `i`'s buckets if none is in debt; false: hold it.
    pub fn try_admit(&mut self, i: usize, cost: &Cost, now: u64) -> bool {
        let Some(st) = self.states.get_mut(i) else {
            return true;
        };
        st.last_active_ns = now;
        if st.version != st.qos.version() {
            st.rebalance(now);
        }
        st.refill(now);
        let ok = st
            .buckets
            .iter()
            .zip(cost.units)
            .all(|(b, u)| b.limit == 0 || u == 0 || b.tokens >= 0.0);
        if ok {
            for ((b, a), u) in st.buckets.iter_mut().zip(&mut st.admitted).zip(cost.units) {
                if b.limit != 0 {
                    b.tokens -= u as f64;
                }
                *a += u;
            }
        }
        ok
    }

    /// A command of state `i` costing `cost` is held.
    pub fn hold(&mut self, i: usize, cost: &Cost) {
        if let Some(st) = self.states.get_mut(i) {
            for (h, u) in st.held_units.iter_mut().zip(cost.units) {
                *h += u;
            }
            st.held += 1;
            st.throttled_commands += 1;
            st.publish_counters();
        }
    }

    /// A held command of state `i` leaves the hold after `waited_ns`.
    pub fn unhold(&mut self, i: usize, cost: &Cost, waited_ns: u64) {
        if let Some(st) = self.states.get_mut(i) {
            for (h, u) in st.held_units.iter_mut().zip(cost.units) {
                *h = h.saturating_sub(u);
            }
            st.held = st.held.saturating_sub(1);
            st.throttled_ns += waited_ns;
            st.publish_counters();
        }
    }

    /// The timer: every state publishes its demand and takes its new share; states
    /// idle for long (and holding nothing) are dropped and their slots freed.
    pub fn rebalance(&mut self, now: u64) {
        let uid = self.uid;
        self.states.retain(|st| {
            let idle = st.held == 0 && now.saturating_sub(st.last_active_ns) > IDLE_DROP_NS;
            if idle {
                st.release(uid);
            }
            !idle
        });
        for st in &mut self.states {
            if now.saturating_sub(st.period_start_ns) >= REBALANCE_PERIOD_NS
                || st.version != st.qos.version()
            {
                st.rebalance(now);
            }
        }
    }

    /// Whether this group has limited namespaces (the timer has work).
    pub fn is_active(&self) -> bool {
        !self.states.is_empty()
    }
}

impl Drop for QosGroup {
    fn drop(&mut self) {
        for st in &self.states {
            st.release(self.uid);
        }
    }
}

impl NsState {
    fn slot(&self) -> Option<&GroupSlot> {
        self.slot.and_then(|i| self.qos.slots.get(i))
    }

    fn refill(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_refill_ns) as f64;
        self.last_refill_ns = now;
        for b in &mut self.buckets {
            if b.limit != 0 {
                let cap = (b.rate * BURST_NS / NS_PER_SEC).max(0.0);
                b.tokens = (b.tokens + b.rate * dt / NS_PER_SEC).min(cap);
            }
        }
    }

    fn publish_counters(&self) {
        if let Some(s) = self.slot() {
            s.throttled_ns.store(self.throttled_ns, Ordering::Relaxed);
            s.throttled_commands
                .store(self.throttled_commands, Ordering::Relaxed);
            s.queued.store(self.held, Ordering::Relaxed);
        }
    }

    /// Publishes this group's demand and takes its share of every limit.
    fn rebalance(&mut self, now: u64) {
        self.refill(now);
        let period = now.saturating_sub(self.period_start_ns).max(1_000_000) as f64;
        let mut mine = [0f64; QOS_KINDS];
        for ((m, a), h) in mine.iter_mut().zip(self.admitted).zip(self.held_units) {
            *m = (a + h) as f64 * NS_PER_SEC / period;
        }
        self.admitted = [0; QOS_KINDS];
        self.period_start_ns = now;
        self.version = self.qos.version();
        let my_slot = self.slot;
        if let Some(s) = self.slot() {
            for (d, m) in s.demand.iter().zip(mine) {
                d.store(m.ceil() as u64, Ordering::Relaxed);
            }
            s.stamp_ns.store(now, Ordering::Release);
        }
        let limits = self.qos.limits().as_array();
        for (k, (b, limit)) in self.buckets.iter_mut().zip(limits).enumerate() {
            b.limit = limit;
            if limit == 0 {
                b.tokens = 0.0;
                b.rate = 0.0;
                continue;
            }
            let mut demands = Vec::with_capacity(8);
            let mut me = 0;
            for (i, s) in self.qos.slots.iter().enumerate() {
                if Some(i) == my_slot {
                    me = demands.len();
                    demands.push(mine.get(k).copied().unwrap_or(0.0));
                    continue;
                }
                if s.owner.load(Ordering::Acquire) == 0
                    || now.saturating_sub(s.stamp_ns.load(Ordering::Acquire)) > STALE_NS
                {
                    continue;
                }
                demands.push(s.demand.get(k).map_or(0, |d| d.load(Ordering::Relaxed)) as f64);
            }
            if my_slot.is_none() {
                me = demands.len();
                demands.push(mine.get(k).copied().unwrap_or(0.0));
            }
            b.rate = share(limit as f64, &demands, me);
        }
    }

    fn release(&self, uid: u64) {
        if let Some(s) = self.slot() {
            s.queued.store(0, Ordering::Relaxed);
            for d in &s.demand {
                d.store(0, Ordering::Relaxed);
            }
            let _ = s
                .owner
                .compare_exchange(uid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_sum_to_the_limit_and_serve_small_demands_first() {
        let d = [100.0, 5000.0, 5000.0];
        let s: Vec<f64> = (0..3).map(|i| share(1000.0, &d, i)).collect();
        assert!((s.iter().sum::<f64>() - 1000.0).abs() < 1e-6, "{s:?}");
        assert!((s[0] - 100.0).abs() < 1e-6);
        assert!((s[1] - 450.0).abs() < 1e-6);
        // Under the limit: everyone gets its demand and an equal part of the rest.
        let d = [100.0, 200.0];
        assert!((share(1000.0, &d, 0) - 450.0).abs() < 1e-6);
        assert!((share(1000.0, &d, 1) - 550.0).abs() < 1e-6);
        // No demand anywhere: an equal split.
        assert!((share(900.0, &[0.0, 0.0, 0.0], 2) - 300.0).abs() < 1e-6);
    }

    #[test]
    fn one_group_admits_at_its_limit() {
        let qos = Arc::new(NsQos::new(&QosConfig {
            rw_ios_per_sec: 1000,
            ..QosConfig::default()
        }));
        let mut g = QosGroup::default();
        let cost = Cost::new(IoClass::Read, 4096);
        let mut now = 1_000_000_000u64;
        let i = g.state(&qos, now);
        let mut admitted = 0u64;
        // A command offered every 100 µs (10000/s) for 2 s.
        for step in 0..20_000u64 {
            now += 100_000;
            if g.try_admit(i, &cost, now) {
                admitted += 1;
            }
            if step % 200 == 0 {
                g.rebalance(now);
            }
        }
        assert!((1950..=2050).contains(&admitted), "{admitted}");
    }

    /// Groups `a` and `b` offered commands at rates `ra`, `rb` per ms for 2 s;
    /// returns the units admitted in the last second, per group.
    fn run_two(qos: &Arc<NsQos>, cost: Cost, ra: u64, rb: u64) -> (u64, u64) {
        let mut groups = [QosGroup::default(), QosGroup::default()];
        let mut now = 1_000_000_000u64;
        let idx: Vec<usize> = groups.iter_mut().map(|g| g.state(qos, now)).collect();
        let mut held = [0u64; 2];
        let mut second = [0u64; 2];
        let mut next_rebalance = now;
        for ms in 0..2000u64 {
            for step in 0..10u64 {
                now += 100_000;
                for (k, g) in groups.iter_mut().enumerate() {
                    let rate = if k == 0 { ra } else { rb };
                    if step == 0 {
                        for _ in 0..rate {
                            g.hold(idx[k], &cost);
                        }
                        held[k] += rate;
                    }
                    while held[k] > 0 && g.try_admit(idx[k], &cost, now) {
                        g.unhold(idx[k], &cost, 0);
                        held[k] -= 1;
                        if ms >= 1000 {
                            second[k] += 1;
                        }
                    }
                }
                if now >= next_rebalance {
                    next_rebalance = now + REBALANCE_PERIOD_NS;
                    for g in &mut groups {
                        g.rebalance(now);
                    }
                }
            }
        }
        (second[0], second[1])
    }

    #[test]
    fn two_groups_split_one_limit() {
        let qos = Arc::new(NsQos::new(&QosConfig {
            w_bytes_per_sec: 10 * 1024 * 1024,
            ..QosConfig::default()
        }));
        // 128 KiB writes; a offers 3x what b offers, both above the limit together.
        let (a, b) = run_two(&qos, Cost::new(IoClass::Write, 128 * 1024), 3, 1);
        let want = 80.0; // 10 MiB/s of 128 KiB
        let got = (a + b) as f64;
        assert!((got - want).abs() / want <= 0.05, "{a} + {b} vs {want}");
        // b asks for 125/s alone, more than half: each gets about half.
        assert!(b >= 35, "{a} {b}");
        // One group far under its part: it gets what it asks, the other the rest.
        let qos = Arc::new(NsQos::new(&QosConfig {
            rw_ios_per_sec: 5000,
            ..QosConfig::default()
        }));
        let (a, b) = run_two(&qos, Cost::new(IoClass::Read, 4096), 20, 1);
        assert!(
            ((a + b) as f64 - 5000.0).abs() / 5000.0 <= 0.05,
            "{a} + {b}"
        );
        assert!((950..=1000).contains(&b), "{b}");
    }

    #[test]
    fn a_live_change_applies_at_the_next_command() {
        let qos = Arc::new(NsQos::new(&QosConfig {
            r_ios_per_sec: 10,
            ..QosConfig::default()
        }));
        let mut g = QosGroup::default();
        let now = 1_000_000_000u64;
        let i = g.state(&qos, now);
        let cost = Cost::new(IoClass::Read, 512);
        assert!(g.try_admit(i, &cost, now));
        assert!(!g.try_admit(i, &cost, now + 1000));
        qos.set(&QosConfig::default());
        assert!(!qos.is_enabled());
        assert!(g.try_admit(i, &cost, now + 2000));
        // Writes never count against a read limit.
        qos.set(&QosConfig {
            r_ios_per_sec: 1,
            ..QosConfig::default()
        });
        for k in 0..100 {
            assert!(g.try_admit(i, &Cost::new(IoClass::Write, 512), now + 3000 + k));
        }
    }
}
