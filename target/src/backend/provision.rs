//! Creating the backing of a namespace (`add-ns --size`), growing it
//! (`resize-ns --size`) and deleting it (`remove-ns --delete-backing`): sparse files
//! and RBD images. Control plane only, blocking.
//!
//! A file is created with `O_EXCL` (an existing path is never truncated) and sized
//! with `ftruncate` (sparse: no blocks are written). A size larger than the whole
//! file system (or, for an image, the cluster's raw capacity) is refused: thin as
//! they are, such a backing could never be filled.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::config::spec::NamespaceSpec;

use super::options::RbdOptions;

/// Mode of a backing file the target creates (the data is the hosts').
const CREATED_FILE_MODE: u32 = 0o600;

pub use super::options::ProvisionError;

/// What to create beyond the size (RBD images only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageOptions {
    /// Feature names (`layering,exclusive-lock`); `None`: the cluster's default.
    pub features: Option<String>,
    /// The pool the image's data goes to (`--data-pool`).
    pub data_pool: Option<String>,
}

/// Whether the backing `spec` names exists now.
pub fn exists(spec: &NamespaceSpec, rbd: &RbdOptions) -> Result<bool, ProvisionError> {
    match spec {
        NamespaceSpec::File(p) => Ok(p.exists()),
        NamespaceSpec::Rbd { pool, image } => rbd_exists(rbd, pool, image),
        NamespaceSpec::Ram { .. } | NamespaceSpec::Null { .. } => Ok(false),
    }
}

/// Creates the backing `spec` names with `size` bytes.
pub fn create(
    spec: &NamespaceSpec,
    size: u64,
    rbd: &RbdOptions,
    image: &ImageOptions,
) -> Result<(), ProvisionError> {
    if size == 0 {
        return Err(ProvisionError::Invalid("a size of 0 bytes".into()));
    }
    match spec {
        NamespaceSpec::File(p) => create_file(p, size),
        NamespaceSpec::Rbd { pool, image: name } => rbd_create(rbd, pool, name, size, image),
        NamespaceSpec::Ram { .. } | NamespaceSpec::Null { .. } => Err(ProvisionError::Unsupported(
            "ram: and null: namespaces take their size in the path, not --size".into(),
        )),
    }
}

/// Grows the backing to `size` bytes; returns the size it had. A shrink is refused.
pub fn grow(spec: &NamespaceSpec, size: u64, rbd: &RbdOptions) -> Result<u64, ProvisionError> {
    match spec {
        NamespaceSpec::File(p) => set_file_size(p, size, false),
        NamespaceSpec::Rbd { pool, image } => rbd_resize(rbd, pool, image, size, false),
        NamespaceSpec::Ram { .. } | NamespaceSpec::Null { .. } => Err(ProvisionError::Unsupported(
            "ram: and null: namespaces cannot be resized".into(),
        )),
    }
}

/// Puts a grown backing back to `size` bytes (undoing [`grow`] of a refused change).
pub fn restore_size(
    spec: &NamespaceSpec,
    size: u64,
    rbd: &RbdOptions,
) -> Result<(), ProvisionError> {
    match spec {
        NamespaceSpec::File(p) => set_file_size(p, size, true).map(drop),
        NamespaceSpec::Rbd { pool, image } => rbd_resize(rbd, pool, image, size, true).map(drop),
        NamespaceSpec::Ram { .. } | NamespaceSpec::Null { .. } => Ok(()),
    }
}

/// Deletes the backing `spec` names.
pub fn delete(spec: &NamespaceSpec, rbd: &RbdOptions) -> Result<(), ProvisionError> {
    match spec {
        NamespaceSpec::File(p) => std::fs::remove_file(p)
            .map_err(|e| ProvisionError::Failed(format!("{}: {e}", p.display()))),
        NamespaceSpec::Rbd { pool, image } => rbd_remove(rbd, pool, image),
        NamespaceSpec::Ram { .. } | NamespaceSpec::Null { .. } => Ok(()),
    }
}

/// The total size of the file system that would hold `path`.
fn file_system_bytes(path: &Path) -> Result<u64, ProvisionError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let st = nix::sys::statvfs::statvfs(dir).map_err(|e| match e {
        nix::errno::Errno::ENOENT => {
            ProvisionError::NotFound(format!("directory {} does not exist", dir.display()))
        }
        e => ProvisionError::Failed(format!("{}: {e}", dir.display())),
    })?;
    Ok(st.blocks().saturating_mul(st.fragment_size()))
}

fn create_file(path: &Path, size: u64) -> Result<(), ProvisionError> {
    let fs = file_system_bytes(path)?;
    if size > fs {
        return Err(ProvisionError::Invalid(format!(
            "{size} bytes is more than the file system holding {} ({fs} bytes)",
            path.display()
        )));
    }
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(CREATED_FILE_MODE)
        .open(path)
        .map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => {
                ProvisionError::Exists(format!("{} exists", path.display()))
            }
            ErrorKind::NotFound => ProvisionError::NotFound(format!(
                "{}: the directory does not exist",
                path.display()
            )),
            _ => ProvisionError::Failed(format!("{}: {e}", path.display())),
        })?;
    let sized = f
        .set_len(size)
        .and_then(|()| f.sync_all())
        .map_err(|e| ProvisionError::Failed(format!("{}: {e}", path.display())));
    if sized.is_err() {
        let _ = std::fs::remove_file(path);
    }
    sized
}

