//! The replay's harness: `ratelimit` started with envoyproxy/ratelimit's variables over rules in
//! envoyproxy/ratelimit's layout, calls sent over gRPC and `/json` (alternately, unless a case
//! names one), the answer as envoyproxy/ratelimit's tests look at it, and the tally of cases.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_response::rate_limit::Unit;
use sluice::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

use crate::common::ratelimit::Ratelimit;
use crate::common::{self, Client, sample};

/// envoyproxy/ratelimit's variables every replay sets: listeners on loopback port 0, rules from
/// `RUNTIME_ROOT/ratelimit/config` watched as a ConfigMap is (`RUNTIME_WATCH_ROOT=false`), Redis
/// over TCP, no statsd. `SLUICE_REDIS_TIMEOUT` gives calls five seconds on a loaded test
/// machine (sluice's own 10 ms would let a slow Redis answer count as an outage, answered by
/// the rules' failure_mode instead of by Redis).
const BASE: &[(&str, &str)] = &[
    ("HOST", "127.0.0.1"),
    ("PORT", "0"),
    ("GRPC_HOST", "127.0.0.1"),
    ("GRPC_PORT", "0"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("USE_STATSD", "false"),
    ("LOG_LEVEL", "info"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("SLUICE_REDIS_TIMEOUT", "5s"),
];

/// A rule file of its own that the harness adds when Redis is used, to tell when calls are
/// answered by Redis (sluice listens before Redis is connected and answers by failure_mode
/// meanwhile, marked degraded).
const WARM_UP: (&str, &str) = (
    "replay_warm_up.yaml",
    "domain: replay-warm-up\ndescriptors:\n  - key: warm\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n",
);

/// How a call travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Json,
}

/// A call's outcome: an answer, or the error each transport reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answer(RateLimitResponse),
    /// gRPC: the status code's name; `/json`: the HTTP status. Then the message.
    Error(String, String),
}

impl Outcome {
    /// The answer (panics with the error otherwise).
    pub fn answer(self) -> RateLimitResponse {
        match self {
            Outcome::Answer(response) => response,
            Outcome::Error(code, message) => panic!("expected an answer, got {code}: {message}"),
        }
    }
}

/// `ratelimit` with its rule directory and a gRPC client.
pub struct Replay {
    pub ratelimit: Ratelimit,
    /// `RUNTIME_ROOT/ratelimit/config`.
    pub rules: PathBuf,
    client: Client,
    calls: u64,
    _root: tempfile::TempDir,
}

impl Replay {
    /// Starts `ratelimit` over `files` with envoyproxy/ratelimit's variables `env` (after
    /// [`BASE`]); with `redis_url`, waits until calls are decided by that Redis.
    pub async fn start(files: &[(&str, &str)], env: &[(&str, &str)], redis_url: &str) -> Self {
        let mut all = files.to_vec();
        all.push(WARM_UP);
        let replay = Self::start_bare(&all, env, redis_url).await;
        replay.wait_for_redis().await;
        replay
    }

