//! Envoy's quota service (RLQS) in process: a real server on port 0 with a manual clock, streams
//! opened by a tonic client that reports as Envoy 1.40 does.

use crate::common;

use std::time::Duration;

use common::rlqs::{RlqsStream, Told, bucket, usage};
use common::{TestServer, sample};
use sluice::clock::SECOND;
use sluice::rlqs::{HELD_FOR, WARM_UP};
use sluice::store::MemoryStore;
use std::sync::Arc;
use tonic::Code;

/// A server whose RLQS book is past its warm-up (no shares of a counted limit are handed out
/// in the first seconds after a start; the book's once-a-second tick ends it).
async fn warmed() -> TestServer {
    let server = TestServer::start(RULES).await;
    server.advance(Duration::from_nanos(WARM_UP) + Duration::from_secs(1));
    server
}

const RULES: &str = r#"
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 20 }
  - key: tenant
    value: internal
    rate_limit: { unlimited: true }
  - key: tenant
    value: suspended
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: shadowed
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1 }
"#;

/// A first report without a domain ends the stream with INVALID_ARGUMENT.
#[tokio::test]
async fn a_stream_must_name_its_domain() {
    let server = warmed().await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream
        .send("", vec![usage(bucket(&[("tenant", "a")]), 0, 1, 0)])
        .await;
    let status = stream.try_next().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("domain"), "{status:?}");
}

/// A later report naming another domain ends the stream with INVALID_ARGUMENT.
#[tokio::test]
async fn a_stream_keeps_its_domain() {
    let server = warmed().await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream
        .send("quota", vec![usage(bucket(&[("tenant", "a")]), 0, 1, 0)])
        .await;
    stream.next().await;
    stream
        .send("other", vec![usage(bucket(&[("tenant", "a")]), 5, 1, 0)])
        .await;
    let status = stream.try_next().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
}

/// One stream holds the whole limit: 1 token a second, the burst of 20, a TTL past the report
/// interval; the blanket rules follow the rule kinds.
#[tokio::test]
async fn one_stream_gets_the_whole_limit_and_blanket_rules() {
    let server = warmed().await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    let (limited, internal) = (
        bucket(&[("tenant", "a")]),
        bucket(&[("tenant", "internal")]),
    );
    let (suspended, unknown) = (bucket(&[("tenant", "suspended")]), bucket(&[("x", "y")]));
    let ids = [&limited, &internal, &suspended, &unknown];
    let usages = ids.iter().map(|id| usage((*id).clone(), 0, 1, 0)).collect();
    stream.send("quota", usages).await;
    let told = stream.until(&ids).await;
    let share = &told[&limited];
    assert_eq!(share.max_tokens(), 20, "{share:?}");
    assert!((share.rate() - 1.0).abs() < 1e-9, "{share:?}");
    assert_eq!(told[&internal], Told::AllowAll);
    assert_eq!(told[&suspended], Told::DenyAll);
    assert_eq!(told[&unknown], Told::AllowAll);
}

/// Two streams asking alike split the limit; the first is pushed its smaller share without
/// reporting, and the rates never add up to more than the limit. When one ends, the other is
/// pushed the whole limit back once the leaver's assignment has expired (its Envoy may still be
/// spending it).
#[tokio::test]
async fn two_streams_share_one_limit_and_a_departure_gives_it_back() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut first = RlqsStream::open(server.grpc_addr).await.unwrap();
    first.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    assert_eq!(first.until(&[&id]).await[&id].max_tokens(), 20);
    let mut second = RlqsStream::open(server.grpc_addr).await.unwrap();
    second.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    let pushed = first.next().await[&id].clone();
    let answered = second.next().await[&id].clone();
    let sum = pushed.rate() + answered.rate();
    assert!(sum <= 1.0 + 1e-9, "{pushed:?} + {answered:?}");
    assert!(pushed.max_tokens() + answered.max_tokens() <= 20);
    assert!(pushed.rate() < 1.0 && answered.rate() > 0.0);
    drop(second.close());
    // The first keeps reporting, as Envoy does every 5 s, past the leaver's TTL and a second.
    let mut back = pushed;
    for _ in 0..=(HELD_FOR / SECOND) / 4 {
        server.advance(Duration::from_secs(4));
        first.send("quota", vec![usage(id.clone(), 4, 1, 0)]).await;
        back = first.until(&[&id]).await[&id].clone();
    }
    // A push may follow the last answer by a tick.
    if back.max_tokens() < 20 {
        back = first.until(&[&id]).await[&id].clone();
    }
    assert!((back.rate() - 1.0).abs() < 1e-9, "{back:?}");
    assert_eq!(back.max_tokens(), 20);
}

