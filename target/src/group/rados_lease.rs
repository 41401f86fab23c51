//! [`LeaseStore`] in RADOS, on the group's client ([`super::rados_store::RadosStore::pool`]):
//!
//! | object (group's pool) | use |
//! |---|---|
//! | `nvmf.group.NAME.ana.GRPID` | `cls_lock` exclusive lock `owner`, cookie = gateway name, with the lease's duration: ANA group GRPID's lease |
//! | `nvmf.group.NAME.beat.GATEWAY` | the gateway's beat counter (decimal), written whole by that gateway only |
//!
//! Fencing is `ceph osd blocklist add ADDR` through the monitors, for the lease's
//! duration times [`FENCE_LEASES`]: long enough for the fenced process to notice and
//! reconnect with a new client, short enough that the blocklist does not grow forever.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::lease::{Holder, LeaseError, LeaseStore};
use crate::backend::rbd::rados::{CephError, Lock, RadosPool};
use crate::backend::rbd::EBLOCKLISTED;

/// The lock name of an ANA group's lease.
const LOCK_NAME: &str = "owner";
/// What the lock says about itself (`rados lock info`).
const LOCK_DESC: &str = "nvmf-target ANA group owner";
/// A fence lasts this many lease durations.
const FENCE_LEASES: u32 = 60;

pub struct RadosLeases {
    pool: Arc<RadosPool>,
    group: String,
    gateway: String,
    my_addr: String,
    fence_for: Duration,
}

impl RadosLeases {
    pub fn new(
        pool: Arc<RadosPool>,
        group: &str,
        gateway: &str,
        lease: Duration,
    ) -> Result<RadosLeases, String> {
        let my_addr = pool.client_addr().map_err(|e| e.to_string())?;
        Ok(RadosLeases {
            pool,
            group: group.to_string(),
            gateway: gateway.to_string(),
            my_addr,
            fence_for: lease.saturating_mul(FENCE_LEASES),
        })
    }

    fn lease_object(&self, grpid: u32) -> String {
        format!("nvmf.group.{}.ana.{grpid}", self.group)
    }

    fn beat_object(&self, gateway: &str) -> String {
        format!("nvmf.group.{}.beat.{gateway}", self.group)
    }
}

fn lease_error(e: CephError) -> LeaseError {
    if e.errno == EBLOCKLISTED {
        LeaseError::Fenced
    } else {
        LeaseError::Other(e.to_string())
    }
}

impl LeaseStore for RadosLeases {
    fn beat(&self, beat: u64) -> Result<(), LeaseError> {
        self.pool
            .write_full(
                &self.beat_object(&self.gateway),
                beat.to_string().as_bytes(),
            )
            .map_err(lease_error)
    }

    fn beats(&self, gateways: &[String]) -> Result<BTreeMap<String, u64>, LeaseError> {
        let mut out = BTreeMap::new();
        for g in gateways {
            let Some(bytes) = self
                .pool
                .read_full(&self.beat_object(g))
                .map_err(lease_error)?
            else {
                continue;
            };
            if let Some(b) = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.parse().ok())
            {
                out.insert(g.clone(), b);
            }
        }
        Ok(out)
    }

    fn holder(&self, grpid: u32) -> Result<Option<Holder>, LeaseError> {
        let lockers = self
            .pool
            .lockers(&self.lease_object(grpid), LOCK_NAME)
            .map_err(lease_error)?;
        // The cookie is the holder's gateway name.
        Ok(lockers.into_iter().next().map(|l| Holder {
            addr: l.addr,
            gateway: l.cookie,
        }))
    }

    fn try_lock(&self, grpid: u32, renew: bool, duration: Duration) -> Result<bool, LeaseError> {
        let r = self
            .pool
            .lock_exclusive(
                &self.lease_object(grpid),
                LOCK_NAME,
                &self.gateway,
                LOCK_DESC,
                duration,
                renew,
            )
            .map_err(lease_error)?;
        Ok(r == Lock::Acquired)
    }

    fn unlock(&self, grpid: u32) -> Result<(), LeaseError> {
        self.pool
            .unlock(&self.lease_object(grpid), LOCK_NAME, &self.gateway)
            .map_err(lease_error)
    }

    fn fence(&self, addr: &str) -> Result<(), LeaseError> {
        self.pool
            .blocklist_add(addr, self.fence_for)
            .map_err(lease_error)
    }

    fn my_addr(&self) -> String {
        self.my_addr.clone()
    }
}
