//! cargo-fuzz target: [`harness::dispatcher`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::dispatcher::run(data));
