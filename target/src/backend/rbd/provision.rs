//! Creating, growing and removing RBD images for `add-ns --size`, `resize-ns --size`
//! and `remove-ns --delete-backing` (control plane, blocking: each call connects its
//! own client, as `rbd create` does).

use super::ffi::{self, CephError, ClusterError, Image};
use super::{cluster_params, option_pairs};
use crate::backend::options::ProvisionError;
use crate::backend::options::RbdOptions;

/// librbd's feature names (rbd/features.h) and bits.
const FEATURES: [(&str, u64); 8] = [
    ("layering", 1 << 0),
    ("striping", 1 << 1),
    ("exclusive-lock", 1 << 2),
    ("object-map", 1 << 3),
    ("fast-diff", 1 << 4),
    ("deep-flatten", 1 << 5),
    ("journaling", 1 << 6),
    ("data-pool", 1 << 7),
];

/// `layering,exclusive-lock` → librbd's feature bits.
pub fn feature_bits(list: &str) -> Result<u64, String> {
    list.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .try_fold(0u64, |bits, name| {
            FEATURES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| bits | b)
                .ok_or_else(|| {
                    let known: Vec<&str> = FEATURES.iter().map(|(n, _)| *n).collect();
                    format!("{name:?} is not an RBD feature ({})", known.join(", "))
                })
        })
}

fn with_pool<T>(
    opts: &RbdOptions,
    pool: &str,
    f: impl FnOnce(&Image) -> Result<T, ProvisionError>,
) -> Result<T, ProvisionError> {
    let options = option_pairs(&opts.ceph_options);
    let params = cluster_params(opts, &options);
    let img = Image::pool(&params, pool).map_err(|e| match e {
        ClusterError::Call(CephError {
            call: "rados_ioctx_create",
            errno: libc::ENOENT,
        }) => ProvisionError::NotFound(format!("RBD pool {pool} does not exist")),
        e => ProvisionError::Failed(format!("RBD pool {pool}: {e}")),
    })?;
    f(&img)
}

fn failed(spec: &str, e: CephError) -> ProvisionError {
    ProvisionError::Failed(format!("{spec}: {e}"))
}

/// Creates `pool/image` of `size` bytes.
pub fn create(
    opts: &RbdOptions,
    pool: &str,
    image: &str,
    size: u64,
    features: Option<u64>,
    data_pool: Option<&str>,
) -> Result<(), ProvisionError> {
    let spec = format!("rbd:{pool}/{image}");
    with_pool(opts, pool, |p| {
        if let Some((limit, what)) = capacity(p, pool) {
            if size > limit {
                return Err(ProvisionError::Invalid(format!(
                    "{size} bytes is more than {what} ({limit} bytes)"
                )));
            }
        }
        p.create_image(image, size, features, data_pool)
            .map_err(|e| match e.errno {
                libc::EEXIST => ProvisionError::Exists(format!("{spec} exists")),
                // librbd's own limits (size, feature combinations).
                libc::EINVAL => ProvisionError::Invalid(format!("{spec}: {e}")),
                libc::ENOENT if data_pool.is_some() => ProvisionError::NotFound(format!(
                    "{spec}: data pool {} does not exist",
                    data_pool.unwrap_or_default()
                )),
                _ => failed(&spec, e),
            })
    })
}

/// The most an image in `pool` could ever hold: the pool's byte quota, else the
/// cluster's raw capacity; None when neither is known (no quota, and OSDs that report
/// no size, as memstore's).
fn capacity(p: &Image, pool: &str) -> Option<(u64, String)> {
    // From the OSD map (the monitors' own): `osd pool get-quota` needs a manager.
    let cmd = serde_json::json!({"prefix": "osd dump", "format": "json"});
    let quota = p
        .mon_command(&cmd.to_string())
        .ok()
        .and_then(|out| serde_json::from_slice::<serde_json::Value>(&out).ok())
        .and_then(|v| {
            v.get("pools")?
                .as_array()?
                .iter()
                .find(|p| p.get("pool_name").and_then(|n| n.as_str()) == Some(pool))?
                .get("quota_max_bytes")?
                .as_u64()
        })
        .filter(|q| *q > 0);
    if let Some(q) = quota {
        return Some((q, format!("pool {pool}'s quota")));
    }
    p.cluster_bytes()
        .ok()
        .filter(|b| *b > 0)
        .map(|b| (b, "the cluster holds".to_string()))
}

/// Whether `pool/image` exists.
pub fn exists(opts: &RbdOptions, pool: &str, image: &str) -> Result<bool, ProvisionError> {
    let options = option_pairs(&opts.ceph_options);
    let params = cluster_params(opts, &options);
    match Image::open(&params, pool, image) {
        Ok(_) => Ok(true),
        Err(ClusterError::Call(CephError {
            call: "rbd_open",
            errno: libc::ENOENT,
        })) => Ok(false),
        Err(ClusterError::Call(CephError {
            call: "rados_ioctx_create",
            errno: libc::ENOENT,
        })) => Err(ProvisionError::NotFound(format!(
            "RBD pool {pool} does not exist"
        ))),
        Err(e) => Err(ProvisionError::Failed(format!("rbd:{pool}/{image}: {e}"))),
    }
}

/// Sets `pool/image` to `size` bytes; returns the size it had.
pub fn resize(
    opts: &RbdOptions,
    pool: &str,
    image: &str,
    size: u64,
    allow_shrink: bool,
) -> Result<u64, ProvisionError> {
    let spec = format!("rbd:{pool}/{image}");
    let options = option_pairs(&opts.ceph_options);
    let params = cluster_params(opts, &options);
    let img = ffi::Image::open(&params, pool, image)
        .map_err(|e| ProvisionError::Failed(format!("{spec}: {e}")))?;
    let old = img.size().map_err(|e| failed(&spec, e))?;
    if size < old && !allow_shrink {
        return Err(ProvisionError::Invalid(format!(
            "{size} bytes is smaller than {spec}'s {old}: shrinking is refused"
        )));
    }
    img.resize(size, allow_shrink)
        .map_err(|e| failed(&spec, e))?;
    Ok(old)
}

/// Removes `pool/image`.
pub fn remove(opts: &RbdOptions, pool: &str, image: &str) -> Result<(), ProvisionError> {
    let spec = format!("rbd:{pool}/{image}");
    with_pool(opts, pool, |p| {
        p.remove_image(image).map_err(|e| failed(&spec, e))
    })
}
