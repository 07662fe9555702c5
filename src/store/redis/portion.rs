//! Replicas' portions on Redis: replicas split each RLQS bucket's limit through one hash per
//! bucket, claimed by one atomic script run (`portion.lua`) per slot group.
//!
//! A bucket is `<prefix>quota:{<tag>}` (the key's word is Envoy's quota service, kept so that
//! replicas of two versions share a bucket), the tag a fixed 64-bit hash of its domain and
//! entries, so every replica names it alike and it is one Redis Cluster slot. Each replica holds
//! one field (its portion and floor in parts per million, until when each is reserved, its
//! demand); the script drops the fields of replicas that are no longer members, gives each claim
//! at most what the others' reservations leave, and keeps the hash only as long as its
//! longest membership. Portions travel as integers: the reservations of a bucket sum to at most
//! one million exactly, where floats would drift. Beside the buckets, one marker per store (per
//! slot on a cluster), `<prefix>quota-since`, says since when it holds portions: a store found
//! without it has lost them, and grants no more than each replica holds until all have claimed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::cluster_routing::Slot;

use super::conn::PoolHealth;
use super::eval::run_script;
use super::keys::{self, fnv1a};
use super::script::{self, MICRO};
use super::settings::RedisClock;
use crate::store::{BadReply, StoreError};
use crate::store::{BucketId, Claim, ClaimFuture, ClaimTerms, Claimed, PortionStore};
use crate::store::{RegionClaim, RegionClaimFuture, RegionTerms};

/// The claim script's source.
pub(super) const SOURCE: &str = include_str!("portion.lua");

/// A whole limit, in the script's parts per million.
pub(super) const WHOLE: f64 = 1_000_000.0;

/// The most buckets one script run claims: a long run would hold up every other command.
pub(super) const MAX_RUN: usize = 256;

/// Bytes of one bucket's answer: the portion (i64, ppm), the others' demand (f64), the others
/// (i64), the floor (i64, ppm), settling (i64, 0 or 1).
const REPLY_BYTES: usize = 40;

/// Redis Cluster's slots.
const SLOTS: usize = 16_384;

/// Replicas' portions on the Redis store's connections (no pool of its own).
pub struct RedisPortions {
    pub(super) health: Arc<PoolHealth>,
    pub(super) prefix: Box<[u8]>,
    pub(super) clock: RedisClock,
    cluster: bool,
    /// How long one claim may take before it fails with a timeout.
    pub(super) timeout: Duration,
    pub(super) sha: String,
}

impl RedisPortions {
    /// Portions under `prefix` (checked by the store: no braces) on `health`'s pool, timed by
    /// `clock`, split by slot on a `cluster`, each claim bounded by `timeout`.
    pub fn new(
        health: Arc<PoolHealth>,
        prefix: &str,
        clock: RedisClock,
        cluster: bool,
        timeout: Duration,
    ) -> Self {
        Self {
            health,
            prefix: prefix.as_bytes().into(),
            clock,
            cluster,
            timeout,
            sha: redis::Script::new(SOURCE).get_hash().to_owned(),
        }
    }

    /// The Redis key of `bucket` in `domain`.
    pub fn key(&self, domain: &str, bucket: &BucketId) -> Vec<u8> {
        bucket_key(&self.prefix, domain, bucket)
    }

    /// One claim: the buckets grouped by slot (one group on a standalone Redis), the groups'
    /// runs sent together; answers in claim order.
    async fn run(
        &self,
        terms: ClaimTerms<'_>,
        claims: &[Claim],
    ) -> Result<Vec<Claimed>, StoreError> {
        if self.health.is_open() {
            return Err(StoreError::CircuitOpen);
        }
        let now_us = match self.clock {
            RedisClock::Caller => Some(terms.now / MICRO),
            RedisClock::Server => None,
        };
        let keys: Vec<Vec<u8>> = claims
            .iter()
            .map(|c| self.key(&c.domain, &c.bucket))
            .collect();
        let groups = groups(&keys, self.cluster);
        let micros = |n: crate::clock::Nanos| (n / MICRO).max(1);
        let head = Head {
            replica: terms.replica,
            now_us,
            ttl_us: micros(terms.ttl),
            member_us: micros(terms.member_for.max(terms.ttl)),
            settle_us: terms.settle / MICRO,
        };
        let markers: Vec<Vec<u8>> = groups
            .iter()
            .map(|(slot, _)| marker_key(&self.prefix, *slot))
            .collect();
        let runs = (groups.iter().zip(&markers))
            .map(|((_, members), marker)| self.run_group(head, marker, members, &keys, claims));
        let results = futures_util::future::join_all(runs).await;
        let mut answers: Vec<Option<Claimed>> = vec![None; claims.len()];
        for ((_, members), result) in groups.iter().zip(results) {
            for (&i, claimed) in members.iter().zip(result?) {
                answers[i] = Some(claimed);
            }
        }
        answers
            .into_iter()
            .map(|a| a.ok_or(StoreError::BadReply(BadReply::Missing)))
            .collect()
    }

