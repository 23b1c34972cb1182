//! `gatehouse answer GATE_ID ANSWER`: answer an open gate. Exit 0 accepted; 2 the gate was
//! already resolved or closed (the winner on stderr); 1 otherwise.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::client::{Api, Reply};
use super::server_backoff;
use crate::config::AnswerArgs;

const TOO_LATE: u8 = 2;

pub async fn run(args: AnswerArgs) -> ExitCode {
    let Ok(api) = super::connect("answer", &args.client) else { return ExitCode::FAILURE };
    match answer(&api, &args.gate_id, &args.answer).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gatehouse answer: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn answer(api: &Api, gate: &str, text: &str) -> Result<ExitCode, String> {
    let found = api.get(&format!("/v1/gates/{gate}")).await.map_err(|e| e.to_string())?;
    if !found.ok() {
        return Err(found.message());
    }
    let session = found.body["session_id"].as_str().unwrap_or_default();
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
    match (resolution["reason"].as_str().unwrap_or(""), answer) {
        ("answered", Some(answer)) => format!("already answered {answer:?} by a person at {at}"),
        ("policy_response", Some(answer)) => format!("already answered {answer:?} by its timeout at {at}"),
        (reason, _) => format!("the gate is already closed ({reason}) since {at}"),
    }
}
