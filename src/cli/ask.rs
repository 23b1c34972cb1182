//! `gatehouse ask`: open a gate, say on stderr how to answer it, wait for its answer (riding out
//! server restarts), print it, and acknowledge the loop command it produced. Exit codes (spec
//! §11): 0 answered, 2 withdrawn, 3 timed out without a default (after withdrawing the gate), 130,
//! 143 and 129 on SIGINT, SIGTERM and SIGHUP (after withdrawing), 1 anything else.

use std::io::IsTerminal;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::asking::{Ending, Question};
use super::blocking::{self, Ids, StopSignals};
use super::terminal::{Lines, escape};
use super::{say, say_json};
use crate::config::AskArgs;

const WITHDRAWN: u8 = 2;
const TIMED_OUT: u8 = 3;
/// How much of the question the "waiting" line quotes.
const QUOTED_CHARS: usize = 80;

pub async fn run(args: AskArgs) -> ExitCode {
    // First of all: from here on a stop signal withdraws the gate instead of killing the process.
    let Ok(mut signals) = StopSignals::watch("ask") else { return ExitCode::FAILURE };
    let Ok(api) = super::connect("ask", &args.client) else { return ExitCode::FAILURE };
    let ids = Ids::of(&args.ids);
    let question = Question {
        text: args.question.clone(),
        choices: args.choices.clone(),
        allow_other: args.allow_other,
        timeout: args.timeout,
        default: args.default.clone(),
        title: None,
    };
    let body = match question.body(&ids.loop_id, &ids.tool) {
        Ok(body) => body,
        Err(message) => {
            eprintln!("gatehouse ask: {message}");
            return ExitCode::FAILURE;
        }
    };
    // With a default the server answers at the deadline; without one, the deadline is ours.
    let announce = |gate: &str, _: &Value| announce(gate, args.question.as_str());
    let waited =
        blocking::open_and_wait(&mut signals, &api, "ask", ids.owner(), &body, announce, question.own_timeout());
    let (asked, ending) = match waited.await {
        Ok(waited) => waited,
        Err(code) => return code,
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
        Ending::Refused(message) => blocking::refused(&asked, &message),
    }
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
    say_json(&view);
}
