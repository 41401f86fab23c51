//! cargo-fuzz target: every wire parser ([`harness::wire`]).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::wire::run(data));
