//! Redis Sentinel: every new connection asks the sentinels where the master is, then checks
//! with `ROLE` on that very connection that it reached a master.
//!
//! This follows Redis's guidelines for sentinel clients: ask the sentinels in turn (starting
//! with the one that answered last) with `SENTINEL GET-MASTER-ADDR-BY-NAME`, and verify the
//! role, since a sentinel cut off from the others may still name a demoted master. A failover
//! is followed two ways: the sentinels announce the new master on `+switch-master`, and
//! `failover.rs` then renews the pool at once (an old master that is still up would otherwise
//! take writes, lost when it is demoted, until the sentinels get round to demoting it, ten
//! seconds later in the tests); and when the old master's connections break or answer
//! `READONLY`, the pool drops them all (`pool.rs`) and reconnects here. (redis-rs has a
//! sentinel client, but it asks only the first sentinel that answers, reads `SENTINEL
//! MASTERS` and opens an extra connection for the role check.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{Client, ErrorKind, Msg, RedisError, Value};

use super::node::{NodeTemplate, open, within};
use super::url::NodeAddr;

/// The channel on which sentinels announce a failover's new master.
pub const SWITCH_MASTER: &str = "+switch-master";

/// The sentinels and how to reach the master they name.
pub struct Sentinel {
    sentinels: Vec<Client>,
    /// The sentinel to ask first: the one that answered last.
    preferred: AtomicUsize,
    master: String,
    node: NodeTemplate,
}

impl Sentinel {
    /// Sentinels (at least one) watching `master`, reached as `node` says.
    pub fn new(sentinels: Vec<Client>, master: String, node: NodeTemplate) -> Self {
        Self {
            sentinels,
            preferred: AtomicUsize::new(0),
            master,
            node,
        }
    }

    /// A connection to the current master; each step (a sentinel's answer, the connect, the
    /// role check) is bounded by `timeout`.
    pub async fn connect_master(
        &self,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.sentinels.len() {
            let at = (first + i) % self.sentinels.len();
            match self.through(&self.sentinels[at], timeout).await {
                Ok(conn) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(conn);
                }
                Err(e) => {
                    tracing::debug!(error = %e, sentinel = at, "no master through this sentinel");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| not_found("no sentinel configured".into())))
    }

    /// A subscription to `+switch-master` on the first sentinel that accepts one (starting
    /// with the one that answered last), each step bounded by `timeout`.
    pub async fn subscribe(&self, timeout: Duration) -> Result<PubSub, RedisError> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.sentinels.len() {
            let sentinel = &self.sentinels[(first + i) % self.sentinels.len()];
            let subscribed = async {
                let mut pubsub = within(timeout, sentinel.get_async_pubsub()).await?;
                within(timeout, pubsub.subscribe(SWITCH_MASTER)).await?;
                Ok(pubsub)
            };
            match subscribed.await {
                Ok(pubsub) => return Ok(pubsub),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| not_found("no sentinel configured".into())))
    }

    /// Whether `message` (on `+switch-master`: `<name> <old ip> <old port> <new ip> <new
    /// port>`) announces a new master for this master name.
    pub fn announces_ours(&self, message: &Msg) -> bool {
        let payload: String = message.get_payload().unwrap_or_default();
        payload.split_whitespace().next() == Some(self.master.as_str())
    }

    /// Asks `sentinel` for the master's address, connects to it and checks its role.
    async fn through(
        &self,
        sentinel: &Client,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let mut ask = open(sentinel, timeout).await?;
        let mut query = redis::cmd("SENTINEL");
        query.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master);
        let addr: Option<(String, u16)> = within(timeout, query.query_async(&mut ask)).await?;
        let Some((host, port)) = addr else {
            return Err(not_found(format!(
                "the sentinel knows no master named '{}'",
                self.master
            )));
        };
        let client = self.node.client(&NodeAddr::Tcp {
            host: host.clone(),
            port,
        })?;
        let mut conn = open(&client, timeout).await?;
        let role: Value = within(timeout, redis::cmd("ROLE").query_async(&mut conn)).await?;
        if is_master(&role) {
            Ok(conn)
        } else {
            Err(not_found(format!(
                "{host}:{port}, named master '{}' by the sentinel, is not a master (yet)",
                self.master
            )))
        }
    }
}

/// Whether a `ROLE` reply is a master's (`["master", offset, replicas]`).
fn is_master(role: &Value) -> bool {
    let Value::Array(items) = role else {
        return false;
    };
    match items.first() {
        Some(Value::BulkString(role)) => role == b"master",
        Some(Value::SimpleString(role)) => role == "master",
        _ => false,
    }
}

/// A transient "no master now" error (a failover may be in progress).
fn not_found(detail: String) -> RedisError {
    RedisError::from((
        ErrorKind::MasterNameNotFoundBySentinel,
        "no master reachable through the sentinels",
        detail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a master's `ROLE` reply counts as a master.
    #[test]
    fn role_replies() {
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(42),
            Value::Array(vec![]),
        ]);
        let replica = Value::Array(vec![
            Value::BulkString(b"slave".to_vec()),
            Value::BulkString(b"127.0.0.1".to_vec()),
        ]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }

    /// "No master now" is an error worth retrying (a failover in progress).
    #[test]
    fn no_master_is_transient() {
        let e = not_found("x".into());
        assert!(!matches!(e.retry_method(), redis::RetryMethod::NoRetry));
    }
}
