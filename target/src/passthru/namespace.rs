//! A passthru subsystem's namespaces: the device's active namespaces, each served
//! by a [`PassthruBackend`] whose channels send the host's I/O commands to the
//! device as they are.
//!
//! Owns the reading of the device's namespace list and Identify Namespace data
//! (control path, blocking) and the backend a [`Namespace`] of the subsystem holds.
//! The size and block size recorded here serve the target's own bookkeeping (QoS
//! costs, metrics, `ctl` listings); what a host sees of a namespace is the device's
//! Identify data ([`super::exec`]).

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::{cns, set_identify};
use nvmf_common::wire::identify::{flbas_index, IdentifyNamespace, IDENTIFY_LEN};
use nvmf_common::wire::sqe::{Sqe, SQE_LEN};

use super::device::{DataBuf, DeviceError, NvmeController};
use crate::backend::{
    Backend, BackendError, BackendInfo, CqeResult, IoChannel, IoCompletion, IoOp, PassthruCmd,
};
use crate::namespace::Namespace;
use nvmf_common::wire::status::{path, Sct};

/// A block size for namespaces whose Identify Namespace names none (a command set
/// without LBAs, e.g. key-value): the smallest an NVM namespace has.
const FALLBACK_BLOCK_SIZE: u32 = 512;
/// The largest LBA data size (log2) taken from a device: 2 GiB blocks are nonsense.
const MAX_LBADS: u8 = 31;

/// Told when a command of a namespace's channel finds the device gone: the served
/// subsystem ([`super::serve`]) implements it. A trait because serve.rs builds the
/// namespaces here, so this file does not name it back.
pub trait LossWatch: Send + Sync {
    /// Checks the device off the poll group; never blocks.
    fn device_lost(self: Arc<Self>);
}

/// One namespace of a passthru device.
pub struct PassthruBackend {
    info: BackendInfo,
    dev: Arc<dyn NvmeController>,
    nsid: u32,
    /// The generic character device the I/O goes to, found once at start.
    generic: Option<PathBuf>,
    /// Told when a command finds the device gone.
    owner: Weak<dyn LossWatch>,
}

impl PassthruBackend {
    /// The generic device path, if the device has one for this namespace.
    pub fn generic_path(&self) -> Option<&std::path::Path> {
        self.generic.as_deref()
    }
}

impl Backend for PassthruBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        let inner = self
            .dev
            .open_io(self.nsid, self.generic.as_deref())
            .map_err(|e| {
                tracing::warn!(device = %self.dev.name(), nsid = self.nsid, error = %e, "cannot open the namespace's I/O channel");
                BackendError::Device {
                    status: e.status(),
                    result: CqeResult::NONE,
                }
            })?;
        Ok(Box::new(Watched {
            inner,
            owner: self.owner.clone(),
        }))
    }
}

/// A namespace's channel that tells its subsystem when a command finds the device
/// gone (the status a vanished device node completes with), so the control path
/// can check the device and take its namespaces away from the hosts.
struct Watched {
    inner: Box<dyn IoChannel>,
    owner: Weak<dyn LossWatch>,
}

fn device_gone(c: &IoCompletion) -> bool {
    matches!(&c.1, Err(BackendError::Device { status, .. })
        if status.is(Sct::PathRelated, path::INTERNAL_PATH_ERROR))
}

impl IoChannel for Watched {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        self.inner.submit(tag, op)
    }
    fn submit_passthru(&mut self, tag: u64, cmd: PassthruCmd) -> Result<(), BackendError> {
        self.inner.submit_passthru(tag, cmd)
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let before = out.len();
        let n = self.inner.poll(out);
        if out
            .get(before..)
            .is_some_and(|new| new.iter().any(device_gone))
        {
            if let Some(o) = self.owner.upgrade() {
                o.device_lost();
            }
        }
        n
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.event_fd()
    }
}

/// Identify Namespace of `nsid` from the device.
fn identify_namespace(dev: &dyn NvmeController, nsid: u32) -> Result<Vec<u8>, DeviceError> {
    let mut cmd = Sqe::new_unchecked([0u8; SQE_LEN]);
    set_identify(&mut cmd, cns::NAMESPACE, 0, 0);
    cmd.set_nsid(nsid);
    let mut page = vec![0u8; IDENTIFY_LEN];
    let c = dev.admin(&cmd, DataBuf::FromDevice(&mut page))?;
    if !c.status.is_success() {
        return Err(DeviceError::Io(std::io::Error::other(format!(
            "Identify Namespace {nsid}: {}",
            c.status
        ))));
    }
    Ok(page)
}

/// The backend and namespace of the device's namespace `nsid`.
pub fn build_namespace(
    dev: &Arc<dyn NvmeController>,
    nsid: u32,
    owner: Weak<dyn LossWatch>,
) -> Result<Namespace, DeviceError> {
    let page = identify_namespace(dev.as_ref(), nsid)?;
    let id = IdentifyNamespace::new_unchecked(&page[..]);
    let lbads = id.lbaf(usize::from(flbas_index(id.flbas()))).ds;
    let block_size = if (9..=MAX_LBADS).contains(&lbads) {
        1u32 << lbads
    } else {
        FALLBACK_BLOCK_SIZE
    };
    let size_bytes = id.nsze().saturating_mul(u64::from(block_size));
    let generic = dev.generic_ns_path(nsid)?;
    let nguid = id.nguid();
    let backend = PassthruBackend {
        info: BackendInfo {
            size_bytes,
            block_size,
            // The device's own cache and its Flush: the host reads VWC from the
            // device's Identify Controller, and the target never syncs for it.
            volatile_write_cache: false,
            supports_deallocate: false,
            supports_write_zeroes: false,
            deallocated_reads_zero: false,
            description: match &generic {
                Some(p) => format!("passthru {} nsid {nsid} ({})", dev.name(), p.display()),
                None => format!("passthru {} nsid {nsid} (no generic device)", dev.name()),
            },
        },
        dev: dev.clone(),
        nsid,
        generic,
        owner,
    };
    Ok(Namespace::new(
        Nsid(nsid),
        Arc::new(backend),
        [0; 16],
        nguid,
    ))
}

/// Every active namespace of the device.
pub fn build_namespaces(
    dev: &Arc<dyn NvmeController>,
    owner: &Weak<dyn LossWatch>,
) -> Result<Vec<Namespace>, DeviceError> {
    dev.active_namespaces()?
        .into_iter()
        .map(|nsid| build_namespace(dev, nsid, owner.clone()))
        .collect()
}
