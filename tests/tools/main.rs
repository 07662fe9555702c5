//! The binary's commands and the project's artefacts against real tools: `check`, `serve`,
//! `bench`, `simulate`, the examples, the Helm chart, Prometheus, a headless browser, Envoy, the
//! soak, and the fuzz corpus replayed on stable Rust.

#[path = "../common/mod.rs"]
mod common;

mod bench;
mod binary;
mod browser;
mod envoy;
mod examples;
// The corpus replay is a file of its own so that a cargo feature can gate it alone.
mod fuzz_corpus;
mod helm;
mod prometheus;
mod simulate;
mod soak;
