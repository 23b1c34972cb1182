//! `gatehouse gates`: the open gates (or all with --all) as a table; --watch then prints one line
//! per change, live. Gate ids show as their first eight characters, which `gatehouse answer`
//! takes as a prefix. Each row names its gate's kind: a question shows its text and choices, a
//! permission gate its tool (and risk), its summary, and the words `gatehouse answer` takes for
//! it, a form its message and its fields, an open-URL gate the site (never the URL) and its
//! message. Text from others (tool names too) is escaped for the terminal.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::asking::field_names;
use super::client::Api;
use super::sse::Reader;
use super::terminal::{Lines, escape};
use super::{say, server_backoff, short};
use crate::config::GatesArgs;
use crate::domain::Timestamp;
use crate::domain::form::{ACCEPT, CANCEL, DECLINE};
use crate::domain::gate::{ASK_USER, FORM, OPEN_URL, PERMISSION};
use crate::domain::tool_call::{APPROVE, APPROVE_ALWAYS, DENY};

/// The width of the question (or tool call) column.
const SUBJECT: usize = 30;

pub async fn run(args: GatesArgs) -> ExitCode {
    let Ok(api) = super::connect("gates", &args.client) else { return ExitCode::FAILURE };
    let (gates, head) = match snapshot(&api, args.all).await {
        Ok(snapshot) => snapshot,
        Err(message) => {
            eprintln!("gatehouse gates: {message}");
            return ExitCode::FAILURE;
        }
    };
    say(&format!(
        "{:<8}  {:<8}  {:<8}  {:<8}  {:<10}  {:<SUBJECT$}  CHOICES",
        "GATE", "SESSION", "STATE", "AGE", "KIND", "QUESTION / TOOL CALL"
    ));
    for view in &gates {
        say(&row(view));
    }
    if args.watch {
        watch(&api, head).await;
    }
    ExitCode::SUCCESS
}

/// Every page of the listing, and the journal head of the first.
async fn snapshot(api: &Api, all: bool) -> Result<(Vec<Value>, i64), String> {
    let base = if all { "/v1/gates?order=newest&limit=1000" } else { "/v1/gates?state=open&limit=1000" };
    let mut gates = Vec::new();
    let mut head = None;
    let mut path = base.to_owned();
    loop {
        let reply = api.get(&path).await.map_err(|e| e.to_string())?;
        if !reply.ok() {
            return Err(reply.message());
        }
        head.get_or_insert(reply.body["journal_seq"].as_i64().unwrap_or(0));
        gates.extend(reply.body["gates"].as_array().cloned().unwrap_or_default());
        match reply.body["next_after"].as_str() {
            Some(cursor) => path = format!("{base}&after={cursor}"),
            None => return Ok((gates, head.unwrap_or(0))),
        }
    }
}

