//! The OCI image `scripts/image` built, started as a container runtime would start it: the
//! archive unpacked with umoci, its root filesystem entered (unshare: chroot, the image's working
//! directory, its user 65532) with an empty environment, so nothing of the host is reachable;
//! the default command and `/bin/ratelimit` answer RLS v3 and `/healthcheck`.

use crate::common;

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sluice::proto::rate_limit_response::Code;

use common::http1;
use common::process::repo_path;
use common::ratelimit::{ConfigMap, ISTIO_RULES, istio_container, room_in_window};
use common::redis::RedisServer;
use common::{call, connect, header, one_descriptor};

/// Cargo.toml's version: the image's tag and `org.opencontainers.image.version`.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The image's user and group.
const NONROOT: u32 = 65532;

/// How long a start inside the image may take on a slow, busy machine.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// This machine's architecture in OCI's names (the image's libraries are this machine's).
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The archive: `$SLUICE_IMAGE`, else what `scripts/image` writes for this version and machine.
fn archive() -> PathBuf {
    std::env::var_os("SLUICE_IMAGE").map_or_else(
        || {
            repo_path(&format!(
                "target/image/sluice-{VERSION}-{}.oci.tar",
                oci_arch()
            ))
        },
        PathBuf::from,
    )
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The image unpacked: its config (from the OCI layout's index, manifest and config blobs) and
/// its root filesystem (umoci, which applies the layers with their owners and modes).
struct Image {
    dir: tempfile::TempDir,
    rootfs: PathBuf,
    config: Value,
}

impl Image {
    fn unpack() -> Self {
        // /proc/self belongs to the effective user.
        let euid = std::fs::metadata("/proc/self").unwrap().uid();
        assert_eq!(euid, 0, "the image's owners and chroot need root");
        let archive = archive();
        assert!(
            archive.exists(),
            "{} not found: run scripts/image (or set SLUICE_IMAGE)",
            archive.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let layout = dir.path().join("layout");
        std::fs::create_dir(&layout).unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&layout));
        let index = read_json(&layout.join("index.json"));
        let tagged = index["manifests"]
            .as_array()
            .expect("index.json manifests")
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == VERSION)
            .unwrap_or_else(|| panic!("no image tagged {VERSION} in {index}"));
        let blob = |descriptor: &Value| {
            let digest = descriptor["digest"].as_str().expect("a digest");
            let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
            read_json(&layout.join("blobs/sha256").join(hex))
        };
        let manifest = blob(tagged);
        let config = blob(&manifest["config"]);
        let bundle = dir.path().join("bundle");
        run(Command::new("umoci")
            .arg("unpack")
            .arg("--image")
            .arg(format!("{}:{VERSION}", layout.display()))
            .arg(&bundle));
        let rootfs = bundle.join("rootfs").canonicalize().unwrap();
        Self {
            dir,
            rootfs,
            config,
        }
    }

    /// The config's `config` object (user, entrypoint, ports, labels …).
    fn runtime(&self) -> &Value {
        &self.config["config"]
    }

    fn strings(&self, field: &str) -> Vec<String> {
        self.runtime()[field]
            .as_array()
            .unwrap_or_else(|| panic!("no {field} in {}", self.config))
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    }

    /// A path inside the image.
    fn path(&self, inside: &str) -> PathBuf {
        self.rootfs.join(inside.trim_start_matches('/'))
    }

    /// Starts `argv` inside the image as its config says (root directory, working directory,
    /// user), with exactly `env` and nothing else, and waits for its ready line.
    fn start(&self, name: &str, argv: &[String], env: &[(String, String)]) -> Contained {
        let user = self.runtime()["User"].as_str().expect("User");
        let (uid, gid) = user.split_once(':').expect("User is uid:gid");
        let workdir = self.runtime()["WorkingDir"].as_str().expect("WorkingDir");
        let log_path = self.dir.path().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        // unshare with no namespace to unshare: chroot(2) into the root filesystem, chdir to the
        // working directory, setgid (which also drops the supplementary groups), setuid, exec —
        // the steps a runtime takes, without its namespaces (a runtime cannot start here).
        let mut child = Command::new("unshare")
            .arg(format!("--root={}", self.rootfs.display()))
            .arg(format!("--wd={workdir}"))
            .args(["--setgid", gid, "--setuid", uid])
            .args(argv)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn unshare");
        let ready = common::process::first_line(child.stdout.take().unwrap());
        let mut contained = Contained {
            child,
            log: log_path,
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = ready.recv_timeout(READY_LIMIT).unwrap_or_default();
        let port = |prefix: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(prefix))
                .and_then(|addr| addr.rsplit(':').next()?.parse::<u16>().ok())
                .unwrap_or_else(|| panic!("no ready line: {line:?}"))
        };
        // Reached over IPv4 loopback whether it listens on 127.0.0.1 or on `::`.
        contained.grpc.set_port(port("grpc="));
        contained.http.set_port(port("http="));
        contained
    }

    /// What only a process confined to this image can show: its root is the root filesystem,
    /// its executable and every file it has mapped (the loader, each library) lie inside it,
    /// its working directory is the image's, it runs as 65532 with no supplementary group,
    /// and its environment is exactly `env`.
    fn assert_confined(&self, process: &Contained, env: &[(String, String)]) {
        let proc = PathBuf::from(format!("/proc/{}", process.child.id()));
        let link = |name: &str| std::fs::read_link(proc.join(name)).unwrap();
        assert_eq!(link("root"), self.rootfs);
        assert_eq!(link("exe"), self.path("/usr/local/bin/sluice"));
        let workdir = self.runtime()["WorkingDir"].as_str().unwrap();
        assert_eq!(link("cwd"), self.path(workdir));
        let maps = std::fs::read_to_string(proc.join("maps")).unwrap();
        let mapped: std::collections::BTreeSet<&str> = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .filter(|path| path.starts_with('/'))
            .collect();
        assert!(
            mapped.len() >= 3,
            "the binary, the loader and libc: {mapped:?}"
        );
        for path in &mapped {
            assert!(
                Path::new(path).starts_with(&self.rootfs),
                "{path} is not the image's"
            );
        }
        let status = std::fs::read_to_string(proc.join("status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .unwrap()
                .split_whitespace()
                .map(|id| id.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(field("Uid:"), [NONROOT; 4]);
        assert_eq!(field("Gid:"), [NONROOT; 4]);
        assert_eq!(field("Groups:"), Vec::<u32>::new());
        let environ = std::fs::read(proc.join("environ")).unwrap();
        // Sorted: Command passes its variables in an order of its own.
        let environ: std::collections::BTreeSet<String> = environ
            .split(|b| *b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let given: std::collections::BTreeSet<String> =
            env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(environ, given);
    }
}

/// A process started inside the image, killed when dropped (its log printed if the test failed).
struct Contained {
    child: Child,
    log: PathBuf,
    grpc: SocketAddr,
    http: SocketAddr,
}

impl Contained {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- log\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The image's config and files: user 65532, the entrypoint and command, the ports, the
/// working directory (65532's, the rest root's), the labels; `/bin/ratelimit` a link to
/// sluice; no shell anywhere.
#[test]
#[ignore = "needs root, umoci and target/image (scripts/image; scripts/test runs both)"]
fn config_and_files_are_as_documented() {
    let image = Image::unpack();
    let config = image.runtime();
    assert_eq!(image.config["architecture"], oci_arch());
    assert_eq!(image.config["os"], "linux");
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(image.strings("Entrypoint"), ["/usr/local/bin/sluice"]);
    assert_eq!(
        image.strings("Cmd"),
        ["serve", "--config", "/etc/sluice/rules"]
    );
    assert_eq!(config["WorkingDir"], "/var/lib/sluice");
    let mut ports: Vec<&String> = config["ExposedPorts"].as_object().unwrap().keys().collect();
    ports.sort();
    assert_eq!(ports, ["19001/tcp", "8080/tcp", "8081/tcp"]);
    let labels = &config["Labels"];
    let label = |name: &str| labels[format!("org.opencontainers.image.{name}")].clone();
    assert_eq!(label("source"), "https://github.com/sluice-rs/sluice");
    assert_eq!(label("version"), VERSION);
    assert_eq!(label("licenses"), "Apache-2.0");
    let revision = label("revision");
    let revision = revision.as_str().unwrap();
    assert!(
        revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit()),
        "revision {revision:?}"
    );

    assert_eq!(
        std::fs::read_link(image.path("/bin/ratelimit")).unwrap(),
        Path::new("/usr/local/bin/sluice")
    );
    for (inside, owner) in [
        ("/var/lib/sluice", NONROOT),
        ("/var/lib/sluice/data", NONROOT),
        ("/var/lib", 0),
        ("/etc", 0),
        ("/etc/sluice/rules", 0),
        ("/usr/local/bin/sluice", 0),
    ] {
        let meta = std::fs::symlink_metadata(image.path(inside)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (owner, owner), "{inside}");
    }
    assert!(image.path("/etc/ssl/certs/ca-certificates.crt").is_file());
    assert!(image.path("/etc/sluice/rules/example.yaml").is_file());
    let passwd = std::fs::read_to_string(image.path("/etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let mut files = Vec::new();
    let mut dirs = vec![image.rootfs.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    for shell in ["sh", "bash", "dash", "busybox", "ash"] {
        assert!(
            !files.iter().any(|f| f.file_name().unwrap() == shell),
            "a shell in the image: {shell}"
        );
    }
}

/// The image's own command (`sluice serve --config /etc/sluice/rules`, in /var/lib/sluice as
/// 65532) serves the example rules: `/healthcheck` answers, an RLS v3 call on domain `edge` is
/// decided, and the sixth login in 15 minutes is refused. Only the listen addresses are set
/// (`SLUICE_GRPC_ADDR`, `SLUICE_HTTP_ADDR`: free ports, so that parallel tests never collide on
/// 8081/8080); everything else is the image's.
#[test]
#[ignore = "needs root, umoci and target/image (scripts/image; scripts/test runs both)"]
fn default_command_serves_the_example_rules() {
    let image = Image::unpack();
    let argv: Vec<String> = [image.strings("Entrypoint"), image.strings("Cmd")].concat();
    let env = pairs(&[
        ("SLUICE_GRPC_ADDR", "127.0.0.1:0"),
        ("SLUICE_HTTP_ADDR", "127.0.0.1:0"),
    ]);
    let server = image.start("serve", &argv, &env);
    image.assert_confined(&server, &env);

    let health = http1::get(server.http, "/healthcheck", &[]);
    assert_eq!(health.status, 200, "{health:#?}");
    runtime().block_on(async {
        let mut client = connect(server.grpc).await;
        let keyed = one_descriptor("edge", &[("generic_key", "per_api_key"), ("api_key", "k1")]);
        let answer = call(&mut client, keyed).await;
        assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
        assert_eq!(answer.statuses[0].limit_remaining, 59, "{answer:?}");
        let login = || one_descriptor("edge", &[("login_user", "alice")]);
        for _ in 0..5 {
            assert_eq!(
                call(&mut client, login()).await.overall_code,
                Code::Ok as i32
            );
        }
        let refused = call(&mut client, login()).await;
        assert_eq!(refused.overall_code, Code::OverLimit as i32, "{refused:?}");
    });
    assert!(server.log().contains("rules loaded"), "{}", server.log());
}

/// `/bin/ratelimit` with only the environment of Istio's sample Deployment
/// (examples/istio/ratelimit-service.yaml: RUNTIME_ROOT=/data, REDIS_URL, USE_STATSD=false, …;
/// REDIS_URL pointed at this test's Redis, and `PORT=0 GRPC_PORT=0` added so that parallel
/// tests never collide) serves the sample's rules from the ConfigMap mounted inside the image
/// at the sample's path: `/healthcheck` answers `OK`, `/productpage` passes once a minute and
/// is then refused, counting in Redis.
#[test]
#[ignore = "needs root, umoci, target/image and redis-server (scripts/test runs them)"]
fn bin_ratelimit_serves_the_istio_sample_rules() {
    let image = Image::unpack();
    let (command, sample_env, mount) = istio_container();
    assert_eq!(command, ["/bin/ratelimit"]);
    let redis = RedisServer::start();
    let _config_map = ConfigMap::mount(image.path(&mount), &[("config.yaml", ISTIO_RULES)]);
    let mut env: Vec<(String, String)> = sample_env
        .into_iter()
        .map(|(name, value)| match name.as_str() {
            "REDIS_URL" => (name, format!("127.0.0.1:{}", redis.port)),
            _ => (name, value),
        })
        .collect();
    env.extend(pairs(&[("PORT", "0"), ("GRPC_PORT", "0")]));
    let server = image.start("ratelimit", &command, &env);
    image.assert_confined(&server, &env);

    let health = http1::get(server.http, "/healthcheck", &[]);
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));
    let path = |value: &str| one_descriptor("ratelimit", &[("PATH", value)]);
    runtime().block_on(async {
        let mut client = connect(server.grpc).await;
        // It listens before Redis is connected and answers by failure_mode meanwhile, marked.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let answer = call(&mut client, path("/warm-up")).await;
            if header(&answer, "x-ratelimit-mode").is_none() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "Redis never decided");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // One a minute: of the calls Redis decides, the first passes and the next is refused (a
        // call past sluice's 10 ms Redis timeout on a busy machine is answered by failure_mode,
        // marked, and left out).
        room_in_window(60, 10);
        let mut decided = Vec::new();
        for _ in 0..20 {
            let answer = call(&mut client, path("/productpage")).await;
            if header(&answer, "x-ratelimit-mode").is_none() {
                decided.push(answer.overall_code);
            }
            if decided.len() == 2 {
                break;
            }
        }
        assert_eq!(decided, [Code::Ok as i32, Code::OverLimit as i32]);
        let reviews = call(&mut client, path("/reviews")).await;
        assert_eq!(reviews.overall_code, Code::Ok as i32, "100 a minute");
    });
    assert_ne!(redis.cli(&["DBSIZE"]).trim(), "0", "counters live in Redis");
    let log = server.log();
    assert!(!log.contains("not honoured"), "{log}");
}
