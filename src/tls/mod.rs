//! Optional TLS and mTLS on the gRPC listener (rustls on ring): certificates loaded at start,
//! reloaded when their files change, one handshake task per connection.

mod config;
mod incoming;
mod san;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::watch::{Changes, DirectoryRule};
use config::Sources;
pub use incoming::TlsIncoming;

/// How long the files must stay quiet before a reload: a writer replaces the certificate and
/// then the key, and the pair should be read once, after both.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Where the certificate files are (all PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The server certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set, clients must present a certificate that chains to one of these CAs (mTLS).
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: the client certificate must also be valid for this DNS name or IP
    /// address (a subject alternative name).
    pub client_san: Option<String>,
}

/// Why certificates could not be loaded or watched. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not valid PEM.
    #[error("{}: invalid PEM: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: rustls::pki_types::pem::Error,
    },
    /// A file holds no PEM section of the expected kind.
    #[error("{}: no {what} found (expected a PEM file)", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for, e.g. "certificate".
        what: &'static str,
    },
    /// The certificate and key do not make a usable pair (unsupported key, key mismatch).
    #[error("{} with key {}: {source}", cert.display(), key.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The cause.
        source: rustls::Error,
    },
    /// The client CA file does not make a client certificate verifier.
    #[error("{}: unusable client CA: {source}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The file watcher could not start (a path it cannot watch is only a warning).
    #[error("cannot watch {} for certificate changes: {source}", path.display())]
    Watch {
        /// The certificate file.
        path: PathBuf,
        /// The cause.
        source: notify::Error,
    },
}

/// How certificate reloads went so far (for tests and status endpoints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsStatus {
    /// Successful loads, the start included (so at least 1).
    pub generation: u64,
    /// Reloads that failed and left the previous certificates in place.
    pub failures: u64,
    /// The error of the latest reload, if it failed.
    pub last_error: Option<String>,
}

/// The server's TLS: the latest good rustls configuration, swapped whole on reload.
///
/// Cloning is cheap and shares the state. Each new connection is handshaken with the
/// configuration current at accept time; established connections keep theirs.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<TlsInner>,
}

struct TlsInner {
    settings: TlsSettings,
    config: ArcSwap<ServerConfig>,
    /// The file contents of the latest attempt, so unchanged files are not rebuilt or re-logged.
    attempted: Mutex<Sources>,
    status: tokio::sync::watch::Sender<TlsStatus>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The files are as last seen: nothing to do.
    Unchanged,
    /// New certificates are in use for new connections.
    Loaded,
    /// The files are invalid; the previous certificates stay in use.
    Failed,
}

impl ServerTls {
    /// Loads the certificates; any problem is an error (used at start, before serving).
    pub fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let sources = Sources::read(&settings)?;
        let config = sources.build(&settings)?;
        let status = TlsStatus {
            generation: 1,
            ..TlsStatus::default()
        };
        Ok(Self {
            inner: Arc::new(TlsInner {
                settings,
                config: ArcSwap::from_pointee(config),
                attempted: Mutex::new(sources),
                status: tokio::sync::watch::Sender::new(status),
            }),
        })
    }

    /// The file paths.
    pub fn settings(&self) -> &TlsSettings {
        &self.inner.settings
    }

    /// The configuration new connections are handshaken with.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.inner.config.load_full()
    }

    /// How reloads went so far.
    pub fn status(&self) -> TlsStatus {
        self.inner.status.borrow().clone()
    }

    /// A receiver that sees every status change (e.g. to wait for a reload).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<TlsStatus> {
        self.inner.status.subscribe()
    }

    /// Re-reads the files and, if they changed and are valid, swaps the configuration in.
    /// A failure is logged with the file path and keeps the previous configuration.
    pub fn reload(&self) -> ReloadOutcome {
        let settings = &self.inner.settings;
        let built = {
            let mut attempted = self.inner.attempted.lock();
            match Sources::read(settings) {
                Ok(sources) if sources == *attempted => return ReloadOutcome::Unchanged,
                Ok(sources) => {
                    let built = sources.build(settings);
                    *attempted = sources;
                    built
                }
                // A read error is not remembered: the same files may be readable at the next event.
                Err(e) => Err(e),
            }
        };
        match built {
            Ok(config) => {
                self.inner.config.store(Arc::new(config));
                self.inner.status.send_modify(|s| {
                    s.generation += 1;
                    s.last_error = None;
                });
                tracing::info!(
                    cert = %settings.cert.display(),
                    generation = self.status().generation,
                    "TLS certificates reloaded"
                );
                ReloadOutcome::Loaded
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS certificates did not reload; keeping the previous ones");
                self.inner.status.send_modify(|s| {
                    s.failures += 1;
                    s.last_error = Some(e.to_string());
                });
                ReloadOutcome::Failed
            }
        }
    }

    /// Watches the certificate files (see `crate::watch`) and reloads on change until
    /// `shutdown`.
    pub fn watch(&self, tasks: &TaskTracker, shutdown: CancellationToken) -> Result<(), TlsError> {
        let files = self.settings().files().map(Path::to_path_buf).collect();
        let mut changes = Changes::start(files, DirectoryRule::default(), DEBOUNCE, shutdown)
            .map_err(|source| TlsError::Watch {
                path: self.settings().cert.clone(),
                source,
            })?;
        let tls = self.clone();
        tasks.spawn(async move {
            while changes.changed().await {
                // Small local files: reading them inline is cheaper than a blocking-pool hop.
                tls.reload();
            }
        });
        Ok(())
    }

    /// Accepts TCP connections on `listener` and yields them once their TLS handshake is done.
    /// The accept loop and the handshakes run as tasks on `tasks` and end with `shutdown`.
    pub fn incoming(
        &self,
        listener: TcpListener,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> TlsIncoming {
        incoming::spawn(self.clone(), listener, tasks, shutdown)
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.inner.settings)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl TlsSettings {
    /// Every file, for reading and watching.
    fn files(&self) -> impl Iterator<Item = &Path> {
        [Some(self.cert.as_path()), Some(self.key.as_path())]
            .into_iter()
            .chain([self.client_ca.as_deref()])
            .flatten()
    }
}
