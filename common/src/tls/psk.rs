//! TLS pre-shared keys for NVMe/TCP, as the NVMe/TCP transport specification (TP 8011,
//! 3.6.1.3) and libnvme define them:
//!
//! - the **configured PSK** in the interchange format `NVMeTLSkey-1:HH:<base64>:`
//!   (HH: 01 = SHA-256 with a 32-byte key, 02 = SHA-384 with a 48-byte key, 00 = no
//!   transformation; the base64 text carries the key and its CRC-32, little-endian);
//! - the **retained PSK** = HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN",
//!   NQNh, L) (the configured PSK itself with HH 00);
//! - the **PSK identity**: `NVMe0RHH <NQNh> <NQNc>` (version 0) or
//!   `NVMe1RHH <NQNh> <NQNc> <digest>` (version 1, the digest being
//!   base64(HMAC(retained, NQNh || " " || NQNc || " " || "NVMe-over-Fabrics")));
//! - the **TLS PSK** = HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk",
//!   context, L), the context being the identity (version 0) or `"HH <digest>"`
//!   (version 1).
//!
//! HH in the identity names the cipher suite's hash: 01 TLS_AES_128_GCM_SHA256,
//! 02 TLS_AES_256_GCM_SHA384. Keys are zeroed when dropped and never printed.
//!
//! Two encodings of the HKDF info exist in the field ([`Derivation`]): the one the
//! specification describes (TLS 1.3's HkdfLabel: big-endian length, length-prefixed
//! label and context), and the one libnvme up to 1.13 / nvme-cli up to 2.13 use
//! (little-endian length, label and context without length bytes), which is what
//! keys inserted by today's Linux tools were derived with. Newer libnvme keeps the
//! latter as its "compat" mode.

#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use crate::auth::HashId;

/// The prefix of the interchange format.
pub const PSK_PREFIX: &str = "NVMeTLSkey-1:";
/// What the identity digest HMAC covers after the NQNs.
const DIGEST_SUFFIX: &[u8] = b"NVMe-over-Fabrics";
/// The HKDF-Expand-Label prefix of TLS 1.3 (RFC 8446 7.1).
const TLS13_LABEL_PREFIX: &str = "tls13 ";
const CRC_LEN: usize = 4;

/// The hash of a PSK's cipher suite (and of its retained-key transformation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PskHash {
    /// TLS_AES_128_GCM_SHA256, 32-byte keys.
    Sha256 = 1,
    /// TLS_AES_256_GCM_SHA384, 48-byte keys.
    Sha384 = 2,
}

impl PskHash {
    fn key_len(self) -> usize {
        match self {
            PskHash::Sha256 => 32,
            PskHash::Sha384 => 48,
        }
    }

    fn id(self) -> u8 {
        self as u8
    }

    fn for_key_len(len: usize) -> Option<PskHash> {
        match len {
            32 => Some(PskHash::Sha256),
            48 => Some(PskHash::Sha384),
            _ => None,
        }
    }

    fn hmac(self) -> HashId {
        match self {
            PskHash::Sha256 => HashId::Sha256,
            PskHash::Sha384 => HashId::Sha384,
        }
    }
}

/// Why a configured PSK was refused. Never contains the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    #[error("not an NVMe TLS PSK: it must start with \"NVMeTLSkey-1:\"")]
    Prefix,
    #[error("hash \"{0}\" is not 00, 01 or 02")]
    Hash(String),
    #[error("the key is not valid base64")]
    Base64,
    #[error("the key holds {0} bytes; it must hold 32 or 48 and a CRC-32 (and match its hash)")]
    Length(usize),
    #[error("the key's CRC-32 does not match (mistyped or truncated key)")]
    Crc,
}

/// How the HKDF info of the two derivations is encoded (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Derivation {
    /// libnvme <= 1.13, nvme-cli <= 2.13 (and newer libnvme's compat mode).
    #[default]
    Libnvme,
    /// TP 8011 / RFC 8446 HkdfLabel.
    Spec,
}

