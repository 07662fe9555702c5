//! `--redis-url`: which Redis to reach, read into an [`Endpoint`] (nothing is connected here).
//!
//! Forms: `redis://` and `rediss://` (one Redis; TLS), `redis+unix:///path` or `unix:///path` (a
//! unix socket; `?db=&user=&pass=`), `redis+cluster://` and `rediss+cluster://` (seed list),
//! `redis+sentinel://` and `rediss+sentinel://` (sentinels, then `/<master name>[/db]`), and
//! envoyproxy/ratelimit's bare forms: `host:port` (TCP) and `/path/to.sock` (unix socket).
//! Credentials (`user:password@`) are the data nodes'; they are passed to Redis and never shown:
//! `describe_url` (settings.rs) is what logs print.

use std::path::PathBuf;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use crate::store::redis::settings::describe_url;
use crate::store::{StoreError, UrlProblem};

/// The default Redis port, for a host written without one.
const DEFAULT_PORT: u16 = 6379;

/// How the nodes of an [`Endpoint`] are organised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// One Redis (TCP or unix socket).
    Standalone,
    /// A Redis Cluster: the nodes are seeds.
    Cluster,
    /// Redis Sentinel: the nodes are sentinels watching the master named here.
    Sentinel {
        /// The master's name in the sentinels' configuration.
        master: String,
    },
}

/// One address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAddr {
    /// `host:port` over TCP.
    Tcp {
        /// Host name or IP address.
        host: String,
        /// Port.
        port: u16,
    },
    /// A unix socket.
    Unix(PathBuf),
}

/// A parsed `--redis-url`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Standalone, cluster or sentinel.
    pub shape: Shape,
    /// Whether the URL asks for TLS (`rediss…`).
    pub tls: bool,
    /// The node, seeds or sentinels.
    pub nodes: Vec<NodeAddr>,
    /// Credentials and database for the data nodes (never the sentinels').
    pub redis: RedisConnectionInfo,
}

/// Parses `url`.
pub fn parse(url: &str) -> Result<Endpoint, StoreError> {
    let invalid = |problem| StoreError::BadUrl {
        url: describe_url(url),
        problem,
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bare(url).map_err(invalid);
    };
    if url.contains('#') {
        return Err(invalid(UrlProblem::Fragment));
    }
    let (shape, tls) = match scheme {
        "redis" | "rediss" | "redis+unix" | "unix" => {
            return single(url, scheme == "rediss").map_err(invalid);
        }
        "redis+cluster" | "rediss+cluster" => (Shape::Cluster, scheme.starts_with("rediss")),
        "redis+sentinel" | "rediss+sentinel" => {
            // The master's name is the path's first segment; nothing else may follow but a db.
            (
                Shape::Sentinel {
                    master: String::new(),
                },
                scheme.starts_with("rediss"),
            )
        }
        other => return Err(invalid(UrlProblem::UnknownScheme(other.to_owned()))),
    };
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, rest),
    };
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let nodes = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(tcp_node)
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    if nodes.is_empty() {
        return Err(invalid(UrlProblem::NoNodes));
    }
    let (shape, db) = match shape {
        Shape::Sentinel { .. } => {
            let (master, db) = path.split_once('/').unwrap_or((path, ""));
            if master.is_empty() {
                return Err(invalid(UrlProblem::NoMaster));
            }
            let master = master.to_owned();
            (Shape::Sentinel { master }, db)
        }
        // A cluster has no databases: anything after the hosts is refused by redis-rs below.
        shape => (shape, path),
    };
    let redis = credentials(auth, db).map_err(invalid)?;
    Ok(Endpoint {
        shape,
        tls,
        nodes,
        redis,
    })
}

