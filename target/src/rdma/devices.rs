//! The real RDMA devices (rdma-sys provider) behind a target's `trtype: rdma` ports.
//!
//! Each port's listen address picks its device through rdma_cm; ports on the same
//! device share one [`RdmaServer`](super::RdmaServer) (its poll groups, protection
//! domain and registered arena), ports on different devices get one each.

use std::sync::Arc;

use crate::config::PollMode;
use nvmf_verbs::rdma::{CqMode, RdmaDevice};
use nvmf_verbs::Device;

use super::{listen_addr, DevicePorts};
use crate::params::PortInfo;

/// Opens the device of every port and groups the ports by device. Completion queues
/// use polling in `poll` mode and the completion channel otherwise.
pub fn open_for_ports(ports: &[Arc<PortInfo>], mode: PollMode) -> Result<DevicePorts, String> {
    let mut out: Vec<(Arc<RdmaDevice>, Vec<Arc<PortInfo>>)> = Vec::new();
    for port in ports {
        let addr = listen_addr(port);
        let dev = RdmaDevice::for_local_addr(&addr)
            .map_err(|e| format!("RDMA port {} ({addr}): {e}", port.portid))?;
        let name = dev.name();
        match out.iter_mut().find(|(d, _)| d.name() == name) {
            Some((_, these)) => these.push(port.clone()),
            None => {
                dev.set_cq_mode(match mode {
                    PollMode::Poll => CqMode::Polling,
                    _ => CqMode::Channel,
                });
                out.push((dev, vec![port.clone()]));
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|(d, p)| (d as Arc<dyn Device>, p))
        .collect())
}
