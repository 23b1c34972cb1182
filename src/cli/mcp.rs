//! `gatehouse mcp`: a Model Context Protocol server over stdio, on the official Rust SDK (`rmcp`),
//! that lets the agent of an MCP client (a coding agent, a desktop assistant) ask a person
//! through a gatehouse server, over its HTTP API:
//!
//! - `ask_user` opens a gate and returns the answer once a person gives it (or the default at
//!   the deadline); a withdrawn gate, or no answer in time without a default, is a tool error.
//! - `approve_tool_call` asks whether a tool call may run, with the choices `allow` and `deny`
//!   (or a reason typed instead), and returns what coding agents' permission-prompt tools expect:
//!   `{"behavior":"allow","updatedInput":…}` or `{"behavior":"deny","message":…}`.
//!
//! **One question, one gate.** A call's gate is found again, not opened twice, when the call is
//! retried: its tool execution id is derived from the tool, its arguments, and the client's
//! `_meta["gatehouse/call_id"]` when it sends one. Without that id, identical calls share one
//! gate while it waits and while its answer is not yet taken; once an answer was returned (its
//! command acknowledged) or the gate was withdrawn, the same question asked again is a new gate.
//! The session (`--session`) and loop are stable, so this holds across restarts of this server.
//!
//! While a call waits it sends progress notifications when the client asked for them; a call
//! the client cancels withdraws its gate. Only MCP messages go to stdout; logs go to stderr.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;

use super::asking::{self, Asked, Ending, Question};
use super::client::Api;
use crate::config::McpArgs;

/// How often a waiting call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The longest question a gate takes (bytes); an approval's input is cut to fit.
const MAX_QUESTION: usize = 4096;
/// Identical questions already answered that a call looks past before opening a new gate.
const MAX_GENERATIONS: u32 = 1000;
/// The `_meta` key of a client's own id for a tool call (stable across its retries).
const CALL_ID: &str = "gatehouse/call_id";

/// The arguments of `ask_user`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUser {
    /// The question for the person, in full: they see only this (and the choices).
    pub question: String,
    /// Answers to choose from; without them the answer is free text.
    #[serde(default)]
    pub choices: Option<Vec<String>>,
    /// With choices: also accept an answer that is none of them.
    #[serde(default)]
    pub allow_other: Option<bool>,
    /// Stop waiting after this many seconds: answer with `default`, or fail without one.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// The answer when nobody answers within `timeout_seconds`.
    #[serde(default)]
    pub default: Option<String>,
}

/// The arguments of `approve_tool_call`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveToolCall {
    /// The tool the agent wants to call.
    pub tool_name: String,
    /// The input it wants to call it with.
    pub input: Value,
}

/// The MCP server: one gatehouse session, one loop in it.
#[derive(Clone)]
pub struct Gatehouse {
    api: Api,
    url: String,
    session: String,
    loop_id: String,
    tool_router: ToolRouter<Self>,
}

