//! The control-path thread that runs a passthru device's admin commands, so a poll
//! group hands a command over and goes on: it never waits for the device.
//!
//! Owns the thread and its bounded queue. One thread per device runs the commands
//! one at a time, in order: admin traffic is light, Keep Alive and AERs never come
//! here (the target answers them), and a device-wide command (Format, Sanitize) is
//! one the device serializes anyway. Submission never blocks: a full queue hands the
//! job back, and the caller answers the host with a retryable status.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::PassthruConfig;
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

use super::device::{DataBuf, DeviceCompletion, NvmeController};
use super::exec::{execute_admin, AdminCtx, AdminOutcome};
use super::identify::FabricFields;

/// Admin jobs waiting for the device, beyond the one it runs: more than one admin
/// queue of every controller of the subsystem sends at once in practice.
pub const ADMIN_JOBS_MAX: usize = 64;

/// The data of a job, owned: it crosses to the worker thread and back.
#[derive(Debug)]
pub enum JobData {
    None,
    ToDevice(Vec<u8>),
    /// Controller-to-host, this many bytes.
    FromDevice(usize),
}

/// What a job gives back: the outcome, and the controller-to-host bytes.
#[derive(Debug)]
pub struct JobResult {
    pub outcome: AdminOutcome,
    pub data: Vec<u8>,
}

/// Called on the worker thread with the job's result; a poll group's callback
/// only posts it to the group's mailbox.
pub type JobDone = Box<dyn FnOnce(JobResult) + Send>;

/// One admin command of one controller.
pub struct AdminJob {
    pub cmd: Sqe<[u8; SQE_LEN]>,
    pub data: JobData,
    /// The submitting controller's fabric fields (its CNTLID, its port's SGLs).
    pub fabric: Arc<FabricFields>,
    pub done: JobDone,
}

/// Why a job was handed back unrun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The queue is full: the host may retry.
    Full,
    /// The worker has stopped.
    Stopped,
}

impl Rejected {
    /// The status the host gets for a job not run: both conditions may pass (or
    /// another path may serve), so neither sets DNR. A full queue is Command
    /// Interrupted, the spec's "retry it" for a resource limit.
    pub fn status(self) -> Status {
        match self {
            Rejected::Full => Status::generic_retryable(generic::COMMAND_INTERRUPTED),
            Rejected::Stopped => Status::generic_retryable(generic::ABORTED_SQ_DELETION),
        }
    }
}

/// The admin worker of one passthru device.
pub struct AdminWorker {
    tx: Option<SyncSender<AdminJob>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminWorker {
    /// Starts the worker thread for `dev`, named after the device.
    pub fn spawn(dev: Arc<dyn NvmeController>, cfg: PassthruConfig) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<AdminJob>(ADMIN_JOBS_MAX);
        let thread = std::thread::Builder::new()
            .name("passthru-admin".to_string())
            .spawn(move || {
                // Ends when every sender is gone (the worker was dropped).
                for job in rx {
                    let result = run(dev.as_ref(), &cfg, job.cmd, job.data, &job.fabric);
                    (job.done)(result);
                }
            })?;
        Ok(AdminWorker {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `job` without waiting; a job that cannot be queued comes back.
    pub fn submit(&self, job: AdminJob) -> Result<(), (Rejected, AdminJob)> {
        let Some(tx) = &self.tx else {
            return Err((Rejected::Stopped, job));
        };
        tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(job) => (Rejected::Full, job),
            TrySendError::Disconnected(job) => (Rejected::Stopped, job),
        })
    }
}

impl Drop for AdminWorker {
    /// Lets the queued jobs finish (each calls back), then ends the thread.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            // Dropped by a job's own callback (it held the last reference to the
            // subsystem): the thread ends by itself once its queue is empty.
            if t.thread().id() == std::thread::current().id() {
                return;
            }
            if t.join().is_err() {
                tracing::error!("the passthru admin worker panicked");
            }
        }
    }
}

