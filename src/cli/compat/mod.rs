//! The `ratelimit` personality: envoyproxy/ratelimit's environment variables read as its own
//! settings are, onto `sluice serve`'s flags and settings.
//!
//! Started as `ratelimit` (the image's `/bin/ratelimit`) or as `sluice serve --upstream-env`.
//! Precedence: a flag, then its `SLUICE_*` variable, then the envoyproxy/ratelimit variable, then
//! the default (envoyproxy/ratelimit's, for an absent envoyproxy/ratelimit variable). Each group of
//! variables is one file that declares its variables (type, default, how sluice honours it) and
//! applies them; the table of every variable is the union of the groups. A variable that is set but
//! not honoured is named, with the reason, in one warning at start; a malformed value stops the
//! start.

mod backend;
mod env;
mod health;
mod listeners;
mod logs;
mod redis;
mod redis_tls;
mod response;
mod rules;
mod stats;
mod tls;
mod tracing_vars;
mod xds;

use clap::ArgMatches;
use clap::parser::ValueSource;
use sluice::rules::CompatLayout;

use super::serve::ServeArgs;
pub use env::{Env, EnvError};

/// The groups of variables, in the order they are applied.
const GROUPS: &[&Group] = &[
    &listeners::GROUP,
    &tls::GROUP,
    &logs::GROUP,
    &xds::GROUP,
    &rules::GROUP,
    &backend::GROUP,
    &redis::GROUP,
    &redis_tls::GROUP,
    &response::GROUP,
    &health::GROUP,
    &stats::GROUP,
    &tracing_vars::GROUP,
];

/// One group of variables: what it declares and how it applies them.
pub struct Group {
    /// The group's name in the README's table.
    pub name: &'static str,
    /// Its variables.
    pub vars: &'static [Var],
    /// Writes the variables that are set into the target.
    pub apply: fn(&Env, &mut ServeTarget<'_>) -> Result<(), EnvError>,
}

/// One envoyproxy/ratelimit variable.
pub struct Var {
    /// Its exact name; a trailing `*` names every variable with that prefix.
    pub name: &'static str,
    /// Its type, as envoyproxy/ratelimit parses it.
    pub kind: VarType,
    /// envoyproxy/ratelimit's default, as text (for the README's table).
    pub default: &'static str,
    /// What sluice does with it.
    pub handling: Handling,
}

/// The type of a variable (each set variable is checked against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarType {
    /// Any text.
    Str,
    /// Go's booleans.
    Bool,
    /// A Go integer (base 0).
    Int,
    /// A float.
    Float,
    /// A Go duration.
    Duration,
    /// `k:v,k2:v2`.
    Map,
    /// `a,b`.
    List,
}

