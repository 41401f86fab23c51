//! Connecting what the walk found: one multipath [`PathSet`] per subsystem, every
//! path of it connected (the existing multipath layer: its reconnects, ANA polling
//! and, for I/O threads, its path policies through [`crate::multipath::PathQueues`]).
//!
//! Owned by the host library ([`super`]). A [`ConnectedSubsystem`] owns its path set;
//! dropping it disconnects every path. A subsystem no path connects to is a
//! [`Problem::Subsystem`] with the target's NVMe status in words.

use std::sync::Arc;

use tracing::info;

use nvmf_common::types::Nqn;
use nvmf_common::wire::identify::cmic;

use super::profile::{ConnectAllOptions, Connector, Profile};
use super::walk::{FoundSubsystem, SubsystemPath};
use super::Problem;
use crate::controller::NamespaceInfo;
use crate::error::Error;
use crate::multipath::{PathLink, PathSet, PathState};
use crate::transport::Fabric;

/// A subsystem connected through one or more of its paths.
pub struct ConnectedSubsystem {
    pub subnqn: String,
    /// The host NQN it was connected as.
    pub hostnqn: String,
    /// The paths in the set's order (path `i` of [`Self::set`]).
    pub paths: Vec<SubsystemPath>,
    /// Paths for which no fabric could even be made (a bad address, TLS required
    /// without a key), with the reason; they are not in the set.
    pub unusable: Vec<(SubsystemPath, String)>,
    pub set: Arc<PathSet>,
    /// The active namespaces, as the first connected path reported them.
    pub namespaces: Vec<NamespaceInfo>,
}

impl std::fmt::Debug for ConnectedSubsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectedSubsystem")
            .field("subnqn", &self.subnqn)
            .field("paths", &self.paths)
            .field("unusable", &self.unusable)
            .field("namespaces", &self.namespaces.len())
            .finish_non_exhaustive()
    }
}

/// How one path stands, for printing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathReport {
    pub path: SubsystemPath,
    pub link: PathLink,
    /// The path's ANA state from its ANA log (connected paths of controllers that
    /// report ANA only).
    pub ana: Option<PathState>,
}

impl PathReport {
    /// `live optimized`, `connecting (...)`, `failed (...)`, as nvme-cli's
    /// `list-subsys` words a path's state.
    pub fn state_words(&self) -> String {
        match &self.link {
            PathLink::Connected => match self.ana {
                None => "live".into(),
                Some(PathState::Optimized) => "live optimized".into(),
                Some(PathState::NonOptimized) => "live non-optimized".into(),
                Some(PathState::Unusable) => "live inaccessible".into(),
            },
            PathLink::Reconnecting { last_error } => match last_error {
                Some(e) => format!("connecting (last attempt: {e})"),
                None => "connecting".into(),
            },
            PathLink::GivenUp { error } => match error {
                Some(e) => format!("failed ({e})"),
                None => "failed".into(),
            },
        }
    }
}

impl ConnectedSubsystem {
    /// Every path's state now.
    pub fn path_reports(&self) -> Vec<PathReport> {
        let mut v: Vec<PathReport> = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let link = self.set.link(i);
                let reports_ana = self
                    .set
                    .with_controller(i, |c| c.id_ctrl().cmic & cmic::ANA != 0)
                    .unwrap_or(false);
                let ana = (link == PathLink::Connected && reports_ana).then(|| self.set.state(i));
                PathReport {
                    path: p.clone(),
                    link,
                    ana,
                }
            })
            .collect();
        v.extend(self.unusable.iter().map(|(p, why)| PathReport {
            path: p.clone(),
            link: PathLink::GivenUp {
                error: Some(why.clone()),
            },
            ana: None,
        }));
        v
    }

    /// A problem for each path not connected now (the subsystem itself is up).
    pub fn path_problems(&self) -> Vec<Problem> {
        self.path_reports()
            .into_iter()
            .filter(|p| p.link != PathLink::Connected)
            .map(|p| Problem::Path {
                subnqn: self.subnqn.clone(),
                state: p.state_words(),
                addr: p.path.addr,
            })
            .collect()
    }
}

/// Connects `found` with the settings of `profile`.
pub fn connect_subsystem(
    found: &FoundSubsystem,
    profile: &Profile,
    opts: &ConnectAllOptions,
    connector: &dyn Connector,
) -> Result<ConnectedSubsystem, Problem> {
    let problem = |error: Error| Problem::Subsystem {
        subnqn: found.subnqn.clone(),
        hostnqn: profile.host.hostnqn.as_str().to_owned(),
        error,
    };
    let nqn = Nqn::new(found.subnqn.as_str()).map_err(|e| {
        problem(Error::Protocol(format!(
            "the discovery log names an invalid subsystem NQN: {e}"
        )))
    })?;
    let mut named: Vec<(String, Arc<dyn Fabric>)> = Vec::new();
    let mut paths = Vec::new();
    let mut unusable = Vec::new();
    let mut first_err = None;
    for p in &found.paths {
        // A configured key means TLS everywhere (nvme-cli's --tls applies to every
        // connection); an entry that requires it without a key fails in the connector.
        let tls = p.requires_tls() || profile.tls_psk.is_some();
        match connector.fabric(&p.addr, &found.subnqn, profile, tls) {
            Ok(f) => {
                named.push((p.addr.to_string(), f));
                paths.push(p.clone());
            }
            Err(e) => {
                unusable.push((p.clone(), e.to_string()));
                first_err.get_or_insert(e);
            }
        }
    }
    if named.is_empty() {
        return Err(problem(first_err.unwrap_or_else(|| {
            Error::NotFound("the discovery log lists no usable path".into())
        })));
    }
    let io_queues = u16::try_from(opts.workers)
        .unwrap_or(u16::MAX)
        .max(opts.io_queues);
    let o = profile.io_options(&nqn, io_queues);
    let set =
        PathSet::connect_subsystem(named, o, profile.reconnect, opts.workers).map_err(problem)?;
    let namespaces = (0..set.len())
        .find_map(|i| set.with_controller(i, |c| c.namespaces().to_vec()))
        .unwrap_or_default();
    info!(subnqn = %found.subnqn, paths = paths.len(), namespaces = namespaces.len(), "subsystem connected");
    Ok(ConnectedSubsystem {
        subnqn: found.subnqn.clone(),
        hostnqn: profile.host.hostnqn.as_str().to_owned(),
        paths,
        unusable,
        set,
        namespaces,
    })
}
