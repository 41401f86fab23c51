//! nvmf-common: what the NVMe-oF target and host share.
//!
//! - [`wire`]: zero-copy views and value types for every structure on the wire.
//! - [`types`]: newtypes for NQN, controller id, queue id, command id, namespace id.
//! - [`transport`]: sans-IO transport cores (the NVMe/TCP PDU framer).
//! - [`keyfile`]: key files read with a permission check.

pub mod auth;
#[cfg(feature = "cli-docs")]
pub mod cli_docs;
pub mod cpus;
pub mod keyfile;
pub mod tls;
pub mod transport;
pub mod types;
pub mod wire;
