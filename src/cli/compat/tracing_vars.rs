//! Tracing: `TRACING_*` and the OpenTelemetry exporter's `OTEL_EXPORTER_OTLP_*`, onto
//! `--otlp-endpoint`, `--trace-sampling-ratio`, the `--service-*` flags and, from the SDK's
//! `OTEL_PROPAGATORS`, `--otlp-propagators`.

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::trace::{OtlpProtocolArg, PropagatorArg};

/// The tracing variables.
pub const GROUP: Group = Group {
    name: "Tracing",
    vars: &[
        Var {
            name: "TRACING_ENABLED",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "tracing on, to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` (`--otlp-endpoint`)",
            ),
        },
        Var {
            name: "TRACING_EXPORTER_PROTOCOL",
            kind: VarType::Str,
            default: "http",
            handling: Handling::Honoured(
                "`--otlp-protocol` (`http`: protobuf bodies to a plain `http://` collector; `https://` is refused at start)",
            ),
        },
        Var {
            name: "TRACING_SERVICE_NAME",
            kind: VarType::Str,
            default: "RateLimit",
            handling: Handling::Honoured("`--service-name`"),
        },
        Var {
            name: "TRACING_SERVICE_NAMESPACE",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured("`--service-namespace`"),
        },
        Var {
            name: "TRACING_SERVICE_INSTANCE_ID",
            kind: VarType::Str,
            default: "(random UUID)",
            handling: Handling::Differently(
                "`--service-instance-id`; unset, spans carry no instance id (not a random one)",
            ),
        },
        Var {
            name: "TRACING_SAMPLING_RATE",
            kind: VarType::Float,
            default: "1",
            handling: Handling::Honoured(
                "`--trace-sampling-ratio` (parent-based, as upstream; clamped to 0..1)",
            ),
        },
        Var {
            name: "OTEL_EXPORTER_OTLP_*",
            kind: VarType::Str,
            default: "",
            handling: Handling::Differently(
                "`…_TRACES_ENDPOINT` (as is) or `…_ENDPOINT` (with `/v1/traces` added over HTTP) is the collector (`http://` added when missing, as Envoy Gateway does); the OpenTelemetry SDK reads the others (`…_HEADERS`, `…_TIMEOUT`) itself",
            ),
        },
        Var {
            name: "OTEL_PROPAGATORS",
            kind: VarType::List,
            default: "tracecontext,b3,baggage",
            handling: Handling::Honoured(
                "`--otlp-propagators`: `tracecontext` → `w3c`, `b3` and `b3multi` → `b3` (both B3 forms are read either way), `none` reads no parent; `baggage` is accepted and has no effect (spans carry no baggage); other names are an error",
            ),
        },
    ],
    apply,
};

/// Why the other tracing variables do nothing while tracing is off.
const NOT_ENABLED: &str = "no effect without TRACING_ENABLED=true, as upstream";

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    if !env.bool("TRACING_ENABLED", false)? {
        note_not_enabled(env, target);
        return Ok(());
    }
    apply_exporter(env, target)?;
    apply_sampling(env, target)?;
    apply_service(env, target)?;
    apply_propagators(env, target)
}

/// Notes every other tracing variable that is set, since tracing is off.
fn note_not_enabled(env: &Env, target: &mut ServeTarget<'_>) {
    let set: Vec<String> = env
        .names()
        .filter(|n| *n != "TRACING_ENABLED")
        .filter(|n| {
            n.starts_with("TRACING_")
                || n.starts_with("OTEL_EXPORTER_OTLP_")
                || *n == "OTEL_PROPAGATORS"
        })
        .map(str::to_owned)
        .collect();
    for name in set {
        target.note(&name, NOT_ENABLED);
    }
}

