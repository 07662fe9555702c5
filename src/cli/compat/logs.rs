//! Logs: `LOG_LEVEL` (logrus level names) and `LOG_FORMAT` (`json` with envoyproxy/ratelimit's
//! keys).

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::LogFormat;

/// The log variables.
pub const GROUP: Group = Group {
    name: "Logs",
    vars: &[
        Var {
            name: "LOG_LEVEL",
            kind: VarType::Str,
            default: "WARN",
            handling: Handling::Honoured(
                "`--log-level` (logrus names: panic, fatal, error, warn, info, debug, trace; any case)",
            ),
        },
        Var {
            name: "LOG_FORMAT",
            kind: VarType::Str,
            default: "text",
            handling: Handling::Differently(
                "`json` → `--log-format upstream-json` (keys `@timestamp`, `level`, `@message`); anything else is sluice's text format",
            ),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "log_level", &["LOG_LEVEL"], |args| {
        // envoyproxy/ratelimit's default, WARN, unless RUST_LOG says otherwise.
        let level = match env.get("LOG_LEVEL") {
            Some(level) => Some(filter(level).ok_or_else(|| {
                env.error(
                    "LOG_LEVEL",
                    "not a log level (panic, fatal, error, warn, info, debug, trace)",
                )
            })?),
            None if env.is_set("RUST_LOG") => None,
            None => Some(filter("warn").unwrap_or_default()),
        };
        if level.is_some() {
            args.log_level = level;
        }
        Ok(())
    })?;
    target.unless_explicit(env, "log_format", &["LOG_FORMAT"], |args| {
        if env
            .get("LOG_FORMAT")
            .is_some_and(|f| f.eq_ignore_ascii_case("json"))
        {
            args.log_format = LogFormat::UpstreamJson;
        }
        Ok(())
    })
}

/// The tracing filter for a logrus level name. Debug and trace apply to sluice's own logs; the
/// libraries under it stay at info.
pub fn filter(level: &str) -> Option<String> {
    let level = match level.to_ascii_lowercase().as_str() {
        "panic" | "fatal" | "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        _ => return None,
    };
    Some(match level {
        "debug" | "trace" => format!("info,sluice={level}"),
        other => other.to_string(),
    })
}
