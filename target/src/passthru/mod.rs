//! Passthru subsystems: export a local NVMe controller (`/dev/nvmeX`) and its
//! namespaces as they are, as Linux nvmet's `passthru/device_path` does.
//!
//! One file per role:
//! - `device`: the [`NvmeController`] trait a passthru subsystem drives (admin
//!   commands, namespace enumeration, each namespace's generic character device for
//!   the I/O path), its buffers, completions and errors;
//! - `ioctl`: the real controller, through the NVMe admin ioctl (an `unsafe` call),
//!   run on the control path, never on a poll group;
//! - `naming`: from `/dev/nvmeX` to the `/dev/ngXnY` nodes of its namespaces;
//! - `fake`: an in-memory controller for tests, which records what reached it;
//! - `identify`: the device's Identify data with the fabric fields ours;
//! - `policy`: the admin allowed list (emulated, passed, refused);
//! - `logs`: the supported and effects log pages rewritten to match the list;
//! - `exec`: one admin command from route to completion;
//! - `worker`: the control-path thread that runs a device's admin commands, so a
//!   poll group hands one over and never waits;
//! - `serve`: a served subsystem's device and worker, the poll groups' channel to the
//!   worker, and the rescan after commands that change namespaces;
//! - `namespace`: the device's namespaces as the subsystem's, each with a backend
//!   whose channels take the host's I/O commands as they are;
//! - `uring`: that channel on a real device, io_uring NVMe passthrough on
//!   `/dev/ngXnY` (the module's other `unsafe`: pushing an entry that names a buffer);
//! - `fake_io`: the fake's I/O side (blocks, zones, canned answers).
//!
//! The core routes a passthru controller's commands here (`core/passthru.rs`).

pub mod block_path;
pub mod device;
pub mod exec;
pub mod fake;
pub mod fake_io;
pub mod identify;
pub mod ioctl;
pub mod logs;
pub mod namespace;
pub mod naming;
pub mod policy;
pub mod serve;
pub mod uring;
pub mod worker;

#[cfg(test)]
mod tests;

pub use device::{DataBuf, DeviceCompletion, DeviceError, NvmeController};
pub use exec::{execute_admin, AdminCtx, AdminOutcome};
pub use identify::FabricFields;
pub use policy::{route_admin, AdminRoute};
