//! `gatehouse answer GATE_ID ANSWER`: answer an open gate, named by its whole id or by a unique
//! prefix of at least 8 hex digits (the short ids `gatehouse gates` shows). A question's gate
//! takes the text as its answer; a permission gate takes `approve` (with `--input`, an edit),
//! `approve-always` or `deny` (with `--reason`): the gate's kind decides, so a question's answer
//! may be the word "approve". A form takes `--values JSON` (submitted), `--decline` or
//! `--cancel`; an open-URL gate `--done`, `--decline` or `--cancel`. Exit 0 accepted; 2 the gate
//! was already resolved or closed (the winner on stderr); 1 otherwise (an unknown or ambiguous
//! prefix, or values the form refuses, each field's problem on a line of its own).

use std::process::ExitCode;

use serde_json::{Value, json};

use super::asking::{Decision, FormReply, field_names};
use super::client::{Api, Reply};
use super::server_backoff;
use super::terminal::quote;
use crate::config::AnswerArgs;
use crate::domain::GateId;
use crate::domain::form::{ACCEPT, CANCEL, DECLINE};
use crate::domain::gate::{ASK_USER, FORM, OPEN_URL, PERMISSION};
use crate::domain::tool_call::{APPROVE, APPROVE_ALWAYS, DENY};

const TOO_LATE: u8 = 2;
/// The shortest prefix taken: what `gatehouse gates` shows.
const SHORTEST_PREFIX: usize = 8;

