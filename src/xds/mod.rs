//! Rules over xDS: a state-of-the-world ADS client that subscribes to envoyproxy/ratelimit's
//! `RateLimitConfig` resources, as Envoy Gateway serves them, and feeds every accepted response
//! to the [`Reloader`] as a whole new rule set.
//!
//! `protocol.rs` decides what each response means (accept, reject, a re-send of a rejected one)
//! and writes the ACKs and NACKs; `convert.rs` turns the resources into rule documents for the
//! rule compiler; `client.rs` runs the stream: connect, subscribe, answer, reconnect with
//! `backoff.rs`; `connect.rs` builds the channel (address, client TLS, stream headers).
//!
//! [`Reloader`]: crate::reload::Reloader

mod backoff;
mod client;
mod connect;
mod convert;
mod protocol;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::reload::Reloader;
use crate::rules::LoadOptions;

/// The resource type sluice subscribes to: envoyproxy/ratelimit's rule configuration.
const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The node id sent when none is given (envoyproxy/ratelimit's default).
pub const DEFAULT_NODE_ID: &str = "default";
/// The largest response accepted, in bytes (gRPC's usual 4 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 4 * 1024 * 1024;
/// The first pause before reconnecting.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The longest pause before reconnecting.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How far below its nominal length a jittered pause may fall (0 to 1).
pub const DEFAULT_BACKOFF_RANDOM_FACTOR: f64 = 0.5;

/// Where the rules come from and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsSettings {
    /// The control plane, `host:port` (the host is also the TLS name unless overridden).
    pub server: String,
    /// `node.id`: the control plane serves rules by it (Envoy Gateway: `envoy-ratelimit`).
    pub node_id: String,
    /// `node.metadata`, as string fields.
    pub node_metadata: Vec<(String, String)>,
    /// Extra gRPC metadata sent on the stream (e.g. an authorization token).
    pub headers: Vec<(String, String)>,
    /// TLS to the control plane; `None` is plaintext HTTP/2.
    pub tls: Option<XdsTls>,
    /// The largest response accepted, in bytes.
    pub max_message_size: usize,
    /// Pauses between reconnection attempts.
    pub backoff: Backoff,
    /// Serve before the first rules arrive (unknown domains answer OK meanwhile), instead of
    /// failing calls and reporting unhealthy until then.
    pub force_start: bool,
}

impl XdsSettings {
    /// The defaults for the control plane at `server`.
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            node_id: DEFAULT_NODE_ID.to_string(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            tls: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            backoff: Backoff::default(),
            force_start: false,
        }
    }
}

/// TLS to the control plane. Server certificates are checked against the system's roots plus
/// `ca`; the files are read again at every connection attempt, so rotated ones are picked up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdsTls {
    /// PEM client certificate chain (mutual TLS), with `key`.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// PEM CA certificates trusted besides the system's roots.
    pub ca: Option<PathBuf>,
    /// The name the server certificate must carry, instead of the host of `server`.
    pub server_name: Option<String>,
}

/// Reconnection pauses: `initial`, doubled per failed attempt up to `max`; with `jitter`, each
/// pause is drawn from `[p × (1 − random_factor), p]`. A stream that delivered a response starts
/// the sequence again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first pause.
    pub initial: Duration,
    /// The longest pause.
    pub max: Duration,
    /// How far below its nominal length a pause may fall, 0 to 1.
    pub random_factor: f64,
    /// Randomise pauses, so replicas do not reconnect in step.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: DEFAULT_BACKOFF_INITIAL,
            max: DEFAULT_BACKOFF_MAX,
            random_factor: DEFAULT_BACKOFF_RANDOM_FACTOR,
            jitter: true,
        }
    }
}

/// Why the xDS source cannot start. Each message names its cause.
#[derive(Debug, thiserror::Error)]
pub enum XdsError {
    /// The control plane address is not `host:port`.
    #[error("xDS server '{0}' is not HOST:PORT")]
    Address(String),
    /// A stream header has an invalid name or value.
    #[error("xDS header '{0}' is not a valid gRPC metadata name and text value")]
    Header(String),
    /// A TLS file is missing, unreadable or not usable.
    #[error("xDS TLS: {0}")]
    Tls(String),
}

/// A checked xDS source, ready to run.
pub struct XdsSource {
    connect: connect::Connector,
    settings: XdsSettings,
    load: LoadOptions,
}

impl XdsSource {
    /// Checks `settings` (address, headers, and the TLS files, read once here so that a mistake
    /// stops the start instead of failing every connection attempt); rules compile with `load`.
    pub fn new(settings: XdsSettings, load: LoadOptions) -> Result<Self, XdsError> {
        let connect = connect::Connector::new(&settings)?;
        Ok(Self {
            connect,
            settings,
            load,
        })
    }

    /// Serve before the first rules arrive.
    pub fn force_start(&self) -> bool {
        self.settings.force_start
    }

    /// Runs the stream until `shutdown`: every accepted response goes to `reloader`; a stream
    /// that ends or fails is opened again after a backoff, the rules in force staying.
    pub fn run(
        self,
        reloader: Arc<Reloader>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + use<> {
        client::Client::new(self, reloader, metrics).run(shutdown)
    }
}