/// What sluice does with a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Honoured as envoyproxy/ratelimit does, through this flag (or setting).
    Honoured(&'static str),
    /// Honoured, with this difference.
    Differently(&'static str),
    /// Not honoured, for this reason: named in the start-up warning when set.
    Ignored(&'static str),
}

/// What the groups write into: the flags (unless given explicitly), the rule layout, and the
/// notes for the start-up warning.
pub struct ServeTarget<'a> {
    /// The `serve` flags, parsed.
    pub args: &'a mut ServeArgs,
    matches: Option<&'a ArgMatches>,
    /// Rules from envoyproxy/ratelimit's layout (unless `--config` was given).
    pub runtime: Option<CompatLayout>,
    notes: Vec<(String, String)>,
}

impl ServeTarget<'_> {
    /// Whether the flag `id` was given on the command line or as its `SLUICE_*` variable; then
    /// the envoyproxy/ratelimit variables for it yield.
    pub fn explicit(&self, id: &str) -> bool {
        self.matches.is_some_and(|m| {
            matches!(
                m.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
    }

    /// Runs `write` unless the flag `id` was given explicitly; if it was, the variables among
    /// `names` that are set are named in the warning as overridden by it.
    pub fn unless_explicit(
        &mut self,
        env: &Env,
        id: &str,
        names: &[&str],
        write: impl FnOnce(&mut ServeArgs) -> Result<(), EnvError>,
    ) -> Result<(), EnvError> {
        if !self.explicit(id) {
            return write(self.args);
        }
        let flag = format!("overridden by --{}", id.replace('_', "-"));
        for name in names.iter().filter(|n| env.is_set(n)) {
            self.note(name, &flag);
        }
        Ok(())
    }

    /// Names `name` in the warning with `reason` (a variable that is set but has no effect).
    pub fn note(&mut self, name: &str, reason: &str) {
        self.notes.push((name.to_string(), reason.to_string()));
    }
}

/// What the personality adds to the parsed flags.
#[derive(Debug, Default)]
pub struct Applied {
    /// Rules from envoyproxy/ratelimit's layout (`None`: `--config` was given).
    pub runtime: Option<CompatLayout>,
    /// The one start-up warning, if any variable set is not honoured.
    pub warning: Option<String>,
}

/// Applies the envoyproxy/ratelimit variables of `env` to `args`: flags given explicitly (per
/// `matches`) stay. A malformed value is an error naming the variable and its value.
pub fn apply(
    args: &mut ServeArgs,
    matches: Option<&ArgMatches>,
    env: &Env,
) -> Result<Applied, EnvError> {
    check_types(env)?;
    let mut target = ServeTarget {
        args,
        matches,
        runtime: None,
        notes: Vec::new(),
    };
    for group in GROUPS {
        (group.apply)(env, &mut target)?;
    }
    let mut notes = target.notes;
    for var in all_vars() {
        if let Handling::Ignored(reason) = var.handling {
            for name in set_names(env, var.name) {
                notes.push((name.to_string(), reason.to_string()));
            }
        }
    }
    notes.sort();
    notes.dedup_by(|a, b| a.0 == b.0);
    let warning = (!notes.is_empty()).then(|| {
        let items: Vec<String> = notes
            .iter()
            .map(|(name, reason)| format!("{name} ({reason})"))
            .collect();
        format!(
            "envoyproxy/ratelimit variables set but not honoured: {}",
            items.join("; ")
        )
    });
    Ok(Applied {
        runtime: target.runtime,
        warning,
    })
}

/// The Markdown table of every variable, group by group: the README's migration table, and
/// what `sluice upstream-env` prints.
pub fn table() -> String {
    let mut out = String::from(
        "| variable | type | upstream default | in sluice |\n| --- | --- | --- | --- |\n",
    );
    for group in GROUPS {
        out.push_str(&format!("| **{}** | | | |\n", group.name));
        for var in group.vars {
            let how = match var.handling {
                Handling::Honoured(how) => format!("honoured: {how}"),
                Handling::Differently(how) => format!("honoured differently: {how}"),
                Handling::Ignored(why) => format!("**not honoured**: {why}"),
            };
            let default = if var.default.is_empty() {
                "`\"\"`".to_string()
            } else {
                format!("`{}`", var.default)
            };
            out.push_str(&format!(
                "| `{}` | {} | {default} | {how} |\n",
                var.name,
                var.kind.name()
            ));
        }
    }
    out
}

impl VarType {
    fn name(self) -> &'static str {
        match self {
            VarType::Str => "string",
            VarType::Bool => "bool",
            VarType::Int => "int",
            VarType::Float => "float",
            VarType::Duration => "duration",
            VarType::Map => "map",
            VarType::List => "list",
        }
    }
}

/// Every variable of every group.
pub fn all_vars() -> impl Iterator<Item = &'static Var> {
    GROUPS.iter().flat_map(|group| group.vars.iter())
}

/// The names set in `env` that `pattern` names (itself, or each with its prefix).
fn set_names<'e>(env: &'e Env, pattern: &'static str) -> Vec<&'e str> {
    match pattern.strip_suffix('*') {
        Some(prefix) => env.names().filter(|n| n.starts_with(prefix)).collect(),
        None => env.names().filter(|n| *n == pattern).collect(),
    }
}

/// Checks every set variable against its type, as envoyproxy/ratelimit parses all of them at start.
fn check_types(env: &Env) -> Result<(), EnvError> {
    for var in all_vars().filter(|v| !v.name.ends_with('*')) {
        let checked = match var.kind {
            VarType::Str | VarType::List => Ok(None),
            VarType::Bool => env.parsed(var.name, env::go_bool).map(|_| None),
            VarType::Int => env.parsed(var.name, env::go_int).map(|_| None),
            VarType::Float => env.parsed(var.name, env::go_float).map(|_| None),
            VarType::Map => env.parsed(var.name, env::go_map).map(|_| None),
            VarType::Duration => env
                .parsed(var.name, |t| {
                    sluice::clock::duration::parse(t).map_err(|e| e.problem.to_string())
                })
                .map(|_| None::<()>),
        };
        checked?;
    }
    Ok(())
}

#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod xds_tests;
