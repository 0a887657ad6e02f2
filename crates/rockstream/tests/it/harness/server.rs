//! A RockStream server as a child process, one per test.
//!
//! [`TestServer::start`] runs `rockstream start --storage <folder> --listen 127.0.0.1:<port>` on a
//! free loopback port, sends its stdout and stderr to a log file, and returns once the server
//! completes a pgwire handshake (bounded by [`STARTUP_TIMEOUT`]). The storage folder is a
//! [`Storage`], shared by `Arc` so that it outlives one server: [`TestServer::kill9`] then
//! [`TestServer::restart`] (or [`TestServer::start_on`] with the same storage) checks recovery.
//!
//! The child is killed when the handle is dropped; if the test is panicking at that point the
//! tail of every server log of this handle is printed, since that is usually the explanation.
//! `ROCKSTREAM_TEST_KEEP_STORAGE=1` keeps the folders (and prints where) for a post-mortem.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, Config};

use super::oracle::{connect, describe_error};

/// How long a server may take from spawn to its first accepted pgwire connection.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to exit after SIGTERM before it is killed.
const GRACEFUL_STOP_TIMEOUT: Duration = Duration::from_secs(15);
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
const LOG_TAIL_LINES: usize = 80;
/// Attempts at finding a port nobody takes between our probe and the server's bind.
const PORT_ATTEMPTS_MAX: usize = 3;

pub const DATABASE_NAME: &str = "default";
pub const USER_NAME: &str = "rockstream_test";

/// A temporary folder holding a server's storage (`storage/`) and its logs (`server-N.log`).
pub struct Storage {
    directory: Option<tempfile::TempDir>,
}

impl Storage {
    pub fn new() -> Arc<Storage> {
        let directory = tempfile::Builder::new()
            .prefix("rockstream-test-")
            .tempdir()
            .expect("cannot create a temporary folder for the server");
        std::fs::create_dir_all(directory.path().join("storage"))
            .expect("cannot create the storage folder");
        Arc::new(Storage {
            directory: Some(directory),
        })
    }

    fn root(&self) -> &Path {
        self.directory
            .as_ref()
            .expect("the directory is present until drop")
            .path()
    }

    /// The `--storage` argument given to the server.
    pub fn storage_path(&self) -> PathBuf {
        self.root().join("storage")
    }

    fn log_path(&self, generation: usize) -> PathBuf {
        self.root().join(format!("server-{generation}.log"))
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if std::env::var_os("ROCKSTREAM_TEST_KEEP_STORAGE").is_some() {
            if let Some(directory) = self.directory.take() {
                eprintln!(
                    "kept server storage and logs at {}",
                    directory.keep().display()
                );
            }
        }
    }
}

/// A running (or killed, awaiting restart) RockStream server.
pub struct TestServer {
    storage: Arc<Storage>,
    child: Option<Child>,
    port: u16,
    /// Counts the processes started over this handle; names the log files.
    generation: usize,
    /// Set when a failure message already carries the log, so Drop does not print it again.
    log_reported: bool,
    /// Extra environment of the processes started from now on.
    environment: Vec<(String, String)>,
    /// Extra arguments of `rockstream start`.
    arguments: Vec<String>,
    /// The password clients log in with (servers started with `--auth password`).
    password: Option<String>,
}

impl TestServer {
    /// Starts a server over fresh, empty storage.
    pub async fn start() -> TestServer {
        TestServer::start_on(Storage::new()).await
    }

    /// Starts a server over `storage`, which may hold the data of a previous server.
    pub async fn start_on(storage: Arc<Storage>) -> TestServer {
        TestServer::start_with(storage, &[]).await
    }

    /// Starts a server over `storage` with extra arguments of `rockstream start`.
    pub async fn start_with(storage: Arc<Storage>, arguments: &[&str]) -> TestServer {
        TestServer::start_as(storage, arguments, None).await
    }

    /// Starts a server over fresh storage that requires passwords (`--auth password` and
    /// `arguments`): its first start gives role `rockstream` `password`, which [`TestServer::config`]
    /// then logs in with.
    pub async fn start_with_password(arguments: &[&str], password: &str) -> TestServer {
        let arguments: Vec<&str> = ["--auth", "password"]
            .into_iter()
            .chain(arguments.iter().copied())
            .collect();
        TestServer::start_as(Storage::new(), &arguments, Some(password)).await
    }

