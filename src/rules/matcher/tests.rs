//! Matching and stats keys: envoyproxy/ratelimit's `config_test.go` cases (§6.3) against
//! reconstructed fixtures, plus the wildcard pattern itself.

use std::path::{Path, PathBuf};

use super::{Pattern, override_stats_key};
use crate::rules::{LimitKind, LoadOptions, RuleSet, Unit, load, load_sources};

/// Loads a fixture under `tests/fixtures/rules/`.
fn fixture(name: &str) -> RuleSet {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rules")
        .join(name);
    load(&[path], &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn inline(yaml: &str) -> RuleSet {
    load_sources(
        &[(PathBuf::from("t.yaml"), yaml.to_string())],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `(requests_per_unit, unit, stats key)` of the limit `entries` get in `domain`, if any.
fn limited(
    set: &RuleSet,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Option<Unit>, String)> {
    let m = set.domain(domain)?.lookup(entries)?;
    let limit = m.limits().first()?;
    Some((
        limit.requests_per_unit,
        limit.unit,
        m.stats_key(domain, entries).into_owned(),
    ))
}

/// The stats key of the limit `entries` get in the first domain of `set`.
fn stats(set: &RuleSet, entries: &[(&str, &str)]) -> String {
    let domain = set.domains.keys().next().map_or("", String::as_str);
    limited(set, domain, entries)
        .map(|l| l.2)
        .unwrap_or_default()
}

/// basic_config: unknown domains, empty and partial descriptors, depth and whitelists.
#[test]
fn basic_config_no_limit_cases() {
    let set = fixture("basic_config.yaml");
    let d = set
        .domain("test-domain")
        .unwrap_or_else(|| panic!("domain"));
    assert!(set.domain("foo_domain").is_none());
    assert!(d.lookup(&[]).is_none());
    assert!(d.lookup(&[("key1", "something")]).is_none());
    // Matched, but the node has no limit of its own.
    assert!(
        d.lookup(&[("key1", "value1")])
            .is_some_and(|m| m.limits().is_empty())
    );
    // Deeper than the config, and a child value that does not match.
    assert!(
        d.lookup(&[("key2", "value2"), ("subkey", "subvalue")])
            .is_none()
    );
    assert!(
        d.lookup(&[("key5", "value5"), ("subkey5", "subvalue")])
            .is_none()
    );
    // The whitelist entry matches with no limit.
    let white = d
        .lookup(&[("key2", "value3")])
        .unwrap_or_else(|| panic!("whitelist"));
    assert!(white.node().limits.is_empty());
    assert_eq!(white.nodes().len(), 1);
}

/// basic_config: key-only defaults, value overrides, names and unlimited.
#[test]
fn basic_config_limits() {
    let set = fixture("basic_config.yaml");
    let got = |e: &[(&str, &str)]| limited(&set, "test-domain", e);
    let key = |s: &str| format!("test-domain.{s}");
    assert_eq!(
        got(&[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Some(Unit::Second), key("key1_value1.subkey1")))
    );
    assert_eq!(
        got(&[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Some(Unit::Second), key("key1_value1.subkey1_subvalue1")))
    );
    assert_eq!(
        got(&[("key2", "something")]),
        Some((20, Some(Unit::Minute), key("key2")))
    );
    assert_eq!(
        got(&[("key2", "value2")]),
        Some((30, Some(Unit::Minute), key("key2_value2")))
    );
    assert_eq!(
        got(&[("key3", "foo")]),
        Some((1, Some(Unit::Hour), key("key3")))
    );
    let d = set
        .domain("test-domain")
        .unwrap_or_else(|| panic!("domain"));
    let name = |k| {
        d.lookup(&[(k, "foo")])
            .and_then(|m| m.limits()[0].name.clone())
    };
    assert_eq!(name("key3"), None);
    assert_eq!(name("key4").as_deref(), Some("key4_rate_limit"));
    let key6 = d
        .lookup(&[("key6", "foo")])
        .map(|m| m.limits()[0].kind.clone());
    assert_eq!(key6, Some(LimitKind::Unlimited));
    // detailed_metric: one rule, a stats key per runtime value.
    assert_eq!(
        stats(&set, &[("key7", "unspecified_value")]),
        key("key7_unspecified_value")
    );
    assert_eq!(
        stats(&set, &[("key7", "another_value")]),
        key("key7_another_value")
    );
}

/// No backtracking: once the exact node matched, its key-only sibling is never tried.
#[test]
fn no_backtracking() {
    let set = inline(
        "domain: d\ndescriptors:\n  - key: a\n    value: x\n    descriptors: [{key: b, rate_limit: {unit: second}}]\n  \
         - key: a\n    descriptors: [{key: c, rate_limit: {unit: second}}]\n",
    );
    let d = set.domain("d").unwrap_or_else(|| panic!("domain"));
    assert!(d.lookup(&[("a", "x"), ("c", "1")]).is_none());
    assert!(d.lookup(&[("a", "y"), ("c", "1")]).is_some());
    assert!(d.lookup(&[("a", "x"), ("b", "1")]).is_some());
}

/// shadow_mode belongs to the node that sets it: not inherited, not shared with siblings.
#[test]
fn shadow_mode_is_per_node() {
    let set = fixture("shadowmode_config.yaml");
    let d = set
        .domain("test-domain")
        .unwrap_or_else(|| panic!("domain"));
    let shadow = |e: &[(&str, &str)]| d.lookup(e).map(|m| m.node().shadow_mode);
    assert_eq!(
        shadow(&[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some(true)
    );
    assert_eq!(
        shadow(&[("key1", "value1"), ("subkey1", "other")]),
        Some(false)
    );
    assert_eq!(shadow(&[("key2", "anything")]), Some(true));
    assert_eq!(shadow(&[("key2", "value2")]), Some(false));
}

/// wildcard.yaml: trailing, middle, multiple and nested wildcards; exact values never prefix-match.
#[test]
fn wildcards() {
    let set = fixture("wildcard.yaml");
    let s = |k: &str, v: &str| stats(&set, &[(k, v)]);
    assert_eq!(s("noVal", "foo1"), "test-domain.noVal");
    assert_eq!(s("noVal", "foo2"), "test-domain.noVal");
    assert_eq!(s("wild", "foo1"), "test-domain.wild_foo*");
    assert_eq!(s("wild", "foo2"), "test-domain.wild_foo*");
    assert_eq!(s("wild", "foo"), "test-domain.wild_foo*");
    assert_eq!(
        stats(&set, &[("nestedWild", "val1"), ("wild", "goo2")]),
        "test-domain.nestedWild_val1.wild_goo*"
    );
    assert_eq!(s("wild", "bar"), "");
    assert_eq!(s("noWild", "foo1"), "");
    for v in ["barab", "bar123b", "barb"] {
        assert_eq!(s("midWild", v), "test-domain.midWild_bar*b", "{v}");
    }
    for v in ["bara", "xbarb"] {
        assert_eq!(s("midWild", v), "", "{v}");
    }
    for v in ["foo123bar456baz", "foobarbaz"] {
        assert_eq!(
            s("multiWild", v),
            "test-domain.multiWild_foo*bar*baz",
            "{v}"
        );
    }
    for v in ["foo123baz", "bar456baz"] {
        assert_eq!(s("multiWild", v), "", "{v}");
    }
    // envoyproxy/ratelimit's `wild` + `foo*` also matches key `wild_foo`; here the key must be
    // equal.
    assert_eq!(s("wild_foo", "x"), "");
}

/// detailed_metric on the applied node puts every level's runtime value in the stats key.
#[test]
fn detailed_metric_stats_keys() {
    let tree = |flag: bool| {
        inline(&format!(
            "domain: nested\ndescriptors:\n  - key: key-1\n    detailed_metric: {flag}\n    \
             rate_limit: {{unit: minute, requests_per_unit: 1}}\n    descriptors:\n      \
             - key: key-2\n        detailed_metric: {flag}\n        rate_limit: {{unit: minute}}\n"
        ))
    };
    let (on, off) = (tree(true), tree(false));
    let one = [("key-1", "value-1")];
    let two = [("key-1", "value-1"), ("key-2", "value-2")];
    assert_eq!(stats(&on, &one), "nested.key-1_value-1");
    assert_eq!(stats(&off, &one), "nested.key-1");
    assert_eq!(stats(&on, &two), "nested.key-1_value-1.key-2_value-2");
    assert_eq!(stats(&off, &two), "nested.key-1.key-2");
    let realistic = inline(
        "domain: rl\ndescriptors:\n  - key: destination_cluster\n    value: mock\n    descriptors:\n      \
         - key: source_cluster\n        detailed_metric: true\n        rate_limit: {unit: second}\n",
    );
    assert_eq!(
        stats(
            &realistic,
            &[("destination_cluster", "mock"), ("source_cluster", "proxy")]
        ),
        "rl.destination_cluster_mock.source_cluster_proxy"
    );
}

/// value_to_metric puts that level's runtime value in the stats key; detailed_metric wins.
#[test]
fn value_to_metric_stats_keys() {
    let tree = |route: &str, method: &str, leaf: &str| {
        inline(&format!(
            "domain: domain\ndescriptors:\n  - key: route\n{route}    descriptors:\n      - key: http_method\n\
             {method}        descriptors:\n          - key: subject_id\n{leaf}            rate_limit: {{unit: minute}}\n"
        ))
    };
    let (vtm4, vtm8) = (
        "    value_to_metric: true\n",
        "        value_to_metric: true\n",
    );
    let req = [
        ("route", "draw"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    assert_eq!(
        stats(&tree(vtm4, vtm8, ""), &req),
        "domain.route_draw.http_method_GET.subject_id"
    );
    assert_eq!(
        stats(&tree("", vtm8, ""), &req),
        "domain.route.http_method_GET.subject_id"
    );
    assert_eq!(
        stats(&tree("", "", ""), &req),
        "domain.route.http_method.subject_id"
    );
    let detailed = tree(vtm4, vtm8, "            detailed_metric: true\n");
    assert_eq!(
        stats(&detailed, &req),
        "domain.route_draw.http_method_GET.subject_id_123"
    );
    // An empty runtime value gives just the key.
    let empty = [("route", ""), ("http_method", "GET"), ("subject_id", "1")];
    assert_eq!(
        stats(&tree(vtm4, vtm8, ""), &empty),
        "domain.route.http_method_GET.subject_id"
    );
    // Configured values are always shown; a flagged wildcard shows the full runtime value.
    let mixed = inline(
        "domain: d\ndescriptors:\n  - key: k1\n    value: X\n    descriptors:\n      - key: k2\n        \
         value_to_metric: true\n        descriptors:\n          - key: action\n            value: read*\n            \
         value_to_metric: true\n            rate_limit: {unit: minute}\n",
    );
    assert_eq!(
        stats(&mixed, &[("k1", "X"), ("k2", "Y"), ("action", "readfile")]),
        "d.k1_X.k2_Y.action_readfile"
    );
}

/// share_threshold: the pattern is the stats key segment, over value_to_metric and detailed_metric.
#[test]
fn share_threshold_stats_keys() {
    let set = fixture("share_threshold.yaml");
    let s = |e: &[(&str, &str)]| stats(&set, e);
    assert_eq!(s(&[("files", "files/a.txt")]), "test-domain.files_files/*");
    assert_eq!(s(&[("files", "files/b.txt")]), "test-domain.files_files/*");
    assert_eq!(
        s(&[("route", "api/v1"), ("method", "GET")]),
        "test-domain.route_api/*.method"
    );
    assert_eq!(
        s(&[("service", "svc/a"), ("endpoint", "get")]),
        "test-domain.service_svc/*.endpoint_get"
    );
    assert_eq!(
        s(&[("nested", "parent"), ("files", "nested/x")]),
        "test-domain.nested_parent.files_nested/*"
    );
    assert_eq!(
        s(&[("files", "top/x"), ("files", "nested/y")]),
        "test-domain.files_top/*.files_nested/*"
    );
    assert_eq!(
        s(&[("path", "path/a"), ("file", "file/b"), ("type", "pdf")]),
        "test-domain.path_path/*.file_file/*.type"
    );
    // The explicit value beats the shared wildcard: its own node and stats key.
    let d = set
        .domain("test-domain")
        .unwrap_or_else(|| panic!("domain"));
    let test1 = d
        .lookup(&[("file", "test1")])
        .map(|m| (m.node().share_threshold, m.limits()[0].requests_per_unit));
    assert_eq!(test1, Some((false, 50)));
    assert_eq!(s(&[("file", "test1")]), "test-domain.file_test1");
    assert_eq!(s(&[("file", "test2")]), "test-domain.file_test*");
    assert_eq!(
        s(&[("midpath", "/api/users/v1")]),
        "test-domain.midpath_/api*v1"
    );
    assert_eq!(
        s(&[("multiroute", "svc-a-ep-b-rpc")]),
        "test-domain.multiroute_svc*ep*rpc"
    );
    assert_eq!(
        s(&[("tenant", "t1prod"), ("resource", "res9v2")]),
        "test-domain.tenant_t*prod.resource_res*v2"
    );
}

/// Wildcard stats keys: the pattern, the runtime value with value_to_metric, the pattern with
/// share_threshold.
#[test]
fn wildcard_stats_keys() {
    let set = inline(
        "domain: d\ndescriptors:\n  - {key: plain, value: 'a*', rate_limit: {unit: second}}\n  \
         - {key: vtm, value: 'a*', value_to_metric: true, rate_limit: {unit: second}}\n  \
         - {key: both, value: 'a*', value_to_metric: true, share_threshold: true, rate_limit: {unit: second}}\n  \
         - {key: mid, value: 'a*b*', rate_limit: {unit: second}}\n  \
         - key: outer\n    value_to_metric: true\n    descriptors: [{key: inner, value: 'x*', rate_limit: {unit: second}}]\n",
    );
    assert_eq!(stats(&set, &[("plain", "abc")]), "d.plain_a*");
    assert_eq!(stats(&set, &[("vtm", "abc")]), "d.vtm_abc");
    assert_eq!(stats(&set, &[("both", "abc")]), "d.both_a*");
    assert_eq!(stats(&set, &[("mid", "a1b2")]), "d.mid_a*b*");
    assert_eq!(
        stats(&set, &[("outer", "o"), ("inner", "xyz")]),
        "d.outer_o.inner_x*"
    );
}

/// metadata.yaml: the node's metadata is attached to what the lookup returns.
#[test]
fn metadata_attached() {
    let set = fixture("metadata.yaml");
    let d = set
        .domain("test-domain")
        .unwrap_or_else(|| panic!("domain"));
    let meta = |v| {
        d.lookup(&[("service", v)])
            .and_then(|m| m.node().metadata.clone())
    };
    assert_eq!(meta("one"), Some(serde_json::json!({"name": "service_1"})));
    let two = meta("two").unwrap_or_default();
    assert_eq!(two["service_with_quota"]["name"], "service_2");
    assert_eq!(
        two["service_with_quota"]["tiers"],
        serde_json::json!(["gold", "silver"])
    );
    assert_eq!(two["service_with_quota"]["weight"], 0.5);
}

/// A request-side override's stats key includes every runtime value.
#[test]
fn override_key() {
    let entries = [("key1", "value1"), ("subkey1", "something"), ("empty", "")];
    assert_eq!(
        override_stats_key("test-domain", &entries),
        "test-domain.key1_value1.subkey1_something.empty"
    );
}

/// `*` matches any run of characters, in order; no `*` means equality.
#[test]
fn pattern_matching() {
    let m = |p: &str, v: &str| Pattern::new(p).matches(v);
    assert!(m("*", "") && m("*", "anything") && m("**", "x"));
    assert!(m("foo*", "foo") && m("foo*", "foobar") && !m("foo*", "fo"));
    assert!(m("*bar", "bar") && m("*bar", "foobar") && !m("*bar", "barx"));
    assert!(
        m("ab*ba", "abba") && !m("ab*ba", "aba"),
        "prefix and suffix may not overlap"
    );
    assert!(m("a*b*c", "abc") && m("a*b*c", "aXbYc") && !m("a*b*c", "acb"));
    assert!(m("/api/*/action", "/api/v1/action") && !m("/api/*/action", "/api/v1/other"));
    assert!(m("é*ü", "éxyzü") && !m("é*ü", "éxyz"));
    assert!(m("exact", "exact") && !m("exact", "exactly"));
    assert_eq!(Pattern::new("a*b").as_str(), "a*b");
}
