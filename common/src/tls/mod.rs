//! NVMe/TCP TLS 1.3 (TP 8011), below the PDU framer: the pre-shared keys and
//! identities ([`psk`]), the PSK-only handshake ([`handshake`]) and the protected
//! stream the framer reads and writes ([`socket`]), or the kernel's TLS once the keys
//! are handed over ([`ktls`]). OpenSSL 3 does the cryptography;
//! the callbacks it needs for external PSKs are the only FFI here (`ffi`).

mod ffi;
pub mod handshake;
pub mod ktls;
pub mod psk;
mod role;
pub mod socket;

pub use handshake::{
    accept, connect, host_keys, offload, starts_with_tls, PskLookup, Records, TlsError, TlsPeer,
};
pub use psk::{ConfiguredPsk, PskHash};
pub use socket::{Socket, TlsStream};
