//! Namespace specs as users type them, and opening the backend a spec names.
//!
//! A spec is what follows `--namespace` on the command line or `device_path:` in a
//! YAML config:
//!
//! * `ram:SIZE`: a RAM disk of `SIZE` bytes (sparse: only touched pages cost memory);
//! * `null:SIZE`: a null device of `SIZE` bytes (reads leave the buffer as it is,
//!   writes are dropped), for benchmarking the transport;
//! * `rbd:POOL/IMAGE`: a Ceph RBD image (needs the `rbd` cargo feature; the cluster is
//!   named by [`RbdOptions`]);
//! * `file:PATH` or any other string: a regular file or block device at `PATH`.
//!
//! `SIZE` is plain bytes (`4096`) or a number with a 1024-based suffix `K`, `M`, `G`,
//! `T` (case-insensitive), optionally followed by `iB` or `B`: `512k`, `1G`, `1GiB`,
//! `2TB`. A path that happens to start with `ram:` or `null:` can be written `./ram:x`.

use std::collections::BTreeMap;

use std::sync::Arc;

use super::file::{FileBackend, FileOptions};
use super::null::NullBackend;
use super::ram::RamBackend;
use super::Backend;

/// What starts an RBD namespace's spec.
const RBD_PREFIX: &str = "rbd:";
pub use crate::config::spec::{parse_size, NamespaceSpec};

pub use super::options::{
    check_block_size, check_memory_size, OpenError, OpenOptions, RbdOptions, DEFAULT_BLOCK_SIZE,
    MAX_BLOCK_SIZE, MIN_BLOCK_SIZE,
};

/// Opens the backend `spec` names.
pub fn open_backend(
    spec: &NamespaceSpec,
    opts: &OpenOptions,
) -> Result<Arc<dyn Backend>, OpenError> {
    match spec {
        NamespaceSpec::Ram { size } => {
            let bs = opts.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
            check_memory_size("ram", *size, bs, opts.min_size)?;
            Ok(Arc::new(RamBackend::new(*size, bs)?))
        }
        NamespaceSpec::Null { size } => {
            let bs = opts.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
            check_memory_size("null", *size, bs, opts.min_size)?;
            Ok(Arc::new(NullBackend::new(*size, bs)))
        }
        NamespaceSpec::File(path) => {
            let backend = FileBackend::open(
                path,
                FileOptions {
                    buffered_io: opts.buffered_io,
                    read_only: false,
                    block_size: opts.block_size,
                },
            )?;
            let size = backend.info().size_bytes;
            if size < opts.min_size {
                return Err(OpenError::TooSmall {
                    path: path.clone(),
                    size,
                    min: opts.min_size,
                });
            }
            Ok(Arc::new(backend))
        }
        NamespaceSpec::Rbd { pool, image } => open_rbd(pool, image, opts),
    }
}

/// Checks the `ceph_options` of every `rbd:` namespace of `cfg` with librados, without
/// connecting (`check-config`); one message per namespace refused, naming the
/// subsystem, the nsid and the option. Without the `rbd` feature nothing can be
/// checked here: such a target refuses `rbd:` namespaces when it opens them.
pub fn check_ceph_options(cfg: &crate::config::Config) -> Vec<String> {
    let mut refused = Vec::new();
    for s in &cfg.subsystems {
        for n in &s.namespaces {
            if n.ceph_options.is_empty() || !n.device_path.starts_with(RBD_PREFIX) {
                continue;
            }
            if let Err(e) = check_rbd_options(&n.ceph_options) {
                refused.push(format!("subsystem {} namespace {}: {e}", s.nqn, n.nsid.0));
            }
        }
    }
    refused
}

#[cfg(feature = "rbd")]
fn check_rbd_options(options: &BTreeMap<String, String>) -> Result<(), String> {
    super::rbd::check_ceph_options(options)
}

#[cfg(not(feature = "rbd"))]
fn check_rbd_options(_: &BTreeMap<String, String>) -> Result<(), String> {
    Ok(())
}

#[cfg(feature = "rbd")]
fn open_rbd(pool: &str, image: &str, opts: &OpenOptions) -> Result<Arc<dyn Backend>, OpenError> {
    let backend = super::rbd::RbdBackend::open(pool, image, &opts.rbd, opts.block_size)?;
    let size = backend.info().size_bytes;
    if size < opts.min_size {
        return Err(OpenError::Rbd {
            spec: format!("rbd:{pool}/{image}"),
            reason: format!("too small: {size} bytes, need at least {}", opts.min_size),
        });
    }
    Ok(Arc::new(backend))
}

