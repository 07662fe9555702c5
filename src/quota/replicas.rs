//! Replicas sharing a store split each limit: the portion this replica may hand out per bucket,
//! claimed in the store once a second ([`claim_once`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::clock::Nanos;
use crate::rules::bucket::QuotaRate;

use super::book::QuotaBook;
use super::limits::HELD_FOR;
use super::portion::Portion;
use crate::store::{BucketId, Claim, ClaimError, ClaimTerms, Claimed, PortionStore};

/// A portion that moved by less than this is not worth a re-split.
const MATERIAL: f64 = 0.01;

/// The bucket of one domain.
type BucketOf = (Arc<str>, BucketId);

/// The portions this replica last claimed, per bucket.
#[derive(Default)]
pub struct Portions {
    held: Mutex<LastClaims>,
}

/// Each bucket's last claim and until when it holds.
#[derive(Default)]
struct LastClaims {
    by_bucket: HashMap<BucketOf, (Claimed, Nanos)>,
    /// The most other replicas seen on any bucket lately: a new bucket's first guess.
    others: u32,
}

impl Portions {
    fn state(&self) -> std::sync::MutexGuard<'_, LastClaims> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Portion for Portions {
    /// The last portion claimed while it holds; before the first claim (or after Redis has been
    /// away past a portion's life) an equal part among the replicas seen lately.
    fn portion(&self, domain: &str, bucket: &BucketId, _: &QuotaRate, _: f64) -> f64 {
        let state = self.state();
        let key = (Arc::<str>::from(domain), bucket.clone());
        match state.by_bucket.get(&key) {
            Some((claimed, _)) => claimed.portion,
            None => 1.0 / f64::from(state.others + 1),
        }
    }
}

/// The fraction of a limit of `rate` requests a second a replica whose streams ask `demand`
/// should claim, beside `others` replicas asking `others_demand`: everything it asks plus an
/// equal part of what nobody asks when the limit covers all, else its part in proportion to
/// demand. With no demand known anywhere, an equal part.
pub fn wanted(rate: f64, demand: f64, others_demand: f64, others: u32) -> f64 {
    let replicas = f64::from(others + 1);
    let total = demand + others_demand;
    let fraction = if rate <= 0.0 || total <= 0.0 {
        1.0 / replicas
    } else if total <= rate {
        (demand + (rate - total) / replicas) / rate
    } else {
        demand / total
    };
    fraction.clamp(0.0, 1.0)
}

/// One claim: every enforced bucket this replica's streams hold, claimed in `store`; records the
/// portions (each good for [`HELD_FOR`]) and re-splits the buckets whose portion moved.
pub async fn claim_once(
    book: &QuotaBook,
    portions: &Portions,
    store: &dyn PortionStore,
    replica: &str,
    now: Nanos,
) -> Result<usize, ClaimError> {
    let claims = claims(book, portions);
    let ids: Vec<BucketOf> = claims
        .iter()
        .map(|c| (Arc::<str>::from(c.domain.as_str()), c.bucket.clone()))
        .collect();
    let terms = ClaimTerms {
        replica,
        now,
        ttl: HELD_FOR,
        member_for: HELD_FOR,
        settle: 0,
    };
    let answer = store.claim(terms, &claims).await;
    let moved = {
        let mut state = portions.state();
        state
            .by_bucket
            .retain(|id, (_, until)| *until > now && ids.contains(id));
        let Ok(answers) = answer else {
            return answer.map(|_| 0);
        };
        state.others = answers.iter().map(|c| c.others).max().unwrap_or(0);
        let mut moved = Vec::new();
        for (id, claimed) in ids.into_iter().zip(answers) {
            let before = state.by_bucket.get(&id).map(|(c, _)| c.portion);
            if before.is_none_or(|p| (p - claimed.portion).abs() >= MATERIAL) {
                moved.push(id.clone());
            }
            state.by_bucket.insert(id, (claimed, now + HELD_FOR));
        }
        moved
    };
    book.reshare(&moved);
    Ok(moved.len())
}

/// This replica's claims: every bucket of an enforced limit with its streams' summed demand.
fn claims(book: &QuotaBook, portions: &Portions) -> Vec<Claim> {
    let state = portions.state();
    book.snapshot()
        .into_iter()
        .filter_map(|view| {
            let rate = view.limit?;
            let per_second = rate.per_second();
            let demand: f64 = view
                .holders
                .iter()
                .filter(|h| h.reporting)
                .map(|h| h.demand_per_second.unwrap_or(per_second))
                .sum();
            let key = (view.domain.clone(), view.bucket.clone());
            let last = state.by_bucket.get(&key);
            let (others_demand, others) =
                last.map_or((0.0, state.others), |(c, _)| (c.others_demand, c.others));
            Some(Claim {
                domain: view.domain.to_string(),
                bucket: view.bucket,
                demand,
                wanted: wanted(per_second, demand, others_demand, others),
                held: last.map_or(0.0, |(c, _)| c.portion),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
