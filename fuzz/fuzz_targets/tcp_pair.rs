//! cargo-fuzz target: [`harness::tcp_pair`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::tcp_pair::run(data));
