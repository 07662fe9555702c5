//! Running the decision script for one call or for a batch of concurrent calls (group commit).
//!
//! A call goes straight to Redis, from its own task, while fewer than `max_in_flight` script
//! runs are outstanding, after one pass through the scheduler: the calls that became ready
//! meanwhile queue behind it and it leads their run (tests/redis/shared_runs.rs). Past that a
//! call waits in a queue, and the next run to finish sends everything queued as one script run
//! (up to `MAX_BATCH_CHARGES`) from a task of its own. So a lightly loaded store adds no delay,
//! and a busy one pays the script's fixed costs (dispatch, `TIME`, building its functions) and
//! a round trip once per batch instead of once per call. The script applies the calls of a
//! batch one after the other, each all-or-nothing on its own, exactly as separate runs in that
//! order.
//! A failed run fails every call in it. On Redis Cluster a script run may only touch keys of
//! one slot, so each slot has a batcher of its own ([`SlotBatchers`]): calls on a hot family
//! share runs as they do on one Redis.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use redis::cluster_routing::Slot as ClusterSlot;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::conn::Pool;
use super::eval::{Job, execute};
use super::script::Answered;
use crate::store::{BadReply, StoreError};

/// The most charges one script run applies (Redis runs nothing else meanwhile).
pub const MAX_BATCH_CHARGES: usize = 256;

/// One call's answer from a script run.
type Outcomes = Result<Vec<Answered>, StoreError>;
type ReplyTo = oneshot::Sender<Outcomes>;

/// A queued call.
struct Waiting {
    job: Job,
    /// When the call must have its answer (a timeout by then).
    deadline: Instant,
    reply: ReplyTo,
}

/// How a batcher's script runs go out: shared by every batcher of a store (one per slot on a
/// cluster).
#[derive(Clone)]
pub struct Runs {
    /// The connections the runs are sent on.
    pub pool: Arc<Pool>,
    /// The decision script's SHA1.
    pub sha: Arc<str>,
    /// At most this many runs outstanding per batcher before calls queue.
    pub max_in_flight: usize,
    /// Each call is answered within this long of joining.
    pub timeout: Duration,
}

/// Queues calls and sends them in script runs.
///
/// Every call is answered within `timeout` of joining, without a timer of its own: a call's
/// deadline is stamped under the queue's lock, so deadlines grow in queue order; runs take
/// calls from the front, and each run is bounded by the earliest deadline among its calls.
/// So the run ahead of a queued call ends by that call's deadline, and so does its own run.
pub struct Batcher {
    runs: Runs,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    in_flight: usize,
}

impl Batcher {
    /// A batcher sending its runs as `runs` says (at least one outstanding).
    pub fn new(mut runs: Runs) -> Arc<Self> {
        runs.max_in_flight = runs.max_in_flight.max(1);
        Arc::new(Self {
            runs,
            queue: Mutex::default(),
        })
    }

    /// Applies `job`: at once on the caller's task while fewer than `max_in_flight` runs are
    /// outstanding, else queued for the next batch.
    pub async fn submit(self: &Arc<Self>, job: Job) -> Result<Vec<Answered>, StoreError> {
        let answer = {
            let mut queue = self.queue.lock();
            let deadline = Instant::now() + self.runs.timeout;
            if queue.in_flight < self.runs.max_in_flight {
                queue.in_flight += 1;
                Err((job, deadline))
            } else {
                let (reply, answer) = oneshot::channel();
                queue.waiting.push(Waiting {
                    job,
                    deadline,
                    reply,
                });
                Ok(answer)
            }
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err((job, deadline)) => {
                // The slot is handed on (or released) when this run ends, even if the caller
                // stops waiting (a client that goes away drops this future mid-run).
                let mut slot = RunSlot(Some(self.clone()));
                // Calls already decoded, or read by the driver poll this yield brings, queue
                // behind this one meanwhile and share its run: a busy store's runs grow (each
                // pays the script's fixed costs and a round trip once), while an idle one only
                // passes through the scheduler once.
                tokio::task::yield_now().await;
                match slot.lead(job, deadline) {
                    Ok(answer) => answer,
                    Err(job) => {
                        let mut outcomes = self.run(std::slice::from_ref(&job), deadline).await?;
                        return outcomes
                            .pop()
                            .ok_or(StoreError::BadReply(BadReply::Missing));
                    }
                }
            }
        };
        answer.await.unwrap_or(Err(StoreError::Abandoned))
    }

