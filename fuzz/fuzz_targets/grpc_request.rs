//! Fuzz target: `sluice::harness::grpc_request` (see src/harness.rs for what it feeds and checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::harness::grpc_request(data));
