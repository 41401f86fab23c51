//! What opening a backend takes ([`OpenOptions`], [`RbdOptions`]) and how opening
//! ([`OpenError`]) or provisioning ([`ProvisionError`]) fails, with the size checks
//! every backend applies.
//!
//! Owned by the backend layer. Below both [`super::spec`] and [`super::provision`]
//! (which pick a backend and open or create it) and the backends themselves (file,
//! RAM, RBD), so that neither side imports the other for these shared facts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Block size of RAM and null namespaces unless the user asks for another.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;
/// Smallest and largest logical block sizes accepted (powers of two in between).
pub const MIN_BLOCK_SIZE: u32 = 512;
pub const MAX_BLOCK_SIZE: u32 = 64 * 1024;

/// How to open a backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Never use O_DIRECT for files and block devices.
    pub buffered_io: bool,
    /// Logical block size; `None`: 512 for RAM, null and files, the device's for block
    /// devices.
    pub block_size: Option<u32>,
    /// Smallest acceptable capacity in bytes (0: at least one block).
    pub min_size: u64,
    /// How to reach the Ceph cluster of an `rbd:` namespace.
    pub rbd: RbdOptions,
}

/// How an `rbd:` namespace reaches its cluster (the YAML namespace's `ceph_conf`,
/// `client_id`, `keyring` and `ceph_options`); each `None` (or no option) leaves
/// librados' default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RbdOptions {
    pub ceph_conf: Option<PathBuf>,
    pub client_id: Option<String>,
    pub keyring: Option<PathBuf>,
    /// Client options set after `ceph_conf` is read, before connecting.
    pub ceph_options: BTreeMap<String, String>,
}

impl RbdOptions {
    /// How namespace `n` reaches its cluster.
    pub fn of(n: &crate::config::NamespaceConfig) -> RbdOptions {
        RbdOptions {
            ceph_conf: n.ceph_conf.clone(),
            client_id: n.client_id.clone(),
            keyring: n.keyring.clone(),
            ceph_options: n.ceph_options.clone(),
        }
    }
}

/// Why a backend could not be opened. Every message names the path (or the kind of
/// namespace) it is about.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("backing path {} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("backing path {}: permission denied", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("backing path {} is a directory, not a file or block device", path.display())]
    Directory { path: PathBuf },
    #[error("backing path {} is not a regular file or block device", path.display())]
    NotFileOrBlockDevice { path: PathBuf },
    #[error("backing file {} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("backing path {} is too small: {size} bytes, need at least {min} bytes", path.display())]
    TooSmall { path: PathBuf, size: u64, min: u64 },
    #[error("{kind} namespace size must not be zero")]
    ZeroSize { kind: &'static str },
    #[error("{kind} namespace is too small: {size} bytes, need at least {min} bytes")]
    SizeTooSmall {
        kind: &'static str,
        size: u64,
        min: u64,
    },
    #[error("{kind} namespace size {size} is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        kind: &'static str,
        size: u64,
        block_size: u32,
    },
    #[error(
        "block size {block_size} for {what} is invalid: must be a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
    )]
    BadBlockSize { what: String, block_size: u32 },
    #[error(
        "block size {block_size} for {} is not a multiple of the device's logical block size {device_block_size}",
        path.display()
    )]
    BlockSizeMismatch {
        path: PathBuf,
        block_size: u32,
        device_block_size: u32,
    },
    #[error("cannot reserve {size} bytes of memory for the {kind} namespace: {source}")]
    Alloc {
        kind: &'static str,
        size: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("RBD image {spec}: {reason}")]
    Rbd { spec: String, reason: String },
    #[error("RBD image {spec}: this nvmf-target was built without the `rbd` feature")]
    RbdNotBuilt { spec: String },
    #[error("backing path {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl OpenError {
    /// Classifies an I/O error met while opening or inspecting `path`.
    pub fn from_io(path: &Path, source: std::io::Error) -> OpenError {
        let path = path.to_path_buf();
        match source.kind() {
            std::io::ErrorKind::NotFound => OpenError::Missing { path },
            std::io::ErrorKind::PermissionDenied => OpenError::PermissionDenied { path },
            _ if source.raw_os_error() == Some(libc::EISDIR) => OpenError::Directory { path },
            _ => OpenError::Io { path, source },
        }
    }
}

/// Checks a logical block size; `what` names the namespace in the error.
pub fn check_block_size(what: &str, block_size: u32) -> Result<(), OpenError> {
    if block_size.is_power_of_two() && (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
        Ok(())
    } else {
        Err(OpenError::BadBlockSize {
            what: what.to_string(),
            block_size,
        })
    }
}

/// Checks the size of a RAM or null namespace (`kind` is "ram" or "null").
pub fn check_memory_size(
    kind: &'static str,
    size: u64,
    block_size: u32,
    min_size: u64,
) -> Result<(), OpenError> {
    check_block_size(kind, block_size)?;
    if size == 0 {
        return Err(OpenError::ZeroSize { kind });
    }
    let min = min_size.max(u64::from(block_size));
    if size < min {
        return Err(OpenError::SizeTooSmall { kind, size, min });
    }
    if !size.is_multiple_of(u64::from(block_size)) {
        return Err(OpenError::NotBlockMultiple {
            kind,
            size,
            block_size,
        });
    }
    Ok(())
}

/// Why a backing could not be created, grown or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionError {
    /// The path or image exists (and reuse was not asked for).
    Exists(String),
    /// A directory, pool or image that must exist does not.
    NotFound(String),
    /// A size or option that cannot be honoured (0, too large, a shrink).
    Invalid(String),
    /// The kind of backing cannot be created (ram:, null:, a block device).
    Unsupported(String),
    /// The system or the cluster failed.
    Failed(String),
}

impl std::fmt::Display for ProvisionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProvisionError::Exists(m)
            | ProvisionError::NotFound(m)
            | ProvisionError::Invalid(m)
            | ProvisionError::Unsupported(m)
            | ProvisionError::Failed(m) => f.write_str(m),
        }
    }
}
