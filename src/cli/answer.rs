//! `gatehouse answer GATE_ID ANSWER`: answer an open gate, named by its whole id or by a unique
//! prefix of at least 8 hex digits (the short ids `gatehouse gates` shows). Exit 0 accepted; 2 the
//! gate was already resolved or closed (the winner on stderr); 1 otherwise (an unknown or
//! ambiguous prefix too).

use std::process::ExitCode;

use serde_json::{Value, json};

use super::client::{Api, Reply};
use super::server_backoff;
use super::terminal::{Lines, escape};
use crate::config::AnswerArgs;
use crate::domain::GateId;

const TOO_LATE: u8 = 2;
/// The shortest prefix taken: what `gatehouse gates` shows.
const SHORTEST_PREFIX: usize = 8;

pub async fn run(args: AnswerArgs) -> ExitCode {
    let Ok(api) = super::connect("answer", &args.client) else { return ExitCode::FAILURE };
    let outcome = match GateRef::parse(&args.gate_id) {
        Ok(gate) => answer(&api, &gate, &args.answer).await,
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

/// Text from the server or the command line, escaped for one line of the terminal.
fn quote(text: &str) -> String {
    escape(text, Lines::Escape).into_owned()
}

async fn answer(api: &Api, gate: &GateRef, text: &str) -> Result<ExitCode, String> {
    let found = find(api, gate).await?;
    let (session, gate) = (found["session_id"].as_str().unwrap_or_default(), id_of(&found));
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let body = json!({"action": "answer", "values": {"answer": text}});
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

/// Says who won, in words.
async fn winner(api: &Api, gate: &str, reply: &Reply) -> String {
    let resolution = &reply.body["error"]["resolution"];
    let view: Value = api.get(&format!("/v1/gates/{gate}")).await.map(|r| r.body).unwrap_or_default();
    let answer = view["answer"].as_str();
    let at = resolution["created_at"].as_str().unwrap_or("earlier");
    let (answer, at) = (answer.map(quote), quote(at));
    match (resolution["reason"].as_str().unwrap_or(""), answer) {
        ("answered", Some(answer)) => {
            let by = resolution["source"]["principal"].as_str().map_or("a person".to_owned(), quote);
            format!("already answered \"{answer}\" by {by} at {at}")
        }
        ("policy_response", Some(answer)) => format!("already answered \"{answer}\" by its timeout at {at}"),
        (reason, _) => format!("the gate is already closed ({}) since {at}", quote(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
