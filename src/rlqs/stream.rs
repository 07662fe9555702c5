//! One RLQS stream's life, whatever carries it: bound to its domain by a first report that
//! must come within a bound, a place among the bound streams taken, each report handed to the
//! book, its answers queued for the client, and the stream ended (the client told why) when it
//! breaks a rule, falls behind, or the server shuts down; its shares given back however it
//! ends.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::assign::{Outbox, Outgoing, RlqsError, StreamId, Usage};
use super::limits::MAX_DOMAIN_BYTES;
use super::owner::Command;

/// One message of a stream, as the transport read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A usage report.
    Report(Report),
    /// A message the transport could not read or that Envoy's own validation would refuse:
    /// the stream ends with this as the reason (gRPC `INVALID_ARGUMENT`).
    Invalid(String),
    /// The client's side of the stream broke (it ends quietly).
    Broken,
}

/// One usage report: the domain it names (empty after the first, as Envoy may send it) and
/// each bucket's usage.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// The domain; the first report binds the stream to it.
    pub domain: String,
    /// Each bucket's counts.
    pub usages: Vec<Usage>,
}

/// A stream's messages, as the transport reads them.
pub type Reports = Pin<Box<dyn Stream<Item = Incoming> + Send>>;

/// What goes out on a stream: answers, then at most one error that ends it.
type Answers = Pin<Box<dyn Stream<Item = Result<Outgoing, RlqsError>> + Send>>;

/// What goes out on a stream, as the transport translated it.
pub type Translated<T> = Pin<Box<dyn Stream<Item = T> + Send>>;

/// Translated answers waiting for the transport to send them.
const TRANSLATED_AHEAD: usize = 8;

/// How a stream ends: why (if sluice ended it), and the signal that it has.
#[derive(Default)]
struct End {
    reason: OnceLock<RlqsError>,
    token: CancellationToken,
    /// Set once its first report has bound it.
    bound: AtomicBool,
}

/// The streams awaiting their first report, oldest first: when too many wait, the oldest is
/// ended to make room, so streams that never speak cannot keep an Envoy (which reports at once)
/// from opening one. Entries of streams that have bound or ended are dropped as they reach the
/// front.
#[derive(Default)]
pub(super) struct Waiting {
    queue: Mutex<VecDeque<Weak<End>>>,
}

impl Waiting {
    /// Adds `end`'s stream; if `crowded`, first ends the oldest stream still waiting.
    fn admit(&self, end: &Arc<End>, crowded: bool) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = |e: &Weak<End>| {
            e.upgrade()
                .filter(|e| !e.bound.load(Ordering::Relaxed) && !e.token.is_cancelled())
        };
        while let Some(front) = queue.front() {
            match waiting(front) {
                Some(oldest) if crowded => {
                    oldest.finish(RlqsError::Exhausted(
                        "too many RLQS streams await their first report: the oldest is ended"
                            .into(),
                    ));
                    queue.pop_front();
                    break;
                }
                Some(_) => break,
                None => {
                    queue.pop_front();
                }
            }
        }
        queue.push_back(Arc::downgrade(end));
    }
}

impl End {
    /// Ends the stream with `error`, unless it has already ended.
    fn finish(&self, error: RlqsError) {
        let _ = self.reason.set(error);
        self.token.cancel();
    }

    /// Ends the stream with no error (the client ended it).
    fn quietly(&self) {
        self.token.cancel();
    }
}

/// A stream's queue, as the book sees it.
struct Queue {
    answers: mpsc::Sender<Outgoing>,
    end: Arc<End>,
}

impl Outbox for Queue {
    fn send(&self, out: Outgoing) -> bool {
        if out.answers.is_empty() && out.reported.is_none() {
            return true;
        }
        self.answers.try_send(out).is_ok()
    }

    fn end(&self, error: RlqsError) {
        self.end.finish(error);
    }

    fn is_gone(&self) -> bool {
        self.answers.is_closed()
    }
}

