//! The binary's commands and the project's artefacts against real tools: `check`, `serve`,
//! `counters`, `bench`, `simulate`, the examples, the Helm chart, the container image,
//! Prometheus, a headless browser, Envoy, the soak, the fuzz corpus replayed on stable Rust, and
//! one version everywhere.

#[path = "../common/mod.rs"]
mod common;

mod admin_inputs;
mod bench;
mod binary;
mod browser;
mod counters;
mod envoy;
mod examples;
// The corpus replay is a file of its own so that a cargo feature can gate it alone.
#[cfg(feature = "fuzzing")]
mod fuzz_corpus;

/// Without the `fuzzing` feature the corpus replay is not compiled: say so as a skipped test,
/// so a plain `cargo test` does not pass over it in silence (scripts/test turns the feature on).
#[cfg(not(feature = "fuzzing"))]
#[test]
#[ignore = "needs --features fuzzing (the fuzz corpus replay; scripts/test runs it)"]
fn fuzz_corpus_needs_the_fuzzing_feature() {
    panic!("run with --features fuzzing to replay the fuzz corpus");
}
mod helm;
mod helm_spread;
mod image;
mod prometheus;
mod rlqs_fleet;
mod rlqs_isolation;
mod signals;
mod simulate;
mod soak;
mod statsd;
mod token_budgets;
mod version;
mod which_limiter;
