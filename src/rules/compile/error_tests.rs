//! Load errors: envoyproxy/ratelimit's fixtures (§6.2) with their exact messages and positions,
//! sluice's own schema errors, and that every error of a load is reported at once.

use std::path::PathBuf;

use super::{LoadOptions, load_sources};

/// `(name, contents)` of a fixture under `tests/fixtures/rules/`, named by its relative path.
macro_rules! fixture {
    ($name:literal) => {
        (
            PathBuf::from($name),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/rules/",
                $name
            ))
            .to_string(),
        )
    };
}

/// Every error of loading `sources`, as `file:line:col: message` lines.
fn errors_with(sources: &[(PathBuf, String)], opts: &LoadOptions) -> Vec<String> {
    match load_sources(sources, opts) {
        Ok(_) => panic!("expected the load to fail"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn errors(sources: &[(PathBuf, String)]) -> Vec<String> {
    errors_with(sources, &LoadOptions::default())
}

/// The single error of loading one fixture.
fn one(source: (PathBuf, String)) -> String {
    let all = errors(&[source]);
    assert_eq!(all.len(), 1, "{all:#?}");
    all.into_iter().next().unwrap_or_default()
}

/// The errors of an inline document named `t.yaml`.
fn inline(yaml: &str) -> Vec<String> {
    errors(&[(PathBuf::from("t.yaml"), yaml.to_string())])
}

/// An invalid unit is reported at the unit's value.
#[test]
fn bad_limit_unit() {
    assert_eq!(
        one(fixture!("invalid/bad_limit_unit.yaml")),
        "invalid/bad_limit_unit.yaml:6:13: invalid rate limit unit 'foo'"
    );
}

/// A YAML syntax error carries envoyproxy/ratelimit's prefix and the parser's position.
#[test]
fn bad_yaml() {
    let e = one(fixture!("invalid/bad_yaml.yaml"));
    assert!(
        e.starts_with("invalid/bad_yaml.yaml:2:1: error loading config file: yaml: line 2: "),
        "{e}"
    );
    assert!(e.ends_with("found unexpected end of stream"), "{e}");
}

/// The same domain in a second file is an error at that file's domain when merging is off.
#[test]
fn duplicate_domain() {
    let all = errors(&[
        fixture!("basic_config.yaml"),
        fixture!("invalid/duplicate_domain.yaml"),
    ]);
    assert_eq!(
        all,
        ["invalid/duplicate_domain.yaml:1:9: duplicate domain 'test-domain' in config file"]
    );
}

/// Two sibling nodes with the same key and value are a duplicate, reported at the second.
#[test]
fn duplicate_key() {
    assert_eq!(
        one(fixture!("invalid/duplicate_key.yaml")),
        "invalid/duplicate_key.yaml:8:5: duplicate descriptor composite key 'test-domain.key1_value1'"
    );
}

/// With merging on, the same top-level node in two files is still a duplicate (no deep merge).
#[test]
fn merge_on_duplicate_key() {
    let opts = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let all = errors_with(
        &[
            fixture!("merge_domain_key1.yaml"),
            fixture!("merge_domain_key1.yaml"),
        ],
        &opts,
    );
    assert_eq!(
        all,
        [
            "merge_domain_key1.yaml:4:5: duplicate descriptor composite key 'test-domain.key1_value1'"
        ]
    );
}

/// An empty or missing domain is reported at the domain or document (no position for an empty
/// file).
#[test]
fn empty_domain() {
    assert_eq!(
        one(fixture!("invalid/empty_domain.yaml")),
        "invalid/empty_domain.yaml:1:9: config file cannot have empty domain"
    );
    assert_eq!(
        one(fixture!("invalid/empty_file.yaml")),
        "invalid/empty_file.yaml: config file cannot have empty domain"
    );
    assert_eq!(
        inline("descriptors: []\n"),
        ["t.yaml:1:1: config file cannot have empty domain"]
    );
    assert_eq!(
        inline("# only a comment\n"),
        ["t.yaml: config file cannot have empty domain"]
    );
    assert_eq!(
        inline("domain:\n"),
        ["t.yaml:1:1: config file cannot have empty domain"]
    );
}

/// A descriptor without a key is reported at the descriptor.
#[test]
fn empty_key() {
    assert_eq!(
        one(fixture!("invalid/empty_key.yaml")),
        "invalid/empty_key.yaml:3:5: descriptor has empty key"
    );
    assert_eq!(
        inline("domain: d\ndescriptors:\n  - key: ''\n"),
        ["t.yaml:3:10: descriptor has empty key"]
    );
}

/// Unknown keys are reported at the key, at any depth.
#[test]
fn misspelled_keys() {
    assert_eq!(
        one(fixture!("invalid/misspelled_key.yaml")),
        "invalid/misspelled_key.yaml:4:5: config error, unknown key 'ratelimit'"
    );
    assert_eq!(
        one(fixture!("invalid/misspelled_key2.yaml")),
        "invalid/misspelled_key2.yaml:6:7: config error, unknown key 'requestsperunit'"
    );
}

/// A list element that is not a map is reported at the element (each one).
#[test]
fn non_map_list() {
    let all = errors(&[fixture!("invalid/non_map_list.yaml")]);
    assert_eq!(
        all[0],
        "invalid/non_map_list.yaml:2:15: config error, yaml file contains list of type other than map: a"
    );
    assert_eq!(all.len(), 3, "{all:#?}");
}

/// A non-string key is reported at the key (and the domain it was meant to be is then missing).
#[test]
fn non_string_key() {
    assert_eq!(
        errors(&[fixture!("invalid/non_string_key.yaml")]),
        [
            "invalid/non_string_key.yaml:1:1: config error, key is not of type string: 0.25",
            "invalid/non_string_key.yaml:1:1: config file cannot have empty domain",
        ]
    );
}

/// An empty `replaces` entry is reported at the entry.
#[test]
fn replaces_empty() {
    assert_eq!(
        one(fixture!("invalid/replaces_empty.yaml")),
        "invalid/replaces_empty.yaml:9:11: should not have an empty replaces entry"
    );
}

/// A limit replacing its own name is reported at the entry.
#[test]
fn replaces_self() {
    assert_eq!(
        one(fixture!("invalid/replaces_self.yaml")),
        "invalid/replaces_self.yaml:9:11: replaces should not contain name of same descriptor"
    );
}

/// `unlimited: true` with a valid unit is reported at the unit.
#[test]
fn unlimited_with_unit() {
    assert_eq!(
        one(fixture!("invalid/unlimited_with_unit.yaml")),
        "invalid/unlimited_with_unit.yaml:6:13: should not specify rate limit unit when unlimited"
    );
}

/// A float leaf is envoyproxy/ratelimit's generic `error checking config`, at the value.
#[test]
fn float_value() {
    assert_eq!(
        one(fixture!("invalid/float_value.yaml")),
        "invalid/float_value.yaml:4:12: error checking config"
    );
}

/// share_threshold needs a wildcard value; the message names the composite key.
#[test]
fn share_threshold_without_wildcard() {
    assert_eq!(
        one(fixture!("invalid/share_threshold_no_wildcard.yaml")),
        "invalid/share_threshold_no_wildcard.yaml:5:5: share_threshold can only be used with \
         wildcard values (containing '*'), but found key 'key1_value1'"
    );
}

/// Metadata that cannot become a JSON object is reported with envoyproxy/ratelimit's prefix.
#[test]
fn bad_metadata() {
    let e = one(fixture!("invalid/bad_metadata.yaml"));
    assert!(
        e.starts_with(
            "invalid/bad_metadata.yaml:5:9: error parsing metadata: key is not of type string"
        ),
        "{e}"
    );
    assert_eq!(
        inline("domain: d\ndescriptors:\n  - key: k\n    metadata: [1]\n"),
        ["t.yaml:4:15: error parsing metadata: metadata must be a map"]
    );
}

/// A file with three different errors yields all three, in position order.
#[test]
fn all_errors_of_a_file_at_once() {
    assert_eq!(
        errors(&[fixture!("invalid/three_errors.yaml")]),
        [
            "invalid/three_errors.yaml:5:5: config error, unknown key 'ratelimit'",
            "invalid/three_errors.yaml:7:5: descriptor has empty key",
            "invalid/three_errors.yaml:10:13: invalid rate limit unit 'fortnight'",
        ]
    );
}

/// Several bad files (one not even YAML) yield the errors of each, in file order.
#[test]
fn all_errors_of_all_files_at_once() {
    let opts = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let all = errors_with(
        &[
            fixture!("invalid/bad_yaml.yaml"),
            fixture!("invalid/bad_limit_unit.yaml"),
            fixture!("merge_domain_key2.yaml"),
            fixture!("invalid/replaces_self.yaml"),
        ],
        &opts,
    );
    assert_eq!(all.len(), 3, "{all:#?}");
    assert!(all[0].starts_with("invalid/bad_yaml.yaml:2:1: "));
    assert!(all[1].starts_with("invalid/bad_limit_unit.yaml:6:13: "));
    assert!(all[2].starts_with("invalid/replaces_self.yaml:9:11: "));
}

/// Values of the wrong type get go-yaml's decoding message, at the value.
#[test]
fn wrong_types() {
    let all = inline(
        "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n    rate_limit:\n      \
         unit: second\n      requests_per_unit: -1\n  - key: [x]\n  - key: l\n    descriptors: x\n  - key: {}\n",
    );
    assert_eq!(
        all,
        [
            "t.yaml:4:18: error loading config file: yaml: unmarshal errors: cannot unmarshal !!str `maybe` into bool",
            "t.yaml:7:26: error loading config file: yaml: unmarshal errors: cannot unmarshal !!int `-1` into uint32",
            // envoyproxy/ratelimit's allow-list walk sees the list first; the type error is not
            // repeated.
            "t.yaml:8:11: config error, yaml file contains list of type other than map: x",
            "t.yaml:10:18: error loading config file: yaml: unmarshal errors: cannot unmarshal !!str `x` into []descriptor",
            "t.yaml:11:10: error loading config file: yaml: unmarshal errors: cannot unmarshal !!map into string",
        ]
    );
    assert_eq!(
        inline("- a\n"),
        [
            "t.yaml:1:1: error loading config file: yaml: unmarshal errors: cannot unmarshal !!seq into map"
        ]
    );
}

/// requests_per_unit must fit a u32.
#[test]
fn requests_per_unit_range() {
    let all = inline(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
    );
    assert_eq!(all.len(), 1);
    assert!(
        all[0].ends_with("cannot unmarshal !!int `4294967296` into uint32"),
        "{all:?}"
    );
}

/// The errors of one sluice rate-limit map (`rate_limit: {...}` on key `k`).
fn limit_errors(fields: &str) -> Vec<String> {
    inline(&format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{fields}}}\n"
    ))
    .into_iter()
    .map(|e| e.split_once(": ").map_or(e.clone(), |(_, m)| m.to_string()))
    .collect()
}

