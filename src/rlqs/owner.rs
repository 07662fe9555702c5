//! The book's owner: a thread of its own that runs every operation on the book, one after the
//! other, from a bounded queue of commands; its clock once a second; and every rule reload as
//! it is announced. Nothing else touches the book, so no lock is held and no runtime worker
//! that answers RLS calls ever waits on it.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::Nanos;
use crate::rules::RuleSet;
use crate::store::{Claim, Claimed};

use super::assign::{BucketId, Outbox, StreamId, Usage};
use super::book::{Book, Key};
use super::view::{Page, PageQuery};

/// Commands queued for the book before a sender waits: a burst of reports from every stream.
const QUEUE: usize = 4_096;

/// How often the book's clock runs.
const TICK: Duration = Duration::from_secs(1);

/// One operation for the book.
pub(crate) enum Command {
    Open {
        id: StreamId,
        domain: Arc<str>,
        peer: Option<IpAddr>,
        outbox: Box<dyn Outbox>,
    },
    Report {
        id: StreamId,
        usages: Vec<Usage>,
    },
    Close {
        id: StreamId,
    },
    Page {
        query: PageQuery,
        reply: oneshot::Sender<Page>,
    },
    Claims {
        reply: oneshot::Sender<(Vec<Key>, Vec<Claim>)>,
    },
    Claimed {
        at: Nanos,
        keys: Vec<Key>,
        answers: Vec<Claimed>,
    },
    Reshare {
        buckets: Vec<(Arc<str>, BucketId)>,
    },
}

/// The longest the owner waits, at shutdown, for the streams' ends to go out.
const DRAIN_AT_MOST: Duration = Duration::from_secs(5);

/// The book's figures, kept by its owner (and the streams) for anyone to read.
#[derive(Default)]
pub(crate) struct Figures {
    pub buckets: AtomicUsize,
    /// Streams whose answers are still being sent (their translating task runs).
    pub sending: AtomicUsize,
}

/// The way to the book: commands queued to its owner.
#[derive(Clone)]
pub(crate) struct BookHandle {
    commands: mpsc::Sender<Command>,
    pub figures: Arc<Figures>,
}

impl BookHandle {
    /// Queues `command`, waiting while the queue is full; `false` once the owner has stopped.
    pub(crate) async fn send(&self, command: Command) -> bool {
        self.commands.send(command).await.is_ok()
    }

    /// Queues `command` if there is room, without waiting (from a `Drop`); the owner's clock
    /// catches what this misses (a stream whose client went is closed at its next tick).
    pub(crate) fn try_send(&self, command: Command) {
        let _ = self.commands.try_send(command);
    }

    /// A page of the book, built by its owner; `None` once it has stopped.
    pub(crate) async fn page(&self, query: PageQuery) -> Option<Page> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Page { query, reply }).await;
        answer.await.ok()
    }

    /// This replica's claims, gathered by the owner; `None` once it has stopped.
    pub(crate) async fn claims(&self) -> Option<(Vec<Key>, Vec<Claim>)> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Claims { reply }).await;
        answer.await.ok()
    }
}

/// What [`start`] returns: the way to the book, the runtime of its thread (the streams' own
/// work runs there too, off the request workers), and a receiver that resolves when the thread
/// ends.
pub(crate) struct Started {
    pub handle: BookHandle,
    pub runtime: tokio::runtime::Handle,
    pub finished: oneshot::Receiver<()>,
}

/// Starts the owner of `book` on a thread of its own, resolving buckets against the rules
/// `rules` announces, until `stop` is cancelled; `claim_due` is woken when a claim should not
/// wait for its second.
pub(crate) fn start(
    book: Book,
    rules: watch::Receiver<Arc<RuleSet>>,
    claim_due: Option<Arc<Notify>>,
    stop: CancellationToken,
) -> std::io::Result<Started> {
    let (commands, queue) = mpsc::channel(QUEUE);
    let figures = Arc::new(Figures::default());
    let handle = BookHandle {
        commands,
        figures: figures.clone(),
    };
    let (done, finished) = oneshot::channel();
    let owner = Owner {
        book,
        queue,
        rules,
        figures,
        claim_due,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let spawner = runtime.handle().clone();
    std::thread::Builder::new()
        .name("sluice-rlqs".into())
        .spawn(move || {
            // Envoys hold their assignments for seconds: the book's answers can wait their turn.
            crate::priority::lower_this_thread("the RLQS book's thread");
            runtime.block_on(owner.run(stop));
            // The streams' tasks still running end with the runtime.
            drop(runtime);
            let _ = done.send(());
        })?;
    Ok(Started {
        handle,
        runtime: spawner,
        finished,
    })
}

/// A clock that ticks every `period`, a late tick delaying the next ones (never a burst).
pub(crate) fn every(period: Duration) -> tokio::time::Interval {
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every
}

struct Owner {
    book: Book,
    queue: mpsc::Receiver<Command>,
    rules: watch::Receiver<Arc<RuleSet>>,
    figures: Arc<Figures>,
    claim_due: Option<Arc<Notify>>,
}

impl Owner {
    async fn run(mut self, stop: CancellationToken) {
        let mut every = every(TICK);
        let mut watching = true;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return self.drain().await,
                command = self.queue.recv() => match command {
                    Some(command) => self.handle(command),
                    None => return,
                },
                _ = every.tick() => self.book.tick(),
                changed = self.rules.changed(), if watching => match changed {
                    Ok(()) => {
                        let rules = self.rules.borrow_and_update().clone();
                        self.book.reload(rules);
                    }
                    // The rules can no longer change.
                    Err(_) => watching = false,
                },
            }
            let (_, buckets) = self.book.load();
            self.figures.buckets.store(buckets, Ordering::Relaxed);
            if self.book.claim_due()
                && let Some(due) = &self.claim_due
            {
                due.notify_one();
            }
        }
    }

    /// At shutdown, every stream ends at once: the owner goes on taking commands (their ends)
    /// until the last stream's end has gone out to its client (`figures.sending` is 0), for
    /// [`DRAIN_AT_MOST`] at most, so that the runtime the streams run on is not dropped under
    /// them before their clients are told.
    async fn drain(&mut self) {
        let until = tokio::time::Instant::now() + DRAIN_AT_MOST;
        while self.figures.sending.load(Ordering::Relaxed) > 0 {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return,
                command = self.queue.recv() => match command {
                    Some(command) => self.handle(command),
                    None => return,
                },
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Open {
                id,
                domain,
                peer,
                outbox,
            } => self.book.open(id, domain, peer, outbox),
            Command::Report { id, usages } => self.book.report(id, &usages),
            Command::Close { id } => self.book.close(id),
            Command::Page { query, reply } => {
                let _ = reply.send(self.book.page(query));
            }
            Command::Claims { reply } => {
                let _ = reply.send(self.book.claims());
            }
            Command::Claimed { at, keys, answers } => self.book.claimed(at, &keys, &answers),
            Command::Reshare { buckets } => self.book.reshare(&buckets),
        }
    }
}
