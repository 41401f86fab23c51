//! The PSK role a TLS connection plays in OpenSSL's callbacks ([`super::ffi`]): the
//! controller looks up the key of the identity a host offers ([`ControllerPsk`],
//! through [`PskLookup`]) and keeps who the host said it is ([`TlsPeer`]); the host
//! offers its derived identity and key ([`HostPsk`]). The handshake
//! ([`super::handshake`]) puts the role in the SSL's ex-data; the callbacks read it.
//! Below both, so neither imports the other for it.

#![forbid(unsafe_code)]

use std::sync::Arc;

use parking_lot::Mutex;

use super::psk::{ConfiguredPsk, Derivation, Derived, IdentityVersion, PskHash};

/// A PSK identity's fixed head: `NVMe`, the version digit, `R` (a retained PSK) and
/// two hash digits.
const IDENTITY_HEAD_LEN: usize = 8;
/// The longest identity accepted: two NQNs (223 bytes each), the head, the digest
/// (base64 of 48 bytes) and separators.
pub(super) const IDENTITY_MAX: usize = IDENTITY_HEAD_LEN + 2 * 223 + 64 + 3;

/// The controller's source of configured PSKs, asked at every handshake (so keys
/// changed by a reload apply to the next connection).
pub trait PskLookup: Send + Sync {
    /// The configured PSK of `hostnqn`, if that host has one.
    fn configured_psk(&self, hostnqn: &str) -> Option<ConfiguredPsk>;
}

/// Who the host said it is in the PSK identity the controller accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPeer {
    pub identity: String,
    pub hostnqn: String,
    pub subnqn: String,
    pub cipher: PskHash,
}

/// What a connection's PSK callback needs (stored in the SSL's ex-data).
pub(super) enum PskRole {
    Controller(ControllerPsk),
    Host(HostPsk),
}

pub(super) struct ControllerPsk {
    pub(super) lookup: Arc<dyn PskLookup>,
    /// The identity accepted, or why the offered one was not.
    pub(super) outcome: Mutex<Result<Option<TlsPeer>, String>>,
}

pub(super) struct HostPsk {
    pub(super) keys: Derived,
}

/// A parsed PSK identity (TP 8011 3.6.1.3).
pub(super) struct Identity<'a> {
    version: IdentityVersion,
    hostnqn: &'a str,
    subnqn: &'a str,
}

pub(super) fn parse_identity(id: &str) -> Result<Identity<'_>, String> {
    if id.len() > IDENTITY_MAX {
        return Err(format!("PSK identity of {} bytes is too long", id.len()));
    }
    let head = id.get(..IDENTITY_HEAD_LEN).unwrap_or_default();
    let version = match head.get(..6) {
        Some("NVMe0R") => IdentityVersion::V0,
        Some("NVMe1R") => IdentityVersion::V1,
        _ => {
            return Err(format!(
                "{id:?} is not a retained-PSK identity (NVMe0R/NVMe1R)"
            ))
        }
    };
    let rest = id
        .get(IDENTITY_HEAD_LEN..)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| format!("malformed PSK identity {id:?}"))?;
    let mut parts = rest.split(' ');
    let (Some(hostnqn), Some(subnqn)) = (parts.next(), parts.next()) else {
        return Err(format!(
            "PSK identity {id:?} does not name a host and a subsystem"
        ));
    };
    Ok(Identity {
        version,
        hostnqn,
        subnqn,
    })
}

impl ControllerPsk {
    /// The keys for the identity a host offered, or None (the reason is kept).
    pub(super) fn find(&self, offered: &[u8]) -> Option<Derived> {
        let r = self.resolve(offered);
        let keys = match r {
            Ok((peer, keys)) => {
                *self.outcome.lock() = Ok(Some(peer));
                Some(keys)
            }
            Err(why) => {
                *self.outcome.lock() = Err(why);
                None
            }
        };
        keys
    }

    fn resolve(&self, offered: &[u8]) -> Result<(TlsPeer, Derived), String> {
        let text = std::str::from_utf8(offered)
            .map_err(|_| "the PSK identity is not UTF-8".to_string())?;
        let id = parse_identity(text)?;
        let key = self
            .lookup
            .configured_psk(id.hostnqn)
            .ok_or_else(|| format!("host {} has no TLS key here", id.hostnqn))?;
        // Version 0 identities are the same in both encodings of the derivation; the
        // Linux tools' (libnvme) is the one keys in the field were made with. Version 1
        // identities carry a digest that tells the two apart.
        for how in [Derivation::Libnvme, Derivation::Spec] {
            let keys = key.derive(id.hostnqn, id.subnqn, id.version, how);
            if keys.identity == text {
                let peer = TlsPeer {
                    identity: text.to_owned(),
                    hostnqn: id.hostnqn.to_owned(),
                    subnqn: id.subnqn.to_owned(),
                    cipher: keys.cipher,
                };
                return Ok((peer, keys));
            }
        }
        Err(format!(
            "PSK identity {text:?} does not match host {}'s key (other hash or digest)",
            id.hostnqn
        ))
    }
}
