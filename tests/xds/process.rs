//! The real binary against the test control plane: a control plane that re-sends a rejected
//! snapshot at once after every NACK (go-control-plane's loop) costs the process next to no CPU.
//! Also the runner the Envoy Gateway tests start the binary with.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::common::process::{BIN, first_line};
use super::common::{eventually, http};
use super::control_plane::ControlPlane;
use super::wire::{MINUTE, config, limited};
use super::{DEADLINE, NODE};

/// A running binary, killed when dropped (printing its log if the test failed).
pub struct Binary {
    child: Child,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Binary {
    /// `sluice serve` on loopback port 0 with `args` and nothing of the test's environment.
    pub fn serve(args: &[&str]) -> Self {
        let mut all = vec![
            "serve",
            "--grpc-addr=127.0.0.1:0",
            "--http-addr=127.0.0.1:0",
        ];
        all.extend_from_slice(args);
        Self::start(Path::new(BIN), &all, &[])
    }

    /// Runs `program` with `args` and exactly `env` (a clean environment otherwise) in a fresh
    /// directory, and waits for its ready line.
    pub fn start(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("log")).expect("log");
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        let ready = first_line(child.stdout.take().expect("stdout"));
        let unbound = "0.0.0.0:0".parse().unwrap();
        let mut binary = Self {
            child,
            grpc_addr: unbound,
            http_addr: unbound,
            dir,
        };
        let line = ready
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_default();
        let addrs: Vec<SocketAddr> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('=')?.1.parse().ok())
            .collect();
        assert!(
            line.starts_with("sluice ready ") && addrs.len() == 2,
            "no ready line: {line:?}"
        );
        (binary.grpc_addr, binary.http_addr) = (addrs[0], addrs[1]);
        binary
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// CPU time (user + system) the process has used so far, in seconds, read by the binary's
    /// own `/proc` accounting (`sluice bench --cpu-ticks`).
    pub fn cpu_seconds(&self) -> f64 {
        let out = Command::new(BIN)
            .args(["bench", "--cpu-ticks", &self.child.id().to_string()])
            .output()
            .expect("sluice bench --cpu-ticks");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ticks: f64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("clock ticks");
        ticks / clock_ticks_per_second()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- sluice log\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn clock_ticks_per_second() -> f64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK")
}

/// A control plane that answers every NACK by re-sending the rejected snapshot at once costs
/// the process next to no CPU: re-sends are recognised without compiling and answered at a
/// doubling pace, so over five seconds of the loop the process uses a sliver of a core and
/// sends a handful of NACKs (an unpaced loop would spin both ends flat out).
#[tokio::test]
async fn a_nack_loop_costs_no_cpu() {
    let cp = ControlPlane::start(None).await;
    let bad = config(
        "edge",
        vec![limited("key", "", 5, 0), limited("k2", "", 1, MINUTE)],
    );
    cp.set_snapshot(NODE, "1", &[bad]);
    let server = cp.addr.to_string();
    // No persistence: its flush task, not xDS, would be most of an idle process's CPU.
    let sluice = Binary::serve(&[
        "--xds-server",
        &server,
        "--xds-node-id",
        NODE,
        "--xds-force-start",
        "--no-persist",
    ]);
    eventually(DEADLINE, "the first NACK", async || !cp.nacks().is_empty()).await;
    let (cpu, nacks, sent) = (sluice.cpu_seconds(), cp.nacks().len(), cp.responses_sent());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu = sluice.cpu_seconds() - cpu;
    let (nacks, sent) = (cp.nacks().len() - nacks, cp.responses_sent() - sent);
    eprintln!("5 s of NACK loop: {cpu:.3} s CPU, {nacks} NACKs, {sent} re-sends");
    assert!(cpu < 0.25, "{cpu} s of CPU in 5 s");
    assert!((1..=5).contains(&nacks), "{nacks} NACKs in 5 s");
    let (status, _) = http(sluice.http_addr, "GET", "/healthcheck", "").await;
    assert_eq!(status, 200, "serving (force start) through the loop");
    assert_eq!(
        sluice.log().matches("rules rejected").count(),
        1,
        "one log line per version"
    );
}
