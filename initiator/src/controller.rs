//! Controller bring-up, keep-alive and shutdown.
//!
//! Owned by the host library. [`Controller::connect`] follows the order of the NVMe
//! over Fabrics and Base specifications (and Linux `nvme_rdma_setup_ctrl`):
//!
//! 1. connect the admin queue on the transport, then fabrics Connect (qid 0, dynamic
//!    CNTLID) — the CNTLID comes back in dw0;
//! 2. Property Get CAP and VS; Property Set CC (EN=1, IOSQES=6, IOCQES=4, CSS=NVM,
//!    MPS=CAP.MPSMIN, AMS=round robin); poll CSTS until RDY=1 (CFS=1 is fatal) for at
//!    most CAP.TO × 500 ms;
//! 3. Identify Controller (kept raw and parsed);
//! 4. for an I/O controller: Set Features Number of Queues, then connect each I/O
//!    queue (transport, then fabrics Connect with the admin CNTLID);
//! 5. Identify Active Namespace List and Identify Namespace for each.
//!
//! With a keep-alive timeout, a background thread sends Keep Alive every KATO/2 on the
//! admin queue (which lives behind a mutex for that reason) until the controller is
//! dropped or shut down. I/O queues are handed to the caller with
//! [`Controller::take_io_queues`]; each is then driven by one thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{debug, info, trace, warn};

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::admin::{fid, num_queues_decode, sel};
use nvmf_common::wire::fabrics::{
    ams, cc_css, reg, shn, shst, vs_parts, Cap, Cc, Csts, CONNECT_IATTR_DATA,
};
use nvmf_common::wire::identify::{
    cntrltype, flbas, parse_ns_id_descriptors, parse_ns_list, IdentifyController,
    IdentifyNamespace, NsIdDescriptor, IDENTIFY_LEN, NS_LIST_MAX,
};
use nvmf_common::wire::sqe::SQE_LEN;
use nvmf_common::wire::status::{cmd_specific, Sct};

use crate::command::{self, SqeBytes};
use crate::error::{check_status, Error};
use crate::queue::{Completion, Queue};
use crate::transport::{DataDir, Fabric, IoBuf, QueueParams};

/// Default I/O queue entries (Linux `NVMF_DEF_QUEUE_SIZE`).
pub const DEFAULT_QUEUE_SIZE: u16 = 128;
/// Default admin queue entries (Linux `NVME_AQ_DEPTH`).
pub const DEFAULT_ADMIN_QUEUE_SIZE: u16 = 32;
/// Default keep-alive timeout for I/O controllers (Linux `NVME_DEFAULT_KATO`, 5 s).
pub const DEFAULT_KATO_MS: u32 = 5_000;
/// Default per-command timeout (Linux `NVME_IO_TIMEOUT`, 30 s).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Default transport connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The smallest usable queue: one command outstanding needs two entries.
pub const MIN_QUEUE_SIZE: u16 = 2;

/// CAP.TO is in units of 500 ms.
const CAP_TO_UNIT: Duration = Duration::from_millis(500);
/// How often CSTS is polled while waiting for RDY or SHST.
const CSTS_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long a normal shutdown may take before the host gives up waiting.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of the Disconnect sent on each I/O queue at shutdown.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// log2 of the SQE and CQE sizes for CC.IOSQES / CC.IOCQES (64 and 16 bytes).
const IOSQES_LOG2: u8 = 6;
const IOCQES_LOG2: u8 = 4;
/// Memory page size for CC.MPS = 0 (2^(12 + MPS)).
const PAGE_SHIFT_BASE: u32 = 12;
/// Bytes per IOCCSZ / IORCSZ unit.
const CAPSULE_SIZE_UNIT: u32 = 16;
/// Most namespaces enumerated (bounds what a misbehaving target can make us do).
const MAX_NAMESPACES: usize = 64 * 1024;

/// What to connect to and how.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub subnqn: Nqn,
    pub hostnqn: Nqn,
    pub hostid: [u8; 16],
    /// I/O queues requested (0: admin queue only).
    pub nr_io_queues: u16,
    /// I/O queue entries (capped by CAP.MQES + 1 and MAXCMD).
    pub queue_size: u16,
    pub admin_queue_size: u16,
    /// Keep-alive timeout in milliseconds; 0 disables keep-alive.
    pub kato_ms: u32,
    /// How long an admin command may take.
    pub command_timeout: Duration,
    /// How long a transport queue connection may take.
    pub connect_timeout: Duration,
}