/// sluice's window/unit/algorithm/burst rules each have a clear error.
#[test]
fn sluice_limit_errors() {
    assert_eq!(
        limit_errors("window: 10s, unit: second"),
        ["`window` and `unit` cannot both be set"]
    );
    assert_eq!(
        limit_errors("window: 10x"),
        ["invalid window '10x': unknown unit 'x' (use ms, s, m, h, d)"]
    );
    assert_eq!(limit_errors("window: 0s"), ["window must be at least 1ms"]);
    assert_eq!(
        limit_errors("unit: second, algorithm: leaky"),
        [
            "unknown algorithm 'leaky' (expected one of: fixed_window, sliding_window, sliding_log, token_bucket)"
        ]
    );
    assert_eq!(
        limit_errors("unit: second, burst: 5"),
        ["`burst` needs algorithm token_bucket (this limit uses sliding_window)"]
    );
    assert_eq!(
        limit_errors("unit: second, algorithm: token_bucket, burst: 0"),
        ["burst must be at least 1"]
    );
    assert_eq!(
        limit_errors("unlimited: true, window: 1s"),
        ["should not specify window when unlimited"]
    );
    assert_eq!(
        limit_errors("unlimited: true, lease: 5"),
        ["should not specify lease when unlimited"]
    );
    assert_eq!(
        limit_errors("unit: second, algorithm: token_bucket, lease: 5"),
        [
            "`lease` needs algorithm fixed_window or sliding_window (this limit uses token_bucket: \
             hits counted before they happen would leave its count early)"
        ]
    );
    assert_eq!(
        limit_errors("unit: second, lease: 0"),
        ["lease must be between 1 and 1048576"]
    );
    assert_eq!(
        limit_errors("requests_per_unit: 5"),
        ["invalid rate limit unit ''"]
    );
}

