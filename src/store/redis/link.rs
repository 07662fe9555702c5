//! Connections to Redis: a small pool of multiplexed connections (standalone) or one cluster
//! connection, established in the background so that no call ever waits on a connect; each new
//! connection loads the decision script first.
//!
//! A multiplexed connection pipelines every concurrent call on one socket (commands are
//! written as they come and replies matched in order), so concurrent calls share round trips.
//! A connection that fails with a connection-level error is dropped and re-established in the
//! background; until then calls on it fail fast and the breaker (see `breaker.rs`) decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, Value};

/// How long establishing a connection (TCP, TLS, AUTH) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Where to connect.
pub enum Target {
    /// One Redis (`redis://`, `rediss://`).
    Standalone(Client),
    /// A Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
    Cluster(ClusterClient),
}

/// One live connection.
#[derive(Clone)]
pub enum Conn {
    /// To a standalone Redis.
    Single(MultiplexedConnection),
    /// To a cluster (routes each command by its first key's slot).
    Cluster(ClusterConnection),
}

impl Conn {
    /// Sends one command and reads its reply; a server error reply is an `Err`.
    pub async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let reply = match self {
            Conn::Single(c) => c.req_packed_command(cmd).await,
            Conn::Cluster(c) => c.req_packed_command(cmd).await,
        };
        reply.and_then(Value::extract_error)
    }
}

/// The connection pool.
pub struct Link {
    target: Target,
    /// The script to load on every new connection (so calls rarely meet NOSCRIPT).
    script: &'static str,
    slots: Box<[ArcSwapOption<Conn>]>,
    connecting: Box<[AtomicBool]>,
    next: AtomicUsize,
}

impl Link {
    /// A pool of `size` connections to `target` (a cluster connection is always one: it
    /// multiplexes per node itself). Nothing is connected yet.
    pub fn new(target: Target, size: usize, script: &'static str) -> Arc<Self> {
        let size = match target {
            Target::Standalone(_) => size.max(1),
            Target::Cluster(_) => 1,
        };
        Arc::new(Self {
            target,
            script,
            slots: (0..size).map(|_| ArcSwapOption::empty()).collect(),
            connecting: (0..size).map(|_| AtomicBool::new(false)).collect(),
            next: AtomicUsize::new(0),
        })
    }

    /// A connection to use now and its slot, or `None` (a connect is started in the
    /// background) when that slot has none.
    pub fn connection(self: &Arc<Self>) -> Option<(usize, Conn)> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        match self.slots[slot].load_full() {
            Some(conn) => Some((slot, (*conn).clone())),
            None => {
                self.spawn_connect(slot);
                None
            }
        }
    }

    /// Drops the connection of `slot` after a connection-level error; the next use reconnects.
    pub fn discard(&self, slot: usize) {
        self.slots[slot].store(None);
    }

    /// Connects every empty slot and waits for it (used by the probe); returns the first error.
    pub async fn connect_all(&self) -> Result<(), RedisError> {
        for slot in 0..self.slots.len() {
            if self.slots[slot].load().is_none() {
                let conn = self.open().await?;
                self.slots[slot].store(Some(Arc::new(conn)));
            }
        }
        Ok(())
    }

    fn spawn_connect(self: &Arc<Self>, slot: usize) {
        if self.connecting[slot].swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            match link.open().await {
                Ok(conn) => link.slots[slot].store(Some(Arc::new(conn))),
                Err(e) => tracing::debug!(error = %e, "redis connect failed"),
            }
            link.connecting[slot].store(false, Ordering::Release);
        });
    }

    async fn open(&self) -> Result<Conn, RedisError> {
        let connect = async {
            match &self.target {
                Target::Standalone(client) => {
                    let config =
                        AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT));
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map(Conn::Single)
                }
                Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
            }
        };
        let connect = async {
            let mut conn = connect.await?;
            // SCRIPT LOAD goes to every primary of a cluster; a standalone Redis has one.
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(self.script);
            conn.query(&load).await?;
            Ok(conn)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(conn) => conn,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))),
        }
    }
}
