//! cargo-fuzz target: [`harness::send_queue`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::send_queue::run(data));