/// Runs one job on the worker thread.
fn run(
    dev: &dyn NvmeController,
    cfg: &PassthruConfig,
    cmd: Sqe<[u8; SQE_LEN]>,
    data: JobData,
    fabric: &FabricFields,
) -> JobResult {
    let ctx = AdminCtx { dev, cfg, fabric };
    let mut out = Vec::new();
    let outcome = match data {
        JobData::None => execute_admin(&ctx, &cmd, DataBuf::None),
        JobData::ToDevice(b) => execute_admin(&ctx, &cmd, DataBuf::ToDevice(&b)),
        JobData::FromDevice(len) => {
            out = vec![0u8; len];
            execute_admin(&ctx, &cmd, DataBuf::FromDevice(&mut out))
        }
    };
    // Data of a failed or emulated command means nothing to the host.
    let moved = matches!(
        outcome,
        AdminOutcome::Complete {
            completion: DeviceCompletion { status, .. },
            ..
        } if status.is_success()
    );
    if !moved {
        out.clear();
    }
    JobResult { outcome, data: out }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passthru::fake::{FakeController, FAKE_MODEL};
    use nvmf_common::wire::admin::{self, cns, opcode};
    use nvmf_common::wire::identify::{IdentifyController, IDENTIFY_LEN};
    use parking_lot::Mutex;
    use std::path::PathBuf;
    use std::sync::mpsc::Receiver;

    fn fabric() -> Arc<FabricFields> {
        Arc::new(FabricFields {
            cntlid: 3,
            subnqn: "nqn.2024-01.io.nvmf-rs:ssd0".to_string(),
            max_io_size: 1 << 20,
            max_queue_size: 128,
            in_capsule_data_size: 8192,
            keyed_sgls: false,
            msdbd: 1,
            static_model: false,
            aerl: 3,
            acl: 3,
            kas: 1,
        })
    }

    fn job(cmd: Sqe<[u8; SQE_LEN]>, data: JobData) -> (AdminJob, Receiver<JobResult>) {
        let (tx, rx) = mpsc::channel();
        let done: JobDone = Box::new(move |r| {
            let _ = tx.send(r);
        });
        (
            AdminJob {
                cmd,
                data,
                fabric: fabric(),
                done,
            },
            rx,
        )
    }

    fn identify_ctrl() -> Sqe<[u8; SQE_LEN]> {
        let mut c = Sqe::new_unchecked([0u8; SQE_LEN]);
        admin::set_identify(&mut c, cns::CONTROLLER, 0, 0);
        c
    }

    #[test]
    fn jobs_run_off_the_submitting_thread_and_call_back() {
        let dev = Arc::new(FakeController::new(&[1]));
        let worker = AdminWorker::spawn(dev.clone(), PassthruConfig::new("/dev/nvme0")).unwrap();
        let (j, rx) = job(identify_ctrl(), JobData::FromDevice(IDENTIFY_LEN));
        worker.submit(j).map_err(|(r, _)| r).unwrap();
        let r = rx.recv().unwrap();
        assert!(matches!(r.outcome, AdminOutcome::Complete { .. }));
        let id = IdentifyController::new_checked(&r.data[..]).unwrap();
        assert_eq!((id.cntlid(), id.mn_string().as_str()), (3, FAKE_MODEL));
        // A refused command calls back too, with no data and the device untouched.
        let (j, rx) = job(
            {
                let mut c = Sqe::new_unchecked([0u8; SQE_LEN]);
                c.set_opcode(opcode::FORMAT_NVM);
                c
            },
            JobData::None,
        );
        worker.submit(j).map_err(|(r, _)| r).unwrap();
        let r = rx.recv().unwrap();
        match r.outcome {
            AdminOutcome::Complete { completion, .. } => assert!(completion.status.dnr),
            AdminOutcome::Emulate => panic!("format emulated"),
        }
        assert!(r.data.is_empty());
        drop(worker);
        assert_eq!(dev.received_opcodes(), [opcode::IDENTIFY]);
    }

    /// A device that blocks every command until the test lets it go.
    struct Gated {
        inner: FakeController,
        gate: Mutex<()>,
    }

    impl NvmeController for Gated {
        fn admin(
            &self,
            cmd: &Sqe<[u8; SQE_LEN]>,
            data: DataBuf<'_>,
        ) -> Result<DeviceCompletion, super::super::DeviceError> {
            let _open = self.gate.lock();
            self.inner.admin(cmd, data)
        }
        fn name(&self) -> String {
            "gated".to_string()
        }
        fn generic_ns_path(&self, _: u32) -> Result<Option<PathBuf>, super::super::DeviceError> {
            Ok(None)
        }
        fn open_io(
            &self,
            nsid: u32,
            generic: Option<&std::path::Path>,
        ) -> Result<Box<dyn crate::backend::IoChannel>, super::super::DeviceError> {
            self.inner.open_io(nsid, generic)
        }
    }

    #[test]
    fn a_full_queue_hands_the_job_back_without_blocking() {
        let dev = Arc::new(Gated {
            inner: FakeController::new(&[1]),
            gate: Mutex::new(()),
        });
        let closed = dev.gate.lock();
        let worker = AdminWorker::spawn(dev.clone(), PassthruConfig::new("/dev/nvme0")).unwrap();
        let mut accepted = Vec::new();
        let mut refused = None;
        // One job runs (blocked in the device), ADMIN_JOBS_MAX wait; one more is
        // refused at the latest then.
        for _ in 0..ADMIN_JOBS_MAX + 2 {
            let (j, rx) = job(identify_ctrl(), JobData::FromDevice(IDENTIFY_LEN));
            match worker.submit(j) {
                Ok(()) => accepted.push(rx),
                Err((why, _job)) => {
                    refused = Some(why);
                    break;
                }
            }
        }
        assert_eq!(refused, Some(Rejected::Full));
        let s = Rejected::Full.status();
        assert!(
            s.is(
                nvmf_common::wire::status::Sct::Generic,
                generic::COMMAND_INTERRUPTED
            ) && !s.dnr
        );
        drop(closed);
        // Every accepted job completes, then the worker stops.
        for rx in &accepted {
            assert!(matches!(
                rx.recv().unwrap().outcome,
                AdminOutcome::Complete { .. }
            ));
        }
        drop(worker);
        assert_eq!(dev.inner.received().len(), accepted.len());
    }
}
