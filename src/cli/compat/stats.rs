//! Statistics: the statsd and DogStatsD sinks (`USE_STATSD`, on by default as upstream, to
//! `STATSD_HOST:STATSD_PORT` over `STATSD_PROTOCOL`; `USE_DOG_STATSD` with its mogrifiers;
//! `EXTRA_TAGS`, `STATS_FLUSH_INTERVAL`, `DISABLE_STATS`), with upstream's fatal combinations of
//! sinks; the Prometheus listener (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`).

use sluice::app::Mogrifier;
use sluice::clock::duration;

use super::env::{Env, go_map};
use super::listeners::listen_address;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::statsd::{FormatArg, StatsdProtocolArg};

const NO_SINK: &str = "no effect without a statsd sink (USE_STATSD or USE_DOG_STATSD), as upstream";
const DOG_ONLY: &str = "no effect without USE_DOG_STATSD=true, as upstream";
const MOGRIFIER_PREFIX: &str = "DOG_STATSD_MOGRIFIER_";

/// The statistics variables.
pub const GROUP: Group = Group {
    name: "Statistics",
    vars: &[
        Var {
            name: "USE_STATSD",
            kind: VarType::Bool,
            default: "true",
            handling: Handling::Honoured(
                "`--statsd-addr STATSD_HOST:STATSD_PORT`; a receiver that is absent does not stop the start and costs calls nothing",
            ),
        },
        Var {
            name: "STATSD_HOST",
            kind: VarType::Str,
            default: "localhost",
            handling: Handling::Honoured("`--statsd-addr`"),
        },
        Var {
            name: "STATSD_PORT",
            kind: VarType::Int,
            default: "8125",
            handling: Handling::Honoured("`--statsd-addr`"),
        },
        Var {
            name: "STATSD_PROTOCOL",
            kind: VarType::Str,
            default: "tcp",
            handling: Handling::Honoured(
                "`--statsd-protocol` (gostats' variable: `tcp` or `udp`; DogStatsD is always UDP)",
            ),
        },
        Var {
            name: "USE_DOG_STATSD",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "`--statsd-format dogstatsd`, over UDP to STATSD_HOST:STATSD_PORT; with USE_STATSD or USE_PROMETHEUS also true the start fails, as upstream",
            ),
        },
        Var {
            name: "USE_DOG_STATSD_MOGRIFIERS",
            kind: VarType::List,
            default: "",
            handling: Handling::Honoured(
                "each name's `DOG_STATSD_MOGRIFIER_<NAME>_*`, tried in order; environment only",
            ),
        },
        Var {
            name: "DOG_STATSD_MOGRIFIER_*",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "`_PATTERN` (a regular expression), `_NAME` and `_TAGS` (`k:v,...`) with `$1`…; a missing pattern or name stops the start",
            ),
        },
        Var {
            name: "USE_PROMETHEUS",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "a metrics listener of its own (`--metrics-addr`); /metrics on PORT stays",
            ),
        },
        Var {
            name: "PROMETHEUS_ADDR",
            kind: VarType::Str,
            default: ":9090",
            handling: Handling::Differently(
                "`--metrics-addr` (`:port` = every interface); a port that cannot be bound stops the start (upstream ignores it)",
            ),
        },
        Var {
            name: "PROMETHEUS_PATH",
            kind: VarType::Str,
            default: "/metrics",
            handling: Handling::Honoured("`--metrics-path`"),
        },
        Var {
            name: "PROMETHEUS_MAPPER_YAML",
            kind: VarType::Str,
            default: "",
            handling: Handling::Differently(
                "`--prometheus-mapper` (with USE_PROMETHEUS=true, as upstream): its families replace the built-in ones on /metrics; a file that cannot be read or is invalid stops the start with its line and column (upstream starts with no mappings)",
            ),
        },
        Var {
            name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Ignored("response times are in seconds"),
        },
        Var {
            name: "EXTRA_TAGS",
            kind: VarType::Map,
            default: "",
            handling: Handling::Differently(
                "`--statsd-tags` on every statsd or DogStatsD stat; the Prometheus families do not carry them (add labels in the scrape configuration)",
            ),
        },
        Var {
            name: "STATS_FLUSH_INTERVAL",
            kind: VarType::Duration,
            default: "10s",
            handling: Handling::Honoured("`--statsd-flush-interval` (10ms to 1h)"),
        },
        Var {
            name: "DISABLE_STATS",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Differently(
                "no statsd sink and no Prometheus listener, as upstream; /metrics on PORT is still served",
            ),
        },
    ],
    apply,
};

