//! Tests of the statistics group: upstream's default statsd sink, DogStatsD with mogrifiers,
//! the fatal combinations of sinks, DISABLE_STATS, and flags that win.

use std::time::Duration;

use super::tests::personality;
use crate::cli::statsd::{FormatArg, StatsdProtocolArg};

const TCP_REDIS: (&str, &str) = ("REDIS_SOCKET_TYPE", "tcp");

/// Nothing set: statsd over TCP to localhost:8125 every 10s, as upstream (gostats' TCP default).
#[test]
fn statsd_is_on_by_default() {
    let (args, outcome) = personality(&[], &[TCP_REDIS]).unwrap();
    let settings = args.statsd.settings().expect("a statsd sink");
    assert_eq!(settings.addr, "localhost:8125");
    assert_eq!(args.statsd.statsd_protocol, StatsdProtocolArg::Tcp);
    assert_eq!(args.statsd.statsd_format, FormatArg::Statsd);
    assert_eq!(settings.flush_interval, Duration::from_secs(10));
    assert!(outcome.warning.is_none(), "{:?}", outcome.warning);
}

/// Host, port, protocol, tags and interval land on their flags; an explicit flag wins.
#[test]
fn statsd_variables_land_on_their_flags() {
    let env = [
        TCP_REDIS,
        ("STATSD_HOST", "fd00::1"),
        ("STATSD_PORT", "9125"),
        ("STATSD_PROTOCOL", "udp"),
        ("EXTRA_TAGS", "env:prod,zone:eu"),
        ("STATS_FLUSH_INTERVAL", "1.5s"),
    ];
    let (args, _) = personality(&[], &env).unwrap();
    let settings = args.statsd.settings().unwrap();
    assert_eq!(settings.addr, "[fd00::1]:9125");
    assert_eq!(args.statsd.statsd_protocol, StatsdProtocolArg::Udp);
    assert_eq!(
        settings.tags,
        [("env".into(), "prod".into()), ("zone".into(), "eu".into())]
    );
    assert_eq!(settings.flush_interval, Duration::from_millis(1_500));
    let (args, outcome) = personality(&["--statsd-addr", "collector:8125"], &env).unwrap();
    assert_eq!(args.statsd.statsd_addr.as_deref(), Some("collector:8125"));
    let warning = outcome.warning.unwrap();
    assert!(
        warning.contains("STATSD_HOST (overridden by --statsd-addr)"),
        "{warning}"
    );
}

/// USE_DOG_STATSD (with USE_STATSD=false, as upstream requires): DogStatsD over UDP with the
/// mogrifiers in the list's order.
#[test]
fn dogstatsd_with_mogrifiers() {
    let env = [
        TCP_REDIS,
        ("USE_STATSD", "false"),
        ("USE_DOG_STATSD", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "RULES,CALLS"),
        (
            "DOG_STATSD_MOGRIFIER_RULES_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([^.]+)$",
        ),
        (
            "DOG_STATSD_MOGRIFIER_RULES_NAME",
            "ratelimit.service.rate_limit.$3",
        ),
        ("DOG_STATSD_MOGRIFIER_RULES_TAGS", "domain:$1,descriptor:$2"),
        (
            "DOG_STATSD_MOGRIFIER_CALLS_PATTERN",
            r"^ratelimit_server\.(\w+)\.(\w+)$",
        ),
        ("DOG_STATSD_MOGRIFIER_CALLS_NAME", "ratelimit_server.$2"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert_eq!(args.statsd.statsd_format, FormatArg::Dogstatsd);
    assert_eq!(args.statsd.statsd_protocol, StatsdProtocolArg::Udp);
    assert_eq!(args.statsd.mogrifiers.len(), 2);
    assert!(outcome.warning.is_none(), "{:?}", outcome.warning);
}

/// Two sinks at once stop the start, as upstream; DISABLE_STATS turns every sink off.
#[test]
fn sinks_exclude_each_other() {
    for (env, says) in [
        (vec![("USE_DOG_STATSD", "true")], "USE_DOG_STATSD"),
        (vec![("USE_PROMETHEUS", "true")], "USE_PROMETHEUS"),
        (
            vec![
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD", "true"),
                ("USE_PROMETHEUS", "true"),
            ],
            "USE_DOG_STATSD",
        ),
    ] {
        let mut env = env;
        env.push(TCP_REDIS);
        let error = personality(&[], &env).unwrap_err();
        assert_eq!(error.name, says);
        assert!(
            error.problem.contains("more than one stats sink"),
            "{error}"
        );
    }
    let env = [
        TCP_REDIS,
        ("DISABLE_STATS", "true"),
        ("USE_PROMETHEUS", "true"),
        ("STATSD_HOST", "statsd"),
    ];
    let (args, outcome) = personality(&[], &env).unwrap();
    assert!(args.statsd.settings().is_none());
    assert!(args.serving.metrics_addr.is_none());
    assert!(
        outcome
            .warning
            .unwrap()
            .contains("STATSD_HOST (no effect without a statsd sink")
    );
}

/// Malformed statsd variables and incomplete mogrifiers are errors naming the variable.
#[test]
fn bad_statsd_variables_are_errors() {
    let dog = [("USE_STATSD", "false"), ("USE_DOG_STATSD", "true")];
    for (extra, name, says) in [
        (vec![("STATSD_PORT", "70000")], "STATSD_PORT", "not a port"),
        (
            vec![("STATSD_PROTOCOL", "sctp")],
            "STATSD_PROTOCOL",
            "tcp or udp",
        ),
        (
            vec![("STATS_FLUSH_INTERVAL", "0s")],
            "STATS_FLUSH_INTERVAL",
            "at least",
        ),
        (vec![("EXTRA_TAGS", "novalue")], "EXTRA_TAGS", "key:value"),
        (
            [&dog[..], &[("USE_DOG_STATSD_MOGRIFIERS", "X")]].concat(),
            "DOG_STATSD_MOGRIFIER_X_PATTERN",
            "no PATTERN",
        ),
        (
            [
                &dog[..],
                &[
                    ("USE_DOG_STATSD_MOGRIFIERS", "X"),
                    ("DOG_STATSD_MOGRIFIER_X_PATTERN", "("),
                    ("DOG_STATSD_MOGRIFIER_X_NAME", "n"),
                ],
            ]
            .concat(),
            "DOG_STATSD_MOGRIFIER_X_PATTERN",
            "not a regular expression",
        ),
    ] {
        let mut env = extra;
        env.push(TCP_REDIS);
        let error = personality(&[], &env).unwrap_err();
        assert_eq!(error.name, name, "{error}");
        assert!(error.problem.contains(says), "{error}");
    }
}

/// Envoy Gateway's PROMETHEUS_MAPPER_YAML becomes `--prometheus-mapper` with USE_PROMETHEUS;
/// without it the variable is named as having no effect, as upstream.
#[test]
fn the_mapper_file_follows_use_prometheus() {
    let env = [
        TCP_REDIS,
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
    ];
    let (args, _) = personality(&[], &env).unwrap();
    assert_eq!(
        args.statsd.prometheus_mapper.as_deref(),
        Some(std::path::Path::new("/etc/statsd-exporter/conf.yaml"))
    );
    let (args, outcome) = personality(&[], &[env[0], env[1], env[4]]).unwrap();
    assert!(args.statsd.prometheus_mapper.is_none());
    assert!(
        outcome
            .warning
            .unwrap()
            .contains("PROMETHEUS_MAPPER_YAML (no effect without USE_PROMETHEUS=true")
    );
}
