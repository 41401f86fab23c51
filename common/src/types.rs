//! Typed identifiers used throughout the target and host.
//!
//! Each wraps the integer the spec uses on the wire, so a queue id can never be
//! passed where a namespace id is expected.

use std::fmt;

/// Maximum length of an NQN in bytes, excluding the NUL terminator (NVMe Base 4.5).
pub const NQN_MAX_LEN: usize = 223;

/// Shortest well-formed NQN: `nqn.` and a `yyyy-mm.` date and at least one more byte.
pub const NQN_MIN_LEN: usize = 11;

/// Prefix of the NQNs made from a UUID (NVMe Base 4.5 section 4.7).
pub const NQN_UUID_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";

/// The well-known NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// An NVMe Qualified Name: non-empty UTF-8, at most [`NQN_MAX_LEN`] bytes, no NUL.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nqn(String);

/// Why a string is not a valid NQN.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NqnError {
    #[error("NQN is empty")]
    Empty,
    #[error("NQN is {0} bytes, the limit is {NQN_MAX_LEN}")]
    TooLong(usize),
    #[error("NQN contains a NUL byte")]
    EmbeddedNul,
    #[error("NQN is not UTF-8")]
    NotUtf8,
    #[error("NQN field is not NUL-terminated")]
    NotTerminated,
}

impl Nqn {
    /// Validates and wraps `s`.
    pub fn new(s: impl Into<String>) -> Result<Self, NqnError> {
        let s = s.into();
        if s.is_empty() {
            return Err(NqnError::Empty);
        }
        if s.len() > NQN_MAX_LEN {
            return Err(NqnError::TooLong(s.len()));
        }
        if s.as_bytes().contains(&0) {
            return Err(NqnError::EmbeddedNul);
        }
        Ok(Nqn(s))
    }

    /// Parses a NUL-terminated NQN from a fixed-size wire field (256 bytes in Connect data).
    /// The terminator must lie within the field and within `NQN_MAX_LEN + 1` bytes.
    pub fn from_wire(field: &[u8]) -> Result<Self, NqnError> {
        let end = field
            .iter()
            .position(|&b| b == 0)
            .ok_or(NqnError::NotTerminated)?;
        if end > NQN_MAX_LEN {
            return Err(NqnError::TooLong(end));
        }
        let head = field.get(..end).ok_or(NqnError::NotTerminated)?;
        let s = std::str::from_utf8(head).map_err(|_| NqnError::NotUtf8)?;
        Nqn::new(s)
    }

    /// The empty Host NQN a Connect may carry (SPDK's host library sends one on machines
    /// without a DMI UUID). The Linux target and SPDK accept it where any host may
    /// connect; it matches no allow-list entry (configured NQNs are never empty).
    pub fn empty_host() -> Self {
        Nqn(String::new())
    }

    /// Whether this is the empty Host NQN.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The discovery subsystem's NQN.
    pub fn discovery() -> Self {
        Nqn(DISCOVERY_NQN.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_discovery(&self) -> bool {
        self.0 == DISCOVERY_NQN
    }

    /// Whether the NQN has the form NVMe Base 4.5 section 4.7 gives (as SPDK's
    /// `nvmf_nqn_is_valid` checks a subsystem's): `nqn.yyyy-mm.reverse.domain:anything`,
    /// or `nqn.2014-08.org.nvmexpress:uuid:` and a UUID, or the discovery NQN. The Linux
    /// target takes any string; names it takes and SPDK refuses are refused for the
    /// subsystems we create. Hosts' NQNs are not checked (peers send what they send).
    pub fn check_format(&self) -> Result<(), String> {
        let s = self.0.as_str();
        if s == DISCOVERY_NQN {
            return Ok(());
        }
        if s.len() < NQN_MIN_LEN {
            return Err(format!("{s:?} is shorter than {NQN_MIN_LEN} bytes"));
        }
        if let Some(u) = s.strip_prefix(NQN_UUID_PREFIX) {
            return uuid::Uuid::try_parse(u).map(|_| ()).map_err(|e| {
                format!("{s:?}: the part after {NQN_UUID_PREFIX:?} is not a UUID: {e}")
            });
        }
        let form = || format!("{s:?} is not of the form nqn.yyyy-mm.reverse.domain:name");
        let rest = s.strip_prefix("nqn.").ok_or_else(form)?;
        let date = rest.get(..8).ok_or_else(form)?.as_bytes();
        let date_ok = date.iter().enumerate().all(|(i, b)| match i {
            4 => *b == b'-',
            7 => *b == b'.',
            _ => b.is_ascii_digit(),
        });
        let (domain, _name) = rest
            .get(8..)
            .and_then(|r| r.split_once(':'))
            .ok_or_else(form)?;
        let label_ok = |l: &str| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !date_ok || domain.is_empty() || !domain.split('.').all(label_ok) {
            return Err(form());
        }
        Ok(())
    }

    /// Writes the NQN NUL-padded into a wire field; the field must be longer than the NQN.
    pub fn write_wire(&self, field: &mut [u8]) {
        field.fill(0);
        let n = self.0.len().min(field.len().saturating_sub(1));
        if let (Some(dst), Some(src)) = (field.get_mut(..n), self.0.as_bytes().get(..n)) {
            dst.copy_from_slice(src);
        }
    }
}

impl fmt::Display for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nqn({:?})", self.0)
    }
}