pub async fn run(args: AnswerArgs) -> ExitCode {
    let Ok(api) = super::connect("answer", &args.client) else { return ExitCode::FAILURE };
    let outcome = match GateRef::parse(&args.gate_id) {
        Ok(gate) => answer(&api, &gate, &args).await,
        Err(message) => Err(message),
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gatehouse answer: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A gate as the command line names it.
#[derive(Debug, PartialEq, Eq)]
enum GateRef {
    Whole(GateId),
    /// The start of a hyphenated id, lower case, at least `SHORTEST_PREFIX` long.
    Prefix(String),
}

impl GateRef {
    fn parse(raw: &str) -> Result<Self, String> {
        if let Ok(id) = GateId::parse(raw) {
            return Ok(Self::Whole(id));
        }
        let prefix = raw.to_ascii_lowercase();
        // Where the hyphenated form `8-4-4-4-12` has its hyphens.
        let fits = |(i, c): (usize, char)| if matches!(i, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() };
        if (SHORTEST_PREFIX..36).contains(&prefix.len()) && prefix.chars().enumerate().all(fits) {
            return Ok(Self::Prefix(prefix));
        }
        Err(format!(
            "\"{}\" is not a gate id: give the whole id, or its first {SHORTEST_PREFIX} or more characters as \
             `gatehouse gates` shows them",
            quote(raw)
        ))
    }
}

/// The view of the gate `gate` names. A prefix is looked up among every gate the caller may see,
/// and must name exactly one.
async fn find(api: &Api, gate: &GateRef) -> Result<Value, String> {
    let prefix = match gate {
        GateRef::Whole(id) => {
            let found = api.get(&format!("/v1/gates/{id}")).await.map_err(|e| e.to_string())?;
            return if found.ok() { Ok(found.body) } else { Err(found.message()) };
        }
        GateRef::Prefix(prefix) => prefix,
    };
    let mut matches = Vec::new();
    let mut path = "/v1/gates?limit=1000".to_owned();
    loop {
        let page = api.get(&path).await.map_err(|e| e.to_string())?;
        if !page.ok() {
            return Err(format!("cannot look up gate ids starting with {prefix}: {}", page.message()));
        }
        let gates = page.body["gates"].as_array().map(Vec::as_slice).unwrap_or_default();
        matches.extend(gates.iter().filter(|view| id_of(view).starts_with(prefix.as_str())).cloned());
        match page.body["next_after"].as_str() {
            Some(cursor) => path = format!("/v1/gates?limit=1000&after={cursor}"),
            None => break,
        }
    }
    match matches.len() {
        0 => Err(format!("no gate id starts with {prefix}")),
        1 => Ok(matches.remove(0)),
        n => {
            let mut message = format!("{n} gates have ids starting with {prefix}; give more of the id:");
            for view in &matches {
                let question: String = view["gate"]["prompt"]["body"].as_str().unwrap_or("").chars().take(60).collect();
                let state = view["state"].as_str().unwrap_or("");
                message.push_str(&format!("\n  {}  {:<8}  \"{}\"", quote(id_of(view)), quote(state), quote(&question)));
            }
            Err(message)
        }
    }
}

fn id_of(view: &Value) -> &str {
    view["gate"]["id"].as_str().unwrap_or("")
}

async fn answer(api: &Api, gate: &GateRef, args: &AnswerArgs) -> Result<ExitCode, String> {
    let found = find(api, gate).await?;
    let body = body(&found, args)?;
    let (session, gate) = (found["session_id"].as_str().unwrap_or_default(), id_of(&found));
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    // One key for every attempt: a retry after an unknown outcome is the same answer.
    let key = uuid::Uuid::new_v4().to_string();
    let mut backoff = server_backoff();
    let mut attempts = 0;
    let reply = loop {
        attempts += 1;
        match api.post(&path, Some(&body), Some(&key)).await {
            Ok(reply) if reply.retryable() && attempts < 5 => backoff.wait().await,
            Ok(reply) => break reply,
            Err(e) if attempts < 5 => {
                eprintln!("gatehouse answer: {e}; retrying");
                backoff.wait().await;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    match reply.status {
        202 => Ok(ExitCode::SUCCESS),
        409 if reply.code() == "gate_not_ready" => {
            eprintln!("gatehouse answer: {}", winner(api, gate, &reply).await);
            Ok(ExitCode::from(TOO_LATE))
        }
        _ => Err(reply.message()),
    }
}

/// The body of the answer to the gate whose view is `found`, by its kind: a question's answer
/// text, a decision on a tool call, a form's values, or what became of an open-URL gate's task.
fn body(found: &Value, args: &AnswerArgs) -> Result<Value, String> {
    let kind = found["gate"]["kind"].as_str().unwrap_or(ASK_USER);
    if !matches!(kind, FORM | OPEN_URL)
        && let Some(flag) = reply_flag(args)
    {
        return Err(format!("{flag} is for forms and open-URL gates; {}", wanted(found)));
    }
    match kind {
        ASK_USER => {
            if args.input.is_some() || args.reason.is_some() {
                return Err("--input and --reason are for permission gates; this gate asks a question: \
                            give the answer alone"
                    .into());
            }
            let answer = args.answer.as_deref().ok_or_else(|| wanted(found))?;
            Ok(json!({"action": "answer", "values": {"answer": answer}}))
        }
        PERMISSION => decision_body(found, args),
        FORM | OPEN_URL => reply_body(found, args),
        other => Err(format!(
            "gate {} is of a kind this gatehouse answer does not know: {}",
            quote(id_of(found)),
            quote(other)
        )),
    }
}

/// The flag given that answers a form or an open-URL gate, if any.
fn reply_flag(args: &AnswerArgs) -> Option<&'static str> {
    [(args.values.is_some(), "--values"), (args.decline, "--decline"), (args.cancel, "--cancel"), (args.done, "--done")]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
}

/// A form's answer (`--values`, `--decline`, `--cancel`) or an open-URL gate's (`--done`,
/// `--decline`, `--cancel`).
fn reply_body(found: &Value, args: &AnswerArgs) -> Result<Value, String> {
    let form = found["gate"]["kind"] == FORM;
    if args.answer.is_some() || args.input.is_some() || args.reason.is_some() {
        return Err(wanted(found));
    }
    match (reply_flag(args), form) {
        (Some("--values"), true) => Ok(json!({"action": ACCEPT, "values": args.values})),
        (Some("--done"), false) => Ok(json!({"action": ACCEPT})),
        (Some("--decline"), _) => Ok(json!({"action": DECLINE})),
        (Some("--cancel"), _) => Ok(json!({"action": CANCEL})),
        _ => Err(wanted(found)),
    }
}

/// What the gate whose view is `found` takes, in words, for a refused command line.
fn wanted(found: &Value) -> String {
    let gate = quote(id_of(found));
    match found["gate"]["kind"].as_str().unwrap_or(ASK_USER) {
        FORM => {
            let names = field_names(&found["gate"]);
            let listed = if names.is_empty() { String::new() } else { format!(" ({})", quote(&names.join(", "))) };
            format!(
                "gate {gate} is a form: answer it with --values JSON, an object of its fields{listed}, or with \
                 --decline or --cancel"
            )
        }
        OPEN_URL => format!(
            "gate {gate} asks to do something at a URL: answer it with --done once it is done, or with --decline \
             or --cancel"
        ),
        PERMISSION => format!("gate {gate} asks to approve a tool call: answer it with approve or deny"),
        _ => format!("gate {gate} asks a question: give the answer"),
    }
}

/// A decision on a permission gate: `approve` (perhaps with an edited `--input`),
/// `approve-always` (where the gate offers it) or `deny` (perhaps with a `--reason`).
fn decision_body(found: &Value, args: &AnswerArgs) -> Result<Value, String> {
    let offered = |action: &str| {
        found["gate"]["prompt"]["controls"].as_array().into_iter().flatten().any(|c| c["action"] == action)
    };
    let Some(answer) = args.answer.as_deref() else { return Err(wanted(found)) };
    let word = answer.to_ascii_lowercase();
    let action = match word.as_str() {
        "approve" => APPROVE,
        "approve-always" if offered(APPROVE_ALWAYS) => APPROVE_ALWAYS,
        "approve-always" => {
            return Err(
                "this gate offers no approve-always (nothing to save for this workspace): approve or deny it".into()
            );
        }
        "deny" => DENY,
        _ => {
            let always = if offered(APPROVE_ALWAYS) { ", approve-always" } else { "" };
            return Err(format!(
                "gate {} asks to approve a tool call: answer it with approve{always} or deny, not \"{}\"",
                quote(id_of(found)),
                quote(answer)
            ));
        }
    };
    let mut body = json!({"action": action});
    match (action, &args.input, &args.reason) {
        (DENY, Some(_), _) => return Err("--input goes with approve: a denial runs nothing".into()),
        (DENY, None, Some(reason)) => body["values"] = json!({"reason": reason}),
        (_, _, Some(_)) => return Err("--reason goes with deny".into()),
        (_, Some(input), None) => body["values"] = json!({"tool_input": input}),
        _ => {}
    }
    Ok(body)
}

/// Says who won, in words.
async fn winner(api: &Api, gate: &str, reply: &Reply) -> String {
    let resolution = &reply.body["error"]["resolution"];
    let view: Value = api.get(&format!("/v1/gates/{gate}")).await.map(|r| r.body).unwrap_or_default();
    let at = quote(resolution["created_at"].as_str().unwrap_or("earlier"));
    if let Some(decision) = Decision::of(&view) {
        return decided(&decision, &at);
    }
    if let Some(reply) = FormReply::of(&view) {
        let by = match (&reply.principal, reply.by_policy) {
            (_, true) => "by its timeout".to_owned(),
            (Some(principal), false) => format!("by {}", quote(principal)),
            (None, false) => "by a person".to_owned(),
        };
        return format!("already {} {by} at {at}", reply.done());
    }
    let answer = view["answer"].as_str().map(quote);
    match (resolution["reason"].as_str().unwrap_or(""), answer) {
        ("answered", Some(answer)) => {
            let by = resolution["source"]["principal"].as_str().map_or("a person".to_owned(), quote);
            format!("already answered \"{answer}\" by {by} at {at}")
        }
        ("policy_response", Some(answer)) => format!("already answered \"{answer}\" by its timeout at {at}"),
        (reason, _) => format!("the gate is already closed ({}) since {at}", quote(reason)),
    }
}

/// A decision already made, in words.
fn decided(decision: &Decision, at: &str) -> String {
    let by = match (&decision.principal, decision.by_policy) {
        (_, true) => "by its timeout".to_owned(),
        (Some(principal), false) => format!("by {}", quote(principal)),
        (None, false) => "by a person".to_owned(),
    };
    match (decision.approved, &decision.reason) {
        (true, _) if decision.edited => format!("already approved, with an edited input, {by} at {at}"),
        (true, _) => format!("already approved {by} at {at}"),
        (false, Some(reason)) => format!("already denied {by} at {at}: \"{}\"", quote(reason)),
        (false, None) => format!("already denied {by} at {at}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(answer: &str, input: Option<Value>, reason: Option<&str>) -> AnswerArgs {
        AnswerArgs {
            gate_id: "9d3e4f50".into(),
            answer: Some(answer.into()),
            reason: reason.map(str::to_owned),
            input,
            values: None,
            decline: false,
            cancel: false,
            done: false,
            client: crate::config::ClientArgs { url: String::new(), token: None },
        }
    }

    /// The flags of a form's or an open-URL gate's answer, and no ANSWER.
    fn reply(values: Option<Value>, decline: bool, cancel: bool, done: bool) -> AnswerArgs {
        AnswerArgs { answer: None, values, decline, cancel, done, ..args("", None, None) }
    }

    #[test]
    fn forms_take_values_decline_or_cancel_and_open_url_gates_done() {
        let fields = json!({"fields": [{"name": "env", "kind": "text"}, {"name": "ticket", "kind": "text"}]});
        let form = json!({"gate": {"id": "f", "kind": FORM, "prompt": {"schema": fields}}});
        let open_url = json!({"gate": {"id": "u", "kind": OPEN_URL, "prompt": {}}});
        let values = json!({"env": "prod"});
        assert_eq!(
            body(&form, &reply(Some(values.clone()), false, false, false)).unwrap(),
            json!({"action": "accept", "values": values})
        );
        assert_eq!(body(&form, &reply(None, true, false, false)).unwrap(), json!({"action": "decline"}));
        assert_eq!(body(&form, &reply(None, false, true, false)).unwrap(), json!({"action": "cancel"}));
        assert_eq!(body(&open_url, &reply(None, false, false, true)).unwrap(), json!({"action": "accept"}));
        assert_eq!(body(&open_url, &reply(None, true, false, false)).unwrap(), json!({"action": "decline"}));
        assert_eq!(body(&open_url, &reply(None, false, true, false)).unwrap(), json!({"action": "cancel"}));

        for wrong in [reply(None, false, false, true), reply(None, false, false, false), args("prod", None, None)] {
            let message = body(&form, &wrong).unwrap_err();
            assert!(message.contains("--values JSON") && message.contains("(env, ticket)"), "{message}");
        }
        for wrong in [reply(Some(values.clone()), false, false, false), args("done", None, None)] {
            assert!(body(&open_url, &wrong).unwrap_err().contains("--done once it is done"));
        }
        let question = json!({"gate": {"id": "q", "kind": "harness.ask_user", "prompt": {}}});
        let permission = json!({"gate": {"id": "p", "kind": PERMISSION, "prompt": {}}});
        for found in [&question, &permission] {
            let message = body(found, &reply(Some(values.clone()), false, false, false)).unwrap_err();
            assert!(message.starts_with("--values is for forms"), "{message}");
            assert!(body(found, &reply(None, false, false, false)).is_err(), "the answer is missing");
        }
    }

    #[test]
    fn the_gate_kind_decides_what_an_answer_means() {
        let question = json!({"gate": {"id": "q", "prompt": {}}});
        let body = |found: &Value, a: AnswerArgs| body(found, &a);
        assert_eq!(
            body(&question, args("approve", None, None)).unwrap(),
            json!({"action": "answer", "values": {"answer": "approve"}}),
            "a question's answer may be the word approve"
        );
        assert!(body(&question, args("yes", None, Some("why"))).unwrap_err().contains("--reason"));
        let permission = |always: bool| {
            let mut controls = vec![json!({"action": APPROVE})];
            if always {
                controls.push(json!({"action": APPROVE_ALWAYS}));
            }
            controls.push(json!({"action": DENY}));
            json!({"gate": {"id": "p", "kind": PERMISSION, "prompt": {"controls": controls}}})
        };
        let edit = json!({"command": "ls"});
        assert_eq!(body(&permission(false), args("approve", None, None)).unwrap(), json!({"action": "Approve"}));
        assert_eq!(
            body(&permission(false), args("Approve", Some(edit.clone()), None)).unwrap(),
            json!({"action": "Approve", "values": {"tool_input": edit}})
        );
        assert_eq!(
            body(&permission(false), args("deny", None, Some("not now"))).unwrap(),
            json!({"action": "Deny", "values": {"reason": "not now"}})
        );
        assert_eq!(
            body(&permission(true), args("approve-always", None, None)).unwrap(),
            json!({"action": APPROVE_ALWAYS})
        );
        assert!(
            body(&permission(false), args("approve-always", None, None)).unwrap_err().contains("no approve-always")
        );
        assert!(body(&permission(false), args("deny", Some(edit), None)).unwrap_err().contains("--input"));
        assert!(body(&permission(false), args("approve", None, Some("x"))).unwrap_err().contains("--reason"));
        let other = body(&permission(true), args("yes\u{1b}", None, None)).unwrap_err();
        assert!(other.contains("approve, approve-always or deny") && !other.contains('\u{1b}'), "{other}");
    }

    #[test]
    fn gate_refs_are_whole_ids_or_prefixes_of_the_hyphenated_form() {
        let id = "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f";
        assert_eq!(GateRef::parse(id), Ok(GateRef::Whole(GateId::parse(id).unwrap())));
        assert_eq!(GateRef::parse(&id.to_uppercase()), Ok(GateRef::Whole(GateId::parse(id).unwrap())));
        for prefix in ["9d3e4f50", "9D3E4F50", "9d3e4f50-", "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6"] {
            assert_eq!(GateRef::parse(prefix), Ok(GateRef::Prefix(prefix.to_ascii_lowercase())), "{prefix}");
        }
        for bad in [
            "",
            "9d3e4f5",
            "9d3e4f5g",
            "9d3e-4f50",
            "9d3e4f506a7b",
            "{9d3e4f50}",
            "9d3e4f50\u{1b}",
            id.replace('-', "").as_str(),
        ] {
            let message = GateRef::parse(bad).unwrap_err();
            assert!(message.contains("not a gate id") && !message.contains('\u{1b}'), "{bad:?}: {message}");
        }
    }
}
