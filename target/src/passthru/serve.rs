//! A served passthru subsystem: its device, its admin worker, and the channel
//! through which a poll group hands admin commands to the worker and gets their
//! completions back.
//!
//! Owns the device and the worker for as long as the subsystem is served. Ordering:
//! a poll group submits an admin job and goes on; the worker runs it on its own
//! thread (the control path), writes controller-to-host data into the command's
//! buffer, then queues the completion in the group's [`AdminInbox`] and makes its
//! eventfd readable, so a sleeping group wakes and completes the command on its own
//! thread like any backend I/O. A command that may have changed the device's
//! namespaces (namespace management, format, firmware commit, sanitize, vendor) is
//! followed, still on the worker, by a rescan that adds, removes or replaces the
//! subsystem's namespaces, whose hosts get Namespace Attribute Changed.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{generic, Status};

use super::device::{
    opcode_moves_from_device, opcode_moves_to_device, DeviceError, NvmeController,
};
use super::exec::AdminOutcome;
use super::ioctl::CharDevice;
use super::namespace::{build_namespace, build_namespaces, LossWatch};
use super::worker::{AdminJob, AdminWorker, JobData, JobDone, JobResult};
use crate::backend::{BackendError, CqeResult, IoChannel, IoCompletion, IoOp, PassthruCmd};
use crate::config::PassthruConfig;
use crate::namespace::Namespace;

/// Devices handed to the target in-process (tests, embedders) instead of opened
/// from their path; looked up by the configured `device_path`.
static PROVIDED: OnceLock<Mutex<HashMap<PathBuf, Arc<dyn NvmeController>>>> = OnceLock::new();

fn provided() -> &'static Mutex<HashMap<PathBuf, Arc<dyn NvmeController>>> {
    PROVIDED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Serves `dev` for every passthru subsystem configured with `device_path` `path`,
/// instead of opening the path (a fake device in tests).
pub fn provide_device(path: &Path, dev: Arc<dyn NvmeController>) {
    provided().lock().insert(path.to_path_buf(), dev);
}

/// The namespaces of the subsystem a device serves, as its rescans change them. The
/// subsystem implements it; a trait because the subsystem holds this device (so
/// this file does not import the subsystem back).
pub trait ServedNamespaces: Send + Sync {
    /// The subsystem's NQN (for the logs).
    fn nqn(&self) -> &Nqn;
    /// Active namespace ids.
    fn active_nsids(&self) -> Vec<u32>;
    fn contains(&self, nsid: Nsid) -> bool;
    /// Adds a namespace; its hosts get Namespace Attribute Changed.
    fn add(&self, ns: Namespace) -> Result<(), String>;
    /// Replaces the namespace of `ns.nsid` with `ns`, as a resize does.
    fn replace(&self, ns: Namespace) -> Result<(), String>;
    /// Removes namespace `nsid`, if there.
    fn remove(&self, nsid: Nsid);
}

/// One passthru subsystem's device and admin worker.
pub struct PassthruSubsystem {
    pub dev: Arc<dyn NvmeController>,
    pub cfg: PassthruConfig,
    worker: AdminWorker,
    /// The key of this subsystem's admin channel in each poll group's channel cache.
    pub admin_instance: u64,
    /// The version its controllers report (VS and Identify VER): the device's.
    pub version: u32,
    /// The subsystem, for rescans after commands that change namespaces.
    subsys: OnceLock<Weak<dyn ServedNamespaces>>,
    /// A check of the device after a command found it gone is under way.
    checking_loss: AtomicBool,
}

impl PassthruSubsystem {
    /// Opens the device of `cfg` (or takes the one provided for its path) and starts
    /// its admin worker.
    pub fn open(cfg: &PassthruConfig) -> Result<Arc<Self>, String> {
        let given = provided().lock().get(&cfg.device_path).cloned();
        let dev: Arc<dyn NvmeController> = match given {
            Some(d) => d,
            None => Arc::new(
                CharDevice::open(&cfg.device_path, cfg.admin_timeout_ms)
                    .map_err(|e| e.to_string())?,
            ),
        };
        Self::with_device(dev, cfg)
    }

    /// Serves `dev` under `cfg`.
    pub fn with_device(
        dev: Arc<dyn NvmeController>,
        cfg: &PassthruConfig,
    ) -> Result<Arc<Self>, String> {
        let version = device_version(dev.as_ref())
            .map_err(|e| format!("{}: Identify Controller: {e}", dev.name()))?;
        let worker = AdminWorker::spawn(dev.clone(), cfg.clone())
            .map_err(|e| format!("{}: cannot start the admin worker: {e}", dev.name()))?;
        Ok(Arc::new(PassthruSubsystem {
            dev,
            cfg: cfg.clone(),
            worker,
            admin_instance: crate::namespace::next_instance(),
            version,
            subsys: OnceLock::new(),
            checking_loss: AtomicBool::new(false),
        }))
    }

