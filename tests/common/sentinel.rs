//! Redis Sentinel for tests: a master, a replica and three `redis-sentinel` processes (Debian's
//! `redis-sentinel`, installed by scripts/test) on free loopback ports, every node and every
//! sentinel with a password, killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::process::poll;
use super::redis::{RedisServer, binary, free_port};

/// The master's name in the sentinels' configuration.
pub const MASTER: &str = "mymaster";
/// The data nodes' password (`requirepass`, and `masterauth` for replication both ways).
pub const NODE_PASSWORD: &str = "node-secret";
/// The sentinels' own password.
pub const SENTINEL_PASSWORD: &str = "sentinel-secret";

/// A master, a replica and three sentinels (quorum 2, a master is down after 1 s).
pub struct SentinelSet {
    /// The data nodes: the master first at start (a failover swaps their roles).
    pub nodes: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<SentinelProcess>,
}

impl SentinelSet {
    /// Starts the nodes, waits for replication, starts the sentinels and waits until they
    /// know each other and the replica, so a failover can be authorised.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`SentinelSet::start`], with extra `redis-server` arguments for the first master.
    pub fn start_with(master_args: &[&str]) -> Self {
        let auth = [
            "--requirepass",
            NODE_PASSWORD,
            "--masterauth",
            NODE_PASSWORD,
        ];
        let cli = ["-a", NODE_PASSWORD, "--no-auth-warning"];
        let master = RedisServer::start_full(
            |_, _| {
                strings(&auth)
                    .into_iter()
                    .chain(strings(master_args))
                    .collect()
            },
            &cli,
        );
        let replicaof = ["--replicaof", "127.0.0.1", &master.port.to_string()].map(String::from);
        let replica = RedisServer::start_full(
            |_, _| strings(&auth).into_iter().chain(replicaof).collect(),
            &cli,
        );
        poll(Duration::from_secs(20), "the replica is in sync", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
                .then_some(())
        });
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|_| SentinelProcess::start(master.port))
            .collect();
        poll(
            Duration::from_secs(30),
            "three sentinels see each other and the replica",
            || {
                sentinels
                    .iter()
                    .all(|s| {
                        let master = s.cli(&["SENTINEL", "MASTER", MASTER]);
                        field(&master, "num-other-sentinels") == Some("2")
                            && field(&master, "num-slaves") == Some("1")
                    })
                    .then_some(())
            },
        );
        Self {
            nodes: vec![master, replica],
            sentinels,
        }
    }

    /// `redis+sentinel://:<node password>@127.0.0.1:<port>,…/mymaster` (the sentinels'
    /// password goes to `--redis-sentinel-password`).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!(
            "redis+sentinel://:{NODE_PASSWORD}@{}/{MASTER}",
            hosts.join(",")
        )
    }

    /// The master's port as the first sentinel that answers says.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(|s| {
                let reply = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
                reply.lines().nth(1)?.trim().parse().ok()
            })
            .expect("a sentinel names the master")
    }

    /// The data node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node on that port")
    }

    /// Waits until the replica has every write the master acknowledged (same offset).
    pub fn wait_replicated(&self) {
        let master = self.master_port();
        let offset = |node: &RedisServer, name: &str| {
            field(&node.cli(&["INFO", "replication"]), name).map(str::to_owned)
        };
        poll(Duration::from_secs(10), "the replica caught up", || {
            let written = offset(self.node(master), "master_repl_offset")?;
            let replica = self.nodes.iter().find(|n| n.port != master)?;
            let applied = offset(replica, "master_repl_offset")?;
            (written == applied && offset(replica, "master_link_status")? == "up").then_some(())
        });
    }
}

/// The value of `name` in a `name:value` (INFO) or alternating-lines (SENTINEL MASTER) reply.
fn field<'a>(reply: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = reply.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if let Some(value) = line.strip_prefix(name).and_then(|v| v.strip_prefix(':')) {
            return Some(value);
        }
        if line == name {
            return lines.next();
        }
    }
    None
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// One `redis-sentinel`.
pub struct SentinelProcess {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelProcess {
    /// Starts a sentinel monitoring the master on `master_port` and waits until it answers.
    fn start(master_port: u16) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = dir.path().join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 requirepass {SENTINEL_PASSWORD}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                 sentinel auth-pass {MASTER} {NODE_PASSWORD}\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n",
                dir = dir.path().display()
            ),
        )
        .expect("write sentinel.conf");
        let log = std::fs::File::create(dir.path().join("sentinel.log")).expect("log");
        let child = Command::new(binary("redis-sentinel"))
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn redis-sentinel (scripts/test installs it)");
        let sentinel = Self {
            child,
            port,
            _dir: dir,
        };
        poll(
            Duration::from_secs(10),
            "redis-sentinel answers PING",
            || (sentinel.cli(&["PING"]).trim() == "PONG").then_some(()),
        );
        sentinel
    }

    /// Runs `redis-cli` against this sentinel; returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(binary("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-a", SENTINEL_PASSWORD, "--no-auth-warning"])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
