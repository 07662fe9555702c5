//! How to reach one Redis node at an address: TLS material (read and checked once at
//! start), credentials, TCP settings, and connects bounded by a timeout. Used for standalone
//! Redis, cluster seeds, sentinels and the masters they name.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, RedisConnectionInfo, RedisError, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::url::{Endpoint, NodeAddr};
use crate::files::MAX_PEM_BYTES;
use crate::store::redis::settings::{RedisSettings, describe_url};
use crate::store::{StoreError, UrlProblem};

/// How to reach any node at an address: its credentials and database, and TLS.
#[derive(Clone)]
pub struct NodeTemplate {
    redis: RedisConnectionInfo,
    tls: Option<Tls>,
}

impl NodeTemplate {
    /// Nodes reached with `redis`'s credentials and database, over `tls` if any.
    pub fn new(redis: RedisConnectionInfo, tls: Option<Tls>) -> Self {
        Self { redis, tls }
    }

    /// A client for `node`.
    pub fn client(&self, node: &NodeAddr) -> Result<Client, RedisError> {
        let info = self.info(node)?;
        let Some(tls) = &self.tls else {
            return Client::open(info);
        };
        let client = Client::build_with_tls(info, tls.certificates.clone())?;
        if tls.verify_hostname {
            return Ok(client);
        }
        // The chain is still verified against the CA; only the name check is skipped.
        let info = client.get_connection_info().clone();
        let mut addr = info.addr().clone();
        addr.set_danger_accept_invalid_hostnames(true);
        Client::open(info.set_addr(addr))
    }

    /// The redis-rs address of `node`.
    pub fn info(&self, node: &NodeAddr) -> Result<ConnectionInfo, RedisError> {
        let addr = match (node, &self.tls) {
            (NodeAddr::Tcp { host, port }, None) => ConnectionAddr::Tcp(host.clone(), *port),
            (NodeAddr::Tcp { host, port }, Some(_)) => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            },
            // Refused earlier (Tls::load); a unix socket never has TLS.
            (NodeAddr::Unix(path), _) => ConnectionAddr::Unix(path.clone()),
        };
        Ok(addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone())
            .set_tcp_settings(tcp()))
    }
}

/// Opens a multiplexed connection to `client`, bounded by `timeout`. Its replies have no
/// bound of redis-rs's own (a timer per command, 500 ms unless set): every command sluice
/// sends is bounded by its caller (a script run by its calls' `--redis-timeout`, batch.rs;
/// the others by `within`).
pub async fn open(client: &Client, timeout: Duration) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None);
    within(
        timeout,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
}

/// `step`, or a timeout error after `timeout`.
pub async fn within<T>(
    timeout: Duration,
    step: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    match tokio::time::timeout(timeout, step).await {
        Ok(done) => done,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        ))),
    }
}

/// TCP_NODELAY: calls are small writes pipelined on few connections; Nagle's algorithm would
/// hold each one back until the previous one is acknowledged.
pub fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// `info` with `password` (and `username`, or none: the default user) in place of its
/// credentials when `password` is given; its database and protocol are kept.
pub fn credentials(
    info: &RedisConnectionInfo,
    username: Option<&str>,
    password: Option<&str>,
) -> RedisConnectionInfo {
    let Some(password) = password else {
        return info.clone();
    };
    let replaced = RedisConnectionInfo::default()
        .set_db(info.db())
        .set_protocol(info.protocol())
        .set_password(password);
    match username {
        Some(user) => replaced.set_username(user),
        None => replaced,
    }
}

/// TLS material, read once at start.
#[derive(Clone)]
pub struct Tls {
    /// The CA to trust (else the system's roots) and the client certificate, as PEM.
    pub certificates: TlsCertificates,
    /// Whether the server's name is checked (the chain always is).
    pub verify_hostname: bool,
}

impl Tls {
    /// The TLS of `settings` for `endpoint`: `None` for plaintext; TLS files without TLS and
    /// TLS over a unix socket are refused.
    pub fn load(settings: &RedisSettings, endpoint: &Endpoint) -> Result<Option<Self>, StoreError> {
        let files = settings.ca.is_some()
            || settings.client_cert.is_some()
            || settings.client_key.is_some()
            || settings.tls_skip_hostname_verification;
        if !(endpoint.tls || settings.tls) {
            if files {
                return Err(StoreError::Conflict(
                    "--redis-ca, --redis-client-cert, --redis-client-key and \
                     --redis-tls-skip-hostname-verification need TLS (a rediss… URL or --redis-tls)",
                ));
            }
            return Ok(None);
        }
        if endpoint
            .nodes
            .iter()
            .any(|n| matches!(n, NodeAddr::Unix(_)))
        {
            return Err(StoreError::BadUrl {
                url: describe_url(&settings.url),
                problem: UrlProblem::TlsOverUnix,
            });
        }
        let client_tls = match (&settings.client_cert, &settings.client_key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: certificates("--redis-client-cert", cert)?,
                client_key: private_key(key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(StoreError::Conflict(
                    "--redis-client-cert and --redis-client-key go together",
                ));
            }
        };
        let root_cert = match &settings.ca {
            Some(ca) => Some(certificates("--redis-ca", ca)?),
            None => None,
        };
        Ok(Some(Self {
            certificates: TlsCertificates {
                client_tls,
                root_cert,
            },
            verify_hostname: !settings.tls_skip_hostname_verification,
        }))
    }
}

// The PEM files are checked at start, so a wrong file stops the start instead of failing
// every connect later.

/// The PEM certificates of `path` (at least one).
fn certificates(flag: &'static str, path: &Path) -> Result<Vec<u8>, StoreError> {
    let pem = read(flag, path)?;
    let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
    match parsed {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(StoreError::Tls(format!(
            "{flag} {} holds no PEM certificate",
            path.display()
        ))),
    }
}

/// The PEM private key of `path` (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<Vec<u8>, StoreError> {
    let flag = "--redis-client-key";
    let pem = read(flag, path)?;
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(_) => Ok(pem),
        Err(_) => Err(StoreError::Tls(format!(
            "{flag} {} holds no PEM private key",
            path.display()
        ))),
    }
}

/// A regular file of at most [`MAX_PEM_BYTES`] (a FIFO or a device is refused, never read).
fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, StoreError> {
    crate::files::read(path, MAX_PEM_BYTES).map_err(|error| StoreError::TlsFile {
        flag,
        path: path.to_owned(),
        error: Arc::new(error),
    })
}
