//! `gatehouse gates`: the open gates (or all with --all) as a table; --watch then prints one line
//! per change, live. Gate ids show as their first eight characters, which `gatehouse answer`
//! takes as a prefix. Text from others is escaped for the terminal.

use std::process::ExitCode;

use serde_json::Value;

use super::client::Api;
use super::sse::Reader;
use super::terminal::{Lines, escape};
use super::{say, server_backoff, short};
use crate::config::GatesArgs;
use crate::domain::Timestamp;

pub async fn run(args: GatesArgs) -> ExitCode {
    let Ok(api) = super::connect("gates", &args.client) else { return ExitCode::FAILURE };
    let (gates, head) = match snapshot(&api, args.all).await {
        Ok(snapshot) => snapshot,
        Err(message) => {
            eprintln!("gatehouse gates: {message}");
            return ExitCode::FAILURE;
        }
    };
    say(&format!("{:<8}  {:<8}  {:<8}  {:<8}  {:<30}  CHOICES", "GATE", "SESSION", "STATE", "AGE", "QUESTION"));
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
    let question: String = view["gate"]["prompt"]["body"].as_str().unwrap_or("").chars().take(30).collect();
    let choices: Vec<&str> = view["gate"]["prompt"]["schema"]["fields"][0]["options"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["value"].as_str())
        .collect();
    format!(
        "{:<8}  {:<8}  {:<8}  {:<8}  {:<30}  {}",
        cell(short(view["gate"]["id"].as_str().unwrap_or(""))),
        cell(short(view["session_id"].as_str().unwrap_or(""))),
        cell(view["state"].as_str().unwrap_or("")),
        age(view["opened_at"].as_str().unwrap_or("")),
        // A question's line breaks read best as spaces in a one-line cell.
        cell(&question.replace(['\n', '\r'], " ")),
        cell(&choices.join(", "))
    )
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
        "GateOpened" => {
            Some(format!("opened    {}  {}", gate(&event["gate"]["id"]), quoted(&event["gate"]["prompt"]["body"])))
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
    fn parses_what_the_server_renders() {
        let t = Timestamp::from_nanos(1_796_040_000_123_456_789);
        assert_eq!(Timestamp::parse(&t.to_string()), Some(t));
    }
}