pub async fn run(args: McpArgs) -> ExitCode {
    let Ok(api) = super::connect("mcp", &args.client) else { return ExitCode::FAILURE };
    let session = match &args.session {
        Some(session) => match uuid::Uuid::try_parse(session) {
            Ok(id) if !id.is_nil() => id.to_string(),
            _ => {
                eprintln!("gatehouse mcp: --session {session:?} is not a UUID");
                return ExitCode::FAILURE;
            }
        },
        None => uuid::Uuid::new_v4().to_string(),
    };
    // The loop is this MCP server's, in its session: the same for every run with the session.
    let loop_id = derived_id(&json!({"loop": "gatehouse mcp", "session": session}));
    tracing::info!(%session, url = %args.client.url, "gatehouse MCP server on stdio");
    let server =
        Gatehouse { api, url: args.client.url.clone(), session, loop_id, tool_router: Gatehouse::tool_router() };
    let service = match server.serve(rmcp::transport::stdio()).await {
        Ok(service) => service,
        Err(e) => {
            eprintln!("gatehouse mcp: the MCP client did not complete the handshake: {e}");
            return ExitCode::FAILURE;
        }
    };
    match service.waiting().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

#[tool_router]
impl Gatehouse {
    #[tool(description = "Ask a person a question and wait for their answer (through gatehouse). Returns the answer \
                       text. With choices the answer is one of them (or free text with allow_other). With \
                       timeout_seconds the call ends at the deadline: with `default` that is the answer, without \
                       it the call fails. Retrying the same call finds the same question.")]
    async fn ask_user(
        &self,
        Parameters(args): Parameters<AskUser>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let identity = json!({"tool": "ask_user", "arguments": args_json(&args)});
        let question = Question {
            text: args.question,
            choices: args.choices.unwrap_or_default(),
            allow_other: args.allow_other.unwrap_or(false),
            timeout: args.timeout_seconds.map(Duration::from_secs),
            default: args.default,
            title: None,
        };
        Ok(match self.ask(identity, &question, &ctx).await {
            Ok(answer) => CallToolResult::success(vec![ContentBlock::text(answer)]),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        })
    }

    #[tool(description = "Ask a person whether a tool call may run (through gatehouse), and wait for the decision. \
                       Returns JSON text: {\"behavior\":\"allow\",\"updatedInput\":<input>} or \
                       {\"behavior\":\"deny\",\"message\":<why>}, the shape of a permission-prompt tool.")]
    async fn approve_tool_call(
        &self,
        Parameters(args): Parameters<ApproveToolCall>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let identity =
            json!({"tool": "approve_tool_call", "arguments": {"tool_name": args.tool_name, "input": args.input}});
        let question = Question {
            text: approval_question(&args.tool_name, &args.input),
            choices: vec!["allow".into(), "deny".into()],
            allow_other: true,
            timeout: None,
            default: None,
            title: Some(format!("Allow {}?", args.tool_name)),
        };
        Ok(match self.ask(identity, &question, &ctx).await {
            Ok(answer) => CallToolResult::success(vec![ContentBlock::text(decision(&answer, args.input).to_string())]),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Gatehouse {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Use ask_user when you need a decision or information only a person has; use approve_tool_call \
                 before a tool call that needs a person's permission. Both wait until the person answers.",
            )
    }
}

impl Gatehouse {
    /// Asks `question` as the call `identity` and waits: `Ok(answer)`, or a tool error's text.
    async fn ask(
        &self,
        identity: Value,
        question: &Question,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let explicit = ctx.meta.get(CALL_ID).and_then(Value::as_str).map(str::to_owned);
        let (asked, view) = self.find_or_open(identity, explicit, question).await?;
        let ending = match asking::ending_of(view) {
            Some(ending) => ending,
            None => self.wait(&asked, question, ctx).await?,
        };
        match ending {
            Ending::Answered(view) => {
                if let Err(e) = asked.ack().await {
                    tracing::warn!(gate = %asked.gate, error = %e, "answered, but the command was not acknowledged");
                }
                Ok(view["answer"].as_str().unwrap_or_default().to_owned())
            }
            Ending::Withdrawn(view) => Err(format!(
                "the question was withdrawn ({}) before anyone answered it (gate {})",
                view["resolution"]["reason"].as_str().unwrap_or("closed"),
                asked.gate
            )),
            Ending::TimedOut => Err(format!(
                "nobody answered within {} s; the question was withdrawn (gate {})",
                question.timeout.unwrap_or_default().as_secs(),
                asked.gate
            )),
            Ending::Refused(message) => Err(format!("gatehouse stopped showing gate {}: {message}", asked.gate)),
        }
    }

    /// The gate of this call: an explicit call id names exactly one gate; without one, the
    /// first generation of this question whose answer was not yet taken (or a new one).
    async fn find_or_open(
        &self,
        identity: Value,
        explicit: Option<String>,
        question: &Question,
    ) -> Result<(Asked, Value), String> {
        let fail = |message: String| format!("{message} (gatehouse at {})", self.url);
        for generation in 0..MAX_GENERATIONS {
            let tool = derived_id(&json!({"call": identity, "call_id": explicit, "generation": generation}));
            let view = asking::open(&self.api, &self.session, &self.loop_id, &tool, question).await.map_err(fail)?;
            let asked = Asked {
                api: self.api.clone(),
                session: self.session.clone(),
                loop_id: self.loop_id.clone(),
                gate: view["gate"]["id"].as_str().unwrap_or_default().to_owned(),
                who: "mcp",
            };
            let taken = match view["state"].as_str() {
                Some("open") => false,
                _ if explicit.is_some() => false,
                Some("closed") => true,
                _ => asked.acked().await.map_err(fail)?,
            };
            if !taken {
                return Ok((asked, view));
            }
        }
        Err(format!("this question was asked {MAX_GENERATIONS} times already in session {}", self.session))
    }

    /// Waits for the gate to leave `open`, reporting progress, until the deadline (then the gate
    /// is withdrawn) or until the client cancels the call (then it is withdrawn too).
    async fn wait(
        &self,
        asked: &Asked,
        question: &Question,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Ending, String> {
        let progress = ctx.meta.get_progress_token();
        let started = Instant::now();
        let waiting = asked.wait(question.deadline());
        tokio::pin!(waiting);
        let mut ticks = tokio::time::interval(PROGRESS_EVERY);
        loop {
            tokio::select! {
                ending = &mut waiting => return Ok(ending),
                () = ctx.ct.cancelled() => {
                    let withdrawn = asked.withdraw().await;
                    tracing::info!(gate = %asked.gate, ?withdrawn, "the call was cancelled; its gate withdrawn");
                    return Err(format!("the call was cancelled; gate {} was withdrawn", asked.gate));
                }
                _ = ticks.tick() => {
                    let Some(token) = &progress else { continue };
                    let waited = started.elapsed().as_secs_f64();
                    let message = format!(
                        "waiting for a person to answer gate {} (answer with: gatehouse answer {} <answer>)",
                        asked.gate, asked.gate
                    );
                    let note = ProgressNotificationParam::new(token.clone(), waited).with_message(message);
                    if let Err(e) = ctx.peer.notify_progress(note).await {
                        tracing::debug!(error = %e, "a progress notification was not sent");
                    }
                }
            }
        }
    }
}

/// The arguments as they identify a call: every member, defaults spelled out.
fn args_json(args: &AskUser) -> Value {
    json!({
        "question": args.question, "choices": args.choices, "allow_other": args.allow_other,
        "timeout_seconds": args.timeout_seconds, "default": args.default,
    })
}

/// A UUID made from `material` (version 8: derived, not random), so the same call always names
/// the same gate.
fn derived_id(material: &Value) -> String {
    let digest = sha2::Sha256::digest(material.to_string().as_bytes());
    let bytes: [u8; 16] = digest[..16].try_into().expect("16 bytes of a SHA-256");
    uuid::Uuid::new_v8(bytes).to_string()
}

/// What the person is shown for an approval: the tool, and its input as JSON (cut to fit).
fn approval_question(tool_name: &str, input: &Value) -> String {
    let head =
        format!("Allow the tool call {tool_name}? Answer allow or deny, or type why it should not run.\n\nInput:\n");
    let mut input = serde_json::to_string_pretty(input).unwrap_or_default();
    let room = MAX_QUESTION.saturating_sub(head.len() + "\n…".len());
    if head.len() + input.len() > MAX_QUESTION {
        let mut end = room.min(input.len());
        while !input.is_char_boundary(end) {
            end -= 1;
        }
        input.truncate(end);
        input.push_str("\n…");
    }
    head + &input
}

/// The permission-prompt answer for the person's choice.
fn decision(answer: &str, input: Value) -> Value {
    match answer {
        "allow" => json!({"behavior": "allow", "updatedInput": input}),
        "deny" => json!({"behavior": "deny", "message": "A person denied this tool call."}),
        reason => json!({"behavior": "deny", "message": reason}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_call_names_the_same_gate() {
        let a = derived_id(&json!({"call": {"question": "Deploy?"}, "generation": 0}));
        assert_eq!(a, derived_id(&json!({"call": {"question": "Deploy?"}, "generation": 0})));
        assert_ne!(a, derived_id(&json!({"call": {"question": "Deploy?"}, "generation": 1})));
        assert_eq!(uuid::Uuid::try_parse(&a).unwrap().get_version_num(), 8);
    }

    #[test]
    fn approvals_fit_a_gate_and_map_to_permission_answers() {
        let huge = json!({"command": "x".repeat(10_000)});
        let question = approval_question("Bash", &huge);
        assert!(question.len() <= MAX_QUESTION && question.ends_with('…'), "{}", question.len());
        assert!(approval_question("Bash", &json!({"command": "ls"})).contains("\"command\": \"ls\""));
        let input = json!({"command": "rm -rf build"});
        assert_eq!(decision("allow", input.clone()), json!({"behavior": "allow", "updatedInput": input}));
        assert_eq!(decision("deny", input.clone())["behavior"], "deny");
        assert_eq!(decision("not on a Friday", input), json!({"behavior": "deny", "message": "not on a Friday"}));
    }
}
