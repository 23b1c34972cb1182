//! The command line: `gatehouse serve` and its flags, each with a `GATEHOUSE_*` environment
//! fallback.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::store::{BeforeCommit, Durability};

/// gatehouse: an AI agent asks a person a question and gets back exactly one answer.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gate server on an embedded SQLite file.
    Serve(ServeArgs),
}

/// Flags of `gatehouse serve`.
#[derive(Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default; other addresses need authentication (later).
    #[arg(long, env = "GATEHOUSE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// SQLite database file (created if missing). `<db>.lock` beside it keeps a second server away.
    #[arg(long, env = "GATEHOUSE_DB", default_value = "gatehouse.db")]
    pub db: PathBuf,

    /// `full`: an acknowledged answer survives power loss. `normal`: faster, but the last commits
    /// may roll back after power loss or an OS crash (a process crash alone loses nothing).
    #[arg(long, env = "GATEHOUSE_SYNC", value_enum, default_value_t = Durability::Full)]
    pub sync: Durability,

    /// Largest accepted request body: bytes, or with a KiB/MiB suffix.
    #[arg(long, env = "GATEHOUSE_MAX_BODY", default_value = "1MiB", value_parser = parse_size)]
    pub max_body: usize,

    /// Test hooks; never set from the command line.
    #[arg(skip)]
    pub hooks: TestHooks,
}

impl fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeArgs")
            .field("bind", &self.bind)
            .field("db", &self.db)
            .field("sync", &self.sync)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

impl ServeArgs {
    /// The defaults with another database and address (for tests and embedding).
    pub fn new(db: impl Into<PathBuf>, bind: SocketAddr) -> Self {
        let mut args = Cli::parse_from(["gatehouse", "serve"]);
        let Command::Serve(serve) = &mut args.command;
        serve.db = db.into();
        serve.bind = bind;
        serve.clone()
    }
}

/// Hooks that only tests set.
#[derive(Clone, Default)]
pub struct TestHooks {
    /// Called on the writer thread just before every COMMIT (the commit barrier, spec §13).
    pub before_commit: Option<BeforeCommit>,
}

/// `1048576`, `512KiB`, `1MiB` (K and M are read as KiB and MiB).
fn parse_size(raw: &str) -> Result<usize, String> {
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let n: usize = digits.parse().map_err(|_| format!("{raw:?} is not a size like 1048576 or 1MiB"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" | "kB" | "KB" => 1024,
        "M" | "MiB" | "MB" => 1024 * 1024,
        other => return Err(format!("unknown size unit {other:?} (use KiB or MiB)")),
    };
    match n.checked_mul(factor) {
        Some(0) | None => Err(format!("{raw:?} is not a usable size")),
        Some(size) => Ok(size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1GiB").is_err());
        assert!(parse_size("lots").is_err());
    }
}
