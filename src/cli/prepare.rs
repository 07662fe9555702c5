//! From parsed `serve` flags to what the server runs with: with `--upstream-env` (or started as
//! `ratelimit`) envoyproxy/ratelimit's variables fill in what no flag gave explicitly.

use clap::ArgMatches;
use sluice::app::Settings;

use super::LogFormat;
use super::compat;
use super::serve::ServeArgs;

/// What `serve` runs with, once the personality (if any) has read its variables.
pub struct Prepared {
    /// The server's settings.
    pub settings: Settings,
    /// The log format.
    pub log_format: LogFormat,
    /// The log filter (`None`: RUST_LOG, else info).
    pub log_level: Option<String>,
    /// The start-up warning naming envoyproxy/ratelimit variables that are set but not honoured.
    pub warning: Option<String>,
}

/// Turns the flags into settings; with `--upstream-env` (or as `ratelimit`) envoyproxy/ratelimit's
/// variables fill in what no flag gave explicitly (`matches` tells which did).
pub fn prepare(mut args: ServeArgs, matches: Option<&ArgMatches>) -> anyhow::Result<Prepared> {
    let mut applied = compat::Applied::default();
    if args.serving.upstream_env {
        applied = compat::apply(&mut args, matches, &compat::Env::from_process())?;
    }
    let mut settings = args.settings();
    if args.serving.upstream_env {
        settings.runtime = applied.runtime;
        // As envoyproxy/ratelimit: rules that do not load leave the server up, unhealthy, waiting
        // for them.
        settings.rules_required = false;
    }
    Ok(Prepared {
        settings,
        log_format: args.log_format,
        log_level: args.log_level,
        warning: applied.warning,
    })
}