impl ConnectOptions {
    /// Defaults for an I/O controller: one I/O queue per CPU, 128 entries, KATO 5 s.
    pub fn new(subnqn: Nqn, hostnqn: Nqn, hostid: [u8; 16]) -> ConnectOptions {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let discovery = subnqn.is_discovery();
        ConnectOptions {
            subnqn,
            hostnqn,
            hostid,
            nr_io_queues: if discovery {
                0
            } else {
                u16::try_from(cpus).unwrap_or(u16::MAX)
            },
            queue_size: DEFAULT_QUEUE_SIZE,
            admin_queue_size: DEFAULT_ADMIN_QUEUE_SIZE,
            kato_ms: if discovery { 0 } else { DEFAULT_KATO_MS },
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Defaults for the discovery controller: no I/O queues, no keep-alive.
    pub fn discovery(hostnqn: Nqn, hostid: [u8; 16]) -> ConnectOptions {
        ConnectOptions::new(Nqn::discovery(), hostnqn, hostid)
    }

    fn validate(&self) -> Result<(), Error> {
        if self.admin_queue_size < MIN_QUEUE_SIZE {
            return Err(Error::InvalidArgument(format!(
                "admin queue size {} is below {MIN_QUEUE_SIZE}",
                self.admin_queue_size
            )));
        }
        if self.nr_io_queues > 0 && self.queue_size < MIN_QUEUE_SIZE {
            return Err(Error::InvalidArgument(format!(
                "queue size {} is below {MIN_QUEUE_SIZE}",
                self.queue_size
            )));
        }
        if self.command_timeout.is_zero() {
            return Err(Error::InvalidArgument("command timeout is zero".into()));
        }
        Ok(())
    }
}

/// The Identify Controller fields the host uses, parsed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ControllerIdentity {
    pub vid: u16,
    pub ssvid: u16,
    pub sn: String,
    pub mn: String,
    pub fr: String,
    pub rab: u8,
    pub ieee: [u8; 3],
    pub cmic: u8,
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    pub rtd3e: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub cntrltype: u8,
    pub oacs: u16,
    pub acl: u8,
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    pub elpe: u8,
    pub kas: u16,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    pub nn: u32,
    pub oncs: u16,
    pub fuses: u16,
    pub vwc: u8,
    pub sgls: u32,
    pub mnan: u32,
    pub subnqn: String,
    pub ioccsz: u32,
    pub iorcsz: u32,
    pub icdoff: u16,
    pub fcatt: u8,
    pub msdbd: u8,
    /// In-capsule data the I/O queues accept (IOCCSZ × 16 − 64 bytes).
    pub in_capsule_data: u32,
    /// Largest data transfer in bytes (2^MDTS pages); `None` = no limit.
    pub max_transfer: Option<u64>,
}

impl ControllerIdentity {
    /// Parses an Identify Controller structure; `mpsmin` (CAP.MPSMIN) is MDTS's unit.
    pub fn parse(data: &[u8], mpsmin: u8) -> Result<ControllerIdentity, Error> {
        let id = IdentifyController::new_checked(data)
            .map_err(|e| Error::Protocol(format!("Identify Controller data: {e}")))?;
        let ioccsz = id.ioccsz();
        let mdts = id.mdts();
        let page_shift = PAGE_SHIFT_BASE + u32::from(mpsmin);
        let max_transfer = (mdts != 0).then(|| {
            1u64.checked_shl(page_shift + u32::from(mdts))
                .unwrap_or(u64::MAX)
        });
        Ok(ControllerIdentity {
            vid: id.vid(),
            ssvid: id.ssvid(),
            sn: id.sn_string(),
            mn: id.mn_string(),
            fr: id.fr_string(),
            rab: id.rab(),
            ieee: id.ieee(),
            cmic: id.cmic(),
            mdts,
            cntlid: id.cntlid(),
            ver: id.ver(),
            rtd3e: id.rtd3e(),
            oaes: id.oaes(),
            ctratt: id.ctratt(),
            cntrltype: id.cntrltype(),
            oacs: id.oacs(),
            acl: id.acl(),
            aerl: id.aerl(),
            frmw: id.frmw(),
            lpa: id.lpa(),
            elpe: id.elpe(),
            kas: id.kas(),
            sqes: id.sqes(),
            cqes: id.cqes(),
            maxcmd: id.maxcmd(),
            nn: id.nn(),
            oncs: id.oncs(),
            fuses: id.fuses(),
            vwc: id.vwc(),
            sgls: id.sgls(),
            mnan: id.mnan(),
            subnqn: id.subnqn_str().unwrap_or_default().to_string(),
            ioccsz,
            iorcsz: id.iorcsz(),
            icdoff: id.icdoff(),
            fcatt: id.fcatt(),
            msdbd: id.msdbd(),
            in_capsule_data: ioccsz
                .saturating_mul(CAPSULE_SIZE_UNIT)
                .saturating_sub(SQE_LEN as u32),
            max_transfer,
        })
    }

    pub fn is_discovery(&self) -> bool {
        self.cntrltype == cntrltype::DISCOVERY
    }
}

/// One active namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: Nsid,
    /// Size in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    /// Logical block size in bytes (2^LBADS of the format in use).
    pub block_size: u32,
    /// Metadata bytes per block of the format in use (0 for all our targets).
    pub metadata_size: u16,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// From the Namespace Identification Descriptor list, when the target has one.
    pub uuid: Option<[u8; 16]>,
}

