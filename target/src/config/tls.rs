//! TLS on an NVMe/TCP port (nvmet's configfs `ports/N/addr_tsas` and `addr_treq`):
//!
//! ```yaml
//! ports:
//!   - { portid: 1, trtype: tcp, traddr: 0.0.0.0, trsvcid: 4420, tsas: tls1.3 }   # treq: required
//!   - { portid: 2, trtype: tcp, ..., tsas: tls1.3, treq: not required }        # TLS or plain
//! hosts:
//!   - nqn: nqn.2014-08.org.nvmexpress:uuid:...
//!     tls_key: "NVMeTLSkey-1:01:...:"        # or tls_key_file: /etc/nvmf/host1.psk
//! ```
//!
//! `tsas: tls1.3` makes the port a TLS port; its `treq` defaults to `required` (plain
//! connections are refused), `not required` accepts both. The PSK identity a host
//! offers names its NQN, whose `tls_key` (the configured PSK in the interchange format
//! that `nvme gen-tls-key` prints) the controller derives the TLS PSK from.

use serde::{Deserialize, Serialize};

/// The port's security type (TSAS SECTYPE of the discovery log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Tsas {
    #[default]
    #[serde(rename = "none")]
    None,
    #[serde(rename = "tls1.3")]
    Tls13,
}

/// Whether a secure channel is required (TREQ of the discovery log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Treq {
    #[serde(rename = "not specified")]
    NotSpecified,
    #[serde(rename = "required")]
    Required,
    #[serde(rename = "not required")]
    NotRequired,
}

/// What a port does with TLS, once `tsas` and `treq` are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PortTls {
    /// Plain NVMe/TCP only.
    #[default]
    Off,
    /// TLS only: a plain ICReq is refused.
    Required,
    /// TLS or plain, as the host starts.
    Optional,
}

impl PortTls {
    /// The combination of the two fields (validated elsewhere: `treq: required`
    /// without `tsas: tls1.3` is an error).
    pub fn of(tsas: Tsas, treq: Option<Treq>) -> PortTls {
        match (tsas, treq) {
            (Tsas::None, _) => PortTls::Off,
            (Tsas::Tls13, Some(Treq::NotRequired)) => PortTls::Optional,
            (Tsas::Tls13, _) => PortTls::Required,
        }
    }

    pub fn enabled(self) -> bool {
        self != PortTls::Off
    }
}
