//! The admin listener in process on the memory store: counters read and reset, checked by calls
//! before and after; 401 with nothing done; 404 and 400; shards; the metrics; the token file's
//! reload; a missing token file stopping the start; a reset on a data directory surviving a
//! restart.

use std::sync::Arc;
use std::time::Duration;

use sluice::app::{self, AdminSettings, AppError, Settings};
use sluice::clock::ManualClock;
use sluice::store::{MemoryOptions, MemoryStore, PersistSettings, PersistentStore, Store};

use crate::common::admin::{self, OTHER_TOKEN, TOKEN};
use crate::common::{self, OK, OVER, TestServer, call, one_descriptor, sample};

const RULES: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: fixed_window }
  - key: hot
    shards: 2
    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: fixed_window }
  - key: free
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 5 }
"#;

const K1: &str = "domain=edge&descriptor=api_key=k1";

/// Calls `api_key=<key>` `n` times; the codes.
async fn calls(server: &TestServer, key: &str, n: usize) -> Vec<i32> {
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..n {
        let answer = call(&mut client, one_descriptor("edge", &[("api_key", key)])).await;
        codes.push(answer.overall_code);
    }
    codes
}

/// Limit 3: three calls pass, the fourth is over; the counter reads used 3, refusing until the
/// minute ends; a reset clears it (and says so), and the next call passes; the reset is
/// counted by domain. Another descriptor's counter is untouched.
#[tokio::test]
async fn counters_read_and_reset_checked_by_calls() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    assert_eq!(calls(&server, "k1", 4).await, [OK, OK, OK, OVER]);
    assert_eq!(calls(&server, "k2", 1).await, [OK]);

    let read = admin::get(&server, K1).await;
    assert_eq!(read.status, 200, "{read:?}");
    assert!(
        read.head.contains("cache-control: no-store"),
        "{}",
        read.head
    );
    let body = &read.body;
    assert_eq!(body["rule"], "edge.api_key");
    let limit = &body["limits"][0];
    assert_eq!(
        (&limit["algorithm"], &limit["requests"], &limit["window"]),
        (&"fixed_window".into(), &3.into(), &"1m".into()),
        "{body}"
    );
    let counter = &limit["counters"][0];
    assert_eq!(counter["used"], 3, "{body}");
    assert_eq!(counter["remaining"], 0);
    assert_eq!(counter["admits"], false);
    // Two seconds into the minute: admitted again at its end.
    assert_eq!(counter["next_admitted_in_ms"], 58_000, "{body}");
    assert_eq!(counter["next_admitted_at"], "2026-01-01T00:01:00Z");
    assert_eq!(counter["shard"], serde_json::Value::Null);

    let reset = admin::reset(&server, K1).await;
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(reset.body["counters_cleared"], 1, "{}", reset.body);
    assert_eq!(reset.body["reset"][0]["shards_reset"], 1);
    assert_eq!(calls(&server, "k1", 1).await, [OK]);
    let after = admin::get(&server, K1).await;
    assert_eq!(after.body["limits"][0]["counters"][0]["used"], 1);
    let other = admin::get(&server, "domain=edge&descriptor=api_key=k2").await;
    assert_eq!(
        other.body["limits"][0]["counters"][0]["used"], 1,
        "untouched"
    );

    // A reset of a counter no call made clears nothing, and says so.
    let fresh = admin::reset(&server, "domain=edge&descriptor=api_key=never").await;
    assert_eq!(
        (fresh.status, &fresh.body["counters_cleared"]),
        (200, &0.into())
    );

    let metrics = server.metrics().await;
    assert_eq!(
        sample(&metrics, r#"sluice_admin_resets_total{domain="edge"}"#),
        2.0
    );
    assert_eq!(
        sample(&metrics, r#"sluice_admin_requests_total{outcome="ok"}"#),
        5.0
    );
    server.stop().await;
}

/// No token, a wrong token, or another scheme: 401 with `WWW-Authenticate: Bearer`, and the
/// counter is as it was; the refusals are counted. Bob's token, the file's other one, works.
#[tokio::test]
async fn a_missing_or_wrong_token_is_401_and_nothing_is_done() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    let addr = server.admin_addr.expect("admin on");
    assert_eq!(calls(&server, "k1", 4).await, [OK, OK, OK, OVER]);
    let wrong = TOKEN.replace('a', "b");
    for token in [None, Some(wrong.as_str()), Some(&TOKEN[..40])] {
        for method in ["DELETE", "GET"] {
            let refused = admin::request(addr, method, K1, token).await;
            assert_eq!(refused.status, 401, "{method} {token:?}: {refused:?}");
            assert!(
                refused.head.contains("www-authenticate: bearer"),
                "{}",
                refused.head
            );
        }
    }
    // An unknown path tells nothing either without a token.
    let unknown = admin::request(addr, "GET", "x", None).await;
    assert_eq!(unknown.status, 401);
    assert_eq!(calls(&server, "k1", 1).await, [OVER], "nothing was reset");
    let metrics = server.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            r#"sluice_admin_requests_total{outcome="unauthorized"}"#
        ),
        7.0
    );
    assert_eq!(
        sample(&metrics, r#"sluice_admin_resets_total{domain="edge"}"#),
        0.0
    );
    let bob = admin::request(addr, "DELETE", K1, Some(OTHER_TOKEN)).await;
    assert_eq!(bob.status, 200, "{bob:?}");
    assert_eq!(calls(&server, "k1", 1).await, [OK]);
    server.stop().await;
}

