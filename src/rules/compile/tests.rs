//! Compiling valid rule files: limits built from envoyproxy/ratelimit and sluice fields, merging,
//! warnings, directory loading, and the `check` / `/rlconfig` views.

use std::path::{Path, PathBuf};

use super::{LoadOptions, load, load_sources};
use crate::algorithm::{Algorithm, Limit};
use crate::clock::{MILLI, SECOND};
use crate::rules::{FailureMode, LimitKind, LimitRule, Node, RuleSet, Unit};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rules");

/// Compiles one inline document named `t.yaml`, which must be valid.
fn compile(yaml: &str) -> RuleSet {
    compile_with(yaml, &LoadOptions::default())
}

fn compile_with(yaml: &str, opts: &LoadOptions) -> RuleSet {
    match load_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())], opts) {
        Ok(set) => set,
        Err(e) => panic!("unexpected errors:\n{e}"),
    }
}

/// The node reached by `entries` in `domain`.
fn node<'a>(set: &'a RuleSet, domain: &str, entries: &[(&str, &str)]) -> &'a Node {
    set.domain(domain)
        .and_then(|d| d.lookup(entries))
        .map(|m| m.node())
        .unwrap_or_else(|| panic!("no node for {entries:?}"))
}

/// The only limit of the node reached by `entries` in domain `d`.
fn limit<'a>(set: &'a RuleSet, entries: &[(&str, &str)]) -> &'a LimitRule {
    let n = node(set, "d", entries);
    assert_eq!(n.limits.len(), 1, "{:?}", n.limits);
    &n.limits[0]
}

