//! The bucket action read off the node a bucket reaches, and the recorded walk explain shows.

use std::sync::Arc;

use super::tests::{bucket, rules};
use super::*;
use crate::clock::SECOND;

const ACTIONS: &str = "domain: q
descriptors:
  - key: plan
    value: free
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: plan
    value: burst
    rate_limit: { unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 100 }
  - key: plan
    value: internal
    rate_limit: { unlimited: true }
  - key: plan
    value: banned
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: plan
    value: trial
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: plan
    value: muted
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: plan
    value: both
    rate_limits:
      - { unit: second, requests_per_unit: 5 }
      - { unit: minute, requests_per_unit: 100 }
      - { window: 2m, requests_per_unit: 200 }
  - key: plan
    value: open
";

fn action(plan: &str) -> BucketAction {
    bucket_action(&rules(ACTIONS), "q", &bucket(&[("plan", plan)]))
}

fn rule(plan: &str) -> Arc<str> {
    Arc::from(format!("q.plan_{plan}").as_str())
}

/// Each kind of node maps to its action; the rule is the node's full key.
#[test]
fn each_node_kind_has_its_action() {
    let limited = |plan, requests, window, burst, shadow| BucketAction::Limited {
        rule: rule(plan),
        rate: SharedRate {
            requests,
            window,
            burst,
        },
        shadow,
    };
    assert_eq!(action("free"), limited("free", 10, 60 * SECOND, 10, false));
    assert_eq!(
        action("burst"),
        limited("burst", 60, 60 * SECOND, 100, false),
        "a token bucket's burst is its capacity"
    );
    assert_eq!(
        action("internal"),
        BucketAction::Unlimited {
            rule: rule("internal")
        }
    );
    assert_eq!(
        action("banned"),
        BucketAction::Deny {
            rule: rule("banned"),
            shadow: false
        }
    );
    assert_eq!(action("trial"), limited("trial", 2, SECOND, 2, true));
    assert!(action("trial").shadow());
    assert_eq!(
        action("muted"),
        BucketAction::Deny {
            rule: rule("muted"),
            shadow: true
        }
    );
    assert_eq!(action("open"), BucketAction::NoRule);
    assert_eq!(action("free").rule().map(|r| &**r), Some("q.plan_free"));
}

/// Of several limits the slowest rate is shared (100/min under 5/s); a tie keeps the first.
#[test]
fn the_tightest_of_several_limits_is_shared() {
    let BucketAction::Limited { rate, .. } = action("both") else {
        panic!("{:?}", action("both"));
    };
    assert_eq!((rate.requests, rate.window), (100, 60 * SECOND));
    let set = rules(ACTIONS);
    let node = set
        .domain("q")
        .unwrap()
        .lookup_bucket(&bucket(&[("plan", "both")]))
        .unwrap()
        .node();
    let counted: Vec<_> = node
        .limits
        .iter()
        .map(|l| match &l.kind {
            crate::rules::LimitKind::Counted(c) => *c,
            crate::rules::LimitKind::Unlimited => unreachable!(),
        })
        .collect();
    let tie = [counted[1], counted[2]];
    assert_eq!(
        tightest(&tie).map(|l| l.window),
        Some(60 * SECOND),
        "100/1m and 200/2m tie: the first"
    );
    let reversed = [counted[2], counted[1]];
    assert_eq!(tightest(&reversed).map(|l| l.window), Some(120 * SECOND));
    assert!(tightest(&[]).is_none());
}

/// What Envoy is told, in the words explain prints.
#[test]
fn actions_are_described() {
    assert_eq!(
        action("free").describe(),
        "token bucket shared: 10 per 1m, burst 10"
    );
    assert_eq!(action("internal").describe(), "ALLOW_ALL (unlimited)");
    assert_eq!(action("banned").describe(), "DENY_ALL (zero limit)");
    assert_eq!(action("open").describe(), "ALLOW_ALL (no rule)");
    assert_eq!(
        action("trial").describe(),
        "ALLOW_ALL (shadow mode; would be a token bucket shared: 2 per 1s, burst 2)"
    );
}

/// The recorded walk: every candidate in the order tried, what became of each, and why.
#[test]
fn the_walk_records_backtracking() {
    let set = rules(
        "domain: q
descriptors:
  - key: tenant
    value: a
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tenant
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 2 }
",
    );
    let walk = walk_bucket(&set, "q", &bucket(&[("path", "/x"), ("tenant", "a")]));
    let trials: Vec<_> = walk
        .trials
        .iter()
        .map(|t| (t.depth, t.node.full_key.as_str(), t.kind, t.outcome))
        .collect();
    use crate::rules::MatchKind::*;
    use TrialOutcome::*;
    assert_eq!(
        trials,
        [
            (0, "q.tenant_a", Exact, NothingBelow),
            (0, "q.tenant", KeyOnly, Continued),
            (1, "q.tenant.path", KeyOnly, Complete),
        ]
    );
    assert_eq!(walk.action().rule().map(|r| &**r), Some("q.tenant.path"));
    assert!(
        walk.describe().contains("shared among the Envoys"),
        "{}",
        walk.describe()
    );
    let none = walk_bucket(&set, "q", &bucket(&[("colour", "red")]));
    assert_eq!(none.found.as_ref().unwrap_err(), &BucketMiss::NoPath);
    assert!(
        none.describe().contains("keys there: tenant"),
        "{}",
        none.describe()
    );
    let left = walk_bucket(
        &set,
        "q",
        &bucket(&[("tenant", "a"), ("user", "u"), ("x", "1")]),
    );
    assert!(
        left.describe().contains("no path through the rules"),
        "{}",
        left.describe()
    );
    assert_eq!(left.trials[1].outcome, NoChildren);
    assert_eq!(left.trials[0].outcome, DeadEndsBelow);
    let unknown = walk_bucket(&set, "nowhere", &bucket(&[("tenant", "a")]));
    assert!(unknown.describe().contains("domain is not loaded"));
    assert!(
        walk_bucket(&set, "q", &bucket(&[]))
            .describe()
            .contains("no entries")
    );
    let many = (0..20).map(|i| (format!("k{i}"), String::new())).collect();
    assert!(
        walk_bucket(&set, "q", &many)
            .describe()
            .contains("refuses such a bucket")
    );
}
