//! nvmf-target: an NVMe-over-Fabrics target.

pub mod backend;