impl NamespaceInfo {
    /// Parses an Identify Namespace structure. `Ok(None)` for an inactive namespace
    /// (NSZE 0); an error for a format this host cannot use.
    pub fn parse(nsid: Nsid, data: &[u8]) -> Result<Option<NamespaceInfo>, Error> {
        let id = IdentifyNamespace::new_checked(data)
            .map_err(|e| Error::Protocol(format!("Identify Namespace {nsid} data: {e}")))?;
        if id.nsze() == 0 {
            return Ok(None);
        }
        let lbaf = id.current_lbaf();
        let block_size = lbaf.block_size().ok_or_else(|| {
            Error::Unsupported(format!(
                "namespace {nsid}: LBA data size 2^{} is outside 512 B..2 GiB",
                lbaf.ds
            ))
        })?;
        if lbaf.ms != 0 && id.flbas() & flbas::META_EXT != 0 {
            return Err(Error::Unsupported(format!(
                "namespace {nsid}: extended-LBA metadata ({} bytes per block)",
                lbaf.ms
            )));
        }
        Ok(Some(NamespaceInfo {
            nsid,
            nsze: id.nsze(),
            ncap: id.ncap(),
            nuse: id.nuse(),
            block_size,
            metadata_size: lbaf.ms,
            nguid: id.nguid(),
            eui64: id.eui64(),
            uuid: None,
        }))
    }

    /// Capacity in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.nsze.saturating_mul(u64::from(self.block_size))
    }
}

