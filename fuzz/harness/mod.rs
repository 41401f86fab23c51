//! The bodies of the fuzz targets, shared by the cargo-fuzz binaries
//! (`fuzz/fuzz_targets/*.rs`) and by the ordinary test suite, which replays every
//! seed and every input a fuzzer ever crashed on (`tests/fuzz_regressions.rs`).
//! Each `run` takes arbitrary bytes and must never panic except on a broken
//! invariant, which is a bug.
#![allow(dead_code)]

pub mod auth;
pub mod connect;
pub mod dispatcher;
pub mod input;
pub mod rig;
pub mod send_queue;
pub mod tcp_connection;
pub mod tcp_framer;
pub mod tcp_pair;
pub mod tcp_transfer;
pub mod tls_stream;
pub mod wire;