    /// One script run for the claims `members` (indices into `claims`, one slot, whose marker
    /// is `marker`).
    fn run_group<'a>(
        &'a self,
        head: Head<'a>,
        marker: &'a [u8],
        members: &'a [usize],
        keys: &'a [Vec<u8>],
        claims: &'a [Claim],
    ) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + 'a {
        let packed = pack_args(&head, members.iter().map(|&i| &claims[i]));
        async move {
            let command = |verb: &str, script: &str| {
                let mut cmd = redis::cmd(verb);
                cmd.arg(script).arg(members.len() + 1).arg(marker);
                for &i in members {
                    cmd.arg(keys[i].as_slice());
                }
                cmd.arg(head.replica).arg(packed.as_slice());
                cmd
            };
            let reply = run_script(self.health.pool(), &self.sha, SOURCE, command).await?;
            parse_reply(script::reply_bytes(&reply)?, members.len()).map_err(StoreError::from)
        }
    }
}

impl PortionStore for RedisPortions {
    fn claim<'a>(&'a self, terms: ClaimTerms<'a>, claims: &'a [Claim]) -> ClaimFuture<'a> {
        Box::pin(async move {
            if claims.is_empty() {
                return Ok(Vec::new());
            }
            tokio::time::timeout(self.timeout, self.run(terms, claims))
                .await
                .unwrap_or(Err(StoreError::Timeout(self.timeout)))
                .map_err(|e| Box::new(e) as _)
        })
    }

    fn claim_in_region<'a>(
        &'a self,
        terms: RegionTerms<'a>,
        claims: &'a [RegionClaim],
    ) -> RegionClaimFuture<'a> {
        Box::pin(async move {
            tokio::time::timeout(self.timeout, self.run_in_region(terms, claims))
                .await
                .unwrap_or(Err(StoreError::Timeout(self.timeout)))
                .map_err(|e| Box::new(e) as _)
        })
    }
}

/// What every script run of one claim carries besides its buckets.
#[derive(Clone, Copy)]
struct Head<'a> {
    replica: &'a str,
    /// The claim's time in microseconds; `None` for Redis's clock.
    now_us: Option<u64>,
    ttl_us: u64,
    member_us: u64,
    settle_us: u64,
}

/// `<prefix>quota:{<tag>}`: the tag a stable 64-bit FNV-1a hash of the domain and the
/// bucket's entries, length-prefixed (so `a=bc` and `ab=c` differ) and in sorted order (a
/// `BucketId` iterates sorted: the map's insertion order does not matter).
pub fn bucket_key(prefix: &[u8], domain: &str, bucket: &BucketId) -> Vec<u8> {
    let tag = bucket_tag(domain, bucket);
    let mut key = Vec::with_capacity(prefix.len() + 24);
    key.extend_from_slice(prefix);
    key.extend_from_slice(b"quota:{");
    key.extend_from_slice(format!("{tag:016x}").as_bytes());
    key.push(b'}');
    key
}

/// The fixed 64-bit FNV-1a hash of a bucket's identity (`store::bucket_identity`).
pub(super) fn bucket_tag(domain: &str, bucket: &BucketId) -> u64 {
    fnv1a(&crate::store::bucket_identity(domain, bucket))
}

