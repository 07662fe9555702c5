//! Where to connect: a `--redis-url` made into redis-rs clients with the settings that go with
//! it: TLS (turned on by the URL or `--redis-tls`; CA, client certificate, hostname checks),
//! credentials that replace the URL's (upstream's `REDIS_AUTH` beats URL credentials), the
//! sentinels' own credentials, and the connect timeout.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, RedisConnectionInfo, RedisError, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::RedisSettings;
use super::link::Conn;
use super::sentinel::Sentinel;
use super::url::{self, Endpoint, Node, Shape};
use crate::store::{StoreError, UrlProblem};

/// Where to connect.
pub enum Target {
    /// One Redis (TCP, TLS or a unix socket).
    Standalone(Client),
    /// A Redis Cluster.
    Cluster(ClusterClient),
    /// The master that Redis Sentinel names (discovered on every connect).
    Sentinel(Sentinel),
}

impl Target {
    /// The target of `settings` (files are read, nothing is connected).
    pub fn build(settings: &RedisSettings) -> Result<Self, StoreError> {
        let endpoint = url::parse(&settings.url)?;
        let tls = Tls::load(settings, &endpoint)?;
        let redis = credentials(
            &endpoint.redis,
            settings.username.as_deref(),
            settings.password.as_deref(),
        );
        let node = NodeTemplate {
            redis,
            tls: tls.clone(),
        };
        let bad = |e: RedisError| StoreError::BadUrl {
            url: url::describe(&settings.url),
            problem: UrlProblem::Refused(e),
        };
        match endpoint.shape {
            Shape::Standalone => node.client(&endpoint.nodes[0]).map(Self::Standalone),
            Shape::Cluster => {
                let nodes = endpoint
                    .nodes
                    .iter()
                    .map(|n| node.info(n))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(bad)?;
                let mut builder = ClusterClient::builder(nodes)
                    .tcp_settings(tcp())
                    .connection_timeout(settings.connect_timeout)
                    .response_timeout(settings.timeout)
                    .retries(1);
                if let Some(tls) = &tls {
                    builder = builder
                        .certs(tls.certificates.clone())
                        .danger_accept_invalid_hostnames(!tls.verify_hostname);
                }
                builder.build().map(Self::Cluster)
            }
            Shape::Sentinel { master } => {
                let sentinel = NodeTemplate {
                    redis: credentials(
                        &RedisConnectionInfo::default(),
                        settings.sentinel_username.as_deref(),
                        settings.sentinel_password.as_deref(),
                    ),
                    tls,
                };
                let sentinels = endpoint
                    .nodes
                    .iter()
                    .map(|n| sentinel.client(n))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(bad)?;
                Ok(Self::Sentinel(Sentinel::new(sentinels, master, node)))
            }
        }
        .map_err(bad)
    }

    /// Whether this is a Redis Cluster (its calls are split by slot and not batched).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Opens one connection, each step bounded by `timeout`.
    pub async fn connect(&self, timeout: Duration) -> Result<Conn, RedisError> {
        match self {
            Self::Standalone(client) => open(client, timeout).await.map(Conn::Single),
            Self::Cluster(client) => within(timeout, client.get_async_connection())
                .await
                .map(Conn::Cluster),
            Self::Sentinel(sentinel) => sentinel.connect_master(timeout).await.map(Conn::Single),
        }
    }
}

/// How to reach any node at an address: its credentials and database, and TLS.
#[derive(Clone)]
pub struct NodeTemplate {
    redis: RedisConnectionInfo,
    tls: Option<Tls>,
}

impl NodeTemplate {
    /// A client for `node`.
    pub fn client(&self, node: &Node) -> Result<Client, RedisError> {
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

    fn info(&self, node: &Node) -> Result<ConnectionInfo, RedisError> {
        let addr = match (node, &self.tls) {
            (Node::Tcp { host, port }, None) => ConnectionAddr::Tcp(host.clone(), *port),
            (Node::Tcp { host, port }, Some(_)) => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            },
            // Refused earlier (Tls::load); a unix socket never has TLS.
            (Node::Unix(path), _) => ConnectionAddr::Unix(path.clone()),
        };
        Ok(addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone())
            .set_tcp_settings(tcp()))
    }
}

/// Opens a multiplexed connection to `client`, bounded by `timeout`.
pub async fn open(client: &Client, timeout: Duration) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
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
fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// `info` with `password` (and `username`, or none: the default user) in place of its
/// credentials when `password` is given; its database and protocol are kept.
fn credentials(
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
    certificates: TlsCertificates,
    verify_hostname: bool,
}

impl Tls {
    /// The TLS of `settings` for `endpoint`: `None` for plaintext; TLS files without TLS and
    /// TLS over a unix socket are refused.
    fn load(settings: &RedisSettings, endpoint: &Endpoint) -> Result<Option<Self>, StoreError> {
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
        if endpoint.nodes.iter().any(|n| matches!(n, Node::Unix(_))) {
            return Err(StoreError::BadUrl {
                url: url::describe(&settings.url),
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

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|error| StoreError::TlsFile {
        flag,
        path: path.to_owned(),
        error: Arc::new(error),
    })
}
