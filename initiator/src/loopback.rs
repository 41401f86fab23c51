//! The loopback transport: an in-process target served over NVMe/RDMA on the
//! software verbs provider, so the whole RDMA data path (keyed SGLs, RDMA READ/WRITE,
//! in-capsule data) runs without a NIC.
//!
//! [`start_loopback`] builds the target from a config file or `--namespace` specs,
//! starts its poll groups on a private software fabric, and returns a host
//! [`Fabric`] connected to it. The [`LoopbackTarget`] keeps the target running until
//! dropped.

use std::path::Path;
use std::sync::Arc;

use nvmf_common::types::Nqn;
use nvmf_target::config::{Config, TrType};
use nvmf_target::rdma::{listen_addr, RdmaServer};
use nvmf_target::runtime::PortServer;
use nvmf_target::target::Target;
use nvmf_verbs::soft::SoftDevice;
use nvmf_verbs::Device;

use crate::error::Error;
use crate::transport::rdma::RdmaFabric;
use crate::transport::Fabric;

/// A running in-process target.
pub struct LoopbackTarget {
    pub target: Arc<Target>,
    pub device: Arc<SoftDevice>,
    server: Option<RdmaServer>,
}

impl LoopbackTarget {
    /// The target's data-path counters (doorbells, work requests, commands).
    pub fn counters(&self) -> nvmf_target::rdma::poll_group::GroupCounters {
        self.server
            .as_ref()
            .map(|s| s.counters())
            .unwrap_or_default()
    }

    /// Stops the target's threads.
    pub fn shutdown(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

impl Drop for LoopbackTarget {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

/// Loads `config` (or builds one from `namespaces`), forces its ports to loopback,
/// starts the target and returns a fabric to it plus the first subsystem's NQN.
pub fn start_loopback(
    config: Option<&Path>,
    namespaces: &[String],
) -> Result<(Arc<dyn Fabric>, LoopbackTarget, Nqn), Error> {
    let cfg = match config {
        Some(path) => Config::load(path).map_err(|e| Error::InvalidArgument(e.to_string()))?,
        None => {
            if namespaces.is_empty() {
                return Err(Error::InvalidArgument(
                    "loopback needs --config FILE or at least one --namespace SPEC".into(),
                ));
            }
            Config::single(TrType::Loopback, None, None, namespaces.to_vec())
                .map_err(|e| Error::InvalidArgument(e.to_string()))?
        }
    };
    start_loopback_config(&cfg)
}

/// Starts an in-process target for an already loaded config.
pub fn start_loopback_config(
    cfg: &Config,
) -> Result<(Arc<dyn Fabric>, LoopbackTarget, Nqn), Error> {
    let nqn = cfg
        .subsystems
        .first()
        .map(|s| s.nqn.clone())
        .ok_or_else(|| Error::InvalidArgument("the config has no subsystem".into()))?;
    let target = Target::from_config(cfg).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let device = SoftDevice::new();
    let ports = target.ports();
    let first = ports
        .first()
        .ok_or_else(|| Error::InvalidArgument("the config has no port".into()))?
        .clone();
    let dev: Arc<dyn Device> = device.clone();
    let server = RdmaServer::start(target.clone(), dev.clone(), &ports)
        .map_err(|e| Error::InvalidArgument(format!("starting the loopback target: {e}")))?;
    let fabric = RdmaFabric::loopback(dev, listen_addr(&first)).map_err(Error::Transport)?;
    Ok((
        Arc::new(fabric),
        LoopbackTarget {
            target,
            device,
            server: Some(server),
        },
        nqn,
    ))
}
