//! Capsule transports.
