//! Target configuration.
