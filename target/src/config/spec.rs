//! Namespace specs as users type them (`--namespace SPEC`, `device_path:` in YAML):
//! `ram:SIZE`, `null:SIZE`, `rbd:POOL/IMAGE` (a Ceph RBD image), or a file or block
//! device path (`file:PATH` forces a path).
//! SIZE is bytes or a number with a 1024-based `K`, `M`, `G`, `T` suffix, optionally
//! followed by `iB` or `B`. Shared by config validation and the target's backends.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// What a namespace is backed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceSpec {
    /// A regular file or a block device.
    File(PathBuf),
    /// Memory, `size` bytes.
    Ram { size: u64 },
    /// Nothing: reads complete without data, writes are discarded.
    Null { size: u64 },
    /// A Ceph RBD image `image` in pool `pool` (`rbd:POOL/IMAGE`).
    Rbd { pool: String, image: String },
}

/// Characters an RBD pool or image name in a spec may not contain: `/` separates pool
/// and image (RADOS namespaces are not supported), `@` would name a snapshot, and NUL
/// cannot cross into librbd's C strings.
const RBD_NAME_FORBIDDEN: [char; 3] = ['/', '@', '\0'];

/// Parses the `POOL/IMAGE` of an `rbd:` spec.
fn parse_rbd(s: &str, rest: &str) -> Result<NamespaceSpec, String> {
    let Some((pool, image)) = rest.split_once('/') else {
        return Err(format!("namespace spec {s:?}: expected rbd:POOL/IMAGE"));
    };
    for (what, name) in [("pool", pool), ("image", image)] {
        if name.is_empty() {
            return Err(format!("namespace spec {s:?}: empty RBD {what} name"));
        }
        if let Some(c) = name.chars().find(|c| RBD_NAME_FORBIDDEN.contains(c)) {
            return Err(format!(
                "namespace spec {s:?}: RBD {what} name {name:?} contains {c:?}"
            ));
        }
    }
    Ok(NamespaceSpec::Rbd {
        pool: pool.to_string(),
        image: image.to_string(),
    })
}

impl FromStr for NamespaceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(
                "empty namespace spec: expected a path, ram:SIZE, null:SIZE or rbd:POOL/IMAGE"
                    .into(),
            );
        }
        if let Some(rest) = s.strip_prefix("rbd:") {
            return parse_rbd(s, rest);
        }
        if let Some(size) = s.strip_prefix("ram:") {
            let size = parse_size(size).map_err(|e| format!("namespace spec {s:?}: {e}"))?;
            return Ok(NamespaceSpec::Ram { size });
        }
        if let Some(size) = s.strip_prefix("null:") {
            let size = parse_size(size).map_err(|e| format!("namespace spec {s:?}: {e}"))?;
            return Ok(NamespaceSpec::Null { size });
        }
        let path = s.strip_prefix("file:").unwrap_or(s);
        if path.is_empty() {
            return Err(format!("namespace spec {s:?}: empty path"));
        }
        Ok(NamespaceSpec::File(PathBuf::from(path)))
    }
}

impl fmt::Display for NamespaceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamespaceSpec::File(p) => {
                let s = p.to_string_lossy();
                if ["ram:", "null:", "rbd:", "file:"]
                    .iter()
                    .any(|p| s.starts_with(p))
                {
                    write!(f, "file:{s}")
                } else {
                    write!(f, "{s}")
                }
            }
            NamespaceSpec::Ram { size } => write!(f, "ram:{size}"),
            NamespaceSpec::Null { size } => write!(f, "null:{size}"),
            NamespaceSpec::Rbd { pool, image } => write!(f, "rbd:{pool}/{image}"),
        }
    }
}

/// Parses a size: plain bytes, or a number followed by `K`, `M`, `G` or `T`
/// (1024-based, case-insensitive), optionally followed by `iB` or `B`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "invalid size {s:?}: expected a number of bytes, optionally with a K/M/G/T suffix"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: number too large"))?;
    let suffix = suffix.to_ascii_lowercase();
    let shift = match suffix.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "invalid size {s:?}: unknown suffix {suffix:?} (use K, M, G or T, optionally with iB or B)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size {s:?}: does not fit in 64 bits"))
}
