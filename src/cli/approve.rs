//! `gatehouse approve TOOL_NAME --input JSON`: open a permission gate for one tool call, say on
//! stderr how to decide it, wait for the decision (riding out server restarts), print the input
//! the call may run with, and acknowledge the loop command the decision produced. Exit codes: 0
//! approved; 4 denied by a person; 3 no decision in time (the gate's policy, or the server's
//! default one, denied the call at its deadline: the server always decides a permission gate, so
//! a timeout is a denial by policy); 2 withdrawn; 130, 143 and 129 on SIGINT, SIGTERM and SIGHUP
//! (after withdrawing); 1 anything else.

use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

use super::asking::{Approval, Decision, Ending};
use super::blocking::{self, Ids, StopSignals};
use super::say_json;
use super::terminal::quote;
use crate::config::ApproveArgs;

const WITHDRAWN: u8 = 2;
const TIMED_OUT: u8 = 3;
const DENIED: u8 = 4;
/// How much of the input the "waiting" line quotes.
const QUOTED_CHARS: usize = 80;

pub async fn run(args: ApproveArgs) -> ExitCode {
    // First of all: from here on a stop signal withdraws the gate instead of killing the process.
    let Ok(mut signals) = StopSignals::watch("approve") else { return ExitCode::FAILURE };
    let Ok(api) = super::connect("approve", &args.client) else { return ExitCode::FAILURE };
    let schema = match args.schema.as_deref().map(read_schema).transpose() {
        Ok(schema) => schema,
        Err(message) => {
            eprintln!("gatehouse approve: {message}");
            return ExitCode::FAILURE;
        }
    };
    let ids = Ids::of(&args.ids);
    let approval = Approval {
        tool_name: args.tool_name.clone(),
        input: args.input.clone(),
        schema,
        editable: args.editable,
        risk: args.risk.clone(),
        summary: args.summary.clone(),
        requirements: args.requirements.clone(),
        timeout: args.timeout,
    };
    let body = match approval.body(&ids.loop_id, &ids.tool) {
        Ok(body) => body,
        Err(message) => {
            eprintln!("gatehouse approve: {message}");
            return ExitCode::FAILURE;
        }
    };
    let announce = |gate: &str, _: &Value| announce(gate, &approval);
    // The server decides at the deadline (denies by policy): there is no deadline of our own.
    let waited = blocking::open_and_wait(&mut signals, &api, "approve", ids.owner(), &body, announce, None);
    let (asked, ending) = match waited.await {
        Ok(waited) => waited,
        Err(code) => return code,
    };
    let view = match ending {
        Ending::Answered(view) => view,
        Ending::Withdrawn(view) => {
            let reason = quote(view["resolution"]["reason"].as_str().unwrap_or("closed"));
            eprintln!("gatehouse approve: the gate was withdrawn ({reason})");
            return ExitCode::from(WITHDRAWN);
        }
        // Only with a deadline of our own, which there is not; the gate is withdrawn by then.
        Ending::TimedOut => {
            eprintln!("gatehouse approve: no decision in time; the gate was withdrawn");
            return ExitCode::from(TIMED_OUT);
        }
        Ending::Refused(message) => return blocking::refused(&asked, &message),
    };
    let Some(decision) = Decision::of(&view) else {
        eprintln!("gatehouse approve: gate {} was resolved without a decision on the tool call", asked.gate);
        return ExitCode::FAILURE;
    };
    let code = if decision.approved {
        say_json(decision.tool_input.as_ref().unwrap_or(&approval.input));
        if decision.edited {
            eprintln!("gatehouse approve: approved with an edited input by {}", by(&decision));
        }
        ExitCode::SUCCESS
    } else if decision.by_policy {
        eprintln!("gatehouse approve: no decision in time; denied by policy");
        ExitCode::from(TIMED_OUT)
    } else {
        match &decision.reason {
            Some(reason) => eprintln!("gatehouse approve: denied by {}: {}", by(&decision), quote(reason)),
            None => eprintln!("gatehouse approve: denied by {}", by(&decision)),
        }
        ExitCode::from(DENIED)
    };
    if let Err(message) = asked.ack().await {
        eprintln!("gatehouse approve: decided, but could not acknowledge the command: {message}");
    }
    code
}

/// The JSON Schema in `path`.
fn read_schema(path: &Path) -> Result<Value, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the schema {shown}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("the schema {shown} is not JSON: {e}"))
}

/// The one line that tells the person at the terminal which gate waits, and how to decide it
/// from another shell.
fn announce(gate: &str, approval: &Approval) {
    let input = approval.input.to_string();
    let mut quoted: String = input.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < input.len() {
        quoted.push('…');
    }
    let edit = if approval.editable { " [--input JSON]" } else { "" };
    eprintln!(
        "gatehouse approve: gate {gate} waits for a decision on {} {}; decide it with: gatehouse answer {gate} \
         approve{edit} | deny [--reason TEXT]",
        quote(&approval.tool_name),
        quote(&quoted)
    );
}

/// Who decided, for a line on stderr.
fn by(decision: &Decision) -> String {
    decision.principal.as_deref().map_or_else(|| "a person".to_owned(), quote)
}
