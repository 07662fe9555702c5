//! Running the decision script for one call or for a batch of concurrent calls (group commit).
//!
//! A call goes straight to Redis, from its own task, while fewer than `max_in_flight` script
//! runs are outstanding, after one pass through the scheduler: the calls that became ready
//! meanwhile queue behind it and it leads their run (tests/redis/shared_runs.rs). Past that a
//! call waits in a queue, and the next run to finish sends everything queued as one script run
//! (up to `MAX_BATCH_CHARGES`) from a task of its own. So a lightly loaded store adds no delay,
//! and a busy one pays the script's fixed costs (dispatch, `TIME`, building its functions) and
//! a round trip once per batch instead of once per call. The script decides the calls of a
//! batch one after the other, each all-or-nothing on its own, exactly as separate runs in that
//! order.
//! A failed run fails every call in it. On Redis Cluster a script run may only touch keys of
//! one slot, so each slot has a batcher of its own ([`SlotBatchers`]): calls on a hot family
//! share runs as they do on one Redis.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use redis::cluster_routing::Slot as ClusterSlot;
use redis::{ErrorKind, ServerErrorKind, Value};
use tokio::sync::oneshot;

use super::link::{Lease, Link};
use super::scripts::{self, Answered, Fields};
use super::target::{Attempt, Conn};
use crate::store::{BadReply, StoreError};

/// The most charges one script run decides (Redis runs nothing else meanwhile).
pub const MAX_BATCH_CHARGES: usize = 256;

/// One call, encoded for the script.
pub struct Job {
    /// The call's distinct Redis keys.
    pub keys: Vec<Vec<u8>>,
    /// Its charges; key indices are 1-based into `keys`.
    pub charges: Vec<Fields>,
    /// Each charge's cost (to report what was available when admitted).
    pub costs: Vec<u64>,
    /// The call's time in microseconds; `None` for Redis's clock.
    pub now_us: Option<u64>,
}

/// One call's answer from a script run.
type Outcomes = Result<Vec<Answered>, StoreError>;
type Reply = oneshot::Sender<Outcomes>;

/// Queues calls and sends them in script runs.
pub struct Batcher {
    link: Arc<Link>,
    sha: String,
    max_in_flight: usize,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<(Job, Reply)>,
    in_flight: usize,
}

impl Batcher {
    /// A batcher sending on `link` the script whose SHA1 is `sha`, with at most
    /// `max_in_flight` runs outstanding.
    pub fn new(link: Arc<Link>, sha: String, max_in_flight: usize) -> Arc<Self> {
        Arc::new(Self {
            link,
            sha,
            max_in_flight: max_in_flight.max(1),
            queue: Mutex::default(),
        })
    }

