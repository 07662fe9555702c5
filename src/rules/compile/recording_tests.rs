//! `record_over_limit` and its defaults: which limits record every charge, and the limits that
//! cannot (a sliding log, a lease) refused at their position.

use std::path::PathBuf;

use super::{LoadOptions, load_sources};
use crate::algorithm::{Algorithm, Recording};
use crate::rules::{LimitKind, RuleSet};

/// Loads `yaml` as `t.yaml` with `opts`: the rule set, or every error as `file:line:col: ...`.
fn load(yaml: &str, opts: &LoadOptions) -> Result<RuleSet, Vec<String>> {
    load_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())], opts)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect())
}

/// The recording of every limit of `set`'s domain `d`, by descriptor key, in file order.
fn recordings(set: &RuleSet) -> Vec<(String, Recording)> {
    let domain = set.domain("d").expect("domain d");
    let mut out = Vec::new();
    for key in ["fixed", "sliding", "bucket", "log", "plain"] {
        let Some(found) = domain.lookup(&[(key, "v")]) else {
            continue;
        };
        for rule in &found.node().limits {
            if let LimitKind::Counted(limit) = rule.kind {
                out.push((key.to_string(), limit.recording));
            }
        }
    }
    out
}

/// One limit per algorithm; `plain` names none (the load's default algorithm).
const EVERY_ALGORITHM: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/budgets/every_algorithm.yaml"
));

/// The load options with `record_over_limit` and `compat_recording` as given (the personality
/// also counts fixed windows by default).
fn options(record_over_limit: bool, compat_recording: bool) -> LoadOptions {
    let default_algorithm = if compat_recording {
        Algorithm::FixedWindow
    } else {
        LoadOptions::default().default_algorithm
    };
    LoadOptions {
        default_algorithm,
        record_over_limit,
        compat_recording,
        ..LoadOptions::default()
    }
}

/// The field records every charge of its limit (in `rate_limit` and in `rate_limits`
/// entries); `false` and no field record only admitted hits.
#[test]
fn the_field_marks_its_limit() {
    let yaml = r#"
domain: d
descriptors:
  - key: fixed
    rate_limits:
      - { unit: minute, requests_per_unit: 100, algorithm: fixed_window, record_over_limit: true }
      - { unit: day, requests_per_unit: 1000, algorithm: fixed_window }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 5, record_over_limit: true }
  - key: bucket
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: token_bucket, record_over_limit: false }
"#;
    let set = load(yaml, &LoadOptions::default()).expect("loads");
    let expected = [
        ("fixed", Recording::Always),
        ("fixed", Recording::AdmittedOnly),
        ("sliding", Recording::Always),
        ("bucket", Recording::AdmittedOnly),
    ];
    let expected: Vec<(String, Recording)> =
        expected.iter().map(|(k, r)| (k.to_string(), *r)).collect();
    assert_eq!(recordings(&set), expected);
}

/// A sliding log cannot record every charge, and a lease cannot go with it: each refused at
/// its position, naming what to do instead.
#[test]
fn a_sliding_log_or_a_lease_is_refused() {
    let yaml = r#"domain: d
descriptors:
  - key: log
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_log, record_over_limit: true }
  - key: leased
    rate_limit: { unit: minute, requests_per_unit: 5, lease: 10, record_over_limit: true }
  - key: unlimited
    rate_limit: { unlimited: true, record_over_limit: true }
"#;
    let errors = load(yaml, &LoadOptions::default()).expect_err("refused");
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with(
            "t.yaml:4:66: record_over_limit records every charge, which sliding_log cannot"
        ),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("t.yaml:6:62: `lease` cannot go with record_over_limit"),
        "{errors:#?}"
    );
    assert_eq!(
        errors[2],
        "t.yaml:8:36: should not specify record_over_limit when unlimited"
    );
}

/// `--record-over-limit` marks every limit that does not say otherwise; a sliding log among
/// them is refused at its algorithm, with the way out.
#[test]
fn the_flag_marks_every_limit_that_does_not_say() {
    let opts = options(true, false);
    let errors = load(EVERY_ALGORITHM, &opts).expect_err("the log is refused");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].starts_with("t.yaml:12:66: --record-over-limit records every charge")
            && errors[0].ends_with("or set record_over_limit: false"),
        "{errors:#?}"
    );
    let without_log = EVERY_ALGORITHM.replace(
        "algorithm: sliding_log }",
        "algorithm: sliding_log, record_over_limit: false }",
    );
    let set = load(&without_log, &opts).expect("loads");
    let by_key: Vec<Recording> = recordings(&set).into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        by_key,
        [
            Recording::Always,
            Recording::Always,
            Recording::Always,
            Recording::AdmittedOnly,
            Recording::Always
        ]
    );
}

/// The drop-in personality counts as envoyproxy/ratelimit: fixed windows (its rule files name no
/// algorithm) record every charge with its judgment of checks; other algorithms only when
/// they say so, then with the same judgment.
#[test]
fn the_personality_records_fixed_windows() {
    let opts = options(false, true);
    let set = load(EVERY_ALGORITHM, &opts).expect("loads");
    let by_key: Vec<Recording> = recordings(&set).into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        by_key,
        [
            Recording::AlwaysCompat,
            Recording::AdmittedOnly,
            Recording::AdmittedOnly,
            Recording::AdmittedOnly,
            Recording::AlwaysCompat
        ]
    );
    let marked = EVERY_ALGORITHM.replace(
        "algorithm: token_bucket }",
        "algorithm: token_bucket, record_over_limit: true }",
    );
    let set = load(&marked, &opts).expect("loads");
    assert_eq!(
        recordings(&set)[2],
        ("bucket".into(), Recording::AlwaysCompat)
    );
}

/// On a descriptor instead of inside `rate_limit`, the field has no effect: a warning says so.
#[test]
fn on_a_descriptor_the_field_is_a_warning() {
    let yaml = "domain: d\ndescriptors:\n  - key: plain\n    record_over_limit: true\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let set = load(yaml, &LoadOptions::default()).expect("loads");
    let warnings: Vec<String> = set.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        ["t.yaml:4:5: key 'record_over_limit' has no effect in a descriptor"]
    );
    assert_eq!(recordings(&set)[0].1, Recording::AdmittedOnly);
}
