//! The quota book: which share of each limit every Envoy stream holds. Synchronous, behind one
//! lock; the gRPC service calls it from its stream tasks and sends what it returns.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::rules::bucket::QuotaAction;

use super::assign::{BucketId, Push, Strategy, StreamId, Usage};
use super::ledger::{Ledger, Stream};
use super::portion::Portion;
use super::view::{BucketView, HolderView, QuotaError, Reported};

/// The shares of every limit among the RLQS streams that report its buckets.
///
/// Shares are max–min fair by reported demand; the shares streams hold (as far as the book has
/// sent them) never sum above a limit's rate or burst, because every operation sends the shrinks
/// it causes before anything grows. `docs/quota.md` states the bound on what all Envoys together
/// admit and `bound_tests.rs` holds the book to it against a model of Envoy.
///
/// [`Push::push`] is called with the book's lock held: it must queue, never wait, and never call
/// back into the book.
pub struct QuotaBook {
    ledger: Mutex<Ledger>,
}

impl QuotaBook {
    /// An empty book. If Envoys return to it holding buckets in its first
    /// [`WARM_UP`](super::WARM_UP) (after a restart: they may still hold assignments from the
    /// previous process), it hands out no share of an enforced limit until that is over.
    pub fn new(clock: Arc<dyn Clock>, portion: Arc<dyn Portion>) -> Self {
        QuotaBook {
            ledger: Mutex::new(Ledger::new(clock, portion)),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic under the lock leaves the book as consistent as its last finished step;
        // refusing every later report would stop quota service altogether.
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a stream bound to `domain`; `push` receives the answers other events cause.
    pub fn open(&self, domain: &str, push: Arc<dyn Push>) -> StreamId {
        let mut ledger = self.ledger();
        let id = StreamId(ledger.next_stream);
        ledger.next_stream += 1;
        let stream = Stream {
            domain: domain.into(),
            push,
            buckets: HashSet::new(),
        };
        ledger.streams.insert(id, stream);
        id
    }

    /// One usage report of a stream: resolves new buckets with `resolve`, records demand and
    /// re-splits the buckets reported. The shrinks this causes for other streams are pushed
    /// first; then this stream's answers are returned, one per reported bucket (a new or changed
    /// strategy, or the same again to restart its time to live), to be sent after those pushes.
    /// During the warm-up, buckets of an enforced limit get no answer.
    pub fn report(
        &self,
        stream: StreamId,
        usages: &[Usage],
        resolve: &dyn Fn(&BucketId) -> QuotaAction,
    ) -> Result<Reported, QuotaError> {
        self.ledger().report(stream, usages, resolve)
    }

    /// Ends a stream. Its Envoy may still hold its assignments (and reconnect with them), so
    /// its shares go back to the others when those have expired: within the TTL plus a second
    /// of its last answer.
    pub fn close(&self, stream: StreamId) {
        self.ledger().close(stream);
    }

    /// After a rule reload: re-resolves every bucket and pushes at once the assignments that
    /// change (a bucket that no longer matches a rule gets `ALLOW_ALL`).
    pub fn refresh(&self, resolve: &dyn Fn(&str, &BucketId) -> QuotaAction) {
        self.ledger().refresh(resolve);
    }

    /// Re-splits `buckets` (domain, id) after this replica's portion of their limits moved
    /// (see [`Portion`]), pushing the changes at once.
    pub fn reshare(&self, buckets: &[(Arc<str>, BucketId)]) {
        let mut ledger = self.ledger();
        let mut keys: Vec<_> = buckets
            .iter()
            .filter_map(|id| ledger.index.get(id).copied())
            .collect();
        keys.sort_unstable();
        ledger.settle(&keys, None);
    }

    /// Called every second: ends the warm-up, stops pushing to streams that no longer report a
    /// bucket, returns shares that have expired to the others, and forgets buckets no stream
    /// has reported for [`FORGET_AFTER`](super::FORGET_AFTER).
    pub fn tick(&self) {
        self.ledger().tick();
    }

    /// Every bucket with each stream's demand and share, for the operator page and metrics.
    pub fn snapshot(&self) -> Vec<BucketView> {
        let ledger = self.ledger();
        let mut out: Vec<BucketView> = ledger
            .buckets
            .values()
            .map(|b| BucketView {
                domain: b.domain.clone(),
                bucket: b.id.clone(),
                rule: b.action.rule().cloned(),
                limit: match &b.action {
                    QuotaAction::Limited { rate, .. } => Some(*rate),
                    _ => None,
                },
                holders: b
                    .holders
                    .iter()
                    .map(|h| HolderView {
                        stream: h.stream,
                        demand_per_second: h.demand.per_second(),
                        strategy: h.held,
                        rate_per_second: rate_of(h.held),
                        reporting: h.reporting,
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| (&a.domain, &a.bucket).cmp(&(&b.domain, &b.bucket)));
        out
    }

    /// Open streams.
    pub fn streams(&self) -> usize {
        self.ledger().streams.len()
    }

    /// Buckets the book holds.
    pub fn buckets(&self) -> usize {
        self.ledger().buckets.len()
    }
}

/// Requests per second a strategy lets through on average (0 unless a token bucket).
pub(crate) fn rate_of(strategy: Option<Strategy>) -> f64 {
    match strategy {
        Some(Strategy::TokenBucket {
            tokens_per_fill,
            fill_interval_seconds,
            ..
        }) => tokens_per_fill.get() as f64 / fill_interval_seconds.get() as f64,
        _ => 0.0,
    }
}
