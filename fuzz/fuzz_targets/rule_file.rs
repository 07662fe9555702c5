//! Fuzz target: `sluice::harness::rule_file` (see src/harness.rs for what it feeds and checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::harness::rule_file(data));