/// The sink upstream would start: DISABLE_STATS, else DogStatsD, else statsd, else none (its
/// Prometheus sink is the listener, applied apart; its stdout logging sink has no counterpart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatsSink {
    Disabled,
    DogStatsd,
    Statsd,
    None,
}

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let sink = sink(env)?;
    match sink {
        StatsSink::Statsd | StatsSink::DogStatsd => apply_sink(env, target, sink)?,
        StatsSink::Disabled | StatsSink::None => {
            for name in [
                "STATSD_HOST",
                "STATSD_PORT",
                "STATSD_PROTOCOL",
                "EXTRA_TAGS",
            ]
            .into_iter()
            .chain(["STATS_FLUSH_INTERVAL"])
            .filter(|n| env.is_set(n))
            {
                target.note(name, NO_SINK);
            }
        }
    }
    if sink != StatsSink::DogStatsd {
        for name in mogrifier_names(env) {
            target.note(&name, DOG_ONLY);
        }
    }
    apply_prometheus(env, target, sink == StatsSink::Disabled)
}

/// Which sink the variables choose; two of them at once is upstream's fatal error.
fn sink(env: &Env) -> Result<StatsSink, EnvError> {
    if env.bool("DISABLE_STATS", false)? {
        return Ok(StatsSink::Disabled);
    }
    let statsd = env.bool("USE_STATSD", true)?;
    let dog = env.bool("USE_DOG_STATSD", false)?;
    let prometheus = env.bool("USE_PROMETHEUS", false)?;
    if [statsd, dog, prometheus].iter().filter(|on| **on).count() > 1 {
        let name = if dog {
            "USE_DOG_STATSD"
        } else {
            "USE_PROMETHEUS"
        };
        return Err(env.error(
            name,
            "unable to use more than one stats sink at the same time: set only one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS (USE_STATSD is true unless set to false), as upstream",
        ));
    }
    Ok(match (dog, statsd) {
        (true, _) => StatsSink::DogStatsd,
        (false, true) => StatsSink::Statsd,
        (false, false) => StatsSink::None,
    })
}

/// The statsd flags from the variables, each unless its flag was given.
fn apply_sink(env: &Env, target: &mut ServeTarget<'_>, sink: StatsSink) -> Result<(), EnvError> {
    let addr_vars = ["USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT"];
    target.unless_explicit(env, "statsd_addr", &addr_vars, |args| {
        let host = env.string("STATSD_HOST", "localhost");
        let port = env.int("STATSD_PORT", 8125)?;
        let port = u16::try_from(port).map_err(|_| {
            env.error_in("STATSD_PORT", &port.to_string(), "not a port (0 to 65535)")
        })?;
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        if host.is_empty() {
            return Err(env.error("STATSD_HOST", "must not be empty"));
        }
        args.statsd.statsd_addr = Some(format!("{host}:{port}"));
        Ok(())
    })?;
    target.unless_explicit(env, "statsd_format", &["USE_DOG_STATSD"], |args| {
        args.statsd.statsd_format = match sink {
            StatsSink::DogStatsd => FormatArg::Dogstatsd,
            _ => FormatArg::Statsd,
        };
        Ok(())
    })?;
    if sink == StatsSink::DogStatsd {
        if env.is_set("STATSD_PROTOCOL") {
            target.note("STATSD_PROTOCOL", "DogStatsD is sent over UDP, as upstream");
        }
        if !target.explicit("statsd_protocol") {
            target.args.statsd.statsd_protocol = StatsdProtocolArg::Udp;
        }
        target.args.statsd.mogrifiers = mogrifiers(env)?;
    } else {
        target.unless_explicit(env, "statsd_protocol", &["STATSD_PROTOCOL"], |args| {
            args.statsd.statsd_protocol = protocol(env)?;
            Ok(())
        })?;
    }
    target.unless_explicit(env, "statsd_tags", &["EXTRA_TAGS"], |args| {
        let tags = env.parsed("EXTRA_TAGS", go_map)?.unwrap_or_default();
        args.statsd.statsd_tags = tags
            .into_iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .collect();
        Ok(())
    })?;
    target.unless_explicit(
        env,
        "statsd_flush_interval",
        &["STATS_FLUSH_INTERVAL"],
        |args| {
            let parsed = env.parsed("STATS_FLUSH_INTERVAL", |text| {
                duration::parse_in(
                    text,
                    std::time::Duration::from_millis(10)..=std::time::Duration::from_secs(3_600),
                )
                .map_err(|e| e.problem.to_string())
            })?;
            if let Some(interval) = parsed {
                args.statsd.statsd_flush_interval = duration::GoDuration(interval);
            }
            Ok(())
        },
    )
}