impl std::str::FromStr for Nqn {
    type Err = NqnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Nqn::new(s)
    }
}

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident($inner:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                $name(v)
            }
        }
    };
}

id_newtype!(
    /// Controller identifier (CNTLID), unique within a subsystem.
    Cntlid(u16)
);
id_newtype!(
    /// Queue identifier: 0 is the admin queue.
    Qid(u16)
);
id_newtype!(
    /// Command identifier (CID), unique among a queue's outstanding commands.
    Cid(u16)
);
id_newtype!(
    /// Namespace identifier: 1-based; 0 and 0xFFFFFFFF have special meanings.
    Nsid(u32)
);

impl Cntlid {
    /// Dynamic controller model: the host asks the target to allocate (Connect data CNTLID).
    pub const DYNAMIC: Cntlid = Cntlid(0xFFFF);
    /// Static model: any controller of the subsystem.
    pub const STATIC_ANY: Cntlid = Cntlid(0xFFFE);
    /// Smallest valid controller id.
    pub const MIN: Cntlid = Cntlid(1);
    /// Largest valid controller id (0xFFF0..=0xFFFF are reserved).
    pub const MAX: Cntlid = Cntlid(0xFFEF);
}

impl Qid {
    pub const ADMIN: Qid = Qid(0);
    pub fn is_admin(self) -> bool {
        self.0 == 0
    }
}

impl Nsid {
    /// Broadcast value: all namespaces.
    pub const BROADCAST: Nsid = Nsid(0xFFFF_FFFF);
    /// No namespace.
    pub const NONE: Nsid = Nsid(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nqn_limits() {
        assert_eq!(Nqn::new(""), Err(NqnError::Empty));
        assert_eq!(Nqn::new("a".repeat(224)), Err(NqnError::TooLong(224)));
        assert!(Nqn::new("a".repeat(223)).is_ok());
        assert_eq!(Nqn::new("a\0b"), Err(NqnError::EmbeddedNul));
    }

    #[test]
    fn nqn_wire_roundtrip() {
        let nqn = Nqn::new("nqn.2014-08.org.example:sub1").unwrap();
        let mut field = [0xAAu8; 256];
        nqn.write_wire(&mut field);
        assert_eq!(Nqn::from_wire(&field).unwrap(), nqn);
        assert_eq!(Nqn::from_wire(&[b'a'; 256]), Err(NqnError::NotTerminated));
        let mut long = [b'a'; 256];
        long[250] = 0;
        assert_eq!(Nqn::from_wire(&long), Err(NqnError::TooLong(250)));
        assert_eq!(Nqn::from_wire(&[0u8; 256]), Err(NqnError::Empty));
    }

    #[test]
    fn subsystem_nqn_format_is_spdks() {
        let ok = |s: &str| {
            Nqn::new(s)
                .map(|n| n.check_format().is_ok())
                .unwrap_or(false)
        };
        assert!(ok("nqn.2024-01.io.example:disk"));
        assert!(ok("nqn.2016-06.io.spdk:cnode1"));
        assert!(ok(
            "nqn.2014-08.org.nvmexpress:uuid:4e0b6d5e-2ab5-4b9e-a2b7-5f3d8f3f2a10"
        ));
        assert!(ok(DISCOVERY_NQN));
        for bad in [
            "not an nqn",
            "nqn.2024-1.io.example:x",
            "nqn.2024-01.io.example",
            "nqn.2024-01.-io.example:x",
            "nqn.2024-01.io..example:x",
            "nqn.2024-01.:x",
            "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
            "nqn.20",
        ] {
            assert!(!ok(bad), "{bad} accepted");
        }
    }
}