/// The exporter's protocol and collector: `--otlp-protocol` and `--otlp-endpoint`.
fn apply_exporter(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let protocol = match env.string("TRACING_EXPORTER_PROTOCOL", "http") {
        "grpc" => OtlpProtocolArg::Grpc,
        "http" => OtlpProtocolArg::Http,
        _ => {
            return Err(env.error("TRACING_EXPORTER_PROTOCOL", "must be http or grpc"));
        }
    };
    target.unless_explicit(
        env,
        "otlp_protocol",
        &["TRACING_EXPORTER_PROTOCOL"],
        |args| {
            args.trace.otlp_protocol = protocol;
            Ok(())
        },
    )?;
    let endpoint = collector(env, protocol);
    let names = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ];
    target.unless_explicit(env, "otlp_endpoint", &names, |args| {
        args.trace.otlp_endpoint = Some(endpoint);
        Ok(())
    })
}

/// The sampling ratio, `--trace-sampling-ratio`: clamped to 0..1, and 1 for NaN.
fn apply_sampling(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let rate = env.float("TRACING_SAMPLING_RATE", 1.0)?;
    target.unless_explicit(
        env,
        "trace_sampling_ratio",
        &["TRACING_SAMPLING_RATE"],
        |args| {
            args.trace.trace_sampling_ratio = if rate.is_nan() {
                1.0
            } else {
                rate.clamp(0.0, 1.0)
            };
            Ok(())
        },
    )
}

/// The service's identity in spans: `--service-name`, `--service-namespace` and
/// `--service-instance-id` (empty values count as unset).
fn apply_service(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let name = env.string("TRACING_SERVICE_NAME", "RateLimit").to_owned();
    target.unless_explicit(env, "service_name", &["TRACING_SERVICE_NAME"], |args| {
        args.trace.service_name = name;
        Ok(())
    })?;
    let namespace = env
        .get("TRACING_SERVICE_NAMESPACE")
        .filter(|n| !n.is_empty());
    let namespace = namespace.map(str::to_owned);
    target.unless_explicit(
        env,
        "service_namespace",
        &["TRACING_SERVICE_NAMESPACE"],
        |args| {
            args.trace.service_namespace = namespace;
            Ok(())
        },
    )?;
    let instance = env
        .get("TRACING_SERVICE_INSTANCE_ID")
        .filter(|n| !n.is_empty());
    let instance = instance.map(str::to_owned);
    target.unless_explicit(
        env,
        "service_instance_id",
        &["TRACING_SERVICE_INSTANCE_ID"],
        |args| {
            args.trace.service_instance_id = instance;
            Ok(())
        },
    )
}

/// `OTEL_PROPAGATORS` (the OpenTelemetry SDK's list) as `--otlp-propagators`, in its order.
fn apply_propagators(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let Some(list) = env.get("OTEL_PROPAGATORS").filter(|l| !l.trim().is_empty()) else {
        return Ok(());
    };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "tracecontext" => chosen.push(PropagatorArg::W3c),
            "b3" | "b3multi" => chosen.push(PropagatorArg::B3),
            "baggage" => {}
            "none" => {
                chosen.clear();
                break;
            }
            other => {
                return Err(env.error_in(
                    "OTEL_PROPAGATORS",
                    other,
                    "is not a propagator sluice reads (tracecontext, b3, b3multi, baggage or none)",
                ));
            }
        }
    }
    target.unless_explicit(env, "otlp_propagators", &["OTEL_PROPAGATORS"], |args| {
        args.trace.otlp_propagators = chosen;
        Ok(())
    })
}

/// The collector as the OpenTelemetry SDK reads its variables: the traces endpoint as is, else
/// the base endpoint (over HTTP with `/v1/traces` added), else the default collector; `http://`
/// added when missing, as Envoy Gateway does.
fn collector(env: &Env, protocol: OtlpProtocolArg) -> String {
    let set = |name: &str| env.get(name).filter(|e| !e.is_empty());
    let endpoint = match (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), protocol) {
        (Some(traces), _) => traces.to_owned(),
        (None, OtlpProtocolArg::Grpc) => set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .unwrap_or("localhost:4317")
            .to_owned(),
        (None, OtlpProtocolArg::Http) => {
            let base = set("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or("localhost:4318");
            format!("{}/v1/traces", base.trim_end_matches('/'))
        }
    };
    if endpoint.contains("://") {
        endpoint
    } else {
        format!("http://{endpoint}")
    }
}
