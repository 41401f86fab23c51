//! A controller: one association between a host and a subsystem.
//!
//! Created by an admin-queue Connect, shared (`Arc`) by every queue of the association,
//! which may live on different poll-group threads. Register state, features, the
//! asynchronous event queue and the logs sit behind one mutex: they change on admin
//! commands, never on the I/O path. The I/O path reads only atomics (`ready`, `dead`).
//!
//! Ordering: a queue checks [`Controller::is_dead`] before executing anything; once a
//! controller is dead (keep-alive expired, fatal error, host disconnect), its queues
//! fail new commands and tear down.
//!
//! Events: a controller whose Connect succeeded is announced
//! ([`Controller::announce`]: HostConnected); its end is announced once, by whoever
//! makes it dead ([`Controller::fatal`], [`Controller::release`]) or, for one dropped
//! while alive (its queues went away without ending it), by its `Drop`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use tracing::{info, warn};

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::admin::{aen_cfg, aer_notice, aer_result, aer_type};
use nvmf_common::wire::fabrics::{cc_css, shn, shst, Cc, Csts};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::status::Status;

use crate::events::{EventBus, TargetEvent};
use crate::params::{PortInfo, TargetParams};
use crate::subsystem::{Subsystem, MAX_NAMESPACES};

/// Asynchronous Event Request Limit (0-based in Identify Controller AERL).
pub const AER_LIMIT: usize = 4;
/// Error Information log entries kept (ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;
/// Changed Namespace List capacity before it reports overflow.
pub const CHANGED_NS_MAX: usize = 1024;

/// One Error Information log entry (what the host reads back).
#[derive(Debug, Clone, Copy)]
pub struct ErrorRecord {
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
    pub nsid: u32,
    pub lba: u64,
    pub opcode: u8,
}

/// Feature values the host can set.
#[derive(Debug, Clone)]
pub struct Features {
    pub async_event_config: u32,
    pub volatile_write_cache: bool,
    pub host_id: [u8; 16],
}

struct Inner {
    cc: Cc,
    csts: Csts,
    features: Features,
    /// Granted I/O queue count (Set Features Number of Queues); 0 until set.
    io_queues_granted: u16,
    io_queues_connected: Vec<bool>,
    pending_events: VecDeque<u32>,
    /// Event types reported and not yet cleared by reading their log page.
    masked_notice_ns: bool,
    masked_disc: bool,
    masked_ana: bool,
    /// Reservation notifications not yet read: (log page count, type, nsid).
    resv_log: VecDeque<(u64, u8, u32)>,
    resv_count: u64,
    changed_ns: Vec<u32>,
    changed_ns_overflow: bool,
    errors: VecDeque<ErrorRecord>,
    error_count: u64,
}

/// Reservation notifications kept per controller (nvmet keeps 64).
pub const RESV_LOG_MAX: usize = 64;

