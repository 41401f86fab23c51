//! The hash functions of DH-HMAC-CHAP (NVMe Base 2.x, 8.3.5.5.1): identifiers, digest
//! lengths, nvmet's names (`hmac(sha256)`), and the plain hash and HMAC the exchange
//! is built from. RustCrypto's `sha2` and `hmac` do the work.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A DH-HMAC-CHAP hash function identifier (HashID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum HashId {
    Sha256 = 0x01,
    Sha384 = 0x02,
    Sha512 = 0x03,
}

/// The longest digest of any [`HashId`] (SHA-512).
pub const MAX_DIGEST_LEN: usize = 64;

impl HashId {
    /// Every hash function, weakest first.
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    /// The function with wire identifier `id`.
    pub fn from_id(id: u8) -> Option<HashId> {
        HashId::ALL.into_iter().find(|h| h.id() == id)
    }

    /// The wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Digest length in bytes (HL).
    pub fn digest_len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    /// nvmet's configfs name (`dhchap_hash`): `hmac(sha256)`.
    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "hmac(sha256)",
            HashId::Sha384 => "hmac(sha384)",
            HashId::Sha512 => "hmac(sha512)",
        }
    }

    /// Parses nvmet's name (`hmac(sha384)`) or the bare one (`sha384`).
    pub fn from_name(s: &str) -> Option<HashId> {
        let bare = s
            .strip_prefix("hmac(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(s);
        HashId::ALL
            .into_iter()
            .find(|h| h.name().get(5..h.name().len() - 1) == Some(bare))
    }

    /// H(data).
    pub fn digest(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashId::Sha256 => Sha256::digest(data).to_vec(),
            HashId::Sha384 => Sha384::digest(data).to_vec(),
            HashId::Sha512 => Sha512::digest(data).to_vec(),
        })
    }

    /// HMAC(key, parts\[0\] || parts\[1\] || ...).
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            HashId::Sha256 => mac::<Hmac<Sha256>>(key, parts),
            HashId::Sha384 => mac::<Hmac<Sha384>>(key, parts),
            HashId::Sha512 => mac::<Hmac<Sha512>>(key, parts),
        })
    }
}

impl std::fmt::Display for HashId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length (longer ones are hashed), so this cannot fail; an
    // empty result would only ever compare unequal.
    let Ok(mut m) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}