    async fn start_as(
        storage: Arc<Storage>,
        arguments: &[&str],
        password: Option<&str>,
    ) -> TestServer {
        let mut server = TestServer {
            storage,
            child: None,
            port: 0,
            generation: 0,
            log_reported: false,
            environment: password
                .map(|password| ("ROCKSTREAM_PASSWORD".to_string(), password.to_string()))
                .into_iter()
                .collect(),
            arguments: arguments
                .iter()
                .map(|argument| argument.to_string())
                .collect(),
            password: password.map(str::to_string),
        };
        server.spawn_until_ready().await;
        server
    }

    /// Every thread's stack in the server process, by `gdb` (where it is installed), for the
    /// failure message of a server that stopped making progress: a thread blocked on a lock
    /// shows where. `None` without gdb or a live process.
    pub fn thread_stacks(&self) -> Option<String> {
        let pid = self.child.as_ref()?.id();
        let output = std::process::Command::new("timeout")
            .args(["120", "gdb", "-p", &pid.to_string(), "-batch"])
            .args(["-ex", "thread apply all bt"])
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// CPU time the server process has used so far (Linux `/proc`; `None` elsewhere).
    pub fn cpu_time(&self) -> Option<Duration> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) start at state, field 3;
        // utime and stime are fields 14 and 15, in clock ticks (100 per second on Linux).
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
    }

    /// The server process's resident memory now and at its peak, in bytes
    /// (Linux `/proc`: `VmRSS`, `VmHWM`; `None` elsewhere).
    pub fn resident_memory(&self) -> Option<(u64, u64)> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|line| line.starts_with(name))?;
            let kilobytes: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kilobytes * 1024)
        };
        Some((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// Sets (or, with `None`, removes) an environment variable of the servers started from now
    /// on (by [`TestServer::restart`]).
    pub fn set_env(&mut self, name: &str, value: Option<String>) {
        self.environment.retain(|(existing, _)| existing != name);
        if let Some(value) = value {
            self.environment.push((name.to_owned(), value));
        }
    }

    pub fn storage(&self) -> Arc<Storage> {
        Arc::clone(&self.storage)
    }

    /// Connection settings: any user is accepted, the database is `default` (with passwords
    /// required, role `rockstream` and its password).
    pub fn config(&self) -> Config {
        let mut config = Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user(USER_NAME)
            .dbname(DATABASE_NAME)
            .connect_timeout(PROBE_TIMEOUT);
        if let Some(password) = &self.password {
            config.user("rockstream").password(password);
        }
        config
    }

    pub async fn client(&self) -> Client {
        match connect(&self.config()).await {
            Ok(client) => client,
            Err(error) => panic!(
                "cannot connect to the RockStream server on port {}: {}\n{}",
                self.port,
                describe_error(&error),
                self.log_tail()
            ),
        }
    }

    /// Waits up to `timeout` for the server process to exit on its own; true if it did.
    pub async fn wait_for_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.child.as_mut().map(Child::try_wait) {
                None | Some(Ok(Some(_))) => return true,
                _ => crate::harness::sleep(PROBE_INTERVAL).await,
            }
        }
        false
    }

    /// Kills the server with SIGKILL (no shutdown code runs) and reaps it. Idempotent.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` is SIGKILL on Unix. It fails only if the child was already reaped.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server gracefully (SIGTERM, then SIGKILL after a bound) if it runs, and starts a
    /// new one over the same storage.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn_until_ready().await;
    }

    /// SIGTERM, wait up to [`GRACEFUL_STOP_TIMEOUT`], then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // std offers only SIGKILL; `kill` (procps) sends SIGTERM without unsafe code.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + GRACEFUL_STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
        eprintln!(
            "rockstream did not exit within {GRACEFUL_STOP_TIMEOUT:?} of SIGTERM; killing it"
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The current server's whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.storage.log_path(self.generation)).unwrap_or_default()
    }

    /// The last lines of the current server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.storage.log_path(self.generation))
    }

    async fn spawn_until_ready(&mut self) {
        for _ in 0..PORT_ATTEMPTS_MAX {
            self.generation += 1;
            self.port = free_port();
            self.child = Some(self.spawn());
            match self.wait_until_ready().await {
                Ok(()) => return,
                Err(reason) => {
                    self.kill9();
                    let tail = self.log_tail();
                    if tail.contains("in use") {
                        continue; // someone took the port between our probe and the bind
                    }
                    self.log_reported = true;
                    panic!("RockStream server did not start: {reason}\n{tail}");
                }
            }
        }
        self.log_reported = true;
        panic!(
            "RockStream server found no free port in {PORT_ATTEMPTS_MAX} attempts\n{}",
            self.log_tail()
        );
    }

    fn spawn(&self) -> Child {
        let log_path = self.storage.log_path(self.generation);
        let log = File::create(&log_path)
            .unwrap_or_else(|error| panic!("cannot create {}: {error}", log_path.display()));
        let log_for_stderr = log
            .try_clone()
            .expect("cannot duplicate the log file handle");
        let mut command = Command::new(env!("CARGO_BIN_EXE_rockstream"));
        command
            .arg("start")
            .arg("--storage")
            .arg(self.storage.storage_path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--shards")
            .arg(test_shards().to_string())
            .args(&self.arguments)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr);
        command.env("NO_COLOR", "1"); // plain text in the log files
        command.envs(self.environment.iter().map(|(name, value)| (name, value)));
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info");
        }
        command
            .spawn()
            .unwrap_or_else(|error| panic!("cannot spawn the rockstream binary: {error}"))
    }

    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let config = self.config();
        // What our own server logs once it listens on the port: until then a connection could
        // reach another test's server that took the port between our probe and our bind.
        let listening = format!("listen=127.0.0.1:{} ", self.port);
        let mut last_error = String::from("no attempt yet");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("the process exited during startup with {status}"));
                }
            }
            if !self.log().contains(&listening) {
                last_error = "the server has not logged that it listens yet".to_string();
                crate::harness::sleep(PROBE_INTERVAL).await;
                continue;
            }
            match tokio::time::timeout(PROBE_TIMEOUT, connect(&config)).await {
                Ok(Ok(_client)) => return Ok(()),
                Ok(Err(error)) => last_error = describe_error(&error),
                Err(_) => last_error = format!("handshake took over {PROBE_TIMEOUT:?}"),
            }
            crate::harness::sleep(PROBE_INTERVAL).await;
        }
        Err(format!(
            "no pgwire connection within {STARTUP_TIMEOUT:?} on port {}; last error: {last_error}",
            self.port
        ))
    }
}