/// The marker of the store, or of one `slot` of a cluster: `<prefix>quota-since`, with a hash tag
/// of that slot on a cluster (a script run may touch one slot only).
pub fn marker_key(prefix: &[u8], slot: Option<Slot>) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 24);
    key.extend_from_slice(prefix);
    key.extend_from_slice(b"quota-since");
    if let Some(tag) = slot.and_then(|slot| slot_tags().get(&slot)) {
        key.extend_from_slice(format!(":{{{tag}}}").as_bytes());
    }
    key
}

/// For each cluster slot the smallest number whose decimal text hashes to it: the hash tag of
/// that slot's marker. Built once (about 170,000 hashes).
fn slot_tags() -> &'static HashMap<Slot, u32> {
    static TAGS: OnceLock<HashMap<Slot, u32>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = HashMap::with_capacity(SLOTS);
        let mut n = 0u32;
        while tags.len() < SLOTS {
            tags.entry(keys::slot(n.to_string().as_bytes()))
                .or_insert(n);
            n += 1;
        }
        tags
    })
}

/// The claims' indices grouped into script runs: by slot on a cluster (a run may touch one
/// slot only), at most [`MAX_RUN`] each; each group with its slot (`None` off a cluster).
fn groups(keys: &[Vec<u8>], cluster: bool) -> Vec<(Option<Slot>, Vec<usize>)> {
    let mut by_slot: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let slot = cluster.then(|| keys::slot(key));
        match by_slot
            .iter_mut()
            .find(|(s, members)| *s == slot && members.len() < MAX_RUN)
        {
            Some((_, members)) => members.push(i),
            None => by_slot.push((slot, vec![i])),
        }
    }
    by_slot
}

/// A wanted fraction in parts per million, rounded down (never more than asked): 0 for
/// anything below 0 or not a number, a million for anything above 1.
pub fn to_ppm(fraction: f64) -> i64 {
    if fraction.is_nan() {
        return 0;
    }
    (fraction.clamp(0.0, 1.0) * WHOLE).floor() as i64
}

/// The script's binary argument: now (-1 for Redis's clock), ttl, member for, settle, then each
/// claim's wanted portion (ppm), demand (a negative or non-finite demand counts as none) and
/// held portion (ppm).
fn pack_args<'a>(head: &Head<'_>, claims: impl ExactSizeIterator<Item = &'a Claim>) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + 32 * claims.len());
    let word = |n: u64| i64::try_from(n).unwrap_or(i64::MAX).to_le_bytes();
    let now = head
        .now_us
        .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    out.extend_from_slice(&now.to_le_bytes());
    for micros in [head.ttl_us, head.member_us, head.settle_us] {
        out.extend_from_slice(&word(micros));
    }
    for claim in claims {
        let demand = if claim.demand.is_finite() {
            claim.demand.max(0.0)
        } else {
            0.0
        };
        out.extend_from_slice(&to_ppm(claim.wanted).to_le_bytes());
        out.extend_from_slice(&demand.to_le_bytes());
        // Held comes back from the store's own parts per million: the nearest, not below.
        let held = (claim.held.clamp(0.0, 1.0) * WHOLE).round();
        out.extend_from_slice(&(if held.is_nan() { 0 } else { held as i64 }).to_le_bytes());
        out.extend_from_slice(&word(claim.reserve_longer / MICRO));
    }
    out
}

/// The script's answer for `count` buckets.
fn parse_reply(bytes: &[u8], count: usize) -> Result<Vec<Claimed>, BadReply> {
    if bytes.len() != count * REPLY_BYTES {
        return Err(BadReply::Length {
            expected: count * REPLY_BYTES / 8,
            got: bytes.len() / 8,
        });
    }
    let word = |b: &[u8]| -> [u8; 8] { b.try_into().expect("8-byte chunks") };
    bytes
        .chunks_exact(REPLY_BYTES)
        .map(|f| {
            let int = |at: usize| i64::from_le_bytes(word(&f[at..at + 8]));
            let (portion, others, floor) = (int(0), int(16), int(24));
            let lowest = portion.min(others).min(floor);
            if lowest < 0 {
                return Err(BadReply::Negative(lowest));
            }
            Ok(Claimed {
                portion: (portion as f64 / WHOLE).min(1.0),
                others_demand: f64::from_le_bytes(word(&f[8..16])),
                others: u32::try_from(others).unwrap_or(u32::MAX),
                floor: (floor as f64 / WHOLE).min(1.0),
                settling: int(32) != 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
