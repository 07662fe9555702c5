//! §6.2: envoyproxy/ratelimit's config fixtures loaded by `ratelimit` from envoyproxy/ratelimit's
//! layout, each alone unless noted, and the error each must produce (envoyproxy/ratelimit's exact
//! `<file>: <message>`). No Redis is needed: the rules load (or not) before any call.

use std::time::Duration;

use super::harness::{Replay, Tally, fixture};
use crate::common::http1;
use crate::common::process::poll;

/// Nothing listens here: the replay of loading needs no Redis.
const NO_REDIS: &str = "127.0.0.1:1";

/// `(fixture files, MERGE_DOMAIN_CONFIG, upstream's error)`.
const INVALID: &[(&[&str], &str, &str)] = &[
    (
        &["invalid/bad_limit_unit.yaml"],
        "false",
        "bad_limit_unit.yaml: invalid rate limit unit 'foo'",
    ),
    (
        &["invalid/bad_yaml.yaml"],
        "false",
        "bad_yaml.yaml: error loading config file: yaml: line 2: found unexpected end of stream",
    ),
    (
        &["basic_config.yaml", "invalid/duplicate_domain.yaml"],
        "false",
        "duplicate_domain.yaml: duplicate domain 'test-domain' in config file",
    ),
    (
        &["invalid/duplicate_key.yaml"],
        "false",
        "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        // The same file twice: in a directory the second copy has a name of its own
        // (`.copy`, loaded second), and envoyproxy/ratelimit names the file it was loading.
        &["merge_domain_key1.yaml", "merge_domain_key1.yaml"],
        "true",
        "merge_domain_key1.yaml.copy: duplicate descriptor composite key 'test-domain.key1_value1'",
    ),
    (
        &["invalid/empty_domain.yaml"],
        "false",
        "empty_domain.yaml: config file cannot have empty domain",
    ),
    (
        &["invalid/empty_key.yaml"],
        "false",
        "empty_key.yaml: descriptor has empty key",
    ),
    (
        &["invalid/misspelled_key.yaml"],
        "false",
        "misspelled_key.yaml: config error, unknown key 'ratelimit'",
    ),
    (
        &["invalid/misspelled_key2.yaml"],
        "false",
        "misspelled_key2.yaml: config error, unknown key 'requestsperunit'",
    ),
    (
        &["invalid/non_map_list.yaml"],
        "false",
        "non_map_list.yaml: config error, yaml file contains list of type other than map: a",
    ),
    (
        &["invalid/non_string_key.yaml"],
        "false",
        "non_string_key.yaml: config error, key is not of type string: 0.25",
    ),
    (
        &["invalid/replaces_empty.yaml"],
        "false",
        "replaces_empty.yaml: should not have an empty replaces entry",
    ),
    (
        &["invalid/replaces_self.yaml"],
        "false",
        "replaces_self.yaml: replaces should not contain name of same descriptor",
    ),
    (
        &["invalid/unlimited_with_unit.yaml"],
        "false",
        "unlimited_with_unit.yaml: should not specify rate limit unit when unlimited",
    ),
];

/// `(fixture files, MERGE_DOMAIN_CONFIG)` that load.
const VALID: &[(&[&str], &str)] = &[
    (&["basic_config.yaml"], "false"),
    (
        &["merge_domain_key1.yaml", "merge_domain_key2.yaml"],
        "true",
    ),
    (&["shadowmode_config.yaml"], "false"),
    (&["wildcard.yaml"], "false"),
    (&["share_threshold.yaml"], "false"),
    (&["metadata.yaml"], "false"),
];

/// The files as they are mounted: each under its own name (a second copy of one name gets a
/// `.copy` suffix, which keeps it after the first in load order).
fn files(names: &[&str]) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = Vec::new();
    for name in names {
        let mut base = name.rsplit('/').next().unwrap().to_owned();
        if files.iter().any(|(n, _)| *n == base) {
            base.push_str(".copy");
        }
        files.push((base, fixture(name)));
    }
    files
}

async fn start(files: &[(String, String)], merge: &str) -> Replay {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    Replay::start_bare(&files, &[("MERGE_DOMAIN_CONFIG", merge)], NO_REDIS).await
}

/// envoyproxy/ratelimit's message in sluice's words: YAML syntax errors come from another YAML
/// parser, which says more about the same line (the README's Differences list says so).
fn sluice_words(upstream: &str) -> String {
    upstream.replace(
        "yaml: line 2: found unexpected end of stream",
        "yaml: line 2: while scanning a quoted scalar, found unexpected end of stream",
    )
}

/// The errors of the first failed load in `log` (logged as `errors=["…", …]`).
fn logged_errors(log: &str) -> Option<Vec<String>> {
    let list = &log[log.find("errors=[")? + "errors=[".len()..];
    let mut errors = Vec::new();
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut text = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => text.push(chars.next()?),
                        '"' => break,
                        c => text.push(c),
                    }
                }
                errors.push(text);
            }
            ']' => return Some(errors),
            _ => {}
        }
    }
    None
}

/// sluice's `<file>:<line>:<col>: <message>` without the position, as envoyproxy/ratelimit writes
/// it.
fn without_position(error: &str) -> String {
    let (file, rest) = error.split_once(':').unwrap_or((error, ""));
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(line), Some(col), Some(message))
            if line.parse::<u32>().is_ok() && col.parse::<u32>().is_ok() =>
        {
            format!("{file}:{message}")
        }
        _ => error.to_owned(),
    }
}

/// Each invalid fixture is refused with envoyproxy/ratelimit's message (sluice adds the position);
/// each valid one loads, counted in envoyproxy/ratelimit's config_load_success.
#[tokio::test]
async fn config_fixtures() {
    let mut tally = Tally::new("§6.2 config fixtures");
    for (names, merge, upstream) in INVALID {
        let replay = start(&files(names), merge).await;
        let errors = poll(Duration::from_secs(30), "the load error is logged", || {
            logged_errors(&replay.ratelimit.log())
        });
        let case = format!("{names:?} (merge {merge}) is refused");
        // (envoyproxy/ratelimit's one message without a position; whether a position is given;
        // whether more errors of the same load follow it)
        let stripped: Vec<String> = errors.iter().map(|e| without_position(e)).collect();
        let actual = (stripped[0].clone(), stripped != errors, stripped.len() > 1);
        let upstream = (upstream.to_string(), false, false);
        if actual == upstream {
            tally.same(&case, upstream, actual);
        } else {
            let sluice = (sluice_words(&upstream.0), true, actual.2);
            tally.differs(
                &case,
                upstream,
                sluice,
                actual,
                "Errors carry `file:line:col`",
            );
        }
    }
    for (names, merge) in VALID {
        let replay = start(&files(names), merge).await;
        poll(Duration::from_secs(30), "the rules load", || {
            let health = http1::get(replay.ratelimit.http, "/healthcheck", &[]);
            (health.status == 200).then_some(())
        });
        let counts = (
            replay.plain("ratelimit_service_config_load_success").await,
            replay.plain("ratelimit_service_config_load_error").await,
        );
        tally.same(
            &format!("{names:?} (merge {merge}) loads"),
            (1.0, 0.0),
            counts,
        );
    }
    tally.finish();
}
