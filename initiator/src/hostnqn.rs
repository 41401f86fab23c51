//! The host's identity: host NQN and 128-bit host identifier.
//!
//! Owned by the host library. Sources, in order: explicit values (CLI `-q/--hostnqn`,
//! `-I/--hostid`), then `/etc/nvme/hostnqn` and `/etc/nvme/hostid` (as nvme-cli uses
//! them), then a value derived from the other one (the UUID inside a
//! `nqn.2014-08.org.nvmexpress:uuid:<uuid>` NQN, or that NQN built from a host id),
//! and last a freshly generated UUID. A generated identity is reported as such
//! ([`IdentitySource::Generated`]) so the CLI can tell the user: two hosts must never
//! silently share an identity, and nothing here writes to `/etc/nvme`.

use std::path::Path;

use tracing::info;
use uuid::Uuid;

use nvmf_common::types::Nqn;

use crate::error::Error;

/// Where nvme-cli keeps the host NQN.
pub const HOSTNQN_FILE: &str = "/etc/nvme/hostnqn";
/// Where nvme-cli keeps the host identifier.
pub const HOSTID_FILE: &str = "/etc/nvme/hostid";
/// The prefix of a UUID-based NQN (NVMe Base 4.5, "NVMe Qualified Names").
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";
/// Every NQN starts with this.
const NQN_PREFIX: &str = "nqn.";

/// How the identity was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// From explicit values and/or the files in `/etc/nvme`.
    Configured,
    /// Partly derived (host id from the NQN's UUID, or the NQN from the host id).
    Derived,
    /// Generated for this run: not persistent.
    Generated,
}

/// A host NQN and host identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub hostnqn: Nqn,
    pub hostid: [u8; 16],
    pub source: IdentitySource,
}

impl HostIdentity {
    /// The identity from explicit values, else `/etc/nvme`, else generated.
    pub fn load(hostnqn: Option<&str>, hostid: Option<&str>) -> Result<HostIdentity, Error> {
        HostIdentity::load_from(
            Path::new(HOSTNQN_FILE),
            Path::new(HOSTID_FILE),
            hostnqn,
            hostid,
        )
    }

    /// [`HostIdentity::load`] with explicit file locations (tests, containers).
    pub fn load_from(
        nqn_file: &Path,
        id_file: &Path,
        hostnqn: Option<&str>,
        hostid: Option<&str>,
    ) -> Result<HostIdentity, Error> {
        let nqn = match hostnqn {
            Some(s) => Some(parse_hostnqn(s)?),
            None => read_file(nqn_file)?
                .map(|s| {
                    parse_hostnqn(&s)
                        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", nqn_file.display())))
                })
                .transpose()?,
        };
        let id = match hostid {
            Some(s) => Some(parse_hostid(s)?),
            None => read_file(id_file)?
                .map(|s| {
                    parse_hostid(&s)
                        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", id_file.display())))
                })
                .transpose()?,
        };
        Ok(HostIdentity::combine(nqn, id))
    }

    /// Fills in whichever of the two is missing.
    pub fn combine(nqn: Option<Nqn>, id: Option<[u8; 16]>) -> HostIdentity {
        match (nqn, id) {
            (Some(hostnqn), Some(hostid)) => {
                if let Some(u) = nqn_uuid(&hostnqn) {
                    // Debian's nvme-cli package writes /etc/nvme/hostnqn and hostid
                    // with different UUIDs, and the Linux host accepts that pair
                    // silently: so do we, saying it only when asked (-v).
                    if u.as_bytes() != &hostid {
                        info!(%hostnqn, hostid = %Uuid::from_bytes(hostid),
                            "host NQN's UUID and host id differ");
                    }
                }
                HostIdentity {
                    hostnqn,
                    hostid,
                    source: IdentitySource::Configured,
                }
            }
            (Some(hostnqn), None) => match nqn_uuid(&hostnqn) {
                Some(u) => HostIdentity {
                    hostnqn,
                    hostid: *u.as_bytes(),
                    source: IdentitySource::Derived,
                },
                // An NQN without a UUID: a fresh host id; the NQN still names the host.
                None => HostIdentity {
                    hostnqn,
                    hostid: *Uuid::new_v4().as_bytes(),
                    source: IdentitySource::Generated,
                },
            },
            (None, Some(hostid)) => HostIdentity {
                hostnqn: uuid_nqn(&Uuid::from_bytes(hostid)),
                hostid,
                source: IdentitySource::Derived,
            },
            (None, None) => HostIdentity::generate(),
        }
    }

    /// A new random identity: `nqn.2014-08.org.nvmexpress:uuid:<uuid v4>`, host id the
    /// same UUID.
    pub fn generate() -> HostIdentity {
        let u = Uuid::new_v4();
        HostIdentity {
            hostnqn: uuid_nqn(&u),
            hostid: *u.as_bytes(),
            source: IdentitySource::Generated,
        }
    }

    /// The host id as a hyphenated UUID string.
    pub fn hostid_string(&self) -> String {
        Uuid::from_bytes(self.hostid).hyphenated().to_string()
    }
}

/// The UUID-based NQN for `u`.
fn uuid_nqn(u: &Uuid) -> Nqn {
    let s = format!("{UUID_NQN_PREFIX}{}", u.hyphenated());
    // A UUID NQN is 68 bytes of ASCII: always valid; fall back to the discovery NQN
    // shape only to stay panic-free.
    Nqn::new(s).unwrap_or_else(|_| Nqn::discovery())
}

/// The UUID inside a `nqn.2014-08.org.nvmexpress:uuid:<uuid>` NQN.
pub fn nqn_uuid(nqn: &Nqn) -> Option<Uuid> {
    nqn.as_str()
        .strip_prefix(UUID_NQN_PREFIX)
        .and_then(|u| Uuid::parse_str(u).ok())
}

