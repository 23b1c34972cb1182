//! Client subcommands of the `gatehouse` binary, over the HTTP API: `ask` (block until a person
//! answers), `approve` (block until a person decides on a tool call), `form` (block until a
//! person fills in a form), `answer`, `gates`, `tail`, and `mcp` (an MCP server over stdio whose
//! tools ask).
//! Results go to stdout, everything else to stderr.

mod answer;
mod approve;
mod ask;
mod asking;
mod blocking;
mod client;
mod form;
mod gates;
mod mcp;
mod sse;
mod tail;
mod terminal;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::common::backoff::Backoff;

use crate::config::Command;

/// Runs a client subcommand to its exit code.
pub async fn run(command: Command) -> ExitCode {
    match command {
        Command::Ask(args) => ask::run(args).await,
        Command::Approve(args) => approve::run(args).await,
        Command::Form(args) => form::run(args).await,
        Command::Answer(args) => answer::run(args).await,
        Command::Gates(args) => gates::run(args).await,
        Command::Tail(args) => tail::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Serve(_) | Command::Bench(_) | Command::BenchCeiling(_) => {
            unreachable!("main runs the server and the bench itself")
        }
    }
}

/// The API the client flags name; on failure, says why (as `gatehouse COMMAND: …`) and gives
/// `Err`.
fn connect(command: &str, flags: &crate::config::ClientArgs) -> Result<client::Api, ()> {
    client::Api::new(&flags.url, flags.token.as_deref()).map_err(|message| eprintln!("gatehouse {command}: {message}"))
}

/// Prints one line of results and flushes, so pipes see it at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not an error worth a panic.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// A JSON value as one line of compact JSON: exact for a script, with the characters that could
/// drive a terminal escaped (as JSON escapes, the same value) on one.
fn say_json(value: &serde_json::Value) {
    let json = value.to_string();
    if std::io::stdout().is_terminal() { say(&terminal::escape_json(&json)) } else { say(&json) }
}

/// Backoff between retries of the server: at random up to 250 ms, 500 ms, … at most 5 s.
fn server_backoff() -> Backoff {
    Backoff::new(Duration::from_millis(250), Duration::from_secs(5))
}

/// The first eight characters of an id, for tables (`gatehouse answer` takes them as a prefix).
fn short(id: &str) -> &str {
    id.char_indices().nth(8).map_or(id, |(end, _)| &id[..end])
}