#[cfg(not(feature = "rbd"))]
fn open_rbd(pool: &str, image: &str, _: &OpenOptions) -> Result<Arc<dyn Backend>, OpenError> {
    Err(OpenError::RbdNotBuilt {
        spec: format!("rbd:{pool}/{image}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size(" 8M "), Ok(8 << 20));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        for bad in [
            "", "G", "1.5G", "-1", "1X", "1Gi", "1 G", "0x100", "1GG", "k1",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        // Overflow.
        assert!(parse_size("16777216T").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert_eq!(parse_size("16777215T"), Ok(16777215u64 << 40));
    }

    #[test]
    fn specs_parse() {
        assert_eq!(
            "ram:1G".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::Ram { size: 1 << 30 })
        );
        assert_eq!(
            "null:512M".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::Null { size: 512 << 20 })
        );
        assert_eq!(
            "ram:4096".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::Ram { size: 4096 })
        );
        assert_eq!(
            "/dev/nvme0n1".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::File(PathBuf::from("/dev/nvme0n1")))
        );
        assert_eq!(
            "disk.img".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::File(PathBuf::from("disk.img")))
        );
        assert_eq!(
            "file:ram:1G".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::File(PathBuf::from("ram:1G")))
        );
        assert!("ram:".parse::<NamespaceSpec>().is_err());
        assert!("ram:lots".parse::<NamespaceSpec>().is_err());
        assert!("null:1.5G".parse::<NamespaceSpec>().is_err());
        assert!("".parse::<NamespaceSpec>().is_err());
        assert!("file:".parse::<NamespaceSpec>().is_err());
        assert_eq!(
            "rbd:rbd/img".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::Rbd {
                pool: "rbd".into(),
                image: "img".into()
            })
        );
        assert_eq!(
            "file:rbd:x".parse::<NamespaceSpec>(),
            Ok(NamespaceSpec::File(PathBuf::from("rbd:x")))
        );
        for bad in [
            "rbd:",
            "rbd:img",
            "rbd:/img",
            "rbd:pool/",
            "rbd:a/b/c",
            "rbd:a/b@snap",
            "rbd:a/b\0",
        ] {
            let e = bad.parse::<NamespaceSpec>().err();
            assert!(e.is_some(), "{bad:?} accepted");
        }
        for s in [
            "ram:4096",
            "null:1024",
            "/x/y",
            "file:ram:1",
            "rbd:p/i",
            "file:rbd:p/i",
        ] {
            let spec: NamespaceSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(spec.to_string().parse::<NamespaceSpec>(), Ok(spec));
        }
    }

    #[test]
    fn memory_backends_open() {
        let opts = OpenOptions::default();
        let b = open_backend(&NamespaceSpec::Ram { size: 1 << 20 }, &opts).unwrap();
        assert_eq!(b.info().size_bytes, 1 << 20);
        assert_eq!(b.info().block_size, 512);
        let b = open_backend(
            &NamespaceSpec::Null { size: 1 << 30 },
            &OpenOptions {
                block_size: Some(4096),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(b.info().size_bytes, 1 << 30);
        assert_eq!(b.info().block_size, 4096);
    }

    #[test]
    fn memory_backend_errors() {
        let opts = OpenOptions::default();
        let e = open_backend(&NamespaceSpec::Ram { size: 0 }, &opts)
            .err()
            .unwrap();
        assert!(matches!(e, OpenError::ZeroSize { kind: "ram" }), "{e}");
        assert!(e.to_string().contains("ram"), "{e}");
        let e = open_backend(&NamespaceSpec::Null { size: 0 }, &opts)
            .err()
            .unwrap();
        assert!(matches!(e, OpenError::ZeroSize { kind: "null" }), "{e}");
        let e = open_backend(&NamespaceSpec::Ram { size: 1000 }, &opts)
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                OpenError::NotBlockMultiple {
                    size: 1000,
                    block_size: 512,
                    ..
                }
            ),
            "{e}"
        );
        let e = open_backend(&NamespaceSpec::Ram { size: 256 }, &opts)
            .err()
            .unwrap();
        assert!(matches!(e, OpenError::SizeTooSmall { min: 512, .. }), "{e}");
        let e = open_backend(
            &NamespaceSpec::Null { size: 1 << 20 },
            &OpenOptions {
                min_size: 2 << 20,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert!(
            matches!(e, OpenError::SizeTooSmall { min, .. } if min == 2 << 20),
            "{e}"
        );
        for bs in [0, 100, 256, 513, 3000, 128 * 1024] {
            let e = open_backend(
                &NamespaceSpec::Ram { size: 1 << 20 },
                &OpenOptions {
                    block_size: Some(bs),
                    ..Default::default()
                },
            )
            .err()
            .unwrap();
            assert!(matches!(e, OpenError::BadBlockSize { block_size, .. } if block_size == bs));
        }
    }

    #[test]
    fn file_spec_errors_name_the_path() {
        let opts = OpenOptions::default();
        let missing = Path::new("/nonexistent/nvmf-spec-test/disk.img");
        let e = open_backend(&NamespaceSpec::File(missing.into()), &opts)
            .err()
            .unwrap();
        assert!(matches!(e, OpenError::Missing { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "backing path /nonexistent/nvmf-spec-test/disk.img does not exist"
        );

        let dir = std::env::temp_dir();
        let e = open_backend(&NamespaceSpec::File(dir.clone()), &opts)
            .err()
            .unwrap();
        assert!(matches!(e, OpenError::Directory { .. }), "{e}");
        assert!(e.to_string().contains(&*dir.to_string_lossy()), "{e}");

        // min_size applies to files.
        let path = dir.join(format!("nvmf-spec-test-{}.img", std::process::id()));
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let e = open_backend(
            &NamespaceSpec::File(path.clone()),
            &OpenOptions {
                min_size: 1 << 20,
                ..Default::default()
            },
        )
        .err();
        let ok = open_backend(&NamespaceSpec::File(path.clone()), &opts).map(|b| b.info().clone());
        std::fs::remove_file(&path).unwrap();
        let e = e.unwrap();
        assert!(
            matches!(e, OpenError::TooSmall { size: 8192, min, .. } if min == 1 << 20),
            "{e}"
        );
        assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
        let info = ok.unwrap();
        assert_eq!(info.size_bytes, 8192);
        assert_eq!(info.block_size, 512);
    }
}