    /// As [`Replay::start`], without waiting for Redis (which may not be there).
    pub async fn start_bare(files: &[(&str, &str)], env: &[(&str, &str)], redis_url: &str) -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let rules = root.path().join("ratelimit/config");
        std::fs::create_dir_all(&rules).unwrap();
        for (name, text) in files {
            std::fs::write(rules.join(name), text).unwrap();
        }
        let mut vars: Vec<(String, String)> = BASE
            .iter()
            .chain(env)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        vars.push(("RUNTIME_ROOT".into(), root.path().display().to_string()));
        if !env.iter().any(|(k, _)| *k == "REDIS_URL") {
            vars.push(("REDIS_URL".into(), redis_url.to_owned()));
        }
        let ratelimit = Ratelimit::start(&vars);
        let client = common::connect(ratelimit.grpc).await;
        Self {
            ratelimit,
            rules,
            client,
            calls: 0,
            _root: root,
        }
    }

    async fn wait_for_redis(&self) {
        let mut client = self.client.clone();
        let warm = common::one_descriptor("replay-warm-up", &[("warm", "up")]);
        // Every pooled connection must be up, not only the first: ten answers from Redis in a
        // row, so no case meets a connection still being opened.
        let mut in_a_row = 0;
        common::eventually(
            Duration::from_secs(30),
            "calls answered by Redis",
            async || {
                let response = common::call(&mut client, warm.clone()).await;
                match common::header(&response, "x-ratelimit-mode") {
                    None => in_a_row += 1,
                    Some(_) => in_a_row = 0,
                }
                in_a_row >= 10
            },
        )
        .await;
    }

    /// Sends `request` over gRPC and `/json` in turn.
    pub async fn call(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.calls += 1;
        let transport = if self.calls % 2 == 1 {
            Transport::Grpc
        } else {
            Transport::Json
        };
        let response = self.send(transport, request).await.answer();
        // An answer by the rules' failure_mode is not what any envoyproxy/ratelimit case is about:
        // it could only match by chance, so it fails the test instead.
        assert_eq!(
            common::header(&response, "x-ratelimit-mode"),
            None,
            "answered without Redis (failure_mode): {response:?}\n{}",
            self.ratelimit.log()
        );
        response
    }

    /// Sends `request` over `transport`.
    pub async fn send(&mut self, transport: Transport, request: RateLimitRequest) -> Outcome {
        match transport {
            Transport::Grpc => match self.client.should_rate_limit(request).await {
                Ok(response) => Outcome::Answer(response.into_inner()),
                Err(status) => {
                    Outcome::Error(format!("{:?}", status.code()), status.message().to_owned())
                }
            },
            Transport::Json => {
                let body = serde_json::to_string(&request).unwrap();
                let (status, body) =
                    common::http(self.ratelimit.http, "POST", "/json", &body).await;
                if status != 200 && status != 429 {
                    return Outcome::Error(status.to_string(), body.trim().to_owned());
                }
                let response: RateLimitResponse = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("/json answered {status} {body:?}: {e}"));
                let over = response.overall_code() == Code::OverLimit;
                assert_eq!(
                    status == 429,
                    over,
                    "/json status {status} for {response:?}"
                );
                Outcome::Answer(response)
            }
        }
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        common::http(self.ratelimit.http, "GET", "/metrics", "")
            .await
            .1
    }

    /// One per-rule statistic (`total_hits`, `over_limit`, …) of the stats key `domain.key1.key2`
    /// (envoyproxy/ratelimit's Prometheus labels; `key2` empty for one level).
    pub async fn stat(&self, stat: &str, domain: &str, key1: &str, key2: &str) -> f64 {
        let series = format!(
            "ratelimit_service_rate_limit_{stat}{{domain=\"{domain}\",key1=\"{key1}\",key2=\"{key2}\"}}"
        );
        sample(&self.metrics().await, &series)
    }

    /// A metric without labels.
    pub async fn plain(&self, name: &str) -> f64 {
        sample(&self.metrics().await, name)
    }

    /// Writes (or replaces) the rule file `name`.
    pub fn write_rules(&self, name: &str, text: &str) {
        std::fs::write(self.rules.join(name), text).unwrap();
    }

    /// Removes the rule file `name`.
    pub fn remove_rules(&self, name: &str) {
        std::fs::remove_file(self.rules.join(name)).unwrap();
    }
}

/// A descriptor's entries, as a case table writes them.
pub type Entries = &'static [(&'static str, &'static str)];

/// A status as envoyproxy/ratelimit's tests look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub code: &'static str,
    /// `requests_per_unit`, unit and name of `current_limit`.
    pub limit: Option<(u32, &'static str, String)>,
    pub remaining: u32,
    /// Whether `duration_until_reset` is set.
    pub reset: bool,
}

/// Status `i` of `response` as seen.
pub fn seen(response: &RateLimitResponse, i: usize) -> Seen {
    let status = &response.statuses[i];
    Seen {
        code: status.code().as_str_name(),
        limit: status.current_limit.as_ref().map(|l| {
            let unit = Unit::try_from(l.unit).map_or("?", |u| u.as_str_name());
            (l.requests_per_unit, unit, l.name.clone())
        }),
        remaining: status.limit_remaining,
        reset: status.duration_until_reset.is_some(),
    }
}

/// OK without a limit (no match, unknown domain, whitelist, replaced).
pub fn no_limit() -> Seen {
    Seen {
        code: "OK",
        limit: None,
        remaining: 0,
        reset: false,
    }
}