/// A descriptor no rule limits is 404 saying why; a malformed query is 400 saying what is
/// wrong; neither resets anything.
#[tokio::test]
async fn not_limited_is_404_and_malformed_is_400() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    for (query, status, says) in [
        (
            "domain=nowhere&descriptor=api_key=k1",
            404,
            "domain 'nowhere'",
        ),
        (
            "domain=edge&descriptor=user=u1",
            404,
            "no rule limits descriptor 'user=u1'",
        ),
        ("domain=edge&descriptor=free=x", 404, "no rule limits"),
        ("domain=edge", 400, "missing descriptor"),
        ("descriptor=api_key=k1", 400, "missing domain"),
        ("domain=edge&descriptor=api_key", 400, "not key=value"),
        (
            "domain=edge&descriptor=api_key=k1&x=1",
            400,
            "unknown query parameter",
        ),
    ] {
        for answer in [
            admin::get(&server, query).await,
            admin::reset(&server, query).await,
        ] {
            assert_eq!(answer.status, status, "{query}: {answer:?}");
            let error = answer.body["error"].as_str().unwrap_or_default();
            assert!(error.contains(says), "{query}: {error}");
        }
    }
    let nested = admin::get(&server, "domain=edge&descriptor=free=x,path=/a").await;
    assert_eq!(nested.status, 200, "{nested:?}");
    assert_eq!(nested.body["rule"], "edge.free.path");
    let metrics = server.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            r#"sluice_admin_requests_total{outcome="not_found"}"#
        ),
        6.0
    );
    assert_eq!(
        sample(
            &metrics,
            r#"sluice_admin_requests_total{outcome="bad_request"}"#
        ),
        8.0
    );
    server.stop().await;
}

