//! Regions on one machine: each region its own Redis and sluice replica(s) (in this process, on
//! the system clock), one global Redis, every link between a region and the global store
//! through a relay that adds a delay each way and can be cut. Load per region at a rate that
//! can move, every answer logged with its time, admissions counted per window across regions.

mod envoy;
mod operable;
mod targets;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice::app::{self, RegionSettings, Running, Settings, StoreSettings};
use sluice::clock::SystemClock;
use sluice::region::RegionOptions;
use sluice::store::RedisSettings;
use tokio_util::sync::CancellationToken;

use crate::common::redis::RedisServer;
use crate::common::relay::Relay;
use crate::common::{Client, OK, connect, header, http, one_descriptor};

/// A global token bucket of 100 a second, burst 100 (`tenant`), and the same limit in each
/// region on its own (`local`); both refuse when the region's Redis cannot answer, so no answer
/// by `failure_mode` is ever an admission.
pub const RULES: &str = "\
domain: global
descriptors:
  - key: tenant
    failure_mode: deny
    rate_limit: { unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 100, scope: global }
  - key: local
    failure_mode: deny
    rate_limit: { unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 100 }
";

/// The limit's rate and burst.
pub const RATE: f64 = 100.0;
/// See [`RATE`].
pub const BURST: f64 = 100.0;

/// Each way between a region and the global store.
pub const ONE_WAY: Duration = Duration::from_millis(75);

/// One region: its Redis, its relay to the global store, its replicas.
pub struct Region {
    _redis: RedisServer,
    /// The link to the global store.
    pub relay: Relay,
    /// Its replicas.
    pub replicas: Vec<Running>,
    _rules: tempfile::TempDir,
}

impl Region {
    /// The gRPC addresses of its replicas.
    pub fn grpc(&self) -> Vec<SocketAddr> {
        self.replicas.iter().map(|r| r.grpc_addr).collect()
    }

    /// `/healthcheck` of its first replica: status and body.
    pub async fn health(&self) -> (u16, String) {
        http(self.replicas[0].http_addr, "GET", "/healthcheck", "").await
    }

    /// `/metrics` of its first replica.
    pub async fn metrics(&self) -> String {
        http(self.replicas[0].http_addr, "GET", "/metrics", "")
            .await
            .1
    }
}

/// Regions sharing one global Redis.
pub struct Deployment {
    _global: RedisServer,
    /// The regions, in order.
    pub regions: Vec<Region>,
}

impl Deployment {
    /// Regions named `names`, with `replicas[i]` replicas each, on `rules`.
    pub async fn start(names: &[&str], replicas: &[usize], rules: &str) -> Self {
        let global = RedisServer::start();
        let global_addr: SocketAddr = format!("127.0.0.1:{}", global.port).parse().unwrap();
        let mut regions = Vec::new();
        for (name, count) in names.iter().zip(replicas) {
            let redis = RedisServer::start();
            let relay = Relay::start(global_addr, ONE_WAY, ONE_WAY).await;
            let dir = crate::common::rules_dir(rules);
            let mut servers = Vec::new();
            for _ in 0..*count {
                servers.push(serve(dir.path(), name, &redis.url(), relay.addr).await);
            }
            regions.push(Region {
                _redis: redis,
                relay,
                replicas: servers,
                _rules: dir,
            });
        }
        Self {
            _global: global,
            regions,
        }
    }
}

/// A replica of region `name` counting in the Redis at `redis_url`, sharing global limits
/// through the global store at `global`.
async fn serve(
    rules: &std::path::Path,
    name: &str,
    redis_url: &str,
    global: SocketAddr,
) -> Running {
    let global = RedisSettings {
        timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        ..RedisSettings::new(format!("redis://{global}"))
    };
    let store = RedisSettings {
        // Generous on a busy test machine: a call answered by failure_mode is not counted.
        timeout: Duration::from_millis(500),
        ..RedisSettings::new(redis_url)
    };
    let settings = Settings {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        store: StoreSettings::Redis(Box::new(store)),
        region: Some(RegionSettings {
            options: RegionOptions::new(name),
            global,
        }),
        shutdown_grace: Duration::from_secs(1),
        watch_rules: false,
        ..Settings::new(vec![rules.to_path_buf()])
    };
    app::start(settings, Arc::new(SystemClock))
        .await
        .expect("a region's replica starts")
}

