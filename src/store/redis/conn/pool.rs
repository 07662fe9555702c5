//! Connections to Redis: a small pool of multiplexed connections (standalone) or one cluster
//! connection, established in the background so that no call ever waits on a connect; each new
//! connection loads the decision script first.
//!
//! A multiplexed connection pipelines every concurrent call on one socket (commands are
//! written as they come and replies matched in order), so concurrent calls share round trips.
//! A connection that fails with a connection-level error (or reaches a demoted master) is
//! dropped with every other connection of the pool, and they are re-established.
//!
//! A connection can break while nobody uses it (Redis restarted while the breaker kept calls
//! away). Such a connection fails its next command before sending it (its driver task has
//! ended), which `RedisConn::try_query` tells apart: the command goes to a live connection, or a
//! new one opened then, so no call is refused by a connection that broke earlier. A command
//! that may have reached Redis is never sent twice (the script is not idempotent).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::sentinel::Sentinel;
use super::target::RedisConn;
use super::target::Target;

/// Whether `error` means the connection is gone, or reached a server that is no longer the
/// master (`READONLY`, `MASTERDOWN`: a failover demoted it): the pool's connections must be
/// replaced.
pub fn is_lost(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

/// Which pool generation a connection belongs to: [`Pool::discard`] drops a generation.
#[derive(Debug, Clone, Copy)]
pub struct Generation(u64);

/// A pooled connection and the generation it was opened in.
pub struct Pooled {
    /// The connection.
    pub conn: RedisConn,
    generation: u64,
}

impl Pooled {
    /// The generation a call on this connection belongs to.
    pub fn generation(&self) -> Generation {
        Generation(self.generation)
    }
}

/// The connection pool.
pub struct Pool {
    target: Target,
    /// The script to load on every new connection (so calls rarely meet NOSCRIPT).
    script: &'static str,
    connect_timeout: Duration,
    slots: Box<[ArcSwapOption<Pooled>]>,
    /// Held while a slot connects, so concurrent callers wait for one connect, not start many.
    connecting: Box<[tokio::sync::Mutex<()>]>,
    next: AtomicUsize,
    /// Bumped when a connection is lost: every connection of the older generation is dropped.
    generation: AtomicU64,
}

impl Pool {
    /// A pool of `size` connections to `target` (a cluster connection is always one: it
    /// multiplexes per node itself), each opened within `connect_timeout`. Nothing is
    /// connected yet.
    pub fn new(
        target: Target,
        size: usize,
        script: &'static str,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        let size = if target.is_cluster() { 1 } else { size.max(1) };
        Arc::new(Self {
            target,
            script,
            connect_timeout,
            slots: (0..size).map(|_| ArcSwapOption::empty()).collect(),
            connecting: (0..size).map(|_| tokio::sync::Mutex::new(())).collect(),
            next: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
        })
    }

    /// How many connections the pool holds.
    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// A connection to use now: the next one round robin, or any other live one while that
    /// slot reconnects in the background; when none is live, a new one, opened now (bounded
    /// by the caller's timeout; concurrent callers share the connect).
    pub async fn get(self: &Arc<Self>) -> Result<(Generation, RedisConn), RedisError> {
        let size = self.slots.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % size;
        for slot in (first..size).chain(0..first) {
            match self.slots[slot].load_full() {
                Some(pooled) => return Ok((pooled.generation(), pooled.conn.clone())),
                None => self.spawn_connect(slot),
            }
        }
        // Boxed: opening a connection (TCP, TLS, AUTH, Sentinel's lookups) is a future of
        // several kilobytes, which every call's state would otherwise carry (and move) for a
        // path taken only while no connection is live.
        let pooled = Box::pin(self.connect(first)).await?;
        Ok((pooled.generation(), pooled.conn.clone()))
    }

    /// Drops every connection of generation `lost` after one of them was lost (see
    /// [`is_lost`]): they all reach the same server, so when one breaks the others are broken
    /// or about to be, and a call must not meet a dead one after Redis (or a new master) is
    /// back. Calls in flight on them finish; the next use reconnects.
    pub fn discard(&self, lost: Generation) {
        let Generation(generation) = lost;
        self.generation.fetch_max(generation + 1, Ordering::AcqRel);
        for slot in self.slots.iter() {
            let current = slot.load_full();
            if current.as_ref().is_some_and(|p| p.generation <= generation) {
                // Only if unchanged: a connection opened meanwhile stays.
                slot.compare_and_swap(&current, None);
            }
        }
    }

    /// Replaces every pooled connection with a new one (each asks the target afresh: after a
    /// failover, the new master), opening each before dropping the one it replaces, so calls
    /// never find the pool empty. If one cannot be opened, the older connections are dropped
    /// all the same (they reach a master that is no longer the one).
    pub async fn renew(&self) {
        let old = Generation(self.generation.fetch_add(1, Ordering::AcqRel));
        for slot in self.slots.iter() {
            match self.open().await {
                Ok(pooled) => slot.store(Some(Arc::new(pooled))),
                Err(e) => {
                    tracing::debug!(error = %e, "redis reconnect failed");
                    self.discard(old);
                    return;
                }
            }
        }
    }

    /// Whether the target is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    /// The sentinels, when the target is the master they name.
    pub fn sentinel(&self) -> Option<&Sentinel> {
        match &self.target {
            Target::Sentinel(sentinel) => Some(sentinel),
            _ => None,
        }
    }

    /// The bound on opening a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The connection of `slot`, if it has one.
    pub fn slot(&self, slot: usize) -> Option<Arc<Pooled>> {
        self.slots[slot].load_full()
    }

    /// Drops the connection of `slot` if it is still `pooled` (another may have replaced it).
    pub fn discard_if(&self, slot: usize, pooled: &Arc<Pooled>) {
        let current = self.slots[slot].load_full();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, pooled)) {
            self.slots[slot].compare_and_swap(&current, None);
        }
    }

    /// Drops every connection (the breaker opened: they may be stalled or broken).
    pub fn discard_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        for slot in self.slots.iter() {
            slot.store(None);
        }
    }

    /// Puts a connection that just answered into `slot`.
    pub fn install(&self, slot: usize, pooled: Arc<Pooled>) {
        self.slots[slot].store(Some(pooled));
    }

    /// Starts connecting every empty slot in the background.
    pub fn fill(self: &Arc<Self>) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].load().is_none() {
                self.spawn_connect(slot);
            }
        }
    }

    /// Connects every empty slot and waits for it; returns the first error.
    pub async fn connect_all(&self) -> Result<(), RedisError> {
        for slot in 0..self.slots.len() {
            self.connect(slot).await?;
        }
        Ok(())
    }

    /// The connection of `slot`, connecting it first if it has none.
    async fn connect(&self, slot: usize) -> Result<Arc<Pooled>, RedisError> {
        let _connecting = self.connecting[slot].lock().await;
        if let Some(pooled) = self.slots[slot].load_full() {
            return Ok(pooled);
        }
        let pooled = Arc::new(self.open().await?);
        self.slots[slot].store(Some(pooled.clone()));
        Ok(pooled)
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

    /// A new connection (TCP, TLS, AUTH, SCRIPT LOAD) within the connect timeout, in no slot.
    pub async fn open(&self) -> Result<Pooled, RedisError> {
        // A connection opened while its generation is dropped belongs to the older one.
        let generation = self.generation.load(Ordering::Acquire);
        let timeout = self.connect_timeout;
        let mut conn = self.target.connect(timeout).await?;
        // SCRIPT LOAD goes to every primary of a cluster; a standalone Redis has one.
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(self.script);
        super::node::within(timeout, conn.query(&load)).await?;
        Ok(Pooled { conn, generation })
    }
}