/// `burst` is allowed without `algorithm:` when the default algorithm is token_bucket.
#[test]
fn burst_follows_default_algorithm() {
    let opts = LoadOptions {
        default_algorithm: crate::algorithm::Algorithm::TokenBucket,
        ..LoadOptions::default()
    };
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, burst: 5}\n";
    assert!(load_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())], &opts).is_ok());
}

/// sluice's node-level extensions (rate_limits, failure_mode, shards) have clear errors.
#[test]
fn sluice_node_errors() {
    let all = inline(
        "domain: d\ndescriptors:\n\
         \x20 - key: a\n    rate_limit: {unit: second}\n    rate_limits: [{unit: minute}]\n\
         \x20 - key: b\n    rate_limits: []\n\
         \x20 - key: c\n    rate_limits: [{unlimited: true}]\n\
         \x20 - key: d\n    failure_mode: maybe\n\
         \x20 - key: e\n    shards: 0\n\
         \x20 - key: f\n    shards: 1025\n",
    );
    assert_eq!(
        all,
        [
            "t.yaml:5:5: `rate_limit` and `rate_limits` cannot both be set",
            "t.yaml:7:5: `rate_limits` must not be empty",
            "t.yaml:9:20: `unlimited` is not allowed inside `rate_limits` (use `rate_limit`)",
            "t.yaml:11:19: invalid failure_mode 'maybe' (expected allow, deny or local)",
            "t.yaml:13:13: shards must be between 1 and 1024, got 0",
            "t.yaml:15:13: shards must be between 1 and 1024, got 1025",
        ]
    );
}

