//! Health: `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.

use super::env::Env;
use super::{EnvError, Group, Handling, ServeTarget, Var, VarType};

const DOMAINS: &str = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED";
const STORE: &str = "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION";

/// The health variables.
pub const GROUP: Group = Group {
    name: "Health",
    vars: &[
        Var {
            name: DOMAINS,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Honoured(
                "`--health-requires-domains`: unhealthy while the loaded rules hold no domain",
            ),
        },
        Var {
            name: STORE,
            kind: VarType::Bool,
            default: "false",
            handling: Handling::Differently(
                "`--health-checks-store`: unhealthy once the Redis breaker has stayed open for 10 s (upstream: when the pool has no active connection)",
            ),
        },
    ],
    apply,
};

fn apply(env: &Env, target: &mut ServeTarget<'_>) -> Result<(), EnvError> {
    target.unless_explicit(env, "health_requires_domains", &[DOMAINS], |args| {
        args.serving.health_requires_domains = env.bool(DOMAINS, false)?;
        Ok(())
    })?;
    target.unless_explicit(env, "health_checks_store", &[STORE], |args| {
        args.serving.health_checks_store = env.bool(STORE, false)?;
        Ok(())
    })
}
