//! cargo-fuzz target: [`harness::connect`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::connect::run(data));
