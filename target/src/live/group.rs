//! Live changes of a gateway of a group ([`crate::group`]): a change is planned on the
//! group's current state and committed to the group's store (compare-and-write on its
//! version) before it is applied here; a change another gateway committed is applied
//! by [`Live::group_sync`].
//!
//! Ordering: everything runs under `running`; the store is read, the change planned,
//! committed and applied in that order, so this gateway never runs a version older
//! than one it committed. A commit that finds the version moved re-reads and plans
//! again (at most [`COMMIT_ATTEMPTS`] times).

use tracing::{info, warn};

use crate::config::{namespace_key, Config, GroupState};

use super::refusal::{Refusal, RefusalKind};
use super::{edit, provision, Live, Op, Save};
use crate::group::{GroupLink, Versioned, COMMIT_ATTEMPTS};

/// The message of a commit that lost to another gateway's.
const CONFLICT: &str = "another gateway changed the group meanwhile";

fn unavailable(link: &GroupLink, e: String) -> Refusal {
    Refusal::new(
        RefusalKind::Unavailable,
        format!("gateway group {}: {e}; nothing changed", link.config.name),
    )
}

/// Stores `state` if the group is still at `expect`; the new version. A version
/// that moved is refused as `Aborted` (the caller plans again).
pub(super) fn commit(
    link: &GroupLink,
    expect: Option<u64>,
    state: &GroupState,
) -> Result<u64, Refusal> {
    match link.store().commit(expect, state) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(Refusal::new(RefusalKind::Aborted, CONFLICT)),
        Err(e) => Err(unavailable(link, e)),
    }
}

/// Puts back `old` after version `committed` could not be applied here (a listener
/// that did not bind), unless another gateway committed after it.
pub(super) fn revert(link: &GroupLink, committed: Option<u64>, old: &GroupState) {
    let Some(v) = committed else { return };
    match link.store().commit(Some(v), old) {
        Ok(Some(back)) => link.store().announce(back),
        Ok(None) => warn!(
            group = %link.config.name,
            "cannot undo version {v}: the group changed after it"
        ),
        Err(e) => warn!(group = %link.config.name, "cannot undo version {v}: {e}"),
    }
}

impl Live {
    fn read_group(&self, link: &GroupLink) -> Result<Versioned, Refusal> {
        link.store().read().map_err(|e| unavailable(link, e))
    }

    /// [`Live::execute`] for a gateway: plan on the group's state, commit, apply.
    pub(super) fn execute_in_group(
        &self,
        link: &GroupLink,
        op: &Op,
    ) -> Result<Vec<String>, Refusal> {
        let mut running = self.running.lock();
        for _ in 0..COMMIT_ATTEMPTS {
            let cur = self.read_group(link)?;
            let base = link.effective(&cur.state);
            // This gateway catches up first: the change is planned on what it runs.
            if base != *running || link.applied().version != cur.version {
                self.apply_locked(&mut running, base, &[], None)?;
                link.set_applied(cur.version, &cur.state);
            }
            if let Op::SetAna { .. } = op {
                return Err(Refusal::new(
                    RefusalKind::FailedPrecondition,
                    "in a gateway group the ANA states follow the groups' leases (the owner \
                     reports its groups optimized); they are not set by hand",
                ));
            }
            let mut new = running.clone();
            let mut resize = Vec::new();
            edit(&mut new, op, &mut resize)?;
            cur.state.place(&mut new);
            let next = cur.state.with_changes_of(&new, &link.config.gateway);
            if let Some(why) = next.refusal(&link.config) {
                return Err(Refusal::new(RefusalKind::FailedPrecondition, why));
            }
            let done = provision::before(op, &running, &mut new)?;
            // (before() may mark the namespace as created: store that too.) What runs
            // here is the stored state laid on this gateway (its cntlid range).
            let mut next = cur.state.with_changes_of(&new, &link.config.gateway);
            // A resize changes no setting: counted, so the other gateways see it.
            for (nqn, nsid) in &resize {
                *next.resized.entry(namespace_key(nqn, nsid.0)).or_default() += 1;
            }
            let new = link.effective(&next);
            let old = running.clone();
            let notes = notes(&old, &new);
            let save = (next != cur.state).then(|| Save::Group {
                link,
                expect: cur.version,
                old: Box::new(cur.state.clone()),
                new: Box::new(next),
            });
            match self.apply_locked(&mut running, new, &resize, save) {
                Ok(mut changes) => {
                    changes.extend(provision::after(op, &old));
                    changes.extend(notes);
                    return Ok(changes);
                }
                Err(e) => {
                    provision::undo(done);
                    if e.kind == RefusalKind::Aborted && e.message == CONFLICT {
                        info!(group = %link.config.name, "{CONFLICT}: planning the change again");
                        continue;
                    }
                    return Err(e);
                }
            }
        }
        Err(Refusal::new(
            RefusalKind::Aborted,
            format!(
                "gateway group {}: other gateways changed the group {COMMIT_ATTEMPTS} times \
                 while this change was planned; repeat it; nothing changed",
                link.config.name
            ),
        ))
    }

