//! One RADOS client for a gateway's group and its RBD images, so that fencing the
//! gateway fences everything it could write.
//!
//! # Why
//!
//! A gateway of a group holds its ANA groups' leases (`cls_lock`) with the group's
//! client, a [`RadosPool`]. When the gateway stops beating, another takes its leases
//! and fences it by blocklisting the address in the lease's locker entry: that
//! client's. The OSDs then refuse that client's operations, and only that client's: an
//! image opened on a client of its own (one `rados_t` per namespace, as a standalone
//! target does) would go on writing, e.g. the queued writes of a gateway that was
//! stopped (SIGSTOP, a long pause) and wakes after the takeover.
//!
//! # What
//!
//! The group registers its client once, when the gateway joins ([`share_client`], from
//! `group::rados_store::RadosStore::open`), with the `ceph_conf` and `client_id` it was
//! made from. From then on [`super::RbdBackend::open`] opens an image whose namespace
//! names the same `ceph_conf` and `client_id` (`None` matching `None`, paths compared
//! as written) and has no `keyring` and no `ceph_options` of its own on that client
//! (`ffi::Image::open_on`): a pool context of its own and `rbd_open`, no connection.
//! Blocklisting the group's client address then stops the gateway's lease renewals,
//! its group state writes and every write of those images at once. The OSDs also drop
//! the fenced client's watches, so librbd on the gateway that took over gets the
//! image's exclusive lock at once (milliseconds on the test cluster,
//! `shared_tests.rs`) instead of after a dead client's watch timeout.
//!
//! Such an image runs with the group client's configuration, including the
//! `rados_osd_op_timeout` and `rados_mon_op_timeout` the group sets to its lease: an
//! image operation the OSDs do not answer within that time fails with `ETIMEDOUT`,
//! which the backend answers with Namespace Not Ready, retryable (`map_errno`), so the
//! host retries it, possibly on another gateway, instead of waiting for ever.
//!
//! A namespace with other settings keeps a client of its own, as before, and the
//! gateway warns once per image (`rbd:POOL/IMAGE`) that fencing does not cover it.
//! Images already open keep the client they were opened on; a new registration (there
//! is one per process in a gateway) applies to images opened after it.
//!
//! Provisioning ([`super::provision`]: create, grow, remove) keeps its own short-lived
//! clients: it writes no namespace data.
//!
//! # Lifetime
//!
//! The registration holds the pool (`Arc`) for the rest of the process; each image
//! opened on it holds the pool's client handle, so the client is shut down only once
//! the registration is replaced and the group and every such image are gone (see
//! `ffi`). This module has no `unsafe`: the calls are in `ffi`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::ffi::Image;
use super::rados::RadosPool;
use crate::backend::options::RbdOptions;

/// The registered client and what it was made from.
struct Registration {
    pool: Arc<RadosPool>,
    conf: Option<PathBuf>,
    client_id: Option<String>,
    /// Images already warned about (`rbd:POOL/IMAGE`).
    warned: BTreeSet<String>,
}

/// The process' registration (module docs).
static SHARED: Mutex<Option<Registration>> = Mutex::new(None);

fn registration() -> std::sync::MutexGuard<'static, Option<Registration>> {
    // Nothing in the critical sections can leave the registration half-changed.
    SHARED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes `pool` (connected with `conf` and `client_id`, librados' defaults for `None`)
/// the client of every RBD image opened afterwards whose namespace names the same
/// `conf` and `client_id` and no `keyring` or `ceph_options` of its own (module docs).
/// A gateway of a group calls it once, when it joins, with the group's client, so that
/// fencing that client's address fences the gateway's image writes too. A later call
/// replaces the registration for images opened after it.
pub fn share_client(pool: Arc<RadosPool>, conf: Option<PathBuf>, client_id: Option<String>) {
    let addr = pool.client_addr().unwrap_or_else(|e| e.to_string());
    tracing::info!(
        ceph_conf = ?conf,
        client_id = ?client_id,
        client_addr = %addr,
        "RBD images of the group's cluster will be opened on the group's client (fenced with it)"
    );
    *registration() = Some(Registration {
        pool,
        conf,
        client_id,
        warned: BTreeSet::new(),
    });
}

/// Forgets the registration (tests: a test cluster's client must not outlive it).
#[cfg(test)]
pub(super) fn unshare_client() {
    *registration() = None;
}

/// The settings of `opts` that keep a namespace off a client registered with `conf`
/// and `client_id` (empty: it may use that client).
fn differences(
    conf: Option<&PathBuf>,
    client_id: Option<&str>,
    opts: &RbdOptions,
) -> Vec<&'static str> {
    let mut d = Vec::new();
    if opts.ceph_conf.as_ref() != conf {
        d.push("ceph_conf");
    }
    if opts.client_id.as_deref() != client_id {
        d.push("client_id");
    }
    if opts.keyring.is_some() {
        d.push("keyring");
    }
    if !opts.ceph_options.is_empty() {
        d.push("ceph_options");
    }
    d
}

/// The registered client's handle if image `spec` (`rbd:POOL/IMAGE`) with `opts` may
/// be opened on it. `None`: nothing is registered, or the settings differ (then a
/// warning, the first time for `spec`): the image gets a client of its own.
pub(super) fn client_for(spec: &str, opts: &RbdOptions) -> Option<Arc<Image>> {
    let mut reg = registration();
    let r = reg.as_mut()?;
    let differ = differences(r.conf.as_ref(), r.client_id.as_deref(), opts);
    if differ.is_empty() {
        return Some(r.pool.client().clone());
    }
    if r.warned.insert(spec.to_string()) {
        tracing::warn!(
            %spec,
            differs = ?differ,
            "this RBD image gets a RADOS client of its own: fencing this gateway (blocklisting \
             the group's client) will not stop its writes; give its namespace the group's \
             ceph_conf and client_id and no keyring or ceph_options to put it on the \
             group's client"
        );
    }
    None
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
