//! `gatehouse ask`: open a gate, say on stderr how to answer it, wait for its answer (riding out
//! server restarts), print it, and acknowledge the loop command it produced. Exit codes (spec
//! §11): 0 answered, 2 withdrawn, 3 timed out without a default (after withdrawing the gate), 130,
//! 143 and 129 on SIGINT, SIGTERM and SIGHUP (after withdrawing), 1 anything else.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use super::asking::{self, Asked, Ending, Question};
use super::say;
use super::terminal::{Lines, escape, escape_json};
use crate::config::AskArgs;

const WITHDRAWN: u8 = 2;
const TIMED_OUT: u8 = 3;
/// How long a signal that arrives while the gate is being opened waits for the open to finish:
/// the request may have reached the server, and a gate nobody waits for must be withdrawn.
const OPEN_GRACE: Duration = Duration::from_secs(5);
/// How soon after a stop signal the same signal again is taken for an echo of it, not for a
/// person insisting: GNU `timeout` signals the command and then its whole process group, so a
/// `timeout 5 gatehouse ask …` gets its SIGTERM twice, and a terminal's Ctrl-C reaches every
/// process of the foreground group.
const ECHO: Duration = Duration::from_millis(250);
/// How much of the question the "waiting" line quotes.
const QUOTED_CHARS: usize = 80;

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
        who: "ask",
    };
    let question = Question {
        text: args.question.clone(),
        choices: args.choices.clone(),
        allow_other: args.allow_other,
        timeout: args.timeout,
        default: args.default.clone(),
        title: None,
    };
    let opening = asking::open(&api, &session, &loop_id, &tool, &question);
    tokio::pin!(opening);
    let opened = tokio::select! {
        opened = &mut opening => opened,
        stop = signals.recv() => {
            // The open may already have reached the server: let it finish (briefly, and unless
            // a second signal insists) so the gate it made can be withdrawn.
            let finished = tokio::select! {
                finished = tokio::time::timeout(OPEN_GRACE, &mut opening) => finished.ok(),
                _ = signals.insisting(stop) => None,
            };
            match finished {
                Some(Ok(view)) => self::stop(&asked(gate_of(&view)), stop, &mut signals).await,
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
    let deadline = question.deadline();

    let ending = tokio::select! {
        ending = asked.wait(deadline) => ending,
        stop = signals.recv() => {
            self::stop(&asked, stop, &mut signals).await;
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

/// A stop signal came: withdraw the gate, and say so. A second signal (not an echo of the first)
/// gives up at once (the withdrawal may be retrying against a server that is down).
async fn stop(asked: &Asked, stop: Stop, signals: &mut StopSignals) {
    let withdrawn = tokio::select! {
        withdrawn = asked.withdraw() => withdrawn,
        again = signals.insisting(stop) => Err(format!("{} again", again.name())),
    };
    match withdrawn {
        Ok(()) => eprintln!("gatehouse ask: {}; gate {} withdrawn", stop.name(), asked.gate),
        Err(message) => {
            eprintln!("gatehouse ask: {}, and could not withdraw gate {}: {message}", stop.name(), asked.gate);
        }
    }
}

/// A signal that stops an `ask`, after it has withdrawn its gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// The next signal that insists after `first`: another signal, or `first` again once `ECHO`
    /// has passed (sooner, it is the same stop delivered twice).
    async fn insisting(&mut self, first: Stop) -> Stop {
        let since = tokio::time::Instant::now();
        loop {
            let next = self.recv().await;
            if next != first || since.elapsed() >= ECHO {
                return next;
            }
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> Stop {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    }
}