    /// Decides `job`: at once on the caller's task while fewer than `max_in_flight` runs are
    /// outstanding, else queued for the next batch.
    pub async fn submit(self: &Arc<Self>, job: Job) -> Result<Vec<Answered>, StoreError> {
        let answer = {
            let mut queue = self.queue.lock();
            if queue.in_flight < self.max_in_flight {
                queue.in_flight += 1;
                Err(job)
            } else {
                let (reply, answer) = oneshot::channel();
                queue.waiting.push((job, reply));
                Ok(answer)
            }
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(job) => {
                // The slot is handed on (or released) when this run ends, even if the caller
                // stops waiting (its timeout drops this future mid-run).
                let mut slot = Slot(Some(self.clone()));
                // Calls already decoded, or read by the driver poll this yield brings, queue
                // behind this one meanwhile and share its run: a busy store's runs grow (each
                // pays the script's fixed costs and a round trip once), while an idle one only
                // passes through the scheduler once.
                tokio::task::yield_now().await;
                match slot.lead(job) {
                    Ok(answer) => answer,
                    Err(job) => {
                        let mut outcomes =
                            execute(&self.link, &self.sha, std::slice::from_ref(&job)).await?;
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
    /// own task, so no caller's timeout can strand the calls of a batch.
    async fn drive(self: Arc<Self>, mut batch: Vec<(Job, Reply)>) {
        loop {
            let (jobs, replies): (Vec<Job>, Vec<Reply>) = batch.into_iter().unzip();
            match execute(&self.link, &self.sha, &jobs).await {
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
            match self.next_batch() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// The queued calls to send next, or `None` (and one run slot fewer) when none wait.
    fn next_batch(&self) -> Option<Vec<(Job, Reply)>> {
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
    link: Arc<Link>,
    sha: String,
    max_in_flight: usize,
    by_slot: RwLock<HashMap<ClusterSlot, Arc<Batcher>, foldhash::fast::RandomState>>,
}

impl SlotBatchers {
    /// Batchers sending on `link` (a cluster connection routes each run by its keys' slot),
    /// each with at most `max_in_flight` runs outstanding.
    pub fn new(link: Arc<Link>, sha: String, max_in_flight: usize) -> Self {
        Self {
            link,
            sha,
            max_in_flight,
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
            .or_insert_with(|| {
                Batcher::new(self.link.clone(), self.sha.clone(), self.max_in_flight)
            })
            .clone()
    }
}

/// A run slot held by a caller running its own call: when the run ends, calls queued
/// meanwhile go out in a batch from a task of their own. `None` once handed to such a task.
struct Slot(Option<Arc<Batcher>>);

impl Slot {
    /// With calls queued behind it, `job` leads their batch, sent from a task of its own (so
    /// no caller's timeout strands the others) that takes this slot over: the answer comes
    /// back on the returned channel. With none, `job` comes back to run alone on this slot,
    /// which stays held.
    fn lead(&mut self, job: Job) -> Result<oneshot::Receiver<Outcomes>, Job> {
        let Some(batcher) = &self.0 else {
            return Err(job);
        };
        let (batch, answer) = {
            let mut queue = batcher.queue.lock();
            if queue.waiting.is_empty() {
                return Err(job);
            }
            let (reply, answer) = oneshot::channel();
            queue.waiting.insert(0, (job, reply));
            (take_batch(&mut queue), answer)
        };
        if let Some(batcher) = self.0.take() {
            spawn_drive(batcher, batch);
        }
        Ok(answer)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(batcher) = self.0.take()
            && let Some(batch) = batcher.next_batch()
        {
            spawn_drive(batcher, batch);
        }
    }
}

/// Sends `batch` and whatever queues after it from a task of its own, on a slot it holds.
fn spawn_drive(batcher: Arc<Batcher>, batch: Vec<(Job, Reply)>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(batcher.drive(batch));
        }
        // No runtime (it is shutting down): the queued calls get "abandoned".
        Err(_) => drop(batch),
    }
}

/// Takes queued calls up to `MAX_BATCH_CHARGES` charges (always at least one call).
fn take_batch(queue: &mut Queue) -> Vec<(Job, Reply)> {
    let mut charges = 0;
    let split = queue
        .waiting
        .iter()
        .position(|(job, _)| {
            charges += job.charges.len();
            charges > MAX_BATCH_CHARGES
        })
        .unwrap_or(queue.waiting.len())
        .max(1);
    let rest = queue.waiting.split_off(split);
    std::mem::replace(&mut queue.waiting, rest)
}

/// Sends `cmd` on a pooled connection. A connection found dead before the command left it
/// (it broke while Redis was away) drops its generation and the command goes to a live
/// connection, or a new one: a connection that broke earlier never fails a call.
async fn send(
    link: &Arc<Link>,
    cmd: &redis::Cmd,
) -> Result<(Lease, Conn, redis::RedisResult<Value>), StoreError> {
    let mut tries = link.size() + 1;
    loop {
        let (lease, mut conn) = link.get().await?;
        match conn.try_query(cmd).await {
            Attempt::Answered(reply) => return Ok((lease, conn, reply)),
            Attempt::Unsent(e) => {
                link.discard(lease);
                tries -= 1;
                if tries == 0 {
                    return Err(e.into());
                }
            }
        }
    }
}

/// Runs the script once for `jobs`, in order; returns each job's outcomes.
pub async fn execute(
    link: &Arc<Link>,
    sha: &str,
    jobs: &[Job],
) -> Result<Vec<Vec<Answered>>, StoreError> {
    // KEYS: the distinct keys of all the jobs; each job's key indices are remapped into them.
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut index: HashMap<&[u8], usize, foldhash::fast::RandomState> = HashMap::default();
    let remapped: Vec<Vec<usize>> = jobs
        .iter()
        .map(|job| {
            job.keys
                .iter()
                .map(|k| {
                    *index.entry(k.as_slice()).or_insert_with(|| {
                        keys.push(k);
                        keys.len()
                    })
                })
                .collect()
        })
        .collect();
    let command = |verb: &str, script: &str| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(keys.len());
        for key in &keys {
            cmd.arg(*key);
        }
        for (job, map) in jobs.iter().zip(&remapped) {
            let charges: Vec<Fields> = job
                .charges
                .iter()
                .map(|f| {
                    let mut f = *f;
                    f[0] = map[f[0] as usize - 1] as u64;
                    f
                })
                .collect();
            scripts::push_call(&mut cmd, job.now_us, &charges);
        }
        cmd
    };
    let (lease, mut conn, reply) = send(link, &command("EVALSHA", sha)).await?;
    let reply = match reply {
        // First use on this server (or after a restart / SCRIPT FLUSH): EVAL loads it.
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            conn.query(&command("EVAL", scripts::DECIDE)).await
        }
        other => other,
    };
    let reply = reply.inspect_err(|e| {
        if super::link::is_lost(e) {
            link.discard(lease);
        }
    })?;
    let mut rest = scripts::reply_bytes(&reply)?;
    jobs.iter()
        .map(|job| {
            let (mine, after) =
                rest.split_at(rest.len().min(job.costs.len() * scripts::REPLY_BYTES));
            rest = after;
            scripts::outcomes(mine, &job.costs).map_err(StoreError::from)
        })
        .collect()
}
