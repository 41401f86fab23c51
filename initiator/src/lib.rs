//! nvmf-initiator: an NVMe-over-Fabrics host.
//!
//! The library half of the crate (the CLI in `main.rs` is a thin user of it):
//! - [`transport`]: host-side capsule transports ([`transport::Fabric`],
//!   [`transport::HostQueue`]).
//! - [`queue`]: command ids, tags, timeouts and completion matching on one queue.
//! - [`command`]: SQE builders for the fabrics, admin and NVM commands the host sends.
//! - [`controller`]: controller bring-up (Connect, CC.EN, Identify, I/O queues),
//!   keep-alive and shutdown.
//! - [`namespace`]: reads, writes and friends on one namespace over one queue.
//! - [`discovery`]: the discovery log page.
//! - [`autoconnect`]: `connect-all`: discovery.conf, the discovery walk with referrals,
//!   and every subsystem found connected through all its paths.
//! - [`hostnqn`]: the host's NQN and host identifier.
//! - [`reconnect`]: reconnect with back-off after a lost connection (ctrl-loss-tmo).
//! - [`requeue`]: new I/O queues for the threads of `perf` and `map` after a reconnect.
//! - [`perf`]: the fio-like load generator.
//! - [`map`]: a remote namespace exported locally (an NBD server).
//! - [`loopback`]: the in-process target used by `-t loopback`.

pub mod autoconnect;
pub mod command;
pub mod controller;
pub mod discovery;
pub mod error;
pub mod hostnqn;
pub mod ioqueue;
#[cfg(feature = "loopback")]
pub mod loopback;
pub mod map;
pub mod mapd;
pub mod multipath;
pub mod namespace;
pub mod perf;
pub mod queue;
pub mod reconnect;
pub mod requeue;
pub mod transport;

#[cfg(test)]
pub(crate) mod testing;

pub use controller::{ConnectOptions, Controller, NamespaceInfo};
pub use error::Error;
pub use queue::{Completion, Queue};
