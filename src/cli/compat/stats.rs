//! Statistics: the Prometheus listener (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`,
//! `PROMETHEUS_PATH`); the statsd, DogStatsD and tuning variables sluice does not honour
//! (its metrics are always served as Prometheus text).

use super::env::Env;
use super::listeners::listen_address;
use super::{EnvError, Group, Handling, Kind, Target, Var};

const NO_STATSD: &str = "no statsd sink: Prometheus metrics are on PORT's /metrics";
const ALWAYS_ON: &str = "metrics are always kept and served on /metrics";

/// The statistics variables.
pub const GROUP: Group = Group {
    name: "Statistics",
    vars: &[
        Var {
            name: "USE_STATSD",
            kind: Kind::Bool,
            default: "true",
            handling: Handling::Differently(
                "no statsd sink: `false` is what sluice does; `true`, when set, is named in the warning",
            ),
        },
        Var {
            name: "STATSD_HOST",
            kind: Kind::Str,
            default: "localhost",
            handling: Handling::Ignored(NO_STATSD),
        },
        Var {
            name: "STATSD_PORT",
            kind: Kind::Int,
            default: "8125",
            handling: Handling::Ignored(NO_STATSD),
        },
        Var {
            name: "USE_DOG_STATSD",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NO_STATSD),
        },
        Var {
            name: "USE_DOG_STATSD_MOGRIFIERS",
            kind: Kind::List,
            default: "",
            handling: Handling::Ignored(NO_STATSD),
        },
        Var {
            name: "DOG_STATSD_MOGRIFIER_*",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_STATSD),
        },
        Var {
            name: "USE_PROMETHEUS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Honoured(
                "a metrics listener of its own (`--metrics-addr`); /metrics on PORT stays",
            ),
        },
        Var {
            name: "PROMETHEUS_ADDR",
            kind: Kind::Str,
            default: ":9090",
            handling: Handling::Differently(
                "`--metrics-addr` (`:port` = every interface); a port that cannot be bound stops the start (upstream ignores it)",
            ),
        },
        Var {
            name: "PROMETHEUS_PATH",
            kind: Kind::Str,
            default: "/metrics",
            handling: Handling::Honoured("`--metrics-path`"),
        },
        Var {
            name: "PROMETHEUS_MAPPER_YAML",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(
                "sluice exports the names of upstream's default mapping; a custom mapping is not applied",
            ),
        },
        Var {
            name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored("response times are in seconds"),
        },
        Var {
            name: "EXTRA_TAGS",
            kind: Kind::Map,
            default: "",
            handling: Handling::Ignored(
                "add labels in the Prometheus scrape configuration instead",
            ),
        },
        Var {
            name: "STATS_FLUSH_INTERVAL",
            kind: Kind::Duration,
            default: "10s",
            handling: Handling::Ignored("Prometheus pulls: nothing is flushed"),
        },
        Var {
            name: "DISABLE_STATS",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(ALWAYS_ON),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut Target<'_>) -> Result<(), EnvError> {
    if env.is_set("USE_STATSD") && env.bool("USE_STATSD", true)? {
        target.note("USE_STATSD", NO_STATSD);
    }
    let listener = ["USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"];
    if !env.bool("USE_PROMETHEUS", false)? {
        for name in ["PROMETHEUS_ADDR", "PROMETHEUS_PATH"]
            .into_iter()
            .filter(|n| env.is_set(n))
        {
            target.note(name, "no effect without USE_PROMETHEUS=true, as upstream");
        }
        return Ok(());
    }
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
