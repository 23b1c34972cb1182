//! The servers under test: child processes of this very binary on loopback ports the OS picks,
//! `gatehouse serve` on a temporary database and the bare ceiling server. Each is a real separate
//! process, so its memory can be read from `/proc` and it shares nothing with the load generator.
//! Dropping one kills it by its PID and reaps it.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

use tokio::sync::oneshot;

use super::BenchError;
use crate::config::SyncMode;

/// How long a server may take to say where it listens.
const STARTUP: Duration = Duration::from_secs(30);

/// A server child process.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

/// The database a `gatehouse serve` under test runs on.
pub enum Database<'a> {
    /// A SQLite file, with this durability.
    Sqlite(&'a Path, SyncMode),
    /// PostgreSQL: the file holding the URL (kept out of the process list) and the server key
    /// every replica shares.
    Postgres { url_file: &'a Path, key_file: &'a Path },
}

impl Server {
    /// `gatehouse serve` in open mode on loopback (no tokens file, so no credentials needed).
    /// The bench is one client address that opens every connection at once (the racers connect
    /// before any of them sends), so its address may hold all of them before they send a head.
    pub async fn gatehouse(
        database: Database<'_>,
        max_streams: usize,
        max_connections: usize,
    ) -> Result<Self, BenchError> {
        let max_streams = max_streams.to_string();
        let max_connections = max_connections.to_string();
        let mut command = Self::command();
        command.args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--max-streams",
            &max_streams,
            "--max-connections",
            &max_connections,
            "--max-unauthenticated-per-address",
            &max_connections,
        ]);
        match database {
            Database::Sqlite(db, sync) => command.args(["--sync", sync.as_str(), "--db"]).arg(db),
            Database::Postgres { url_file, key_file } => {
                command.arg("--database-url-file").arg(url_file).arg("--secret-file").arg(key_file)
            }
        };
        Self::start("gatehouse", command).await
    }

    /// The bare axum server (`gatehouse bench-ceiling`).
    pub async fn ceiling() -> Result<Self, BenchError> {
        let mut command = Self::command();
        command.args(["bench-ceiling", "--bind", "127.0.0.1:0"]);
        Self::start("the ceiling server", command).await
    }

    fn command() -> Command {
        let exe = std::env::current_exe().expect("the running binary has a path");
        let mut command = Command::new(exe);
        // Its own default log level: a RUST_LOG meant for the bench must not slow the server.
        command.env_remove("RUST_LOG").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        command
    }

    async fn start(name: &str, mut command: Command) -> Result<Self, BenchError> {
        let mut child = command.spawn().map_err(|e| BenchError(format!("cannot start {name}: {e}")))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = oneshot::channel();
        let label = name.to_owned();
        std::thread::spawn(move || drain(stderr, &label, tx));
        let mut server = Self { child, addr: SocketAddr::from(([127, 0, 0, 1], 0)) };
        match tokio::time::timeout(STARTUP, rx).await {
            Ok(Ok(addr)) => {
                server.addr = addr;
                Ok(server)
            }
            _ => Err(BenchError(format!("{name} did not say where it listens within {STARTUP:?}"))),
        }
    }

    /// The process's resident memory now (`VmRSS` of `/proc/PID/status`).
    pub fn rss_bytes(&self) -> Result<u64, BenchError> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| BenchError("no VmRSS in /proc/PID/status".into()))
    }
}

/// Reads a server's log to its end: line by line until it says where it listens (sent on
/// `listening`), then in large chunks, looked at line by line only when a chunk holds something
/// that may explain odd figures. The bench shares the machine with the servers, and gatehouse logs
/// a line per request: reading those one by one cost the load generator CPU that the ceiling
/// server, which logs nothing, never cost it.
fn drain(stderr: ChildStderr, label: &str, listening: oneshot::Sender<SocketAddr>) {
    let show = |line: &[u8]| eprintln!("  [{label}] {}", String::from_utf8_lossy(line).trim_end());
    let mut reader = BufReader::with_capacity(1 << 16, stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        if !matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let addr = text.split("listening on http://").nth(1).and_then(|rest| rest.split_whitespace().next());
        match addr.and_then(|a| a.parse::<SocketAddr>().ok()) {
            Some(addr) => {
                let _ = listening.send(addr);
                break;
            }
            None if notable(&line) => show(&line),
            None => {}
        }
    }
    let (mut pending, mut chunk) = (Vec::new(), vec![0; 1 << 16]);
    while let Ok(read @ 1..) = reader.read(&mut chunk) {
        pending.extend_from_slice(&chunk[..read]);
        let Some(end) = memchr::memrchr(b'\n', &pending) else { continue };
        let lines = &pending[..end];
        if notable(lines) {
            lines.split(|&b| b == b'\n').filter(|l| notable(l)).for_each(show);
        }
        pending.drain(..=end);
    }
}

/// Whether these log lines (one, or a chunk of many) hold a warning, an error, or a line of the
/// server's own (`gatehouse: …`, as it says before it exits): what may explain odd figures or a
/// server that would not start.
fn notable(lines: &[u8]) -> bool {
    let holds = |needle: &[u8]| memchr::memmem::find(lines, needle).is_some();
    holds(b"WARN") || holds(b"ERROR") || lines.starts_with(b"gatehouse") || holds(b"\ngatehouse")
}

impl Drop for Server {
    fn drop(&mut self) {
        // By PID: the child this bench started, nothing else.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
