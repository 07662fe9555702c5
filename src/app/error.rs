//! Why the server could not start or stopped badly: [`AppError`].

use std::net::SocketAddr;

use crate::rules::ConfigErrors;
use crate::store::StoreError;
use crate::store::persist::PersistError;
use crate::telemetry::TraceError;
use crate::tls::TlsError;
use crate::xds::XdsError;

use super::{AdminTokenError, WatchError};

/// Why the server could not start or stopped badly. Each message holds its cause, so no
/// variant is also a `source`: `main` prints the error chain, which would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The rules did not load.
    #[error("rules did not load:\n{0}")]
    Config(ConfigErrors),
    /// The rule files could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        error: std::io::Error,
    },
    /// The gRPC unix socket could not be bound.
    #[error("cannot listen on unix socket {}: {error}", path.display())]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// TLS was asked for on a unix socket, which sluice serves in plaintext only.
    #[error("gRPC TLS is not served on a unix socket: use a TCP address, or no TLS")]
    TlsOnUnixSocket,
    /// The TLS certificates did not load or cannot be watched. Not a `source`: the message
    /// already holds the cause, and an error chain would print it twice.
    #[error("TLS: {0}")]
    Tls(TlsError),
    /// The xDS rule source is misconfigured (address, headers, TLS files).
    #[error("{0}")]
    Xds(XdsError),
    /// The data directory could not be opened or locked.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The counter store is misconfigured (a bad Redis URL or key prefix).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The region settings cannot work (no `--region` with a global store, a bad name).
    #[error("region: {0}")]
    Region(&'static str),
    /// The global store is misconfigured; its flags are `--global-redis-*` where the message
    /// names the `--redis-*` flag of the same purpose.
    #[error("global store (--global-redis-url and the --global-redis-* flags): {0}")]
    GlobalStore(StoreError),
    /// A start-up task (restoring the embedded store) panicked or was cancelled.
    #[error("start-up task failed: {0}")]
    Task(tokio::task::JoinError),
    /// The statsd_exporter mapping file did not load (its error names file:line:column).
    #[error("prometheus mapper: {0}")]
    Mapper(crate::statsd::mapper::MapperError),
    /// Tracing was asked for but its exporter could not be built.
    #[error(transparent)]
    Tracing(#[from] TraceError),
    /// The admin listener's token file cannot be used (or watched).
    #[error(transparent)]
    Admin(#[from] AdminTokenError),
    /// The RLQS book's thread could not be started.
    #[error("the RLQS book's thread did not start: {0}")]
    Rlqs(std::io::Error),
    /// The HTTP listeners' runtime could not be started.
    #[error("the HTTP listeners' threads did not start: {0}")]
    HttpRuntime(std::io::Error),
}

impl From<ConfigErrors> for AppError {
    fn from(errors: ConfigErrors) -> Self {
        Self::Config(errors)
    }
}
