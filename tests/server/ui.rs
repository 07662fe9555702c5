//! The operator page `/ui` and `sluice explain`: explanations (check-only, against the live
//! counters, with every reason a descriptor gets no limit), the most-limited keys and rates,
//! and the page's own hardening (strict Content-Security-Policy, no external assets).

use crate::common;

use std::time::Duration;

use common::process::{run, temp_dir};
use common::*;
use serde_json::{Value, json};

const RULES: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: fixed_window, name: per_key }
  - key: api_key
    value: vip
    rate_limit: { unit: minute, requests_per_unit: 100, name: vip }
  - key: internal
    value: health
  - key: path
    descriptors:
      - key: method
        value: GET
        rate_limit: { unit: second, requests_per_unit: 3 }
  - key: promo
    rate_limit: { unit: minute, requests_per_unit: 50, replaces: [ { name: per_key } ] }
"#;

async fn explain(server: &TestServer, domain: &str, descriptors: &[&str]) -> (u16, Value) {
    let body = json!({ "domain": domain, "descriptors": descriptors }).to_string();
    let (status, text) = http(server.http_addr, "POST", "/ui/api/explain", &body).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

/// Explaining reads the live counter and charges nothing, however often it is asked; once the
/// counter is exhausted it says the call would be refused and when it is admitted again.
#[tokio::test]
async fn explain_reads_the_live_counter_and_charges_nothing() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for _ in 0..3 {
        call(&mut client, one_descriptor("edge", &[("api_key", "k1")])).await;
    }
    let hits =
        "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"api_key\",key2=\"\"}";
    let before = sample(&server.metrics().await, hits);
    for _ in 0..3 {
        let (status, answer) = explain(&server, "edge", &["api_key=k1"]).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["would_refuse"], false);
        let d = &answer["descriptors"][0];
        assert_eq!(d["rule"], "edge.api_key");
        assert_eq!(d["steps"][0]["match"], "key-only");
        let counter = &d["limits"][0]["counter"];
        assert_eq!(
            (counter["remaining"].as_u64(), counter["capacity"].as_u64()),
            (Some(2), Some(5))
        );
    }
    assert_eq!(
        sample(&server.metrics().await, hits),
        before,
        "explaining records no hits"
    );
    for _ in 0..2 {
        call(&mut client, one_descriptor("edge", &[("api_key", "k1")])).await;
    }
    let (_, answer) = explain(&server, "edge", &["api_key=k1"]).await;
    assert_eq!(answer["would_refuse"], true);
    let counter = &answer["descriptors"][0]["limits"][0]["counter"];
    assert_eq!(counter["admits"], false);
    // START is 2 s past a minute: the fixed window turns in 58 s.
    assert_eq!(counter["reset_after_ms"], 58_000);
    let refused = call(&mut client, one_descriptor("edge", &[("api_key", "k1")])).await;
    assert_eq!(
        refused.overall_code, OVER,
        "explaining changed nothing: the sixth call is refused"
    );
    server.stop().await;
}

/// Every way to get no limit is told apart, level by level, and so is `replaces`.
#[tokio::test]
async fn explain_says_why_no_limit_applies() {
    let server = TestServer::start(RULES).await;
    let why =
        |answer: &Value, i: usize| answer["descriptors"][i]["why"].as_str().unwrap().to_owned();
    let (_, answer) = explain(&server, "nowhere", &["api_key=k"]).await;
    assert!(why(&answer, 0).contains("domain is not loaded"));
    let (_, answer) = explain(
        &server,
        "edge",
        &[
            "internal=health",
            "colour=red",
            "path=/x,method=PUT",
            "api_key=vip,user=u",
            "api_key=vip",
        ],
    )
    .await;
    assert!(why(&answer, 0).contains("no limit of its own"), "{answer}");
    assert!(
        why(&answer, 1).contains("no rule has the key 'colour'"),
        "{answer}"
    );
    assert!(why(&answer, 2).contains("level 2: no rule of key 'method' matches the value 'PUT'"));
    assert_eq!(
        answer["descriptors"][2]["steps"][1]["configured_values"],
        json!(["GET"])
    );
    assert!(
        why(&answer, 3).contains("deeper than the rules"),
        "{answer}"
    );
    assert_eq!(answer["descriptors"][4]["steps"][0]["match"], "exact");
    assert!(
        answer["descriptors"][4]["upstream"][0]
            .as_str()
            .unwrap()
            .contains("fixed window"),
        "sliding_window differs from upstream: {answer}"
    );
    let (_, answer) = explain(&server, "edge", &["api_key=k", "promo=spring"]).await;
    let replaced = &answer["descriptors"][0]["limits"][0];
    assert_eq!(replaced["replaced_by"], json!(["edge.promo"]));
    assert_eq!(
        replaced["counter"],
        Value::Null,
        "a replaced limit is not counted"
    );
    server.stop().await;
}

