//! A stream's outbox: the answers for it, from its own reports or pushed by others, queued
//! without waiting.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;

use super::convert;
use crate::metrics::Metrics;
use crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use crate::quota::{Assignment, Push, Strategy};

/// Queues answers on a stream's response channel.
pub(super) struct Outbox {
    sender: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    metrics: Arc<Metrics>,
}

impl Outbox {
    pub(super) fn new(
        sender: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { sender, metrics }
    }

    /// Ends the stream with `status` if there is room to say so (a stream that does not read
    /// is ended without it).
    pub(super) fn fail(&self, status: Status) {
        let _ = self.sender.try_send(Err(status));
    }

    /// Whether the client has gone (the response side dropped).
    pub(super) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
}

impl Push for Outbox {
    fn push(&self, answers: Vec<Assignment>) -> bool {
        if answers.is_empty() {
            return true;
        }
        for answer in &answers {
            self.metrics.record_rlqs_action(action_label(answer));
        }
        self.sender
            .try_send(Ok(convert::response(&answers)))
            .is_ok()
    }
}

fn action_label(answer: &Assignment) -> &'static str {
    match answer {
        Assignment::Assign { strategy, .. } => match strategy {
            Strategy::AllowAll => "allow_all",
            Strategy::DenyAll => "deny_all",
            Strategy::TokenBucket { .. } => "token_bucket",
        },
        Assignment::Abandon { .. } => "abandon",
    }
}
