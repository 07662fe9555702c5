//! The composition root: builds the store, the rules, the limiter and both servers from
//! [`Settings`], serves until shutdown, and owns the shutdown sequence (one cancellation token
//! for every task).
//!
//! [`start`] (`build.rs`) loads the rules ([`Reloader::load`], or with an xDS source
//! [`Reloader::pending`] until the control plane sends them), the certificates and the admin
//! tokens, builds the store (`store::build`) and the [`Limiter`](crate::limiter::Limiter),
//! binds the listeners (`listen::Listeners::bind`); `launch.rs` builds the RLQS wing and spawns
//! the tasks: the gRPC
//! and HTTP servers (`listen::spawn`), the rule watcher or the xDS client, the certificate
//! watcher, the store's background work, housekeeping (`tasks::sweep`), the statsd sink
//! (`statsd::run`), gRPC health (`health::follow`) and the shutdown sequence (`shutdown`).
//! [`Running::wait`] returns once the server has stopped and the store's last flush has run;
//! [`AppError`] says why it could not start.

mod build;
pub mod defaults;
mod error;
mod file_limit;
mod file_reload;
mod grpc;
mod health;
mod launch;
mod listen;
mod parts;
mod region;
mod routes;
mod running;
mod settings;
mod shutdown;
mod side;
mod store;
mod tasks;

use std::sync::Arc;

use crate::clock::Clock;
use crate::store::Store;

pub use self::error::AppError;
pub use self::file_reload::FileReload;
pub use self::running::Running;
pub use self::settings::{
    AdminSettings, HealthOptions, MemorySettings, MetricsListener, RegionSettings, Settings,
    StoreSettings,
};
pub use crate::admin::TokenError as AdminTokenError;
pub use crate::reload::{Reloader, RuleSource, WatchError};
pub use crate::statsd::mapper::MapperError;
pub use crate::statsd::{Mogrifier, MogrifierError, StatsdFormat, StatsdProtocol, StatsdSettings};
pub use crate::tls::{ReloadOutcome, ServerTls, TlsSettings, TlsStatus};
pub use crate::xds::{Backoff, XdsSettings, XdsTls};

use self::build::start_inner;

/// Loads the rules, builds the store `settings.store` asks for (restoring the embedded store's
/// counters before the listeners open), binds both listeners and serves in the background.
pub async fn start(settings: Settings, clock: Arc<dyn Clock>) -> Result<Running, AppError> {
    start_inner(settings, clock, None).await
}

/// As [`start`], counting in `store` instead of the one `settings.store` describes (tests use
/// this for a store they control).
pub async fn start_with_store(
    settings: Settings,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
) -> Result<Running, AppError> {
    start_inner(settings, clock, Some(store)).await
}
