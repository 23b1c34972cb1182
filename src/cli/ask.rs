//! `gatehouse ask`: open a gate, say on stderr how to answer it, wait for its answer (riding out
//! server restarts), print it, and acknowledge the loop command it produced. Exit codes (spec
//! §11): 0 answered, 2 withdrawn, 3 timed out without a default (after withdrawing the gate), 130,
//! 143 and 129 on SIGINT, SIGTERM and SIGHUP (after withdrawing), 1 anything else.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::client::{Api, ClientError, Reply};
use super::terminal::{Lines, escape, escape_json};
use super::{say, server_backoff};
use crate::config::AskArgs;

const WITHDRAWN: u8 = 2;
const TIMED_OUT: u8 = 3;
/// How long a signal that arrives while the gate is being opened waits for the open to finish:
/// the request may have reached the server, and a gate nobody waits for must be withdrawn.
const OPEN_GRACE: Duration = Duration::from_secs(5);
/// How much of the question the "waiting" line quotes.
const QUOTED_CHARS: usize = 80;

/// Where a question ended.
enum Ending {
    /// Answered (by a person or by the default): the final view.
    Answered(Value),
    /// Withdrawn by its owner or abandoned.
    Withdrawn(Value),
    /// The client deadline passed without an answer (and without a default).
    TimedOut,
    /// The server refused to show the gate (a revoked token, a gate it no longer has): waiting
    /// longer would not help.
    Refused(String),
}

/// The gate this `ask` waits for.
struct Asked {
    api: Api,
    session: String,
    loop_id: String,
    gate: String,
}

