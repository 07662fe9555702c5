//! Rules over xDS, proven against a control plane written here (`control_plane.rs`, with its own
//! messages in `wire.rs`) that behaves as Envoy Gateway's: go-control-plane snapshot-cache
//! semantics, optional mutual TLS with certificates shaped like Envoy Gateway's (`certs.rs`).
//!
//! `protocol.rs` runs sluice in-process (ACK/NACK, updates, start-up, restarts, TLS);
//! `process.rs` runs the real binary (the CPU cost of a NACK loop); `envoy_gateway.rs` runs the
//! binary started as Envoy Gateway starts it, behind a real Envoy; `ai_gateway.rs` serves Envoy AI
//! Gateway's QuotaPolicy resources to a real Envoy charging tokens.

#[path = "../common/mod.rs"]
mod common;

mod ai_gateway;
mod certs;
mod control_plane;
mod envoy_gateway;
mod process;
mod protocol;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use control_plane::ControlPlane;
use sluice::app::{Backoff, XdsSettings};
use sluice::store::MemoryStore;

/// Envoy Gateway's node id for its rate-limit Deployment.
const NODE: &str = "envoy-ratelimit";
/// How long an outcome may take on a slow, busy machine.
const DEADLINE: Duration = Duration::from_secs(20);

/// xDS settings for `cp` with a short backoff (reconnects in tests should not wait seconds).
fn settings(cp: &ControlPlane) -> XdsSettings {
    XdsSettings {
        node_id: NODE.into(),
        backoff: Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            ..Backoff::default()
        },
        ..XdsSettings::new(cp.addr.to_string())
    }
}

/// sluice in-process (manual clock, memory store), its rules from xDS as `xds` says.
async fn start(xds: XdsSettings) -> TestServer {
    TestServer::start_adjusted("", Arc::new(MemoryStore::new()), |s| s.xds = Some(xds)).await
}