/// A sharded limit shows each shard's counter, and a reset clears every shard.
#[tokio::test]
async fn every_shard_is_shown_and_reset() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    let mut client = server.client().await;
    let hot = || one_descriptor("edge", &[("hot", "h")]);
    let mut admitted = 0;
    for _ in 0..8 {
        admitted += usize::from(call(&mut client, hot()).await.overall_code == OK);
    }
    let query = "domain=edge&descriptor=hot=h";
    let read = admin::get(&server, query).await;
    let counters = read.body["limits"][0]["counters"]
        .as_array()
        .expect("shards")
        .clone();
    assert_eq!(counters.len(), 2, "{}", read.body);
    assert_eq!(read.body["limits"][0]["shards"], 2);
    let used: u64 = counters.iter().map(|c| c["used"].as_u64().unwrap()).sum();
    assert_eq!(used as usize, admitted);
    assert_eq!(
        counters
            .iter()
            .map(|c| c["shard"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1]
    );
    assert!(counters.iter().all(|c| c["capacity"] == 2));
    let reset = admin::reset(&server, query).await;
    assert_eq!(reset.body["reset"][0]["shards_reset"], 2, "{}", reset.body);
    let after = admin::get(&server, query).await;
    let used: Vec<_> = after.body["limits"][0]["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["used"].clone())
        .collect();
    assert_eq!(used, [0, 0]);
    server.stop().await;
}

/// The token file is reloaded when it changes: a new token works, a removed one no longer
/// does; a file that turns bad keeps the tokens in force.
#[tokio::test]
async fn the_token_file_is_reloaded() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    let addr = server.admin_addr.expect("admin on");
    let file = server.rules_dir().join("tokens");
    let carol = "c4r01000000000000000000000000000000000000000000000000000000000c4";
    std::fs::write(&file, format!("carol:{carol}\n")).unwrap();
    common::eventually(Duration::from_secs(10), "carol's token works", async || {
        admin::request(addr, "GET", K1, Some(carol)).await.status == 200
    })
    .await;
    assert_eq!(
        admin::request(addr, "GET", K1, Some(TOKEN)).await.status,
        401
    );
    std::fs::write(&file, "carol:short\n").unwrap();
    // The bad file is read and refused; a good write after it is what the next change shows.
    std::fs::write(&file, format!("carol:{carol}\nalice:{TOKEN}\n")).unwrap();
    common::eventually(Duration::from_secs(10), "alice is back", async || {
        admin::request(addr, "GET", K1, Some(TOKEN)).await.status == 200
    })
    .await;
    assert_eq!(
        admin::request(addr, "GET", K1, Some(carol)).await.status,
        200
    );
    server.stop().await;
}

/// The listener does not start without a usable token file: missing, or holding no token.
#[tokio::test]
async fn no_token_file_no_start() {
    let dir = common::rules_dir(RULES);
    for contents in [None, Some("# no one\n")] {
        let file = dir.path().join("admin-tokens");
        if let Some(text) = contents {
            std::fs::write(&file, text).unwrap();
        }
        let settings = Settings {
            grpc_addr: "127.0.0.1:0".parse().unwrap(),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            admin: Some(AdminSettings {
                addr: "127.0.0.1:0".parse().unwrap(),
                token_file: file.clone(),
            }),
            ..Settings::new(vec![dir.path().join("rules.yaml")])
        };
        let clock = Arc::new(ManualClock::new(common::START));
        let Err(error) = app::start(settings, clock).await else {
            panic!("started without a token")
        };
        assert!(matches!(error, AppError::Admin(_)), "{error}");
        assert!(error.to_string().contains("admin-tokens"), "{error}");
    }
}

/// On a data directory, a reset reaches the disk: after a restart the counter is still
/// fresh, while another descriptor's count came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_survives_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let open = || {
        let store = PersistentStore::open(
            PersistSettings::new(data.path()),
            MemoryOptions::default(),
            common::START,
        )
        .expect("data dir");
        Arc::new(store) as Arc<dyn Store>
    };
    let server = admin::start(RULES, open()).await;
    assert_eq!(calls(&server, "k1", 3).await, [OK, OK, OK]);
    assert_eq!(calls(&server, "k2", 3).await, [OK, OK, OK]);
    // Give the journal a flush with both counts in it, so the reset must undo a written record.
    common::eventually(
        Duration::from_secs(10),
        "the journal holds the counts",
        async || {
            std::fs::read_dir(data.path()).unwrap().flatten().any(|e| {
                e.file_name().to_string_lossy().ends_with(".journal")
                    && e.metadata().is_ok_and(|m| m.len() > 8)
            })
        },
    )
    .await;
    let reset = admin::reset(&server, K1).await;
    assert_eq!(reset.body["counters_cleared"], 1, "{reset:?}");
    server.stop().await;

    let server = admin::start(RULES, open()).await;
    assert_eq!(
        calls(&server, "k1", 3).await,
        [OK, OK, OK],
        "the reset held"
    );
    assert_eq!(
        calls(&server, "k2", 1).await,
        [OVER],
        "the other count came back"
    );
    server.stop().await;
}
