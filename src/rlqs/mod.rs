//! Envoy's quota service (RLQS), everything but the wire: which share of a limit each Envoy
//! stream holds, kept fair, within the limit, and across replicas.
//!
//! [`Rlqs`] is the wing's one door: the gRPC service hands it each stream's messages, already
//! translated (`stream`: a stream's life, from its first report to its end), and sends what
//! comes back; the operator page asks it for a [`Page`]; the metrics read its [`Load`]. Behind
//! it the book (`book`: every stream's share of every bucket, its buckets resolved against the
//! rules it is told of at each reload) runs on a thread of its own (`owner`), and, with replicas
//! sharing a store, `claims` claims this replica's portions there. `assign` is the vocabulary,
//! `limits` the timing Envoy 1.40 keeps, `view` what the book shows, `model` a model of Envoy's
//! quota client and a fleet of them for the bound's property test and `sluice simulate --rlqs`
//! ([`simulate`] is its entry).

pub mod assign;
pub mod limits;
pub mod view;

mod book;
mod claims;
mod group;
mod model;
mod owner;
mod stream;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::rules::RuleSet;

pub use crate::store::{Claim, ClaimError, ClaimFuture, ClaimTerms, Claimed, PortionStore};
pub use assign::{
    Assignment, BucketId, Outgoing, Reported, RlqsError, Strategy, StreamId, Tally, Usage,
};
pub use claims::replica_name;
pub use group::GroupPortion;
pub use limits::{
    ASSIGNMENT_TTL_SECONDS, FORGET_AFTER, HEADROOM, HELD_FOR, MAX_BUCKETS_PER_STREAM, MAX_STREAMS,
    REPORT_INTERVAL, SILENT_AFTER, WARM_UP,
};
pub use model::simulate::{Scenario, SimulationOutcome, simulate};
pub use stream::{Incoming, Report, Reports, Translated};
pub use view::{BucketView, HolderView, Load, MAX_PAGE, Page, PageQuery};

use book::{Book, Portions};
use owner::BookHandle;

/// The caps and bounds of the RLQS streams one server holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlqsSettings {
    /// Streams bound to a domain at once; past it a new stream is refused.
    pub max_streams: usize,
    /// Streams awaiting their first report at once; past it the oldest of them is ended.
    pub max_unbound_streams: usize,
    /// Buckets one stream may report; a report past it ends the stream.
    pub max_buckets_per_stream: usize,
    /// A stream that sends no first report within this long is ended.
    pub first_report_within: Duration,
    /// Answers queued for a stream that does not read them, past which it is ended.
    pub max_pending_answers: usize,
}

impl Default for RlqsSettings {
    fn default() -> Self {
        RlqsSettings {
            max_streams: MAX_STREAMS,
            max_unbound_streams: limits::MAX_UNBOUND_STREAMS,
            max_buckets_per_stream: MAX_BUCKETS_PER_STREAM,
            first_report_within: Duration::from_nanos(limits::FIRST_REPORT_WITHIN),
            max_pending_answers: limits::MAX_PENDING_ANSWERS,
        }
    }
}

/// What every stream of the wing shares.
struct Shared {
    settings: RlqsSettings,
    book: BookHandle,
    /// The book thread's runtime: each stream's task (reading and translating its messages,
    /// translating its answers) runs there, off the runtime that answers RLS calls.
    runtime: tokio::runtime::Handle,
    /// Places for bound streams.
    bound: Arc<Semaphore>,
    /// Streams awaiting their first report, oldest first.
    waiting: stream::Waiting,
    next_stream: AtomicU64,
    /// Streams open, and of those awaiting their first report.
    open: AtomicUsize,
    unbound_now: AtomicUsize,
    /// Cancelled when the server stops accepting: every stream ends at once.
    shutdown: CancellationToken,
}

/// The RLQS wing: serves streams, shows its book, reports its load. Clones share it.
#[derive(Clone)]
pub struct Rlqs {
    shared: Arc<Shared>,
}

