//! Reading rule files: YAML 1.1 scalar resolution, positions, size and depth bounds, and that
//! no input, however malformed, makes the loader panic.

use std::path::{Path, PathBuf};

use super::scalar::Value;
use super::yaml::{self, Yaml, YamlKind};
use super::{Parsed, read};
use crate::rules::{LoadOptions, load_sources};

/// The resolved value of a one-scalar document.
fn resolve(text: &str) -> String {
    let docs = yaml::parse(text).unwrap_or_else(|e| panic!("{e:?}"));
    match docs.first().map(|d| &d.kind) {
        Some(YamlKind::Scalar(s)) => format!("{:?}", s.resolve()),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn parsed(text: &str) -> Parsed {
    read(Path::new("t.yaml"), text)
}

/// Scalars resolve as go-yaml v2 (YAML 1.1) resolves them.
#[test]
fn scalar_resolution() {
    for null in ["~", "null", "Null", "NULL", "''"] {
        let want = if null == "''" { "Str(\"\")" } else { "Null" };
        assert_eq!(resolve(null), want, "{null}");
    }
    for (text, want) in [
        ("yes", true),
        ("On", true),
        ("TRUE", true),
        ("n", false),
        ("off", false),
    ] {
        assert_eq!(resolve(text), format!("{:?}", Value::Bool(want)), "{text}");
    }
    for (text, want) in [
        ("10", 10),
        ("-3", -3),
        ("+7", 7),
        ("0x1f", 31),
        ("0o17", 15),
        ("010", 8),
        ("1_000", 1000),
        ("0b101", 5),
    ] {
        assert_eq!(resolve(text), format!("{:?}", Value::Int(want)), "{text}");
    }
    for float in [
        "1.5",
        ".5",
        "1e3",
        "-2.5E-3",
        ".inf",
        "-.Inf",
        ".NaN",
        "18446744073709551616",
        "1.",
    ] {
        assert_eq!(resolve(float), "Float", "{float}");
    }
    for string in [
        "'10'",
        "\"1.5\"",
        "!!str 1.5",
        "abc",
        "1.2.3",
        "0x",
        "e3",
        "yes please",
        "! 10",
    ] {
        assert!(
            resolve(string).starts_with("Str("),
            "{string}: {}",
            resolve(string)
        );
    }
    assert_eq!(resolve("!!float 1"), "Float");
    assert_eq!(resolve("!!int 12"), "Int(12)");
    assert_eq!(resolve("18446744073709551615"), "Int(18446744073709551615)");
}

/// Nodes keep 1-based line and column; a block map is positioned at its first key.
#[test]
fn positions() {
    let docs = yaml::parse("a:\n  - b: 1\n    c: [x, y]\n").unwrap_or_else(|e| panic!("{e:?}"));
    let Some(Yaml {
        pos,
        kind: YamlKind::Map(top),
    }) = docs.first()
    else {
        panic!("not a map")
    };
    assert_eq!(*pos, (1, 1));
    let YamlKind::Seq(items) = &top[0].1.kind else {
        panic!("not a list")
    };
    assert_eq!(top[0].1.pos, (2, 3));
    assert_eq!(items[0].pos, (2, 5));
    let YamlKind::Map(item) = &items[0].kind else {
        panic!("not a map")
    };
    assert_eq!(item[1].0.pos, (3, 5));
    assert_eq!(item[1].1.pos, (3, 8));
}

/// Nesting is bounded (the walks over the tree are recursive): a deep file is an error.
#[test]
fn deep_nesting_is_an_error() {
    // The scanner has a limit of its own for flow nesting; either limit may stop it.
    let flow = "[".repeat(100_000);
    let e = parsed(&flow).errors;
    assert_eq!(e.len(), 1);
    let m = &e[0].message;
    assert!(
        m.contains("nesting deeper") || m.contains("recursion limit"),
        "{m}"
    );
    let mut block = String::from("domain: d\ndescriptors:\n");
    for depth in 0..100 {
        let pad = "  ".repeat(depth * 2);
        block.push_str(&format!("{pad}- key: k{depth}\n{pad}  descriptors:\n"));
    }
    let e = parsed(&block).errors;
    assert!(e[0].message.contains("nesting deeper"), "{}", e[0]);
}

/// Alias expansion is bounded ("billion laughs"), in size and in depth.
#[test]
fn alias_bombs_are_errors() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    let e = parsed(&bomb).errors;
    assert!(e[0].message.contains("more than 250000 nodes"), "{}", e[0]);
    let mut deep = String::from("a0: &a0 [x]\n");
    for i in 1..200 {
        deep.push_str(&format!("a{i}: &a{i} [[[[*a{}]]]]\n", i - 1));
    }
    assert!(parsed(&deep).errors[0].message.contains("nesting deeper"));
}

/// One large anchored scalar repeated by many aliases hits the byte budget before any copy
/// (issue 13: 1 MiB times 20,000 aliases aborted the process on allocation).
#[test]
fn alias_expansion_is_bounded_in_bytes() {
    let mut bomb = format!("a: &big \"{}\"\nb: [", "x".repeat(1 << 20));
    bomb.push_str(&vec!["*big"; 20_000].join(", "));
    bomb.push_str("]\n");
    let e = parsed(&bomb).errors;
    assert!(
        e[0].message.contains("more than 64 MiB of memory"),
        "{}",
        e[0]
    );
}

/// Nodes are counted once, not once per ancestor: a plain file of 7,000 descriptors (about
/// 540 KB, 80,000 nodes) loads (issue 13: it failed with "more than 250000 nodes").
#[test]
fn large_plain_files_load() {
    let mut text = String::from("domain: big\ndescriptors:\n");
    for i in 0..7_000 {
        text.push_str(&format!(
            "  - key: client_{i}\n    value: \"value-{i}\"\n    descriptors:\n      - key: path\n        rate_limit:\n          unit: minute\n          requests_per_unit: {}\n",
            i + 1
        ));
    }
    assert!(text.len() > 500_000);
    let set = load_sources(
        &[(PathBuf::from("big.yaml"), text)],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{:?}", e.0.first()));
    assert_eq!(set.summary(), "1 domain, 7000 limited nodes");
}

/// Malformed documents of every kind produce errors, never a panic.
#[test]
fn malformed_documents_never_panic() {
    let cases = [
        "{",
        "]",
        "key: [",
        "- - - -",
        "? ? ?",
        "&a *a",
        "*unknown",
        "!!binary xx",
        "domain: [d]",
        "domain: {a: b}",
        "descriptors: {a: b}",
        "domain: d\n\tdescriptors: []",
        "\u{feff}domain: d",
        "domain: \"\\0\"",
        "%YAML 1.2\n---\ndomain: d",
        "--- !!map\ndomain: d",
        "domain: d\n<<: 5",
        "domain: d\ndescriptors:\n- key: k\n  rate_limit: {requests_per_unit: 99999999999999999999999999}",
        "domain: d\ndescriptors:\n- key: k\n  rate_limit: {window: 99999999999999999999999999999d}",
        "domain: d\ndescriptors:\n- key: k\n  shards: -99999999999999999999\n  rate_limits: [[]]",
        "? [a]\n: b",
        "? {a: b}\n: c",
        "domain: d\nmetadata: {a: .inf}",
        "'''",
        "\"",
        "a: 'b\n",
        "- a\nb: c",
        "domain: d\ndescriptors:\n- key: k\n  metadata: {x: [1, {y: ~}], 1: 2, b: 0.5, c: .nan}",
    ];
    for case in cases {
        let result = load_sources(
            &[(PathBuf::from("t.yaml"), case.to_string())],
            &LoadOptions::default(),
        );
        if let Err(errors) = result {
            assert!(
                !errors.to_string().contains("parser failed"),
                "{case:?}: {errors}"
            );
        }
    }
}

/// Deterministic mutations of a valid file (bytes dropped, duplicated, swapped) never panic.
#[test]
fn mutated_files_never_panic() {
    let base = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/rules/share_threshold.yaml"
    ));
    let chars: Vec<char> = base.chars().collect();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..300 {
        // xorshift: a cheap, reproducible stream of positions.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = (seed % chars.len() as u64) as usize;
        let mut mutated = chars.clone();
        match seed % 4 {
            0 => {
                mutated.remove(at);
            }
            1 => mutated.insert(at, chars[(at * 7) % chars.len()]),
            2 => mutated.swap(at, (at + 1) % chars.len()),
            _ => mutated[at] = ['*', ':', '-', '\'', '{', '[', '&', '#'][(seed % 8) as usize],
        }
        let text: String = mutated.into_iter().collect();
        let result = load_sources(&[(PathBuf::from("t.yaml"), text)], &LoadOptions::default());
        if let Err(errors) = result {
            assert!(!errors.to_string().contains("parser failed"), "{errors}");
        }
    }
}

/// Metadata keys are not checked against the allow-list, and its floats are fine.
#[test]
fn metadata_is_free_form() {
    let p = parsed(
        "domain: d\ndescriptors:\n- key: k\n  metadata: {anything: 1.5, nested: {ratelimit: x}}\n",
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let meta = p
        .file
        .and_then(|f| f.descriptors.into_iter().next())
        .and_then(|d| d.metadata);
    assert_eq!(
        meta,
        Some(serde_json::json!({"anything": 1.5, "nested": {"ratelimit": "x"}}))
    );
}