/// Identity version: 0 (`NVMe0R..`) or 1 (`NVMe1R..` with the PSK digest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityVersion {
    V0,
    V1,
}

/// A configured PSK.
#[derive(Clone)]
pub struct ConfiguredPsk {
    /// The retained-key transformation (None: used as it is).
    transform: Option<PskHash>,
    key: Zeroizing<Vec<u8>>,
}

/// The keys and identity one (host, subsystem) pair uses.
pub struct Derived {
    pub identity: String,
    pub cipher: PskHash,
    pub tls_psk: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for Derived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Derived")
            .field("identity", &self.identity)
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

impl ConfiguredPsk {
    /// The cipher suite hash this key implies.
    pub fn cipher(&self) -> PskHash {
        self.transform
            .or_else(|| PskHash::for_key_len(self.key.len()))
            .unwrap_or(PskHash::Sha256)
    }

    /// The retained PSK for `hostnqn`.
    pub fn retained(&self, hostnqn: &str, how: Derivation) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => expand_label(
                how,
                h,
                &self.key,
                "HostNQN",
                hostnqn.as_bytes(),
                self.key.len(),
            ),
        }
    }

    /// Identity and TLS PSK for `hostnqn` talking to `subnqn`.
    pub fn derive(
        &self,
        hostnqn: &str,
        subnqn: &str,
        version: IdentityVersion,
        how: Derivation,
    ) -> Derived {
        let retained = self.retained(hostnqn, how);
        let cipher = self.cipher();
        let (identity, context) = match version {
            IdentityVersion::V0 => {
                let id = format!("NVMe0R{:02} {hostnqn} {subnqn}", cipher.id());
                (id.clone(), id)
            }
            IdentityVersion::V1 => {
                let d = digest(cipher, &retained, hostnqn, subnqn);
                (
                    format!("NVMe1R{:02} {hostnqn} {subnqn} {d}", cipher.id()),
                    format!("{:02} {d}", cipher.id()),
                )
            }
        };
        let tls_psk = expand_label(
            how,
            cipher,
            &retained,
            "nvme-tls-psk",
            context.as_bytes(),
            self.key.len(),
        );
        Derived {
            identity,
            cipher,
            tls_psk,
        }
    }
}

/// base64(HMAC(retained, NQNh || " " || NQNc || " " || "NVMe-over-Fabrics")).
fn digest(cipher: PskHash, retained: &[u8], hostnqn: &str, subnqn: &str) -> String {
    let mac = cipher.hmac().hmac(
        retained,
        &[
            hostnqn.as_bytes(),
            b" ",
            subnqn.as_bytes(),
            b" ",
            DIGEST_SUFFIX,
        ],
    );
    base64::engine::general_purpose::STANDARD.encode(&*mac)
}

/// HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, len) (RFC 8446 7.1), with
/// the info encoded as `how` says.
fn expand_label(
    how: Derivation,
    h: PskHash,
    ikm: &[u8],
    label: &str,
    context: &[u8],
    len: usize,
) -> Zeroizing<Vec<u8>> {
    let full = format!("{TLS13_LABEL_PREFIX}{label}");
    let context = context.get(..context.len().min(255)).unwrap_or_default();
    let mut info = Vec::with_capacity(4 + full.len() + context.len());
    match how {
        Derivation::Spec => {
            info.extend_from_slice(&(len as u16).to_be_bytes());
            info.push(full.len() as u8);
            info.extend_from_slice(full.as_bytes());
            info.push(context.len() as u8);
        }
        Derivation::Libnvme => {
            info.extend_from_slice(&(len as u16).to_le_bytes());
            info.extend_from_slice(full.as_bytes());
        }
    }
    info.extend_from_slice(context);
    let mut out = Zeroizing::new(vec![0u8; len]);
    // Expansion only fails beyond 255 hash lengths; these keys are one.
    let ok = match h {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm)
            .expand(&info, &mut out)
            .is_ok(),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm)
            .expand(&info, &mut out)
            .is_ok(),
    };
    if !ok {
        out.iter_mut().for_each(|b| *b = 0);
    }
    out
}