/// The keep-alive clock: milliseconds since one instant of the process (the first call),
/// the same for every controller, so that one conversion serves a whole poll pass.
pub fn keep_alive_ms(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

pub struct Controller {
    pub cntlid: Cntlid,
    pub subsys: Arc<Subsystem>,
    pub hostnqn: Nqn,
    pub hostid: [u8; 16],
    pub params: Arc<TargetParams>,
    /// The port the admin queue connected through (discovery filters by it).
    pub port: Arc<PortInfo>,
    kato_ms: AtomicU32,
    /// [`keep_alive_ms`] of the last command (traffic-based keep-alive).
    last_activity_ms: AtomicU64,
    ready: AtomicBool,
    dead: AtomicBool,
    events_ready: AtomicBool,
    /// Volatile Write Cache Enable (WCE), mirrored out of the features for the I/O path.
    write_cache_enabled: AtomicBool,
    /// The DH-HMAC-CHAP policy its queues must satisfy (None: no authentication).
    /// Read again from the target's hosts when the admin queue re-authenticates.
    auth: Mutex<Option<Arc<nvmf_common::auth::AuthPolicy>>>,
    /// The bus the controller was announced on; its end is announced there too.
    /// Unset: never announced (so its end is not either).
    events: OnceLock<EventBus>,
    inner: Mutex<Inner>,
}

impl Controller {
    pub fn new(
        cntlid: Cntlid,
        subsys: Arc<Subsystem>,
        hostnqn: Nqn,
        hostid: [u8; 16],
        kato_ms: u32,
        params: Arc<TargetParams>,
        port: Arc<PortInfo>,
    ) -> Arc<Self> {
        // nvmet's default (NVMET_AEN_CFG_OPTIONAL): namespace and ANA changes.
        let aen = aen_cfg::NS_ATTR | aen_cfg::ANA_CHANGE;
        Arc::new(Controller {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            kato_ms: AtomicU32::new(kato_ms),
            last_activity_ms: AtomicU64::new(keep_alive_ms(Instant::now())),
            ready: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            events_ready: AtomicBool::new(false),
            write_cache_enabled: AtomicBool::new(true),
            auth: Mutex::new(None),
            events: OnceLock::new(),
            inner: Mutex::new(Inner {
                cc: Cc(0),
                csts: Csts(0),
                features: Features {
                    async_event_config: aen,
                    volatile_write_cache: true,
                    host_id: hostid,
                },
                io_queues_granted: params.max_io_queues,
                io_queues_connected: vec![false; usize::from(params.max_io_queues) + 1],
                pending_events: VecDeque::new(),
                masked_notice_ns: false,
                masked_disc: false,
                masked_ana: false,
                resv_log: VecDeque::new(),
                resv_count: 0,
                changed_ns: Vec::new(),
                changed_ns_overflow: false,
                errors: VecDeque::new(),
                error_count: 0,
            }),
            params,
            port,
        })
    }

    /// The DH-HMAC-CHAP policy in force (None: queues need not authenticate).
    pub fn auth_policy(&self) -> Option<Arc<nvmf_common::auth::AuthPolicy>> {
        self.auth.lock().clone()
    }

    /// Replaces the policy (at creation and at the admin queue's re-authentication).
    pub fn set_auth_policy(&self, p: Option<Arc<nvmf_common::auth::AuthPolicy>>) {
        *self.auth.lock() = p;
    }

    /// CC.EN = 1 and CSTS.RDY = 1: commands other than fabrics ones may run.
    #[inline]
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    #[inline]
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Marks the controller failed (CSTS.CFS) and tears down its association.
    pub fn fatal(&self, why: &str) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            warn!(cntlid = %self.cntlid, subnqn = %self.subsys.nqn, host = %self.hostnqn, "controller fatal: {why}");
            let mut g = self.inner.lock();
            g.csts = g.csts.with_cfs(true);
            self.ready.store(false, Ordering::Release);
            drop(g);
            self.subsys.unregister_controller(self.cntlid);
            self.announce_end();
        }
    }

    /// Ends the association without error (host disconnected the admin queue).
    pub fn release(&self) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            info!(cntlid = %self.cntlid, subnqn = %self.subsys.nqn, host = %self.hostnqn, "controller released");
            self.ready.store(false, Ordering::Release);
            self.subsys.unregister_controller(self.cntlid);
            self.announce_end();
        }
    }

    /// Announces the controller (HostConnected) on `events` once its admin-queue
    /// Connect succeeded; its end will be announced there as well. Call it before the
    /// controller is registered, so that nothing can end it before it is announced.
    pub fn announce(&self, events: &EventBus) {
        if self.events.set(events.clone()).is_ok() {
            events.emit(TargetEvent::HostConnected {
                subsystem: self.subsys.nqn.to_string(),
                host: self.hostnqn.to_string(),
                cntlid: self.cntlid.0,
                portid: self.port.portid,
            });
        }
    }

    /// HostDisconnected, if the controller was announced. Callers run it once: on the
    /// transition to dead.
    fn announce_end(&self) {
        if let Some(events) = self.events.get() {
            events.emit(TargetEvent::HostDisconnected {
                subsystem: self.subsys.nqn.to_string(),
                host: self.hostnqn.to_string(),
                cntlid: self.cntlid.0,
                portid: self.port.portid,
            });
        }
    }

    // ---- keep-alive --------------------------------------------------------------

    pub fn kato_ms(&self) -> u32 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    pub fn set_kato_ms(&self, v: u32) {
        self.kato_ms.store(v, Ordering::Relaxed);
        self.touch(Instant::now());
    }

    /// Records host traffic (every command restarts the keep-alive timer: TBKAS).
    pub fn touch(&self, now: Instant) {
        self.touch_ms(keep_alive_ms(now));
    }

    /// [`Controller::touch`] with the time already converted ([`keep_alive_ms`]): a
    /// poll pass converts its clock once, not once a command.
    #[inline]
    pub fn touch_ms(&self, ms: u64) {
        self.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    /// Checks the keep-alive timer; on expiry the controller becomes fatal. Returns true
    /// if it expired now.
    pub fn check_keep_alive(&self, now: Instant) -> bool {
        let kato = u64::from(self.kato_ms());
        if kato == 0 || self.is_dead() {
            return false;
        }
        let now_ms = keep_alive_ms(now);
        let last = self.last_activity_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) > kato {
            self.fatal(&format!(
                "keep-alive timer expired ({kato} ms without traffic)"
            ));
            return true;
        }
        false
    }

    // ---- registers ------------------------------------------------------------------

    pub fn cc(&self) -> Cc {
        self.inner.lock().cc
    }

    pub fn csts(&self) -> Csts {
        self.inner.lock().csts
    }

    /// Applies a Property Set of CC. Returns the status for the command.
    pub fn write_cc(&self, new: Cc) -> Status {
        let mut g = self.inner.lock();
        let old = g.cc;
        g.cc = new;
        if new.en() && !old.en() {
            // Enable: the host must pick 64-byte SQEs, 16-byte CQEs and the NVM command
            // set, or all I/O command sets where CAP.CSS reports them (passthru).
            let css_ok = new.css() == cc_css::NVM
                || (new.css() == cc_css::CSI && self.subsys.passthru().is_some());
            if new.iosqes() != IOSQES || new.iocqes() != IOCQES || !css_ok || new.mps() != 0 {
                warn!(cntlid = %self.cntlid, cc = format!("{:#x}", new.0), "enable with unsupported CC fields");
                g.csts = g.csts.with_cfs(true);
                return Status::SUCCESS;
            }
            g.csts = g.csts.with_rdy(true);
            self.ready.store(true, Ordering::Release);
        } else if !new.en() && old.en() {
            g.csts = g.csts.with_rdy(false).with_shst(shst::NORMAL);
            self.ready.store(false, Ordering::Release);
        }
        if new.shn() != shn::NONE && old.shn() == shn::NONE {
            // Shutdown: no new I/O (not ready); every write the host saw complete reached
            // its backend, and the volatile caches are flushed (fdatasync) before
            // CSTS.SHST reports shutdown complete.
            self.ready.store(false, Ordering::Release);
            g.csts = g.csts.with_shst(shst::OCCURRING).with_rdy(false);
            drop(g);
            let synced = self.subsys.sync_namespaces();
            g = self.inner.lock();
            g.csts = g.csts.with_shst(shst::COMPLETE);
            info!(cntlid = %self.cntlid, synced, "controller shutdown (CC.SHN={}) complete", new.shn());
        } else if new.shn() == shn::NONE && old.shn() != shn::NONE {
            g.csts = g.csts.with_shst(shst::NORMAL);
        }
        Status::SUCCESS
    }

    // ---- queues ---------------------------------------------------------------------

    pub fn io_queues_granted(&self) -> u16 {
        self.inner.lock().io_queues_granted
    }

    /// Set Features Number of Queues: grants min(requested, limit).
    pub fn grant_io_queues(&self, requested: u16) -> u16 {
        let mut g = self.inner.lock();
        let n = requested.clamp(1, self.params.max_io_queues);
        g.io_queues_granted = n;
        n
    }

    /// Marks I/O queue `qid` connected; false when out of range or already connected.
    ///
    /// The range is the target's limit, not what Set Features Number of Queues granted:
    /// nvmet (`qid > subsys->max_qid`) and SPDK (the qpair mask's capacity) both accept
    /// a QID above the grant, so a host that creates one more queue than it asked for
    /// works with either; we accept it too. The discovery controller has no I/O queues.
    pub fn claim_io_queue(&self, qid: Qid) -> Result<(), QueueClaimError> {
        let mut g = self.inner.lock();
        if qid.0 == 0 || qid.0 > self.params.max_io_queues || self.subsys.is_discovery() {
            return Err(QueueClaimError::OutOfRange);
        }
        match g.io_queues_connected.get_mut(usize::from(qid.0)) {
            Some(slot) if !*slot => {
                *slot = true;
                Ok(())
            }
            Some(_) => Err(QueueClaimError::AlreadyConnected),
            None => Err(QueueClaimError::OutOfRange),
        }
    }

    pub fn release_io_queue(&self, qid: Qid) {
        let mut g = self.inner.lock();
        if let Some(slot) = g.io_queues_connected.get_mut(usize::from(qid.0)) {
            *slot = false;
        }
    }

    pub fn connected_io_queues(&self) -> usize {
        self.inner
            .lock()
            .io_queues_connected
            .iter()
            .filter(|b| **b)
            .count()
    }

    // ---- features -------------------------------------------------------------------

    pub fn features(&self) -> Features {
        self.inner.lock().features.clone()
    }

    pub fn set_async_event_config(&self, v: u32) {
        self.inner.lock().features.async_event_config = v;
    }

    pub fn set_volatile_write_cache(&self, v: bool) {
        self.inner.lock().features.volatile_write_cache = v;
        self.write_cache_enabled.store(v, Ordering::Release);
    }

    /// Whether any namespace of the subsystem sits on a volatile write cache (Identify
    /// Controller VWC bit 0; the Volatile Write Cache feature exists only then).
    pub fn volatile_write_cache_present(&self) -> bool {
        self.subsys
            .namespaces()
            .iter()
            .any(|ns| ns.backend.info().volatile_write_cache)
    }

    /// Whether writes may complete before they are durable: the cache is present and
    /// the host left it enabled (WCE). Otherwise every write is written through (FUA).
    #[inline]
    pub fn write_cache_enabled(&self) -> bool {
        self.write_cache_enabled.load(Ordering::Acquire)
    }

    // ---- asynchronous events ----------------------------------------------------------

    /// True when an event waits for an outstanding AER (cheap check for poll loops).
    #[inline]
    pub fn has_events(&self) -> bool {
        self.events_ready.load(Ordering::Acquire)
    }

    /// Takes the next event's AER completion dword 0.
    pub fn pop_event(&self) -> Option<u32> {
        let mut g = self.inner.lock();
        let ev = g.pending_events.pop_front();
        self.events_ready
            .store(!g.pending_events.is_empty(), Ordering::Release);
        ev
    }

    fn push_event(&self, g: &mut Inner, dw0: u32) {
        g.pending_events.push_back(dw0);
        self.events_ready.store(true, Ordering::Release);
    }

    /// A namespace was added, removed or resized: record it in the Changed Namespace
    /// List and raise a Namespace Attribute Changed notice if enabled and not masked.
    pub fn namespace_changed(&self, nsid: Nsid) {
        let mut g = self.inner.lock();
        if !g.changed_ns_overflow && !g.changed_ns.contains(&nsid.0) {
            if g.changed_ns.len() >= CHANGED_NS_MAX {
                g.changed_ns_overflow = true;
                g.changed_ns.clear();
            } else {
                g.changed_ns.push(nsid.0);
            }
        }
        if g.features.async_event_config & aen_cfg::NS_ATTR != 0 && !g.masked_notice_ns {
            g.masked_notice_ns = true;
            let dw0 = aer_result(
                aer_type::NOTICE,
                aer_notice::NS_ATTR_CHANGED,
                lid::CHANGED_NS,
            );
            self.push_event(&mut g, dw0);
        }
    }

    /// An ANA group's state changed on this controller's port: raise an ANA Change
    /// notice if enabled and not masked (until the host reads the ANA log page).
    pub fn ana_changed(&self) {
        let mut g = self.inner.lock();
        if g.features.async_event_config & aen_cfg::ANA_CHANGE != 0 && !g.masked_ana {
            g.masked_ana = true;
            let dw0 = aer_result(aer_type::NOTICE, aer_notice::ANA_CHANGE, lid::ANA);
            self.push_event(&mut g, dw0);
        }
    }

    /// A reservation notification for this controller's host: queued for the
    /// Reservation Notification log page (at most [`RESV_LOG_MAX`]; beyond that the
    /// log page count skips, as the spec describes for lost pages) and announced.
    pub fn reservation_notice(&self, ltype: u8, nsid: u32) {
        let mut g = self.inner.lock();
        g.resv_count = g.resv_count.wrapping_add(1).max(1);
        let count = g.resv_count;
        if g.resv_log.len() < RESV_LOG_MAX {
            g.resv_log.push_back((count, ltype, nsid));
        }
        let dw0 = aer_result(
            aer_type::IO_CMD_SPECIFIC,
            nvmf_common::wire::admin::aer_io_cmd_specific::RESERVATION_LOG_PAGE_AVAILABLE,
            lid::RESERVATION_NOTIFICATION,
        );
        self.push_event(&mut g, dw0);
    }

    /// The oldest reservation notification, removed: (count, type, notifications left
    /// (at most 255), nsid); an empty page when there is none.
    pub fn take_reservation_notice(&self) -> (u64, u8, u8, u32) {
        let mut g = self.inner.lock();
        match g.resv_log.pop_front() {
            Some((count, ltype, nsid)) => {
                let left = u8::try_from(g.resv_log.len()).unwrap_or(u8::MAX);
                (count, ltype, left, nsid)
            }
            None => (0, 0, 0, 0),
        }
    }

    /// Unmasks the ANA change notice (the host read the ANA log page without RAE).
    pub fn ana_log_read(&self, retain: bool) {
        if !retain {
            self.inner.lock().masked_ana = false;
        }
    }

    /// The discovery log changed: raise a Discovery Log Page Change notice if enabled.
    pub fn discovery_changed(&self) {
        let mut g = self.inner.lock();
        if g.features.async_event_config & aen_cfg::DISCOVERY_LOG_CHANGE != 0 && !g.masked_disc {
            g.masked_disc = true;
            let dw0 = aer_result(
                aer_type::NOTICE,
                aer_notice::DISCOVERY_LOG_CHANGE,
                lid::DISCOVERY,
            );
            self.push_event(&mut g, dw0);
        }
    }

    /// Reads (and, unless `retain`, clears) the Changed Namespace List.
    pub fn take_changed_ns(&self, retain: bool) -> Vec<u32> {
        let mut g = self.inner.lock();
        let out = if g.changed_ns_overflow {
            vec![nvmf_common::wire::log::CHANGED_NS_LIST_OVERFLOW]
        } else {
            g.changed_ns.clone()
        };
        if !retain {
            g.changed_ns.clear();
            g.changed_ns_overflow = false;
            g.masked_notice_ns = false;
        }
        out
    }

    /// Unmasks the discovery-change notice (the host read the discovery log without RAE).
    pub fn discovery_log_read(&self, retain: bool) {
        if !retain {
            self.inner.lock().masked_disc = false;
        }
    }

    // ---- error log ------------------------------------------------------------------

    /// Records a failed command in the Error Information log.
    pub fn record_error(&self, sqid: Qid, cid: u16, opcode: u8, nsid: u32, status: Status) {
        let mut g = self.inner.lock();
        g.error_count += 1;
        let rec = ErrorRecord {
            error_count: g.error_count,
            sqid: sqid.0,
            cid,
            status,
            nsid,
            lba: 0,
            opcode,
        };
        if g.errors.len() >= ERROR_LOG_ENTRIES {
            g.errors.pop_back();
        }
        g.errors.push_front(rec);
    }

    /// Error log entries, newest first.
    pub fn errors(&self) -> Vec<ErrorRecord> {
        self.inner.lock().errors.iter().copied().collect()
    }

    /// NN reported in Identify Controller.
    pub fn max_nsid(&self) -> u32 {
        MAX_NAMESPACES
    }

    // ---- namespaces as this controller's host sees them ------------------------------

    /// Namespace `nsid` if it is active and its host sees it ([`crate::visibility`]).
    /// Every per-namespace command and log finds namespaces through here.
    #[inline]
    pub fn namespace(&self, nsid: Nsid) -> Option<Arc<crate::namespace::Namespace>> {
        self.subsys
            .namespace(nsid)
            .filter(|n| n.visible_to(&self.hostnqn))
    }

    /// The namespaces its host sees, in NSID order.
    pub fn namespaces(&self) -> Vec<Arc<crate::namespace::Namespace>> {
        let mut v = self.subsys.namespaces();
        v.retain(|n| n.visible_to(&self.hostnqn));
        v
    }

    /// The active NSIDs its host sees, increasing (Identify CNS 02h).
    pub fn active_nsids(&self) -> Vec<u32> {
        self.namespaces().iter().map(|n| n.nsid.0).collect()
    }
}

/// Why an I/O queue Connect could not claim its qid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueClaimError {
    OutOfRange,
    AlreadyConnected,
}

/// CC.IOSQES / IOCQES values the target accepts: 2^6 = 64-byte SQEs, 2^4 = 16-byte CQEs.
pub const IOSQES: u8 = 6;
pub const IOCQES: u8 = 4;

impl Drop for Controller {
    fn drop(&mut self) {
        self.subsys.unregister_controller(self.cntlid);
        // Dropped while alive (no fatal or release ran, e.g. the poll groups stopped
        // with its queues): this is its end.
        if !std::mem::replace(self.dead.get_mut(), true) {
            self.announce_end();
        }
    }
}