    /// Binds the subsystem this device serves, and adds its namespaces.
    pub fn attach(self: &Arc<Self>, subsys: &Arc<dyn ServedNamespaces>) -> Result<(), String> {
        let _ = self.subsys.set(Arc::downgrade(subsys));
        let nss = build_namespaces(&self.dev, &self.loss_watch())
            .map_err(|e| format!("{}: cannot read its namespaces: {e}", self.dev.name()))?;
        for ns in nss {
            subsys.add(ns)?;
        }
        Ok(())
    }

    /// A poll group's channel for this subsystem's admin commands.
    pub fn admin_channel(self: &Arc<Self>) -> Result<Box<dyn IoChannel>, BackendError> {
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| BackendError::Io(e as i32))?;
        Ok(Box::new(AdminInbox {
            sub: self.clone(),
            shared: Arc::new(InboxShared {
                done: Mutex::new(Vec::new()),
                eventfd,
            }),
            in_flight: 0,
        }))
    }

    /// The watch its namespaces' channels report a lost device to.
    fn loss_watch(self: &Arc<Self>) -> Weak<dyn LossWatch> {
        Arc::downgrade(self) as Weak<dyn LossWatch>
    }

    /// After a loss: a device that no longer answers has its namespaces removed, so
    /// hosts get Namespace Attribute Changed and stop sending (I/O to them is now
    /// Invalid Namespace) while the target and its other subsystems go on; one
    /// that answers is rescanned (a namespace may have gone).
    fn check_after_loss(self: &Arc<Self>) {
        let Some(subsys) = self.subsys.get().and_then(Weak::upgrade) else {
            return;
        };
        match self.dev.active_namespaces() {
            Ok(_) => self.rescan(),
            Err(DeviceError::Gone(e)) => {
                let gone = subsys.active_nsids();
                if gone.is_empty() {
                    return;
                }
                tracing::error!(
                    device = %self.dev.name(), subnqn = %subsys.nqn(), error = %e,
                    "the passthru device is gone: its namespaces {gone:?} are removed from the subsystem"
                );
                for nsid in gone {
                    subsys.remove(Nsid(nsid));
                }
            }
            Err(e) => {
                tracing::warn!(device = %self.dev.name(), error = %e, "a command found the device gone, but it answers otherwise; namespaces kept");
            }
        }
    }

    /// Reads the device's namespaces again and brings the subsystem's in line:
    /// new ones added, gone ones removed, the others replaced (their size or format
    /// may have changed). Blocking: runs on the admin worker.
    fn rescan(self: &Arc<Self>) {
        let Some(subsys) = self.subsys.get().and_then(Weak::upgrade) else {
            return;
        };
        let now = match self.dev.active_namespaces() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(device = %self.dev.name(), error = %e, "rescan: cannot list namespaces");
                return;
            }
        };
        for old in subsys.active_nsids() {
            if !now.contains(&old) {
                tracing::info!(subnqn = %subsys.nqn(), nsid = old, "passthru namespace gone from the device");
                subsys.remove(Nsid(old));
            }
        }
        for nsid in now {
            let ns = match build_namespace(&self.dev, nsid, self.loss_watch()) {
                Ok(ns) => ns,
                Err(e) => {
                    tracing::warn!(device = %self.dev.name(), nsid, error = %e, "rescan: cannot read a namespace");
                    continue;
                }
            };
            let r = if subsys.contains(Nsid(nsid)) {
                subsys.replace(ns)
            } else {
                tracing::info!(subnqn = %subsys.nqn(), nsid, "passthru namespace new on the device");
                subsys.add(ns)
            };
            if let Err(e) = r {
                tracing::warn!(subnqn = %subsys.nqn(), nsid, "rescan: {e}");
            }
        }
    }
}

