//! The shutdown sequence: health turns NOT_SERVING the moment shutdown is requested; after the
//! shutdown delay the listeners stop accepting; in-flight calls finish within the grace period;
//! then the store's last flush runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::health::GrpcHealth;
use super::store::StoreHandle;

/// The shared state of one server's shutdown.
#[derive(Clone, Default)]
pub(super) struct Lifecycle {
    /// Cancelled when shutdown is requested (a signal, `Running::stop`, a failing server).
    pub requested: CancellationToken,
    /// Cancelled once the delay has passed: the listeners stop accepting.
    pub close: CancellationToken,
    /// Set the moment shutdown is requested: `/healthcheck` answers 503 from then on.
    pub draining: Arc<AtomicBool>,
}

/// Waits for shutdown to be requested, announces it through health, and closes the listeners
/// after `delay` (so load balancers stop sending calls first).
pub(super) async fn announce_then_close(lifecycle: Lifecycle, health: GrpcHealth, delay: Duration) {
    lifecycle.requested.cancelled().await;
    lifecycle.draining.store(true, Ordering::SeqCst);
    health.set(false).await;
    tracing::info!(
        ?delay,
        "health is NOT_SERVING; closing listeners after the delay"
    );
    tokio::time::sleep(delay).await;
    lifecycle.close.cancel();
}

/// Once shutdown has been requested: waits for every task (in-flight calls included) for at
/// most `delay + grace`, then runs the store's last flush, so what those calls counted is kept.
pub(super) async fn finish(
    tasks: TaskTracker,
    store: StoreHandle,
    delay: Duration,
    grace: Duration,
) {
    // Saturating: durations come from the command line, and no sum of them may panic.
    let bound = delay.saturating_add(grace);
    if tokio::time::timeout(bound, tasks.wait()).await.is_err() {
        tracing::warn!(
            ?grace,
            "in-flight calls did not finish within the grace period"
        );
    }
    store.close().await;
}