pub async fn run(args: AskArgs) -> ExitCode {
    // First of all: from here on a stop signal withdraws the gate instead of killing the process.
    let mut signals = match StopSignals::watch() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("gatehouse ask: cannot watch for SIGINT, SIGTERM and SIGHUP: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(api) = super::connect("ask", &args.client) else { return ExitCode::FAILURE };
    let fresh = || uuid::Uuid::new_v4().to_string();
    let session = args.session.clone().unwrap_or_else(fresh);
    let loop_id = args.loop_id.clone().unwrap_or_else(fresh);
    let tool = args.tool_execution_id.clone().unwrap_or_else(fresh);

    let asked = |gate: &str| Asked {
        api: api.clone(),
        session: session.clone(),
        loop_id: loop_id.clone(),
        gate: gate.to_owned(),
    };
    let opening = open(&api, &session, &loop_id, &tool, &args);
    tokio::pin!(opening);
    let opened = tokio::select! {
        opened = &mut opening => opened,
        stop = signals.recv() => {
            // The open may already have reached the server: let it finish (briefly, and unless
            // a second signal insists) so the gate it made can be withdrawn.
            let finished = tokio::select! {
                finished = tokio::time::timeout(OPEN_GRACE, &mut opening) => finished.ok(),
                _ = signals.recv() => None,
            };
            match finished {
                Some(Ok(view)) => asked(gate_of(&view)).stop(stop, &mut signals).await,
                Some(Err(_)) => eprintln!("gatehouse ask: {} before a gate opened", stop.name()),
                None => eprintln!(
                    "gatehouse ask: {} while opening its gate; if it opened, it is still open (session {session})",
                    stop.name()
                ),
            }
            return ExitCode::from(stop.exit_code());
        }
    };
    let view = match opened {
        Ok(view) => view,
        Err(message) => {
            eprintln!("gatehouse ask: {message}");
            return ExitCode::FAILURE;
        }
    };
    let asked = asked(gate_of(&view));
    if view["state"] == "open" {
        announce(&asked.gate, args.question.as_str());
    }
    // With a default the server answers at the deadline; without one, the deadline is ours.
    let deadline = args.timeout.filter(|_| args.default.is_none()).map(|t| Instant::now() + t);

    let ending = tokio::select! {
        ending = asked.wait(deadline) => ending,
        stop = signals.recv() => {
            asked.stop(stop, &mut signals).await;
            return ExitCode::from(stop.exit_code());
        }
    };
    match ending {
        Ending::Answered(view) => {
            if args.json {
                print_json(view, &asked.gate);
            } else {
                print_answer(view["answer"].as_str().unwrap_or_default());
            }
            if let Err(message) = asked.ack().await {
                eprintln!("gatehouse ask: answered, but could not acknowledge the command: {message}");
            }
            ExitCode::SUCCESS
        }
        Ending::Withdrawn(view) => {
            let reason = escape(view["resolution"]["reason"].as_str().unwrap_or("closed"), Lines::Escape).into_owned();
            if args.json {
                print_json(view, &asked.gate);
            }
            eprintln!("gatehouse ask: the gate was withdrawn ({reason})");
            ExitCode::from(WITHDRAWN)
        }
        Ending::TimedOut => {
            eprintln!("gatehouse ask: no answer in time; the gate was withdrawn");
            ExitCode::from(TIMED_OUT)
        }
        Ending::Refused(message) => {
            eprintln!(
                "gatehouse ask: stopped waiting: {message}. Gate {} may still be open; asking again with the \
                 same --session, --loop and --id finds it",
                asked.gate
            );
            ExitCode::FAILURE
        }
    }
}

fn gate_of(view: &Value) -> &str {
    view["gate"]["id"].as_str().unwrap_or_default()
}

/// The one line that tells the person at the terminal which gate waits, and how to answer it
/// from another shell.
fn announce(gate: &str, question: &str) {
    let mut quoted: String = question.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < question.len() {
        quoted.push('…');
    }
    let quoted = escape(&quoted, Lines::Escape);
    eprintln!(
        "gatehouse ask: gate {gate} waits for an answer to \"{quoted}\"; answer it with: gatehouse answer {gate} <answer>"
    );
}

/// The answer alone: its exact bytes for a script (`$(gatehouse ask …)` gets what the person
/// typed), escaped for a terminal, where it could carry control sequences.
fn print_answer(answer: &str) {
    if std::io::stdout().is_terminal() { say(&escape(answer, Lines::Keep)) } else { say(answer) }
}

/// The final view as JSON, with the gate id at the top level for scripts.
fn print_json(mut view: Value, gate: &str) {
    view["gate_id"] = json!(gate);
    let json = view.to_string();
    if std::io::stdout().is_terminal() { say(&escape_json(&json)) } else { say(&json) }
}

/// Opens the gate. The ids make it idempotent, so transient trouble is simply retried.
async fn open(api: &Api, session: &str, loop_id: &str, tool: &str, args: &AskArgs) -> Result<Value, String> {
    let mut body = json!({"loop_id": loop_id, "tool_execution_id": tool, "question": args.question});
    if !args.choices.is_empty() {
        body["choices"] = json!(args.choices);
        body["allow_other"] = json!(args.allow_other);
    }
    if let Some(timeout) = args.timeout {
        let nanos = i64::try_from(timeout.as_nanos()).map_err(|_| "--timeout is too long".to_owned())?;
        body["response_policy"] = match &args.default {
            Some(default) => json!({"timeout": nanos, "on_timeout": "respond",
                                    "response": {"action": "answer", "values": {"answer": default}}}),
            None => json!({"timeout": nanos, "on_timeout": "wait"}),
        };
    }
    let path = format!("/v1/sessions/{session}/gates");
    const TRIES: usize = 5;
    let mut backoff = server_backoff();
    for attempt in 1..=TRIES {
        match api.post(&path, Some(&body), None).await {
            Ok(reply) if reply.ok() => return Ok(reply.body),
            // No wait after the last try: it would only delay the error.
            Ok(reply) if reply.retryable() && attempt < TRIES => backoff.wait().await,
            Ok(reply) if reply.retryable() => break,
            Ok(reply) => return Err(reply.message()),
            // Not reachable at all: say so now rather than wait on a typo in the URL.
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("gatehouse stayed unavailable; try again later".into())
}

impl Asked {
    fn gate_path(&self) -> String {
        format!("/v1/sessions/{}/gates/{}", self.session, self.gate)
    }

    /// Long-polls until the gate leaves `open` or the deadline passes. Connection trouble and
    /// restarts are waited out: the gate is durable, so the answer will still be there.
    async fn wait(&self, deadline: Option<Instant>) -> Ending {
        let mut backoff = server_backoff();
        let mut reported = false;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return self.time_out().await;
            }
            let seconds = left.map_or(30, |l| l.as_secs().min(30));
            if seconds == 0 {
                // Less than a second left: the long-poll counts whole seconds.
                tokio::time::sleep(left.unwrap_or_default()).await;
                continue;
            }
            match self.api.get(&format!("{}/wait?timeout={seconds}", self.gate_path())).await {
                Ok(reply) if reply.ok() => {
                    backoff.reset();
                    if let Some(ending) = ending_of(reply.body) {
                        return ending;
                    }
                }
                Ok(reply) if !reply.retryable() => return Ending::Refused(reply.message()),
                outcome => {
                    if !reported {
                        let why = outcome.map_or_else(|e| e.to_string(), |r| r.message());
                        eprintln!("gatehouse ask: {why}; still waiting");
                        reported = true;
                    }
                    backoff.wait().await;
                }
            }
        }
    }

    /// The deadline passed: withdraw the gate, unless an answer won the race meanwhile.
    async fn time_out(&self) -> Ending {
        match self.close().await {
            Ok(reply) if reply.status == 409 => {
                // Answered or closed just now: that result stands.
                match self.api.get(&self.gate_path()).await.ok().and_then(|r| ending_of(r.body)) {
                    Some(ending) => ending,
                    None => Ending::TimedOut,
                }
            }
            _ => Ending::TimedOut,
        }
    }

    /// A stop signal came: withdraw the gate, and say so. A second signal gives up at once (the
    /// withdrawal may be retrying against a server that is down).
    async fn stop(&self, stop: Stop, signals: &mut StopSignals) {
        let withdrawn = tokio::select! {
            withdrawn = self.withdraw() => withdrawn,
            again = signals.recv() => Err(format!("{} again", again.name())),
        };
        match withdrawn {
            Ok(()) => eprintln!("gatehouse ask: {}; gate {} withdrawn", stop.name(), self.gate),
            Err(message) => {
                eprintln!("gatehouse ask: {}, and could not withdraw gate {}: {message}", stop.name(), self.gate);
            }
        }
    }

    /// Withdraws the gate as `abandoned`, retrying briefly.
    async fn withdraw(&self) -> Result<(), String> {
        match self.close().await {
            Ok(reply) if reply.ok() || reply.status == 409 => Ok(()),
            Ok(reply) => Err(reply.message()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn close(&self) -> Result<Reply, ClientError> {
        let body = json!({"reason": "abandoned"});
        let mut backoff = server_backoff();
        const TRIES: usize = 4;
        let mut last = None;
        for attempt in 1..=TRIES {
            match self.api.post(&format!("{}/close", self.gate_path()), Some(&body), None).await {
                Ok(reply) if !reply.retryable() => return Ok(reply),
                outcome => last = Some(outcome),
            }
            // No wait after the last try: it would only delay the exit (after Ctrl-C, say).
            if attempt < TRIES {
                backoff.wait().await;
            }
        }
        last.expect("tried at least once")
    }

    /// Acknowledges the `ProvideUserInput` this gate put in our loop's inbox: this `ask` is the
    /// loop, and it has used the answer.
    async fn ack(&self) -> Result<(), String> {
        let inbox = format!("/v1/sessions/{}/loops/{}/commands?limit=1000", self.session, self.loop_id);
        let reply = self.api.get(&inbox).await.map_err(|e| e.to_string())?;
        let command = reply.body["commands"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["command"]["gate_id"] == self.gate.as_str())
            .and_then(|c| c["command"]["command_id"].as_str())
            .ok_or("the command is not in the inbox")?
            .to_owned();
        let path = format!("/v1/sessions/{}/loops/{}/commands/{command}/ack", self.session, self.loop_id);
        let reply = self.api.post(&path, None, None).await.map_err(|e| e.to_string())?;
        if reply.ok() { Ok(()) } else { Err(reply.message()) }
    }
}

/// How a view ends the wait, if it does.
fn ending_of(view: Value) -> Option<Ending> {
    match view["state"].as_str() {
        Some("resolved") => Some(Ending::Answered(view)),
        Some("closed") => Some(Ending::Withdrawn(view)),
        _ => None,
    }
}

/// A signal that stops an `ask`, after it has withdrawn its gate.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Interrupt,
    Terminate,
    HangUp,
}

impl Stop {
    /// 128 + the signal's number, as a shell reports a process the signal killed.
    fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
            Self::HangUp => 129,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupted (SIGINT)",
            Self::Terminate => "terminated (SIGTERM)",
            Self::HangUp => "hung up (SIGHUP)",
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, watched for the whole run: a signal stream remembers a delivery
/// until it is next polled, so one that arrives between two waits is not lost (nor, once
/// watched, does it kill the process with the gate still open).
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hang_up: tokio::signal::unix::Signal,
}

impl StopSignals {
    #[cfg(unix)]
    fn watch() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    fn watch() -> std::io::Result<Self> {
        Ok(Self {})
    }

    #[cfg(unix)]
    async fn recv(&mut self) -> Stop {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Stop::Interrupt,
            Some(()) = self.terminate.recv() => Stop::Terminate,
            Some(()) = self.hang_up.recv() => Stop::HangUp,
            // Only if the runtime's signal driver is gone: nothing will come.
            else => std::future::pending().await,
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> Stop {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    }
}
