//! Replicas sharing a store split each limit: the portion this replica may hand out per bucket,
//! renewed through the store's exchange once a second ([`exchange_once`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::clock::Nanos;
use crate::rules::bucket::QuotaRate;

use super::assign::BucketId;
use super::book::QuotaBook;
use super::limits::HELD_FOR;
use super::portion::Portion;
use crate::store::{Claim, ExchangeError, Granted, QuotaExchange};

/// A portion that moved by less than this is not worth a re-split.
const MATERIAL: f64 = 0.01;

/// The bucket of one domain.
type BucketOf = (Arc<str>, BucketId);

/// The portions the exchange last granted this replica.
#[derive(Default)]
pub struct SharedPortions {
    granted: Mutex<Grants>,
}

#[derive(Default)]
struct Grants {
    by_bucket: HashMap<BucketOf, (Granted, Nanos)>,
    /// The most other replicas seen on any bucket lately: a new bucket's first guess.
    others: u32,
}

impl SharedPortions {
    fn state(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Portion for SharedPortions {
    /// The last grant while it lasts; before the first (or after Redis has been away past a
    /// grant's life) an equal part among the replicas seen lately.
    fn portion(&self, domain: &str, bucket: &BucketId, _: &QuotaRate, _: f64) -> f64 {
        let state = self.state();
        let key = (Arc::<str>::from(domain), bucket.clone());
        match state.by_bucket.get(&key) {
            Some((granted, _)) => granted.portion,
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

/// One exchange: claims every enforced bucket this replica's streams hold, records the grants
/// (each good for [`HELD_FOR`]) and re-splits the buckets whose portion moved.
pub async fn exchange_once(
    book: &QuotaBook,
    portions: &SharedPortions,
    exchange: &dyn QuotaExchange,
    replica: &str,
    now: Nanos,
) -> Result<usize, ExchangeError> {
    let claims = claims(book, portions);
    let ids: Vec<BucketOf> = claims
        .iter()
        .map(|c| (Arc::<str>::from(c.domain.as_str()), c.bucket.clone()))
        .collect();
    let answer = exchange.exchange(replica, &claims, HELD_FOR, now).await;
    let moved = {
        let mut state = portions.state();
        state
            .by_bucket
            .retain(|id, (_, until)| *until > now && ids.contains(id));
        let Ok(grants) = answer else {
            return answer.map(|_| 0);
        };
        state.others = grants.iter().map(|g| g.others).max().unwrap_or(0);
        let mut moved = Vec::new();
        for (id, granted) in ids.into_iter().zip(grants) {
            let before = state.by_bucket.get(&id).map(|(g, _)| g.portion);
            if before.is_none_or(|p| (p - granted.portion).abs() >= MATERIAL) {
                moved.push(id.clone());
            }
            state.by_bucket.insert(id, (granted, now + HELD_FOR));
        }
        moved
    };
    book.reshare(&moved);
    Ok(moved.len())
}

/// This replica's claims: every bucket of an enforced limit with its streams' summed demand.
fn claims(book: &QuotaBook, portions: &SharedPortions) -> Vec<Claim> {
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
            let (others_demand, others) = state
                .by_bucket
                .get(&key)
                .map_or((0.0, state.others), |(g, _)| (g.others_demand, g.others));
            Some(Claim {
                domain: view.domain.to_string(),
                bucket: view.bucket,
                demand,
                wanted: wanted(per_second, demand, others_demand, others),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