/// gostats' STATSD_PROTOCOL: `tcp` (its default) or `udp`, with the address family variants.
fn protocol(env: &Env) -> Result<StatsdProtocolArg, EnvError> {
    match env.string("STATSD_PROTOCOL", "tcp") {
        "tcp" | "tcp4" | "tcp6" => Ok(StatsdProtocolArg::Tcp),
        "udp" | "udp4" | "udp6" => Ok(StatsdProtocolArg::Udp),
        _ => Err(env.error("STATSD_PROTOCOL", "not a protocol (tcp or udp)")),
    }
}

/// The mogrifiers USE_DOG_STATSD_MOGRIFIERS names, in its order.
fn mogrifiers(env: &Env) -> Result<Vec<Mogrifier>, EnvError> {
    let list = env.string("USE_DOG_STATSD_MOGRIFIERS", "");
    let mut built = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let var = |part: &str| format!("{MOGRIFIER_PREFIX}{name}_{part}");
        let (pattern, template) = (var("PATTERN"), var("NAME"));
        let Some(regex) = env.get(&pattern).filter(|p| !p.is_empty()) else {
            return Err(env.error_in(
                &pattern,
                "",
                format!("no PATTERN specified for mogrifier {name}"),
            ));
        };
        let Some(new_name) = env.get(&template).filter(|p| !p.is_empty()) else {
            return Err(env.error_in(
                &template,
                "",
                format!("no NAME specified for mogrifier {name}"),
            ));
        };
        let tags = env.parsed(&var("TAGS"), go_map)?.unwrap_or_default();
        let mogrifier = Mogrifier::new(regex, new_name, tags)
            .map_err(|e| env.error(&pattern, format!("mogrifier {name}: {e}")))?;
        built.push(mogrifier);
    }
    Ok(built)
}

/// The `DOG_STATSD_MOGRIFIER_*` variables and the list that are set.
fn mogrifier_names(env: &Env) -> Vec<String> {
    env.names()
        .filter(|n| n.starts_with(MOGRIFIER_PREFIX) || *n == "USE_DOG_STATSD_MOGRIFIERS")
        .map(str::to_owned)
        .collect()
}

/// The Prometheus listener: USE_PROMETHEUS (not with DISABLE_STATS, as upstream).
fn apply_prometheus(
    env: &Env,
    target: &mut ServeTarget<'_>,
    disabled: bool,
) -> Result<(), EnvError> {
    let listener = ["USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"];
    let mapper = ["PROMETHEUS_MAPPER_YAML"];
    if disabled || !env.bool("USE_PROMETHEUS", false)? {
        let why = if disabled {
            "no effect with DISABLE_STATS=true, as upstream"
        } else {
            "no effect without USE_PROMETHEUS=true, as upstream"
        };
        for name in [
            "PROMETHEUS_ADDR",
            "PROMETHEUS_PATH",
            "PROMETHEUS_MAPPER_YAML",
        ]
        .into_iter()
        .filter(|n| env.is_set(n))
        {
            target.note(name, why);
        }
        return Ok(());
    }
    target.unless_explicit(env, "prometheus_mapper", &mapper, |args| {
        // Empty, as upstream's default, means no mapping file.
        if let Some(path) = env.get("PROMETHEUS_MAPPER_YAML").filter(|p| !p.is_empty()) {
            args.statsd.prometheus_mapper = Some(path.into());
        }
        Ok(())
    })?;
    target.unless_explicit(env, "metrics_addr", &listener[..2], |args| {
        let addr = env.string("PROMETHEUS_ADDR", ":9090");
        let addr = listen_address(addr).map_err(|p| env.error("PROMETHEUS_ADDR", p))?;
        args.serving.metrics_addr = Some(addr);
        Ok(())
    })?;
    target.unless_explicit(env, "metrics_path", &listener[2..], |args| {
        let path = env.string("PROMETHEUS_PATH", "/metrics");
        args.serving.metrics_path =
            crate::cli::listeners::parse_path(path).map_err(|p| env.error("PROMETHEUS_PATH", p))?;
        Ok(())
    })
}
