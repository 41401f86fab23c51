//! The discovery walk: from the starting discovery controllers, read each discovery
//! log, follow referrals, and group the NVM subsystem entries by subsystem NQN.
//!
//! Owned by the host library ([`super`]). The rules are libnvme's (`_nvmf_discover`,
//! `dc_walk_referral`): the entry for the discovery subsystem being read (subtype 3)
//! is skipped; an entry of another transport than the discovery controller's is
//! skipped; a referral with "duplicate returned information" set is not followed; a
//! discovery controller already visited in this walk (same transport, address,
//! service id, subsystem NQN and host NQN) is not read again, so referral loops end;
//! and referrals are followed at most [`ConnectAllOptions::max_referral_depth`] deep.
//! A discovery controller that cannot be read is reported in
//! [`WalkResult::problems`] and the walk goes on with the others.

use std::collections::HashSet;
use std::fmt;

use tracing::{debug, info};

use nvmf_common::types::{Nqn, DISCOVERY_NQN};
use nvmf_common::wire::log::{adrfam, eflags, subtype, tcp_sectype, treq, trtype};

use super::profile::{ConnectAllOptions, Connector, Profile};
use super::{DiscoveryProblem, Problem};
use crate::discovery::{discover_log_with, trtype_str, DiscoveryEntry, DiscoveryLog};
use crate::error::Error;

/// A transport address: where a port of a subsystem (or a discovery controller) is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PortAddr {
    pub trtype: u8,
    pub traddr: String,
    pub trsvcid: String,
}

impl PortAddr {
    pub fn new(trtype: u8, traddr: &str, trsvcid: &str) -> PortAddr {
        PortAddr {
            trtype,
            traddr: traddr.to_owned(),
            trsvcid: trsvcid.to_owned(),
        }
    }
}

impl fmt::Display for PortAddr {
    /// As nvme-cli names a controller's address: `tcp traddr=..,trsvcid=..`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} traddr={},trsvcid={}",
            trtype_str(self.trtype),
            self.traddr,
            self.trsvcid
        )
    }
}

/// One path to a subsystem: a port entry of a discovery log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SubsystemPath {
    pub addr: PortAddr,
    pub adrfam: u8,
    pub portid: u16,
    pub treq: u8,
    pub tcp_sectype: u8,
    /// The discovery controller whose log listed it.
    pub found_via: PortAddr,
}

impl SubsystemPath {
    /// Whether the entry asks for a secure channel (TLS) the host must use, as
    /// libnvme's `nvmf_update_tls_concat` reads it.
    pub fn requires_tls(&self) -> bool {
        self.addr.trtype == trtype::TCP
            && self.tcp_sectype != tcp_sectype::NONE
            && self.treq & treq::SECURE_CHANNEL_MASK == treq::REQUIRED
    }
}

/// An NVM subsystem found by the walk, with every path to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSubsystem {
    pub subnqn: String,
    pub paths: Vec<SubsystemPath>,
    /// The index (into the profiles walked) whose settings connect it: the first
    /// spec that led to it.
    pub profile: usize,
}

/// A discovery log entry left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub subnqn: String,
    pub addr: PortAddr,
    pub reason: String,
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct WalkResult {
    /// In the order first found.
    pub subsystems: Vec<FoundSubsystem>,
    /// Every discovery controller whose log was read.
    pub visited: Vec<PortAddr>,
    pub skipped: Vec<Skipped>,
    /// Discovery controllers that could not be read.
    pub problems: Vec<Problem>,
}

/// Reads the discovery log of one discovery controller (the walk's only I/O).
pub trait LogReader {
    fn read(&self, addr: &PortAddr, subnqn: &Nqn, profile: &Profile)
        -> Result<DiscoveryLog, Error>;
}

/// Reads logs over the fabrics a [`Connector`] makes.
pub struct FabricLogReader<'a>(pub &'a dyn Connector);

impl LogReader for FabricLogReader<'_> {
    fn read(
        &self,
        addr: &PortAddr,
        subnqn: &Nqn,
        profile: &Profile,
    ) -> Result<DiscoveryLog, Error> {
        let tls = profile.tls_psk.is_some();
        let fabric = self.0.fabric(addr, subnqn.as_str(), profile, tls)?;
        discover_log_with(fabric, profile.discovery_options(subnqn))
    }
}

/// The identity of a discovery controller within one walk.
type VisitKey = (u8, String, String, String, String);

struct Walker<'a> {
    reader: &'a dyn LogReader,
    max_depth: usize,
    visited: HashSet<VisitKey>,
    out: WalkResult,
}

