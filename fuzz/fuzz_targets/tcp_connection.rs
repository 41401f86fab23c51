//! cargo-fuzz target: [`harness::tcp_connection`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::tcp_connection::run(data));
