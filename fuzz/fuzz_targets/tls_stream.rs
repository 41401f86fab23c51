//! cargo-fuzz target: [`harness::tls_stream`].
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::tls_stream::run(data));