/// Bad explain input is a 400 that says what is wrong, never a crash.
#[tokio::test]
async fn explain_refuses_bad_input() {
    let server = TestServer::start(RULES).await;
    for (body, says) in [
        ("not json", "not JSON"),
        ("{\"descriptors\":[\"a=b\"]}", "a domain is required"),
        (
            "{\"domain\":\"edge\",\"descriptors\":[]}",
            "at least one descriptor",
        ),
        (
            "{\"domain\":\"edge\",\"descriptors\":[\"novalue\"]}",
            "is not key=value",
        ),
        (
            "{\"domain\":\"edge\",\"descriptors\":[\"=v\"]}",
            "empty key",
        ),
        (
            "{\"domain\":\"edge\",\"descriptors\":[7]}",
            "each descriptor is a string",
        ),
    ] {
        let (status, text) = http(server.http_addr, "POST", "/ui/api/explain", body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let huge = format!(
        "{{\"domain\":\"edge\",\"descriptors\":[\"k={}\"]}}",
        "v".repeat(2000)
    );
    let (status, _) = http(server.http_addr, "POST", "/ui/api/explain", &huge).await;
    assert_eq!(status, 400);
    server.stop().await;
}

/// Refused keys show up among the keys limited most, and decision rates follow the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_figures_show_the_most_limited_keys_and_rates() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    for i in 0..12 {
        call(&mut client, one_descriptor("edge", &[("api_key", "hot")])).await;
        call(
            &mut client,
            one_descriptor("edge", &[("api_key", &format!("cold{i}"))]),
        )
        .await;
    }
    let mut live = Value::Null;
    eventually(Duration::from_secs(30), "rates are sampled", async || {
        let (_, text) = http(server.http_addr, "GET", "/ui/api/live", "").await;
        live = serde_json::from_str(&text).unwrap();
        live["last_60s"]["over_limit"].as_f64().unwrap() > 0.0
    })
    .await;
    assert_eq!(live["top"][0]["domain"], "edge");
    assert_eq!(live["top"][0]["descriptor"], "api_key=hot");
    assert_eq!(live["top"][0]["count"], 7, "12 calls, 5 admitted");
    assert_eq!(
        live["top"].as_array().unwrap().len(),
        1,
        "the cold keys were never refused"
    );
    assert_eq!(live["totals"]["over_limit"], 7);
    assert_eq!(live["totals"]["ok"], 17);
    server.stop().await;
}

/// Keys longer than the text kept of them are still told apart: 300 distinct 600-byte keys,
/// each refused once, never show as one key refused 300 times; the shown text is cut and
/// marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_keys_limited_once_each_stay_apart() {
    let limit_zero = "domain: long\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 0 }\n";
    let server = TestServer::start(limit_zero).await;
    let mut client = server.client().await;
    let prefix = "p".repeat(600);
    for i in 0..300 {
        let value = format!("{prefix}{i}");
        let response = call(&mut client, one_descriptor("long", &[("k", &value)])).await;
        assert_eq!(response.overall_code, OVER);
    }
    let (_, text) = http(server.http_addr, "GET", "/ui/api/live", "").await;
    let live: Value = serde_json::from_str(&text).unwrap();
    let top = live["top"].as_array().unwrap();
    assert!(!top.is_empty(), "{live}");
    for key in top {
        let (count, error) = (
            key["count"].as_u64().unwrap(),
            key["error"].as_u64().unwrap(),
        );
        assert!(
            count - error <= 1,
            "a key known to be refused more than once: {key}"
        );
        assert_eq!(key["shortened"], true, "{key}");
        assert!(key["descriptor"].as_str().unwrap().ends_with('…'), "{key}");
    }
    server.stop().await;
}

