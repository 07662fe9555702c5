//! The real `sluice` binary as a child process that is killed when dropped, and tool lookup.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `sluice` binary cargo built for these tests.
pub const SLUICE_BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// A file in the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// An external tool: the path in `env_var` if set, else `default` (relative to the repository),
/// which `scripts/test` installs. Panics with how to get it when neither exists.
pub fn tool(env_var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env_var).map_or_else(|| repo_path(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found: run scripts/test (it installs it into {default}) or set {env_var}",
        path.display()
    );
    path
}

/// Polls `probe` until it returns `Some`, or panics with `what` after `limit`.
pub fn poll<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running `sluice serve` on loopback port 0, with its rules in a temporary directory.
pub struct Sluice {
    child: Option<Child>,
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Sluice {
    /// Starts `sluice serve` with one rule file `rules.yaml` holding `yaml`, plus `args`;
    /// returns once it printed its ready line. Counters persist under the temporary directory
    /// (`data/`), never the working directory.
    pub fn start(yaml: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let rules = dir.path().join("rules");
        std::fs::create_dir(&rules).expect("rules dir");
        std::fs::write(rules.join("rules.yaml"), yaml).expect("write rules");
        Self::start_in(dir, args)
    }

    /// Starts `sluice serve` again in the directory of a stopped server (same rules, same
    /// `data/`), plus `args`.
    pub fn restart(mut self, args: &[&str]) -> Self {
        assert!(self.child.is_none(), "stop or kill the server first");
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        Self::start_in(dir, args)
    }

    fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Self {
        let rules = dir.path().join("rules");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("sluice.log"))
            .expect("log file");
        let mut child = Command::new(SLUICE_BIN)
            .args(["serve", "--grpc-addr", "127.0.0.1:0", "--http-addr"])
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(&rules)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read ready line");
        // Keep draining stdout so that a later write can never fail on a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let mut sluice = Self {
            child: Some(child),
            grpc_addr: "0.0.0.0:0".parse().unwrap(),
            http_addr: "0.0.0.0:0".parse().unwrap(),
            dir,
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let addr = |prefix: &str| {
            fields
                .iter()
                .find_map(|f| f.strip_prefix(prefix))
                .and_then(|a| a.parse().ok())
        };
        match (fields.get(..2), addr("grpc="), addr("http=")) {
            (Some(["sluice", "ready"]), Some(grpc), Some(http)) => {
                sluice.grpc_addr = grpc;
                sluice.http_addr = http;
                sluice
            }
            _ => panic!("sluice did not start: {line:?}\n{}", sluice.log()),
        }
    }

    /// The directory `--config` points at.
    pub fn rules_dir(&self) -> PathBuf {
        self.dir.path().join("rules")
    }

    /// The directory `--data-dir` points at.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// What sluice wrote to stderr so far (across restarts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sluice.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("sluice is running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        child.wait().expect("wait for sluice")
    }
}

impl Sluice {
    /// Kills the process with SIGKILL (no shutdown at all) and waits for it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("sluice is running");
        child.kill().expect("kill sluice");
        let _ = child.wait();
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