/// Serves one stream of `reports` from `peer`: its task is spawned on the book's runtime, and
/// so is the translation of its answers.
pub(super) fn serve<T, F>(
    shared: &Arc<Shared>,
    peer: Option<IpAddr>,
    reports: Reports,
    mut translate: F,
) -> Translated<T>
where
    T: Send + 'static,
    F: FnMut(Result<Outgoing, RlqsError>) -> Option<T> + Send + 'static,
{
    let (answers, queued) = mpsc::channel(shared.settings.max_pending_answers.max(1));
    let end = Arc::new(End::default());
    let crowded = shared.unbound_now.load(Ordering::Relaxed) >= shared.settings.max_unbound_streams;
    shared.waiting.admit(&end, crowded);
    let id = StreamId(shared.next_stream.fetch_add(1, Ordering::Relaxed));
    let count = Counted::new(shared.clone());
    let stream = Served {
        shared: shared.clone(),
        id,
        peer,
        end: end.clone(),
        count,
    };
    shared.runtime.spawn(stream.run(reports, answers));
    let mut answers = answers_of(queued, end);
    let (translated, ready) = mpsc::channel(TRANSLATED_AHEAD);
    let sending = Sending::new(shared.book.figures.clone());
    shared.runtime.spawn(async move {
        let _sending = sending;
        while let Some(item) = answers.next().await {
            let Some(out) = translate(item) else {
                continue;
            };
            // The client has gone: dropping the answers closes the stream's queue.
            if translated.send(out).await.is_err() {
                return;
            }
        }
    });
    Box::pin(futures_util::stream::unfold(
        ready,
        |mut ready| async move { Some((ready.recv().await?, ready)) },
    ))
}

/// Counts a stream whose answers are still being sent, so that shutdown waits for its end to
/// go out.
struct Sending(Arc<super::owner::Figures>);