/// A reload that changes the rule pushes the new share at once, without a report.
#[tokio::test]
async fn a_reload_pushes_new_assignments() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    assert_eq!(stream.until(&[&id]).await[&id].max_tokens(), 20);
    let changed = RULES.replace(
        "requests_per_unit: 60, algorithm: token_bucket, burst: 20",
        "requests_per_unit: 0",
    );
    std::fs::write(server.rules_dir().join("rules.yaml"), changed).unwrap();
    let generation = server.generation();
    common::eventually(Duration::from_secs(10), "the reload", async || {
        server.generation() > generation
    })
    .await;
    // The book is told of the reload and pushes at once.
    assert_eq!(stream.next().await[&id], Told::DenyAll);
}

/// Reports are counted per rule and outcome; the stream and bucket gauges follow.
#[tokio::test]
async fn reports_are_counted_in_metrics() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    stream.until(&[&id]).await;
    stream.send("quota", vec![usage(id.clone(), 5, 7, 3)]).await;
    stream.until(&[&id]).await;
    let metrics = server.metrics().await;
    let series = |outcome: &str| {
        format!(
            "sluice_rlqs_reported_total{{domain=\"quota\",key=\"quota.tenant\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(sample(&metrics, &series("allowed")), 8.0, "{metrics}");
    assert_eq!(sample(&metrics, &series("denied")), 3.0);
    assert_eq!(sample(&metrics, "sluice_rlqs_streams"), 1.0);
    assert_eq!(sample(&metrics, "sluice_rlqs_buckets"), 1.0);
    assert!(
        sample(
            &metrics,
            "sluice_rlqs_assignments_total{action=\"token_bucket\"}"
        ) >= 2.0
    );
}

/// A report with an empty bucket id is the client's mistake: INVALID_ARGUMENT, nothing held.
#[tokio::test]
async fn an_empty_bucket_id_is_refused() {
    let server = warmed().await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream
        .send("quota", vec![usage(bucket(&[]), 0, 1, 0)])
        .await;
    let status = stream.try_next().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    common::eventually(Duration::from_secs(5), "no stream counted", async || {
        sample(&server.metrics().await, "sluice_rlqs_streams") == 0.0
    })
    .await;
}

/// `/ui` lists the buckets with each stream's demand and share.
#[tokio::test]
async fn the_page_lists_buckets_and_shares() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    stream.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    stream.until(&[&id]).await;
    let (status, body) = common::http(server.http_addr, "GET", "/ui/api/quota", "").await;
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["count"], 1, "{page}");
    let listed = &page["buckets"][0];
    assert_eq!(listed["bucket"], "tenant=a");
    assert_eq!(listed["rule"], "quota.tenant");
    assert_eq!(listed["limit"]["burst"], 20);
    let holder = &listed["holders"][0];
    assert_eq!(holder["share_per_second"], 1.0, "{page}");
    assert_eq!(holder["strategy"], "60 per 60 s, up to 20", "{page}");
}