/// The envoyproxy/ratelimit fixture compiles to the expected limits, units, names and policies.
#[test]
fn basic_config_limits() {
    let set = load(
        &[Path::new(FIXTURES).join("basic_config.yaml")],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    let key4 = &node(&set, "test-domain", &[("key4", "x")]).limits[0];
    assert_eq!(key4.name.as_deref(), Some("key4_rate_limit"));
    assert_eq!(key4.unit, Some(Unit::Day));
    assert_eq!(&*key4.policy, "\"key4_rate_limit\";q=1;w=86400");
    let key2 = &node(&set, "test-domain", &[("key2", "value2")]).limits[0];
    assert_eq!(
        key2.kind,
        LimitKind::Counted(Limit {
            algorithm: Algorithm::SlidingWindow,
            requests: 30,
            window: 60 * SECOND,
            burst: 30,
            origin: 0,
            recording: Default::default(),
        })
    );
    assert_eq!(&*key2.policy, "\"test-domain.key2_value2\";q=30;w=60");
    assert_eq!((key2.index, key2.name.as_ref()), (0, None));
    let key6 = &node(&set, "test-domain", &[("key6", "x")]).limits[0];
    assert_eq!(key6.kind, LimitKind::Unlimited);
    assert_eq!(key6.unit, None);
    assert!(node(&set, "test-domain", &[("key7", "x")]).detailed_metric);
    let sub = node(&set, "test-domain", &[("key1", "value1"), ("subkey1", "x")]);
    assert_eq!(sub.full_key, "test-domain.key1_value1.subkey1");
    assert_eq!(sub.location.line, Some(9));
}

/// `/rlconfig` shows one line per limited node, parents first, envoyproxy/ratelimit's fields then
/// sluice's.
#[test]
fn basic_config_rlconfig_and_summary() {
    let set = load(
        &[Path::new(FIXTURES).join("basic_config.yaml")],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let tail = "shadow_mode: false, quota_mode: false, algorithm=sliding_window";
    let expected = [
        format!("test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, {tail} window=1s"),
        format!("test-domain.key1_value1.subkey1_subvalue1: unit=SECOND requests_per_unit=10, {tail} window=1s"),
        format!("test-domain.key2: unit=MINUTE requests_per_unit=20, {tail} window=1m"),
        format!("test-domain.key2_value2: unit=MINUTE requests_per_unit=30, {tail} window=1m"),
        format!("test-domain.key3: unit=HOUR requests_per_unit=1, {tail} window=1h"),
        format!("test-domain.key4: unit=DAY requests_per_unit=1, {tail} window=1d"),
        format!("test-domain.key5_value5: unit=DAY requests_per_unit=15, {tail} window=1d"),
        format!("test-domain.key5_value5.subkey5_subvalue5: unit=DAY requests_per_unit=25, {tail} window=1d"),
        "test-domain.key6: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false, unlimited=true".to_string(),
        format!("test-domain.key7: unit=MINUTE requests_per_unit=70, {tail} window=1m"),
    ];
    assert_eq!(set.rlconfig_lines(), expected);
    assert_eq!(set.summary(), "1 domain, 10 limited nodes");
}

/// sluice's limit fields: window, algorithm, burst (default = requests), failure_mode, shards.
#[test]
fn sluice_fields() {
    let set = compile(
        "domain: d\ndescriptors:\n\
         \x20 - key: w\n    rate_limit: {window: 1m30s, requests_per_unit: 9, algorithm: fixed_window}\n\
         \x20 - key: u\n    rate_limit: {window: 1h, requests_per_unit: 5}\n\
         \x20 - key: tb\n    failure_mode: deny\n    shards: 8\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}\n\
         \x20 - key: tb2\n    rate_limit: {window: 500ms, requests_per_unit: 10, algorithm: token_bucket, burst: 25}\n\
         \x20 - key: leased\n    rate_limit: {unit: minute, requests_per_unit: 1000, lease: 50}\n",
    );
    assert_eq!(limit(&set, &[("leased", "x")]).lease, 50);
    assert_eq!(limit(&set, &[("w", "x")]).lease, 0, "no lease unless asked");
    let lines = set.rlconfig_lines();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("d.leased:") && l.ends_with("window=1m lease=50")),
        "{lines:?}"
    );
    assert_eq!(
        limit(&set, &[("leased", "x")]).describe(),
        "1000 per 1m, lease 50 (sliding_window)"
    );
    let w = limit(&set, &[("w", "x")]);
    assert_eq!(w.unit, None, "90 s is no upstream unit");
    assert_eq!(&*w.policy, "\"d.w\";q=9;w=90");
    let l = |r: &LimitRule| match r.kind {
        LimitKind::Counted(l) => l,
        LimitKind::Unlimited => panic!("unlimited"),
    };
    assert_eq!(l(w).algorithm, Algorithm::FixedWindow);
    assert_eq!(limit(&set, &[("u", "x")]).unit, Some(Unit::Hour));
    let tb = node(&set, "d", &[("tb", "x")]);
    assert_eq!((tb.failure_mode, tb.shards), (FailureMode::Deny, 8));
    assert_eq!(l(&tb.limits[0]).burst, 10);
    let tb2 = limit(&set, &[("tb2", "x")]);
    assert_eq!(l(tb2).window, 500 * MILLI);
    assert_eq!(l(tb2).burst, 25);
    assert_eq!(
        &*tb2.policy, "\"d.tb2\";q=10;w=1",
        "window rounded up to whole seconds"
    );
    let w_node = node(&set, "d", &[("w", "x")]);
    assert_eq!(
        (w_node.failure_mode, w_node.shards),
        (FailureMode::Allow, 1)
    );
}

/// `rate_limits` puts several limits on one node, indexed in order; rlconfig shows them all.
#[test]
fn several_limits_on_one_node() {
    let set = compile(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n\
         \x20     - {unit: second, requests_per_unit: 10, name: burst}\n\
         \x20     - {unit: day, requests_per_unit: 1000, algorithm: token_bucket, burst: 50}\n",
    );
    let limits = &node(&set, "d", &[("k", "x")]).limits;
    assert_eq!(limits.len(), 2);
    assert_eq!((limits[0].index, limits[1].index), (0, 1));
    assert_eq!(&*limits[0].policy, "\"burst\";q=10;w=1");
    assert_eq!(&*limits[1].policy, "\"d.k\";q=1000;w=86400");
    assert_eq!(
        set.rlconfig_lines(),
        [
            "d.k: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, \
          algorithm=sliding_window window=1s | unit=DAY requests_per_unit=1000 \
          algorithm=token_bucket window=1d burst=50"
        ]
    );
}

