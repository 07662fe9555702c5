//! The `ratelimit` personality as a child process: the sluice binary behind a symlink named
//! `ratelimit` (as the image's `/bin/ratelimit`), no arguments, only the environment given; and
//! rule directories laid out as kubelet mounts a ConfigMap; Istio's sample container spec and rules.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::process::{BIN, repo_path};
use super::yaml::documents;

/// A directory laid out as kubelet mounts a ConfigMap: `<dir>/..<version>/<files>`, `..data`
/// linking to it, and each file a link through `..data`.
pub struct ConfigMap {
    dir: PathBuf,
    version: u32,
}

impl ConfigMap {
    /// Mounts `files` in `dir`, as kubelet mounts a ConfigMap volume.
    pub fn mount(dir: PathBuf, files: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let mut map = Self { dir, version: 0 };
        map.update(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), map.dir.join(name)).unwrap();
        }
        map
    }

    /// Kubelet's update: a new `..<version>` directory, `..data` swapped to it by a rename,
    /// the old directory removed.
    pub fn update(&mut self, files: &[(&str, &str)]) {
        let old = format!("..v{}", self.version);
        self.version += 1;
        let new = format!("..v{}", self.version);
        std::fs::create_dir(self.dir.join(&new)).unwrap();
        for (name, text) in files {
            std::fs::write(self.dir.join(&new).join(name), text).unwrap();
        }
        let staged = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&new, &staged).unwrap();
        std::fs::rename(&staged, self.dir.join("..data")).unwrap();
        let _ = std::fs::remove_dir_all(self.dir.join(old));
    }
}

/// `ratelimit` running as a child process (killed when dropped; its log printed if the test
/// failed).
pub struct Ratelimit {
    child: Child,
    /// The gRPC address over IPv4 loopback (unused when gRPC is on a unix socket).
    pub grpc: SocketAddr,
    /// The HTTP address over IPv4 loopback.
    pub http: SocketAddr,
    dir: tempfile::TempDir,
}

impl Ratelimit {
    /// Starts `<temp>/ratelimit` (a symlink to the sluice binary) with exactly `env` (plus
    /// PATH) and waits for its ready line.
    pub fn start(env: &[(String, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("ratelimit");
        std::os::unix::fs::symlink(BIN, &binary).unwrap();
        let log = std::fs::File::create(dir.path().join("ratelimit.log")).unwrap();
        let mut child = Command::new(&binary)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn ratelimit");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).unwrap();
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let log = std::fs::read_to_string(dir.path().join("ratelimit.log")).unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, _, grpc, http] = words[..] else {
            panic!("no ready line: {line:?}\n{log}")
        };
        let port = |s: &str| s.rsplit(':').next().unwrap().parse::<u16>().unwrap_or(0);
        // Listening on `::`: reached over IPv4, as Envoy and kubelet do.
        Self {
            child,
            grpc: SocketAddr::from(([127, 0, 0, 1], port(grpc))),
            http: SocketAddr::from(([127, 0, 0, 1], port(http))),
            dir,
        }
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ratelimit.log")).unwrap_or_default()
    }
}

impl Drop for Ratelimit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- ratelimit log\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits, if needed, until at least `room` seconds of the current `window`-second fixed window
/// are left, so that calls meant for one window (the personality counts fixed windows, as
/// envoyproxy/ratelimit) are not split by its edge. No time is asserted: this only avoids the edge.
pub fn room_in_window(window: u64, room: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    let into = now.as_millis() as u64 % (window * 1000);
    let left = window * 1000 - into;
    if left < room * 1000 {
        std::thread::sleep(std::time::Duration::from_millis(left + 50));
    }
}

/// The wall clock in Unix seconds (the personality's windows start at multiples of theirs).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// Istio's sample rules (istio.io rate-limit task), in its ConfigMap's `config.yaml`.
pub const ISTIO_RULES: &str = r#"domain: ratelimit
descriptors:
  - key: PATH
    value: "/productpage"
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;

/// The container of `examples/istio/ratelimit-service.yaml` (Istio's sample Deployment with
/// sluice's image): its command, its variables in order, and where its ConfigMap is mounted.
pub fn istio_container() -> (Vec<String>, Vec<(String, String)>, String) {
    let text = std::fs::read_to_string(repo_path("examples/istio/ratelimit-service.yaml")).unwrap();
    let deployment = documents(&text)
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let strings = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let command = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    let env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (strings(&e["name"]), strings(&e["value"])))
        .collect();
    let mount = strings(&container["volumeMounts"][0]["mountPath"]);
    (command, env, mount)
}
