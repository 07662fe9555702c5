//! The real `sluice` binary: [`BIN`], `sluice serve` on port 0 as a child process killed when
//! dropped ([`Serve`] → [`Sluice`]), one-shot subcommands ([`run`]), temporary files, tool
//! lookup and polling.
//!
//! This file stands alone (no `super::`): `benches/embedded_store.rs` includes it too.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `sluice` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// The binary `sluice serve` runs: [`BIN`], or another build named by `SLUICE_TEST_BIN` (to run
/// the black-box tests against an earlier release and see them fail).
pub fn under_test() -> PathBuf {
    std::env::var_os("SLUICE_TEST_BIN").map_or_else(|| PathBuf::from(BIN), PathBuf::from)
}

/// How long `sluice serve` may take to print its ready line on a slow, busy machine.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// A file in the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// A new temporary directory holding `files` as `(name, contents)`.
pub fn temp_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).expect("write a temporary file");
    }
    dir
}

/// Makes a FIFO (named pipe) at `path`, as a hostile or unlucky operator might leave one.
pub fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
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

/// `sluice <args>` with no `SLUICE_*` variable of the test's environment: a developer's own
/// settings never reach the binary under test.
fn command<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Command {
    let mut command = Command::new(under_test());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SLUICE_") {
            command.env_remove(name);
        }
    }
    command.args(args);
    command
}

/// How a run of the binary ended and what it printed.
#[derive(Debug)]
pub struct Output {
    /// The exit status.
    pub status: ExitStatus,
    /// Standard output, as text.
    pub stdout: String,
    /// Standard error, as text.
    pub stderr: String,
}

impl Output {
    fn of(mut command: Command) -> Self {
        let out = command.output().expect("run sluice");
        Self {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The exit code (`None` when a signal ended the process).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Standard output, after asserting that the run succeeded (else a panic with stderr).
    pub fn stdout_ok(&self) -> &str {
        assert!(self.status.success(), "{}: {}", self.status, self.stderr);
        &self.stdout
    }
}

/// Runs a one-shot subcommand, `sluice <args>` (`check`, `simulate`, `bench`, `--help` …), to
/// its end.
pub fn run<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    Output::of(command(args))
}

/// Runs `sluice check --config <config>`.
pub fn check(config: &Path) -> Output {
    Output::of(command([
        "check".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
    ]))
}

/// How to start `sluice serve --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0`: rules, data
/// directory, extra arguments, environment, working directory.
///
/// Everything lives in one temporary directory: `rules/` (the `--config`, unless
/// [`Serve::config`]), `data/` (the `--data-dir`, unless [`Serve::data_dir`]) and `sluice.log`
/// (stderr, kept across restarts). It is the working directory too, unless
/// [`Serve::current_dir`], so nothing is ever written into the repository.
#[derive(Debug)]
pub struct Serve {
    dir: tempfile::TempDir,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    grpc_addr: Option<String>,
    wrapper: Vec<OsString>,
}

impl Default for Serve {
    fn default() -> Self {
        Self::new()
    }
}

impl Serve {
    /// `sluice serve` with an empty `rules/` directory.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("rules")).expect("rules dir");
        Self {
            dir,
            config: None,
            data_dir: None,
            args: Vec::new(),
            env: Vec::new(),
            current_dir: None,
            grpc_addr: None,
            wrapper: Vec::new(),
        }
    }

    /// Runs the binary through `program args… sluice serve …` (e.g. `prlimit --nofile=N:N --`,
    /// which sets a limit before the server starts and becomes it: the pid is the server's).
    pub fn wrapped<S: AsRef<OsStr>>(
        mut self,
        program: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        self.wrapper = std::iter::once(OsString::from(program))
            .chain(args.into_iter().map(|a| a.as_ref().to_owned()))
            .collect();
        self
    }

    /// Writes `yaml` as `rules/rules.yaml`.
    pub fn rules(self, yaml: &str) -> Self {
        std::fs::write(self.rules_dir().join("rules.yaml"), yaml).expect("write rules");
        self
    }

    /// `--config path` instead of `rules/`.
    pub fn config(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// `--data-dir path` instead of `data/`.
    pub fn data_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(path.into());
        self
    }

    /// More arguments after the ones above.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable (the test's own `SLUICE_*` variables are never passed on).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Runs in `dir` instead of the temporary directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Serves gRPC on `addr` instead of a free port (a restart then comes back on it).
    pub fn grpc_addr(mut self, addr: SocketAddr) -> Self {
        self.grpc_addr = Some(addr.to_string());
        self
    }

    /// The temporary `rules/` directory.
    fn rules_dir(&self) -> PathBuf {
        self.dir.path().join("rules")
    }