/// A second non-empty YAML document in a file is an error (envoyproxy/ratelimit would silently drop
/// it).
#[test]
fn second_document() {
    assert_eq!(
        inline("domain: a\n---\ndomain: b\n"),
        ["t.yaml:3:1: config error, a rule file must hold a single YAML document"]
    );
    assert!(
        load_sources(
            &[(PathBuf::from("t.yaml"), "domain: a\n---\n".to_string())],
            &LoadOptions::default()
        )
        .is_ok()
    );
}

/// Deep nesting of long values cannot make full keys take unbounded memory: the load fails
/// with one error, at the node that crossed the budget.
#[test]
fn full_keys_are_bounded_in_bytes() {
    let value = "v".repeat(40_000);
    let mut text = String::from("domain: deep\ndescriptors:\n");
    for depth in 0..60 {
        let pad = "  ".repeat(depth * 2);
        text.push_str(&format!(
            "{pad}- key: k\n{pad}  value: {value}\n{pad}  descriptors:\n"
        ));
    }
    text.push_str(&format!("{}- key: last\n", "  ".repeat(120)));
    let all = errors(&[(PathBuf::from("deep.yaml"), text)]);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(all[0].starts_with("deep.yaml:"), "{}", all[0]);
    assert!(all[0].contains("more than 64 MiB in all"), "{}", all[0]);
}

