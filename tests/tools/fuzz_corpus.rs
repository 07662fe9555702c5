//! Every input kept from fuzzing, replayed on stable Rust through the fuzz targets' own entry
//! points (`sluice::harness`): the minimised corpora (`fuzz/corpus/<target>/`) and the inputs
//! of every crash found and fixed (`fuzz/regressions/<target>/`). `scripts/fuzz` runs the
//! coverage-guided fuzzing itself (nightly, cargo-fuzz).

use std::path::Path;

/// Feeds every file kept for `target` to `entry`; returns how many there were.
fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(files) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
            continue;
        };
        let mut files: Vec<_> = files.map(|f| f.expect("corpus entry").path()).collect();
        files.sort();
        for file in files {
            let bytes = std::fs::read(&file).expect("corpus file");
            // A panic here names the input: replay it with `cargo +nightly fuzz run`.
            eprintln!("replaying {}", file.display());
            entry(&bytes);
            inputs += 1;
        }
    }
    inputs
}

/// Rule files (YAML, schema, compile) under the loader's budgets.
#[test]
fn rule_file_corpus_replays() {
    assert!(replay("rule_file", sluice::harness::rule_file) > 0);
}

/// gRPC request messages through decoding, validation and the limiter.
#[test]
fn grpc_request_corpus_replays() {
    assert!(replay("grpc_request", sluice::harness::grpc_request) > 0);
}

/// `POST /json` bodies through the HTTP router.
#[test]
fn json_body_corpus_replays() {
    assert!(replay("json_body", sluice::harness::json_body) > 0);
}

/// Journal and snapshot files, and record payloads, through restore.
#[test]
fn data_file_corpus_replays() {
    assert!(replay("data_file", sluice::harness::data_file) > 0);
}

/// `--redis-url` values.
#[test]
fn redis_url_corpus_replays() {
    assert!(replay("redis_url", sluice::harness::redis_url) > 0);
}

/// Durations (flags, environment, rule windows).
#[test]
fn duration_corpus_replays() {
    assert!(replay("duration", sluice::harness::duration) > 0);
}