    /// The `sluice serve` command line, for a test that sets up its own stdio.
    pub fn command(&self) -> Command {
        let mut command = command([
            "serve",
            "--grpc-addr",
            self.grpc_addr.as_deref().unwrap_or("127.0.0.1:0"),
            "--http-addr",
            "127.0.0.1:0",
        ]);
        if let [program, args @ ..] = &self.wrapper[..] {
            let mut wrapped = Command::new(program);
            wrapped
                .args(args)
                .arg(command.get_program())
                .args(command.get_args());
            for (name, value) in command.get_envs() {
                match value {
                    Some(value) => wrapped.env(name, value),
                    None => wrapped.env_remove(name),
                };
            }
            command = wrapped;
        }
        command
            .arg("--config")
            .arg(self.config.clone().unwrap_or_else(|| self.rules_dir()))
            .arg("--data-dir")
            .arg(
                self.data_dir
                    .clone()
                    .unwrap_or_else(|| self.dir.path().join("data")),
            )
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.current_dir.as_deref().unwrap_or(self.dir.path()));
        command
    }

    /// Runs the server to its end and returns how it ended: for a start that must fail.
    pub fn output(self) -> Output {
        Output::of(self.command())
    }

    /// Starts the server and returns once it printed its ready line (a panic with its log if
    /// it exits first or stays silent for a minute).
    pub fn start(self) -> Sluice {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("sluice.log"))
            .expect("log file");
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        let ready = first_line(child.stdout.take().expect("stdout"));
        let unbound: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let mut sluice = Sluice {
            child: Some(child),
            grpc_addr: unbound,
            http_addr: unbound,
            ready_line: String::new(),
            spec: self,
        };
        // A panic from here on drops `sluice`, which prints its log and kills the child.
        sluice.ready_line = ready
            .recv_timeout(READY_LIMIT)
            .unwrap_or_else(|_| panic!("sluice printed no line within {READY_LIMIT:?}"));
        let (grpc, http) = parse_ready_line(&sluice.ready_line)
            .unwrap_or_else(|| panic!("sluice did not start: {:?}", sluice.ready_line));
        sluice.grpc_addr = grpc;
        sluice.http_addr = http;
        sluice
    }
}

/// The first line a child writes on `stdout`, sent on the returned channel once read; the rest
/// is drained so that a later write can never fail on a closed pipe.
pub fn first_line(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (line, first) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut read = String::new();
        let _ = stdout.read_line(&mut read);
        let _ = line.send(read);
        std::io::copy(&mut stdout, &mut std::io::sink())
    });
    first
}

/// The addresses of `sluice ready grpc=<addr> http=<addr>`, if `line` is exactly that.
fn parse_ready_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["sluice", "ready", grpc, http] => Some((
            grpc.strip_prefix("grpc=")?.parse().ok()?,
            http.strip_prefix("http=")?.parse().ok()?,
        )),
        _ => None,
    }
}

/// A running `sluice serve` (see [`Serve`]), killed when dropped; dropped by a failing test, it
/// prints its log.
#[derive(Debug)]
pub struct Sluice {
    child: Option<Child>,
    /// The bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address.
    pub http_addr: SocketAddr,
    /// The first line it printed: `sluice ready grpc=<addr> http=<addr>`.
    pub ready_line: String,
    spec: Serve,
}

impl Sluice {
    /// Starts `sluice serve` with one rule file `rules.yaml` holding `yaml`, plus `args`.
    pub fn start(yaml: &str, args: &[&str]) -> Self {
        Serve::new().rules(yaml).args(args).start()
    }

    /// Starts `sluice serve` again as it was started (same directory, rules, `data/`, log and
    /// environment) but with `args` as the extra arguments.
    pub fn restart(mut self, args: &[&str]) -> Self {
        assert!(self.child.is_none(), "stop or kill the server first");
        // `self` is dropped next; it keeps only an empty placeholder directory.
        let mut spec = std::mem::take(&mut self.spec);
        spec.args = args.iter().map(OsString::from).collect();
        spec.start()
    }

    /// The directory `--config` points at.
    pub fn rules_dir(&self) -> PathBuf {
        self.spec
            .config
            .clone()
            .unwrap_or_else(|| self.spec.rules_dir())
    }

    /// The directory `--data-dir` points at.
    pub fn data_dir(&self) -> PathBuf {
        self.spec
            .data_dir
            .clone()
            .unwrap_or_else(|| self.spec.dir.path().join("data"))
    }

    /// What sluice wrote to stderr so far (across restarts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.spec.dir.path().join("sluice.log")).unwrap_or_default()
    }

    /// The log once it holds `what`: sluice's log writer does not block, so a line may reach the
    /// file a moment after what caused it (fails after 10 s).
    pub fn await_log(&self, what: &str) -> String {
        poll(Duration::from_secs(10), what, || {
            let log = self.log();
            log.contains(what).then_some(log)
        })
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

    /// Sends SIGTERM without waiting for the process to exit.
    pub fn terminate(&self) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.expect("run kill").success(), "kill -TERM failed");
    }

    /// How the process exited, if it did within `limit` (polled).
    pub fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().expect("sluice is running");
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("wait") {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("sluice is running").id()
    }

    /// Kills the process with SIGKILL (no shutdown at all) and waits for it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("sluice is running");
        child.kill().expect("kill sluice");
        let _ = child.wait();
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- sluice log\n{}", self.log());
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
