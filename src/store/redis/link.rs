//! Connections to Redis: a small pool of multiplexed connections (standalone) or one cluster
//! connection, established in the background so that no call ever waits on a connect; each new
//! connection loads the decision script first.
//!
//! A multiplexed connection pipelines every concurrent call on one socket (commands are
//! written as they come and replies matched in order), so concurrent calls share round trips.
//! A connection that fails with a connection-level error is dropped and re-established.
//!
//! A connection can break while nobody uses it (Redis restarted while the breaker kept calls
//! away). Such a connection fails its next command before sending it (its driver task has
//! ended), which [`Conn::try_query`] tells apart: the command is sent again on another
//! connection, or on a new one, so no call is refused by a connection that broke earlier.
//! A command that may have reached Redis is never sent twice (the script is not idempotent).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// How sending a command went.
pub enum Attempt {
    /// Redis answered, or the command may have reached it before the failure.
    Answered(RedisResult<Value>),
    /// The connection was dead before the command left: sending it elsewhere is safe.
    Unsent(RedisError),
}

impl Conn {
    /// Sends one command and reads its reply; a server error reply is an `Err`.
    pub async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self.try_query(cmd).await {
            Attempt::Answered(reply) => reply,
            Attempt::Unsent(e) => Err(e),
        }
    }

    /// As [`Conn::query`], telling a connection that was already dead apart: a multiplexed
    /// connection whose driver has ended fails on the first poll, when the command is handed
    /// to the driver's closed channel, before anything is written.
    pub async fn try_query(&mut self, cmd: &Cmd) -> Attempt {
        let reply = match self {
            Conn::Single(c) => {
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
            Conn::Cluster(c) => c.req_packed_command(cmd).await,
        };
        Attempt::Answered(reply.and_then(Value::extract_error))
    }
}

/// The connection pool.
pub struct Link {
    target: Target,
    /// The script to load on every new connection (so calls rarely meet NOSCRIPT).
    script: &'static str,
    slots: Box<[ArcSwapOption<Conn>]>,
    /// Held while a slot connects, so concurrent callers wait for one connect, not start many.
    connecting: Box<[tokio::sync::Mutex<()>]>,
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
            connecting: (0..size).map(|_| tokio::sync::Mutex::new(())).collect(),
            next: AtomicUsize::new(0),
        })
    }

    /// How many connections the pool holds.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// A connection to use now and its slot: the next one round robin, or any other live one
    /// while that slot reconnects in the background; when none is live, a new one, connected
    /// now (bounded by the caller's timeout; concurrent callers share the connect).
    pub async fn get(self: &Arc<Self>) -> Result<(usize, Conn), RedisError> {
        let size = self.slots.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % size;
        for slot in (first..size).chain(0..first) {
            match self.slots[slot].load_full() {
                Some(conn) => return Ok((slot, (*conn).clone())),
                None => self.spawn_connect(slot),
            }
        }
        Ok((first, self.connect(first).await?))
    }

    /// Drops the connection of `slot` after a connection-level error; the next use reconnects.
    pub fn discard(&self, slot: usize) {
        self.slots[slot].store(None);
    }

    /// The connection of `slot`, if it has one.
    pub fn slot(&self, slot: usize) -> Option<Arc<Conn>> {
        self.slots[slot].load_full()
    }

    /// Drops the connection of `slot` if it is still `conn` (another may have replaced it).
    pub fn discard_if(&self, slot: usize, conn: &Arc<Conn>) {
        let current = self.slots[slot].load();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            self.slots[slot].store(None);
        }
    }

    /// Drops every connection (the breaker opened: they may be stalled or broken).
    pub fn discard_all(&self) {
        for slot in self.slots.iter() {
            slot.store(None);
        }
    }

    /// Puts a connection that just answered into `slot`.
    pub fn install(&self, slot: usize, conn: Arc<Conn>) {
        self.slots[slot].store(Some(conn));
    }

    /// Starts connecting every empty slot in the background.
    pub fn fill(self: &Arc<Self>) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].load().is_none() {
                self.spawn_connect(slot);
            }
        }
    }

    /// Connects every empty slot and waits for it (used by the probe); returns the first error.
    pub async fn connect_all(&self) -> Result<(), RedisError> {
        for slot in 0..self.slots.len() {
            self.connect(slot).await?;
        }
        Ok(())
    }

    /// The connection of `slot`, connecting it first if it has none.
    async fn connect(&self, slot: usize) -> Result<Conn, RedisError> {
        let _connecting = self.connecting[slot].lock().await;
        if let Some(conn) = self.slots[slot].load_full() {
            return Ok((*conn).clone());
        }
        let conn = self.open().await?;
        self.slots[slot].store(Some(Arc::new(conn.clone())));
        Ok(conn)
    }

    fn spawn_connect(self: &Arc<Self>, slot: usize) {
        if self.connecting[slot].try_lock().is_err() {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            if let Err(e) = link.connect(slot).await {
                tracing::debug!(error = %e, "redis connect failed");
            }
        });
    }

    /// A new connection (TCP, TLS, AUTH, SCRIPT LOAD) within [`CONNECT_TIMEOUT`], in no slot.
    pub async fn open(&self) -> Result<Conn, RedisError> {
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
