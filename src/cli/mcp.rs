//! `gatehouse mcp`: a Model Context Protocol server over stdio, on the official Rust SDK (`rmcp`),
//! that lets the agent of an MCP client (a coding agent, a desktop assistant) ask a person
//! through a gatehouse server, over its HTTP API:
//!
//! - `ask_user` opens a gate and returns the answer once a person gives it (or the default at
//!   the deadline); a withdrawn gate, or no answer in time without a default, is a tool error.
//! - `ask_form` opens a form gate (`harness.form`) with the agent's fields (gatehouse's, or a
//!   JSON Schema) and returns the person's reply as structured content: `{"action", "values",
//!   "principal", "timed_out"}`; declining or cancelling is a reply, not an error.
//! - `approve_tool_call` opens a permission gate (`harness.permission`) for a tool call, and
//!   returns the decision as structured content: `{"approved", "tool_input", "edited", "reason",
//!   "principal", "timed_out"}` (its JSON as the text too).
//! - `permission_prompt` speaks Claude Code's `--permission-prompt-tool` contract: it opens an
//!   editable permission gate for `{tool_name, input, tool_use_id?}` and returns one text, the
//!   JSON `{"behavior":"allow","updatedInput":…}` or `{"behavior":"deny","message":…}`. Whatever
//!   goes wrong (a withdrawn gate, an unreachable server) is a denial saying why: the call never
//!   runs without a person's approval.
//!
//! **One question, one gate.** A call's gate is found again, not opened twice, when the call is
//! retried: its tool execution id is derived from the tool, its arguments, and the client's own
//! id for the call when it sends one (`permission_prompt`'s `tool_use_id`, or
//! `_meta["gatehouse/call_id"]`). Without that id, identical calls share one gate while it waits
//! and while its answer is not yet taken; once an answer was returned (its command acknowledged)
//! or the gate was withdrawn, the same question asked again is a new gate. The session
//! (`--session`) and loop are stable, so this holds across restarts of this server.
//!
//! While a call waits it sends progress notifications when the client asked for them; a call
//! the client cancels withdraws its gate. Only MCP messages go to stdout; logs go to stderr.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::Digest;

use super::asking::{self, Approval, Asked, Decision, Ending, Form, FormReply, FormSchema, Question};
use super::client::Api;
use crate::config::McpArgs;
use crate::domain::form::{ACCEPT, DECLINE};

/// How often a waiting call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
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

/// The arguments of `ask_form`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskForm {
    /// A short title for the form (default: "Input requested").
    #[serde(default)]
    pub title: Option<String>,
    /// What you need from the person and why, in full: they read it above the fields.
    pub message: String,
    /// The fields, in the order shown (give these or `json_schema`, not both).
    #[serde(default)]
    pub fields: Option<Vec<FormField>>,
    /// Instead of `fields`: a JSON Schema of an object (`type: object`, `properties`,
    /// `required`), each property a field. Its properties may be shown in alphabetical order;
    /// use `fields` when the order matters.
    #[serde(default)]
    pub json_schema: Option<Map<String, Value>>,
    /// Cancel the form when nobody answers within this many seconds (the reply is then
    /// `cancel` with `timed_out`).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// One field of a form, as gatehouse takes it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FormField {
    /// The field's key in the values (unique among its siblings).
    pub name: String,
    /// What the person sees (default: the name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What the field takes: text, email, url, date (YYYY-MM-DD), date_time (RFC 3339), select
    /// (one option's value), multi_select (an array of option values), confirm (a boolean),
    /// number, integer, group (an object of its `fields`), list (an array of such objects).
    pub kind: FieldKind,
    /// Whether it must be filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// The choices of a select or multi_select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<FieldOption>>,
    /// Help text shown with the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The value filled in at first (it must itself be valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The fewest characters a text, email or url takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// The most characters a text, email or url takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// The least a number or integer may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<serde_json::Number>,
    /// The most a number or integer may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<serde_json::Number>,
    /// The fewest items a multi_select, or rows a list, takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// The most items a multi_select, or rows a list, takes (at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// The nested fields of a group or list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FormField>>,
    /// Anything else is passed on as it is, for the server to take or refuse: nothing asked
    /// for is dropped.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    Text,
    Email,
    Url,
    Date,
    DateTime,
    Select,
    MultiSelect,
    Confirm,
    Number,
    Integer,
    Group,
    List,
}

