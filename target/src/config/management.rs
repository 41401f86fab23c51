//! `management:`: the remote management API (gRPC over mutual TLS; off unless
//! configured).
//!
//! ```yaml
//! management:
//!   listen: 0.0.0.0:5500          # ADDR:PORT; port 0 picks a free one (tests)
//!   ca: /etc/nvmf-target/ca.pem   # client certificates must be signed by this CA
//!   cert: /etc/nvmf-target/server.pem
//!   key: /etc/nvmf-target/server.key
//!   admins: [orchestrator]        # subject CN (or a DNS subjectAltName): every call
//!   readers: [monitoring]         # queries only (status, export, stats, events)
//! ```
//!
//! `listen`, `ca`, `cert` and `key` take effect at start; `admins` and `readers` on
//! every reload too.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The port ceph-nvmeof's gateway serves its gRPC API on; only examples and docs use
/// it, the target never defaults to it.
pub const MANAGEMENT_EXAMPLE_PORT: u16 = 5500;

/// The management API (`management:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagementConfig {
    /// `ADDR:PORT` the API listens on; IPv6 as `[::1]:PORT`.
    pub listen: String,
    /// PEM file of the CA(s) whose client certificates are accepted.
    pub ca: PathBuf,
    /// PEM file of the server's certificate chain.
    pub cert: PathBuf,
    /// PEM file of the server's private key.
    pub key: PathBuf,
    /// Client certificate subjects (CN or DNS subjectAltName) allowed every call.
    #[serde(default)]
    pub admins: Vec<String>,
    /// Client certificate subjects allowed the queries only.
    #[serde(default)]
    pub readers: Vec<String>,
}

/// What a client certificate may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ManagementRole {
    Reader,
    Admin,
}

impl ManagementConfig {
    /// The listen address, when it is a valid `ADDR:PORT`.
    pub fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        self.listen.parse().ok()
    }

    /// The strongest role any of `names` (a certificate's subject names) has.
    pub fn role_of<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Option<ManagementRole> {
        names
            .into_iter()
            .filter_map(|n| {
                if self.admins.iter().any(|a| a == n) {
                    Some(ManagementRole::Admin)
                } else if self.readers.iter().any(|r| r == n) {
                    Some(ManagementRole::Reader)
                } else {
                    None
                }
            })
            .max()
    }
}
