//! envoyproxy/ratelimit's stats sent out as its statsd sinks send them: plain statsd (tags as
//! `.__k=v` name suffixes, gostats') or DogStatsD (`|#k:v`, with upstream's mogrifiers), over UDP
//! or TCP, every flush interval.
//!
//! The sink never touches a call: it reads the counters the metrics already keep
//! ([`Metrics::compat_stats`]), sends what changed since the last flush (`lines.rs`), batched
//! into datagrams that do not fragment (`send.rs`); a receiver that is absent costs a counted,
//! once-logged send error per flush and nothing else.

mod lines;
pub mod mapper;
mod mogrify;
mod send;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub use mogrify::{Mogrifier, MogrifierError};

/// envoyproxy/ratelimit's `STATS_FLUSH_INTERVAL` default.
pub(crate) const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);

/// Where and how the stats are sent.
#[derive(Debug, Clone)]
pub struct StatsdSettings {
    /// The receiver, `host:port` (resolved at each connection, so a receiver that starts later
    /// is found).
    pub addr: String,
    /// UDP (datagrams of at most 1432 bytes) or TCP (one stream, reconnected quietly).
    pub protocol: StatsdProtocol,
    /// Plain statsd or DogStatsD lines.
    pub format: StatsdFormat,
    /// Tags on every stat (envoyproxy/ratelimit's EXTRA_TAGS), sent in key order.
    pub tags: Vec<(String, String)>,
    /// How often what changed is sent.
    pub flush_interval: Duration,
    /// DogStatsD only: the first whose pattern matches a stat's name renames it and adds tags.
    pub mogrifiers: Vec<Mogrifier>,
}

impl StatsdSettings {
    /// Plain statsd over UDP to `addr`, flushed every 10 s (envoyproxy/ratelimit's default).
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            protocol: StatsdProtocol::Udp,
            format: StatsdFormat::Statsd,
            tags: Vec::new(),
            flush_interval: DEFAULT_FLUSH_INTERVAL,
            mogrifiers: Vec::new(),
        }
    }
}

/// The transport to the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsdProtocol {
    /// Datagrams.
    Udp,
    /// A stream (gostats' default, so envoyproxy/ratelimit's).
    Tcp,
}

/// The line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsdFormat {
    /// `name.__tag=value:1|c`, as gostats writes it.
    Statsd,
    /// `name:1|c|#tag:value`, as the DogStatsD client writes it.
    DogStatsd,
}

/// Flushes every interval until `shutdown`, then once more after `drain` (the shutdown delay,
/// while the listeners still take calls), so the last calls' counts are sent too.
pub(crate) async fn run(
    settings: StatsdSettings,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let mut ticks = tokio::time::interval(settings.flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: nothing has been counted yet.
    ticks.tick().await;
    let mut lines = lines::Lines::new(&settings);
    let mut sender = send::Sender::new(&settings);
    loop {
        let last = tokio::select! {
            _ = ticks.tick() => false,
            () = shutdown.cancelled() => {
                tokio::time::sleep(drain).await;
                true
            }
        };
        let batch = lines.changed(&metrics.compat_stats());
        if !batch.is_empty() && !sender.send(&batch).await {
            metrics.record_statsd_send_error();
        }
        if last {
            return;
        }
    }
}