impl LossWatch for PassthruSubsystem {
    /// A command found the device gone (its node vanished: unplugged, reset away):
    /// checks the device off the poll group, once at a time. Called on a poll group;
    /// never blocks.
    fn device_lost(self: Arc<Self>) {
        if self.checking_loss.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("passthru-lost".to_string())
            .spawn(move || {
                me.check_after_loss();
                me.checking_loss.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            tracing::error!(device = %self.dev.name(), "cannot check a lost device: {e}");
            self.checking_loss.store(false, Ordering::Release);
        }
    }
}

/// The version the fabric controllers of `dev` report: the device's VER, raised to
/// the least a fabric controller may report ([`super::identify::fabric_version`]).
fn device_version(dev: &dyn NvmeController) -> Result<u32, String> {
    use nvmf_common::wire::admin::{cns, set_identify};
    use nvmf_common::wire::identify::{IdentifyController, IDENTIFY_LEN};
    use nvmf_common::wire::sqe::SQE_LEN;
    let mut cmd = Sqe::new_unchecked([0u8; SQE_LEN]);
    set_identify(&mut cmd, cns::CONTROLLER, 0, 0);
    let mut page = vec![0u8; IDENTIFY_LEN];
    let c = dev
        .admin(&cmd, super::device::DataBuf::FromDevice(&mut page))
        .map_err(|e| e.to_string())?;
    if !c.status.is_success() {
        return Err(c.status.to_string());
    }
    let ver = IdentifyController::new_unchecked(&page[..]).ver();
    Ok(super::identify::fabric_version(ver))
}

/// What the worker thread and a poll group's inbox share.
struct InboxShared {
    done: Mutex<Vec<IoCompletion>>,
    eventfd: EventFd,
}

impl InboxShared {
    fn post(&self, c: IoCompletion) {
        self.done.lock().push(c);
        // A full counter (never, at 2^64 - 2) still leaves the fd readable.
        let _ = self.eventfd.write(1);
    }
}

/// One poll group's channel to a passthru subsystem's admin worker.
struct AdminInbox {
    sub: Arc<PassthruSubsystem>,
    shared: Arc<InboxShared>,
    in_flight: usize,
}

/// The completion of a job the worker ran.
fn job_completion(r: &JobResult) -> Result<CqeResult, BackendError> {
    match r.outcome {
        AdminOutcome::Complete { completion: c, .. } => {
            let result = CqeResult {
                dw0: c.dw0,
                dw1: c.dw1,
            };
            if c.status.is_success() {
                Ok(result)
            } else {
                Err(BackendError::Device {
                    status: c.status,
                    result,
                })
            }
        }
        // The core routes emulated commands itself; one here is a routing fault.
        AdminOutcome::Emulate => Err(BackendError::Device {
            status: Status::generic_dnr(generic::INTERNAL_ERROR),
            result: CqeResult::NONE,
        }),
    }
}

impl IoChannel for AdminInbox {
    fn submit(&mut self, _tag: u64, _op: IoOp) -> Result<(), BackendError> {
        Err(BackendError::Unsupported)
    }

    fn submit_passthru(&mut self, tag: u64, cmd: PassthruCmd) -> Result<(), BackendError> {
        let Some(fabric) = cmd.fabric.clone() else {
            return Err(BackendError::Unsupported);
        };
        let sqe = Sqe::new_unchecked(cmd.sqe);
        let op = sqe.opcode();
        let data = match &cmd.buf {
            None => JobData::None,
            Some(b) if opcode_moves_to_device(op) => {
                let mut v = vec![0u8; b.len];
                b.buf.read_at(b.offset, &mut v);
                JobData::ToDevice(v)
            }
            Some(b) if opcode_moves_from_device(op) => JobData::FromDevice(b.len),
            // A buffer the opcode moves neither way: the executor refuses it.
            Some(_) => JobData::ToDevice(Vec::new()),
        };
        let shared = self.shared.clone();
        let sub = Arc::downgrade(&self.sub);
        let out = cmd.buf;
        let done: JobDone = Box::new(move |r: JobResult| {
            if let Some(b) = &out {
                let n = r.data.len().min(b.len);
                if let Some(src) = r.data.get(..n) {
                    b.buf.write_at(b.offset, src);
                }
            }
            let rescan = matches!(r.outcome, AdminOutcome::Complete { rescan: true, .. });
            shared.post((tag, job_completion(&r)));
            if rescan {
                if let Some(s) = sub.upgrade() {
                    s.rescan();
                }
            }
        });
        self.in_flight += 1;
        let job = AdminJob {
            cmd: sqe,
            data,
            fabric,
            done,
        };
        if let Err((why, _job)) = self.sub.worker.submit(job) {
            tracing::debug!(device = %self.sub.dev.name(), ?why, "passthru admin command not queued");
            self.shared.post((
                tag,
                Err(BackendError::Device {
                    status: why.status(),
                    result: CqeResult::NONE,
                }),
            ));
        }
        Ok(())
    }

    fn flush(&mut self) {}

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        // Drain the counter first: a completion posted after this read wakes the
        // group again, one posted before it is in the list taken below.
        let _ = self.shared.eventfd.read();
        let mut done = std::mem::take(&mut *self.shared.done.lock());
        let n = done.len();
        self.in_flight = self.in_flight.saturating_sub(n);
        out.append(&mut done);
        n
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.shared.eventfd.as_raw_fd())
    }
}