/// A calendar limit has clear errors: an unknown calendar or time zone (named), a `unit` or
/// `window` beside it, another algorithm, a time zone without a calendar, on an unlimited limit.
#[test]
fn calendar_errors() {
    assert_eq!(
        limit_errors("calendar: fortnight"),
        ["unknown calendar 'fortnight' (expected one of: day, week, month, year)"]
    );
    assert_eq!(
        limit_errors("calendar: day, timezone: Europe/Pariss"),
        [
            "unknown time zone 'Europe/Pariss' (expected an IANA name such as Europe/Paris, \
             America/New_York or UTC)"
        ]
    );
    assert_eq!(
        limit_errors("calendar: day, unit: day"),
        ["`calendar` and `unit` cannot both be set"]
    );
    assert_eq!(
        limit_errors("calendar: month, window: 30d"),
        ["`calendar` and `window` cannot both be set"]
    );
    assert_eq!(
        limit_errors("calendar: day, algorithm: sliding_window"),
        [
            "`calendar` counts in fixed windows: algorithm must be fixed_window (this limit says \
             sliding_window)"
        ]
    );
    assert_eq!(
        limit_errors("unit: day, timezone: UTC"),
        ["`timezone` needs `calendar` (day, week, month or year)"]
    );
    assert_eq!(
        limit_errors("unlimited: true, calendar: day"),
        ["should not specify calendar when unlimited"]
    );
    assert_eq!(
        limit_errors("calendar: day, algorithm: token_bucket, burst: 5"),
        [
            "`calendar` counts in fixed windows: algorithm must be fixed_window (this limit says \
             token_bucket)"
        ]
    );
}

/// Each calendar error is placed at the value it is about.
#[test]
fn calendar_errors_are_located() {
    let all = inline(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n\
         \x20     calendar: day\n      timezone: Mars/Olympus\n",
    );
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0].starts_with("t.yaml:7:17: unknown time zone 'Mars/Olympus'"),
        "{all:#?}"
    );
}

/// `scope: global` is refused at its value without a global store (in `rate_limit` and in a
/// `rate_limits` entry alike); with one it loads, and `region` is the default. An unknown scope
/// and a scope on an unlimited limit are errors either way.
#[test]
fn a_global_scope_needs_a_global_store() {
    let yaml = "\
domain: d
descriptors:
  - key: k
    rate_limit: { unit: second, requests_per_unit: 5, scope: global }
  - key: j
    rate_limits:
      - { unit: second, requests_per_unit: 5 }
      - { unit: minute, requests_per_unit: 50, scope: global }
";
    let refused = "`scope: global` needs a global store (--global-redis-url): without one each \
                   region would admit the whole limit";
    assert_eq!(
        inline(yaml),
        [
            format!("t.yaml:4:62: {refused}"),
            format!("t.yaml:8:55: {refused}")
        ]
    );
    let global = LoadOptions {
        global_scope: true,
        ..LoadOptions::default()
    };
    let set = load_sources(&[(PathBuf::from("t.yaml"), yaml.into())], &global).expect("loads");
    let root = &set.domain("d").unwrap().root;
    let scopes = |key: &str| -> Vec<crate::rules::Scope> {
        root.key_only[key].limits.iter().map(|l| l.scope).collect()
    };
    use crate::rules::Scope::{Global, Region};
    assert_eq!(scopes("k"), [Global]);
    assert_eq!(scopes("j"), [Region, Global]);
    let bad = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5, scope: planet }\n  - key: u\n    rate_limit: { unlimited: true, scope: region }\n";
    let errors = errors_with(&[(PathBuf::from("t.yaml"), bad.into())], &global);
    assert_eq!(
        errors,
        [
            "t.yaml:4:62: unknown scope 'planet' (expected one of: region, global)",
            "t.yaml:6:43: should not specify scope when unlimited"
        ]
    );
}
