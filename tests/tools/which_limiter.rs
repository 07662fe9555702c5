//! Which limiter when, measured: two Envoys of one "deployment" in front of one upstream, a
//! limit of 100 requests (a bucket refilled over 30 days, a window of an hour: nothing comes
//! back during the run), enforced by Envoy's own `local_ratelimit` (a bucket per Envoy), by the
//! same with `local_cluster_rate_limit` (the bucket divided by the Envoys of the local cluster),
//! and by sluice (one counter for all).
//! Three traffic shapes: 300 requests spread evenly over both Envoys; all 300 to one; then that
//! one restarted and sent 150 more. The admissions are counted and printed as
//! docs/which-limiter.md quotes them:
//!
//! ```text
//! cargo test --locked --features fuzzing --test tools which_limiter -- --ignored --nocapture
//! ```

use std::net::SocketAddr;

use crate::common::envoy::Envoy;
use crate::common::http1::{self, Upstream};
use crate::common::process::Sluice;
use crate::common::redis::free_port;

/// The limit every setup enforces.
const LIMIT: usize = 100;

/// sluice's rule: the same 100, per hour, one counter for every Envoy.
const RULES: &str = "domain: compare\ndescriptors:\n  - key: generic_key\n    value: all\n    rate_limit: { unit: hour, requests_per_unit: 100 }\n";

/// The three limiters, as the `http_filters` entry each puts before the router.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Limiter {
    Local,
    LocalCluster,
    Sluice,
}

impl Limiter {
    fn name(self) -> &'static str {
        match self {
            Limiter::Local => "local_ratelimit",
            Limiter::LocalCluster => "local_ratelimit + local_cluster_rate_limit",
            Limiter::Sluice => "sluice (ratelimit filter)",
        }
    }

    /// The filter entry, indented as under `http_filters:`.
    fn filter(self) -> String {
        let local = |extra: &str| {
            format!(
                r#"          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local
              token_bucket: {{ max_tokens: {LIMIT}, tokens_per_fill: {LIMIT}, fill_interval: 2592000s }}
              filter_enabled: {{ default_value: {{ numerator: 100, denominator: HUNDRED }} }}
              filter_enforced: {{ default_value: {{ numerator: 100, denominator: HUNDRED }} }}
{extra}"#
            )
        };
        match self {
            Limiter::Local => local(""),
            Limiter::LocalCluster => local("              local_cluster_rate_limit: {}\n"),
            Limiter::Sluice => r#"          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: compare
              timeout: 2s
              failure_mode_deny: true
              rate_limit_service:
                transport_api_version: V3
                grpc_service: { envoy_grpc: { cluster_name: sluice } }
"#
            .to_owned(),
        }
    }
}

/// Two Envoys (on fixed ports, so each names both in its local cluster), an upstream and, for
/// sluice, the server.
struct Deployment {
    limiter: Limiter,
    ports: [u16; 2],
    upstream: Upstream,
    sluice: Option<Sluice>,
    envoys: Vec<Envoy>,
}

impl Deployment {
    fn start(limiter: Limiter) -> Self {
        let sluice = (limiter == Limiter::Sluice).then(|| Sluice::start(RULES, &["--no-persist"]));
        let mut deployment = Self {
            limiter,
            ports: [free_port(), free_port()],
            upstream: Upstream::start(),
            sluice,
            envoys: Vec::new(),
        };
        deployment.envoys = (0..2).map(|i| deployment.envoy(i)).collect();
        deployment
    }

    fn envoy(&self, i: usize) -> Envoy {
        let sluice = self.sluice.as_ref().map_or(0, |s| s.grpc_addr.port());
        let bootstrap = include_str!("../fixtures/limiters/envoy.yaml")
            .replace("          LIMITER\n", &self.limiter.filter())
            .replace("LISTENER_PORT", &self.ports[i].to_string())
            .replace("PEER_A_PORT", &self.ports[0].to_string())
            .replace("PEER_B_PORT", &self.ports[1].to_string())
            .replace("UPSTREAM_PORT", &self.upstream.addr.port().to_string())
            .replace("SLUICE_PORT", &sluice.to_string());
        Envoy::start(&bootstrap)
    }

    /// Envoy `i` stopped and started again (a restart, a rollout, a pod rescheduled).
    fn restart(&mut self, i: usize) {
        drop(self.envoys.remove(i));
        let envoy = self.envoy(i);
        self.envoys.insert(i, envoy);
    }

    /// Sends `n` requests to Envoy `i`; how many were admitted.
    fn send(&self, i: usize, n: usize) -> usize {
        let listener: SocketAddr = self.envoys[i].listener;
        (0..n)
            .filter(|_| http1::get(listener, "/", &[]).status == 200)
            .count()
    }
}

/// The admissions of each traffic shape under `limiter`: even, skewed, and what the skewed
/// Envoy admits after its restart.
fn measure(limiter: Limiter) -> [usize; 3] {
    let even = Deployment::start(limiter);
    let spread = (0..150).map(|_| even.send(0, 1) + even.send(1, 1)).sum();
    drop(even);
    let mut skewed = Deployment::start(limiter);
    let one = skewed.send(0, 300);
    skewed.restart(0);
    [spread, one, skewed.send(0, 150)]
}

/// The table, and the facts it shows: a bucket per Envoy admits the limit per Envoy (twice it
/// here) and the limit again after a restart; divided over the local cluster it holds the total
/// when traffic is even, admits only its share when traffic is not, and refills its share on a
/// restart; sluice admits exactly the limit in every shape, and nothing more after a restart.
#[test]
#[ignore = "needs envoy (scripts/test installs it)"]
fn which_limiter_admits_what() {
    println!("limit {LIMIT}; admitted by two Envoys:");
    println!("| limiter | even (150 + 150) | skewed (300 to one) | that one restarted, 150 more |");
    println!("| --- | --- | --- | --- |");
    let mut measured = Vec::new();
    for limiter in [Limiter::Local, Limiter::LocalCluster, Limiter::Sluice] {
        let [even, skewed, restarted] = measure(limiter);
        println!("| {} | {even} | {skewed} | {restarted} |", limiter.name());
        measured.push([even, skewed, restarted]);
    }
    let l = LIMIT;
    assert_eq!(measured[0], [2 * l, l, l], "local_ratelimit");
    assert_eq!(measured[1], [l, l / 2, l / 2], "local_cluster_rate_limit");
    assert_eq!(measured[2], [l, l, 0], "sluice");
}
