//! Redis's health as calls and the probe see it: the pool, the circuit breaker in front of it,
//! and one log line per change of the breaker (never one per call).

use std::sync::Arc;
use std::time::Duration;

use super::breaker::{Breaker, BreakerChange, FAILURES_TO_OPEN};
use super::node::within;
use super::pool::Pool;
use crate::store::StoreError;

/// The pool and its breaker, shared by the calls and the background probe.
pub struct PoolHealth {
    pool: Arc<Pool>,
    breaker: Breaker,
    /// Which Redis, without credentials (for log lines).
    described: String,
}

impl PoolHealth {
    /// A closed breaker in front of `pool`; unhealthy once open for `unhealthy_after`.
    pub fn new(pool: Arc<Pool>, unhealthy_after: Duration, described: String) -> Self {
        Self {
            pool,
            breaker: Breaker::new(unhealthy_after),
            described,
        }
    }

    /// The connections the calls' script runs go out on.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Connects every pooled connection, waiting up to the connect timeout. An unreachable
    /// Redis is only logged: each rule's `failure_mode` answers calls until it does.
    pub async fn connect(&self) {
        match within(self.pool.connect_timeout(), self.pool.connect_all()).await {
            Ok(()) => tracing::info!(redis = %self.described, "connected to redis"),
            Err(e) => tracing::warn!(
                redis = %self.described, error = %e,
                "redis is unreachable; each rule's failure_mode answers calls until it does"
            ),
        }
    }

    /// Whether the circuit breaker is open (calls skip Redis).
    pub fn is_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Whether health should report the store unhealthy (open for long enough).
    pub fn unhealthy(&self) -> bool {
        self.breaker.unhealthy()
    }

    /// A call that Redis answered.
    pub fn call_succeeded(&self) {
        self.breaker.success();
    }

    /// A call that failed with `error`.
    pub fn call_failed(&self, error: &StoreError) {
        self.record(self.breaker.failure(), Some(error));
    }

    /// A probe round in which every pooled connection answered.
    pub fn probe_succeeded(&self) {
        self.record(self.breaker.probe_succeeded(), None);
    }

    /// One log line per breaker state change.
    fn record(&self, change: Option<BreakerChange>, error: Option<&StoreError>) {
        match change {
            Some(BreakerChange::Opened) => {
                tracing::warn!(
                    redis = %self.described,
                    error = %error.map(ToString::to_string).unwrap_or_default(),
                    "redis circuit opened after {} consecutive failures: each rule's failure_mode \
                     answers calls until redis does",
                    FAILURES_TO_OPEN
                );
                // Those connections may be stalled (a partition: commands stuck in TCP
                // retransmission) or broken; the probe brings fresh ones.
                self.pool.discard_all();
            }
            Some(BreakerChange::Closed) => {
                tracing::info!(redis = %self.described, "redis answers again: circuit closed")
            }
            None => {}
        }
    }
}