/// Walks from each `(starting controller, its discovery NQN)`; `profiles[i]` holds
/// the settings of `starts[i]` and of everything found through it.
pub fn walk(
    starts: &[(PortAddr, String)],
    profiles: &[Profile],
    opts: &ConnectAllOptions,
    reader: &dyn LogReader,
) -> WalkResult {
    let mut w = Walker {
        reader,
        max_depth: opts.max_referral_depth,
        visited: HashSet::new(),
        out: WalkResult::default(),
    };
    for (i, ((addr, subnqn), profile)) in starts.iter().zip(profiles).enumerate() {
        w.visit(addr, subnqn, None, 0, i, profile);
    }
    w.out
}

impl Walker<'_> {
    fn visit(
        &mut self,
        addr: &PortAddr,
        subnqn: &str,
        referred_by: Option<&PortAddr>,
        depth: usize,
        pi: usize,
        profile: &Profile,
    ) {
        let key = (
            addr.trtype,
            addr.traddr.clone(),
            addr.trsvcid.clone(),
            subnqn.to_owned(),
            profile.host.hostnqn.as_str().to_owned(),
        );
        if !self.visited.insert(key) {
            debug!(%addr, subnqn, "discovery controller already visited in this walk");
            return;
        }
        let problem = |error: Error| {
            Problem::Discovery(Box::new(DiscoveryProblem {
                controller: addr.clone(),
                subnqn: subnqn.to_owned(),
                source: profile.source.clone(),
                referred_by: referred_by.cloned(),
                error,
            }))
        };
        let log = Nqn::new(subnqn)
            .map_err(|e| Error::Protocol(format!("discovery subsystem NQN {subnqn:?}: {e}")))
            .and_then(|nqn| self.reader.read(addr, &nqn, profile));
        let log = match log {
            Ok(l) => l,
            Err(e) => {
                info!(%addr, "discovery controller not read: {e}");
                self.out.problems.push(problem(e));
                return;
            }
        };
        self.out.visited.push(addr.clone());
        for e in &log.entries {
            self.entry(addr, e, depth, pi, profile);
        }
    }

    fn skip(&mut self, e: &DiscoveryEntry, reason: String) {
        debug!(subnqn = %e.subnqn, traddr = %e.traddr, "discovery entry skipped: {reason}");
        self.out.skipped.push(Skipped {
            subnqn: e.subnqn.clone(),
            addr: PortAddr::new(e.trtype, &e.traddr, &e.trsvcid),
            reason,
        });
    }

    fn entry(
        &mut self,
        dc: &PortAddr,
        e: &DiscoveryEntry,
        depth: usize,
        pi: usize,
        profile: &Profile,
    ) {
        if e.subtype == subtype::CURRENT_DISCOVERY {
            return;
        }
        if e.trtype != dc.trtype {
            return self.skip(
                e,
                format!(
                    "transport {} differs from the discovery controller's ({})",
                    trtype_str(e.trtype),
                    trtype_str(dc.trtype)
                ),
            );
        }
        if !matches!(e.adrfam, adrfam::IPV4 | adrfam::IPV6) {
            return self.skip(e, format!("unsupported address family {}", e.adrfam));
        }
        let addr = PortAddr::new(e.trtype, &e.traddr, &e.trsvcid);
        match e.subtype {
            subtype::NVME => self.add_path(dc, e, addr, pi),
            subtype::REFERRAL => {
                if e.eflags & eflags::DUPRETINFO != 0 {
                    return self.skip(e, "duplicate returned information".into());
                }
                if depth >= self.max_depth {
                    return self.skip(
                        e,
                        format!("referral depth limit ({}) reached", self.max_depth),
                    );
                }
                // A referral may name a unique discovery NQN, or none.
                let nqn = if e.subnqn.is_empty() {
                    DISCOVERY_NQN
                } else {
                    e.subnqn.as_str()
                };
                self.visit(&addr, nqn, Some(dc), depth + 1, pi, profile);
            }
            other => self.skip(e, format!("unknown subsystem type {other}")),
        }
    }

    fn add_path(&mut self, dc: &PortAddr, e: &DiscoveryEntry, addr: PortAddr, pi: usize) {
        let path = SubsystemPath {
            addr,
            adrfam: e.adrfam,
            portid: e.portid,
            treq: e.treq,
            tcp_sectype: e.tcp_sectype,
            found_via: dc.clone(),
        };
        match self
            .out
            .subsystems
            .iter_mut()
            .find(|s| s.subnqn == e.subnqn)
        {
            Some(s) => {
                // Several discovery controllers may list the same port.
                if !s.paths.iter().any(|p| p.addr == path.addr) {
                    s.paths.push(path);
                }
            }
            None => self.out.subsystems.push(FoundSubsystem {
                subnqn: e.subnqn.clone(),
                paths: vec![path],
                profile: pi,
            }),
        }
    }
}
