//! Connections to Redis: a small pool of multiplexed connections (standalone) or one cluster
//! connection, established in the background so that no call ever waits on a connect; each new
//! connection loads the decision script first.
//!
//! A multiplexed connection pipelines every concurrent call on one socket (commands are
//! written as they come and replies matched in order), so concurrent calls share round trips.
//! A connection that fails with a connection-level error (or reaches a demoted master) is
//! dropped with every other connection of the pool, and they are re-established in the
//! background; until then calls fail fast and the breaker (see `breaker.rs`) decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::sentinel::Sentinel;
pub use super::target::Conn;
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

/// Which pool generation a connection belongs to: [`Link::discard`] drops a generation.
#[derive(Debug, Clone, Copy)]
pub struct Lease(u64);

/// A pooled connection and the generation it was opened in.
struct Pooled {
    conn: Conn,
    generation: u64,
}

/// The connection pool.
pub struct Link {
    target: Target,
    /// The script to load on every new connection (so calls rarely meet NOSCRIPT).
    script: &'static str,
    connect_timeout: Duration,
    slots: Box<[ArcSwapOption<Pooled>]>,
    connecting: Box<[AtomicBool]>,
    next: AtomicUsize,
    /// Bumped when a connection is lost: every connection of the older generation is dropped.
    generation: AtomicU64,
}

impl Link {
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
            connecting: (0..size).map(|_| AtomicBool::new(false)).collect(),
            next: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
        })
    }

    /// A connection to use now, or `None` (a connect is started in the background) when the
    /// next slot has none.
    pub fn connection(self: &Arc<Self>) -> Option<(Lease, Conn)> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        match self.slots[slot].load_full() {
            Some(pooled) => Some((Lease(pooled.generation), pooled.conn.clone())),
            None => {
                self.spawn_connect(slot);
                None
            }
        }
    }

    /// Drops every connection of `lease`'s generation after one of them was lost (see
    /// [`is_lost`]): they all reach the same server, so when one breaks the others are broken
    /// or about to be, and a call must not meet a dead one after Redis (or a new master) is
    /// back. Calls in flight on them finish; the next use reconnects.
    pub fn discard(&self, lease: Lease) {
        let Lease(generation) = lease;
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
        let old = Lease(self.generation.fetch_add(1, Ordering::AcqRel));
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

    /// Connects every empty slot and waits for it (used by the probe); returns the first error.
    pub async fn connect_all(&self) -> Result<(), RedisError> {
        for slot in 0..self.slots.len() {
            if self.slots[slot].load().is_none() {
                let pooled = self.open().await?;
                self.slots[slot].store(Some(Arc::new(pooled)));
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
                Ok(pooled) => link.slots[slot].store(Some(Arc::new(pooled))),
                Err(e) => tracing::debug!(error = %e, "redis connect failed"),
            }
            link.connecting[slot].store(false, Ordering::Release);
        });
    }

    async fn open(&self) -> Result<Pooled, RedisError> {
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
