//! Following a Redis Sentinel failover as the sentinels announce it: subscribed to
//! `+switch-master`, the pool is renewed as soon as a new master is named, instead of when the
//! old master's connections break (it may stay up, taking writes that its demotion loses).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::pool::Pool;

/// How long to wait before subscribing again after no sentinel took a subscription.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// Renews `link`'s connections whenever its sentinels announce a new master, until
/// `shutdown`; returns at once for a target without sentinels. After a lost subscription (a
/// switch may have been missed meanwhile) the pool is renewed too.
pub async fn follow(link: Arc<Pool>, shutdown: CancellationToken) {
    let Some(sentinel) = link.sentinel() else {
        return;
    };
    let mut first = true;
    loop {
        let subscribed = tokio::select! {
            _ = shutdown.cancelled() => return,
            subscribed = sentinel.subscribe(link.connect_timeout()) => subscribed,
        };
        match subscribed {
            Ok(mut pubsub) => {
                if !first {
                    link.renew().await;
                }
                let mut messages = pubsub.on_message();
                loop {
                    let message = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        message = messages.next() => message,
                    };
                    match message {
                        Some(m) if sentinel.announces_ours(&m) => {
                            tracing::info!("redis sentinel named a new master: reconnecting");
                            link.renew().await;
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot subscribe to the sentinels"),
        }
        first = false;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
        }
    }
}