/// Issue 40, item 2: an Envoy whose stream broke reconnects at once with the bucket it holds
/// (its first report covers time); the new stream keeps the share (the same strategy, so Envoy
/// keeps its tokens) instead of `DENY_ALL` until the old stream's share has expired.
#[tokio::test]
async fn a_reconnecting_stream_keeps_its_share() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut first = RlqsStream::open(server.grpc_addr).await.unwrap();
    first.send("quota", vec![usage(id.clone(), 0, 1, 0)]).await;
    let held = first.until(&[&id]).await[&id].clone();
    assert_eq!(held.max_tokens(), 20);
    drop(first.close());
    server.advance(Duration::from_secs(3));
    let mut again = RlqsStream::open(server.grpc_addr).await.unwrap();
    // The old stream's end reaches the book first, as a broken connection's does.
    tokio::time::sleep(Duration::from_millis(200)).await;
    again.send("quota", vec![usage(id.clone(), 3, 2, 0)]).await;
    assert_eq!(again.until(&[&id]).await[&id], held);
}

/// Issue 40, item 4: `/ui/api/quota` lists a page of at most 200 buckets and a cursor to the
/// next, however many the book holds.
#[tokio::test]
async fn the_page_of_buckets_is_bounded_and_pages_on() {
    let server = warmed().await;
    let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
    let ids: Vec<_> = (0..250)
        .map(|i| bucket(&[("tenant", &format!("t{i}"))]))
        .collect();
    let usages = ids.iter().map(|id| usage(id.clone(), 0, 1, 0)).collect();
    stream.send("quota", usages).await;
    stream.until(&ids.iter().collect::<Vec<_>>()).await;
    let page = |path: String| async move {
        let (status, body) = common::http(server.http_addr, "GET", &path, "").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let first = page("/ui/api/quota".into()).await;
    assert_eq!(
        (first["count"].as_u64(), first["streams"].as_u64()),
        (Some(250), Some(1))
    );
    assert_eq!(first["buckets"].as_array().map(Vec::len), Some(200));
    let next = first["next"].as_u64().expect("a cursor");
    let rest = page(format!("/ui/api/quota?after={next}&limit=500")).await;
    assert_eq!(rest["buckets"].as_array().map(Vec::len), Some(50));
    assert!(rest["next"].is_null());
    let (status, _) = common::http(server.http_addr, "GET", "/ui/api/quota?page=2", "").await;
    assert_eq!(status, 400);
}

/// The stream caps are settings (`--rlqs-max-streams`, `--rlqs-max-buckets-per-stream`): past
/// them a stream ends with RESOURCE_EXHAUSTED, and the streams within them are served.
#[tokio::test]
async fn the_stream_caps_apply() {
    let server = TestServer::start_adjusted(RULES, Arc::new(MemoryStore::new()), |s| {
        s.rlqs.max_streams = 2;
        s.rlqs.max_buckets_per_stream = 2;
    })
    .await;
    server.advance(Duration::from_nanos(WARM_UP) + Duration::from_secs(1));
    let (a, b, c) = (
        bucket(&[("tenant", "a")]),
        bucket(&[("tenant", "b")]),
        bucket(&[("tenant", "c")]),
    );
    let mut first = RlqsStream::open(server.grpc_addr).await.unwrap();
    first.send("quota", vec![usage(a.clone(), 0, 1, 0)]).await;
    first.until(&[&a]).await;
    let mut second = RlqsStream::open(server.grpc_addr).await.unwrap();
    second.send("quota", vec![usage(a.clone(), 0, 1, 0)]).await;
    second.until(&[&a]).await;
    let mut third = RlqsStream::open(server.grpc_addr).await.unwrap();
    third.send("quota", vec![usage(a.clone(), 0, 1, 0)]).await;
    let status = third.try_next().await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // Two buckets fit; a third on the same stream ends it.
    first.send("quota", vec![usage(b.clone(), 0, 1, 0)]).await;
    first.until(&[&b]).await;
    first.send("quota", vec![usage(c.clone(), 0, 1, 0)]).await;
    let status = loop {
        match first.try_next().await {
            Err(status) => break status,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without a status"),
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("at most 2 buckets"), "{status:?}");
}

/// Each stream's TTL follows the interval it reports at, learned from `time_elapsed`: two
/// intervals at 1 s, 5 s and 30 s (and 5 s assumed until a report covers time).
#[tokio::test]
async fn the_ttl_follows_each_streams_report_interval() {
    let server = warmed().await;
    for (seconds, ttl) in [(0, 10), (1, 2), (5, 10), (30, 60)] {
        let id = bucket(&[("tenant", &format!("every-{seconds}"))]);
        let mut stream = RlqsStream::open(server.grpc_addr).await.unwrap();
        stream
            .send("quota", vec![usage(id.clone(), seconds, 1, 0)])
            .await;
        stream.until(&[&id]).await;
        assert_eq!(stream.ttl(&id), Some(ttl), "every {seconds} s");
    }
}

/// A stream reporting every 30 s keeps its share and its bucket across reports: a stream
/// reporting every 5 s beside it never grows into it, and it is never told to abandon the
/// bucket (with Envoy 1.40's timing both would happen after 11 s).
#[tokio::test]
async fn a_stream_reporting_every_30_s_keeps_its_share() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut slow = RlqsStream::open(server.grpc_addr).await.unwrap();
    slow.send("quota", vec![usage(id.clone(), 30, 60, 0)]).await;
    slow.until(&[&id]).await;
    let mut fast = RlqsStream::open(server.grpc_addr).await.unwrap();
    fast.send("quota", vec![usage(id.clone(), 5, 10, 0)]).await;
    fast.until(&[&id]).await;
    for _ in 0..6 {
        server.advance(Duration::from_secs(5));
        // Past a tick of the book's, which would find the slow stream silent.
        let pushed = fast.drain(Duration::from_millis(1_200)).await;
        assert!(
            pushed.get(&id).is_none_or(|t| t.rate() <= 0.75),
            "{pushed:?}"
        );
        fast.send("quota", vec![usage(id.clone(), 5, 10, 0)]).await;
        let told = fast.until(&[&id]).await;
        assert!(told[&id].rate() <= 0.75, "{told:?}");
    }
    let pushed = slow.drain(Duration::from_millis(100)).await;
    assert!(!pushed.values().any(|t| *t == Told::Abandon), "{pushed:?}");
    slow.send("quota", vec![usage(id.clone(), 30, 60, 0)]).await;
    let told = slow.until(&[&id]).await;
    assert!(told[&id].rate() > 0.0, "{told:?}");
    assert_eq!(slow.ttl(&id), Some(60));
}

/// A stream reporting every second sees its share move within seconds: when the other stops,
/// its share comes back once three seconds of silence and its two-second TTL have passed (with
/// Envoy 1.40's timing, 11 s of each).
#[tokio::test]
async fn a_stream_reporting_every_second_sees_its_share_move_within_seconds() {
    let server = warmed().await;
    let id = bucket(&[("tenant", "a")]);
    let mut left = RlqsStream::open(server.grpc_addr).await.unwrap();
    let mut stays = RlqsStream::open(server.grpc_addr).await.unwrap();
    left.send("quota", vec![usage(id.clone(), 1, 1, 0)]).await;
    left.until(&[&id]).await;
    stays.send("quota", vec![usage(id.clone(), 1, 1, 0)]).await;
    let half = stays.until(&[&id]).await[&id].clone();
    assert!(half.rate() < 1.0, "{half:?}");
    server.advance(Duration::from_secs(4));
    stays.send("quota", vec![usage(id.clone(), 1, 1, 0)]).await;
    // The answer, then (at the book's next tick, if the answer came first) the push.
    let mut told = stays.until(&[&id]).await[&id].clone();
    if told.max_tokens() < 20 {
        told = stays.until(&[&id]).await[&id].clone();
    }
    assert!((told.rate() - 1.0).abs() < 1e-9, "{told:?}");
    assert_eq!(stays.ttl(&id), Some(2));
}
