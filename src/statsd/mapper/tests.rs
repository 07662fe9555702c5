//! The mapper on Envoy Gateway's mapping file and on broken files.

use super::*;
use crate::metrics::{HitOutcome, Metrics};

const ENVOY_GATEWAY: &str = include_str!("../../../tests/fixtures/envoy-gateway/statsd_conf.yaml");

fn metrics_with_calls() -> Metrics {
    let metrics = Metrics::new(0.8, 100);
    let hit = HitOutcome {
        hits: 2,
        capacity: 10,
        available: 10,
        admitted: true,
        shadowed: false,
    };
    let shallow = metrics.rule("edge", "edge.api_key");
    metrics.record_hits(&shallow, &hit);
    let deep = metrics.rule("edge", "edge.plan_free.path_a.user");
    metrics.record_hits(&deep, &hit);
    metrics.record_call(0.004);
    metrics
}

/// Envoy Gateway's file: two-level keys by the glob (domain, key1), deeper ones by the regex
/// (domain, key1, key2), the response time a histogram in milliseconds, the errors by err_type;
/// an unmapped stat keeps its escaped name.
#[test]
fn envoy_gateway_mapping_makes_its_dashboard_names() {
    let mapper = parse::mapper(ENVOY_GATEWAY).unwrap();
    let metrics = metrics_with_calls();
    let text = mapper.render(&metrics.compat_stats(), &|_| false);
    for line in [
        "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"api_key\"} 2",
        "ratelimit_service_rate_limit_total_hits{domain=\"edge\",key1=\"plan_free\",key2=\"path_a\"} 2",
        "ratelimit_service_rate_limit_within_limit{domain=\"edge\",key1=\"api_key\"} 2",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 0",
        "ratelimit_service_config_load_success 0",
        "ratelimit_service_global_shadow_mode 0",
        "# TYPE ratelimit_service_response_time_seconds histogram",
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"5\"} 1",
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"2.5\"} 0",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
        "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} 4",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // With upstream's own default (scale 0.001) the same histogram is in seconds.
    let upstream = ENVOY_GATEWAY.replace(
        "    timer_type: histogram\n    labels:\n      grpc_method",
        "    timer_type: histogram\n    scale: 0.001\n    labels:\n      grpc_method",
    );
    let text = parse::mapper(&upstream)
        .unwrap()
        .render(&metrics.compat_stats(), &|_| false);
    assert!(
        text.contains("ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1"),
        "{text}"
    );
}

/// Installed in the registry, the mapping replaces the built-in families (no duplicate
/// family) and leaves sluice's own.
#[test]
fn the_mapping_replaces_the_built_in_families() {
    let metrics = metrics_with_calls();
    metrics.expose_compat_with(std::sync::Arc::new(parse::mapper(ENVOY_GATEWAY).unwrap()));
    let text = metrics.render();
    assert_eq!(
        text.matches("# TYPE ratelimit_service_rate_limit_total_hits ")
            .count(),
        1,
        "{text}"
    );
    assert!(
        !text.contains("key2=\"\""),
        "the built-in series are gone: {text}"
    );
    assert!(text.contains("# TYPE sluice_decision_duration_seconds histogram"));
}

/// Drops, `match_metric_type`, and first-match order.
#[test]
fn drop_type_and_order() {
    let mapper = parse::mapper(
        "mappings:\n\
         - match: ratelimit.service.config_load_*\n  action: drop\n\
         - match: ratelimit_server.*.*\n  match_metric_type: observer\n  name: latency\n  labels: { what: \"$2\" }\n\
         - match: ratelimit_server.*.*\n  name: calls_$2\n",
    )
    .unwrap();
    let text = mapper.render(&metrics_with_calls().compat_stats(), &|_| false);
    assert!(!text.contains("config_load"), "{text}");
    assert!(
        text.contains("latency_count{what=\"response_time\"} 1"),
        "{text}"
    );
    assert!(text.contains("calls_total_requests 1"), "{text}");
}

/// A broken file is an error naming the line and column of what is wrong.
#[test]
fn errors_name_their_position() {
    for (text, at, says) in [
        (
            "mappings:\n  - match: a.*\n    nam: x\n",
            (3, 5),
            "unknown key \"nam\"",
        ),
        (
            "mappings:\n  - match: \"a(\"\n    match_type: regex\n    name: x\n",
            (2, 12),
            "a(",
        ),
        ("mappings:\n  - name: x\n", (2, 5), "without match"),
        (
            "mappings:\n  - match: a\n    name: x\n    labels: { 1x: y }\n",
            (4, 15),
            "not a label name",
        ),
        ("mappings: [\n", (2, 1), ""),
        (
            "mappings:\n  - match: a\n    name: x\n    scale: fast\n",
            (4, 12),
            "scale",
        ),
        // Issue 40 (16): refused as "a mapping without name", the NUL ending the text early.
        (
            "mappings:\n  - match: a.*\n    name: x\u{0}y\n",
            (3, 12),
            "a NUL byte (\\0) at column 12",
        ),
    ] {
        let Err((pos, message)) = parse::mapper(text) else {
            panic!("{text:?} loaded");
        };
        assert_eq!(pos, at, "{text:?}: {message}");
        assert!(message.contains(says), "{text:?}: {message}");
    }
    let error = Mapper::load(Path::new("/nonexistent/statsd.yaml"), &|_| None).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("/nonexistent/statsd.yaml:0:0: cannot read"),
        "{error}"
    );
}

/// Issue 40 (9): a mapping named like a family `/metrics` already has (or like one of its
/// series) is refused at the line and column of its name; the families it replaces are not.
#[test]
fn names_of_built_in_families_are_refused_where_written() {
    let metrics = Metrics::new(0.8, 100);
    let taken = |name: &str| metrics.family_taken(name).map(str::to_owned);
    for (name, family) in [
        ("sluice_rlqs_streams", "sluice_rlqs_streams"),
        ("process_open_fds", "process_open_fds"),
        (
            "sluice_decision_duration_seconds_count",
            "sluice_decision_duration_seconds",
        ),
        ("sluice.active.counters", "sluice_active_counters"),
    ] {
        let text = format!("mappings:\n  - match: ratelimit.*\n    name: {name}\n");
        let Err((pos, message)) = parse::mapper(&text).unwrap().check_names(&taken) else {
            panic!("{name} accepted");
        };
        assert_eq!(pos, (3, 11), "{message}");
        assert!(message.contains(family), "{message}");
    }
    let replaced = "mappings:\n  - match: a.*\n    name: ratelimit_service_rate_limit_total_hits\n";
    assert!(parse::mapper(replaced).unwrap().check_names(&taken).is_ok());
}

/// A name made from captures that clashes is left out of the families, and `/metrics` keeps
/// one `# TYPE` line per family.
#[test]
fn a_captured_name_that_clashes_is_left_out() {
    let metrics = metrics_with_calls();
    let mapper = parse::mapper(
        "mappings:\n  - match: ratelimit_server.*.total_requests\n    name: sluice_$1\n",
    )
    .unwrap();
    let taken = |name: &str| name == "sluice_ShouldRateLimit";
    let text = mapper.render(&metrics.compat_stats(), &taken);
    assert!(!text.contains("sluice_ShouldRateLimit"), "{text}");
    assert!(
        text.contains("ratelimit_service_config_load_success"),
        "{text}"
    );
}
