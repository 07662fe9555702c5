//! A stream's usage report in the book: new buckets resolved, demand recorded, the buckets
//! re-split, and the stream's own answers.

use std::collections::HashSet;

use crate::rules::bucket::QuotaAction;

use super::assign::{BucketId, StreamId, Usage};
use super::ledger::{Ledger, assign};
use super::limits::MAX_BUCKETS_PER_STREAM;
use super::view::{QuotaError, Reported, Tally};

impl Ledger {
    /// See [`QuotaBook::report`](super::QuotaBook::report).
    pub(crate) fn report(
        &mut self,
        stream: StreamId,
        usages: &[Usage],
        resolve: &dyn Fn(&BucketId) -> QuotaAction,
    ) -> Result<Reported, QuotaError> {
        let now = self.clock.now();
        let domain = match self.streams.get(&stream) {
            Some(s) => s.domain.clone(),
            None => return Err(QuotaError::UnknownStream),
        };
        self.check_cap(stream, usages)?;
        let mut keys = Vec::with_capacity(usages.len());
        let mut tallies = Vec::with_capacity(usages.len());
        for usage in usages {
            let key = self.key(&domain, &usage.bucket, resolve, now);
            let first = match self.streams.get_mut(&stream) {
                Some(s) => s.buckets.insert(key),
                None => false,
            };
            if first {
                self.returning(usage.elapsed, now);
            }
            let Some(bucket) = self.buckets.get_mut(&key) else {
                continue;
            };
            bucket.last_report = now;
            let offered = usage.allowed.saturating_add(usage.denied);
            let holder = bucket.holder(stream, now);
            holder.demand.record(offered, usage.elapsed);
            holder.last_report = now;
            holder.reporting = true;
            let shadow_refused = match (&mut bucket.shadow, &bucket.action) {
                (Some(shadow), QuotaAction::Limited { rate, .. }) => {
                    shadow.charge(rate, offered, now)
                }
                _ => 0,
            };
            tallies.push(Tally {
                rule: bucket.action.rule().cloned(),
                allowed: usage.allowed,
                denied: usage.denied,
                shadow_refused,
            });
            keys.push(key);
        }
        let mut touched = keys.clone();
        touched.sort_unstable();
        touched.dedup();
        self.settle(&touched, Some(stream));
        let mut answers = Vec::with_capacity(keys.len());
        for key in keys {
            let held_back = match self.buckets.get(&key) {
                Some(bucket) => self.held_back(bucket),
                None => continue,
            };
            let Some(bucket) = self.buckets.get_mut(&key).filter(|_| !held_back) else {
                continue;
            };
            if let Some(strategy) = bucket.answer(stream, now) {
                answers.push(assign(&bucket.id, strategy));
            }
        }
        Ok(Reported { answers, tallies })
    }

    /// Refuses a report that would leave the stream with more than
    /// [`MAX_BUCKETS_PER_STREAM`] buckets, before anything is recorded.
    fn check_cap(&self, stream: StreamId, usages: &[Usage]) -> Result<(), QuotaError> {
        let Some(s) = self.streams.get(&stream) else {
            return Err(QuotaError::UnknownStream);
        };
        let too_many = QuotaError::TooManyBuckets {
            limit: MAX_BUCKETS_PER_STREAM,
        };
        if usages.len() <= MAX_BUCKETS_PER_STREAM.saturating_sub(s.buckets.len()) {
            return Ok(());
        }
        let mut new: HashSet<&BucketId> = HashSet::new();
        for usage in usages {
            let known = self
                .index
                .get(&(s.domain.clone(), usage.bucket.clone()))
                .is_some_and(|key| s.buckets.contains(key));
            if !known {
                new.insert(&usage.bucket);
            }
            if s.buckets.len() + new.len() > MAX_BUCKETS_PER_STREAM {
                return Err(too_many);
            }
        }
        Ok(())
    }
}
