//! `passthru:` on a subsystem: export a local NVMe controller's namespaces as they are
//! (nvmet's `passthru/device_path`), instead of `namespaces:`.
//!
//! ```yaml
//! subsystems:
//!   - nqn: nqn.2024-01.io.nvmf-rs:ssd0
//!     allow_any_host: true
//!     passthru:
//!       device_path: /dev/nvme0     # the controller character device
//!       clear_ids: false            # zero NGUID/EUI64/UUID the device reports
//!       allow_admin: [firmware]     # admin command classes refused by default
//!       admin_timeout_ms: 60000     # default: the kernel's admin timeout
//! ```
//!
//! This file owns the shape of the section and its self-contained checks
//! ([`PassthruConfig::problems`]); the rules that involve the rest of the subsystem
//! (no `namespaces:` next to it, one subsystem per device) live with the other
//! subsystem checks in `validate`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Longest admin command timeout accepted: one hour (a format or sanitize may take
/// long, but a command the kernel waits on for longer than that is stuck).
pub const PASSTHRU_ADMIN_TIMEOUT_MAX_MS: u32 = 3_600_000;

/// Prefix of a controller character device's file name (`/dev/nvme0`).
const CONTROLLER_PREFIX: &str = "nvme";
/// Prefix of a namespace generic character device's file name (`/dev/ng0n1`).
const GENERIC_PREFIX: &str = "ng";

/// Admin command classes a passthru subsystem refuses unless the config allows them
/// (`allow_admin:`). Each has effects beyond the exported namespaces or beyond the
/// host that sends it; `docs/peers.md` ("Passthru subsystems") has the reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassthruAdminClass {
    /// Namespace Management and Namespace Attachment: create, delete, attach and
    /// detach namespaces of the whole device.
    NsManagement,
    /// Format NVM: erases a namespace (or every namespace).
    Format,
    /// Firmware Image Download and Firmware Commit.
    Firmware,
    /// Sanitize: erases the whole NVM subsystem, namespaces not exported included.
    Sanitize,
    /// Security Send and Security Receive (TCG Opal and the like: locking ranges).
    Security,
    /// Device Self-test.
    SelfTest,
    /// Directive Send and Directive Receive (streams, data placement).
    Directives,
    /// Vendor specific admin commands (opcodes C0h to FFh) and features (FIDs C0h
    /// to FFh): effects unknown to the target.
    Vendor,
}

impl PassthruAdminClass {
    /// Every class, in declaration order.
    pub const ALL: [PassthruAdminClass; 8] = [
        PassthruAdminClass::NsManagement,
        PassthruAdminClass::Format,
        PassthruAdminClass::Firmware,
        PassthruAdminClass::Sanitize,
        PassthruAdminClass::Security,
        PassthruAdminClass::SelfTest,
        PassthruAdminClass::Directives,
        PassthruAdminClass::Vendor,
    ];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PassthruAdminClass::NsManagement => "ns_management",
            PassthruAdminClass::Format => "format",
            PassthruAdminClass::Firmware => "firmware",
            PassthruAdminClass::Sanitize => "sanitize",
            PassthruAdminClass::Security => "security",
            PassthruAdminClass::SelfTest => "self_test",
            PassthruAdminClass::Directives => "directives",
            PassthruAdminClass::Vendor => "vendor",
        }
    }
}

/// A passthru subsystem's device and options (configfs `passthru/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthruConfig {
    /// The NVMe controller character device (`/dev/nvme0`), not a namespace.
    pub device_path: PathBuf,
    /// Zero the NGUID, EUI64 and UUID the device reports (Identify Namespace and the
    /// Namespace Identification Descriptor list), as nvmet's `clear_ids`: a host
    /// that also sees the device locally would otherwise take both for one namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_ids: bool,
    /// Admin command classes passed to the device although refused by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_admin: Vec<PassthruAdminClass>,
    /// Timeout of each admin command the device runs (nvmet's `admin_timeout`), in
    /// ms; `None`: the kernel driver's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_timeout_ms: Option<u32>,
}

