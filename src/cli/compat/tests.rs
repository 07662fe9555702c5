//! Tests of the personality: what each group makes of envoyproxy/ratelimit's variables, precedence,
//! the one warning, malformed values, and that the README's table is the groups' table.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, FromArgMatches};

use super::*;
use crate::cli::redis::KeyLayoutArg;
use crate::cli::response::HeadersArg;
use crate::cli::serve::{ServeArgs, StoreArg};
use crate::cli::{AlgorithmArg, LogFormat};
use sluice::telemetry::OtlpProtocol;

fn command() -> clap::Command {
    ServeArgs::augment_args(clap::Command::new("ratelimit"))
}

/// The flags parsed from `argv` (after the program name), then the personality applied with
/// `env`.
pub(super) fn personality(
    argv: &[&str],
    env: &[(&str, &str)],
) -> Result<(ServeArgs, Applied), EnvError> {
    let matches = command()
        .try_get_matches_from(["ratelimit"].iter().chain(argv))
        .expect("flags parse");
    let mut args = ServeArgs::from_arg_matches(&matches).expect("flags");
    let outcome = apply(
        &mut args,
        Some(&matches),
        &Env::from_pairs(env.iter().copied()),
    )?;
    Ok((args, outcome))
}

mod redis;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

/// Istio's sample Deployment, variable by variable: listeners on `::` (both families), Redis
/// over TCP, the ConfigMap layout, debug logs for sluice; nothing to warn about.
#[test]
fn istio_sample_environment() {
    let env = [
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("USE_STATSD", "false"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("HOST", "::"),
        ("GRPC_HOST", "::"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.http_addr, addr("[::]:8080"));
    assert_eq!(args.grpc_addr, addr("[::]:8081"));
    assert!(matches!(args.store, StoreArg::Redis));
    assert_eq!(args.redis.redis_url.as_deref(), Some("redis:6379"));
    assert_eq!(args.redis.redis_key_prefix, "");
    assert!(matches!(
        args.redis.redis_key_layout,
        KeyLayoutArg::Upstream
    ));
    assert!(matches!(
        args.rules.default_algorithm,
        AlgorithmArg::FixedWindow
    ));
    assert_eq!(args.log_level.as_deref(), Some("info,sluice=debug"));
    let layout = outcome.runtime.expect("upstream's layout");
    assert_eq!(
        layout.directory(),
        Some("/data/ratelimit/config".into()),
        "{layout:?}"
    );
    assert!(layout.ignore_dotfiles);
    assert_eq!(outcome.warning, None);
    assert_eq!(
        args.serving.grpc_max_connection_age.0,
        Duration::from_secs(86_400)
    );
}

/// With nothing set, envoyproxy/ratelimit's defaults: WARN logs, Redis on nutcracker's unix socket,
/// the classic layout, sluice's connection count and connect timeout, envoyproxy/ratelimit's
/// jitter.
#[test]
fn defaults_are_upstream_defaults() {
    let (args, outcome) = personality(&[], &[]).unwrap();
    assert_eq!(args.log_level.as_deref(), Some("warn"));
    assert_eq!(
        args.redis.redis_url.as_deref(),
        Some("/var/run/nutcracker/ratelimit.sock")
    );
    assert_eq!(args.redis.redis_connections, 2);
    assert_eq!(args.redis.redis_connect_timeout.0, Duration::from_secs(1));
    assert_eq!(
        args.redis.redis_expiration_jitter.0,
        Duration::from_secs(300)
    );
    assert!(!args.redis.redis_tls && args.redis.redis_password.is_none());
    assert_eq!(args.response.response_headers, HeadersArg::Draft10);
    assert!(!args.response.quota_mode && !args.response.response_dynamic_metadata);
    let layout = outcome.runtime.unwrap();
    assert!(layout.watch_root);
    assert_eq!(layout.directory(), None, "no subdirectory: nil loader");
}

/// A flag given on the command line wins over the envoyproxy/ratelimit variable, which is then
/// named in the warning as overridden.
#[test]
fn flags_win_over_upstream_variables() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("PORT", "9999"),
        ("RUNTIME_ROOT", "/data"),
        ("LOG_LEVEL", "error"),
        ("BACKEND_TYPE", "memcache"),
    ];
    let argv = [
        "--http-addr",
        "127.0.0.1:1",
        "--config",
        "rules",
        "--log-level",
        "info",
        "--store",
        "memory",
    ];
    let (args, outcome) = personality(&argv, &env).unwrap();
    assert_eq!(args.http_addr, addr("127.0.0.1:1"));
    assert!(outcome.runtime.is_none(), "--config wins");
    assert_eq!(args.log_level.as_deref(), Some("info"));
    assert!(matches!(args.store, StoreArg::Memory));
    let warning = outcome.warning.unwrap();
    for named in [
        "PORT (overridden by --http-addr)",
        "RUNTIME_ROOT (overridden by --config)",
        "LOG_LEVEL (overridden by --log-level)",
        "BACKEND_TYPE (overridden by --store)",
    ] {
        assert!(warning.contains(named), "{named}: {warning}");
    }
}

