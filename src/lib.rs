//! sluice: an Envoy-compatible external rate-limit server.
//!
//! Layout (dependencies point one way, top to bottom):
//! - [`clock`]: time as a value (`Clock`, `SystemClock`, `ManualClock`).
//! - [`algorithm`]: pure counting algorithms `decide(limit, state, now, cost)`.
//! - [`store`]: atomic check-and-commit of all counters of a call (`MemoryStore`, `RedisStore`).
//! - [`rules`]: YAML rule files compiled into an immutable `RuleSet`; descriptor matching.
//! - [`limiter`]: request → matched limits → store → `Decision`.
//! - [`service`]: the tonic `RateLimitService` (proto ↔ domain mapping only).
//! - [`http`]: the HTTP endpoints.
//! - [`tls`]: optional TLS/mTLS on gRPC, certificates reloaded on change.
//! - [`app`]: the composition root: builds everything, serves, shuts down.
//! - [`cli`]: command-line subcommands and flags.
//! - [`metrics`]: every metric name, in one place; [`reload`]: hot reload of rule files.
//! - [`simulate`]: `sluice simulate`, traffic patterns through every algorithm.
//! - [`bench`]: `sluice bench`, a load generator for any RLS v3 server.
//!
//! From rules to a decision, with a manual clock:
//!
//! ```
//! use std::sync::Arc;
//! use arc_swap::ArcSwap;
//! use sluice::clock::{ManualClock, SECOND};
//! use sluice::limiter::{Code, Descriptor, Limiter, LimiterOptions, Request};
//! use sluice::metrics::Metrics;
//! use sluice::rules::{LoadOptions, load_sources};
//! use sluice::store::MemoryStore;
//!
//! let yaml = "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";
//! let rules = load_sources(&[("rules.yaml".into(), yaml.into())], &LoadOptions::default()).unwrap();
//! let clock = ManualClock::new(1_000 * SECOND);
//! let limiter = Limiter::new(
//!     Arc::new(ArcSwap::from_pointee(rules)),
//!     Arc::new(MemoryStore::new()),
//!     Arc::new(clock.clone()),
//!     LimiterOptions::default(),
//!     Arc::new(Metrics::new(0.8, 1_000)),
//! );
//! let call = Request {
//!     domain: "edge".into(),
//!     descriptors: vec![Descriptor { entries: vec![("api_key".into(), "k1".into())], ..Default::default() }],
//!     hits_addend: 1,
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let codes: Vec<Code> = (0..3).map(|_| runtime.block_on(limiter.check(&call)).unwrap().code).collect();
//! assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
//! ```

pub mod algorithm;
pub mod app;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod http;
pub mod limiter;
pub mod metrics;
pub mod proto;
pub mod reload;
pub mod rules;
pub mod service;
pub mod simulate;
pub mod store;
pub mod tls;
pub(crate) mod watch;
