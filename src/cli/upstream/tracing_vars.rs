//! Tracing: `TRACING_*` and the OpenTelemetry exporter's `OTEL_EXPORTER_OTLP_*`.

use super::env::Env;
use super::{EnvError, Group, Handling, Kind, Target, Var};

const NO_TRACING: &str = "tracing is not supported yet";

/// The tracing variables.
pub const GROUP: Group = Group {
    name: "Tracing",
    vars: &[
        Var {
            name: "TRACING_ENABLED",
            kind: Kind::Bool,
            default: "false",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "TRACING_EXPORTER_PROTOCOL",
            kind: Kind::Str,
            default: "http",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "TRACING_SERVICE_NAME",
            kind: Kind::Str,
            default: "RateLimit",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "TRACING_SERVICE_NAMESPACE",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "TRACING_SERVICE_INSTANCE_ID",
            kind: Kind::Str,
            default: "(random UUID)",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "TRACING_SAMPLING_RATE",
            kind: Kind::Float,
            default: "1",
            handling: Handling::Ignored(NO_TRACING),
        },
        Var {
            name: "OTEL_EXPORTER_OTLP_*",
            kind: Kind::Str,
            default: "",
            handling: Handling::Ignored(NO_TRACING),
        },
    ],
    apply,
};

fn apply(_env: &Env, _target: &mut Target<'_>) -> Result<(), EnvError> {
    Ok(())
}