/// A choice of a select or multi_select.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FieldOption {
    /// What the values hold when it is chosen.
    pub value: String,
    /// What the person sees (default: the value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The arguments of `approve_tool_call`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveToolCall {
    /// The tool the agent wants to call.
    pub tool_name: String,
    /// The input it wants to call it with (a JSON object).
    pub input: Map<String, Value>,
    /// The JSON Schema of the input: a person's edit must fit it.
    #[serde(default)]
    pub tool_input_schema: Option<Value>,
    /// Let the person edit the input before approving it.
    #[serde(default)]
    pub editable: Option<bool>,
    /// How risky the call is, as the person is shown.
    #[serde(default)]
    pub risk: Option<Risk>,
    /// What the call does, in a line (shown first; default: the tool's name).
    #[serde(default)]
    pub summary: Option<String>,
    /// Deny the call when nobody decides within this many seconds (default: the server's
    /// permission timeout, 5 minutes unless it was set otherwise).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
    Critical,
}

/// The arguments of `permission_prompt`: what Claude Code sends its `--permission-prompt-tool`.
/// Unknown members are ignored rather than refused, so that a client that sends more still gets
/// a decision.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct PermissionPrompt {
    /// The tool the agent wants to call.
    pub tool_name: String,
    /// The input it wants to call it with (a JSON object).
    pub input: Map<String, Value>,
    /// The client's id of this tool use: a retry with it finds the same decision.
    #[serde(default)]
    pub tool_use_id: Option<String>,
}

/// What `approve_tool_call` returns (as structured content, and its JSON as text).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ToolCallDecision {
    /// Whether the call may run.
    pub approved: bool,
    /// The input it may run with: as asked, or as the person edited it (null when denied).
    pub tool_input: Option<Map<String, Value>>,
    /// Whether the person edited the input.
    pub edited: bool,
    /// The person's reason for a denial, when they gave one.
    pub reason: Option<String>,
    /// Who decided, when the server knows.
    pub principal: Option<String>,
    /// Denied because nobody decided in time (by the gate's policy).
    pub timed_out: bool,
}

impl ToolCallDecision {
    fn of(decision: Decision) -> Self {
        let tool_input = match decision.tool_input {
            Some(Value::Object(input)) if decision.approved => Some(input),
            _ => None,
        };
        Self {
            approved: decision.approved,
            tool_input,
            edited: decision.edited,
            reason: decision.reason,
            principal: decision.principal,
            timed_out: decision.by_policy,
        }
    }
}

/// What `ask_form` returns (as structured content, and its JSON as text).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FormResult {
    /// `accept` (the person submitted the form), `decline` (they refused to give what was asked)
    /// or `cancel` (they dismissed it, or nobody answered in time).
    pub action: FormAction,
    /// The submitted values by field name (only with `accept`, else null).
    pub values: Option<Map<String, Value>>,
    /// Who answered, when the server knows.
    pub principal: Option<String>,
    /// Cancelled because nobody answered within `timeout_seconds`.
    pub timed_out: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FormAction {
    Accept,
    Decline,
    Cancel,
}

impl FormResult {
    fn of(reply: FormReply) -> Self {
        let action = match reply.action.as_str() {
            ACCEPT => FormAction::Accept,
            DECLINE => FormAction::Decline,
            _ => FormAction::Cancel,
        };
        let values = match reply.values {
            Some(Value::Object(values)) if action == FormAction::Accept => Some(values),
            _ => None,
        };
        Self { action, values, principal: reply.principal, timed_out: reply.by_policy }
    }
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

