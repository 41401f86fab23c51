//! DH-HMAC-CHAP secrets in the interchange format `DHHC-1:XX:<base64>:` that
//! `nvme gen-dhchap-key` writes and the Linux kernel reads (NVMe Base 2.x, 8.3.5.5.8):
//! XX names the key transformation (00: none, 01/02/03: HMAC with SHA-256/384/512),
//! the base64 text carries the secret (32, 48 or 64 bytes) followed by its CRC-32
//! (little-endian, zlib's polynomial).
//!
//! A [`DhchapSecret`] never prints its key (Debug and Display show the transformation
//! only), zeroes it when dropped, and compares in constant time.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use rand::RngCore;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::hash::HashId;

/// The prefix of the interchange format.
pub const DHHC_PREFIX: &str = "DHHC-1:";
/// The text every transformed key is keyed over after the NQN (8.3.5.5.8).
const TRANSFORM_SUFFIX: &[u8] = b"NVMe-over-Fabrics";
/// Length of the CRC-32 after the secret.
const CRC_LEN: usize = 4;
/// Secret lengths the format allows.
pub const SECRET_LENS: [usize; 3] = [32, 48, 64];

/// Why a secret was refused. Never contains the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("not a DH-HMAC-CHAP secret: it must start with \"DHHC-1:\"")]
    Prefix,
    #[error("key transformation \"{0}\" is not 00, 01, 02 or 03")]
    Transform(String),
    #[error("the key is not valid base64")]
    Base64,
    #[error("the key holds {0} bytes; it must hold 32, 48 or 64 and a CRC-32")]
    Length(usize),
    #[error("the key's CRC-32 does not match (mistyped or truncated key)")]
    Crc,
}

/// A DH-HMAC-CHAP secret: the key and how it is transformed before use.
#[derive(Clone)]
pub struct DhchapSecret {
    transform: Option<HashId>,
    key: Zeroizing<Vec<u8>>,
}

impl DhchapSecret {
    /// A new random secret of `len` bytes (32, 48 or 64) with `transform`.
    pub fn generate(transform: Option<HashId>, len: usize) -> Result<DhchapSecret, SecretError> {
        if !SECRET_LENS.contains(&len) {
            return Err(SecretError::Length(len));
        }
        let mut key = Zeroizing::new(vec![0u8; len]);
        rand::rngs::OsRng.fill_bytes(&mut key);
        Ok(DhchapSecret { transform, key })
    }

    /// A secret from its raw bytes (32, 48 or 64) and transformation.
    pub fn from_bytes(transform: Option<HashId>, key: &[u8]) -> Result<DhchapSecret, SecretError> {
        if !SECRET_LENS.contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(DhchapSecret {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// The raw key (tests compare it with vectors).
    #[cfg(test)]
    pub(super) fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The key transformation (None: the key is used as it is).
    pub fn transform(&self) -> Option<HashId> {
        self.transform
    }

    /// The key's length in bytes.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Whether the key is empty (never, for a parsed or generated secret).
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// The interchange text, `DHHC-1:XX:<base64>:`. Handle with care: it is the secret.
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(Vec::with_capacity(self.key.len() + CRC_LEN));
        raw.extend_from_slice(&self.key);
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let b64 = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*raw));
        Zeroizing::new(format!(
            "{DHHC_PREFIX}{:02}:{}:",
            self.transform.map_or(0, HashId::id),
            b64.as_str()
        ))
    }

    /// The key as the exchange uses it for `nqn` (the host NQN for the host's key, the
    /// subsystem NQN for the controller's): `HMAC(key, NQN || "NVMe-over-Fabrics")`
    /// with the transformation's hash, or the key itself.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => h.hmac(&self.key, &[nqn.as_bytes(), TRANSFORM_SUFFIX]),
        }
    }

    /// Constant-time equality of transformation and key.
    pub fn ct_eq(&self, other: &DhchapSecret) -> bool {
        self.transform == other.transform && bool::from(self.key.as_slice().ct_eq(&other.key))
    }
}

impl FromStr for DhchapSecret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, SecretError> {
        let s = text.trim();
        let rest = s.strip_prefix(DHHC_PREFIX).ok_or(SecretError::Prefix)?;
        let (xx, b64) = rest.split_once(':').ok_or(SecretError::Prefix)?;
        let transform = match xx {
            "00" => None,
            "01" => Some(HashId::Sha256),
            "02" => Some(HashId::Sha384),
            "03" => Some(HashId::Sha512),
            other => return Err(SecretError::Transform(other.chars().take(8).collect())),
        };
        // The trailing ':' is part of the format but optional on input, as in Linux.
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let raw = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| SecretError::Base64)?,
        );
        let key_len = raw.len().saturating_sub(CRC_LEN);
        if !SECRET_LENS.contains(&key_len) || raw.len() != key_len + CRC_LEN {
            return Err(SecretError::Length(raw.len()));
        }
        let (key, crc) = raw.split_at(key_len);
        let crc: [u8; CRC_LEN] = crc.try_into().map_err(|_| SecretError::Crc)?;
        if crc32fast::hash(key) != u32::from_le_bytes(crc) {
            return Err(SecretError::Crc);
        }
        Ok(DhchapSecret {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{DHHC_PREFIX}{:02}:<{} bytes redacted>:",
            self.transform.map_or(0, HashId::id),
            self.key.len()
        )
    }
}