/// `redis://`, `rediss://`, `redis+unix://`, `unix://`: redis-rs reads them (percent-decoded
/// credentials, `/db`; a socket's `?db=&user=&pass=`). A TCP URL's `?db=&username=&password=`
/// (which envoyproxy/ratelimit's Redis client reads, and redis-rs would ignore) replace the path's
/// and userinfo's; any other parameter is refused rather than ignored.
fn single(url: &str, tls: bool) -> Result<Endpoint, UrlProblem> {
    let info = url.into_connection_info().map_err(UrlProblem::Refused)?;
    let mut redis = info.redis_settings().clone();
    let node = match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            NodeAddr::Tcp {
                host: host.clone(),
                port: *port,
            }
        }
        ConnectionAddr::Unix(path) => NodeAddr::Unix(path.clone()),
        other => return Err(UrlProblem::BadNode(format!("{other:?}"))),
    };
    let tcp = matches!(node, NodeAddr::Tcp { .. });
    let query = url.split_once('?').map_or("", |(_, query)| query);
    for (name, value) in ::url::form_urlencoded::parse(query.as_bytes()) {
        redis = match (tcp, name.as_ref()) {
            (true, "db") => redis.set_db(value.parse().map_err(|_| {
                UrlProblem::Parameter(format!("db={value} is not a database number"))
            })?),
            (true, "username") => redis.set_username(value),
            (true, "password") => redis.set_password(value),
            // Read by redis-rs above.
            (_, "protocol") | (false, "db" | "user" | "pass") => redis,
            (_, other) => {
                return Err(UrlProblem::Parameter(format!(
                    "unknown parameter '{other}'"
                )));
            }
        };
    }
    Ok(Endpoint {
        shape: Shape::Standalone,
        tls,
        nodes: vec![node],
        redis,
    })
}

/// envoyproxy/ratelimit's `REDIS_URL` forms without a scheme: `/path/to.sock` or `host:port`.
fn bare(url: &str) -> Result<Endpoint, UrlProblem> {
    let node = if url.starts_with('/') {
        NodeAddr::Unix(PathBuf::from(url))
    } else if url.contains(['@', '/', ',']) {
        // Credentials, a database or a list need a scheme to say what they mean.
        return Err(UrlProblem::NoScheme);
    } else {
        tcp_node(url)?
    };
    Ok(Endpoint {
        shape: Shape::Standalone,
        tls: false,
        nodes: vec![node],
        redis: RedisConnectionInfo::default(),
    })
}

