//! A call's way to the script runs: its charges placed under their Redis keys, grouped by
//! Redis Cluster slot, encoded as jobs and submitted to the batchers; answers in call order.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use smallvec::SmallVec;

use super::batch::{Batcher, Runs, SlotBatchers};
use super::conn::Pool;
use super::eval::{Job, run_command};
use super::keys::{self, KeyLayout};
use super::script::{self, Answered, NamedWindow};
use super::settings::RedisClock;
use crate::clock::Nanos;
use crate::store::{BadReply, Charge, StoreError};

/// A charge's Redis key, and its window when the key names it (envoyproxy/ratelimit's layout,
/// a calendar limit).
type Placed = (Vec<u8>, Option<NamedWindow>);

/// How calls share script runs.
enum Batching {
    /// One Redis (or Sentinel's master): any calls may share a run.
    Standalone(Arc<Batcher>),
    /// Redis Cluster: a call is split by slot, and only runs of one slot are shared.
    Cluster(SlotBatchers),
}

/// Where a call's charges go: their keys, and the batchers that run them.
pub struct Route {
    layout: KeyLayout,
    batching: Batching,
    clock: RedisClock,
    /// The runs' pool and timeout, for the plain commands of a reset.
    pool: Arc<Pool>,
    timeout: Duration,
    cluster: bool,
}

impl Route {
    /// Charges named by `layout`, sent as `runs` (split by slot on a `cluster`), timed by
    /// `clock`.
    pub fn new(layout: KeyLayout, runs: Runs, cluster: bool, clock: RedisClock) -> Self {
        let (pool, timeout) = (runs.pool.clone(), runs.timeout);
        let batching = if cluster {
            Batching::Cluster(SlotBatchers::new(runs))
        } else {
            Batching::Standalone(Batcher::new(runs))
        };
        Self {
            layout,
            batching,
            clock,
            pool,
            timeout,
            cluster,
        }
    }

    /// Deletes the Redis keys of `charges` at `now` (an admin reset): one `DEL` per slot group
    /// on a cluster (a command may touch one slot only), one in all otherwise, sent together
    /// and bounded by the timeout. Returns how many keys existed.
    pub async fn delete(&self, charges: &[Charge], now: Nanos) -> Result<u64, StoreError> {
        let mut groups: Vec<(Option<Slot>, Vec<Vec<u8>>)> = Vec::new();
        for charge in charges {
            let key = self.layout.place(charge, now).0;
            let slot = self.cluster.then(|| keys::slot(&key));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, keys)) if keys.contains(&key) => {}
                Some((_, keys)) => keys.push(key),
                None => groups.push((slot, vec![key])),
            }
        }
        let deletes = groups.iter().map(|(_, keys)| async move {
            let mut cmd = redis::cmd("DEL");
            for key in keys {
                cmd.arg(key.as_slice());
            }
            let reply = run_command(&self.pool, &cmd).await?;
            redis::from_redis_value::<u64>(reply)
                .map_err(|_| StoreError::BadReply(BadReply::Missing))
        });
        let all = futures_util::future::try_join_all(deletes);
        let counts = tokio::time::timeout(self.timeout, all)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.timeout)))?;
        Ok(counts.into_iter().sum())
    }

    /// Runs the script once per slot group (once in all for a standalone Redis); `extras`:
    /// hits each charge asks to lease (empty for none).
    pub async fn run(
        &self,
        charges: &[Charge],
        extras: &[u64],
        now: Nanos,
    ) -> Result<Vec<Answered>, StoreError> {
        let now_us = match self.clock {
            RedisClock::Caller => Some(now / script::MICRO),
            RedisClock::Server => None,
        };
        let placed = charges
            .iter()
            .enumerate()
            .map(|(i, c)| (i, self.layout.place(c, now)));
        let batchers = match &self.batching {
            // A standalone Redis takes the call whole: its outcomes are in call order.
            Batching::Standalone(batcher) => {
                return batcher.submit(job(placed, charges, extras, now_us)).await;
            }
            Batching::Cluster(batchers) => batchers,
        };
        // A cluster splits the call by slot.
        let mut groups: Vec<(Slot, Vec<(usize, Placed)>)> = Vec::new();
        for (i, placed) in placed {
            let slot = keys::slot(&placed.0);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push((i, placed)),
                None => groups.push((slot, vec![(i, placed)])),
            }
        }
        if groups.len() == 1
            && let Some((slot, members)) = groups.pop()
        {
            // One slot group: its outcomes are in call order.
            let job = job(members.into_iter(), charges, extras, now_us);
            return batchers.of(slot).submit(job).await;
        }
        // Boxed: the rare split call's state would otherwise enlarge every call's future
        // (which is moved into its box whole).
        Box::pin(run_groups(batchers, groups, charges, extras, now_us)).await
    }
}

/// A cluster call's slot groups, run concurrently; outcomes in call order.
async fn run_groups(
    batchers: &SlotBatchers,
    groups: Vec<(Slot, Vec<(usize, Placed)>)>,
    charges: &[Charge],
    extras: &[u64],
    now_us: Option<u64>,
) -> Result<Vec<Answered>, StoreError> {
    let mut members_of = Vec::with_capacity(groups.len());
    let mut jobs = Vec::with_capacity(groups.len());
    for (slot, members) in groups {
        members_of.push(members.iter().map(|(i, _)| *i).collect::<Vec<usize>>());
        jobs.push((
            batchers.of(slot),
            job(members.into_iter(), charges, extras, now_us),
        ));
    }
    let runs = jobs
        .into_iter()
        .map(|(batcher, job)| async move { batcher.submit(job).await });
    let results = futures_util::future::join_all(runs).await;
    let mut outcomes: Vec<Option<Answered>> = vec![None; charges.len()];
    for (members, result) in members_of.iter().zip(results) {
        for (&i, outcome) in members.iter().zip(result?) {
            outcomes[i] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.ok_or(StoreError::BadReply(BadReply::Missing)))
        .collect()
}

/// One script run's share for the charges `members` (each a charge's index into `charges`,
/// with its placed key; all in one slot on a cluster). A key named twice is sent once.
fn job(
    members: impl Iterator<Item = (usize, Placed)>,
    charges: &[Charge],
    extras: &[u64],
    now_us: Option<u64>,
) -> Job {
    let mut job = Job {
        keys: SmallVec::new(),
        charges: SmallVec::new(),
        costs: SmallVec::new(),
        now_us,
    };
    for (i, (key, named)) in members {
        let at = match job.keys.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                job.keys.push(key);
                job.keys.len() - 1
            }
        };
        let fields = match named {
            Some(window) => script::named_fields(&charges[i], at + 1, &window),
            None => script::fields(&charges[i], at + 1),
        };
        let extra = extras.get(i).copied().unwrap_or(0);
        job.charges.push(script::with_extra(fields, extra));
        job.costs.push(charges[i].cost);
    }
    job
}
