//! NVMe/TCP TLS 1.3 (TP 8011): the pre-shared keys and identities ([`psk`]). The
//! handshake and record layer sit below the PDU framer (issue 13).

#![forbid(unsafe_code)]

pub mod psk;