/// Only variables that are set and not honoured are named, each once, in one line with the
/// reason; unknown variables are ignored.
#[test]
fn one_warning_names_what_is_not_honoured() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("USE_STATSD", "false"),
        ("STATSD_PORT", "9125"),
        ("DEBUG_PORT", "6070"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
        ("REDIS_PERSECOND_URL", "x:1"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("SOMETHING_ELSE", "1"),
    ];
    let (_, outcome) = personality(&[], &env).unwrap();
    let warning = outcome.warning.unwrap();
    assert!(!warning.contains('\n'));
    for name in [
        "STATSD_PORT (no effect without a statsd sink",
        "DEBUG_PORT (no debug listener",
        "OTEL_EXPORTER_OTLP_ENDPOINT (no effect without TRACING_ENABLED=true",
        "GRPC_SERVER_TLS_CA_CERT (not an envoyproxy/ratelimit variable",
        "REDIS_PERSECOND_URL (one Redis",
        "PROMETHEUS_ADDR (no effect without USE_PROMETHEUS=true",
    ] {
        assert_eq!(warning.matches(name).count(), 1, "{name}: {warning}");
    }
    for absent in [
        "SOMETHING_ELSE",
        "DEBUG_HOST",
        "STATSD_HOST",
        "REDIS_SOCKET_TYPE",
    ] {
        assert!(!warning.contains(absent), "{absent}: {warning}");
    }
}