    /// Sends `batch`, then whatever queued meanwhile, until the queue is empty; runs in its
    /// own task, so no caller going away can strand the calls of a batch.
    async fn drive(self: Arc<Self>, mut batch: Vec<Waiting>) {
        loop {
            self.send(batch).await;
            match self.next_batch() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// Sends the calls of `batch` still in time as one script run and answers each; those
    /// past their deadline are answered with a timeout, unsent.
    async fn send(&self, batch: Vec<Waiting>) {
        let now = Instant::now();
        let mut jobs = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        let mut deadline: Option<Instant> = None;
        for waiting in batch {
            if waiting.deadline <= now {
                let _ = waiting
                    .reply
                    .send(Err(StoreError::Timeout(self.runs.timeout)));
                continue;
            }
            deadline = Some(deadline.map_or(waiting.deadline, |d| d.min(waiting.deadline)));
            jobs.push(waiting.job);
            replies.push(waiting.reply);
        }
        let Some(deadline) = deadline else {
            return;
        };
        match self.run(&jobs, deadline).await {
            Ok(outcomes) => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// One script run for `jobs`, given up at `deadline` (a timeout; not sent at all when
    /// the deadline has passed).
    async fn run(&self, jobs: &[Job], deadline: Instant) -> Result<Vec<Vec<Answered>>, StoreError> {
        let timed_out = StoreError::Timeout(self.runs.timeout);
        if Instant::now() >= deadline {
            return Err(timed_out);
        }
        tokio::time::timeout_at(deadline, execute(&self.runs.pool, &self.runs.sha, jobs))
            .await
            .unwrap_or(Err(timed_out))
    }

    /// The queued calls to send next, or `None` (and one run slot fewer) when none wait.
    fn next_batch(&self) -> Option<Vec<Waiting>> {
        let mut queue = self.queue.lock();
        if queue.waiting.is_empty() {
            queue.in_flight -= 1;
            return None;
        }
        Some(take_batch(&mut queue))
    }
}

/// One batcher per Redis Cluster slot, made when a slot is first used (at most 16,384).
pub struct SlotBatchers {
    runs: Runs,
    by_slot: RwLock<HashMap<ClusterSlot, Arc<Batcher>, foldhash::fast::RandomState>>,
}

impl SlotBatchers {
    /// Batchers sending their runs as `runs` says (a cluster connection routes each run by its
    /// keys' slot).
    pub fn new(runs: Runs) -> Self {
        Self {
            runs,
            by_slot: RwLock::default(),
        }
    }

    /// The batcher of `slot`.
    pub fn of(&self, slot: ClusterSlot) -> Arc<Batcher> {
        if let Some(batcher) = self.by_slot.read().get(&slot) {
            return batcher.clone();
        }
        self.by_slot
            .write()
            .entry(slot)
            .or_insert_with(|| Batcher::new(self.runs.clone()))
            .clone()
    }
}

/// A run slot held by a caller running its own call: when the run ends, calls queued
/// meanwhile go out in a batch from a task of their own. `None` once handed to such a task.
struct RunSlot(Option<Arc<Batcher>>);

impl RunSlot {
    /// With calls queued behind it, `job` (due by `deadline`, the earliest: the others
    /// joined later) leads their batch, sent from a task of its own (so no caller going
    /// away strands the others) that takes this slot over: the answer comes back on the
    /// returned channel. With none, `job` comes back to run alone on this slot, which stays
    /// held.
    #[expect(
        clippy::result_large_err,
        reason = "the job comes back to the caller that moved it in; boxing it would cost every \
                  call a heap block"
    )]
    fn lead(&mut self, job: Job, deadline: Instant) -> Result<oneshot::Receiver<Outcomes>, Job> {
        let Some(batcher) = &self.0 else {
            return Err(job);
        };
        let (batch, answer) = {
            let mut queue = batcher.queue.lock();
            if queue.waiting.is_empty() {
                return Err(job);
            }
            let (reply, answer) = oneshot::channel();
            let leader = Waiting {
                job,
                deadline,
                reply,
            };
            queue.waiting.insert(0, leader);
            (take_batch(&mut queue), answer)
        };
        if let Some(batcher) = self.0.take() {
            spawn_drive(batcher, batch);
        }
        Ok(answer)
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        if let Some(batcher) = self.0.take()
            && let Some(batch) = batcher.next_batch()
        {
            spawn_drive(batcher, batch);
        }
    }
}

/// Sends `batch` and whatever queues after it from a task of its own, on a slot it holds.
fn spawn_drive(batcher: Arc<Batcher>, batch: Vec<Waiting>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(batcher.drive(batch));
        }
        // No runtime (it is shutting down): the queued calls get "abandoned".
        Err(_) => drop(batch),
    }
}

/// Takes queued calls up to `MAX_BATCH_CHARGES` charges (always at least one call).
fn take_batch(queue: &mut Queue) -> Vec<Waiting> {
    let mut charges = 0;
    let split = queue
        .waiting
        .iter()
        .position(|waiting| {
            charges += waiting.job.charges.len();
            charges > MAX_BATCH_CHARGES
        })
        .unwrap_or(queue.waiting.len())
        .max(1);
    let rest = queue.waiting.split_off(split);
    std::mem::replace(&mut queue.waiting, rest)
}
