//! Passthru subsystems: export a local NVMe controller (`/dev/nvmeX`) and its
//! namespaces as they are, as Linux nvmet's `passthru/device_path` does.
//!
//! One file per role:
//! - `device`: the [`NvmeController`] trait a passthru subsystem drives (admin
//!   commands, namespace enumeration, each namespace's generic character device for
//!   the I/O path), its buffers, completions and errors;
//! - `ioctl`: the real controller, through the NVMe admin ioctl (the module's only
//!   `unsafe`), run on the control path, never on a poll group;
//! - `naming`: from `/dev/nvmeX` to the `/dev/ngXnY` nodes of its namespaces;
//! - `fake`: an in-memory controller for tests, which records what reached it;
//! - `identify`: the device's Identify data with the fabric fields ours;
//! - `policy`: the admin allowed list (emulated, passed, refused);
//! - `logs`: the supported and effects log pages rewritten to match the list;
//! - `exec`: one admin command from route to completion;
//! - `worker`: the control-path thread that runs a device's admin commands, so a
//!   poll group hands one over and never waits.
//!
//! Not here yet: I/O commands (io_uring `URING_CMD` on `/dev/ngXnY`) and the wiring
//! of a subsystem's controllers to [`worker::AdminWorker`]; a config with `passthru:`
//! is parsed and validated, and refused at start by name.

pub mod device;
pub mod exec;
pub mod fake;
pub mod identify;
pub mod ioctl;
pub mod logs;
pub mod naming;
pub mod policy;
pub mod worker;

#[cfg(test)]
mod tests;

pub use device::{DataBuf, DeviceCompletion, DeviceError, NvmeController};
pub use exec::{execute_admin, AdminCtx, AdminOutcome};
pub use identify::FabricFields;
pub use policy::{route_admin, AdminRoute};
