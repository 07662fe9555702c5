//! Changing a Redis Cluster under a test's feet: which node serves a key's slot, a master
//! killed and its replica promoted, a manual `CLUSTER FAILOVER`, one slot migrated by hand
//! (`SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT … NODE`). Every wait polls the
//! cluster's own view; none sleeps a fixed time.

use std::time::Duration;

use redis::{Cmd, FromRedisValue};

use super::process::poll;
use super::redis::RedisCluster;

/// How long a change may take to show on every node (a failover takes a few seconds with a
/// one-second node timeout; a loaded machine takes longer).
const SETTLE: Duration = Duration::from_secs(30);

/// One node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
pub struct NodeView {
    /// The node's id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its flags (`myself,master`, `slave`, `master,fail`, …).
    pub flags: String,
    /// The id of the master it replicates (replicas only).
    pub master: Option<String>,
    /// The slot ranges it serves (masters only; migration markers left out).
    pub slots: Vec<(u16, u16)>,
}

impl NodeView {
    /// Whether it is a master the cluster does not consider failed.
    pub fn is_live_master(&self) -> bool {
        self.flags.contains("master") && !self.flags.contains("fail")
    }

    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// Reads one `CLUSTER NODES` reply.
fn parse_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .expect("a node address");
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            NodeView {
                id: fields[0].to_owned(),
                port,
                flags: fields[2].to_owned(),
                master: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            }
        })
        .collect()
}

impl RedisCluster {
    /// Runs `cmd` on node `node` (an index into `nodes`).
    pub fn query<T: FromRedisValue>(&self, node: usize, cmd: &Cmd) -> redis::RedisResult<T> {
        let url = self.nodes[node].url();
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        cmd.query(&mut conn)
    }

    /// Runs `cmd` on node `node`; panics on an error.
    pub fn run<T: FromRedisValue>(&self, node: usize, cmd: &Cmd) -> T {
        self.query(node, cmd)
            .unwrap_or_else(|e| panic!("{cmd:?} on node {node}: {e}"))
    }

    /// The index of the node on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// The indices of the nodes still running.
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running())
            .collect()
    }

    /// The cluster as node `node` sees it.
    pub fn view_from(&self, node: usize) -> Vec<NodeView> {
        let text: String = self.run(node, redis::cmd("CLUSTER").arg("NODES"));
        parse_nodes(&text)
    }

    /// The cluster as the first running node sees it.
    pub fn view(&self) -> Vec<NodeView> {
        self.view_from(self.running()[0])
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &[u8]) -> u16 {
        self.run(
            self.running()[0],
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
        )
    }

    /// The index of the master serving `slot`.
    pub fn master_of(&self, slot: u16) -> usize {
        let view = self.view();
        let master = view
            .iter()
            .find(|n| n.is_live_master() && n.serves(slot))
            .expect("a master serves the slot");
        self.index_of(master.port)
    }

    /// The index of a replica of the master at index `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let view = self.view();
        let port = self.nodes[master].port;
        let id = &view.iter().find(|n| n.port == port).expect("the master").id;
        let replica = view
            .iter()
            .find(|n| n.master.as_ref() == Some(id) && !n.flags.contains("fail"))
            .expect("the master has a replica");
        self.index_of(replica.port)
    }

    /// Every key node `node` holds (`KEYS *`: the test clusters are small).
    pub fn keys_on(&self, node: usize) -> Vec<Vec<u8>> {
        self.run(node, redis::cmd("KEYS").arg("*"))
    }

    /// The number of keys in `slot` on node `node`.
    pub fn keys_in_slot(&self, node: usize, slot: u16) -> u64 {
        self.run(node, redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot))
    }

    /// Waits until every running node reports `cluster_state:ok` and sees `master` (an index)
    /// as a live master serving `slot`, with no node marked failed but the ones killed.
    pub fn wait_settled(&self, master: usize, slot: u16) {
        let port = self.nodes[master].port;
        poll(SETTLE, "every node sees the new master, cluster ok", || {
            self.running()
                .into_iter()
                .all(|i| {
                    let info: String = self
                        .query(i, redis::cmd("CLUSTER").arg("INFO"))
                        .unwrap_or_default();
                    let view = self
                        .query::<String>(i, redis::cmd("CLUSTER").arg("NODES"))
                        .map(|t| parse_nodes(&t))
                        .unwrap_or_default();
                    info.contains("cluster_state:ok")
                        && view
                            .iter()
                            .any(|n| n.port == port && n.is_live_master() && n.serves(slot))
                })
                .then_some(())
        });
    }

    /// `CONFIG SET name value` on every running node.
    pub fn set_config(&self, name: &str, value: &str) {
        for node in self.running() {
            let reply: String =
                self.run(node, redis::cmd("CONFIG").arg("SET").arg(name).arg(value));
            assert_eq!(reply, "OK");
        }
    }

    /// SIGKILLs the master at index `master`.
    pub fn kill(&mut self, master: usize) {
        self.nodes[master].kill();
    }

    /// `CLUSTER FAILOVER` on the replica at index `replica` (its master agrees and hands over
    /// with no write lost).
    pub fn manual_failover(&self, replica: usize) {
        let reply: String = self.run(replica, redis::cmd("CLUSTER").arg("FAILOVER"));
        assert_eq!(reply, "OK");
    }

    /// Starts moving `slot` from node `from` to node `to`: `to` imports it, `from` migrates
    /// it. From now on `from` answers `ASK` for the slot's keys it no longer holds.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let set = |node: usize, state: &str, id: &str| {
            let reply: String = self.run(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            );
            assert_eq!(reply, "OK");
        };
        // The target first, as the cluster specification orders it: `from` may send ASK as
        // soon as it migrates, and `to` must accept it by then.
        set(to, "IMPORTING", &from_id);
        set(from, "MIGRATING", &to_id);
    }

    /// Moves up to `at_most` keys of `slot` from node `from` to node `to` in one `MIGRATE`
    /// (atomic on `from`); returns how many moved (0 once none is left). A family's keys
    /// moved by different calls are split meanwhile: a script on them gets `TRYAGAIN`.
    pub fn move_keys(&self, slot: u16, from: usize, to: usize, at_most: usize) -> usize {
        let keys: Vec<Vec<u8>> = self.run(
            from,
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(at_most),
        );
        if keys.is_empty() {
            return 0;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.nodes[to].port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS");
        for key in &keys {
            migrate.arg(key.as_slice());
        }
        let reply: String = self.run(from, &migrate);
        assert_eq!(reply, "OK");
        keys.len()
    }

    /// How many error replies of `kind` (`ASK`, `MOVED`, `TRYAGAIN`) node `node` has sent
    /// (`INFO errorstats`).
    pub fn errors_sent(&self, node: usize, kind: &str) -> u64 {
        let info: String = self.run(node, redis::cmd("INFO").arg("errorstats"));
        let prefix = format!("errorstat_{kind}:count=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Ends the move of `slot` to node `to`: every master is told `to` serves it (the target
    /// first, then the source, then the others), and every node sees it so.
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize) {
        let to_id = self.id_of(to);
        let view = self.view();
        let others = view
            .iter()
            .filter(|n| n.is_live_master())
            .map(|n| self.index_of(n.port))
            .filter(|&i| i != from && i != to);
        for node in [to, from].into_iter().chain(others) {
            let reply: String = self.run(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id),
            );
            assert_eq!(reply, "OK");
        }
        self.wait_settled(to, slot);
    }

    /// The node id of the node at index `node`.
    fn id_of(&self, node: usize) -> String {
        self.run(node, redis::cmd("CLUSTER").arg("MYID"))
    }
}
