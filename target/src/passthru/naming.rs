//! Linux NVMe device node names: from a controller character device (`/dev/nvme3`)
//! to the generic character devices of its namespaces (`/dev/ng3n1`, `/dev/ng3n2`).
//!
//! Owns only the name rules; opening the candidates and asking each its NSID is the
//! real device's job ([`super::ioctl`]). The `Y` of `ngXnY` is the kernel's
//! namespace-head instance, which equals the NSID only by habit (it is allocated in
//! scan order), so a name never stands for an NSID: the `NVME_IOCTL_ID` of the node
//! decides.

use std::path::{Path, PathBuf};

/// File name prefix of a controller character device.
const CONTROLLER_PREFIX: &str = "nvme";
/// File name prefix of a namespace generic character device.
const GENERIC_PREFIX: &str = "ng";
/// Separator between controller and namespace instances in `ngXnY`.
const NS_SEPARATOR: char = 'n';

/// The controller instance `X` of `/dev/nvmeX` (after resolving symlinks, which the
/// caller does); `None` for any other name.
pub fn controller_instance(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_prefix(CONTROLLER_PREFIX)?;
    parse_decimal(digits)
}

/// The (controller instance, namespace instance) of a generic device name `ngXnY`.
pub fn parse_generic_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix(GENERIC_PREFIX)?;
    let (ctrl, ns) = rest.split_once(NS_SEPARATOR)?;
    Some((parse_decimal(ctrl)?, parse_decimal(ns)?))
}

/// The generic devices of controller `instance` among the names in `dir`, sorted by
/// namespace instance.
pub fn generic_candidates<I, S>(dir: &Path, instance: u32, names: I) -> Vec<PathBuf>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut found: Vec<(u32, PathBuf)> = names
        .into_iter()
        .filter_map(|n| {
            let (c, ns) = parse_generic_name(n.as_ref())?;
            (c == instance).then(|| (ns, dir.join(n.as_ref())))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// A decimal number without sign, leading `+` or leading zeros (`"0"` itself is
/// fine): kernel instance numbers are printed with `%d`.
fn parse_decimal(s: &str) -> Option<u32> {
    let plain = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s.len() == 1 || !s.starts_with('0'));
    if plain {
        s.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_names() {
        assert_eq!(controller_instance(Path::new("/dev/nvme0")), Some(0));
        assert_eq!(controller_instance(Path::new("/dev/nvme17")), Some(17));
        for bad in [
            "/dev/nvme0n1",
            "/dev/nvme",
            "/dev/ng0n1",
            "/dev/nvme01",
            "/",
        ] {
            assert_eq!(controller_instance(Path::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn generic_names() {
        assert_eq!(parse_generic_name("ng0n1"), Some((0, 1)));
        assert_eq!(parse_generic_name("ng12n345"), Some((12, 345)));
        for bad in ["ng0", "ngXn1", "ng0n", "nvme0n1", "ng0n1p1", "ng-1n1"] {
            assert_eq!(parse_generic_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn candidates_of_one_controller_in_namespace_order() {
        let names = ["ng1n2", "nvme1", "ng1n10", "ng10n1", "ng1n1", "nvme1n1"];
        let got = generic_candidates(Path::new("/dev"), 1, names);
        assert_eq!(
            got,
            [
                PathBuf::from("/dev/ng1n1"),
                PathBuf::from("/dev/ng1n2"),
                PathBuf::from("/dev/ng1n10")
            ]
        );
    }
}