    #[tool(
        description = "Ask a person to fill in a form (through gatehouse) and wait for their reply. Use it when you \
                       need several pieces of structured input at once (a deploy target and a ticket number, a \
                       date, a confirmation) instead of several ask_user calls. Give a `message` (what you need \
                       and why) and either `fields` or `json_schema`. Field kinds: text, email, url, date \
                       (YYYY-MM-DD), date_time (RFC 3339), select and multi_select (with `options`), confirm \
                       (boolean), number, integer, group and list (with nested `fields`); `required`, `default` \
                       and bounds as in the schema. A json_schema is an object schema whose properties use type \
                       string (with enum, or format email, uri, date, date-time), number, integer, boolean, \
                       array (of enum strings, or of objects) or object; any other keyword is refused. Returns \
                       {action, values, principal, timed_out}: action \"accept\" with the values by field name; \
                       \"decline\" when the person refuses (do not ask again for the same thing); \"cancel\" when \
                       they dismiss it, or nobody answers within timeout_seconds (timed_out true). A form the \
                       server refuses is a tool error naming each bad field by its JSON Pointer. Retrying the \
                       same call finds the same form.",
        output_schema = schema_for_output::<FormResult>()
    )]
    async fn ask_form(
        &self,
        Parameters(args): Parameters<AskForm>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let identity = json!({"tool": "ask_form", "arguments": {
            "title": args.title, "message": args.message, "fields": args.fields, "json_schema": args.json_schema,
            "timeout_seconds": args.timeout_seconds,
        }});
        let schema = match (args.fields, args.json_schema) {
            (Some(fields), None) => FormSchema::Harness(json!({"fields": fields})),
            (None, Some(schema)) => match serde_json::value::to_raw_value(&schema) {
                Ok(raw) => FormSchema::JsonSchema(raw),
                Err(e) => return Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())])),
            },
            _ => {
                let message = "give the form's fields either as `fields` or as `json_schema`, one of the two";
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
            }
        };
        let form = Form {
            title: args.title,
            body: args.message,
            schema,
            timeout: args.timeout_seconds.map(Duration::from_secs),
        };
        Ok(match self.fill(identity, &form, &ctx).await {
            Ok(reply) => {
                let result = FormResult::of(reply);
                CallToolResult::structured(serde_json::to_value(result).expect("plain data serialises"))
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        })
    }

    #[tool(
        description = "Ask a person whether a tool call may run (through gatehouse), and wait for the decision. \
                       Opens a permission gate: the person approves the input as it is, approves an edit (with \
                       editable, checked against tool_input_schema), or denies it with a reason. Returns \
                       {approved, tool_input (what the call may run with), edited, reason, principal, timed_out}. \
                       Without a decision within timeout_seconds (default: the server's, 5 minutes) the call is \
                       denied. Retrying the same call finds the same gate.",
        output_schema = schema_for_output::<ToolCallDecision>()
    )]
    async fn approve_tool_call(
        &self,
        Parameters(args): Parameters<ApproveToolCall>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let identity = json!({"tool": "approve_tool_call", "arguments": {
            "tool_name": args.tool_name, "input": args.input, "tool_input_schema": args.tool_input_schema,
            "editable": args.editable, "risk": args.risk, "summary": args.summary,
            "timeout_seconds": args.timeout_seconds,
        }});
        let risk = args.risk.map(|risk| json!(risk).as_str().unwrap_or_default().to_owned());
        let approval = Approval {
            tool_name: args.tool_name,
            input: Value::Object(args.input),
            schema: args.tool_input_schema,
            editable: args.editable.unwrap_or(false),
            risk,
            summary: args.summary,
            requirements: Vec::new(),
            timeout: args.timeout_seconds.map(Duration::from_secs),
        };
        let explicit = call_id(&ctx);
        Ok(match self.decide(identity, explicit, &approval, &ctx).await {
            Ok(decision) => {
                let decision = ToolCallDecision::of(decision);
                CallToolResult::structured(serde_json::to_value(decision).expect("plain data serialises"))
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        })
    }

    #[tool(description = "Claude Code's permission prompt (--permission-prompt-tool): ask a person through \
                       gatehouse whether a tool call may run, and wait for the decision. The person may approve \
                       it, edit its input first, or deny it. Returns JSON text: \
                       {\"behavior\":\"allow\",\"updatedInput\":<input>} or \
                       {\"behavior\":\"deny\",\"message\":<why>}.")]
    async fn permission_prompt(
        &self,
        Parameters(args): Parameters<PermissionPrompt>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let identity =
            json!({"tool": "permission_prompt", "arguments": {"tool_name": args.tool_name, "input": args.input}});
        let approval = Approval {
            tool_name: args.tool_name,
            input: Value::Object(args.input),
            schema: None,
            // The person can fix the arguments instead of denying the call.
            editable: true,
            risk: None,
            summary: None,
            requirements: Vec::new(),
            timeout: None,
        };
        let explicit = args.tool_use_id.or_else(|| call_id(&ctx));
        let decided = self.decide(identity, explicit, &approval, &ctx).await;
        let behavior = permission_behavior(decided, &approval.input);
        Ok(CallToolResult::success(vec![ContentBlock::text(behavior.to_string())]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Gatehouse {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Use ask_user when you need a decision or information only a person has, and ask_form when you \
                 need several structured values from them at once; use approve_tool_call before a tool call that \
                 needs a person's permission (permission_prompt is the same for Claude Code's \
                 --permission-prompt-tool). They wait until the person answers.",
            )
    }
}