impl Drop for TestServer {
    /// Kills the server; a test that passed fails here if any of its servers panicked (a panic
    /// anywhere in a server is a bug, even one a connection task survived).
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            if !self.log_reported {
                for generation in 1..=self.generation {
                    eprintln!("{}", log_tail(&self.storage.log_path(generation)));
                }
            }
            return;
        }
        for generation in 1..=self.generation {
            let path = self.storage.log_path(generation);
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(line) = log.lines().position(|line| line.contains(PANIC_MARK)) {
                let lines: Vec<&str> = log.lines().skip(line).take(LOG_TAIL_LINES).collect();
                panic!(
                    "the server panicked ({}, line {}):\n{}",
                    path.display(),
                    line + 1,
                    lines.join("\n")
                );
            }
        }
    }
}

/// What Rust's panic handler writes to the server's stderr (its log).
const PANIC_MARK: &str = " panicked at ";

/// A port that was free a moment ago (the OS picks it; we release it for the server to bind).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("cannot bind a loopback port");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    format!(
        "----- last {} lines of {} -----\n{}\n----- end of server log -----",
        lines.len() - start,
        path.display(),
        lines[start..].join("\n")
    )
}

/// The shard count test servers create their storage with:
/// `ROCKSTREAM_TEST_SHARDS` (the suite runs at 1 and at 4), else 1.
pub fn test_shards() -> u16 {
    std::env::var("ROCKSTREAM_TEST_SHARDS")
        .ok()
        .and_then(|shards| shards.parse().ok())
        .unwrap_or(1)
}