/// Every malformed value stops the start with the variable and its value, honoured or not:
/// empty booleans and numbers, bad ports, case-sensitive enumerations.
#[test]
fn malformed_values_are_errors() {
    for (name, value, says) in [
        ("PORT", "", "not an integer"),
        ("GRPC_PORT", "70000", "not a port"),
        ("USE_STATSD", "yes", "not a boolean"),
        ("STATS_FLUSH_INTERVAL", "10", "missing unit"),
        ("EXTRA_TAGS", "a", "invalid map item"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "x", "not a number"),
        ("CONFIG_TYPE", "file", "case-sensitive"),
        ("CONFIG_TYPE", "grpc_xds_sotw", "case-sensitive"),
        ("BACKEND_TYPE", "memcache", "memcached is not supported"),
        ("BACKEND_TYPE", "Redis", "case-sensitive"),
        ("LOG_LEVEL", "verbose", "not a log level"),
        (
            "REDIS_TYPE",
            "replicated",
            "must be single, cluster or sentinel",
        ),
        ("NEAR_LIMIT_RATIO", "1.5", "between 0 and 1"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "-1", "must not be negative"),
        ("GRPC_SERVER_USE_TLS", "true", "needs GRPC_SERVER_TLS_CERT"),
        ("PROMETHEUS_PATH", "metrics", "must start with /"),
        ("REDIS_SOCKET_TYPE", "udp", "must be tcp or unix"),
        ("REDIS_URL", "", "must not be empty"),
        ("REDIS_POOL_SIZE", "0", "between 1 and 65535"),
        ("REDIS_POOL_SIZE", "70000", "between 1 and 65535"),
        ("REDIS_TIMEOUT", "0s", "more than 0"),
        ("REDIS_TIMEOUT", "10", "missing unit"),
        ("REDIS_TLS", "yes", "not a boolean"),
        (
            "REDIS_TLS_CLIENT_CERT",
            "/c.pem",
            "needs REDIS_TLS_CLIENT_KEY",
        ),
        (
            "EXPIRATION_JITTER_MAX_SECONDS",
            "-1",
            "must not be negative",
        ),
        (
            "LIMIT_LIMIT_HEADER",
            "Rate Limit",
            "not a valid HTTP header name",
        ),
        ("LIMIT_RESET_HEADER", "", "must not be empty"),
        ("QUOTA_MODE", "", "not a boolean"),
    ] {
        let mut env = vec![("REDIS_SOCKET_TYPE", "tcp"), (name, value)];
        match name {
            "PROMETHEUS_PATH" => env.extend([("USE_PROMETHEUS", "true"), ("USE_STATSD", "false")]),
            "REDIS_TLS_CLIENT_CERT" => env.push(("REDIS_TLS", "true")),
            "LIMIT_LIMIT_HEADER" | "LIMIT_RESET_HEADER" => {
                env.push(("LIMIT_RESPONSE_HEADERS_ENABLED", "true"));
            }
            _ => {}
        }
        if name == "REDIS_SOCKET_TYPE" {
            env.remove(0);
        }
        let error = personality(&[], &env).unwrap_err();
        assert_eq!((error.name.as_str(), error.value.as_str()), (name, value));
        assert!(error.to_string().contains(says), "{name}={value}: {error}");
    }
}

/// The response variables: quota mode, dynamic metadata, envoyproxy/ratelimit's headers with their
/// names verbatim; names without LIMIT_RESPONSE_HEADERS_ENABLED are named in the warning, and
/// `--response-headers upstream` given explicitly takes the names too.
#[test]
fn response_variables() {
    let names = [
        ("LIMIT_LIMIT_HEADER", "X-Limit"),
        ("LIMIT_REMAINING_HEADER", "x-left"),
        ("LIMIT_RESET_HEADER", "Reset"),
    ];
    let mut env = vec![
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("QUOTA_MODE", "T"),
        ("RESPONSE_DYNAMIC_METADATA", "1"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
    ];
    env.extend(names);
    let (args, outcome) = personality(&[], &env).unwrap();
    let response = &args.response;
    assert!(response.quota_mode && response.response_dynamic_metadata);
    assert_eq!(response.response_headers, HeadersArg::Upstream);
    assert_eq!(
        [
            &response.limit_header,
            &response.remaining_header,
            &response.reset_header
        ],
        ["X-Limit", "x-left", "Reset"]
    );
    assert_eq!(outcome.warning, None);

    env[3] = ("LIMIT_RESPONSE_HEADERS_ENABLED", "false");
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.response.response_headers, HeadersArg::Draft10);
    assert_eq!(args.response.limit_header, "RateLimit-Limit");
    let warning = outcome.warning.unwrap();
    assert_eq!(
        warning
            .matches("(no effect without LIMIT_RESPONSE_HEADERS_ENABLED=true")
            .count(),
        3,
        "{warning}"
    );
    let (args, _) = personality(&["--response-headers", "upstream"], &env).unwrap();
    assert_eq!(args.response.reset_header, "Reset");
}