/// The default algorithm comes from the load options.
#[test]
fn default_algorithm_from_options() {
    let opts = LoadOptions {
        default_algorithm: Algorithm::SlidingLog,
        ..LoadOptions::default()
    };
    let set = compile_with(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute}\n",
        &opts,
    );
    let LimitKind::Counted(l) = limit(&set, &[("k", "x")]).kind else {
        panic!("unlimited")
    };
    assert_eq!(
        (l.algorithm, l.requests),
        (Algorithm::SlidingLog, 0),
        "missing requests = 0"
    );
}

/// Policy names are structured-field strings: quotes and backslashes escaped, non-ASCII replaced.
#[test]
fn policy_escaping() {
    assert_eq!(
        super::limit::policy("a\"b\\c", 5, SECOND),
        "\"a\\\"b\\\\c\";q=5;w=1"
    );
    assert_eq!(super::limit::policy("é", 5, 1), "\"_\";q=5;w=1");
}

/// Scalars resolve as envoyproxy/ratelimit's YAML library does: ints in string fields, YAML 1.1
/// booleans, hex.
#[test]
fn scalar_resolution() {
    let set = compile(
        "domain: 42\ndescriptors:\n  - key: k\n    value: 123\n    shadow_mode: yes\n    \
         rate_limit: {unit: SECOND, requests_per_unit: 0x10, name: 7}\n",
    );
    let n = node(&set, "42", &[("k", "123")]);
    assert!(n.shadow_mode);
    assert_eq!(n.limits[0].requests_per_unit, 16);
    assert_eq!(n.limits[0].name.as_deref(), Some("7"));
}

/// Known keys where they have no effect and duplicate keys are warnings, not errors.
#[test]
fn warnings() {
    let set = compile(
        "domain: d\nunit: second\ndescriptors:\n  - key: k\n    key: k2\n    requests_per_unit: 5\n",
    );
    let warnings: Vec<String> = set.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "t.yaml:2:1: key 'unit' has no effect at the top level",
            "t.yaml:5:5: duplicate key 'key': the last one is used",
            "t.yaml:6:5: key 'requests_per_unit' has no effect in a descriptor",
        ]
    );
    assert!(
        set.domain("d")
            .and_then(|d| d.lookup(&[("k2", "v")]))
            .is_some()
    );
}

/// Anchors, aliases and merge keys work as in envoyproxy/ratelimit's YAML library.
#[test]
fn anchors_and_merge_keys() {
    let set = compile(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &base {unit: minute, requests_per_unit: 5}\n  \
         - key: b\n    rate_limit: *base\n  - key: c\n    rate_limit:\n      <<: *base\n      requests_per_unit: 7\n",
    );
    assert_eq!(limit(&set, &[("b", "x")]).requests_per_unit, 5);
    assert_eq!(limit(&set, &[("c", "x")]).requests_per_unit, 7);
    assert_eq!(limit(&set, &[("c", "x")]).unit, Some(Unit::Minute));
}

/// With merging on, two files of one domain combine their top-level descriptors.
#[test]
fn merge_domains() {
    let opts = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let paths = [
        Path::new(FIXTURES).join("merge_domain_key1.yaml"),
        Path::new(FIXTURES).join("merge_domain_key2.yaml"),
    ];
    let set = load(&paths, &opts).unwrap_or_else(|e| panic!("{e}"));
    let d = set.domain("test-domain").map(|d| &d.root);
    assert_eq!(d.map(|r| r.exact.len()), Some(2));
    assert_eq!(
        node(&set, "test-domain", &[("key1", "value1")]).limits[0].requests_per_unit,
        10
    );
    assert_eq!(
        node(&set, "test-domain", &[("key2", "value2")]).limits[0].unit,
        Some(Unit::Minute)
    );
    let err = load(&paths, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("merge_domain_key2.yaml:2:9: duplicate domain 'test-domain' in config file"),
        "{err}"
    );
}