/// `host:port`, `host` (port 6379) or `[v6]:port`.
fn tcp_node(text: &str) -> Result<NodeAddr, UrlProblem> {
    let bad = || UrlProblem::BadNode(text.to_owned());
    let (host, port) = match text.rsplit_once(':') {
        // An IPv6 address without brackets has colons but no port.
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            (host, port.parse::<u16>().map_err(|_| bad())?)
        }
        _ => (text, DEFAULT_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(['[', ']', ' ']) {
        return Err(bad());
    }
    Ok(NodeAddr::Tcp {
        host: host.to_owned(),
        port,
    })
}

/// The data nodes' credentials (`user:password`, percent-encoded) and database (`db`, may be
/// empty), read by redis-rs as it reads a `redis://` URL.
fn credentials(auth: Option<&str>, db: &str) -> Result<RedisConnectionInfo, UrlProblem> {
    let auth = auth.map_or(String::new(), |a| format!("{a}@"));
    let info = format!("redis://{auth}localhost/{db}")
        .into_connection_info()
        .map_err(UrlProblem::Refused)?;
    Ok(info.redis_settings().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> NodeAddr {
        NodeAddr::Tcp {
            host: host.into(),
            port,
        }
    }

    fn problem(url: &str) -> String {
        parse(url).err().map(|e| e.to_string()).unwrap_or_default()
    }

    /// Credentials never appear in what is logged.
    #[test]
    fn credentials_are_hidden() {
        assert_eq!(
            describe_url("redis://app:s3cret@db:6379/0"),
            "redis://***@db:6379/0"
        );
        assert_eq!(
            describe_url("rediss+cluster://u:p@a:1,b:2"),
            "rediss+cluster://***@a:1,b:2"
        );
        assert_eq!(
            describe_url("redis+unix:///run/redis.sock?db=2&pass=hunter2"),
            "redis+unix:///run/redis.sock?***"
        );
        assert_eq!(describe_url("redis://db:6379"), "redis://db:6379");
        let err = problem("mysql://u:hunter2@x");
        assert!(
            !err.contains("hunter2") && err.contains("unknown scheme"),
            "{err}"
        );
    }

    /// One Redis: TCP with credentials and a database, TLS, and envoyproxy/ratelimit's bare
    /// `host:port`.
    #[test]
    fn standalone_forms() {
        let e = parse("redis://app:p%40ss@127.0.0.1:6380/2").unwrap();
        assert_eq!((e.shape, e.tls), (Shape::Standalone, false));
        assert_eq!(e.nodes, vec![tcp("127.0.0.1", 6380)]);
        assert_eq!(
            (e.redis.username(), e.redis.password(), e.redis.db()),
            (Some("app"), Some("p@ss"), 2)
        );
        assert!(parse("rediss://h:1").unwrap().tls);
        let bare = parse("redis:6379").unwrap();
        assert_eq!((bare.nodes, bare.tls), (vec![tcp("redis", 6379)], false));
        assert_eq!(parse("redis").unwrap().nodes, vec![tcp("redis", 6379)]);
        assert_eq!(parse("[::1]:7000").unwrap().nodes, vec![tcp("::1", 7000)]);
        assert!(problem("redis:notaport").contains("'redis:notaport'"));
        // envoyproxy/ratelimit's query parameters replace the path's and userinfo's; others are
        // refused.
        let query = parse("redis://u:p@h:1/2?db=5&username=app&password=s%26cret").unwrap();
        assert_eq!(
            (
                query.redis.username(),
                query.redis.password(),
                query.redis.db()
            ),
            (Some("app"), Some("s&cret"), 5)
        );
        assert!(problem("redis://h:1?db=x").contains("db=x"));
        assert!(problem("redis://h:1?timeout=3").contains("unknown parameter 'timeout'"));
        assert!(problem("redis+unix:///s.sock?username=u").contains("'username'"));
        assert!(problem("u:p@redis:6379").contains("no scheme"));
    }

    /// Unix sockets: `redis+unix://` and `unix://` with db and credentials, or a bare path.
    #[test]
    fn unix_sockets() {
        let e = parse("redis+unix:///run/redis.sock?db=3&user=app&pass=pw").unwrap();
        assert_eq!(e.nodes, vec![NodeAddr::Unix("/run/redis.sock".into())]);
        assert_eq!(
            (e.redis.username(), e.redis.password(), e.redis.db()),
            (Some("app"), Some("pw"), 3)
        );
        assert_eq!(
            parse("unix:///tmp/r.sock").unwrap().nodes,
            vec![NodeAddr::Unix("/tmp/r.sock".into())]
        );
        let bare = parse("/var/run/nutcracker/ratelimit.sock").unwrap();
        assert_eq!(
            bare.nodes,
            vec![NodeAddr::Unix("/var/run/nutcracker/ratelimit.sock".into())]
        );
    }

    /// Cluster seeds share the URL's credentials.
    #[test]
    fn cluster_seeds() {
        let e = parse("redis+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001").unwrap();
        assert_eq!(e.shape, Shape::Cluster);
        assert_eq!(
            e.nodes,
            vec![tcp("127.0.0.1", 7000), tcp("127.0.0.1", 7001)]
        );
        assert_eq!(e.redis.password(), Some("p"));
        assert!(parse("rediss+cluster://a:1").unwrap().tls);
        assert!(problem("redis+cluster://").contains("no nodes"));
    }

    /// Sentinels, the master's name, its database and credentials.
    #[test]
    fn sentinel_forms() {
        let e = parse("redis+sentinel://app:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster/4").unwrap();
        assert_eq!(
            e.shape,
            Shape::Sentinel {
                master: "mymaster".into()
            }
        );
        assert_eq!(
            e.nodes,
            vec![tcp("10.0.0.1", 26379), tcp("10.0.0.2", 26379)]
        );
        assert_eq!(
            (e.redis.username(), e.redis.password(), e.redis.db()),
            (Some("app"), Some("pw"), 4)
        );
        let tls = parse("rediss+sentinel://s:26379/m").unwrap();
        assert!(tls.tls && tls.redis.db() == 0);
        assert!(problem("redis+sentinel://s:26379").contains("master"));
        assert!(problem("redis+sentinel://s:26379/").contains("master"));
        assert!(problem("redis+sentinel:///m").contains("no nodes"));
        assert!(problem("redis+sentinel://s:1/m/x").contains("invalid redis url"));
    }

    /// `#insecure` (redis-rs: no certificate checks at all) is refused, not silently dropped.
    #[test]
    fn fragments_are_refused() {
        assert!(problem("rediss://h:1/#insecure").contains("fragment"));
    }
}