/// Listeners, TLS, metrics, health, logs and responses land on their flags.
#[test]
fn variables_land_on_their_flags() {
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0x1F90"),
        ("GRPC_UDS", "/run/rl.sock"),
        ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
        ("GRPC_SERVER_USE_TLS", "t"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.example"),
        ("USE_PROMETHEUS", "1"),
        ("USE_STATSD", "false"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "True"),
        ("LOG_FORMAT", "JSON"),
        ("SHADOW_MODE", "TRUE"),
        ("MERGE_DOMAIN_CONFIG", "T"),
        ("CACHE_KEY_PREFIX", "rl_"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "0"),
        ("REDIS_PIPELINE_WINDOW", "150us"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.redis.local_cache_size, 0, "0 turns the cache off");
    assert_eq!(args.http_addr, addr("127.0.0.1:8080"));
    assert_eq!(args.serving.grpc_socket, Some("/run/rl.sock".into()));
    assert_eq!(
        args.serving.grpc_max_connection_age.0,
        Duration::from_secs(5_400)
    );
    assert_eq!(args.tls.tls_cert, Some("/certs/tls.crt".into()));
    assert_eq!(args.tls.tls_key, Some("/certs/tls.key".into()));
    assert_eq!(args.tls.tls_client_ca, Some("/certs/ca.crt".into()));
    assert_eq!(args.tls.tls_client_san.as_deref(), Some("envoy.example"));
    assert_eq!(args.serving.metrics_addr, Some(addr("[::]:19001")));
    assert_eq!(args.serving.metrics_path, "/metrics");
    assert!(args.serving.health_requires_domains && args.serving.health_checks_store);
    assert!(matches!(args.log_format, LogFormat::UpstreamJson));
    assert!(args.shadow_mode && args.rules.merge_domains);
    assert_eq!(args.redis.redis_key_prefix, "rl_");
    assert_eq!(args.near_limit_ratio, 0.9);
    assert_eq!(
        outcome.warning.as_deref(),
        Some(
            "envoyproxy/ratelimit variables set but not honoured: REDIS_PIPELINE_WINDOW (sluice pipelines and batches calls on a few multiplexed connections by itself)"
        )
    );
}

/// Every flag id a group defers to is a real `serve` flag, so precedence cannot silently fail
/// on a misspelt id.
#[test]
fn every_deferred_flag_exists() {
    let command = command();
    let sources = [
        include_str!("listeners.rs"),
        include_str!("tls.rs"),
        include_str!("logs.rs"),
        include_str!("rules.rs"),
        include_str!("backend.rs"),
        include_str!("redis.rs"),
        include_str!("redis_tls.rs"),
        include_str!("response.rs"),
        include_str!("health.rs"),
        include_str!("stats.rs"),
        include_str!("xds.rs"),
    ];
    let mut seen = 0;
    for source in sources {
        for part in source.split("unless_explicit(env, \"").skip(1) {
            let id = &part[..part.find('"').unwrap()];
            assert!(
                command.get_arguments().any(|a| a.get_id() == id),
                "no flag {id}"
            );
            seen += 1;
        }
    }
    assert!(seen >= 20, "{seen}");
}

/// The migration page's table is exactly the table the groups declare.
#[test]
fn migration_page_holds_the_table() {
    let page = include_str!("../../../docs/migrating.md");
    assert!(
        page.contains(&table()),
        "docs/migrating.md must contain the output of `sluice upstream-env`:\n{}",
        table()
    );
}

/// Envoy Gateway's tracing variables turn tracing on with its names, over envoyproxy/ratelimit's
/// default protocol (OTLP/HTTP, `/v1/traces` added to the base endpoint); a flag wins over its
/// variable; tracing is off by default.
#[test]
fn tracing_variables() {
    let eg = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
        ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-7d9"),
        ("TRACING_SAMPLING_RATE", "0.5"),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "otel-collector.monitoring:4318",
        ),
    ];
    let (args, outcome) = personality(&[], &eg).unwrap();
    let settings = args.trace.settings().expect("tracing on");
    assert_eq!(settings.protocol, OtlpProtocol::Http);
    assert_eq!(
        settings.endpoint,
        "http://otel-collector.monitoring:4318/v1/traces"
    );
    assert_eq!(settings.sampling_ratio, 0.5);
    assert_eq!(settings.service_name, "envoy-ratelimit");
    assert_eq!(
        settings.service_namespace.as_deref(),
        Some("envoy-gateway-system")
    );
    assert_eq!(settings.instance_id.as_deref(), Some("envoy-ratelimit-7d9"));
    assert_eq!(outcome.warning, None);

    let (args, outcome) = personality(&["--otlp-endpoint", "http://mine:4317"], &eg).unwrap();
    assert_eq!(
        args.trace.otlp_endpoint.as_deref(),
        Some("http://mine:4317")
    );
    assert!(
        outcome
            .warning
            .unwrap()
            .contains("OTEL_EXPORTER_OTLP_ENDPOINT (overridden by --otlp-endpoint)")
    );
    let (args, _) = personality(&[], &[("REDIS_SOCKET_TYPE", "tcp")]).unwrap();
    assert!(args.trace.settings().is_none(), "off by default");
}