fn set_file_size(path: &Path, size: u64, allow_shrink: bool) -> Result<u64, ProvisionError> {
    let fail = |e: std::io::Error| ProvisionError::Failed(format!("{}: {e}", path.display()));
    let f = OpenOptions::new().write(true).open(path).map_err(fail)?;
    let meta = f.metadata().map_err(fail)?;
    if !meta.is_file() {
        return Err(ProvisionError::Unsupported(format!(
            "{} is not a regular file: grow the device itself, then resize-ns without --size",
            path.display()
        )));
    }
    let old = meta.len();
    if size < old && !allow_shrink {
        return Err(ProvisionError::Invalid(format!(
            "{size} bytes is smaller than {}'s {old}: shrinking is refused",
            path.display()
        )));
    }
    if size > old {
        let fs = file_system_bytes(path)?;
        if size > fs {
            return Err(ProvisionError::Invalid(format!(
                "{size} bytes is more than the file system holding {} ({fs} bytes)",
                path.display()
            )));
        }
    }
    f.set_len(size).and_then(|()| f.sync_all()).map_err(fail)?;
    Ok(old)
}

#[cfg(feature = "rbd")]
fn rbd_create(
    opts: &RbdOptions,
    pool: &str,
    name: &str,
    size: u64,
    image: &ImageOptions,
) -> Result<(), ProvisionError> {
    let features = image
        .features
        .as_deref()
        .map(super::rbd::provision::feature_bits)
        .transpose()
        .map_err(ProvisionError::Invalid)?;
    super::rbd::provision::create(opts, pool, name, size, features, image.data_pool.as_deref())
}

#[cfg(feature = "rbd")]
fn rbd_exists(opts: &RbdOptions, pool: &str, name: &str) -> Result<bool, ProvisionError> {
    super::rbd::provision::exists(opts, pool, name)
}

#[cfg(feature = "rbd")]
fn rbd_resize(
    opts: &RbdOptions,
    pool: &str,
    name: &str,
    size: u64,
    allow_shrink: bool,
) -> Result<u64, ProvisionError> {
    super::rbd::provision::resize(opts, pool, name, size, allow_shrink)
}

#[cfg(feature = "rbd")]
fn rbd_remove(opts: &RbdOptions, pool: &str, name: &str) -> Result<(), ProvisionError> {
    super::rbd::provision::remove(opts, pool, name)
}

#[cfg(not(feature = "rbd"))]
fn no_rbd() -> ProvisionError {
    ProvisionError::Unsupported("this nvmf-target was built without the `rbd` feature".into())
}

#[cfg(not(feature = "rbd"))]
fn rbd_create(
    _: &RbdOptions,
    _: &str,
    _: &str,
    _: u64,
    _: &ImageOptions,
) -> Result<(), ProvisionError> {
    Err(no_rbd())
}

#[cfg(not(feature = "rbd"))]
fn rbd_exists(_: &RbdOptions, _: &str, _: &str) -> Result<bool, ProvisionError> {
    Err(no_rbd())
}

#[cfg(not(feature = "rbd"))]
fn rbd_resize(_: &RbdOptions, _: &str, _: &str, _: u64, _: bool) -> Result<u64, ProvisionError> {
    Err(no_rbd())
}

#[cfg(not(feature = "rbd"))]
fn rbd_remove(_: &RbdOptions, _: &str, _: &str) -> Result<(), ProvisionError> {
    Err(no_rbd())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("nvmf-provision-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_created_file_is_sparse_and_never_replaces_an_existing_one() {
        let p = tmp("a.img");
        let _ = std::fs::remove_file(&p);
        let spec = NamespaceSpec::File(p.clone());
        let rbd = RbdOptions::default();
        create(&spec, 64 << 20, &rbd, &ImageOptions::default()).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "not sparse: {} blocks",
            meta.blocks()
        );
        assert!(matches!(
            create(&spec, 1 << 20, &rbd, &ImageOptions::default()),
            Err(ProvisionError::Exists(_))
        ));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 64 << 20, "truncated");
        assert!(matches!(
            create(&spec, 0, &rbd, &ImageOptions::default()),
            Err(ProvisionError::Invalid(_))
        ));
        assert_eq!(grow(&spec, 128 << 20, &rbd), Ok(64 << 20));
        assert!(matches!(
            grow(&spec, 1 << 20, &rbd),
            Err(ProvisionError::Invalid(_))
        ));
        assert!(matches!(
            grow(&spec, u64::MAX / 2, &rbd),
            Err(ProvisionError::Invalid(_))
        ));
        restore_size(&spec, 64 << 20, &rbd).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 64 << 20);
        delete(&spec, &rbd).unwrap();
        assert!(!p.exists());
        assert!(matches!(
            create(
                &NamespaceSpec::File(tmp("no-dir").join("x.img")),
                1 << 20,
                &rbd,
                &ImageOptions::default()
            ),
            Err(ProvisionError::NotFound(_))
        ));
        assert!(matches!(
            create(&spec, u64::MAX / 2, &rbd, &ImageOptions::default()),
            Err(ProvisionError::Invalid(_))
        ));
        assert!(!p.exists());
    }
}