/// The page and its two assets come from the binary with a CSP that allows no inline code and
/// nothing from elsewhere; the rules tree lists every domain's nodes with their limits.
#[tokio::test]
async fn page_is_self_contained_under_a_strict_csp() {
    let server = TestServer::start(RULES).await;
    let addr = server.http_addr;
    let pages = tokio::task::spawn_blocking(move || {
        ["/ui", "/ui/app.js", "/ui/app.css"].map(|p| common::http1::get(addr, p, &[]))
    })
    .await
    .unwrap();
    for (page, kind) in pages
        .iter()
        .zip(["text/html", "text/javascript", "text/css"])
    {
        assert_eq!(page.status, 200);
        assert!(page.expect_header("content-type").starts_with(kind));
        let csp = page.expect_header("content-security-policy");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(page.expect_header("x-content-type-options"), "nosniff");
    }
    let html = &pages[0].body;
    assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains("<script>"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external assets"
    );
    let (_, rules) = http(addr, "GET", "/ui/api/rules", "").await;
    let rules: Value = serde_json::from_str(&rules).unwrap();
    assert_eq!(
        rules["version"],
        Value::Null,
        "rule files have no source version"
    );
    let edge = &rules["domains"][0];
    assert_eq!(edge["name"], "edge");
    let keys: Vec<&str> = edge["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["full_key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "edge.api_key_vip",
            "edge.internal_health",
            "edge.api_key",
            "edge.path",
            "edge.promo"
        ]
    );
    assert_eq!(
        edge["nodes"][3]["children"][0]["limits"][0]["text"],
        "3 per 1s (sliding_window)"
    );
    server.stop().await;
}

/// `sluice explain` walks the rule files offline, descriptor by descriptor, and says where
/// envoyproxy/ratelimit differs; a bad descriptor or bad rules are clear errors.
#[test]
fn sluice_explain_walks_the_rule_files() {
    let dir = temp_dir(&[("rules.yaml", RULES)]);
    let config = dir.path().to_str().unwrap();
    let out = run([
        "explain",
        "--config",
        config,
        "--domain",
        "edge",
        "--descriptor",
        "path=/x,method=GET",
        "--descriptor",
        "internal=health",
    ]);
    let text = out.stdout_ok();
    assert!(
        text.contains("level 1: path=/x -> edge.path (key-only)"),
        "{text}"
    );
    assert!(
        text.contains("level 2: method=GET -> edge.path.method_GET (exact value)"),
        "{text}"
    );
    assert!(
        text.contains("limit 3 per 1s (sliding_window) -> 3 of 3 left"),
        "{text}"
    );
    assert!(
        text.contains("where envoyproxy/ratelimit would differ:\n    - upstream counts a fixed window aligned to the second"),
        "{text}"
    );
    assert!(text.contains("descriptor 2: internal=health"), "{text}");
    assert!(text.contains("no limit of its own"), "{text}");
    let bad = run([
        "explain",
        "--config",
        config,
        "--domain",
        "edge",
        "--descriptor",
        "oops",
    ]);
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(bad.stderr.contains("'oops' is not key=value"), "{bad:?}");
    let broken = temp_dir(&[(
        "rules.yaml",
        "domain: d\ndescriptors: [ { key: k, rate_limit: { unit: fortnight } } ]\n",
    )]);
    let failed = run([
        "explain",
        "--config",
        broken.path().to_str().unwrap(),
        "--domain",
        "d",
        "--descriptor",
        "k=v",
    ]);
    assert_eq!(failed.code(), Some(1));
    assert!(
        failed
            .stderr
            .contains("invalid rate limit unit 'fortnight'"),
        "{failed:?}"
    );
}

/// A store that is down: every call fails as an open circuit breaker does.
struct DownStore;

impl sluice::store::Store for DownStore {
    fn apply<'a>(
        &'a self,
        _charges: &'a [sluice::store::Charge],
        _now: sluice::clock::Nanos,
    ) -> sluice::store::StoreFuture<'a> {
        Box::pin(std::future::ready(Err(
            sluice::store::StoreError::CircuitOpen,
        )))
    }

    fn reset<'a>(
        &'a self,
        _charges: &'a [sluice::store::Charge],
        _now: sluice::clock::Nanos,
    ) -> sluice::store::ResetFuture<'a> {
        Box::pin(std::future::ready(Err(
            sluice::store::StoreError::CircuitOpen,
        )))
    }

    fn name(&self) -> &'static str {
        "down"
    }
}

