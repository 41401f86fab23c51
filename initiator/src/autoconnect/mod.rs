//! `connect-all` as a library: discover from one or more discovery controllers
//! (nvme-cli's `/etc/nvme/discovery.conf` or the command line), follow referrals, and
//! connect every NVM subsystem found, each as one multipath set of all its paths.
//!
//! Owned by the host library; the CLI (`nvmf-initiator connect-all`) prints what it
//! returns, and a long-running host (a mapping daemon) can keep the
//! [`ConnectedSubsystem`]s and run I/O threads over their path sets. The steps are
//! usable one by one: [`conf`] parses specs, [`Profile::resolve`] checks them,
//! [`walk::walk`] discovers, [`connect::connect_subsystem`] connects; [`connect_all`]
//! runs them in order. Nothing stops at the first failure: a spec that cannot be
//! used, a discovery controller that cannot be read, a subsystem that refuses this
//! host each become a [`Problem`] in the report, and the rest goes on.
//!
//! - [`conf`]: the discovery.conf syntax ([`DiscoverySpec`]).
//! - [`profile`]: specs made usable ([`Profile`]), and fabrics ([`Connector`]).
//! - [`walk`]: the discovery walk ([`WalkResult`]).
//! - [`connect`]: one [`crate::multipath::PathSet`] per subsystem.

pub mod conf;
pub mod connect;
pub mod profile;
pub mod walk;

#[cfg(test)]
mod tests;

use std::fmt;

use nvmf_common::wire::status::{cmd_specific, Sct};

pub use conf::{parse_discovery_conf, read_discovery_conf, DiscoverySpec, Secret, DISCOVERY_CONF};
pub use connect::{connect_subsystem, ConnectedSubsystem, PathReport};
pub use profile::{ConnectAllOptions, Connector, NetConnector, Profile, MAX_REFERRAL_DEPTH};
pub use walk::{
    walk, FabricLogReader, FoundSubsystem, PortAddr, Skipped, SubsystemPath, WalkResult,
};

use crate::error::Error;

/// Something that went wrong without stopping the rest.
#[derive(Debug)]
pub enum Problem {
    /// A spec that cannot be used (its transport, host identity, a secret...).
    Spec { source: String, error: Error },
    /// A discovery controller (a starting one or a referral) that could not be read.
    Discovery(Box<DiscoveryProblem>),
    /// A path of a connected subsystem that is not connected (it is retried in the
    /// background while the set lives, unless refused).
    Path {
        subnqn: String,
        addr: PortAddr,
        /// Its state in words, with the last error.
        state: String,
    },
    /// A subsystem that no path connected to.
    Subsystem {
        subnqn: String,
        hostnqn: String,
        error: Error,
    },
}

/// A discovery controller that could not be read.
#[derive(Debug)]
pub struct DiscoveryProblem {
    pub controller: PortAddr,
    pub subnqn: String,
    /// The spec the walk started from.
    pub source: String,
    /// The discovery controller whose referral led here (None: a starting one).
    pub referred_by: Option<PortAddr>,
    pub error: Error,
}

impl Problem {
    /// The error behind it (a path's is in its state words).
    pub fn error(&self) -> Option<&Error> {
        match self {
            Problem::Spec { error, .. } | Problem::Subsystem { error, .. } => Some(error),
            Problem::Discovery(d) => Some(&d.error),
            Problem::Path { .. } => None,
        }
    }
}

impl fmt::Display for Problem {
    /// The message a user sees.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Spec { error, .. } => write!(f, "{error}"),
            Problem::Discovery(d) => {
                let DiscoveryProblem {
                    controller,
                    subnqn,
                    source,
                    referred_by,
                    error,
                } = d.as_ref();
                write!(f, "discovery controller {controller}")?;
                if subnqn != nvmf_common::types::DISCOVERY_NQN {
                    write!(f, " ({subnqn})")?;
                }
                match referred_by {
                    Some(r) => write!(f, ", referred to by {r},")?,
                    None => write!(f, " ({source})")?,
                }
                write!(f, " could not be read: {error}")
            }
            Problem::Path {
                subnqn,
                addr,
                state,
            } => write!(f, "subsystem {subnqn}: path {addr} not connected: {state}"),
            Problem::Subsystem {
                subnqn,
                hostnqn,
                error,
            } => match error.status() {
                Some(st) if st.is(Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST) => {
                    write!(
                        f,
                        "subsystem {subnqn} refused this host ({hostnqn}): {} (the target \
                         does not list this host NQN among the subsystem's allowed hosts)",
                        st.name()
                    )
                }
                Some(st) => write!(
                    f,
                    "subsystem {subnqn} refused the connection: {}",
                    st.name()
                ),
                None => write!(f, "subsystem {subnqn} not connected: {error}"),
            },
        }
    }
}

/// What [`connect_all`] did.
#[derive(Debug, Default)]
pub struct ConnectAllReport {
    /// The subsystems connected, in the order discovered.
    pub connected: Vec<ConnectedSubsystem>,
    /// Discovery controllers whose log was read.
    pub visited: Vec<PortAddr>,
    /// Discovery entries not used, with the reason.
    pub skipped: Vec<Skipped>,
    /// What failed, in order.
    pub problems: Vec<Problem>,
}

impl ConnectAllReport {
    /// At least one subsystem connected and nothing failed.
    pub fn is_success(&self) -> bool {
        !self.connected.is_empty() && self.problems.is_empty()
    }
}

/// Resolves `specs`, walks from them, and connects every subsystem found.
pub fn connect_all(
    specs: &[DiscoverySpec],
    opts: &ConnectAllOptions,
    connector: &dyn Connector,
) -> ConnectAllReport {
    let mut report = ConnectAllReport::default();
    let mut starts = Vec::new();
    let mut profiles = Vec::new();
    for s in specs {
        let start = s
            .trtype()
            .map(|t| (PortAddr::new(t, &s.traddr, &s.trsvcid), s.subnqn.clone()));
        match (Profile::resolve(s, opts), start) {
            (Ok(p), Some(start)) => {
                starts.push(start);
                profiles.push(p);
            }
            (Err(error), _) => report.problems.push(Problem::Spec {
                source: s.source.clone(),
                error,
            }),
            (Ok(_), None) => report.problems.push(Problem::Spec {
                source: s.source.clone(),
                error: Error::InvalidArgument(format!(
                    "{}: unknown transport {:?}",
                    s.source, s.transport
                )),
            }),
        }
    }
    let found = walk(&starts, &profiles, opts, &FabricLogReader(connector));
    report.visited = found.visited;
    report.skipped = found.skipped;
    report.problems.extend(found.problems);
    for sub in &found.subsystems {
        let Some(profile) = profiles.get(sub.profile) else {
            continue;
        };
        match connect_subsystem(sub, profile, opts, connector) {
            Ok(c) => {
                report.problems.extend(c.path_problems());
                report.connected.push(c);
            }
            Err(p) => report.problems.push(p),
        }
    }
    report
}