/// One answer: when (seconds since the load began), whether admitted, whether degraded, and
/// how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// Seconds since the load's epoch.
    pub at: f64,
    /// OK.
    pub admitted: bool,
    /// Answered by `failure_mode` (the region's own Redis did not answer).
    pub degraded: bool,
    /// The call's round trip.
    pub took: Duration,
}

/// Calls at a rate that can change, to the replicas of one region (in turn), on one
/// descriptor; every answer logged.
pub struct Load {
    rate: Arc<AtomicU64>,
    /// Every answer so far.
    pub log: Arc<Mutex<Vec<Answer>>>,
    stop: CancellationToken,
}

impl Load {
    /// Calls `entry` (key, value) at `rate` a second to `replicas`, from `epoch` on.
    pub async fn start(
        replicas: &[SocketAddr],
        entry: (&str, &str),
        rate: f64,
        epoch: Instant,
    ) -> Self {
        let mut clients: Vec<Client> = Vec::new();
        for addr in replicas {
            clients.push(connect(*addr).await);
        }
        let load = Self {
            rate: Arc::new(AtomicU64::new(rate.to_bits())),
            log: Arc::default(),
            stop: CancellationToken::new(),
        };
        let (rate, log, stop) = (load.rate.clone(), load.log.clone(), load.stop.clone());
        let request = one_descriptor("global", &[entry]);
        tokio::spawn(async move {
            let mut next = tokio::time::Instant::now();
            let mut turn = 0usize;
            loop {
                let per_second = f64::from_bits(rate.load(Ordering::Relaxed)).max(0.1);
                next += Duration::from_secs_f64(1.0 / per_second);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(next) => {}
                }
                let mut client = clients[turn % clients.len()].clone();
                turn += 1;
                let (log, request) = (log.clone(), request.clone());
                tokio::spawn(async move {
                    let sent = Instant::now();
                    let answer = client.should_rate_limit(request).await;
                    let took = sent.elapsed();
                    // A failed call (none is expected) counts as neither admitted nor degraded.
                    let answer = answer.map(|a| a.into_inner()).ok();
                    log.lock().push(Answer {
                        at: sent.duration_since(epoch).as_secs_f64(),
                        admitted: answer.as_ref().is_some_and(|a| a.overall_code == OK),
                        degraded: answer
                            .as_ref()
                            .is_none_or(|a| header(a, "x-ratelimit-mode") == Some("degraded")),
                        took,
                    });
                });
            }
        });
        load
    }

    /// Moves the rate to `rate` a second.
    pub fn set_rate(&self, rate: f64) {
        self.rate.store(rate.to_bits(), Ordering::Relaxed);
    }

    /// Admissions in `[from, to)` seconds.
    pub fn admitted(&self, from: f64, to: f64) -> u64 {
        (self.log.lock().iter())
            .filter(|a| a.admitted && a.at >= from && a.at < to)
            .count() as u64
    }

    /// Answers by `failure_mode` so far.
    pub fn degraded(&self) -> usize {
        self.log.lock().iter().filter(|a| a.degraded).count()
    }

    /// Stops calling (calls in flight still land in the log).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Admissions of all `loads` in `[from, to)` seconds.
pub fn admitted(loads: &[&Load], from: f64, to: f64) -> u64 {
    loads.iter().map(|l| l.admitted(from, to)).sum()
}

/// The value of the first series of `name` with `labels` in a Prometheus text exposition.
pub fn metric(exposition: &str, name: &str, labels: &str) -> Option<f64> {
    exposition
        .lines()
        .find(|l| l.starts_with(name) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits `seconds`.
pub async fn pause(seconds: f64) {
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
}
