//! `gatehouse form --body TEXT (--field SPEC… | --schema FILE)`: open a form gate owned by the
//! host (kind `harness.form`, no loop: each run is a new gate), say on stderr how to answer it,
//! wait for the person (riding out server restarts), and print the values they submitted as one
//! line of JSON. Exit codes: 0 submitted; 2 declined or cancelled by a person, or withdrawn; 3
//! nobody answered in time (at `--timeout` the gate's policy cancels the form); 130, 143 and 129 on
//! SIGINT, SIGTERM and SIGHUP (after withdrawing); 1 anything else.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::asking::{Ending, Form, FormReply, FormSchema, field_names};
use super::blocking::{self, Owner, StopSignals};
use super::say_json;
use super::terminal::quote;
use crate::config::FormArgs;
use crate::domain::form::ACCEPT;

const NOT_GIVEN: u8 = 2;
const TIMED_OUT: u8 = 3;
/// How much of the title or message the "waiting" line quotes.
const QUOTED_CHARS: usize = 80;

pub async fn run(args: FormArgs) -> ExitCode {
    // First of all: from here on a stop signal withdraws the gate instead of killing the process.
    let Ok(mut signals) = StopSignals::watch("form") else { return ExitCode::FAILURE };
    let Ok(api) = super::connect("form", &args.client) else { return ExitCode::FAILURE };
    let form = match form_of(&args) {
        Ok(form) => form,
        Err(message) => {
            eprintln!("gatehouse form: {message}");
            return ExitCode::FAILURE;
        }
    };
    let body = match form.body(None) {
        Ok(body) => body,
        Err(message) => {
            eprintln!("gatehouse form: {message}");
            return ExitCode::FAILURE;
        }
    };
    let session = blocking::or_fresh(args.session.as_deref());
    let owner = Owner { session: &session, loop_id: None };
    let announce = |gate: &str, view: &Value| announce(gate, &form, view);
    // At --timeout the server cancels the form by policy: there is no deadline of our own.
    let waited = blocking::open_and_wait(&mut signals, &api, "form", owner, &body, announce, None);
    let (asked, ending) = match waited.await {
        Ok(waited) => waited,
        Err(code) => return code,
    };
    let view = match ending {
        Ending::Answered(view) => view,
        Ending::Withdrawn(view) => {
            let reason = quote(view["resolution"]["reason"].as_str().unwrap_or("closed"));
            eprintln!("gatehouse form: the gate was withdrawn ({reason})");
            return ExitCode::from(NOT_GIVEN);
        }
        // Only with a deadline of our own, which there is not; the gate is withdrawn by then.
        Ending::TimedOut => {
            eprintln!("gatehouse form: no answer in time; the gate was withdrawn");
            return ExitCode::from(TIMED_OUT);
        }
        Ending::Refused(message) => return blocking::refused(&asked, &message),
    };
    let Some(reply) = FormReply::of(&view) else {
        eprintln!("gatehouse form: gate {} was resolved without an answer to the form", asked.gate);
        return ExitCode::FAILURE;
    };
    if reply.action == ACCEPT {
        say_json(reply.values.as_ref().unwrap_or(&json!({})));
        ExitCode::SUCCESS
    } else if reply.by_policy {
        eprintln!("gatehouse form: no answer in time; the form was {} by policy", reply.done());
        ExitCode::from(TIMED_OUT)
    } else {
        let by = reply.principal.as_deref().map_or_else(|| "a person".to_owned(), quote);
        eprintln!("gatehouse form: {} by {by}", reply.done());
        ExitCode::from(NOT_GIVEN)
    }
}

/// The form the flags describe.
fn form_of(args: &FormArgs) -> Result<Form, String> {
    let schema = match &args.schema {
        Some(path) => read_schema(path)?,
        None => {
            let mut seen = HashSet::new();
            if let Some(twice) = args.fields.iter().filter_map(|f| f["name"].as_str()).find(|n| !seen.insert(*n)) {
                return Err(format!("two --field are named {}: each field needs a name of its own", quote(twice)));
            }
            FormSchema::Harness(json!({"fields": args.fields}))
        }
    };
    Ok(Form { title: args.title.clone(), body: args.body.clone(), schema, timeout: args.timeout })
}

/// The form in `path`: gatehouse's `{"fields": […]}`, or a JSON Schema of an object.
fn read_schema(path: &Path) -> Result<FormSchema, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the schema {shown}: {e}"))?;
    FormSchema::parse(&text).map_err(|message| format!("the schema {shown} {message}"))
}

/// The one line that tells the person at the terminal which gate waits, its fields (as the server
/// shows them, in their order), and how to answer it from another shell.
fn announce(gate: &str, form: &Form, view: &Value) {
    let shown = form.title.as_deref().unwrap_or(&form.body);
    let mut quoted: String = shown.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < shown.len() {
        quoted.push('…');
    }
    let names = field_names(&view["gate"]);
    let fields = if names.is_empty() { String::new() } else { format!(" (fields: {})", quote(&names.join(", "))) };
    eprintln!(
        "gatehouse form: gate {gate} waits for a person to fill in \"{}\"{fields}; answer it with: gatehouse answer \
         {gate} --values JSON | --decline | --cancel",
        quote(&quoted)
    );
}
