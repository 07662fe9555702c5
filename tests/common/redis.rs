//! Real `redis-server` processes for tests: one per test on a free loopback port with its own
//! temporary directory, killed when dropped (no shared global Redis, no containers).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::process::poll;

/// A free loopback port (bound then released; the caller binds it next).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// A free port for a cluster node: Redis Cluster listens on the port and on its cluster bus at
/// the port + 10000, so the port must be at most 55535 (Redis refuses to start otherwise) and
/// the bus port free too. Ephemeral ports here reach 60999, so a plain [`free_port`] would make
/// about one node in five fail to start.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// One `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// Extra `redis-cli` arguments (TLS, credentials) for talking to this server.
    cli_args: Vec<String>,
}

impl RedisServer {
    /// Starts a standalone Redis with no persistence and waits until it answers.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// As [`RedisServer::start`], with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_full(|_, _| extra.iter().map(|s| (*s).to_owned()).collect(), &[])
    }

    /// Starts a Redis whose extra arguments `extra(port, dir)` may use its port and directory
    /// (e.g. `--port 0 --tls-port <port>` with files written in `dir` first); `cli_args` are
    /// what `redis-cli` then needs to talk to it.
    pub fn start_full(
        extra: impl FnOnce(u16, &std::path::Path) -> Vec<String>,
        cli_args: &[&str],
    ) -> Self {
        Self::start_at(free_port(), extra, cli_args)
    }

    /// A cluster-enabled Redis (`cluster-config-file nodes.conf` in its directory) with `extra`
    /// arguments, on a port whose cluster bus port is free too.
    pub fn start_cluster_node(extra: &[&str]) -> Self {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ];
        Self::start_at(
            free_cluster_port(),
            |_, _| args.iter().chain(extra).map(|s| (*s).to_owned()).collect(),
            &[],
        )
    }

    fn start_at(
        port: u16,
        extra: impl FnOnce(u16, &std::path::Path) -> Vec<String>,
        cli_args: &[&str],
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = Self {
            child: None,
            port,
            extra: extra(port, dir.path()),
            dir,
            cli_args: cli_args.iter().map(|s| (*s).to_owned()).collect(),
        };
        server.launch();
        server
    }

    /// A Redis listening only on `redis.sock` in a directory of its own (kept while the caller
    /// holds it), with `password`: the server, the directory, the socket's path.
    pub fn start_on_socket(password: &str) -> (Self, tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("redis.sock").display().to_string();
        let redis = Self::start_full(
            |_, _| {
                let args = [
                    "--port",
                    "0",
                    "--unixsocket",
                    &socket,
                    "--unixsocketperm",
                    "700",
                ];
                args.into_iter()
                    .chain(["--requirepass", password])
                    .map(String::from)
                    .collect()
            },
            &["-s", &socket, "-a", password, "--no-auth-warning"],
        );
        (redis, dir, socket)
    }

    /// The server's temporary directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    fn launch(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).expect("redis log");
        let child = Command::new(binary("redis-server"))
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn redis-server (scripts/test installs it)");
        self.child = Some(child);
        poll(Duration::from_secs(10), "redis-server answers PING", || {
            (self.cli(&["PING"]).trim() == "PONG").then_some(())
        });
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server; returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(binary("redis-cli"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.cli_args)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The number of keys in the selected database (`DBSIZE`).
    pub fn dbsize(&self) -> u64 {
        self.cli(&["DBSIZE"]).trim().parse().expect("DBSIZE")
    }

    /// Script runs so far: `EVALSHA` and `EVAL` calls in `INFO commandstats`.
    pub fn script_runs(&self) -> u64 {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// Whether the server is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL: no shutdown courtesy) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the server process.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("redis is running");
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Starts the server again on the same port (empty: nothing was persisted).
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster created with `redis-cli --cluster create`: three masters, with or without a
/// replica each. How a test changes it under load (failovers, a slot migrated) is in
/// `common/cluster.rs`.
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled masters, joins them and waits until the cluster is ok.
    pub fn start() -> Self {
        Self::create(0, 2000)
    }

    /// Three masters and a replica of each (six nodes), with a node timeout of one second, so
    /// a killed master's replica takes over within a few seconds; waits until every replica
    /// follows its master.
    pub fn start_with_replicas() -> Self {
        Self::create(1, 1000)
    }

    /// Three masters with `replicas` replicas each, and `cluster-node-timeout` in ms.
    fn create(replicas: usize, node_timeout_ms: u64) -> Self {
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node(&["--cluster-node-timeout", &timeout]))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new(binary("redis-cli"))
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run redis-cli --cluster create");
        assert!(created.success(), "redis-cli --cluster create failed");
        poll(
            Duration::from_secs(30),
            "cluster_state:ok on every node, every replica in sync",
            || {
                nodes
                    .iter()
                    .all(|n| {
                        let replication = n.cli(&["INFO", "replication"]);
                        n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                            && (replication.contains("role:master")
                                || replication.contains("master_link_status:up"))
                    })
                    .then_some(())
            },
        );
        Self { nodes }
    }

    /// `redis+cluster://127.0.0.1:<port>,...`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

/// A Redis tool: `$REDIS_BIN_DIR/<name>` if set, else `<name>` on PATH.
pub fn binary(name: &str) -> PathBuf {
    std::env::var_os("REDIS_BIN_DIR")
        .map_or_else(|| PathBuf::from(name), |d| PathBuf::from(d).join(name))
}
