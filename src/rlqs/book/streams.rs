//! The streams the book serves, and the ones that ended lately: an Envoy whose stream broke
//! reconnects with the same buckets, and its new stream takes over what the old one held.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::clock::Nanos;
use crate::rlqs::assign::{Outbox, StreamId};
use crate::rlqs::limits::LONGEST_HELD_FOR;

use super::interval::Cadence;
use super::table::Key;

/// One open stream.
pub(crate) struct Stream {
    pub domain: Arc<str>,
    /// The address its client connected from (`None`: a unix socket, or unknown).
    pub peer: Option<IpAddr>,
    pub outbox: Box<dyn Outbox>,
    /// The buckets it holds (counted against its cap).
    pub buckets: HashSet<Key>,
    /// Whether it has reported yet.
    pub reported: bool,
    /// How often it reports, as its last report showed: where it holds a new bucket, the
    /// holder starts from it.
    pub every: Cadence,
}

/// A stream that ended while it held shares its Envoy may still be spending.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Departed {
    pub stream: StreamId,
    pub domain: Arc<str>,
    pub peer: Option<IpAddr>,
    pub ended: Nanos,
    pub buckets: Vec<Key>,
}

/// Open streams, and the departed ones whose shares are still reserved.
#[derive(Default)]
pub(crate) struct Streams {
    open: HashMap<StreamId, Stream>,
    departed: Vec<Departed>,
}

impl Streams {
    pub(crate) fn insert(&mut self, id: StreamId, stream: Stream) {
        self.open.insert(id, stream);
    }

    pub(crate) fn get(&self, id: StreamId) -> Option<&Stream> {
        self.open.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.open.get_mut(&id)
    }

    pub(crate) fn contains(&self, id: StreamId) -> bool {
        self.open.contains_key(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Streams whose client has gone without the book being told (it is told of each end, but
    /// a message may be lost when the process is busy).
    pub(crate) fn gone(&self) -> Vec<StreamId> {
        (self.open.iter())
            .filter(|(_, s)| s.outbox.is_gone())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Takes stream `id` out of the open ones.
    pub(crate) fn remove(&mut self, id: StreamId) -> Option<Stream> {
        self.open.remove(&id)
    }

    /// Remembers a stream that ended holding reserved shares in `buckets`.
    pub(crate) fn depart(&mut self, departed: Departed) {
        if !departed.buckets.is_empty() {
            self.departed.push(departed);
        }
    }

    /// The departed stream a new stream of `domain` from `peer` continues: its first report
    /// covers time (the Envoy held its buckets before) for every bucket the departed one still
    /// holds a share of (`holds`), as an Envoy reports every bucket it tracks. The most recent
    /// such stream is taken out of the list; `None` when there is none.
    pub(crate) fn predecessor(
        &mut self,
        domain: &str,
        peer: Option<IpAddr>,
        covered: &HashSet<Key>,
        holds: impl Fn(StreamId, Key) -> bool,
    ) -> Option<Departed> {
        let at = (self.departed.iter().enumerate())
            .filter(|(_, d)| &*d.domain == domain && d.peer == peer)
            .filter(|(_, d)| {
                let mut held = d.buckets.iter().filter(|&&k| holds(d.stream, k)).peekable();
                held.peek().is_some() && held.all(|k| covered.contains(k))
            })
            .max_by_key(|(_, d)| d.ended)
            .map(|(at, _)| at)?;
        Some(self.departed.swap_remove(at))
    }

    /// Forgets departed streams whose shares have all expired by `now` (kept as long as the
    /// longest TTL may run: a take-over checks the share is still held anyway).
    pub(crate) fn prune(&mut self, now: Nanos) {
        self.departed.retain(|d| now < d.ended + LONGEST_HELD_FOR);
    }
}
