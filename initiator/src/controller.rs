//! Controller bring-up, keep-alive and shutdown.
//!
//! Owned by the host library. [`Controller::connect`] follows the order of the NVMe
//! over Fabrics and Base specifications (and Linux `nvme_rdma_setup_ctrl`):
//!
//! 1. connect the admin queue on the transport, then fabrics Connect (qid 0, dynamic
//!    CNTLID) — the CNTLID comes back in dw0;
//! 2. Property Get CAP and VS; Property Set CC (EN=1, IOSQES=6, IOCQES=4, CSS=NVM,
//!    MPS=CAP.MPSMIN, AMS=round robin); poll CSTS until RDY=1 (CFS=1 is fatal) for at
//!    most CAP.TO × 500 ms, or CRTO.CRWMT × 500 ms when CAP.CRMS.CRWMS is set;
//! 3. Identify Controller (kept raw and parsed);
//! 4. for an I/O controller: Set Features Number of Queues, then connect each I/O
//!    queue (transport, then fabrics Connect with the admin CNTLID);
//! 5. Identify Active Namespace List and Identify Namespace for each.
//!
//! With a keep-alive timeout, a background thread sends Keep Alive every KATO/2 on the
//! admin queue (which lives behind a mutex for that reason) until the controller is
//! dropped or shut down. I/O queues are handed to the caller with
//! [`Controller::take_io_queues`]; each is then driven by one thread.
//!
//! This file holds [`Controller`] and its bring-up sequence; the submodules hold the
//! connect options, the parsed identities, the keep-alive thread, asynchronous events and the admin-queue
//! register and fabrics helpers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{debug, info, warn};

use nvmf_common::types::{Cntlid, Nsid, Qid};
use nvmf_common::wire::admin::{fid, num_queues_decode, sel};
use nvmf_common::wire::fabrics::{ams, cc_css, reg, shn, vs_parts, Cap, Cc};
use nvmf_common::wire::identify::{
    parse_ns_id_descriptors, parse_ns_list, NsIdDescriptor, IDENTIFY_LEN, NS_LIST_MAX,
};

use crate::command::{self, SqeBytes};
use crate::error::{check_status, Error};
use crate::queue::{Completion, Queue};
use crate::transport::{DataDir, Fabric, IoBuf, QueueParams};

pub mod auth;
mod events;
mod identity;
mod keep_alive;
mod options;
mod registers;
#[cfg(test)]
mod tests;

pub use events::AsyncEvent;
pub use identity::{ControllerIdentity, NamespaceInfo};
pub use options::{
    ConnectOptions, DEFAULT_ADMIN_QUEUE_SIZE, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_KATO_MS, DEFAULT_QUEUE_SIZE, DEFAULT_STUCK_COMMAND_WARN, MIN_QUEUE_SIZE,
};

use keep_alive::KeepAlive;
use registers::{fabrics_connect, low32, prop_get, prop_set, read_data, wait_ready, wait_shutdown};

/// Timeout of the Disconnect sent on each I/O queue at shutdown.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// log2 of the SQE and CQE sizes for CC.IOSQES / CC.IOCQES (64 and 16 bytes).
const IOSQES_LOG2: u8 = 6;
const IOCQES_LOG2: u8 = 4;
/// Most namespaces enumerated (bounds what a misbehaving target can make us do).
const MAX_NAMESPACES: usize = 64 * 1024;

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
        admin.set_stuck_warn(opts.stuck_command_warn);
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
            q.set_stuck_warn(self.opts.stuck_command_warn);
            self.io_queues.get_mut().push(q);
        }
        self.io_queue_count = count;
        self.io_queue_depth = depth;
        debug!(count, depth, "I/O queues connected");
        Ok(())
    }

    /// Reads the namespaces again (after Namespace Attribute Changed) and returns them.
    pub fn rescan_namespaces(&mut self) -> Result<&[NamespaceInfo], Error> {
        self.scan_namespaces()?;
        Ok(&self.namespaces)
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

    /// Runs one admin command that returns `len` bytes and returns them (an error
    /// status is an [`Error::Status`]).
    pub fn admin_read(&self, sqe: SqeBytes, len: usize) -> Result<Vec<u8>, Error> {
        let mut admin = self.admin.lock();
        read_data(
            self.fabric.as_ref(),
            &mut admin,
            sqe,
            len,
            self.opts.command_timeout,
        )
    }

    /// Re-authenticates (DH-HMAC-CHAP) the admin queue, then the I/O queues the
    /// controller still holds, with the secrets in [`ConnectOptions::dhchap`] (as the
    /// Linux host does when its `dhchap_secret` is written). Queues already taken by
    /// [`Controller::take_io_queues`] are the caller's: see [`auth::authenticate`].
    pub fn reauthenticate(&self) -> Result<(), Error> {
        let Some(keys) = &self.opts.dhchap else {
            return Err(Error::InvalidArgument(
                "no DH-HMAC-CHAP secret to authenticate with".into(),
            ));
        };
        auth::authenticate(
            self.fabric.as_ref(),
            &mut self.admin.lock(),
            &self.opts,
            Qid::ADMIN,
            keys,
        )?;
        for q in self.io_queues.lock().iter_mut() {
            let qid = q.qid();
            auth::authenticate(self.fabric.as_ref(), q, &self.opts, qid, keys)?;
        }
        Ok(())
    }

    /// Replaces the secrets used by the next [`Controller::reauthenticate`].
    pub fn set_dhchap(&mut self, keys: Option<nvmf_common::auth::HostKeys>) {
        self.opts.dhchap = keys;
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
