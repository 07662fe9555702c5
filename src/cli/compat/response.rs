//! Response options: `SHADOW_MODE`, `QUOTA_MODE`, dynamic metadata and envoyproxy/ratelimit's
//! headers (`LIMIT_RESPONSE_HEADERS_ENABLED` and the names of the three).

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};
use crate::cli::response::{HeadersArg, ResponseArgs, parse_header_name};

const ENABLED: &str = "LIMIT_RESPONSE_HEADERS_ENABLED";
/// Where a header name goes.
type NameField = fn(&mut ResponseArgs) -> &mut String;
/// Each header name variable, the flag it sets, and that flag's field.
const NAMES: [(&str, &str, NameField); 3] = [
    ("LIMIT_LIMIT_HEADER", "limit_header", |r| {
        &mut r.limit_header
    }),
    ("LIMIT_REMAINING_HEADER", "remaining_header", |r| {
        &mut r.remaining_header
    }),
    ("LIMIT_RESET_HEADER", "reset_header", |r| {
        &mut r.reset_header
    }),
];

/// The response variables.
pub const GROUP: Group = Group {
    name: "Responses",
    vars: &[
        Var {
            name: "SHADOW_MODE",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("`--shadow-mode`"),
        },
        Var {
            name: "QUOTA_MODE",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("`--quota-mode`"),
        },
        Var {
            name: "RESPONSE_DYNAMIC_METADATA",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("`--response-dynamic-metadata`"),
        },
        Var {
            name: ENABLED,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Differently(
                "`true` → `--response-headers upstream` (exactly upstream's three headers); `false` or not set keeps sluice's draft-10 headers with Retry-After on OVER_LIMIT",
            ),
        },
        Var {
            name: "LIMIT_LIMIT_HEADER",
            kind: VarType::Str,
            default: "RateLimit-Limit",
            handling: Handling::Honoured("`--limit-header` (verbatim)"),
        },
        Var {
            name: "LIMIT_REMAINING_HEADER",
            kind: VarType::Str,
            default: "RateLimit-Remaining",
            handling: Handling::Honoured("`--remaining-header` (verbatim)"),
        },
        Var {
            name: "LIMIT_RESET_HEADER",
            kind: VarType::Str,
            default: "RateLimit-Reset",
            handling: Handling::Honoured("`--reset-header` (verbatim)"),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "shadow_mode", &["SHADOW_MODE"], |args| {
        args.shadow_mode = env.bool("SHADOW_MODE", false)?;
        Ok(())
    })?;
    target.unless_explicit(env, "quota_mode", &["QUOTA_MODE"], |args| {
        args.response.quota_mode = env.bool("QUOTA_MODE", false)?;
        Ok(())
    })?;
    let metadata = &["RESPONSE_DYNAMIC_METADATA"];
    target.unless_explicit(env, "response_dynamic_metadata", metadata, |args| {
        args.response.response_dynamic_metadata = env.bool(metadata[0], false)?;
        Ok(())
    })?;
    if env.bool(ENABLED, false)? {
        target.unless_explicit(env, "response_headers", &[ENABLED], |args| {
            args.response.response_headers = HeadersArg::Upstream;
            Ok(())
        })?;
    }
    header_names(env, target)
}

/// The header names, when envoyproxy/ratelimit's headers are what is sent (by
/// LIMIT_RESPONSE_HEADERS_ENABLED or `--response-headers upstream`); otherwise they have no effect,
/// as envoyproxy/ratelimit.
fn header_names(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let upstream = target.args.response.response_headers == HeadersArg::Upstream;
    for (name, id, field) in NAMES {
        let Some(value) = env.get(name) else { continue };
        if !upstream {
            target.note(
                name,
                "no effect without LIMIT_RESPONSE_HEADERS_ENABLED=true, as upstream",
            );
            continue;
        }
        target.unless_explicit(env, id, &[name], |args| {
            *field(&mut args.response) =
                parse_header_name(value).map_err(|problem| env.error(name, problem))?;
            Ok(())
        })?;
    }
    Ok(())
}
