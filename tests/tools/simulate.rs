//! `sluice simulate` through the real binary: patterns, JSON, `--times` files, `--svg`, errors.

use crate::common;

use common::process::{Output, run, temp_dir};

/// `sluice simulate <args>`.
fn simulate(args: &[&str]) -> Output {
    run(["simulate"].iter().chain(args))
}

/// The default table shows each algorithm's admitted, denied and worst window on edge-burst.
#[test]
fn table_for_edge_burst() {
    let out = simulate(&["--pattern", "edge-burst"]);
    let text = out.stdout_ok();
    let row = |name: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(name)).expect(name);
        line.split_whitespace().skip(1).map(String::from).collect()
    };
    assert_eq!(row("fixed_window"), ["10", "0", "10"]);
    assert_eq!(row("sliding_window"), ["5", "5", "5"]);
    assert_eq!(row("sliding_log"), ["5", "5", "5"]);
}

/// `--format json` prints one document with the documented fields for all four algorithms.
#[test]
fn json_output_parses() {
    let out = simulate(&[
        "--pattern",
        "double-rate",
        "--limit",
        "4",
        "--window",
        "2s",
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(out.stdout_ok()).expect("valid JSON");
    assert_eq!(doc["pattern"], "double-rate");
    assert_eq!(doc["limit"], 4);
    assert_eq!(doc["window_ms"], 2000);
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        let decisions = r["decisions"].as_array().unwrap();
        assert_eq!(decisions.len(), 48, "2N per window for six windows");
        assert!(decisions[1]["t_ms"] == 250 && decisions[1]["admitted"].is_boolean());
        let total = r["admitted"].as_u64().unwrap() + r["denied"].as_u64().unwrap();
        assert_eq!(total, 48);
        assert!(r["max_in_any_window"].as_u64().unwrap() <= 8);
    }
}

/// A times file is replayed as given; the token bucket's burst follows `--burst`.
#[test]
fn times_file_and_burst() {
    let dir = temp_dir(&[("arrivals.txt", "0\n0.1\n0.2\n0.3\n# later\n9.5\n")]);
    let file = dir.path().join("arrivals.txt");
    let out = simulate(&[
        "--times",
        file.to_str().unwrap(),
        "--limit",
        "2",
        "--burst",
        "3",
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(out.stdout_ok()).unwrap();
    assert_eq!(doc["pattern"], "times");
    let bucket = &doc["results"][3];
    assert_eq!(bucket["algorithm"], "token_bucket");
    assert_eq!(
        bucket["admitted"], 4,
        "burst of 3, then one refilled by 9.5 s"
    );
    assert_eq!(doc["results"][2]["admitted"], 2, "sliding log: 2 per 10 s");
}

/// Bad times files and bad flags exit 1 or 2 with a message, never a panic.
#[test]
fn bad_input_is_reported() {
    let dir = temp_dir(&[("bad.txt", "1\n2\nsoon\n")]);
    let file = dir.path().join("bad.txt");
    let out = simulate(&["--times", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.contains("bad.txt: line 3: 'soon' is not a time"),
        "{}",
        out.stderr
    );

    let out = simulate(&["--times", "/nonexistent/arrivals.txt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("cannot read"), "{}", out.stderr);

    for args in [
        &["--pattern", "edge-burst", "--window", "0s"][..],
        &["--pattern", "edge-burst", "--limit", "-3"],
        &["--pattern", "zigzag"],
        &[],
    ] {
        let out = simulate(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = simulate(&["--pattern", "double-rate", "--limit", "99999999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("smaller --limit"), "{}", out.stderr);
}

/// `--svg` writes a standalone SVG document alongside the table.
#[test]
fn svg_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.svg");
    let out = simulate(&[
        "--pattern",
        "burst-trickle",
        "--svg",
        file.to_str().unwrap(),
    ]);
    assert!(out.stdout_ok().contains("token_bucket"));
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
}

/// `--rlqs` runs the quota book over many modelled Envoys and prints the bound, fairness and
/// throughput figures, with no breach of the invariant.
#[test]
fn rlqs_prints_the_bound_fairness_and_throughput() {
    let out = simulate(&[
        "--rlqs",
        "--streams",
        "50",
        "--seconds",
        "20",
        "--rate",
        "500",
    ]);
    let text = out.stdout_ok();
    assert!(
        text.starts_with("rlqs: 50 streams, 20 s, limit 500/s"),
        "{text}"
    );
    let value = |name: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(name)).expect(name);
        line[40..].trim().to_string()
    };
    assert_eq!(value("invariant breaches"), "0");
    let worst: f64 = value("worst 10 s window / bound").parse().unwrap();
    assert!(worst <= 1.0, "{text}");
    assert!(value("Jain's index").contains(" over "), "{text}");
    assert!(text.contains("reports/s"), "{text}");
    // The quota flags belong to --rlqs only.
    assert!(
        !simulate(&["--pattern", "edge-burst", "--streams", "5"])
            .status
            .success()
    );
}