/// Validates a host NQN (trimmed): a valid NQN starting with `nqn.`.
pub fn parse_hostnqn(s: &str) -> Result<Nqn, Error> {
    let s = s.trim();
    if !s.starts_with(NQN_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "host NQN {s:?} does not start with \"{NQN_PREFIX}\""
        )));
    }
    Nqn::new(s).map_err(|e| Error::InvalidArgument(format!("host NQN {s:?}: {e}")))
}

/// Parses a host id (trimmed): a UUID, hyphenated or as 32 hex digits.
pub fn parse_hostid(s: &str) -> Result<[u8; 16], Error> {
    let s = s.trim();
    Uuid::parse_str(s)
        .map(|u| *u.as_bytes())
        .map_err(|e| Error::InvalidArgument(format!("host id {s:?} is not a UUID: {e}")))
}

/// The trimmed contents of `path`; `None` when it does not exist or is blank.
fn read_file(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim().is_empty() => Ok(None),
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::InvalidArgument(format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::logged_at;

    const U: &str = "3f6a2c1e-8a4b-4e4e-9b1a-0123456789ab";

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "nvmf-hostnqn-{}-{}",
            std::process::id(),
            Uuid::new_v4()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_are_trimmed_and_validated() {
        let d = dir();
        let (nf, idf) = (d.join("hostnqn"), d.join("hostid"));
        std::fs::write(&nf, format!("  {UUID_NQN_PREFIX}{U}\n")).unwrap();
        std::fs::write(&idf, format!("{U}\n")).unwrap();
        let h = HostIdentity::load_from(&nf, &idf, None, None).unwrap();
        assert_eq!(h.hostnqn.as_str(), format!("{UUID_NQN_PREFIX}{U}"));
        assert_eq!(h.hostid_string(), U);
        assert_eq!(h.source, IdentitySource::Configured);

        // The host id derives from the NQN's UUID when its file is missing.
        std::fs::remove_file(&idf).unwrap();
        let h = HostIdentity::load_from(&nf, &idf, None, None).unwrap();
        assert_eq!(h.hostid_string(), U);
        assert_eq!(h.source, IdentitySource::Derived);

        // Garbage in the files is an error, not silently replaced.
        std::fs::write(&nf, "not-an-nqn\n").unwrap();
        assert!(HostIdentity::load_from(&nf, &idf, None, None).is_err());
        std::fs::write(&nf, format!("{UUID_NQN_PREFIX}{U}")).unwrap();
        std::fs::write(&idf, "xyz").unwrap();
        assert!(HostIdentity::load_from(&nf, &idf, None, None).is_err());

        // Explicit values win over files.
        let h =
            HostIdentity::load_from(&nf, &idf, Some("nqn.2024-01.io.example:h"), Some(U)).unwrap();
        assert_eq!(h.hostnqn.as_str(), "nqn.2024-01.io.example:h");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn generated_when_nothing_configured() {
        let d = dir();
        let h = HostIdentity::load_from(&d.join("none1"), &d.join("none2"), None, None).unwrap();
        assert_eq!(h.source, IdentitySource::Generated);
        assert_eq!(nqn_uuid(&h.hostnqn).map(|u| *u.as_bytes()), Some(h.hostid));
        let h2 = HostIdentity::generate();
        assert_ne!(h.hostid, h2.hostid, "never share an identity");
        // From a host id alone, the NQN is built from it.
        let h = HostIdentity::combine(None, Some(parse_hostid(U).unwrap()));
        assert_eq!(h.hostnqn.as_str(), format!("{UUID_NQN_PREFIX}{U}"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn debian_pair_with_different_uuids_is_accepted_quietly() {
        // Debian's nvme-cli package: a hostnqn UUID and an unrelated hostid.
        let other = "5dd56452-36d6-4943-ab86-8b7cfce16ddc";
        let d = dir();
        let (nf, idf) = (d.join("hostnqn"), d.join("hostid"));
        std::fs::write(&nf, format!("{UUID_NQN_PREFIX}{U}\n")).unwrap();
        std::fs::write(&idf, format!("{other}\n")).unwrap();
        let load = || {
            let h = HostIdentity::load_from(&nf, &idf, None, None).unwrap();
            assert_eq!(
                h.hostid_string(),
                other,
                "the host id file is used as it is"
            );
            assert_eq!(h.hostnqn.as_str(), format!("{UUID_NQN_PREFIX}{U}"));
            assert_eq!(h.source, IdentitySource::Configured);
        };
        assert_eq!(
            logged_at(tracing::Level::WARN, load),
            "",
            "silent by default"
        );
        let v = logged_at(tracing::Level::INFO, load);
        assert!(v.contains("host NQN's UUID and host id differ"), "{v}");
        assert_eq!(v.lines().count(), 1, "said once: {v}");
        // A matching pair says nothing even with -v.
        std::fs::write(&idf, U).unwrap();
        assert_eq!(
            logged_at(tracing::Level::TRACE, load_matching(&nf, &idf)),
            ""
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    fn load_matching<'a>(nf: &'a Path, idf: &'a Path) -> impl FnOnce() + 'a {
        move || {
            let h = HostIdentity::load_from(nf, idf, None, None).unwrap();
            assert_eq!(h.hostid_string(), U);
        }
    }

    #[test]
    fn parsing() {
        assert!(parse_hostid("3f6a2c1e8a4b4e4e9b1a0123456789ab").is_ok());
        assert!(parse_hostid("").is_err());
        assert!(parse_hostnqn("nqn.x").is_ok());
        assert!(parse_hostnqn("iqn.x").is_err());
        assert!(parse_hostnqn(&format!("nqn.{}", "a".repeat(300))).is_err());
    }
}
