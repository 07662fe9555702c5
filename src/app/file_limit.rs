//! The connection caps held below the process's file-descriptor limit (`RLIMIT_NOFILE`): every
//! connection holds a descriptor, so the gRPC and HTTP caps together, the side listeners' and
//! a reserve for everything else (Redis, the data directory, rule files, the watcher) must fit
//! under it, or a flood of connections takes the descriptors a probe, a store call or a
//! journal needs ("Too many open files").
//!
//! At start: if they do not fit under the soft limit, it is raised towards the hard limit (as
//! the Go runtime does for envoyproxy/ratelimit); if they still do not fit, the caps are
//! lowered, the HTTP cap to at most a quarter of what is left. One log line says what was
//! chosen; nothing is said when they fit.

/// Descriptors kept for everything but client connections (a quarter of a smaller limit).
const RESERVE: u64 = 256;
/// The cap of each side listener (the metrics and admin listeners serve a few clients).
pub(super) const SIDE_LISTENER_MAX_CONNECTIONS: usize = 32;

/// The two listeners' connection caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    /// `--grpc-max-connections`.
    pub grpc: usize,
    /// `--http-max-connections`.
    pub http: usize,
}

/// What to do about a limit: the soft limit to set, if it must rise, and the caps to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    raise_to: Option<u64>,
    caps: Caps,
}

/// The caps to serve with, given the configured ones and `side` side listeners: the soft
/// limit raised if they need it, the caps lowered if even the hard limit is too low.
pub(super) fn fit(caps: Caps, side: usize) -> Caps {
    let Some((soft, hard)) = limits() else {
        return caps;
    };
    let plan = plan(caps, side, soft, hard);
    let raised = plan.raise_to.filter(|&to| set_soft_limit(to, hard));
    let limit = raised.unwrap_or(soft);
    let plan = match (plan.raise_to, raised) {
        // The raise was refused: plan again with the limit as it is.
        (Some(_), None) => self::plan(caps, side, soft, soft),
        _ => plan,
    };
    if plan.caps != caps {
        tracing::warn!(
            limit,
            hard_limit = hard,
            "file descriptors: the limit is too low for the connection caps: \
             --grpc-max-connections lowered from {} to {} and --http-max-connections from {} \
             to {}, keeping {} for everything else; raise the limit (ulimit -n, LimitNOFILE=, \
             a container runtime's nofile) to serve more",
            caps.grpc,
            plan.caps.grpc,
            caps.http,
            plan.caps.http,
            reserve(limit),
        );
    } else if let Some(to) = raised {
        tracing::info!(
            from = soft,
            to,
            "file descriptors: soft limit raised so that --grpc-max-connections ({}) and \
             --http-max-connections ({}) fit, with {} kept for everything else",
            caps.grpc,
            caps.http,
            reserve(to),
        );
    }
    plan.caps
}

/// The plan for a soft limit `soft` and a hard one `hard` (`u64::MAX`: none).
fn plan(caps: Caps, side: usize, soft: u64, hard: u64) -> Plan {
    let needed = |limit: u64| {
        (caps.grpc + caps.http + side * SIDE_LISTENER_MAX_CONNECTIONS) as u64 + reserve(limit)
    };
    if needed(soft) <= soft {
        return Plan {
            raise_to: None,
            caps,
        };
    }
    let target = needed(hard.min(u64::MAX / 2)).min(hard);
    let raise_to = (target > soft).then_some(target);
    let limit = raise_to.unwrap_or(soft);
    if needed(limit) <= limit {
        return Plan { raise_to, caps };
    }
    let room = limit
        .saturating_sub(reserve(limit))
        .saturating_sub((side * SIDE_LISTENER_MAX_CONNECTIONS) as u64) as usize;
    let http = caps.http.min(room / 4).max(1);
    let grpc = caps.grpc.min(room.saturating_sub(http)).max(1);
    Plan {
        raise_to,
        caps: Caps { grpc, http },
    }
}

/// The descriptors kept for everything else under `limit`.
fn reserve(limit: u64) -> u64 {
    RESERVE.min(limit / 4)
}

/// The soft and hard limits (`u64::MAX` for none); `None` where there are none to read.
#[cfg(target_os = "linux")]
fn limits() -> Option<(u64, u64)> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    Some((
        limit.current.unwrap_or(u64::MAX),
        limit.maximum.unwrap_or(u64::MAX),
    ))
}

#[cfg(not(target_os = "linux"))]
fn limits() -> Option<(u64, u64)> {
    None
}

/// Sets the soft limit to `to` (the hard one stays `hard`); whether it was set.
#[cfg(target_os = "linux")]
fn set_soft_limit(to: u64, hard: u64) -> bool {
    let limit = rustix::process::Rlimit {
        current: Some(to),
        maximum: (hard != u64::MAX).then_some(hard),
    };
    rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn set_soft_limit(_: u64, _: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Caps = Caps {
        grpc: 4096,
        http: 256,
    };

    /// Caps that fit change nothing; a soft limit too low is raised to what they need, within
    /// the hard one.
    #[test]
    fn the_soft_limit_rises_when_the_hard_one_allows() {
        let fits = plan(DEFAULTS, 0, 1 << 20, 1 << 20);
        assert_eq!(
            fits,
            Plan {
                raise_to: None,
                caps: DEFAULTS
            }
        );
        let raised = plan(DEFAULTS, 1, 1024, 1 << 20);
        assert_eq!(raised.caps, DEFAULTS);
        assert_eq!(raised.raise_to, Some(4096 + 256 + 32 + 256));
        assert_eq!(
            plan(DEFAULTS, 0, 1024, u64::MAX).raise_to,
            Some(4096 + 256 + 256)
        );
    }

    /// Under a hard limit of 1,024 the caps are lowered to fit with the reserve: HTTP to a
    /// quarter of the room, gRPC to the rest; never below one.
    #[test]
    fn the_caps_are_lowered_under_a_low_hard_limit() {
        let lowered = plan(DEFAULTS, 1, 1024, 1024);
        assert_eq!(lowered.raise_to, None);
        let room = 1024 - 256 - 32;
        assert_eq!(
            lowered.caps,
            Caps {
                grpc: room - room / 4,
                http: room / 4
            }
        );
        let total = lowered.caps.grpc + lowered.caps.http + 32 + 256;
        assert!(total <= 1024, "{total}");
        let tiny = plan(DEFAULTS, 2, 40, 40);
        assert_eq!(tiny.caps, Caps { grpc: 1, http: 1 });
        let small = Caps {
            grpc: 10,
            http: 900,
        };
        assert_eq!(
            plan(small, 0, 1024, 1024).caps,
            Caps {
                grpc: 10,
                http: 192
            }
        );
    }
}