impl PassthruConfig {
    /// A passthru section for `device_path` with every option at its default.
    pub fn new(device_path: impl Into<PathBuf>) -> Self {
        PassthruConfig {
            device_path: device_path.into(),
            clear_ids: false,
            allow_admin: Vec::new(),
            admin_timeout_ms: None,
        }
    }

    /// Whether admin commands of `class` are passed to the device.
    pub fn allows(&self, class: PassthruAdminClass) -> bool {
        self.allow_admin.contains(&class)
    }

    /// What is wrong with the section on its own, as (key under `passthru`, why).
    /// Only the path's shape is checked, never the file: a config may be checked on
    /// another machine than the one serving it.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(why) = device_path_problem(&self.device_path) {
            out.push(("device_path", why));
        }
        let mut seen = Vec::new();
        for class in &self.allow_admin {
            if seen.contains(class) {
                out.push(("allow_admin", format!("{} is listed twice", class.as_str())));
            }
            seen.push(*class);
        }
        if let Some(t) = self.admin_timeout_ms {
            if t == 0 || t > PASSTHRU_ADMIN_TIMEOUT_MAX_MS {
                out.push((
                    "admin_timeout_ms",
                    format!("{t} is out of range: must be 1 to {PASSTHRU_ADMIN_TIMEOUT_MAX_MS}"),
                ));
            }
        }
        out
    }
}

/// Why `path` cannot be a controller character device, if it cannot.
fn device_path_problem(path: &Path) -> Option<String> {
    if path.as_os_str().is_empty() {
        return Some("the controller device is required (/dev/nvme0)".to_string());
    }
    if !path.is_absolute() {
        return Some(format!(
            "{} is not an absolute path (the controller device: /dev/nvme0)",
            path.display()
        ));
    }
    let name = path.file_name()?.to_str()?;
    // A namespace's block device (nvme0n1, nvme0c1n1) or generic device (ng0n1) is a
    // common mistake: passthru takes the controller and exports all its namespaces.
    let is_namespace = name
        .strip_prefix(CONTROLLER_PREFIX)
        .is_some_and(|rest| rest.contains('n') && rest.starts_with(|c: char| c.is_ascii_digit()))
        || name
            .strip_prefix(GENERIC_PREFIX)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    is_namespace.then(|| {
        format!(
            "{} is a namespace device: passthru takes the controller character device \
             (/dev/nvmeX) and exports every namespace of it",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_path_shapes() {
        assert_eq!(device_path_problem(Path::new("/dev/nvme0")), None);
        assert_eq!(device_path_problem(Path::new("/dev/nvme12")), None);
        // A symlink name of some other shape is the operator's business.
        assert_eq!(device_path_problem(Path::new("/dev/ssd-a")), None);
        for bad in ["/dev/nvme0n1", "/dev/nvme1c2n1", "/dev/ng0n1"] {
            let why = device_path_problem(Path::new(bad)).unwrap();
            assert!(why.contains("namespace device"), "{bad}: {why}");
        }
        assert!(device_path_problem(Path::new("nvme0"))
            .unwrap()
            .contains("absolute"));
        assert!(device_path_problem(Path::new(""))
            .unwrap()
            .contains("required"));
    }

    #[test]
    fn problems_name_their_key() {
        let mut p = PassthruConfig::new("/dev/nvme0");
        assert!(p.problems().is_empty());
        p.allow_admin = vec![PassthruAdminClass::Format, PassthruAdminClass::Format];
        p.admin_timeout_ms = Some(0);
        let keys: Vec<&str> = p.problems().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["allow_admin", "admin_timeout_ms"]);
        p.allow_admin = vec![PassthruAdminClass::Format];
        p.admin_timeout_ms = Some(PASSTHRU_ADMIN_TIMEOUT_MAX_MS);
        assert!(p.problems().is_empty());
        assert!(p.allows(PassthruAdminClass::Format));
        assert!(!p.allows(PassthruAdminClass::Firmware));
    }

    #[test]
    fn class_names_match_serde() {
        for class in PassthruAdminClass::ALL {
            let yaml = serde_yaml_ng::to_string(&class).unwrap();
            assert_eq!(yaml.trim(), class.as_str());
        }
    }
}