/// The keep-alive thread and how to stop it.
struct KeepAlive {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl KeepAlive {
    fn start(
        admin: Arc<Mutex<Queue>>,
        interval: Duration,
        timeout: Duration,
        failed: Arc<AtomicBool>,
    ) -> Result<KeepAlive, Error> {
        let (tx, rx) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("nvmf-keep-alive".into())
            .spawn(move || {
                // A message or a dropped sender both mean stop.
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                    let r =
                        admin
                            .lock()
                            .execute(command::keep_alive(), None, DataDir::None, timeout);
                    match r {
                        Ok(c) if c.status.is_success() => trace!("keep alive ok"),
                        Ok(c) => {
                            warn!(status = %c.status, "Keep Alive failed");
                            failed.store(true, Ordering::Relaxed);
                        }
                        Err(e) => {
                            warn!(error = %e, "Keep Alive failed; stopping keep-alive");
                            failed.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            })?;
        Ok(KeepAlive {
            stop: Some(tx),
            handle: Some(handle),
        })
    }

    fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                warn!("keep-alive thread panicked");
            }
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connected, enabled controller.
pub struct Controller {
    fabric: Arc<dyn Fabric>,
    opts: ConnectOptions,
    admin: Arc<Mutex<Queue>>,
    cntlid: Cntlid,
    cap: Cap,
    vs: u32,
    cc: Cc,
    id_raw: Vec<u8>,
    id: ControllerIdentity,
    namespaces: Vec<NamespaceInfo>,
    /// I/O queues not yet taken. Behind a mutex only so that `Controller` is `Sync`
    /// (shared as `Arc<Controller>` by threads that each own a taken queue).
    io_queues: Mutex<Vec<Queue>>,
    io_queue_count: u16,
    io_queue_depth: u16,
    keep_alive: Option<KeepAlive>,
    keep_alive_failed: Arc<AtomicBool>,
}

impl Controller {
    /// Connects to `opts.subnqn` over `fabric` and brings the controller up (see the
    /// module docs for the steps).
    pub fn connect(fabric: Arc<dyn Fabric>, opts: ConnectOptions) -> Result<Controller, Error> {
        opts.validate()?;
        let aq = fabric.connect_queue(&QueueParams {
            qid: Qid::ADMIN,
            depth: opts.admin_queue_size,
            in_capsule_data: 0,
            connect_timeout: opts.connect_timeout,
        })?;
        let mut admin = Queue::new(aq);
        let cntlid = fabrics_connect(
            fabric.as_ref(),
            &mut admin,
            &opts,
            Qid::ADMIN,
            opts.admin_queue_size,
            Cntlid::DYNAMIC,
        )?;
        debug!(%cntlid, subnqn = %opts.subnqn, "admin queue connected");

        let t = opts.command_timeout;
        let cap = Cap(prop_get(&mut admin, reg::CAP, t)?);
        let vs = low32(prop_get(&mut admin, reg::VS, t)?);
        let cc = Cc(0)
            .with_en(true)
            .with_css(cc_css::NVM)
            .with_mps(cap.mpsmin())
            .with_ams(ams::ROUND_ROBIN)
            .with_shn(shn::NONE)
            .with_iosqes(IOSQES_LOG2)
            .with_iocqes(IOCQES_LOG2);
        prop_set(&mut admin, reg::CC, cc, t)?;
        wait_ready(&mut admin, cap, t)?;

        let id_raw = read_data(
            fabric.as_ref(),
            &mut admin,
            command::identify_controller(),
            IDENTIFY_LEN,
            t,
        )?;
        let id = ControllerIdentity::parse(&id_raw, cap.mpsmin())?;
        let (major, minor, tertiary) = vs_parts(vs);
        info!(
            %cntlid, mn = %id.mn, sn = %id.sn, version = %format!("{major}.{minor}.{tertiary}"),
            "controller ready"
        );

        let mut ctrl = Controller {
            fabric,
            opts,
            admin: Arc::new(Mutex::new(admin)),
            cntlid,
            cap,
            vs,
            cc,
            id_raw,
            id,
            namespaces: Vec::new(),
            io_queues: Mutex::new(Vec::new()),
            io_queue_count: 0,
            io_queue_depth: 0,
            keep_alive: None,
            keep_alive_failed: Arc::new(AtomicBool::new(false)),
        };
        // Keep-alive starts now: the I/O queue and namespace steps below may take longer
        // than KATO on a slow target.
        ctrl.start_keep_alive()?;
        let is_discovery = ctrl.id.is_discovery() || ctrl.opts.subnqn.is_discovery();
        if !is_discovery {
            if ctrl.opts.nr_io_queues > 0 {
                ctrl.connect_io_queues()?;
            }
            ctrl.scan_namespaces()?;
        }
        Ok(ctrl)
    }

    fn start_keep_alive(&mut self) -> Result<(), Error> {
        if self.opts.kato_ms == 0 {
            return Ok(());
        }
        let kato = Duration::from_millis(u64::from(self.opts.kato_ms));
        // Half the timeout between commands, as Linux does, so one lost or slow Keep
        // Alive does not expire the controller.
        let interval = kato / 2;
        self.keep_alive = Some(KeepAlive::start(
            self.admin.clone(),
            interval,
            kato.min(self.opts.command_timeout),
            self.keep_alive_failed.clone(),
        )?);
        Ok(())
    }

    /// Set Features Number of Queues, then one transport queue plus fabrics Connect
    /// per granted I/O queue.
    fn connect_io_queues(&mut self) -> Result<(), Error> {
        let requested = self.opts.nr_io_queues;
        let c = self.admin_checked(
            "Set Features (Number of Queues)",
            command::set_number_of_queues(requested),
            None,
            DataDir::None,
        )?;
        let (nsqa, ncqa) = num_queues_decode(c.dw0);
        // NSQA / NCQA are 0-based; compute in u32 so 0xFFFF + 1 does not overflow.
        let granted = u32::from(nsqa.min(ncqa)) + 1;
        let count = u16::try_from(granted.min(u32::from(requested))).unwrap_or(requested);
        if count < requested {
            info!(
                requested,
                granted = count,
                "target granted fewer I/O queues"
            );
        }
        let mqes_entries = u32::from(self.cap.mqes()) + 1;
        let mut depth = u32::from(self.opts.queue_size).min(mqes_entries);
        if self.id.maxcmd != 0 {
            depth = depth.min(u32::from(self.id.maxcmd));
        }
        let depth = u16::try_from(depth).unwrap_or(u16::MAX);
        if depth < MIN_QUEUE_SIZE {
            return Err(Error::Protocol(format!(
                "I/O queue depth {depth} (CAP.MQES {}, MAXCMD {}) is unusable",
                self.cap.mqes(),
                self.id.maxcmd
            )));
        }
        if depth < self.opts.queue_size {
            info!(
                requested = self.opts.queue_size,
                depth, "queue size capped by CAP.MQES / MAXCMD"
            );
        }
        for i in 1..=count {
            let qid = Qid(i);
            let t = self.fabric.connect_queue(&QueueParams {
                qid,
                depth,
                in_capsule_data: self.id.in_capsule_data,
                connect_timeout: self.opts.connect_timeout,
            })?;
            let mut q = Queue::new(t);
            fabrics_connect(
                self.fabric.as_ref(),
                &mut q,
                &self.opts,
                qid,
                depth,
                self.cntlid,
            )?;
            q.set_timeout(self.opts.command_timeout);
            self.io_queues.get_mut().push(q);
        }
        self.io_queue_count = count;
        self.io_queue_depth = depth;
        debug!(count, depth, "I/O queues connected");
        Ok(())
    }

    /// Identify Active Namespace List (paged by the last NSID seen), then Identify
    /// Namespace and the NS Identification Descriptor list for each.
    fn scan_namespaces(&mut self) -> Result<(), Error> {
        let mut nsids = Vec::new();
        let mut after = Nsid::NONE;
        loop {
            let page = self.admin_read(command::identify_active_ns_list(after), IDENTIFY_LEN)?;
            let list = parse_ns_list(&page);
            let full = list.len() == NS_LIST_MAX;
            let mut last = after;
            for id in list {
                // The list must ascend past `after`; anything else would loop forever.
                if id <= last.0 || id == Nsid::BROADCAST.0 {
                    return Err(Error::Protocol(format!(
                        "active namespace list is not ascending at NSID {id}"
                    )));
                }
                last = Nsid(id);
                nsids.push(last);
            }
            if !full || nsids.len() >= MAX_NAMESPACES {
                break;
            }
            after = last;
        }
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let data = self.identify_namespace(nsid)?;
            let mut info = match NamespaceInfo::parse(nsid, &data) {
                Ok(Some(i)) => i,
                Ok(None) => {
                    debug!(%nsid, "namespace has size 0, skipped");
                    continue;
                }
                Err(e) => {
                    warn!(%nsid, error = %e, "namespace skipped");
                    continue;
                }
            };
            // The descriptor list is optional (NVMe 1.3); a target without it is fine.
            match self.admin_read(command::identify_ns_descriptors(nsid), IDENTIFY_LEN) {
                Ok(d) => {
                    for desc in parse_ns_id_descriptors(&d) {
                        if let NsIdDescriptor::Uuid(u) = desc {
                            info.uuid = Some(u);
                        }
                    }
                }
                Err(e) => debug!(%nsid, error = %e, "no namespace descriptor list"),
            }
            out.push(info);
        }
        self.namespaces = out;
        Ok(())
    }

    /// Runs one admin command and fails on a non-success status.
    fn admin_checked(
        &self,
        what: &str,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<Completion, Error> {
        let c = self.admin_execute(sqe, data, dir)?;
        check_status(what, c.status)?;
        Ok(c)
    }

    /// Runs one admin command that returns `len` bytes and returns them.
    fn admin_read(&self, sqe: SqeBytes, len: usize) -> Result<Vec<u8>, Error> {
        let mut admin = self.admin.lock();
        read_data(
            self.fabric.as_ref(),
            &mut admin,
            sqe,
            len,
            self.opts.command_timeout,
        )
    }

    /// Executes an admin command with the command timeout; the status is not checked.
    pub fn admin_execute(
        &self,
        sqe: SqeBytes,
        data: Option<&IoBuf>,
        dir: DataDir,
    ) -> Result<Completion, Error> {
        self.admin
            .lock()
            .execute(sqe, data, dir, self.opts.command_timeout)
    }

    /// The controller id the target assigned.
    pub fn cntlid(&self) -> Cntlid {
        self.cntlid
    }

    /// Controller Capabilities.
    pub fn cap(&self) -> Cap {
        self.cap
    }

    /// Version register.
    pub fn vs(&self) -> u32 {
        self.vs
    }

    /// The 4096-byte Identify Controller structure as received.
    pub fn identify_controller_raw(&self) -> &[u8] {
        &self.id_raw
    }

    /// Identify Controller, parsed.
    pub fn id_ctrl(&self) -> &ControllerIdentity {
        &self.id
    }

    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    /// Active namespaces found at connect.
    pub fn namespaces(&self) -> &[NamespaceInfo] {
        &self.namespaces
    }

    /// The namespace `nsid`.
    pub fn namespace(&self, nsid: Nsid) -> Result<&NamespaceInfo, Error> {
        self.namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .ok_or_else(|| Error::NotFound(format!("namespace {nsid} is not active")))
    }

    /// Largest data transfer per command in bytes (MDTS), `None` when unlimited.
    pub fn max_transfer(&self) -> Option<u64> {
        self.id.max_transfer
    }

    /// Identify Namespace `nsid`, raw.
    pub fn identify_namespace(&self, nsid: Nsid) -> Result<Vec<u8>, Error> {
        self.admin_read(command::identify_namespace(nsid), IDENTIFY_LEN)
    }

    /// Get Log Page `lid`: `len` bytes at `offset`, split into commands no larger than
    /// MDTS. `len` and `offset` must be multiples of 4.
    pub fn get_log_page(
        &self,
        lid: u8,
        nsid: Nsid,
        len: usize,
        offset: u64,
    ) -> Result<Vec<u8>, Error> {
        const DWORD: usize = 4;
        if len == 0 || !len.is_multiple_of(DWORD) {
            return Err(Error::InvalidArgument(format!(
                "log page length {len} must be a non-zero multiple of 4"
            )));
        }
        let chunk_max = self
            .max_transfer()
            .map_or(len, |m| usize::try_from(m).unwrap_or(usize::MAX).min(len));
        let chunk_max = chunk_max - chunk_max % DWORD;
        if chunk_max == 0 {
            return Err(Error::Protocol("MDTS is smaller than one dword".into()));
        }
        let mut out = Vec::with_capacity(len);
        let mut done = 0usize;
        while done < len {
            let n = chunk_max.min(len - done);
            let sqe = command::get_log_page(lid, nsid, n as u64, offset + done as u64, false)?;
            let part = self.admin_read(sqe, n)?;
            out.extend_from_slice(&part);
            done += n;
        }
        Ok(out)
    }

    /// Get Features `fid` (current value); returns completion dword 0.
    pub fn get_features(&self, fid: u8, nsid: Nsid, cdw11: u32) -> Result<u32, Error> {
        let c = self.admin_checked(
            "Get Features",
            command::get_features(fid, nsid, sel::CURRENT, cdw11),
            None,
            DataDir::None,
        )?;
        Ok(c.dw0)
    }

    /// Set Features `fid` to `value`; returns completion dword 0.
    pub fn set_features(&self, fid: u8, nsid: Nsid, value: u32, save: bool) -> Result<u32, Error> {
        let c = self.admin_checked(
            "Set Features",
            command::set_features(fid, nsid, value, save),
            None,
            DataDir::None,
        )?;
        Ok(c.dw0)
    }

    /// The keep-alive timer the controller reports (Get Features KATO), in ms.
    pub fn keep_alive_timeout_ms(&self) -> Result<u32, Error> {
        self.get_features(fid::KEEP_ALIVE_TIMER, Nsid::NONE, 0)
    }

    /// Hands the connected I/O queues to the caller (each then belongs to one thread).
    /// A second call returns an empty vector.
    pub fn take_io_queues(&mut self) -> Vec<Queue> {
        std::mem::take(self.io_queues.get_mut())
    }

    /// I/O queues connected at bring-up (whether taken or not).
    pub fn io_queue_count(&self) -> u16 {
        self.io_queue_count
    }

    /// Entries per I/O queue.
    pub fn io_queue_depth(&self) -> u16 {
        self.io_queue_depth
    }

    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    /// Allocates a registered data buffer usable on every queue of this controller.
    pub fn alloc(&self, len: usize) -> Result<IoBuf, Error> {
        Ok(self.fabric.alloc(len)?)
    }

    /// False once a Keep Alive failed (the target may have dropped the controller).
    pub fn is_alive(&self) -> bool {
        !self.keep_alive_failed.load(Ordering::Relaxed) && !self.admin.lock().is_broken()
    }

    /// Orderly shutdown: stop keep-alive, Disconnect the I/O queues still held, set
    /// CC.SHN to normal and wait (up to a few seconds) for CSTS.SHST = complete, then
    /// close every queue. I/O queues go first, as Linux tears them down before shutting
    /// the controller down. Returns the first error; the queues are closed regardless.
    pub fn shutdown(mut self) -> Result<(), Error> {
        if let Some(mut ka) = self.keep_alive.take() {
            ka.stop();
        }
        let mut first_err: Option<Error> = None;
        for q in self.io_queues.get_mut().iter_mut() {
            if let Err(e) = q
                .execute(
                    command::disconnect(),
                    None,
                    DataDir::None,
                    DISCONNECT_TIMEOUT,
                )
                .and_then(|c| check_status("Disconnect", c.status))
            {
                debug!(qid = %q.qid(), error = %e, "Disconnect failed");
            }
            q.close();
        }
        let t = self.opts.command_timeout;
        let mut admin = self.admin.lock();
        let r = prop_set(&mut admin, reg::CC, self.cc.with_shn(shn::NORMAL), t)
            .and_then(|()| wait_shutdown(&mut admin, t));
        if let Err(e) = r {
            warn!(error = %e, "controller shutdown incomplete");
            first_err.get_or_insert(e);
        }
        admin.close();
        drop(admin);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(mut ka) = self.keep_alive.take() {
            ka.stop();
        }
        for q in self.io_queues.get_mut().iter_mut() {
            q.close();
        }
        self.admin.lock().close();
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("subnqn", &self.opts.subnqn)
            .field("cntlid", &self.cntlid)
            .field("io_queues", &self.io_queue_count)
            .field("namespaces", &self.namespaces.len())
            .finish()
    }
}

fn low32(v: u64) -> u32 {
    (v & u64::from(u32::MAX)) as u32
}

/// Sends fabrics Connect for `qid` on `q` and returns the CNTLID from dw0.
fn fabrics_connect(
    fabric: &dyn Fabric,
    q: &mut Queue,
    opts: &ConnectOptions,
    qid: Qid,
    depth: u16,
    cntlid: Cntlid,
) -> Result<Cntlid, Error> {
    let data = command::connect_data(opts.hostid, cntlid, &opts.subnqn, &opts.hostnqn);
    let buf = fabric.alloc(data.len())?;
    if !buf.write_at(0, &data) {
        return Err(Error::Protocol(
            "Connect data does not fit its buffer".into(),
        ));
    }
    let kato = if qid.is_admin() { opts.kato_ms } else { 0 };
    let sqe = command::connect(qid, depth - 1, kato);
    let c = q.execute(
        sqe,
        Some(&buf),
        DataDir::ToCtrl,
        opts.connect_timeout.max(opts.command_timeout),
    )?;
    if !c.status.is_success() {
        let mut what = format!("Connect (qid {qid}, {})", opts.subnqn);
        if c.status.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS,
        ) {
            // dw0: IATTR bit 16 says whether IPO (bits 15:0) points into the data.
            let in_data = c.dw0 & CONNECT_IATTR_DATA != 0;
            let ipo = (c.dw0 & 0xFFFF) as u16;
            what.push_str(&format!(
                "; invalid parameter at {} byte {ipo}",
                if in_data { "Connect data" } else { "command" }
            ));
        }
        return Err(Error::nvme(what, c.status));
    }
    Ok(Cntlid((c.dw0 & 0xFFFF) as u16))
}

/// Property Get; 8-byte registers come back in dw0 | dw1 << 32.
fn prop_get(q: &mut Queue, offset: u32, t: Duration) -> Result<u64, Error> {
    let c = q.execute(command::property_get(offset), None, DataDir::None, t)?;
    check_status("Property Get", c.status)?;
    Ok(c.result_u64())
}

fn prop_set(q: &mut Queue, offset: u32, cc: Cc, t: Duration) -> Result<(), Error> {
    let c = q.execute(
        command::property_set(offset, u64::from(cc.0)),
        None,
        DataDir::None,
        t,
    )?;
    check_status("Property Set", c.status)
}

/// Polls CSTS until RDY=1, for at most CAP.TO × 500 ms (at least one unit).
fn wait_ready(q: &mut Queue, cap: Cap, t: Duration) -> Result<(), Error> {
    let limit = CAP_TO_UNIT * u32::from(cap.to().max(1));
    let start = Instant::now();
    loop {
        let csts = Csts(low32(prop_get(q, reg::CSTS, t)?));
        if csts.cfs() {
            return Err(Error::Protocol(
                "controller fatal status (CSTS.CFS) while enabling".into(),
            ));
        }
        if csts.rdy() {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(Error::Timeout(format!(
                "controller not ready (CSTS.RDY) after {limit:?} (CAP.TO)"
            )));
        }
        std::thread::sleep(CSTS_POLL_INTERVAL);
    }
}

/// Polls CSTS until SHST = shutdown complete, for at most [`SHUTDOWN_TIMEOUT`].
fn wait_shutdown(q: &mut Queue, t: Duration) -> Result<(), Error> {
    let start = Instant::now();
    loop {
        let csts = Csts(low32(prop_get(q, reg::CSTS, t)?));
        if csts.shst() == shst::COMPLETE {
            return Ok(());
        }
        if start.elapsed() >= SHUTDOWN_TIMEOUT {
            return Err(Error::Timeout(format!(
                "shutdown not complete (CSTS.SHST) after {SHUTDOWN_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(CSTS_POLL_INTERVAL);
    }
}

/// Executes a command that returns `len` bytes of data and copies them out.
fn read_data(
    fabric: &dyn Fabric,
    q: &mut Queue,
    sqe: SqeBytes,
    len: usize,
    t: Duration,
) -> Result<Vec<u8>, Error> {
    let what = command::name(&sqe);
    let buf = fabric.alloc(len)?;
    let c = q.execute(sqe, Some(&buf), DataDir::FromCtrl, t)?;
    check_status(what, c.status)?;
    let mut out = vec![0u8; len];
    if !buf.read_at(0, &mut out) {
        return Err(Error::Protocol(format!("{what}: data buffer unreadable")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};

    fn host() -> (Nqn, [u8; 16]) {
        (
            Nqn::new("nqn.2014-08.org.nvmexpress:uuid:test").unwrap(),
            [7u8; 16],
        )
    }

    fn opts(sub: &str) -> ConnectOptions {
        let (h, id) = host();
        let mut o = ConnectOptions::new(Nqn::new(sub).unwrap(), h, id);
        o.nr_io_queues = 2;
        o.kato_ms = 0;
        o
    }

    #[test]
    fn bring_up_in_order() {
        let t = FakeTarget::new(FakeTargetConfig::default());
        let mut ctrl = Controller::connect(t.fabric(), opts(&t.subnqn())).unwrap();
        assert_eq!(ctrl.cntlid(), Cntlid(FakeTargetConfig::default().cntlid));
        assert_eq!(ctrl.io_queue_count(), 2);
        assert_eq!(ctrl.id_ctrl().mn, "fake model");
        assert_eq!(ctrl.id_ctrl().in_capsule_data, 8192);
        assert_eq!(ctrl.max_transfer(), Some(128 * 1024));
        assert_eq!(ctrl.identify_controller_raw().len(), 4096);
        let ns = ctrl.namespaces();
        // NSID 2 has size 0 and is skipped.
        assert_eq!(ns.iter().map(|n| n.nsid.0).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(ns[0].block_size, 512);
        assert_eq!(ns[0].nsze, 2048);
        assert_eq!(ns[0].uuid, Some([0x11; 16]));
        assert_eq!(ns[1].block_size, 4096);
        let log = t.log();
        let expect_prefix = [
            "connect qid 0 cntlid 65535",
            "prop_get 0x0",
            "prop_get 0x8",
            "prop_set 0x14 0x460001",
            "prop_get 0x1c",
        ];
        assert_eq!(&log[..5], &expect_prefix);
        let rest: Vec<&str> = log[5..]
            .iter()
            .map(|s| s.as_str())
            .filter(|s| !s.starts_with("prop_get 0x1c"))
            .collect();
        assert_eq!(rest[0], "identify cns 1");
        assert_eq!(rest[1], "set_features 7 0x10001");
        assert_eq!(rest[2], "connect qid 1 cntlid 5");
        assert_eq!(rest[3], "connect qid 2 cntlid 5");
        assert_eq!(rest[4], "identify cns 2");
        let conns = t.connects();
        assert_eq!(conns.len(), 3);
        assert_eq!((conns[1].depth, conns[1].in_capsule_data), (64, 8192));
        let qs = ctrl.take_io_queues();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].depth(), 64, "capped by CAP.MQES + 1");
        drop(qs);
        ctrl.shutdown().unwrap();
        assert!(t.log().iter().any(|s| s == "prop_set 0x14 0x464001"));
    }

    #[test]
    fn controller_is_shareable() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Controller>();
    }

    #[test]
    fn granted_fewer_queues() {
        let t = FakeTarget::new(FakeTargetConfig {
            max_queues: 1,
            ..Default::default()
        });
        let mut o = opts(&t.subnqn());
        o.nr_io_queues = 4;
        let ctrl = Controller::connect(t.fabric(), o).unwrap();
        assert_eq!(ctrl.io_queue_count(), 1);
    }

    #[test]
    fn connect_rejected_reports_status() {
        let t = FakeTarget::new(FakeTargetConfig::default());
        let r = Controller::connect(t.fabric(), opts("nqn.2024-01.io.example:other"));
        let e = r.err().unwrap();
        let s = e.status().unwrap();
        assert!(s.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS
        ));
        assert!(e.to_string().contains("Connect data byte 256"), "{e}");
    }

    #[test]
    fn fatal_status_and_not_ready() {
        let t = FakeTarget::new(FakeTargetConfig {
            cfs: true,
            ..Default::default()
        });
        assert!(matches!(
            Controller::connect(t.fabric(), opts(&t.subnqn())),
            Err(Error::Protocol(_))
        ));
        let t = FakeTarget::new(FakeTargetConfig {
            never_ready: true,
            cap_to: 1,
            ..Default::default()
        });
        let start = Instant::now();
        assert!(matches!(
            Controller::connect(t.fabric(), opts(&t.subnqn())),
            Err(Error::Timeout(_))
        ));
        assert!(start.elapsed() >= CAP_TO_UNIT);
    }

    #[test]
    fn keep_alive_runs_and_stops() {
        let t = FakeTarget::new(FakeTargetConfig::default());
        let mut o = opts(&t.subnqn());
        o.kato_ms = 40;
        let ctrl = Controller::connect(t.fabric(), o).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(ctrl.is_alive());
        drop(ctrl);
        let n = t.log().iter().filter(|s| *s == "keep_alive").count();
        assert!(n >= 3, "{n} keep alives");
        std::thread::sleep(Duration::from_millis(100));
        let m = t.log().iter().filter(|s| *s == "keep_alive").count();
        assert_eq!(n, m, "keep-alive stopped on drop");
        let conn = t
            .log()
            .iter()
            .find(|s| s.starts_with("connect qid 0"))
            .cloned();
        assert_eq!(conn.as_deref(), Some("connect qid 0 cntlid 65535"));
        assert!(t.log().iter().any(|s| s == "kato 40"));
    }

    #[test]
    fn log_page_split_by_mdts() {
        let t = FakeTarget::new(FakeTargetConfig {
            mdts: 1, // 8 KiB
            ..Default::default()
        });
        let ctrl = Controller::connect(t.fabric(), opts(&t.subnqn())).unwrap();
        let page = ctrl.get_log_page(0xC0, Nsid::NONE, 20 * 1024, 0).unwrap();
        assert_eq!(page.len(), 20 * 1024);
        // The fake fills log bytes with (offset / 4) as u8 patterns: check continuity.
        assert!(page
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((i / 4) % 251) as u8));
        let gets = t
            .log()
            .iter()
            .filter(|s| s.starts_with("get_log 0xc0"))
            .count();
        assert_eq!(gets, 3);
        assert!(ctrl.get_log_page(0xC0, Nsid::NONE, 6, 0).is_err());
    }

    #[test]
    fn parse_identity_fields() {
        let mut raw = vec![0u8; IDENTIFY_LEN];
        let mut id = IdentifyController::new_unchecked(&mut raw[..]);
        id.set_mdts(0);
        id.set_ioccsz(4);
        id.set_cntrltype(cntrltype::DISCOVERY);
        id.set_sn("SN1");
        let p = ControllerIdentity::parse(&raw, 0).unwrap();
        assert_eq!(p.max_transfer, None);
        assert_eq!(p.in_capsule_data, 0);
        assert!(p.is_discovery());
        assert_eq!(p.sn, "SN1");
        assert!(ControllerIdentity::parse(&raw[..100], 0).is_err());
    }
}
