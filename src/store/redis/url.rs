//! `--redis-url`: `redis://`, `rediss://` (TLS), and `redis+cluster://` / `rediss+cluster://`
//! with a comma-separated seed list. Credentials (`user:password@`) are passed to Redis and
//! never shown: [`describe`] is what logs print.

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::io::tcp::TcpSettings;
use redis::{Client, IntoConnectionInfo, TlsCertificates};

use super::link::{CONNECT_TIMEOUT, Target};
use crate::store::{StoreError, UrlProblem};

/// Parses `url` into a connection target. `ca` (PEM) replaces the system roots for TLS.
pub fn parse(url: &str, timeout: Duration, ca: Option<&[u8]>) -> Result<Target, StoreError> {
    let invalid = |problem| StoreError::BadUrl {
        url: describe(url),
        problem,
    };
    let bad = |e: redis::RedisError| invalid(UrlProblem::Refused(e));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid(UrlProblem::NoScheme))?;
    match scheme {
        "redis" | "rediss" => {
            let info = url
                .into_connection_info()
                .map_err(bad)?
                .set_tcp_settings(tcp());
            match ca {
                Some(ca) => Client::build_with_tls(info, certificates(ca)),
                None => Client::open(info),
            }
            .map(Target::Standalone)
            .map_err(bad)
        }
        "redis+cluster" | "rediss+cluster" => {
            let node_scheme = scheme.trim_end_matches("+cluster");
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), rest),
            };
            let nodes = hosts
                .trim_end_matches('/')
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("{node_scheme}://{auth}{h}").into_connection_info())
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
            if nodes.is_empty() {
                return Err(invalid(UrlProblem::NoNodes));
            }
            let mut builder = ClusterClient::builder(nodes)
                .tcp_settings(tcp())
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(timeout)
                .retries(1);
            if let Some(ca) = ca {
                builder = builder.certs(certificates(ca));
            }
            builder.build().map(Target::Cluster).map_err(bad)
        }
        other => Err(invalid(UrlProblem::UnknownScheme(other.to_owned()))),
    }
}

/// TCP_NODELAY: calls are small writes pipelined on few connections; Nagle's algorithm would
/// hold each one back until the previous one is acknowledged.
fn tcp() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// Trust `ca` (PEM) instead of the system roots; no client certificate.
fn certificates(ca: &[u8]) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// `url` with any credentials replaced by `***`, for logs and errors.
pub fn describe(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
            None => url.to_owned(),
        },
        None => match url.rsplit_once('@') {
            Some((_, hosts)) => format!("***@{hosts}"),
            None => url.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(10);

    /// Credentials never appear in what is logged.
    #[test]
    fn credentials_are_hidden() {
        assert_eq!(
            describe("redis://app:s3cret@db:6379/0"),
            "redis://***@db:6379/0"
        );
        assert_eq!(
            describe("rediss+cluster://u:p@a:1,b:2"),
            "rediss+cluster://***@a:1,b:2"
        );
        assert_eq!(describe("redis://db:6379"), "redis://db:6379");
        let err = parse("mysql://u:hunter2@x", T, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            !err.contains("hunter2") && err.contains("unknown scheme"),
            "{err}"
        );
    }

    /// Standalone, TLS and cluster URLs parse into the right target.
    #[test]
    fn schemes() {
        assert!(matches!(
            parse("redis://127.0.0.1:6379", T, None),
            Ok(Target::Standalone(_))
        ));
        assert!(matches!(
            parse("rediss://u:p@host:6380/1", T, None),
            Ok(Target::Standalone(_))
        ));
        assert!(matches!(
            parse("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001", T, None),
            Ok(Target::Cluster(_))
        ));
        assert!(parse("redis+cluster://", T, None).is_err());
        assert!(parse("localhost:6379", T, None).is_err());
    }
}
