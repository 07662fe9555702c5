//! What one gRPC `ShouldRateLimit` call costs, in instructions, for callgrind: starts the whole
//! server in-process (embedded store, no persistence, tracing off unless `--otlp-endpoint`),
//! makes `CALLS` calls one after the other from a client in the same process, and exits.
//! Running it with two call counts and subtracting removes start-up from the figure:
//!
//! ```sh
//! cargo build --release --example call_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/call_cost 2000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/call_cost 12000
//! ```
//! (instructions per call = (Ir at 12000 − Ir at 2000) / 10000). BENCHMARKS.md has the figures.

use std::sync::Arc;

use sluice::app::{self, Settings};
use sluice::clock::SystemClock;
use sluice::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RULES: &str = "domain: cost\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000000 }\n";

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let dir = std::env::temp_dir().join(format!("sluice-call-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("rules.yaml"), RULES).expect("rules");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let settings = Settings {
            grpc_addr: "127.0.0.1:0".parse().expect("addr"),
            http_addr: "127.0.0.1:0".parse().expect("addr"),
            watch_rules: false,
            ..Settings::new(vec![dir.clone()])
        };
        let running = app::start(settings, Arc::new(SystemClock))
            .await
            .expect("start");
        let mut client = RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr))
            .await
            .expect("connect");
        for i in 0..calls {
            let request = RateLimitRequest {
                domain: "cost".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "user".into(),
                        value: format!("u{}", i % 100),
                    }],
                    limit: None,
                    hits_addend: None,
                }],
                hits_addend: 0,
            };
            client.should_rate_limit(request).await.expect("call");
        }
        running.stop().await.expect("stop");
    });
    let _ = std::fs::remove_dir_all(&dir);
}
