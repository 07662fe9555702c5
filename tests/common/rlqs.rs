//! A test client of Envoy's quota service (RLQS): one stream, reports sent by hand, answers read
//! with a deadline, and what they hold in a form a test can compare.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use sluice::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use sluice::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use sluice::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use sluice::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use sluice::proto::well_known;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;

/// One RLQS domain whose buckets (`tenant=…`) share 100 a second, a burst of 100.
pub const HUNDRED_A_SECOND: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 100 }
"#;

/// One RLQS domain whose buckets (`tenant=…`) share 10 a second, a burst of 10.
pub const TEN_A_SECOND: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 10 }
"#;

/// How long a test waits for an answer it expects.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// What one bucket action told the Envoy, flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Told {
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// A token bucket: (max_tokens, tokens_per_fill, fill_interval seconds).
    Bucket(u32, u32, i64),
    /// `abandon_action`.
    Abandon,
}

impl Told {
    /// The token bucket's rate in tokens per second (0 for anything else).
    pub fn rate(&self) -> f64 {
        match self {
            Told::Bucket(_, per_fill, seconds) => f64::from(*per_fill) / *seconds as f64,
            _ => 0.0,
        }
    }

    /// The token bucket's capacity (0 for anything else).
    pub fn max_tokens(&self) -> u32 {
        match self {
            Told::Bucket(max, _, _) => *max,
            _ => 0,
        }
    }
}

/// One HTTP/2 connection to the server at `addr`.
pub async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

/// One RLQS stream to a server.
pub struct RlqsStream {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    /// The TTL (seconds) of the last assignment read for each bucket.
    ttls: HashMap<Bucket, i64>,
}

/// A bucket id, sorted (the wire's map cannot be a map key).
pub type Bucket = BTreeMap<String, String>;

/// A bucket id from `entries`.
pub fn bucket(entries: &[(&str, &str)]) -> Bucket {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A usage entry: `allowed` and `denied` over `elapsed_s` seconds.
pub fn usage(id: Bucket, elapsed_s: i64, allowed: u64, denied: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: id.into_iter().collect(),
        }),
        time_elapsed: Some(well_known::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

impl RlqsStream {
    /// Opens a stream to the server at `addr`; `Err` is the status the call was refused with.
    pub async fn open(addr: SocketAddr) -> Result<Self, tonic::Status> {
        Self::open_on(channel(addr).await).await
    }

    /// Opens a stream on `channel` (one connection carries many streams).
    pub async fn open_on(channel: Channel) -> Result<Self, tonic::Status> {
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, outgoing) = mpsc::channel(16);
        let answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(outgoing))
            .await?
            .into_inner();
        Ok(Self {
            reports,
            answers,
            ttls: HashMap::new(),
        })
    }

    /// Sends one report message.
    pub async fn send(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        assert!(self.try_send(domain, usages).await, "stream open");
    }

    /// Sends one report message; `false` once the stream has ended.
    pub async fn try_send(&self, domain: &str, usages: Vec<BucketQuotaUsage>) -> bool {
        let message = RateLimitQuotaUsageReports {
            domain: domain.to_string(),
            bucket_quota_usages: usages,
        };
        self.reports.send(message).await.is_ok()
    }

    /// The next response; panics when none comes in time or the stream ends.
    pub async fn next(&mut self) -> HashMap<Bucket, Told> {
        match self.try_next().await {
            Ok(Some(told)) => told,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// Responses merged until every bucket of `ids` has been told something (the last word for
    /// each); panics when that takes too long.
    pub async fn until(&mut self, ids: &[&Bucket]) -> HashMap<Bucket, Told> {
        let mut told = HashMap::new();
        while !ids.iter().all(|id| told.contains_key(*id)) {
            told.extend(self.next().await);
        }
        told
    }

    /// The next response, `Ok(None)` when the stream ended cleanly, `Err` with its status.
    pub async fn try_next(&mut self) -> Result<Option<HashMap<Bucket, Told>>, tonic::Status> {
        self.try_next_within(ANSWER_LIMIT).await
    }

    /// As [`RlqsStream::try_next`], waiting up to `limit` (panics past it).
    pub async fn try_next_within(
        &mut self,
        limit: Duration,
    ) -> Result<Option<HashMap<Bucket, Told>>, tonic::Status> {
        let next = tokio::time::timeout(limit, self.answers.message())
            .await
            .expect("an answer in time")?;
        Ok(next.map(|response| self.read(response)))
    }

    /// The TTL in seconds of the last assignment read for bucket `id`.
    pub fn ttl(&self, id: &Bucket) -> Option<i64> {
        self.ttls.get(id).copied()
    }

    /// A response flattened, its TTLs noted.
    fn read(&mut self, response: RateLimitQuotaResponse) -> HashMap<Bucket, Told> {
        for action in &response.bucket_action {
            if let (Some(id), Some(Action::QuotaAssignmentAction(assign))) =
                (&action.bucket_id, &action.bucket_action)
                && let Some(ttl) = &assign.assignment_time_to_live
            {
                self.ttls
                    .insert(id.bucket.clone().into_iter().collect(), ttl.seconds);
            }
        }
        flatten(response)
    }

    /// Every response that arrives within `wait`, merged (the last word for each bucket).
    pub async fn drain(&mut self, wait: Duration) -> HashMap<Bucket, Told> {
        let until = tokio::time::Instant::now() + wait;
        let mut told = HashMap::new();
        while let Ok(Ok(Some(response))) =
            tokio::time::timeout_at(until, self.answers.message()).await
        {
            told.extend(self.read(response));
        }
        told
    }

    /// Whether a response arrives within `wait` (for "nothing is pushed" checks, which can only
    /// be bounded).
    pub async fn quiet_for(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.answers.message())
            .await
            .is_err()
    }

    /// Ends the sending side (as an Envoy closing its stream).
    pub fn close(self) -> Streaming<RateLimitQuotaResponse> {
        drop(self.reports);
        self.answers
    }
}

fn flatten(response: RateLimitQuotaResponse) -> HashMap<Bucket, Told> {
    response
        .bucket_action
        .into_iter()
        .map(|action| {
            let told = match action.bucket_action.expect("an action") {
                Action::AbandonAction(_) => Told::Abandon,
                Action::QuotaAssignmentAction(assign) => {
                    let ttl = assign.assignment_time_to_live.expect("a TTL");
                    // Two report intervals, the shortest of which is a second.
                    assert!(ttl.seconds >= 2, "TTL under two seconds: {ttl:?}");
                    strategy(assign.rate_limit_strategy.and_then(|s| s.strategy))
                }
            };
            let id = action.bucket_id.expect("a bucket id").bucket;
            (id.into_iter().collect(), told)
        })
        .collect()
}

fn strategy(strategy: Option<Strategy>) -> Told {
    match strategy {
        Some(Strategy::BlanketRule(rule)) if rule == BlanketRule::DenyAll as i32 => Told::DenyAll,
        Some(Strategy::BlanketRule(_)) | None => Told::AllowAll,
        Some(Strategy::TokenBucket(bucket)) => Told::Bucket(
            bucket.max_tokens,
            bucket.tokens_per_fill.map_or(0, |t| t.value),
            bucket.fill_interval.map_or(0, |d| d.seconds),
        ),
        Some(Strategy::RequestsPerTimeUnit(_)) => {
            panic!("Envoy 1.40 ignores requests_per_time_unit")
        }
    }
}
