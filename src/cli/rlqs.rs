//! `sluice serve` flags of the RLQS wing: how many streams it serves and how many buckets each.

use clap::Args;
use sluice::app::Settings;
use sluice::rlqs::{MAX_BUCKETS_PER_STREAM, MAX_STREAMS};

/// RLQS caps.
#[derive(Debug, Args)]
pub struct RlqsArgs {
    /// The most RLQS streams bound to a domain at once (one per Envoy); past it a new stream
    /// ends with RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_RLQS_MAX_STREAMS", default_value_t = MAX_STREAMS, value_parser = parse_cap)]
    pub rlqs_max_streams: usize,
    /// The most buckets one RLQS stream may report; a report past it ends the stream with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM", default_value_t = MAX_BUCKETS_PER_STREAM, value_parser = parse_cap)]
    pub rlqs_max_buckets_per_stream: usize,
}

impl RlqsArgs {
    /// Writes these flags into `settings`.
    pub fn apply(&self, settings: &mut Settings) {
        settings.rlqs.max_streams = self.rlqs_max_streams;
        settings.rlqs.max_buckets_per_stream = self.rlqs_max_buckets_per_stream;
    }
}

/// A cap: a whole number of at least 1.
fn parse_cap(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{text}' is not a whole number of at least 1")),
    }
}
