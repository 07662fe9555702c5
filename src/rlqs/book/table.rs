//! The book's buckets: each numbered once, found by its domain and id, listed in the order the
//! book first saw them, and those whose split is not delivered yet.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::clock::Nanos;
use crate::rlqs::assign::BucketId;
use crate::rlqs::view::{MAX_PAGE, Page, PageQuery};
use crate::rules::bucket::BucketAction;

use super::bucket::Bucket;

/// A bucket's number in the book (streams list buckets by number, not by their maps).
pub(crate) type Key = u64;

/// Every bucket the book holds.
#[derive(Default)]
pub(crate) struct Table {
    next: Key,
    /// By domain, then by id: found without copying either.
    index: HashMap<Arc<str>, HashMap<BucketId, Key>>,
    /// By number, so a page of them is a range, however many there are.
    buckets: BTreeMap<Key, Bucket>,
    /// Buckets to re-split at the next tick: a report moved a holder's share, or the last split
    /// is not all delivered yet.
    pub unsettled: HashSet<Key>,
}

impl Table {
    /// The number of bucket `id` of `domain`, if the book holds it.
    pub(crate) fn find(&self, domain: &Arc<str>, id: &BucketId) -> Option<Key> {
        self.index.get(domain)?.get(id).copied()
    }

    /// The number of bucket `id` of `domain`, made with the action `resolve` gives if new;
    /// `true` with it when it is new.
    pub(crate) fn make(
        &mut self,
        domain: &Arc<str>,
        id: &BucketId,
        resolve: impl FnOnce() -> BucketAction,
        now: Nanos,
    ) -> (Key, bool) {
        if let Some(key) = self.find(domain, id) {
            return (key, false);
        }
        self.next += 1;
        let key = self.next;
        let bucket = Bucket::new(domain.clone(), id.clone(), resolve(), now);
        (self.index.entry(domain.clone()).or_default()).insert(id.clone(), key);
        self.buckets.insert(key, bucket);
        (key, true)
    }

    pub(crate) fn get(&self, key: Key) -> Option<&Bucket> {
        self.buckets.get(&key)
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut Bucket> {
        self.buckets.get_mut(&key)
    }

    /// Drops a bucket.
    pub(crate) fn remove(&mut self, key: Key) {
        if let Some(bucket) = self.buckets.remove(&key)
            && let Some(ids) = self.index.get_mut(&bucket.domain)
        {
            ids.remove(&bucket.id);
            if ids.is_empty() {
                self.index.remove(&bucket.domain);
            }
        }
        self.unsettled.remove(&key);
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &Bucket)> {
        self.buckets.iter().map(|(&k, b)| (k, b))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (Key, &mut Bucket)> {
        self.buckets.iter_mut().map(|(&k, b)| (k, b))
    }

    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// The page `query` asks for, with `streams` open: at most [`MAX_PAGE`] buckets, so the
    /// work is bounded whatever the book holds.
    pub(crate) fn page(&self, query: PageQuery, streams: usize) -> Page {
        let limit = query.limit.clamp(1, MAX_PAGE);
        let from = query.after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut range = self.buckets.range((from, Bound::Unbounded));
        let buckets = range.by_ref().take(limit).map(|(_, b)| b.view()).collect();
        let last = self.buckets.range((from, Bound::Unbounded)).nth(limit - 1);
        let next = range.next().and(last.map(|(&k, _)| k));
        Page {
            count: self.buckets.len(),
            streams,
            buckets,
            next,
        }
    }
}
