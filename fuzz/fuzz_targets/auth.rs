//! cargo-fuzz target: DH-HMAC-CHAP messages and the controller's state machine
//! ([`harness::auth`]).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::auth::run(data));
