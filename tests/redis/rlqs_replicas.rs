//! Two sluice replicas on one Redis share one RLQS limit: an Envoy stream on each, and the
//! shares they hand out settle, through the portion each replica claims in Redis, to about half
//! each and never more than the limit together.

use std::time::Duration;

use crate::common::TestServer;
use crate::common::redis::RedisServer;
use crate::common::rlqs::{Bucket, RlqsStream, bucket, usage};

const RULES: &str = crate::common::rlqs::TEN_A_SECOND;

/// The last rate each stream was told for `id`, after reading for a while.
async fn settled(streams: &mut [RlqsStream; 2], id: &Bucket, last: &mut [f64; 2]) {
    let [a, b] = streams;
    let wait = Duration::from_secs(2);
    let (told_a, told_b) = tokio::join!(a.drain(wait), b.drain(wait));
    for (i, told) in [told_a, told_b].into_iter().enumerate() {
        if let Some(told) = told.get(id) {
            last[i] = told.rate();
        }
    }
}

#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn two_replicas_split_one_limit() {
    let redis = RedisServer::start();
    let first = TestServer::start_on(RULES, crate::store(&redis.url()).await).await;
    let second = TestServer::start_on(RULES, crate::store(&redis.url()).await).await;
    let id = bucket(&[("tenant", "acme")]);
    let mut streams = [
        RlqsStream::open(first.grpc_addr).await.unwrap(),
        RlqsStream::open(second.grpc_addr).await.unwrap(),
    ];
    let mut last = [0.0; 2];
    for (i, stream) in streams.iter_mut().enumerate() {
        stream.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
        last[i] = stream.until(&[&id]).await[&id].rate();
    }
    // Both keep asking for more than the limit, as Envoys report every 5 s.
    for _ in 0..10 {
        for stream in &streams {
            stream
                .send("quota", vec![usage(id.clone(), 5, 40, 40)])
                .await;
        }
        settled(&mut streams, &id, &mut last).await;
        if last.iter().all(|r| (3.0..=7.0).contains(r)) && last[0] + last[1] <= 10.0 + 1e-9 {
            break;
        }
    }
    assert!(last[0] + last[1] <= 10.0 + 1e-9, "shares {last:?} of 10/s");
    assert!(
        last.iter().all(|r| (3.0..=7.0).contains(r)),
        "shares {last:?} of 10/s"
    );
}
