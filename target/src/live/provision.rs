//! The side effects of a change on backing storage, around the planner: `add-ns
//! --size` creates the file or image before the plan opens it, `resize-ns --size` grows
//! it first, `remove-ns --delete-backing` deletes it after the namespace is gone. A
//! change refused after its backing was created or grown undoes that ([`undo`]), so a
//! refusal leaves storage as it found it.

use tracing::warn;

use crate::config::spec::NamespaceSpec;
use crate::config::{Config, NamespaceConfig};
use nvmf_common::types::Nsid;

use super::refusal::{Refusal, RefusalKind};
use super::Op;
use crate::backend::provision::{self, ImageOptions, ProvisionError};
use crate::backend::spec::RbdOptions;

/// What [`before`] did, for [`undo`] if the change is refused.
pub(super) enum Done {
    Nothing,
    Created(NamespaceSpec, RbdOptions),
    /// Grown; the size it had.
    Grown(NamespaceSpec, RbdOptions, u64),
}

fn refusal(field: &str, e: ProvisionError) -> Refusal {
    match e {
        ProvisionError::Exists(m) => Refusal::exists(format!(
            "{m}: give --reuse to export it as it is; nothing changed"
        )),
        ProvisionError::NotFound(m) => Refusal::not_found(format!("{m}; nothing changed")),
        ProvisionError::Invalid(m) | ProvisionError::Unsupported(m) => Refusal::invalid(field, m),
        ProvisionError::Failed(m) => Refusal::new(
            RefusalKind::FailedPrecondition,
            format!("{m}; nothing changed"),
        ),
    }
}

fn spec_of(n: &NamespaceConfig) -> Result<NamespaceSpec, Refusal> {
    n.device_path
        .parse()
        .map_err(|e: String| Refusal::invalid("device_path", e))
}

/// The namespace `op` names in `cfg`.
fn namespace<'a>(cfg: &'a mut Config, nqn: &str, nsid: u32) -> Option<&'a mut NamespaceConfig> {
    cfg.subsystems
        .iter_mut()
        .find(|s| s.nqn.as_str() == nqn)?
        .namespaces
        .iter_mut()
        .find(|n| n.nsid == Nsid(nsid))
}

/// Creates or grows the backing `op` asks for; `new` is the edited configuration
/// (the added namespace is marked `created`), `running` the one in force.
pub(super) fn before(op: &Op, running: &Config, new: &mut Config) -> Result<Done, Refusal> {
    match op {
        Op::AddNs { nqn, create, .. } => {
            let Some(size) = create.size else {
                return Ok(Done::Nothing);
            };
            // The namespace the edit added: the NSID `new` has and `running` lacks.
            let old: Vec<Nsid> = running
                .subsystems
                .iter()
                .find(|s| s.nqn.as_str() == nqn)
                .map(|s| s.namespaces.iter().map(|n| n.nsid).collect())
                .unwrap_or_default();
            let Some(ns) = new
                .subsystems
                .iter_mut()
                .find(|s| s.nqn.as_str() == nqn)
                .and_then(|s| s.namespaces.iter_mut().find(|n| !old.contains(&n.nsid)))
            else {
                return Ok(Done::Nothing);
            };
            let spec = spec_of(ns)?;
            let rbd = RbdOptions::of(ns);
            let image = ImageOptions {
                features: create.rbd_features.clone(),
                data_pool: create.rbd_data_pool.clone(),
            };
            if !matches!(spec, NamespaceSpec::Rbd { .. })
                && (image.features.is_some() || image.data_pool.is_some())
            {
                return Err(Refusal::invalid(
                    "rbd_features",
                    "only for rbd:POOL/IMAGE namespaces",
                ));
            }
            if create.reuse && provision::exists(&spec, &rbd).map_err(|e| refusal("size", e))? {
                return Ok(Done::Nothing);
            }
            provision::create(&spec, size, &rbd, &image).map_err(|e| refusal("size", e))?;
            ns.created = true;
            Ok(Done::Created(spec, rbd))
        }
        Op::ResizeNs {
            nqn,
            nsid,
            size: Some(size),
        } => {
            let mut cfg = running.clone();
            let Some(ns) = namespace(&mut cfg, nqn, *nsid) else {
                return Ok(Done::Nothing);
            };
            let spec = spec_of(ns)?;
            let rbd = RbdOptions::of(ns);
            let old = provision::grow(&spec, *size, &rbd).map_err(|e| refusal("size", e))?;
            Ok(Done::Grown(spec, rbd, old))
        }
        Op::RemoveNs {
            nqn,
            nsid,
            delete_backing: true,
        } => {
            let mut cfg = running.clone();
            match namespace(&mut cfg, nqn, *nsid) {
                Some(ns) if !ns.created => Err(Refusal::new(
                    RefusalKind::FailedPrecondition,
                    format!(
                        "namespace {nsid}'s backing {} was not created by the target: it is never deleted; nothing changed",
                        ns.device_path
                    ),
                )),
                _ => Ok(Done::Nothing),
            }
        }
        _ => Ok(Done::Nothing),
    }
}

/// Undoes [`before`] of a change that was then refused.
pub(super) fn undo(done: Done) {
    let r = match &done {
        Done::Nothing => return,
        Done::Created(spec, rbd) => provision::delete(spec, rbd),
        Done::Grown(spec, rbd, old) => provision::restore_size(spec, *old, rbd),
    };
    if let Err(e) = r {
        warn!("undoing the backing change of a refused change failed: {e}");
    }
}

/// After `op` was applied (`old`: the configuration before it): deletes the backing
/// of a namespace removed with `--delete-backing`. Returns what it did.
pub(super) fn after(op: &Op, old: &Config) -> Option<String> {
    let Op::RemoveNs {
        nqn,
        nsid,
        delete_backing: true,
    } = op
    else {
        return None;
    };
    let mut cfg = old.clone();
    let ns = namespace(&mut cfg, nqn, *nsid)?;
    let spec = spec_of(ns).ok()?;
    Some(match provision::delete(&spec, &RbdOptions::of(ns)) {
        Ok(()) => format!(
            "subsystem {nqn}: namespace {nsid}: backing {} deleted",
            ns.device_path
        ),
        Err(e) => {
            warn!("namespace {nsid} of {nqn} removed, its backing not deleted: {e}");
            format!(
                "subsystem {nqn}: namespace {nsid}: backing {} NOT deleted: {e}",
                ns.device_path
            )
        }
    })
}