impl FromStr for ConfiguredPsk {
    type Err = PskError;

    fn from_str(text: &str) -> Result<Self, PskError> {
        let rest = text
            .trim()
            .strip_prefix(PSK_PREFIX)
            .ok_or(PskError::Prefix)?;
        let (hh, b64) = rest.split_once(':').ok_or(PskError::Prefix)?;
        let transform = match hh {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            other => return Err(PskError::Hash(other.chars().take(8).collect())),
        };
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let raw = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| PskError::Base64)?,
        );
        let key_len = raw.len().saturating_sub(CRC_LEN);
        let fits = match transform {
            Some(h) => key_len == h.key_len(),
            None => PskHash::for_key_len(key_len).is_some(),
        };
        if !fits || raw.len() < CRC_LEN {
            return Err(PskError::Length(raw.len()));
        }
        let (key, crc) = raw.split_at(key_len);
        let crc: [u8; CRC_LEN] = crc.try_into().map_err(|_| PskError::Crc)?;
        if crc32fast::hash(key) != u32::from_le_bytes(crc) {
            return Err(PskError::Crc);
        }
        Ok(ConfiguredPsk {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }
}

impl fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PSK_PREFIX}{:02}:<{} bytes redacted>:",
            self.transform.map_or(0, PskHash::id),
            self.key.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by nvme-cli 2.13 / libnvme 1.13 (Debian trixie): `nvme gen-tls-key
    /// --secret=00..1f --hmac=1` (and 00..2f --hmac=2), then `nvme check-tls-key
    /// --keydata=K --hostnqn=H --subsysnqn=S --identity=0|1`.
    const FIXTURE: &str = include_str!("../../tests/fixtures/tls-psk-nvme-cli-2.13.txt");
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
    const SUB: &str = "nqn.2024-01.io.nvmf-rs:tls";

    #[test]
    fn identities_match_libnvme() {
        let lines: Vec<&str> = FIXTURE.lines().collect();
        for chunk in lines.chunks(3) {
            let [key, v0, v1] = chunk else {
                panic!("fixture")
            };
            let k: ConfiguredPsk = key.parse().unwrap();
            let how = Derivation::Libnvme;
            assert_eq!(k.derive(HOST, SUB, IdentityVersion::V0, how).identity, *v0);
            assert_eq!(k.derive(HOST, SUB, IdentityVersion::V1, how).identity, *v1);
            let d = k.derive(HOST, SUB, IdentityVersion::V1, how);
            assert_eq!(d.tls_psk.len(), k.cipher().key_len());
        }
    }

    /// The specification's encoding differs; checked against an independent
    /// implementation of RFC 5869 / RFC 8446 HkdfLabel (Python's hmac and hashlib).
    #[test]
    fn spec_derivation_of_the_retained_key() {
        let k: ConfiguredPsk = FIXTURE.lines().next().unwrap().parse().unwrap();
        let d = k.derive(HOST, SUB, IdentityVersion::V1, Derivation::Spec);
        assert!(
            d.identity
                .ends_with(" GFIwKHOhmRxcUpXgspvWBtJ9FgMkJQujKRVTnVxRsZc="),
            "{}",
            d.identity
        );
    }

    #[test]
    fn interchange_format_is_checked() {
        let good = FIXTURE.lines().next().unwrap();
        assert!(good.parse::<ConfiguredPsk>().is_ok());
        assert_eq!(
            "NVMeTLSkey-1:03:AAAA:".parse::<ConfiguredPsk>().err(),
            Some(PskError::Hash("03".into()))
        );
        let bad = good.replace("KfiaR", "KfiaS");
        assert!(matches!(
            bad.parse::<ConfiguredPsk>(),
            Err(PskError::Crc | PskError::Base64)
        ));
        // A 32-byte key labelled SHA-384 is refused.
        assert!(matches!(
            good.replace(":01:", ":02:").parse::<ConfiguredPsk>(),
            Err(PskError::Length(_))
        ));
        let k: ConfiguredPsk = good.parse().unwrap();
        assert!(!format!("{k:?}").contains("AAECAw"));
    }
}
