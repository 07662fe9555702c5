//! Tests of the rule source group: Envoy Gateway's environment becomes the `--xds-*` flags;
//! xDS variables without `CONFIG_TYPE=GRPC_XDS_SOTW` or against `--config` are named in the
//! warning; malformed values are errors.

use std::path::PathBuf;
use std::time::Duration;

use super::tests::personality;

/// Envoy Gateway's variables for the rate-limit Deployment (drop-in.md §4.1, the xDS part).
const ENVOY_GATEWAY: [(&str, &str); 10] = [
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
    ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
    ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ("USE_STATSD", "false"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut env = ENVOY_GATEWAY.to_vec();
    env.extend_from_slice(extra);
    env
}

/// Envoy Gateway's environment: rules over xDS from `envoy-gateway:18001` as node
/// `envoy-ratelimit`, mutual TLS with the `/certs` files, force-start; sluice's backoff
/// defaults; nothing to warn about.
#[test]
fn envoy_gateway_environment() {
    let (args, outcome) = personality(&[], &ENVOY_GATEWAY).unwrap();
    let xds = args.settings().xds.expect("rules over xDS");
    assert_eq!(xds.server, "envoy-gateway:18001");
    assert_eq!(xds.node_id, "envoy-ratelimit");
    assert!(xds.force_start);
    let tls = xds.tls.expect("TLS");
    assert_eq!(tls.cert, Some(PathBuf::from("/certs/tls.crt")));
    assert_eq!(tls.key, Some(PathBuf::from("/certs/tls.key")));
    assert_eq!(tls.ca, Some(PathBuf::from("/certs/ca.crt")));
    assert_eq!(tls.server_name, None, "the host is the name checked");
    assert_eq!(xds.backoff, sluice::app::Backoff::default());
    assert_eq!(outcome.warning, None);
}

/// Every other xDS variable lands on its flag: metadata `k=v`, headers `k:v`, the SAN, the
/// message size, the backoff (a random factor above 1 taken as 1, and said).
#[test]
fn every_variable_lands_on_its_flag() {
    let env = with(&[
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=eu,rack=r1"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "authorization:Bearer t,x-team:rl",
        ),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0x800000"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "500ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1m"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
        ("XDS_CLIENT_BACKOFF_JITTER", "false"),
        ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
    ]);
    let (args, outcome) = personality(&[], &env).unwrap();
    let xds = args.settings().xds.unwrap();
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(xds.node_metadata, pairs(&[("zone", "eu"), ("rack", "r1")]));
    assert_eq!(
        xds.headers,
        pairs(&[("authorization", "Bearer t"), ("x-team", "rl")])
    );
    assert_eq!(
        xds.tls.unwrap().server_name.as_deref(),
        Some("envoy-gateway")
    );
    assert_eq!(xds.max_message_size, 8 * 1024 * 1024);
    assert_eq!(xds.backoff.initial, Duration::from_millis(500));
    assert_eq!(xds.backoff.max, Duration::from_secs(60));
    assert_eq!(
        (xds.backoff.random_factor, xds.backoff.jitter),
        (1.0, false)
    );
    let warning = outcome.warning.expect("two notes");
    assert!(
        warning.contains("XDS_CLIENT_BACKOFF_RANDOM_FACTOR (taken as 1"),
        "{warning}"
    );
    assert!(
        warning.contains("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (inert"),
        "{warning}"
    );
}

/// Flags win: `--xds-node-id` over CONFIG_GRPC_XDS_NODE_ID (named as overridden), and
/// `--config` over CONFIG_TYPE=GRPC_XDS_SOTW (rules from files, every xDS variable named).
#[test]
fn flags_win() {
    let (args, outcome) = personality(&["--xds-node-id", "mine"], &ENVOY_GATEWAY).unwrap();
    assert_eq!(args.settings().xds.unwrap().node_id, "mine");
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains("CONFIG_GRPC_XDS_NODE_ID (overridden by --xds-node-id)"),
        "{warning}"
    );
    let (args, outcome) = personality(&["--config", "rules/"], &ENVOY_GATEWAY).unwrap();
    assert_eq!(args.settings().xds, None);
    let warning = outcome.warning.unwrap();
    for name in [
        "CONFIG_TYPE",
        "CONFIG_GRPC_XDS_SERVER_URL",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
    ] {
        assert!(
            warning.contains(&format!("{name} (overridden by --config)")),
            "{warning}"
        );
    }
}

/// With CONFIG_TYPE=FILE (the default) the xDS variables do nothing, and are named; so are the
/// TLS files without CONFIG_GRPC_XDS_SERVER_USE_TLS.
#[test]
fn xds_variables_without_xds_are_named() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "cp:1"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.settings().xds, None);
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains("CONFIG_GRPC_XDS_SERVER_URL (no effect without CONFIG_TYPE=GRPC_XDS_SOTW"),
        "{warning}"
    );
    assert!(
        warning.contains("FORCE_START_WITHOUT_INITIAL_CONFIG (no effect with FILE"),
        "{warning}"
    );
    // A later pair wins: USE_TLS=false over Envoy Gateway's true.
    let plain = with(&[("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false")]);
    let (args, outcome) = personality(&[], &plain).unwrap();
    assert_eq!(args.settings().xds.unwrap().tls, None);
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains(
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT (no effect without CONFIG_GRPC_XDS_SERVER_USE_TLS=true"
        ),
        "{warning}"
    );
}

/// Malformed xDS values stop the start, naming the variable and its value.
#[test]
fn malformed_values_are_errors() {
    for (name, value, says) in [
        (
            "CONFIG_GRPC_XDS_NODE_METADATA",
            "zone",
            "invalid metadata item",
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "a:b:c",
            "invalid map item",
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10", "missing unit"),
        (
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            "2h",
            "between 1ms and 1h",
        ),
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "-1",
            "must not be negative",
        ),
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "0", "between 1 and"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "", "not a boolean"),
    ] {
        let error = personality(&[], &with(&[(name, value)])).unwrap_err();
        assert_eq!((error.name.as_str(), error.value.as_str()), (name, value));
        assert!(error.to_string().contains(says), "{name}={value}: {error}");
    }
}
