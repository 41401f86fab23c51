//! nvmf-target: an NVMe-over-Fabrics target.

// Files shared with the integration tests by `#[path]` (tests/support) name the crate
// `nvmf_target` wherever they are compiled, including in this crate's unit tests.
extern crate self as nvmf_target;

pub mod ana;
pub mod auth;
pub mod backend;
pub mod config;
pub mod controller;
pub mod core;
pub mod durable;
pub mod events;
pub mod fastmap;
pub mod group;
pub mod limits;
pub mod live;
pub mod locks;
pub mod management;
pub mod metrics;
pub mod namespace;
pub mod params;
pub mod passthru;
pub mod qos;
pub mod rdma;
pub mod resv;
pub mod runtime;
pub mod subsystem;
pub mod subsystem_ctrls;
pub mod target;
pub mod tcp;
pub mod visibility;
