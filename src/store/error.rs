//! Why a store failed: a typed [`StoreError`] that says what failed and whether retrying helps.
//!
//! Each message is complete on its own (it names the cause), because it is printed as is: in
//! the gRPC status, the HTTP body and the log lines. So a cause is kept typed in its variant for
//! callers to inspect, not chained as `source()`, which an error chain would print a second time.
//! Over the limit is never an error: it is a normal [`Verdict`](crate::algorithm::Verdict).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError, RetryMethod, ServerErrorKind, Value};

/// Why a claim of portions failed (replicas' or regions'): the shared store's own error, as
/// it came.
pub type ClaimError = Box<dyn std::error::Error + Send + Sync>;

/// A store failure. `Clone`: a failed batched script run fails every call in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis did not answer within `--redis-timeout` (the call may still run late).
    #[error("counter store unavailable: redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The circuit breaker is open: calls skip Redis until a probe gets an answer.
    #[error("counter store unavailable: redis circuit breaker is open")]
    CircuitOpen,
    /// No connection is established yet (one is being opened in the background).
    #[error("counter store unavailable: not connected to redis yet")]
    NotConnected,
    /// A batched run was dropped before it answered (the runtime is shutting down).
    #[error("counter store unavailable: redis batch abandoned")]
    Abandoned,
    /// A Redis command failed: connection, I/O, authentication or an error reply.
    #[error("counter store unavailable: redis: {0}")]
    Redis(RedisError),
    /// The script answered something it never sends: a bug or a foreign script under its SHA.
    #[error("counter store unavailable: unexpected script reply: {0}")]
    BadReply(BadReply),
    /// `--redis-url` cannot be used (the URL is shown with its credentials hidden).
    #[error("counter store configuration: invalid redis url '{url}': {problem}")]
    BadUrl {
        /// The URL as logs may show it (`store::redis::describe_url`).
        url: String,
        /// What is wrong with it.
        problem: UrlProblem,
    },
    /// `--redis-key-prefix` holds a brace, which would change what Redis Cluster hashes.
    #[error("counter store configuration: redis key prefix '{0}' must not contain '{{' or '}}'")]
    BadKeyPrefix(String),
    /// A Redis TLS file (`--redis-ca`, `--redis-client-cert`, `--redis-client-key`) cannot be
    /// read.
    #[error("counter store configuration: cannot read {flag} {}: {error}", path.display())]
    TlsFile {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        error: Arc<std::io::Error>,
    },
    /// The TLS material cannot be used (a file that holds no PEM certificate or key).
    #[error("counter store configuration: redis TLS: {0}")]
    Tls(String),
    /// Redis settings that do not go together (e.g. a client certificate without TLS).
    #[error("counter store configuration: {0}")]
    Conflict(&'static str),
    /// A reset took the counters out of memory, but the data directory could not be brought
    /// up to date: until a snapshot is written, a restart may bring them back.
    #[error(
        "counters reset in memory, but the data directory could not be written ({0}); a restart \
         may bring them back until a snapshot succeeds (retried)"
    )]
    ResetNotPersisted(String),
}

impl StoreError {
    /// Whether the same call may succeed later without a change of configuration: a timeout,
    /// an open breaker, a connection not yet made, a failure Redis or the network may recover
    /// from. False for a configuration error, a reply the script never sends and a Redis error
    /// redis-rs classifies as permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::CircuitOpen | Self::NotConnected | Self::Abandoned => true,
            // READONLY: the master this connection reached was demoted (a failover); the
            // connections are replaced and the next call reaches the new master.
            Self::Redis(e) => {
                e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
                    || !matches!(e.retry_method(), RetryMethod::NoRetry)
            }
            Self::BadReply(_)
            | Self::BadUrl { .. }
            | Self::BadKeyPrefix(_)
            | Self::TlsFile { .. }
            | Self::Tls(_)
            | Self::Conflict(_) => false,
            // The snapshot is retried in the background; the reset itself is done.
            Self::ResetNotPersisted(_) => true,
        }
    }
}