/// An `unlimited` rule's status.
pub fn unlimited() -> Seen {
    Seen {
        remaining: u32::MAX,
        ..no_limit()
    }
}

/// OK under `requests_per_unit`/`unit` with `remaining` left.
pub fn ok(requests_per_unit: u32, unit: &'static str, remaining: u32) -> Seen {
    named_ok(requests_per_unit, unit, "", remaining)
}

/// As [`ok`], for a rule with a `name`.
pub fn named_ok(requests_per_unit: u32, unit: &'static str, name: &str, remaining: u32) -> Seen {
    Seen {
        code: "OK",
        limit: Some((requests_per_unit, unit, name.to_owned())),
        remaining,
        reset: true,
    }
}

/// OVER_LIMIT under `requests_per_unit`/`unit`.
pub fn over(requests_per_unit: u32, unit: &'static str) -> Seen {
    Seen {
        code: "OVER_LIMIT",
        ..ok(requests_per_unit, unit, 0)
    }
}

/// The overall code's name.
pub fn overall(response: &RateLimitResponse) -> &'static str {
    response.overall_code().as_str_name()
}

/// `d` with a per-descriptor `hits_addend` of `n`.
pub fn hits(mut d: RateLimitDescriptor, n: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(pbjson_types::UInt64Value { value: n });
    d
}

/// The migration page's list of deliberate differences.
fn differences_section() -> &'static str {
    let page = include_str!("../../../docs/migrating.md");
    let start = page
        .find("## Differences from envoyproxy/ratelimit")
        .expect("docs/migrating.md has the Differences section");
    let rest = &page[start + 3..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The cases of one section of envoyproxy/ratelimit's tests: which match, which differ as the
/// migration page's Differences list says, and which differ otherwise (the test fails on those).
pub struct Tally {
    section: &'static str,
    matched: usize,
    documented: Vec<(String, &'static str)>,
    mismatched: Vec<String>,
}

impl Tally {
    pub fn new(section: &'static str) -> Self {
        Self {
            section,
            matched: 0,
            documented: Vec::new(),
            mismatched: Vec::new(),
        }
    }

    /// A case where sluice must answer as envoyproxy/ratelimit's test expects.
    pub fn same<T: PartialEq + std::fmt::Debug>(&mut self, case: &str, upstream: T, actual: T) {
        if actual == upstream {
            self.matched += 1;
        } else {
            self.mismatched.push(format!(
                "{case}: upstream expects {upstream:?}, sluice answered {actual:?}"
            ));
        }
    }

    /// A case where sluice deliberately answers `sluice` instead of envoyproxy/ratelimit's
    /// `upstream`, as the migration page's Differences list says in the bullet containing `readme`.
    pub fn differs<T: PartialEq + std::fmt::Debug>(
        &mut self,
        case: &str,
        upstream: T,
        sluice: T,
        actual: T,
        readme: &'static str,
    ) {
        assert!(
            differences_section().contains(readme),
            "{case}: the migration page's Differences list does not say {readme:?}"
        );
        if upstream == sluice {
            self.mismatched.push(format!(
                "{case}: listed as a difference but upstream's expectation {upstream:?} is sluice's"
            ));
        } else if actual == sluice {
            self.documented.push((case.to_owned(), readme));
        } else {
            self.mismatched.push(format!(
                "{case}: upstream expects {upstream:?}, sluice should answer {sluice:?} ({readme}), answered {actual:?}"
            ));
        }
    }

    /// Prints the counts and the documented differences; fails with every mismatch.
    pub fn finish(self) {
        let cases = self.matched + self.documented.len() + self.mismatched.len();
        println!(
            "upstream replay, {}: {cases} cases, {} match, {} documented differences, {} mismatches",
            self.section,
            self.matched,
            self.documented.len(),
            self.mismatched.len()
        );
        for (case, readme) in &self.documented {
            println!("  documented: {case} — docs/migrating.md: {readme}");
        }
        assert!(
            self.mismatched.is_empty(),
            "{}: {} mismatches:\n{}",
            self.section,
            self.mismatched.len(),
            self.mismatched.join("\n")
        );
    }
}

/// A file of the repository's copies of envoyproxy/ratelimit's rule fixtures
/// (`tests/fixtures/rules/`).
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rules")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
