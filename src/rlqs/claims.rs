//! Replicas sharing a store split each limit: once a second (and at once for a bucket whose
//! portion is not known yet) this replica claims its portion of every enforced bucket its
//! streams hold, in the store's `PortionStore`, off the book's thread; the book records what
//! each claim got.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::store::{ClaimTerms, PortionStore};

use super::limits::{CLAIM_EVERY, MEMBER_FOR, PORTION_TTL, SETTLE};
use super::owner::{BookHandle, Command};

/// Claims this replica's portions in `store` as `replica` until `stop`: once a second, and when
/// `due` is woken. A store that cannot be reached leaves the last portions to go stale, then
/// the floors (the book's clock moves them); its failures are logged when they start and when
/// they end.
pub(crate) async fn run(
    book: BookHandle,
    store: Arc<dyn PortionStore>,
    clock: Arc<dyn Clock>,
    replica: String,
    due: Arc<Notify>,
    stop: CancellationToken,
) {
    tracing::info!(%replica, "sharing RLQS limits with the other replicas through the store");
    let mut every = super::owner::every(Duration::from_nanos(CLAIM_EVERY));
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
            _ = due.notified() => {}
        }
        let Some((keys, claims)) = book.claims().await else {
            return;
        };
        if claims.is_empty() {
            continue;
        }
        // Taken before the claim leaves: never after the store's own time of it.
        let at = clock.now();
        let terms = ClaimTerms {
            replica: &replica,
            now: at,
            ttl: PORTION_TTL,
            member_for: MEMBER_FOR,
            settle: SETTLE,
        };
        match store.claim(terms, &claims).await {
            Ok(answers) => {
                if failing {
                    failing = false;
                    tracing::info!("claiming RLQS portions in the store works again");
                }
                book.send(Command::Claimed { at, keys, answers }).await;
            }
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(
                    %error,
                    "claiming RLQS portions in the store failed; each portion goes on for 3 s, then its floor until 49 s after the last claim"
                );
            }
            Err(_) => {}
        }
    }
}

/// A name no other replica has, now or after this one restarts: the host, the process, the
/// start time (a restarted replica's old claims lapse on their own) and, for several servers in
/// one process (tests), their order.
pub fn replica_name(now: crate::clock::Nanos) -> String {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let order = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let host = crate::files::hostname().unwrap_or_else(|| "sluice".to_string());
    format!("{host}-{}-{now:x}-{order}", std::process::id())
}