impl Sending {
    fn new(figures: Arc<super::owner::Figures>) -> Sending {
        figures.sending.fetch_add(1, Ordering::Relaxed);
        Sending(figures)
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.sending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a stream among the open ones (and the unbound ones until it binds) while it lives.
struct Counted {
    shared: Arc<Shared>,
    bound: bool,
}

impl Counted {
    fn new(shared: Arc<Shared>) -> Counted {
        shared.open.fetch_add(1, Ordering::Relaxed);
        shared.unbound_now.fetch_add(1, Ordering::Relaxed);
        Counted {
            shared,
            bound: false,
        }
    }

    fn bind(&mut self) {
        if !std::mem::replace(&mut self.bound, true) {
            self.shared.unbound_now.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.shared.open.fetch_sub(1, Ordering::Relaxed);
        if !self.bound {
            self.shared.unbound_now.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One stream being served.
struct Served {
    shared: Arc<Shared>,
    id: StreamId,
    peer: Option<IpAddr>,
    end: Arc<End>,
    count: Counted,
}

impl Served {
    async fn run(mut self, mut reports: Reports, answers: mpsc::Sender<Outgoing>) {
        let within = self.shared.settings.first_report_within;
        let first = tokio::select! {
            _ = self.shared.shutdown.cancelled() => return self.end.finish(RlqsError::ShuttingDown),
            _ = tokio::time::sleep(within) => return self.end.finish(RlqsError::Silent(within)),
            // Ended to make room for newer streams.
            _ = self.end.token.cancelled() => return,
            first = reports.next() => first,
        };
        let report = match first {
            Some(Incoming::Report(report)) => report,
            Some(Incoming::Invalid(reason)) => return self.end.finish(RlqsError::Invalid(reason)),
            Some(Incoming::Broken) | None => return self.end.quietly(),
        };
        let domain = match check_domain(&report.domain) {
            Ok(()) => Arc::<str>::from(report.domain.as_str()),
            Err(error) => return self.end.finish(error),
        };
        let Ok(_place) = self.shared.bound.clone().try_acquire_owned() else {
            let max = self.shared.settings.max_streams;
            return self.end.finish(RlqsError::Exhausted(format!(
                "this server holds its maximum of {max} RLQS streams"
            )));
        };
        self.end.bound.store(true, Ordering::Relaxed);
        self.count.bind();
        let queue = Queue {
            answers,
            end: self.end.clone(),
        };
        let book = self.shared.book.clone();
        let opened = Command::Open {
            id: self.id,
            domain: domain.clone(),
            peer: self.peer,
            outbox: Box::new(queue),
        };
        if !book.send(opened).await {
            return self.end.finish(RlqsError::ShuttingDown);
        }
        tracing::debug!(domain = ?domain, stream = self.id.0, "RLQS stream opened");
        let _close = CloseOnDrop {
            book: book.clone(),
            id: self.id,
        };
        self.serve_reports(report, &domain, &mut reports).await;
        book.send(Command::Close { id: self.id }).await;
        tracing::debug!(domain = ?domain, stream = self.id.0, "RLQS stream closed");
    }

    /// Hands `first` and every later report to the book until the stream ends.
    async fn serve_reports(&mut self, first: Report, domain: &Arc<str>, reports: &mut Reports) {
        let book = self.shared.book.clone();
        let id = self.id;
        let mut next = Some(first);
        while let Some(report) = next.take() {
            if !report.domain.is_empty() && *report.domain != **domain {
                return self.end.finish(RlqsError::Invalid(format!(
                    "this RLQS stream is bound to domain {:?}; open a new stream for {:?}",
                    domain,
                    bounded(&report.domain)
                )));
            }
            let usages = report.usages;
            if !book.send(Command::Report { id, usages }).await {
                return self.end.finish(RlqsError::ShuttingDown);
            }
            next = tokio::select! {
                _ = self.shared.shutdown.cancelled() => {
                    return self.end.finish(RlqsError::ShuttingDown);
                }
                // The book ended it (it fell behind, or broke a cap).
                _ = self.end.token.cancelled() => return,
                message = reports.next() => match message {
                    Some(Incoming::Report(report)) => Some(report),
                    Some(Incoming::Invalid(reason)) => {
                        return self.end.finish(RlqsError::Invalid(reason));
                    }
                    Some(Incoming::Broken) | None => return self.end.quietly(),
                },
            };
        }
    }
}

/// Tells the book of a stream's end even when its task is dropped before it could (the
/// runtime shutting down): without waiting, so at worst the book's clock finds it gone.
struct CloseOnDrop {
    book: super::owner::BookHandle,
    id: StreamId,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.book.try_send(Command::Close { id: self.id });
    }
}

/// A stream's domain: named, at most [`MAX_DOMAIN_BYTES`] (as an RLS call's), and without
/// control characters (it reaches logs, metric labels and the operator page).
fn check_domain(domain: &str) -> Result<(), RlqsError> {
    if domain.is_empty() {
        return Err(RlqsError::Invalid(
            "the first report of a RLQS stream must name its domain".into(),
        ));
    }
    if domain.len() > MAX_DOMAIN_BYTES {
        return Err(RlqsError::Invalid(format!(
            "the domain is {} bytes long (at most {MAX_DOMAIN_BYTES})",
            domain.len()
        )));
    }
    if domain.chars().any(char::is_control) {
        return Err(RlqsError::Invalid(format!(
            "the domain {:?} holds a control character",
            bounded(domain)
        )));
    }
    Ok(())
}

/// At most the first 64 characters of `text`, for a message that quotes it.
fn bounded(text: &str) -> String {
    const SHOWN: usize = 64;
    match text.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The answers of a stream: what is queued for it, then, once it has ended, its reason (if
/// sluice ended it) — after everything queued before the end, never after a wait on the book.
fn answers_of(queued: mpsc::Receiver<Outgoing>, end: Arc<End>) -> Answers {
    let state = (queued, end, false);
    Box::pin(futures_util::stream::unfold(
        state,
        |(mut queued, end, done)| async move {
            if done {
                return None;
            }
            let next = tokio::select! {
                biased;
                next = queued.recv() => next,
                _ = end.token.cancelled() => queued.try_recv().ok(),
            };
            match next {
                Some(out) => Some((Ok(out), (queued, end, false))),
                None => {
                    let reason = end.reason.get().cloned();
                    reason.map(|error| (Err(error), (queued, end, true)))
                }
            }
        },
    ))
}