/// While the store is unreachable the explanation still walks the rules and says that each
/// rule's failure_mode answers, with the store's error.
#[tokio::test]
async fn explain_says_when_the_store_is_unavailable() {
    let rules = format!(
        "{RULES}  - key: login\n    failure_mode: deny\n    rate_limit: {{ unit: minute, requests_per_unit: 5 }}\n"
    );
    let server = TestServer::start_on(&rules, std::sync::Arc::new(DownStore)).await;
    let (status, answer) = explain(&server, "edge", &["api_key=k1"]).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["store_error"].as_str().unwrap().contains("circuit"),
        "{answer}"
    );
    assert_eq!(answer["descriptors"][0]["rule"], "edge.api_key");
    assert_eq!(
        answer["descriptors"][0]["limits"][0]["counter"],
        Value::Null
    );
    assert_eq!(
        answer["would_refuse"], false,
        "failure_mode allow lets it through"
    );
    let (_, answer) = explain(&server, "edge", &["api_key=k1", "login=u"]).await;
    assert_eq!(
        answer["would_refuse"], true,
        "a deny rule refuses without the store"
    );
    server.stop().await;
}

/// Issue 40 (11): `/ui`'s POSTs take the guard of `/json`: a page served from a rebound name
/// (`Host: evil.example:PORT` with a matching `Origin`) or another origin is refused, and a
/// browser's body must be JSON; the server's own page, and clients that are no browser, are
/// answered.
#[tokio::test]
async fn ui_posts_refuse_other_origins_and_rebound_names() {
    let server = TestServer::start(RULES).await;
    let addr = server.http_addr;
    let body = json!({ "domain": "edge", "descriptors": ["api_key=k1"] }).to_string();
    let bucket = json!({ "domain": "edge", "bucket": "api_key=k1" }).to_string();
    let own = addr.to_string();
    let own_origin = format!("http://{addr}");
    let evil = format!("evil.example:{}", addr.port());
    let evil_origin = format!("http://{evil}");
    let json_type = ("Content-Type", "application/json");
    let rebound = [
        ("Host", evil.as_str()),
        ("Origin", evil_origin.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
        json_type,
    ];
    let page = [
        ("Host", own.as_str()),
        ("Origin", own_origin.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
        json_type,
    ];
    let plain = [
        ("Host", own.as_str()),
        ("Origin", own_origin.as_str()),
        ("Content-Type", "text/plain"),
    ];
    for (path, body) in [
        ("/ui/api/explain", &body),
        ("/ui/api/explain-bucket", &bucket),
    ] {
        for (headers, expected) in [
            (&rebound[..], 403),
            (
                &[
                    ("Host", own.as_str()),
                    ("Origin", "https://evil.example"),
                    json_type,
                ][..],
                403,
            ),
            (&plain[..], 415),
            (&page[..], 200),
            (&[json_type][..], 200),
        ] {
            let (status, text) = http_with(addr, "POST", path, headers, body).await;
            assert_eq!(status, expected, "{path} {headers:?}: {text}");
        }
    }
    server.stop().await;
}

/// The page's API serves fifty calls a second, the rest waiting their turn for at most a
/// second: 150 calls at once get at most 51 answers before the pace frees more turns, the
/// others `429` with `Retry-After` and a JSON error; meanwhile `/healthcheck` and the page's
/// own files are answered (they are not paced, and the waiting calls hold few connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_api_is_paced_and_a_flood_is_refused() {
    let server = TestServer::start(RULES).await;
    let addr = server.http_addr;
    let flood: Vec<_> = (0..150)
        .map(|_| tokio::spawn(http_reply(addr, "GET", "/ui/api/live", &[], "")))
        .collect();
    let (health, _) = http(addr, "GET", "/healthcheck", "").await;
    let (script, _) = http(addr, "GET", "/ui/app.js", "").await;
    let mut refused = 0;
    for call in flood {
        let reply = call.await.unwrap();
        if reply.starts_with("HTTP/1.0 200") {
            continue;
        }
        assert!(reply.starts_with("HTTP/1.0 429"), "{reply}");
        assert!(
            reply
                .to_ascii_lowercase()
                .contains("\r\nretry-after: 1\r\n"),
            "{reply}"
        );
        let body = reply.split_once("\r\n\r\n").unwrap().1;
        let error: Value = serde_json::from_str(body).unwrap();
        assert!(error["error"].as_str().unwrap().contains("busy"), "{body}");
        refused += 1;
    }
    assert!(refused > 0, "a flood of 150 is refused in part");
    assert_eq!((health, script), (200, 200));
    server.stop().await;
}
