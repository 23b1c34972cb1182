//! `gatehouse ask`: open a gate, wait for its answer (riding out server restarts), print it, and
//! acknowledge the loop command it produced. Exit codes (spec §11): 0 answered, 2 withdrawn,
//! 3 timed out without a default (after withdrawing the gate), 130 interrupted (after
//! withdrawing), 1 anything else.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::client::{Api, ClientError, Reply};
use super::{say, server_backoff};
use crate::config::AskArgs;

const INTERRUPTED: u8 = 130;
const WITHDRAWN: u8 = 2;
const TIMED_OUT: u8 = 3;

/// Where a question ended.
enum Ending {
    /// Answered (by a person or by the default): the final view.
    Answered(Value),
    /// Withdrawn by its owner or abandoned.
    Withdrawn(Value),
    /// The client deadline passed without an answer (and without a default).
    TimedOut,
}

/// The gate this `ask` waits for.
struct Asked {
    api: Api,
    session: String,
    loop_id: String,
    gate: String,
}

pub async fn run(args: AskArgs) -> ExitCode {
    let Ok(api) = super::connect("ask", &args.client) else { return ExitCode::FAILURE };
    let fresh = || uuid::Uuid::new_v4().to_string();
    let session = args.session.clone().unwrap_or_else(fresh);
    let loop_id = args.loop_id.clone().unwrap_or_else(fresh);
    let tool = args.tool_execution_id.clone().unwrap_or_else(fresh);

    let opened = tokio::select! {
        opened = open(&api, &session, &loop_id, &tool, &args) => opened,
        _ = tokio::signal::ctrl_c() => return ExitCode::from(INTERRUPTED),
    };
    let view = match opened {
        Ok(view) => view,
        Err(message) => {
            eprintln!("gatehouse ask: {message}");
            return ExitCode::FAILURE;
        }
    };
    let gate = view["gate"]["id"].as_str().unwrap_or_default().to_owned();
    let asked = Asked { api, session, loop_id, gate };
    // With a default the server answers at the deadline; without one, the deadline is ours.
    let deadline = args.timeout.filter(|_| args.default.is_none()).map(|t| Instant::now() + t);

    let ending = tokio::select! {
        ending = asked.wait(deadline) => ending,
        _ = tokio::signal::ctrl_c() => {
            if let Err(message) = asked.withdraw().await {
                eprintln!("gatehouse ask: interrupted, and could not withdraw gate {}: {message}", asked.gate);
            }
            return ExitCode::from(INTERRUPTED);
        }
    };
    match ending {
        Ending::Answered(view) => {
            if args.json {
                say(&view.to_string());
            } else {
                say(view["answer"].as_str().unwrap_or_default());
            }
            if let Err(message) = asked.ack().await {
                eprintln!("gatehouse ask: answered, but could not acknowledge the command: {message}");
            }
            ExitCode::SUCCESS
        }
        Ending::Withdrawn(view) => {
            if args.json {
                say(&view.to_string());
            }
            let reason = view["resolution"]["reason"].as_str().unwrap_or("closed");
            eprintln!("gatehouse ask: the gate was withdrawn ({reason})");
            ExitCode::from(WITHDRAWN)
        }
        Ending::TimedOut => {
            eprintln!("gatehouse ask: no answer in time; the gate was withdrawn");
            ExitCode::from(TIMED_OUT)
        }
    }
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
                Ok(reply) if !reply.retryable() => {
                    eprintln!("gatehouse ask: {}", reply.message());
                    backoff.wait().await;
                }
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
