//! Where to connect: a `--redis-url` and the settings that go with it made into a target (one
//! Redis, a cluster, or the master that Sentinel names), and one live connection to it. How each
//! node is reached (TLS, credentials that replace the URL's, as envoyproxy/ratelimit's `REDIS_AUTH`
//! beats URL credentials, the sentinels' own) is in `node.rs`.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Arg, Client, Cmd, RedisConnectionInfo, RedisError, RedisResult, Value};

use super::node::{NodeTemplate, Tls, credentials, open, tcp, within};
use super::sentinel::Sentinel;
use super::url::{self, Shape};
use crate::store::redis::settings::{RedisSettings, describe_url};
use crate::store::{StoreError, UrlProblem};

/// Where to connect.
pub enum Target {
    /// One Redis (TCP, TLS or a unix socket).
    Standalone(Client),
    /// A Redis Cluster.
    Cluster(ClusterClient),
    /// The master that Redis Sentinel names (discovered on every connect).
    Sentinel(Sentinel),
}

impl Target {
    /// The target of `settings` (files are read, nothing is connected).
    pub fn build(settings: &RedisSettings) -> Result<Self, StoreError> {
        let endpoint = url::parse(&settings.url)?;
        let tls = Tls::load(settings, &endpoint)?;
        let redis = credentials(
            &endpoint.redis,
            settings.username.as_deref(),
            settings.password.as_deref(),
        );
        let node = NodeTemplate::new(redis, tls.clone());
        let bad = |e: RedisError| StoreError::BadUrl {
            url: describe_url(&settings.url),
            problem: UrlProblem::Refused(e),
        };
        match endpoint.shape {
            Shape::Standalone => node.client(&endpoint.nodes[0]).map(Self::Standalone),
            Shape::Cluster => {
                let nodes = endpoint
                    .nodes
                    .iter()
                    .map(|n| node.info(n))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(bad)?;
                let mut builder = ClusterClient::builder(nodes)
                    .tcp_settings(tcp())
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.timeout);
                builder = cluster_retries(builder, settings.timeout);
                if let Some(tls) = &tls {
                    builder = builder
                        .certs(tls.certificates.clone())
                        .danger_accept_invalid_hostnames(!tls.verify_hostname);
                }
                builder.build().map(Self::Cluster)
            }
            Shape::Sentinel { master } => {
                let sentinel = NodeTemplate::new(
                    credentials(
                        &RedisConnectionInfo::default(),
                        settings.sentinel_username.as_deref(),
                        settings.sentinel_password.as_deref(),
                    ),
                    tls,
                );
                let sentinels = endpoint
                    .nodes
                    .iter()
                    .map(|n| sentinel.client(n))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(bad)?;
                Ok(Self::Sentinel(Sentinel::new(sentinels, master, node)))
            }
        }
        .map_err(bad)
    }

    /// Whether this is a Redis Cluster (its calls are split by slot and not batched).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Opens one connection, each step bounded by `timeout`.
    pub async fn connect(&self, timeout: Duration) -> Result<RedisConn, RedisError> {
        match self {
            Self::Standalone(client) => open(client, timeout).await.map(RedisConn::Single),
            Self::Cluster(client) => within(timeout, client.get_async_connection())
                .await
                .map(RedisConn::Cluster),
            Self::Sentinel(sentinel) => sentinel
                .connect_master(timeout)
                .await
                .map(RedisConn::Single),
        }
    }
}

/// Retries of one cluster command. A slot being migrated answers `ASK` (and `MOVED` once
/// moved), and `TRYAGAIN` to a script whose keys the migration has split, until the rest
/// follow, a few milliseconds later; a failover answers `CLUSTERDOWN` until a replica takes
/// over. Each of those takes a retry, so one retry (sluice's old setting) failed a call that met
/// two of them. The command as a whole, retries included, stays bounded by the call timeout:
/// redis-rs's overall response timeout is the response timeout unless set apart, so more
/// retries never make a call on a dead node wait longer.
const CLUSTER_RETRIES: u32 = 16;

/// Retries of a cluster command, waiting 1 ms, then up to 2^n ms for the n-th, never more
/// than a quarter of `timeout`: redis-rs's own wait before retrying a `TRYAGAIN` is at least
/// 1.28 s, far past any call's timeout, so a call that met one always fell to its
/// `failure_mode`.
fn cluster_retries(
    builder: redis::cluster::ClusterClientBuilder,
    timeout: Duration,
) -> redis::cluster::ClusterClientBuilder {
    let most_ms = (timeout.as_millis() / 4).clamp(2, u128::from(u32::MAX)) as u64;
    builder
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(1)
        .max_retry_wait(most_ms)
        .retry_wait_formula(1, 2)
}

/// One live connection.
#[derive(Clone)]
pub enum RedisConn {
    /// To a standalone Redis.
    Single(MultiplexedConnection),
    /// To a cluster (routes each command by its first key's slot).
    Cluster(ClusterConnection),
}

/// How sending a command went.
pub enum Attempt {
    /// Redis answered, or the command may have reached it before the failure.
    Answered(RedisResult<Value>),
    /// The connection was dead before the command left: sending it elsewhere is safe.
    Unsent(RedisError),
}

impl RedisConn {
    /// Sends one command and reads its reply; a server error reply is an `Err`.
    pub async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self.try_query(cmd).await {
            Attempt::Answered(reply) => reply,
            Attempt::Unsent(e) => Err(e),
        }
    }

    /// Makes the node a cluster script command `script` (`EVALSHA sha numkeys key …`) is
    /// routed to refuse it unless it serves the slot of its first key as master (`READWRITE`). redis-rs sends `READONLY` on every connection to a
    /// cluster node, and Redis runs a script (`EVALSHA`, not marked as a write command) on a
    /// replica of the slot's master from such a client: a master demoted by a failover then
    /// runs sluice's scripts, each refused at its first write, and never answers `MOVED`, so
    /// redis-rs keeps routing there. Once it is `READWRITE` the demoted node redirects to the
    /// new master (and redis-rs refreshes its slots). Nothing to do for one Redis.
    pub async fn refuse_replica_reads(&mut self, script: &Cmd) -> RedisResult<()> {
        let RedisConn::Cluster(c) = self else {
            return Ok(());
        };
        let Some(Arg::Simple(key)) = script.args_iter().nth(3) else {
            return Ok(());
        };
        let route = Route::with_key(key, SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        c.route_command(redis::cmd("READWRITE"), routing)
            .await
            .and_then(Value::extract_error)
            .map(drop)
    }

    /// As [`RedisConn::query`], telling a connection that was already dead apart: a multiplexed
    /// connection whose driver has ended fails on the first poll, when the command is handed
    /// to the driver's closed channel, before anything is written.
    pub async fn try_query(&mut self, cmd: &Cmd) -> Attempt {
        let reply = match self {
            RedisConn::Single(c) => {
                let mut reply = pin!(c.req_packed_command(cmd));
                let mut polls = 0u32;
                let reply = std::future::poll_fn(|cx| {
                    polls += 1;
                    reply.as_mut().poll(cx)
                })
                .await;
                match reply {
                    Err(e) if polls == 1 && e.is_connection_dropped() => return Attempt::Unsent(e),
                    reply => reply,
                }
            }
            RedisConn::Cluster(c) => c.req_packed_command(cmd).await,
        };
        Attempt::Answered(reply.and_then(Value::extract_error))
    }
}
