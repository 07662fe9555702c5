//! Envoy quota (RLQS) buckets explained on `/ui` and by `sluice explain --bucket`: the rules
//! decide the order of a bucket's entries, dead ends are backtracked out of, and the answer is
//! the bucket action Envoy would be told.

use crate::common;

use common::process::{run, temp_dir};
use common::*;
use serde_json::{Value, json};

const RULES: &str = r#"
domain: quota
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tenant
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 90 }
  - key: env
    value: staging
    rate_limit: { unlimited: true }
  - key: env
    value: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;

async fn explain_bucket(server: &TestServer, body: &str) -> (u16, Value) {
    let (status, text) = http(server.http_addr, "POST", "/ui/api/explain-bucket", body).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

fn request(domain: &str, bucket: &str) -> String {
    json!({ "domain": domain, "bucket": bucket }).to_string()
}

/// The page's bucket walk: the exact `tenant=acme` dead-ends (no `path` below it), the key-only
/// `tenant` leads to the rule, and the action is the shared token bucket.
#[tokio::test]
async fn the_page_walks_a_bucket_to_its_bucket_action() {
    let server = TestServer::start(RULES).await;
    let (status, answer) = explain_bucket(&server, &request("quota", "path=/x,tenant=acme")).await;
    assert_eq!(status, 200, "{answer}");
    let trials: Vec<(&str, &str, &str)> = answer["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let field = |f: &str| t[f].as_str().unwrap();
            (field("node"), field("match"), field("outcome"))
        })
        .collect();
    assert_eq!(
        trials,
        [
            ("quota.tenant_acme", "exact", "nothing-below"),
            ("quota.tenant", "key-only", "continued"),
            ("quota.tenant.path", "key-only", "complete"),
        ]
    );
    assert_eq!(answer["rule"], "quota.tenant.path");
    assert_eq!(answer["path"][0]["key"], "tenant");
    assert_eq!(answer["path"][1]["value"], "/x");
    let action = &answer["action"];
    assert_eq!(action["kind"], "limited");
    assert_eq!(action["text"], "token bucket shared: 60 per 1m, burst 90");
    assert_eq!(action["rate"]["window_ms"], 60_000);
    for (bucket, kind, text) in [
        ("env=staging", "unlimited", "ALLOW_ALL (unlimited)"),
        ("env=blocked", "deny", "DENY_ALL (zero limit)"),
        ("env=prod", "no_rule", "ALLOW_ALL (no rule)"),
        ("tenant=acme,colour=red", "no_rule", "ALLOW_ALL (no rule)"),
    ] {
        let (_, answer) = explain_bucket(&server, &request("quota", bucket)).await;
        assert_eq!(answer["action"]["kind"], kind, "{bucket}: {answer}");
        assert_eq!(answer["action"]["text"], text, "{bucket}: {answer}");
    }
    let (_, answer) = explain_bucket(&server, &request("nowhere", "a=b")).await;
    assert!(
        answer["why"]
            .as_str()
            .unwrap()
            .contains("domain is not loaded")
    );
    server.stop().await;
}

/// Bad bucket input is a 400 that says what is wrong.
#[tokio::test]
async fn the_page_refuses_bad_buckets() {
    let server = TestServer::start(RULES).await;
    let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
    for (body, says) in [
        ("[]".to_owned(), "a domain is required"),
        (
            json!({ "domain": "quota" }).to_string(),
            "a bucket id is required",
        ),
        (request("quota", "a=b,a=c"), "given twice"),
        (request("quota", "novalue"), "is not key=value"),
        (request("quota", &many.join(",")), "17 entries (at most 16)"),
    ] {
        let (status, answer) = explain_bucket(&server, &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(says),
            "{body}: {answer}"
        );
    }
    server.stop().await;
}

/// `sluice explain --bucket` prints every candidate tried, the rule and the bucket action.
#[test]
fn sluice_explain_walks_a_bucket() {
    let dir = temp_dir(&[("rules.yaml", RULES)]);
    let config = dir.path().to_str().unwrap();
    let out = run([
        "explain",
        "--config",
        config,
        "--domain",
        "quota",
        "--bucket",
        "path=/x,tenant=acme",
        "--bucket",
        "env=blocked",
    ]);
    let text = out.stdout_ok();
    for line in [
        "bucket 1: path=/x, tenant=acme",
        "  level 1: tenant=acme -> quota.tenant_acme (exact value): dead end: no entry left \
         matches a node below; backtracking",
        "  level 1: tenant=acme -> quota.tenant (key-only): entries left: the path goes on below",
        "    level 2: path=/x -> quota.tenant.path (key-only): every entry used: the path ends here",
        "  bucket action: token bucket shared: 60 per 1m, burst 90",
        "bucket 2: env=blocked",
        "  bucket action: DENY_ALL (zero limit)",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    assert!(
        !text.contains("a first call"),
        "no descriptor was asked: {text}"
    );
    let bad = run([
        "explain", "--config", config, "--domain", "quota", "--bucket", "a=1,a=2",
    ]);
    assert_eq!(bad.code(), Some(2), "{bad:?}");
    assert!(bad.stderr.contains("given twice"), "{bad:?}");
}
