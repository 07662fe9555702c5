use super::*;
use crate::rules::load_sources;

fn limit(unit: &str, requests_per_unit: u32) -> Option<LimitSpec> {
    Some(LimitSpec {
        unit: unit.into(),
        requests_per_unit,
        ..LimitSpec::default()
    })
}

fn node(key: &str, value: &str, rate_limit: Option<LimitSpec>) -> DescriptorRule {
    DescriptorRule {
        key: key.into(),
        value: value.into(),
        rate_limit,
        ..DescriptorRule::default()
    }
}

fn document(name: &str, domain: &str, descriptors: Vec<DescriptorRule>) -> RuleDocument {
    RuleDocument {
        name: name.into(),
        domain: domain.into(),
        descriptors,
    }
}

fn errors(documents: &[RuleDocument]) -> Vec<String> {
    load_documents(documents, &LoadOptions::default())
        .expect_err("must not compile")
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A document compiles to the same rules as the rule file that says the same thing.
#[test]
fn same_rules_as_the_equivalent_file() {
    let mut parent = node("generic_key", "per_key", None);
    parent.descriptors = vec![node("key", "", limit("MINUTE", 3))];
    let mut shadow = node("path", "/admin", limit("SECOND", 1));
    shadow.shadow_mode = true;
    let doc = document("edge", "edge", vec![parent, shadow]);
    let from_doc = load_documents(&[doc], &LoadOptions::default()).expect("compiles");
    let yaml = "domain: edge\ndescriptors:\n  - key: generic_key\n    value: per_key\n    descriptors:\n      - key: key\n        rate_limit: { unit: minute, requests_per_unit: 3 }\n  - key: path\n    value: /admin\n    shadow_mode: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    let from_file = load_sources(
        &[("edge.yaml".into(), yaml.into())],
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(from_doc.rlconfig_lines(), from_file.rlconfig_lines());
    assert_eq!(from_doc.summary(), "1 domain, 2 limited nodes");
}

/// Unit names are checked as in a file: UNKNOWN and numbers envoyproxy/ratelimit's enum does not
/// know are errors prefixed with the document name, without line or column; UNKNOWN is fine when
/// unlimited.
#[test]
fn units_are_checked_like_a_file() {
    let unlimited = Some(LimitSpec {
        unit: "UNKNOWN".into(),
        unlimited: true,
        ..LimitSpec::default()
    });
    let docs = [document(
        "policy-a",
        "a",
        vec![
            node("k1", "", limit("UNKNOWN", 5)),
            node("k2", "", limit("9", 5)),
            node("k3", "", unlimited),
        ],
    )];
    assert_eq!(
        errors(&docs),
        [
            "policy-a: invalid rate limit unit 'UNKNOWN'",
            "policy-a: invalid rate limit unit '9'"
        ]
    );
    let unlimited_with_unit = Some(LimitSpec {
        unit: "SECOND".into(),
        unlimited: true,
        ..LimitSpec::default()
    });
    let docs = [document("p", "a", vec![node("k", "", unlimited_with_unit)])];
    assert_eq!(
        errors(&docs),
        ["p: should not specify rate limit unit when unlimited"]
    );
}

/// Every other check of a file applies too: empty domain, empty key, duplicate nodes and
/// domains, bad replaces; all errors of all documents are reported at once.
#[test]
fn every_error_of_every_document() {
    let mut replacing = limit("HOUR", 1).unwrap();
    replacing.name = "own".into();
    replacing.replaces = vec!["own".into(), String::new()];
    let docs = [
        document("no-domain", "", vec![node("k", "", limit("SECOND", 1))]),
        document(
            "first",
            "d",
            vec![
                node("", "v", limit("SECOND", 1)),
                node("dup", "x", limit("SECOND", 1)),
                node("dup", "x", limit("SECOND", 2)),
                node("r", "", Some(replacing)),
            ],
        ),
        document("second", "d", Vec::new()),
    ];
    assert_eq!(
        errors(&docs),
        [
            "no-domain: config file cannot have empty domain",
            "first: descriptor has empty key",
            "first: duplicate descriptor composite key 'd.dup_x'",
            "first: replaces should not contain name of same descriptor",
            "first: should not have an empty replaces entry",
            "second: duplicate domain 'd' in config file",
        ]
    );
}

/// With domain merging on, two documents may add to one domain (envoyproxy/ratelimit
/// MERGE_DOMAIN_CONFIG).
#[test]
fn merging_joins_documents_of_one_domain() {
    let docs = [
        document("a", "d", vec![node("x", "", limit("SECOND", 1))]),
        document("b", "d", vec![node("y", "", limit("SECOND", 1))]),
    ];
    let merged = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let set = load_documents(&docs, &merged).expect("merges");
    assert_eq!(set.summary(), "1 domain, 2 limited nodes");
}

/// Zero documents are a valid, empty rule set (an xDS response without resources).
#[test]
fn no_documents_no_rules() {
    let set = load_documents(&[], &LoadOptions::default()).expect("empty");
    assert!(set.domains.is_empty());
    assert!(!set.awaiting);
}

/// Metadata, quota mode and detailed metrics reach the compiled node.
#[test]
fn flags_and_metadata_are_kept() {
    let mut rule = node("k", "v", limit("DAY", 10));
    rule.quota_mode = true;
    rule.detailed_metric = true;
    rule.metadata = Some(serde_json::json!({ "team": "a" }));
    let set = load_documents(&[document("d", "d", vec![rule])], &LoadOptions::default()).unwrap();
    let node = set.domain("d").unwrap().root.exact.values().next().unwrap();
    assert!(node.quota_mode && node.detailed_metric && !node.shadow_mode);
    assert_eq!(node.metadata, Some(serde_json::json!({ "team": "a" })));
    assert_eq!(node.location.to_string(), "d");
}
