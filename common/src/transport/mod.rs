//! Capsule transports.
pub mod tcp;