/// Where the wing gets what it needs from the rest of the server.
pub struct RlqsParts {
    /// The caps and bounds of its streams.
    pub settings: RlqsSettings,
    /// The server's clock.
    pub clock: Arc<dyn Clock>,
    /// The rules in force, announced at each reload.
    pub rules: watch::Receiver<Arc<RuleSet>>,
    /// On a store replicas share: where this replica claims its portions.
    pub shared: Option<Arc<dyn PortionStore>>,
    /// One of several regions: the region's portions of the limits regions share.
    pub group: Option<Arc<dyn GroupPortion>>,
    /// Cancelled when the server stops accepting: streams end, the book stops.
    pub shutdown: CancellationToken,
}

impl Rlqs {
    /// Starts the wing: its book on a thread of its own and, on a store replicas share, the
    /// claims of this replica's portions. Returns the wing and its background work, which ends
    /// once the book has stopped (at `parts.shutdown`).
    pub fn start(
        parts: RlqsParts,
    ) -> std::io::Result<(Rlqs, impl Future<Output = ()> + Send + use<>)> {
        let portions = match parts.shared {
            Some(_) => Portions::Shared(Default::default()),
            None => Portions::Whole,
        };
        let rules = parts.rules.borrow().clone();
        let max_buckets = parts.settings.max_buckets_per_stream;
        let mut book = Book::new(parts.clock.clone(), rules, portions, max_buckets);
        if let Some(group) = parts.group {
            book = book.with_group(group);
        }
        let due = parts.shared.as_ref().map(|_| Arc::new(Notify::new()));
        let stop = parts.shutdown.clone();
        let started = owner::start(book, parts.rules, due.clone(), stop.clone())?;
        let (handle, finished) = (started.handle, started.finished);
        let claiming = match (parts.shared, due) {
            (Some(store), Some(due)) => {
                let replica = claims::replica_name(parts.clock.now());
                let run = claims::run(handle.clone(), store, parts.clock, replica, due, stop);
                Some(run)
            }
            _ => None,
        };
        let shared = Shared {
            bound: Arc::new(Semaphore::new(parts.settings.max_streams)),
            waiting: Default::default(),
            settings: parts.settings,
            book: handle,
            runtime: started.runtime,
            next_stream: AtomicU64::new(1),
            open: AtomicUsize::new(0),
            unbound_now: AtomicUsize::new(0),
            shutdown: parts.shutdown,
        };
        let background = async move {
            if let Some(claiming) = claiming {
                claiming.await;
            }
            let _ = finished.await;
        };
        let wing = Rlqs {
            shared: Arc::new(shared),
        };
        Ok((wing, background))
    }

    /// Serves one stream of `reports` from `peer` (its address, when known): what to send,
    /// each answer (and the error that ends the stream, when sluice ends it) passed through
    /// `translate` on the book's thread, so neither reading the stream's messages (`reports` is
    /// polled there too) nor writing its answers takes the runtime's request workers.
    pub fn serve<T, F>(&self, peer: Option<IpAddr>, reports: Reports, translate: F) -> Translated<T>
    where
        T: Send + 'static,
        F: FnMut(Result<Outgoing, RlqsError>) -> Option<T> + Send + 'static,
    {
        stream::serve(&self.shared, peer, reports, translate)
    }

    /// A page of the book's buckets with each stream's demand and share, built on the book's
    /// thread (bounded work, whatever it holds); `None` once the wing has stopped.
    pub async fn page(&self, query: PageQuery) -> Option<Page> {
        self.shared.book.page(query).await
    }

    /// Re-splits `buckets` (domain, id) at once: the group's portion of them moved.
    pub async fn reshare(&self, buckets: Vec<(Arc<str>, BucketId)>) {
        self.shared
            .book
            .send(owner::Command::Reshare { buckets })
            .await;
    }

    /// Streams open (and awaiting their first report) and buckets held.
    pub fn load(&self) -> Load {
        let shared = &self.shared;
        Load {
            streams: shared.open.load(Ordering::Relaxed),
            unbound: shared.unbound_now.load(Ordering::Relaxed),
            buckets: shared.book.figures.buckets.load(Ordering::Relaxed),
        }
    }
}
