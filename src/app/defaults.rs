//! Every default of `sluice serve`, written once: clap shows and applies them, [`Settings::new`]
//! uses them, and the store defaults are the stores' own.
//!
//! [`Settings::new`]: super::Settings::new

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// The rule path when none is given.
pub const CONFIG: &str = "config";
/// The gRPC listener (envoyproxy/ratelimit's port).
pub const GRPC_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8081));
/// The HTTP listener (envoyproxy/ratelimit's port).
pub const HTTP_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
/// Longest wait for in-flight calls at shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Serving on after health turns NOT_SERVING: none unless asked for.
pub const SHUTDOWN_DELAY: Duration = Duration::ZERO;
/// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`.
pub const NEAR_LIMIT_RATIO: f64 = 0.8;
/// Most per-rule metric series before new ones fold into an overflow series.
pub const METRICS_MAX_SERIES: usize = 10_000;
/// Where the embedded store persists.
pub const DATA_DIR: &str = "data";
/// Most counters the embedded store holds.
pub const MAX_COUNTERS: usize = crate::store::memory::DEFAULT_MAX_COUNTERS;
/// How often the embedded store writes changed counters.
pub const PERSIST_INTERVAL: Duration = crate::store::persist::DEFAULT_INTERVAL;
/// Prefix of every Redis key.
pub const REDIS_KEY_PREFIX: &str = crate::store::redis::DEFAULT_KEY_PREFIX;
/// Longest wait for Redis on a call.
pub const REDIS_TIMEOUT: Duration = crate::store::redis::DEFAULT_TIMEOUT;
/// Longest time opening a Redis connection may take.
pub const REDIS_CONNECT_TIMEOUT: Duration = crate::store::redis::DEFAULT_CONNECT_TIMEOUT;
/// Most random extra expiry of compat-layout Redis keys.
pub const REDIS_EXPIRATION_JITTER: Duration = crate::store::redis::DEFAULT_EXPIRATION_JITTER;
/// Multiplexed connections to a standalone Redis.
pub const REDIS_CONNECTIONS: usize = crate::store::redis::DEFAULT_CONNECTIONS;
/// Script runs outstanding per Redis connection before calls share runs.
pub const REDIS_RUNS_IN_FLIGHT: usize = crate::store::redis::DEFAULT_RUNS_IN_FLIGHT;
/// Most over-limit counters answered from memory.
pub const LOCAL_CACHE_SIZE: usize = crate::store::redis::DEFAULT_LOCAL_CACHE_SIZE;
/// Replicas sharing a Redis store.
pub const EXPECTED_REPLICAS: u64 = 1;
/// Each region's floor of a global limit, as a part of an equal split among the regions.
pub const REGION_FLOOR: f64 = crate::region::DEFAULT_FLOOR_SHARE;
/// How long a region may go unheard of before the others free its floor.
pub const REGION_MEMBER_TIMEOUT: Duration =
    Duration::from_nanos(crate::region::DEFAULT_MEMBER_TIMEOUT);
/// The xDS node id (envoyproxy/ratelimit's default).
pub const XDS_NODE_ID: &str = crate::xds::DEFAULT_NODE_ID;
/// The largest xDS response accepted, in bytes.
pub const XDS_MAX_MESSAGE_SIZE: usize = crate::xds::DEFAULT_MAX_MESSAGE_SIZE;
/// The first pause before reconnecting to the xDS control plane.
pub const XDS_BACKOFF_INITIAL: Duration = crate::xds::DEFAULT_BACKOFF_INITIAL;
/// The longest pause before reconnecting to the xDS control plane.
pub const XDS_BACKOFF_MAX: Duration = crate::xds::DEFAULT_BACKOFF_MAX;
/// How far below its nominal length a jittered reconnection pause may fall.
pub const XDS_BACKOFF_RANDOM_FACTOR: f64 = crate::xds::DEFAULT_BACKOFF_RANDOM_FACTOR;
/// gRPC connections are closed gracefully after about this long (envoyproxy/ratelimit's
/// `GRPC_MAX_CONNECTION_AGE`).
pub const GRPC_MAX_CONNECTION_AGE: Duration = Duration::from_secs(24 * 3_600);
/// In-flight calls of an aged connection may take this long (`GRPC_MAX_CONNECTION_AGE_GRACE`).
pub const GRPC_MAX_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(3_600);
/// The most gRPC connections open at once. Sized for a pod: a mesh's Envoys open one or a few
/// each (per worker thread), so thousands of sidecars fit, while a client that opens
/// connections without end cannot take every file descriptor and the memory their HTTP/2
/// state and buffers hold.
pub const GRPC_MAX_CONNECTIONS: usize = 4096;
/// The most HTTP connections open at once (`/healthcheck` probes, scrapes and `/json` clients
/// need few); past it the oldest is asked to close.
pub const HTTP_MAX_CONNECTIONS: usize = crate::http::serve::MAX_CONNECTIONS;
/// The path of the separate metrics listener.
pub const METRICS_PATH: &str = "/metrics";
/// The names of envoyproxy/ratelimit's own rate-limit headers (`--response-headers upstream`).
pub const LIMIT_HEADER: &str = crate::limiter::COMPAT_LIMIT_HEADER;
/// See [`LIMIT_HEADER`].
pub const REMAINING_HEADER: &str = crate::limiter::COMPAT_REMAINING_HEADER;
/// See [`LIMIT_HEADER`].
pub const RESET_HEADER: &str = crate::limiter::COMPAT_RESET_HEADER;
/// How often the statsd sink sends what changed (envoyproxy/ratelimit's `STATS_FLUSH_INTERVAL`).
pub const STATSD_FLUSH_INTERVAL: Duration = crate::statsd::DEFAULT_FLUSH_INTERVAL;