fn row(view: &Value) -> String {
    let gate = &view["gate"];
    let kind = gate["kind"].as_str().unwrap_or(ASK_USER);
    let (subject, choices) = match kind {
        // A tool's name is shown as it is, line breaks escaped: it names what runs.
        PERMISSION => tool_call(gate),
        FORM => (one_line(&gate["prompt"]["body"]), format!("fields: {}", field_names(gate).join(", "))),
        OPEN_URL => (site(gate), "--done, --decline, --cancel".to_owned()),
        _ => {
            let choices: Vec<&str> = gate["prompt"]["schema"]["fields"][0]["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["value"].as_str())
                .collect();
            (one_line(&gate["prompt"]["body"]), choices.join(", "))
        }
    };
    let subject: String = subject.chars().take(SUBJECT).collect();
    format!(
        "{:<8}  {:<8}  {:<8}  {:<8}  {:<10}  {:<SUBJECT$}  {}",
        cell(short(gate["id"].as_str().unwrap_or(""))),
        cell(short(view["session_id"].as_str().unwrap_or(""))),
        cell(view["state"].as_str().unwrap_or("")),
        age(view["opened_at"].as_str().unwrap_or("")),
        cell(kind_name(kind)),
        cell(&subject),
        cell(&choices)
    )
}

/// A kind as the table names it: `ask`, `permission`, `form` and `open_url` for those gatehouse
/// serves.
fn kind_name(kind: &str) -> &str {
    match kind {
        ASK_USER => "ask",
        PERMISSION => "permission",
        FORM => "form",
        OPEN_URL => "open_url",
        other => other,
    }
}

/// A message's line breaks read best as spaces in a one-line cell.
fn one_line(text: &Value) -> String {
    text.as_str().unwrap_or("").replace(['\n', '\r'], " ")
}

/// An open-URL gate's cell: the site it sends the person to (the URL itself is a secret, and
/// not in the view), then its message.
fn site(gate: &Value) -> String {
    let body = one_line(&gate["prompt"]["body"]);
    match gate["prompt"]["origin"].as_str() {
        Some(origin) => format!("{origin}: {body}"),
        None => body,
    }
}

/// A permission gate's cells: `TOOL [risk]: summary` (the tool first, since the summary may be
/// long), and the words `gatehouse answer` takes for it.
fn tool_call(gate: &Value) -> (String, String) {
    let call = &gate["tool_call"];
    let mut subject = call["tool_name"].as_str().unwrap_or("?").to_owned();
    if let Some(risk) = call["risk"].as_str() {
        subject.push_str(&format!(" [{risk}]"));
    }
    if let Some(summary) = call["summary"].as_str().filter(|s| !s.is_empty()) {
        subject.push_str(": ");
        subject.push_str(summary);
    }
    let always = gate["prompt"]["controls"].as_array().into_iter().flatten().any(|c| c["action"] == APPROVE_ALWAYS);
    let editable = if call["editable"] == true { " (editable)" } else { "" };
    let choices =
        if always { format!("approve{editable}, approve-always, deny") } else { format!("approve{editable}, deny") };
    (subject, choices)
}

/// Text from the server as it may appear in one line of the terminal.
fn cell(text: &str) -> String {
    escape(text, Lines::Escape).into_owned()
}

/// `"text"`, escaped for one line.
fn quoted(text: &Value) -> String {
    format!("\"{}\"", cell(text.as_str().unwrap_or("")))
}

/// "45s", "12m", "3h", "2d" since an RFC 3339 instant written by the server.
fn age(opened_at: &str) -> String {
    let Some(opened) = Timestamp::parse(opened_at) else { return "?".into() };
    let secs = (Timestamp::now().as_nanos() - opened.as_nanos()) / 1_000_000_000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Follows the journal from `after`, one line per gate change, reconnecting as needed.
async fn watch(api: &Api, mut after: i64) {
    let mut backoff = server_backoff();
    loop {
        match api.stream(&format!("/v1/events?after={after}")).await {
            Ok(response) => {
                backoff.reset();
                let mut frames = Reader::new(response);
                while let Some(frame) = frames.next().await {
                    if frame.event == "enduring" {
                        after = frame.id.parse().unwrap_or(after);
                        let event: Value = serde_json::from_str(&frame.data).unwrap_or_default();
                        if let Some(line) = describe(&event["event"]) {
                            say(&line);
                        }
                    }
                }
            }
            Err(e) => eprintln!("gatehouse gates: {e}; retrying"),
        }
        backoff.wait().await;
    }
}

fn describe(event: &Value) -> Option<String> {
    let gate = |id: &Value| cell(short(id.as_str().unwrap_or("")));
    match event["type"].as_str()? {
        "GateOpened" if event["gate"]["kind"] == PERMISSION => {
            let (subject, _) = tool_call(&event["gate"]);
            Some(format!("opened    {}  permission {}", gate(&event["gate"]["id"]), cell(&subject)))
        }
        "GateOpened" if event["gate"]["kind"] == FORM => {
            Some(format!("opened    {}  form {}", gate(&event["gate"]["id"]), quoted(&event["gate"]["prompt"]["body"])))
        }
        "GateOpened" if event["gate"]["kind"] == OPEN_URL => {
            Some(format!("opened    {}  open_url {}", gate(&event["gate"]["id"]), quoted(&json!(site(&event["gate"])))))
        }
        "GateOpened" => {
            Some(format!("opened    {}  {}", gate(&event["gate"]["id"]), quoted(&event["gate"]["prompt"]["body"])))
        }
        // A form's or an open-URL gate's answer: what became of it, and by whom.
        "GateResolved" if matches!(event["action"].as_str(), Some(ACCEPT | DECLINE | CANCEL)) => {
            let done = match event["action"].as_str() {
                Some(ACCEPT) => "accepted ",
                Some(DECLINE) => "declined ",
                _ => "cancelled",
            };
            let by = match (event["reason"].as_str(), event["source"]["principal"].as_str()) {
                (Some("policy_response"), _) => "by its timeout".to_owned(),
                (_, Some(principal)) => format!("by {}", cell(principal)),
                _ => "by a person".to_owned(),
            };
            Some(format!("{done} {}  ({by})", gate(&event["gate_id"])))
        }
        // A permission gate's decision is told by the PermissionDecided that follows.
        "GateResolved" if matches!(event["action"].as_str(), Some(APPROVE | APPROVE_ALWAYS | DENY)) => None,
        "PermissionDecided" => {
            let by = match (event["reason"].as_str(), event["principal"].as_str()) {
                (Some("timed_out"), _) => "by its timeout".to_owned(),
                (_, Some(principal)) => format!("by {}", cell(principal)),
                _ => "by a person".to_owned(),
            };
            let tool = cell(event["subject"].as_str().unwrap_or(""));
            Some(match event["effect"].as_str().unwrap_or("") {
                "approve" if event["edited"] == true => {
                    format!("approved  {}  {tool}, edited ({by})", gate(&event["gate_id"]))
                }
                "approve" => format!("approved  {}  {tool} ({by})", gate(&event["gate_id"])),
                _ => match event["message"].as_str().filter(|m| !m.is_empty()) {
                    Some(message) => {
                        format!("denied    {}  {tool}: {} ({by})", gate(&event["gate_id"]), quoted(&json!(message)))
                    }
                    None => format!("denied    {}  {tool} ({by})", gate(&event["gate_id"])),
                },
            })
        }
        "GateResolved" => Some(match event["reason"].as_str().unwrap_or("") {
            reason @ ("answered" | "policy_response") => format!(
                "answered  {}  {} ({})",
                gate(&event["gate_id"]),
                quoted(&event["audit"]["data"]["answer_preview"]),
                match (reason, event["source"]["principal"].as_str()) {
                    ("answered", Some(principal)) => format!("by {}", cell(principal)),
                    ("answered", None) => "by a person".to_owned(),
                    _ => "by its timeout".to_owned(),
                }
            ),
            reason => format!("closed    {}  ({})", gate(&event["gate_id"]), cell(reason)),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_changes_show_control_characters_escaped() {
        let hostile = "Q\u{1b}]52;c;eA==\u{7}\u{202e}x";
        let view = serde_json::json!({
            "session_id": "s\u{1b}[2Jxxxxxxxx", "state": "open", "opened_at": "",
            "gate": {"id": "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f", "prompt": {"body": hostile,
                     "schema": {"fields": [{"options": [{"value": "a\u{9b}"}]}]}}},
        });
        let line = row(&view);
        assert!(line.starts_with("9d3e4f50  s\\u{1b}[2Jxx"), "{line}");
        assert!(line.contains("Q\\u{1b}]52;c;eA==\\u{7}\\u{202e}x") && line.contains("a\\u{9b}"), "{line}");
        let answered = serde_json::json!({"type": "GateResolved", "gate_id": "9d3e4f50-6a7b", "reason": "answered",
            "source": {"principal": "eve\u{202e}"}, "audit": {"data": {"answer_preview": "y\u{1b}es"}}});
        assert_eq!(describe(&answered).unwrap(), "answered  9d3e4f50  \"y\\u{1b}es\" (by eve\\u{202e})");
        let opened = serde_json::json!({"type": "GateOpened", "gate": {"id": "9d3e4f50", "prompt": {"body": hostile}}});
        assert_eq!(describe(&opened).unwrap(), "opened    9d3e4f50  \"Q\\u{1b}]52;c;eA==\\u{7}\\u{202e}x\"");
        for line in [line, describe(&answered).unwrap(), describe(&opened).unwrap()] {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    #[test]
    fn permission_rows_and_changes_name_the_tool_escaped() {
        let view = serde_json::json!({
            "session_id": "a1b2c3d4-0000", "state": "open", "opened_at": "",
            "gate": {"id": "7572f04a-c9bb", "kind": "harness.permission",
                     "prompt": {"body": "ignored", "controls": [{"action": "Approve"}, {"action": APPROVE_ALWAYS},
                                                              {"action": "Deny"}]},
                     "tool_call": {"tool_name": "Ba\u{1b}[2Jsh\nrm", "risk": "high", "summary": "git push",
                                   "editable": true}},
        });
        let line = row(&view);
        assert!(line.contains("  permission  Ba\\u{1b}[2Jsh\\nrm [high]: git pu"), "{line}");
        assert!(line.ends_with("approve (editable), approve-always, deny"), "{line}");
        let opened = serde_json::json!({"type": "GateOpened", "gate": view["gate"]});
        assert_eq!(describe(&opened).unwrap(), "opened    7572f04a  permission Ba\\u{1b}[2Jsh\\nrm [high]: git push");
        let resolved = serde_json::json!({"type": "GateResolved", "gate_id": "7572f04a", "reason": "answered",
                                          "action": "Deny"});
        assert_eq!(describe(&resolved), None, "PermissionDecided tells it");
        let denied = serde_json::json!({"type": "PermissionDecided", "gate_id": "7572f04a", "effect": "deny",
            "reason": "denied", "subject": "Bash", "message": "not\u{202e} now", "principal": "alice"});
        assert_eq!(describe(&denied).unwrap(), "denied    7572f04a  Bash: \"not\\u{202e} now\" (by alice)");
        let edited = serde_json::json!({"type": "PermissionDecided", "gate_id": "7572f04a", "effect": "approve",
            "reason": "approved", "subject": "Bash", "edited": true});
        assert_eq!(describe(&edited).unwrap(), "approved  7572f04a  Bash, edited (by a person)");
        let timed_out = serde_json::json!({"type": "PermissionDecided", "gate_id": "7572f04a", "effect": "deny",
            "reason": "timed_out", "subject": "Bash"});
        assert_eq!(describe(&timed_out).unwrap(), "denied    7572f04a  Bash (by its timeout)");
        for line in [line, describe(&opened).unwrap(), describe(&denied).unwrap()] {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    #[test]
    fn form_and_open_url_rows_name_the_fields_and_the_site() {
        let form = serde_json::json!({
            "session_id": "a1b2c3d4-0000", "state": "open", "opened_at": "",
            "gate": {"id": "3b0c9e12-0000", "kind": "harness.form",
                     "prompt": {"title": "Deploy", "body": "Where\nto?",
                                "schema": {"fields": [{"name": "env", "options": [{"value": "prod"}]},
                                                      {"name": "tick\u{1b}et"}]}}},
        });
        let line = row(&form);
        assert!(line.contains("  form        Where to?") && line.ends_with("fields: env, tick\\u{1b}et"), "{line}");
        let open_url = serde_json::json!({
            "session_id": "a1b2c3d4-0000", "state": "open", "opened_at": "",
            "gate": {"id": "51d07a3f-0000", "kind": "harness.open_url",
                     "prompt": {"body": "Sign in", "origin": "https://github.com"}},
        });
        let line = row(&open_url);
        assert!(line.contains("  open_url    https://github.com: Sign in"), "{line}");
        assert!(line.ends_with("--done, --decline, --cancel"), "{line}");
        let opened = serde_json::json!({"type": "GateOpened", "gate": open_url["gate"]});
        assert_eq!(describe(&opened).unwrap(), "opened    51d07a3f  open_url \"https://github.com: Sign in\"");
        let accepted = serde_json::json!({"type": "GateResolved", "gate_id": "3b0c9e12", "reason": "answered",
                                          "action": "accept", "source": {"principal": "alice"}});
        assert_eq!(describe(&accepted).unwrap(), "accepted  3b0c9e12  (by alice)");
        let timed_out = serde_json::json!({"type": "GateResolved", "gate_id": "3b0c9e12",
                                           "reason": "policy_response", "action": "cancel"});
        assert_eq!(describe(&timed_out).unwrap(), "cancelled 3b0c9e12  (by its timeout)");
    }

    #[test]
    fn parses_what_the_server_renders() {
        let t = Timestamp::from_nanos(1_796_040_000_123_456_789);
        assert_eq!(Timestamp::parse(&t.to_string()), Some(t));
    }
}
