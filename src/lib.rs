//! sluice: an Envoy-compatible external rate-limit server.
//!
//! The library is the server and its parts; the binary (`src/main.rs`) adds only the command
//! line and the `simulate` and `bench` tools. `docs/architecture.md` is the map: the parts, the
//! path of a call, and the arrows that must never exist.
//!
//! The public API, bottom up (dependencies point one way):
//! - [`clock`]: time as a value (`Clock`, `SystemClock`, `ManualClock`) and the duration grammar.
//! - [`algorithm`]: pure counting algorithms `decide(limit, state, now, cost)`.
//! - [`store`]: atomic check-and-commit of all counters of a call (`MemoryStore`, `RedisStore`).
//! - [`rules`]: YAML rule files compiled into an immutable `RuleSet`; descriptor matching.
//! - [`metrics`]: every metric name, in one place, and the registry the limiter records into.
//! - [`region`]: one limit across regions: each region's portion of `scope: global` limits,
//!   claimed from a global store off the request path.
//! - [`limiter`]: request → matched limits → store → `Decision`.
//! - [`rlqs`]: Envoy's quota service (RLQS) without the wire: each stream's share of each
//!   bucket, kept by a book on a thread of its own; `rlqs::Rlqs` is its one door.
//! - [`proto`]: the generated Envoy RLS v3 types (client and server).
//! - [`insight`]: live figures for the operator page (most-limited keys, decision rates).
//! - [`telemetry`]: OpenTelemetry spans of calls, exported over OTLP (off by default).
//! - [`app`]: the whole server, in-process: `Settings` → `start` → `Running`.
//!
//! Inside, not API: `service` (gRPC ↔ limiter), `http` (the HTTP endpoints), `ui` (the operator
//! page `/ui`), `reload` (the rules in force and rule-file hot reload), `xds` (rules from an xDS
//! control plane), `tls` (gRPC TLS, certificates reloaded), `watch` (the one file watcher),
//! `files` (reading only regular files, bounded, never blocking on a FIFO), `log_text` (text
//! from outside escaped and bounded for a log line).
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
pub mod clock;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod harness;
pub mod huge_pages;
pub mod insight;
pub mod limiter;
pub mod metrics;
pub mod proto;
pub mod region;
pub mod rlqs;
pub mod rules;
pub mod store;
pub mod telemetry;

mod admin;
mod files;
mod http;
mod keepalive;
mod log_text;
mod priority;
mod reload;
mod service;
mod statsd;
mod tls;
mod ui;
mod watch;
mod xds;
