//! Hosts, their in-band authentication (configfs `hosts/NQN/dhchap_*`) and their
//! TLS pre-shared keys (`tls_key`, see [`super::tls`]):
//!
//! ```yaml
//! hosts:
//!   - nqn: nqn.2014-08.org.nvmexpress:uuid:...
//!     dhchap_key: "DHHC-1:01:...:"          # or dhchap_key_file: /etc/nvmf/host1.key
//!     dhchap_ctrl_key_file: /etc/nvmf/ctrl.key  # optional: bidirectional
//!     dhchap_hash: [hmac(sha384), hmac(sha512)]  # allowed; default all three
//!     dhchap_dhgroup: ffdhe3072                 # one or a list; default all six
//!     tls_key: "NVMeTLSkey-1:01:...:"          # or tls_key_file: /etc/nvmf/host1.psk
//! ```
//!
//! A host with a key must authenticate (DH-HMAC-CHAP) to every subsystem that lists it
//! in `allowed_hosts`; as in nvmet, a subsystem that allows any host and the discovery
//! subsystem do not ask. Key files are read when the configuration is applied (start,
//! SIGHUP, `check-config`) and must not be readable by group or others.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::serde_util;
use nvmf_common::auth::{AuthPolicy, DhGroup, DhchapSecret, HashId};
use nvmf_common::keyfile::read_key_file;
use nvmf_common::tls::ConfiguredPsk;
use nvmf_common::types::Nqn;

/// A host entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(with = "serde_util::nqn")]
    pub nqn: Nqn,
    /// The host's secret, inline (`DHHC-1:XX:...:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<KeyText>,
    /// The host's secret, from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key_file: Option<PathBuf>,
    /// The controller's secret (bidirectional authentication), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<KeyText>,
    /// The controller's secret, from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key_file: Option<PathBuf>,
    /// Allowed hash functions (`hmac(sha256)`, ...): one name or a list; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    pub dhchap_hash: Vec<String>,
    /// Allowed DH groups (`null`, `ffdhe2048`, ...): one name or a list; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    pub dhchap_dhgroup: Vec<String>,
    /// The host's configured TLS PSK (`NVMeTLSkey-1:01:...:`), inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<KeyText>,
    /// The host's configured TLS PSK, from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
}

/// Secret text from the configuration: zeroed on drop, compared in constant time,
/// never shown by Debug.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyText(Zeroizing<String>);

impl KeyText {
    pub fn new(s: &str) -> KeyText {
        KeyText(Zeroizing::new(s.to_owned()))
    }
}

impl PartialEq for KeyText {
    fn eq(&self, o: &KeyText) -> bool {
        bool::from(self.0.as_bytes().ct_eq(o.0.as_bytes()))
    }
}

impl Eq for KeyText {}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl HostConfig {
    /// A host entry without authentication.
    pub fn new(nqn: Nqn) -> HostConfig {
        HostConfig {
            nqn,
            dhchap_key: None,
            dhchap_key_file: None,
            dhchap_ctrl_key: None,
            dhchap_ctrl_key_file: None,
            dhchap_hash: Vec::new(),
            dhchap_dhgroup: Vec::new(),
            tls_key: None,
            tls_key_file: None,
        }
    }

    /// Whether the host has a key (so it must authenticate).
    pub fn has_key(&self) -> bool {
        self.dhchap_key.is_some() || self.dhchap_key_file.is_some()
    }

    /// Reads the keys (and key files) into a policy; None when the host has no key.
    /// Errors name the field and never contain the secret.
    pub fn policy(&self) -> Result<Option<AuthPolicy>, (&'static str, String)> {
        let host_key = secret(&self.dhchap_key, &self.dhchap_key_file, "dhchap_key")?;
        let ctrl_key = secret(
            &self.dhchap_ctrl_key,
            &self.dhchap_ctrl_key_file,
            "dhchap_ctrl_key",
        )?;
        let hashes = names(&self.dhchap_hash, &HashId::ALL, HashId::from_name).map_err(|n| {
            (
                "dhchap_hash",
                format!("unknown hash function {n:?} (hmac(sha256), hmac(sha384) or hmac(sha512))"),
            )
        })?;
        let groups = names(&self.dhchap_dhgroup, &DhGroup::ALL, DhGroup::from_name)
            .map_err(|n| ("dhchap_dhgroup", format!("unknown DH group {n:?} (null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192)")))?;
        match host_key {
            Some(host_key) => Ok(Some(AuthPolicy {
                host_key,
                ctrl_key,
                hashes,
                groups,
            })),
            None if ctrl_key.is_some() => Err((
                "dhchap_ctrl_key",
                "a controller key needs a host key (dhchap_key) too".into(),
            )),
            None => Ok(None),
        }
    }
}

impl HostConfig {
    /// Reads the host's TLS PSK (inline or from its file); None when it has none.
    /// Errors name the field and never contain the key.
    pub fn tls_psk(&self) -> Result<Option<ConfiguredPsk>, (&'static str, String)> {
        key(&self.tls_key, &self.tls_key_file, "tls_key", "TLS PSK")
    }
}

fn names<T: Copy>(v: &[String], all: &[T], parse: fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    if v.is_empty() {
        return Ok(all.to_vec());
    }
    v.iter()
        .map(|n| parse(n).ok_or_else(|| n.clone()))
        .collect()
}

fn secret(
    inline: &Option<KeyText>,
    file: &Option<PathBuf>,
    field: &'static str,
) -> Result<Option<DhchapSecret>, (&'static str, String)> {
    key(inline, file, field, "DH-HMAC-CHAP secret")
}

/// A key given inline or in a file (`<field>` or `<field>_file`, not both), parsed.
fn key<K: std::str::FromStr>(
    inline: &Option<KeyText>,
    file: &Option<PathBuf>,
    field: &'static str,
    what: &str,
) -> Result<Option<K>, (&'static str, String)>
where
    K::Err: fmt::Display,
{
    let text = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err((field, format!("give {field} or {field}_file, not both")));
        }
        (Some(k), None) => Zeroizing::new(k.0.to_string()),
        (None, Some(p)) => read_key_file(p).map_err(|e| (field, e))?,
        (None, None) => return Ok(None),
    };
    text.parse::<K>()
        .map(Some)
        .map_err(|e| (field, format!("invalid {what}: {e}")))
}

mod one_or_many {
    use serde::{Deserialize, Deserializer, Serializer};

    /// YAML reads a bare `null` as no value: here it names the null DH group (nvmet's
    /// `dhchap_dhgroup` value), so it is kept as the text "null".
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Option<String>),
        Many(Vec<Option<String>>),
    }

    fn text(v: Option<String>) -> String {
        v.unwrap_or_else(|| "null".to_owned())
    }

    pub(super) fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![text(s)],
            OneOrMany::Many(v) => v.into_iter().map(text).collect(),
        })
    }
}