impl From<RedisError> for StoreError {
    fn from(e: RedisError) -> Self {
        Self::Redis(e)
    }
}

impl From<BadReply> for StoreError {
    fn from(e: BadReply) -> Self {
        Self::BadReply(e)
    }
}

/// What is wrong with a `--redis-url` (or the settings that go with it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum UrlProblem {
    /// Credentials, a database or a node list without a `scheme://` to say what they mean.
    #[error(
        "no scheme (use redis://, rediss://, redis+unix://, redis+cluster:// or redis+sentinel://)"
    )]
    NoScheme,
    /// A scheme sluice does not speak.
    #[error(
        "unknown scheme '{0}' (use redis, rediss, redis+unix, unix, redis+cluster, rediss+cluster, \
         redis+sentinel or rediss+sentinel)"
    )]
    UnknownScheme(String),
    /// A cluster or sentinel URL without a node.
    #[error("no nodes")]
    NoNodes,
    /// A sentinel URL without the master's name.
    #[error("no master name (redis+sentinel://host:port[,host:port]/<master>[/db])")]
    NoMaster,
    /// A node that is not `host:port`.
    #[error("'{0}' is not host:port")]
    BadNode(String),
    /// A `#fragment` (redis-rs reads `#insecure` as "check no certificate at all").
    #[error("a '#' fragment is not supported (see --redis-tls-skip-hostname-verification)")]
    Fragment,
    /// A query parameter that is not understood, or holds a bad value.
    #[error("{0}")]
    Parameter(String),
    /// TLS asked for a unix socket.
    #[error("TLS over a unix socket is not supported")]
    TlsOverUnix,
    /// redis-rs refused it (host, port, database, TLS settings …).
    #[error("{0}")]
    Refused(RedisError),
}

/// What was wrong with a script reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BadReply {
    /// The reply is not the script's binary string.
    #[error("{0:?}")]
    NotBytes(Value),
    /// A call's part has the wrong number of fields (four integers per charge).
    #[error("expected {expected} integers, got {got}")]
    Length {
        /// Four per charge.
        expected: usize,
        /// What came.
        got: usize,
    },
    /// A field that must be a non-negative integer is negative.
    #[error("negative {0}")]
    Negative(i64),
    /// Fewer outcomes than charges came back.
    #[error("outcomes missing")]
    Missing,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Call-time failures are transient; configuration and protocol errors are not.
    #[test]
    fn transient_or_not() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(StoreError::Redis(io).is_transient());
        assert!(StoreError::Timeout(Duration::from_millis(10)).is_transient());
        assert!(StoreError::CircuitOpen.is_transient());
        let demoted = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(StoreError::Redis(demoted).is_transient(), "a failover");
        assert!(!StoreError::BadReply(BadReply::Missing).is_transient());
        assert!(!StoreError::BadKeyPrefix("a{".into()).is_transient());
        let ca = StoreError::TlsFile {
            flag: "--redis-ca",
            path: "/nowhere/ca.pem".into(),
            error: Arc::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        assert!(!ca.is_transient());
        assert!(
            ca.to_string().contains("--redis-ca /nowhere/ca.pem"),
            "{ca}"
        );
    }

    /// The messages keep the wording users saw before the errors were typed.
    #[test]
    fn messages() {
        let timeout = StoreError::Timeout(Duration::from_millis(10));
        assert_eq!(
            timeout.to_string(),
            "counter store unavailable: redis did not answer within 10ms"
        );
        let url = StoreError::BadUrl {
            url: "mysql://***@x".into(),
            problem: UrlProblem::UnknownScheme("mysql".into()),
        };
        assert_eq!(
            url.to_string(),
            "counter store configuration: invalid redis url 'mysql://***@x': unknown scheme \
             'mysql' (use redis, rediss, redis+unix, unix, redis+cluster, rediss+cluster, \
             redis+sentinel or rediss+sentinel)"
        );
        let reply = StoreError::from(BadReply::Length {
            expected: 8,
            got: 4,
        });
        assert_eq!(
            reply.to_string(),
            "counter store unavailable: unexpected script reply: expected 8 integers, got 4"
        );
    }
}
