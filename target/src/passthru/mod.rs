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
//! - `fake`: an in-memory controller for tests, which records what reached it.
//!
//! Not here yet: what a passthru controller does with the device's answers
//! (Identify fix-ups, the admin allowed list), I/O commands (io_uring `URING_CMD` on
//! `/dev/ngXnY`), and the wiring of a subsystem's controllers; a config with
//! `passthru:` is parsed and validated, and refused at start by name.

pub mod device;
pub mod fake;
pub mod ioctl;
pub mod naming;

pub use device::{DataBuf, DeviceCompletion, DeviceError, NvmeController};