/// A directory load finds *.yaml/*.yml recursively, skipping `..data`-style dot entries but
/// following symlinks.
#[cfg(unix)]
#[test]
fn directory_load_skips_dot_entries() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path();
    let write = |rel: &str, domain: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap_or(root)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(path, format!("domain: {domain}\n")).unwrap_or_else(|e| panic!("{e}"));
    };
    write("..2024_01_01_00_00_00.1/rules.yaml", "edge");
    write(".hidden.yaml", "hidden");
    write("sub/more.yml", "more");
    write("notes.txt", "not-a-rule-file");
    std::os::unix::fs::symlink("..2024_01_01_00_00_00.1", root.join("..data"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("..data/rules.yaml", root.join("rules.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    // A symlink loop is walked once, not forever.
    std::os::unix::fs::symlink(".", root.join("sub/loop")).unwrap_or_else(|e| panic!("{e}"));
    let set =
        load(&[root.to_path_buf()], &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut domains: Vec<&str> = set.domains.keys().map(String::as_str).collect();
    domains.sort();
    assert_eq!(domains, ["edge", "more"]);
}

/// A missing path and an empty directory are reported; an explicit file loads whatever its name.
#[test]
fn load_paths() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("nope");
    let err = load(std::slice::from_ref(&missing), &LoadOptions::default()).unwrap_err();
    assert_eq!(err.len(), 1);
    assert!(
        err.to_string().contains("nope: cannot read config path: "),
        "{err}"
    );
    let set = load(&[dir.path().to_path_buf()], &LoadOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(set.domains.is_empty());
    assert!(set.warnings[0].message.contains("no rule files"));
    let explicit = dir.path().join(".rules.conf");
    std::fs::write(&explicit, "domain: x\n").unwrap_or_else(|e| panic!("{e}"));
    let set = load(&[explicit], &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(set.domain("x").is_some());
}

/// A calendar limit is a fixed window over its period whatever the default algorithm, reports
/// its period's unit and nominal `w=`, keeps `lease`, and shows its time zone in `/rlconfig`
/// and in words; the time zone defaults to UTC.
#[test]
fn calendar_limits() {
    let opts = LoadOptions {
        default_algorithm: Algorithm::SlidingWindow,
        ..LoadOptions::default()
    };
    let set = compile_with(
        "domain: d\ndescriptors:\n\
         \x20 - key: paris\n    rate_limit: {requests_per_unit: 10, calendar: day, timezone: Europe/Paris, lease: 2}\n\
         \x20 - key: utc\n    rate_limit: {requests_per_unit: 1000, calendar: Month}\n",
        &opts,
    );
    let paris = limit(&set, &[("paris", "x")]);
    let LimitKind::Counted(counted) = paris.kind else {
        panic!("counted")
    };
    assert_eq!(counted.algorithm, Algorithm::FixedWindow);
    assert_eq!((counted.window, counted.origin), (86_400 * SECOND, 0));
    assert_eq!((paris.unit, paris.lease), (Some(Unit::Day), 2));
    assert_eq!(&*paris.policy, "\"d.paris\";q=10;w=86400");
    assert_eq!(paris.describe(), "10 per day, lease 2 (Europe/Paris)");
    let utc = limit(&set, &[("utc", "x")]);
    assert_eq!(utc.describe(), "1000 per month (UTC)");
    assert_eq!(utc.unit, Some(Unit::Month));
    assert_eq!(
        set.rlconfig_lines(),
        [
            "d.paris: unit=DAY requests_per_unit=10, shadow_mode: false, quota_mode: false, \
             algorithm=fixed_window calendar=day timezone=Europe/Paris lease=2",
            "d.utc: unit=MONTH requests_per_unit=1000, shadow_mode: false, quota_mode: false, \
             algorithm=fixed_window calendar=month timezone=UTC",
        ]
    );
}