    /// Applies the group's latest version here if it is not in force yet (the sync
    /// thread, after an announcement or every [`crate::group::SYNC_INTERVAL`]).
    /// Returns what changed.
    pub fn group_sync(&self) -> Result<Vec<String>, Refusal> {
        self.group_apply(false)
    }

    /// Applies the group's latest version with this gateway's ANA groups as they are
    /// now: its leases changed ([`crate::group::lease`]).
    pub fn group_ownership_changed(&self) -> Result<Vec<String>, Refusal> {
        self.group_apply(true)
    }

    fn group_apply(&self, always: bool) -> Result<Vec<String>, Refusal> {
        let Some(link) = self.group.get() else {
            return Ok(Vec::new());
        };
        let mut running = self.running.lock();
        let cur = if always {
            // (The state in force, not a read: a fenced gateway cannot read.)
            Versioned {
                version: link.applied().version,
                state: link.last(),
            }
        } else {
            self.read_group(link)?
        };
        if !always && link.applied().version == cur.version {
            return Ok(Vec::new());
        }
        let cfg = link.effective(&cur.state);
        // Namespaces another gateway resized: their size is read again here.
        let resize: Vec<(String, nvmf_common::types::Nsid)> = link
            .last()
            .resized_since(&cur.state)
            .into_iter()
            .map(|(nqn, nsid)| (nqn, nvmf_common::types::Nsid(nsid)))
            .collect();
        match self.apply_locked(&mut running, cfg, &resize, None) {
            Ok(changes) => {
                info!(
                    group = %link.config.name,
                    version = ?cur.version,
                    changes = changes.len(),
                    "applied the group's version"
                );
                link.set_applied(cur.version, &cur.state);
                Ok(changes)
            }
            Err(e) => {
                link.set_error(e.to_string());
                Err(e)
            }
        }
    }

    /// [`Live::reload`] for a gateway: re-reads its own file and lays the group's
    /// state on it.
    pub(super) fn reload_in_group(&self, link: &GroupLink) -> Result<Vec<String>, Refusal> {
        let Some(path) = &self.config_path else {
            return Err("the target was started without --config: nothing to re-read".into());
        };
        let local = Config::load(path).map_err(|e| e.to_string())?;
        if local.gateway_group.as_ref() != Some(&link.config) {
            return Err(Refusal::new(
                RefusalKind::FailedPrecondition,
                "gateway_group changed: leaving or changing a group needs a restart",
            ));
        }
        crate::group::check_local(&local)?;
        let mut running = self.running.lock();
        let cur = self.read_group(link)?;
        let cfg = link.effective_with(&cur.state, &local);
        let changes = self.apply_locked(&mut running, cfg, &[], None)?;
        link.set_local(local);
        link.set_applied(cur.version, &cur.state);
        Ok(changes)
    }
}

/// What `new` makes probably not meant that `old` did not: goes back to whoever asked.
pub(super) fn notes(old: &Config, new: &Config) -> Vec<String> {
    let warned = old.warnings();
    new.warnings()
        .into_iter()
        .filter(|w| !warned.contains(w))
        .map(|w| format!("note: {w}"))
        .collect()
}

impl crate::group::GroupApply for Live {
    fn apply_latest(&self) -> Result<Vec<String>, String> {
        self.group_sync().map_err(|e| e.to_string())
    }

    fn apply_ownership(&self) -> Result<Vec<String>, String> {
        self.group_ownership_changed().map_err(|e| e.to_string())
    }
}