/// `OTEL_PROPAGATORS` chooses the formats in its order (`baggage` has no effect, `b3multi` is
/// B3, `none` reads none); an unknown name is an error naming it; a flag wins; unset, both are
/// read.
#[test]
fn tracing_propagators_variable() {
    use crate::cli::trace::PropagatorArg::{B3, W3c};
    let on = |list: &'static str| {
        [
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("TRACING_ENABLED", "true"),
            ("OTEL_PROPAGATORS", list),
        ]
    };
    let chosen = |args: &[&str], list| {
        personality(args, &on(list))
            .unwrap()
            .0
            .trace
            .otlp_propagators
    };
    assert_eq!(chosen(&[], "tracecontext,baggage"), vec![W3c]);
    assert_eq!(chosen(&[], "b3multi, tracecontext"), vec![B3, W3c]);
    assert_eq!(chosen(&[], "none"), vec![]);
    assert_eq!(chosen(&["--otlp-propagators", "w3c"], "b3"), vec![W3c]);
    let error = personality(&[], &on("tracecontext,jaeger"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("OTEL_PROPAGATORS") && error.contains("jaeger"),
        "{error}"
    );
    let unset = [("REDIS_SOCKET_TYPE", "tcp"), ("TRACING_ENABLED", "true")];
    let (args, _) = personality(&[], &unset).unwrap();
    assert_eq!(args.trace.otlp_propagators, vec![W3c, B3]);
}

/// The collector and protocol as the OpenTelemetry SDK reads them: gRPC when asked, the traces
/// endpoint as is over the base one, the default collector when neither is set; an unknown
/// protocol is an error.
#[test]
fn tracing_collector_variables() {
    let tcp = ("REDIS_SOCKET_TYPE", "tcp");
    let grpc = [
        tcp,
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
    ];
    let settings = personality(&[], &grpc).unwrap().0.trace.settings().unwrap();
    assert_eq!(settings.protocol, OtlpProtocol::Grpc);
    assert_eq!(settings.endpoint, "http://collector:4317");

    let traces_url = [
        tcp,
        ("TRACING_ENABLED", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/otlp/traces",
        ),
    ];
    let settings = personality(&[], &traces_url)
        .unwrap()
        .0
        .trace
        .settings()
        .unwrap();
    assert_eq!(settings.endpoint, "http://c:4318/otlp/traces");

    let defaults = [tcp, ("TRACING_ENABLED", "true")];
    let settings = personality(&[], &defaults)
        .unwrap()
        .0
        .trace
        .settings()
        .unwrap();
    assert_eq!(settings.endpoint, "http://localhost:4318/v1/traces");

    let bad = [
        tcp,
        ("TRACING_ENABLED", "1"),
        ("TRACING_EXPORTER_PROTOCOL", "udp"),
    ];
    let error = personality(&[], &bad).unwrap_err().to_string();
    assert!(error.contains("http or grpc"), "{error}");
}
