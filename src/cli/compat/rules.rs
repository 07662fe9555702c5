//! Rule files in envoyproxy/ratelimit's layout: `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`,
//! `RUNTIME_APPDIRECTORY`, `RUNTIME_IGNOREDOTFILES`, `RUNTIME_WATCH_ROOT`, `MERGE_DOMAIN_CONFIG`.

use sluice::rules::CompatLayout;

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};

const LAYOUT: [&str; 5] = [
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
];

/// The rule layout variables.
pub const GROUP: Group = Group {
    name: "Rule files",
    vars: &[
        Var {
            name: "RUNTIME_ROOT",
            kind: VarType::Str,
            default: "/srv/runtime_data/current",
            handling: Handling::Honoured(
                "rules from upstream's layout (unless `--config` is given)",
            ),
        },
        Var {
            name: "RUNTIME_SUBDIRECTORY",
            kind: VarType::Str,
            default: "",
            handling: Handling::Honoured(
                "as upstream (empty with RUNTIME_WATCH_ROOT=true loads no rules)",
            ),
        },
        Var {
            name: "RUNTIME_APPDIRECTORY",
            kind: VarType::Str,
            default: "config",
            handling: Handling::Honoured("as upstream"),
        },
        Var {
            name: "RUNTIME_IGNOREDOTFILES",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("as upstream (needed for ConfigMap mounts)"),
        },
        Var {
            name: "RUNTIME_WATCH_ROOT",
            kind: VarType::Bool,
            default: "true",
            handling: Handling::Differently(
                "which directory is read, as upstream; sluice reloads on any change of the files read (upstream, with `true`, only on a swap of RUNTIME_ROOT)",
            ),
        },
        Var {
            name: "MERGE_DOMAIN_CONFIG",
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured("`--merge-domains`"),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    let merge = &["MERGE_DOMAIN_CONFIG"];
    target.unless_explicit(env, "merge_domains", merge, |args| {
        args.rules.merge_domains = env.bool(merge[0], false)?;
        Ok(())
    })?;
    let layout = CompatLayout {
        root: env
            .string("RUNTIME_ROOT", "/srv/runtime_data/current")
            .into(),
        subdirectory: env.string("RUNTIME_SUBDIRECTORY", "").into(),
        app_directory: env.string("RUNTIME_APPDIRECTORY", "config").into(),
        ignore_dotfiles: env.bool("RUNTIME_IGNOREDOTFILES", false)?,
        watch_root: env.bool("RUNTIME_WATCH_ROOT", true)?,
    };
    let mut runtime = None;
    target.unless_explicit(env, "config", &LAYOUT, |_| {
        runtime = Some(layout);
        Ok(())
    })?;
    target.runtime = runtime;
    Ok(())
}