/// What a call asks, for the gate it opens.
#[derive(Clone, Copy)]
enum Asking<'a> {
    Question(&'a Question),
    Approval(&'a Approval),
    Form(&'a Form),
}

impl Asking<'_> {
    /// The open body, as JSON text (a form's JSON Schema is sent as its text).
    fn body(self, loop_id: &str, tool: &str) -> Result<Box<RawValue>, String> {
        let body = match self {
            Self::Question(question) => question.body(loop_id, tool)?,
            Self::Approval(approval) => approval.body(loop_id, tool)?,
            Self::Form(form) => return form.body(Some((loop_id, tool))),
        };
        serde_json::value::to_raw_value(&body).map_err(|e| e.to_string())
    }

    /// When the call stops waiting by itself (a permission gate is always decided by the server,
    /// and a form with a timeout is cancelled by it).
    fn deadline(self) -> Option<tokio::time::Instant> {
        match self {
            Self::Question(question) => question.deadline(),
            Self::Approval(_) | Self::Form(_) => None,
        }
    }

    /// The progress line of a call waiting for `gate`.
    fn waiting(self, gate: &str) -> String {
        match self {
            Self::Question(_) => {
                format!("waiting for a person to answer gate {gate} (answer with: gatehouse answer {gate} <answer>)")
            }
            Self::Approval(_) => format!(
                "waiting for a person to decide gate {gate} (decide with: gatehouse answer {gate} approve|deny)"
            ),
            Self::Form(_) => format!(
                "waiting for a person to fill in form gate {gate} (answer with: gatehouse answer {gate} --values \
                 JSON | --decline | --cancel)"
            ),
        }
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
        let asking = Asking::Question(question);
        let (asked, ending) = self.ask_and_wait(identity, call_id(ctx), asking, ctx).await?;
        match ending {
            Ending::Answered(view) => Ok(view["answer"].as_str().unwrap_or_default().to_owned()),
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

    /// Asks for leave to run `approval`'s call as the call `identity` and waits: `Ok(decision)`,
    /// or a tool error's text.
    async fn decide(
        &self,
        identity: Value,
        explicit: Option<String>,
        approval: &Approval,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Decision, String> {
        let (asked, ending) = self.ask_and_wait(identity, explicit, Asking::Approval(approval), ctx).await?;
        match ending {
            Ending::Answered(view) => Decision::of(&view)
                .ok_or_else(|| format!("gate {} was resolved without a decision on the tool call", asked.gate)),
            Ending::Withdrawn(view) => Err(format!(
                "the permission gate was withdrawn ({}) before anyone decided (gate {})",
                view["resolution"]["reason"].as_str().unwrap_or("closed"),
                asked.gate
            )),
            Ending::TimedOut => Err(format!("nobody decided in time (gate {})", asked.gate)),
            Ending::Refused(message) => Err(format!("gatehouse stopped showing gate {}: {message}", asked.gate)),
        }
    }

    /// Asks a person to fill in `form` as the call `identity` and waits: `Ok(reply)` (declined
    /// and cancelled too), or a tool error's text.
    async fn fill(&self, identity: Value, form: &Form, ctx: &RequestContext<RoleServer>) -> Result<FormReply, String> {
        let (asked, ending) = self.ask_and_wait(identity, call_id(ctx), Asking::Form(form), ctx).await?;
        match ending {
            Ending::Answered(view) => FormReply::of(&view)
                .ok_or_else(|| format!("gate {} was resolved without an answer to the form", asked.gate)),
            Ending::Withdrawn(view) => Err(format!(
                "the form was withdrawn ({}) before anyone answered it (gate {})",
                view["resolution"]["reason"].as_str().unwrap_or("closed"),
                asked.gate
            )),
            Ending::TimedOut => Err(format!("nobody answered in time (gate {})", asked.gate)),
            Ending::Refused(message) => Err(format!("gatehouse stopped showing gate {}: {message}", asked.gate)),
        }
    }

    /// Finds or opens the call's gate and waits for its ending; an answered gate's command is
    /// acknowledged (its answer is taken).
    async fn ask_and_wait(
        &self,
        identity: Value,
        explicit: Option<String>,
        asking: Asking<'_>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Asked, Ending), String> {
        let (asked, view) = self.find_or_open(identity, explicit, asking).await?;
        let ending = match asking::ending_of(view) {
            Some(ending) => ending,
            None => self.wait(&asked, asking, ctx).await?,
        };
        if let Ending::Answered(_) = ending
            && let Err(e) = asked.ack().await
        {
            tracing::warn!(gate = %asked.gate, error = %e, "answered, but the command was not acknowledged");
        }
        Ok((asked, ending))
    }

    /// The gate of this call: an explicit call id names exactly one gate; without one, the
    /// first generation of this question whose answer was not yet taken (or a new one).
    async fn find_or_open(
        &self,
        identity: Value,
        explicit: Option<String>,
        asking: Asking<'_>,
    ) -> Result<(Asked, Value), String> {
        let fail = |message: String| format!("{message} (gatehouse at {})", self.url);
        for generation in 0..MAX_GENERATIONS {
            let tool = derived_id(&json!({"call": identity, "call_id": explicit, "generation": generation}));
            let body = asking.body(&self.loop_id, &tool)?;
            let view = asking::open(&self.api, &self.session, &body).await.map_err(fail)?;
            let asked = Asked {
                api: self.api.clone(),
                session: self.session.clone(),
                loop_id: Some(self.loop_id.clone()),
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
        asking: Asking<'_>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Ending, String> {
        let progress = ctx.meta.get_progress_token();
        let started = Instant::now();
        let waiting = asked.wait(asking.deadline());
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
                    let note = ProgressNotificationParam::new(token.clone(), waited).with_message(asking.waiting(&asked.gate));
                    if let Err(e) = ctx.peer.notify_progress(note).await {
                        tracing::debug!(error = %e, "a progress notification was not sent");
                    }
                }
            }
        }
    }
}

/// The client's own id for this call, from `_meta`.
fn call_id(ctx: &RequestContext<RoleServer>) -> Option<String> {
    ctx.meta.get(CALL_ID).and_then(Value::as_str).map(str::to_owned)
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

/// The permission-prompt answer: allow with the input the call runs with, or deny saying why.
/// A call that got no decision (a withdrawn gate, an unreachable server) is denied too, with
/// what went wrong: it must not run unapproved.
fn permission_behavior(decided: Result<Decision, String>, asked_for: &Value) -> Value {
    match decided {
        Ok(decision) if decision.approved => {
            json!({"behavior": "allow", "updatedInput": decision.tool_input.unwrap_or_else(|| asked_for.clone())})
        }
        Ok(decision) => {
            let message = match (decision.reason, decision.principal) {
                (Some(reason), _) => reason,
                _ if decision.by_policy => "Denied by policy: nobody decided in time.".to_owned(),
                (None, Some(principal)) => format!("Denied by {principal}."),
                (None, None) => "Denied by a person.".to_owned(),
            };
            json!({"behavior": "deny", "message": message})
        }
        Err(message) => json!({"behavior": "deny", "message": format!("No decision from gatehouse: {message}")}),
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
    fn decisions_map_to_permission_answers() {
        let asked_for = json!({"command": "rm -rf build"});
        let decision = |approved: bool| Decision {
            approved,
            tool_input: approved.then(|| json!({"command": "rm -rf build/cache"})),
            edited: approved,
            reason: None,
            principal: Some("alice".into()),
            by_policy: false,
        };
        assert_eq!(
            permission_behavior(Ok(decision(true)), &asked_for),
            json!({"behavior": "allow", "updatedInput": {"command": "rm -rf build/cache"}})
        );
        let without_input = Decision { tool_input: None, ..decision(true) };
        assert_eq!(permission_behavior(Ok(without_input), &asked_for)["updatedInput"], asked_for);
        assert_eq!(
            permission_behavior(Ok(decision(false)), &asked_for),
            json!({"behavior": "deny", "message": "Denied by alice."})
        );
        let reasoned = Decision { reason: Some("not on a Friday".into()), ..decision(false) };
        assert_eq!(permission_behavior(Ok(reasoned), &asked_for)["message"], "not on a Friday");
        let timed_out = Decision { by_policy: true, principal: None, ..decision(false) };
        assert!(permission_behavior(Ok(timed_out), &asked_for)["message"].as_str().unwrap().contains("policy"));
        let failed = permission_behavior(Err("cannot reach gatehouse".into()), &asked_for);
        assert_eq!(failed["behavior"], "deny");
        assert!(failed["message"].as_str().unwrap().contains("cannot reach gatehouse"));
    }

    #[test]
    fn structured_decisions_carry_every_member() {
        let approved = ToolCallDecision::of(Decision {
            approved: true,
            tool_input: Some(json!({"command": "ls"})),
            edited: false,
            reason: None,
            principal: None,
            by_policy: false,
        });
        assert_eq!(
            serde_json::to_value(approved).unwrap(),
            json!({"approved": true, "tool_input": {"command": "ls"}, "edited": false, "reason": null,
                   "principal": null, "timed_out": false})
        );
    }

    #[test]
    fn form_replies_carry_values_only_when_accepted() {
        let reply = |action: &str, by_policy: bool| FormReply {
            action: action.into(),
            values: Some(json!({"env": "prod"})),
            principal: Some("alice".into()),
            by_policy,
        };
        assert_eq!(
            serde_json::to_value(FormResult::of(reply("accept", false))).unwrap(),
            json!({"action": "accept", "values": {"env": "prod"}, "principal": "alice", "timed_out": false})
        );
        let timed_out = FormResult::of(reply("cancel", true));
        assert_eq!((timed_out.action, timed_out.values, timed_out.timed_out), (FormAction::Cancel, None, true));
        assert_eq!(FormResult::of(reply("decline", false)).action, FormAction::Decline);
    }

    #[test]
    fn form_fields_pass_on_every_member_given() {
        let given = json!({"name": "rows", "kind": "list", "required": true, "max_items": 3, "placeholder": "x",
                           "fields": [{"name": "qty", "kind": "integer", "minimum": 1, "maximum": 2.5}]});
        let field: FormField = serde_json::from_value(given.clone()).unwrap();
        assert_eq!(serde_json::to_value(field).unwrap(), given, "nothing dropped, numbers as given");
        assert!(serde_json::from_value::<FormField>(json!({"name": "x", "kind": "string"})).is_err());
    }
}
