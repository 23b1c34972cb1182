//! The flow every asker shares (`gatehouse ask`, `approve`, `form`, `mcp`): open a gate (a
//! question, a permission gate for a tool call, or a form), wait for it to leave `open` (riding
//! out server restarts), withdraw it when the asker gives up, and acknowledge the loop command an
//! answer or a decision produced (a loop's gate only: a host's gate puts none in any inbox).

use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::client::{Api, ClientError, Reply};
use super::server_backoff;
use crate::domain::form::{ACCEPT, ACTIONS, CANCEL, DECLINE};
use crate::domain::gate::{FORM, PERMISSION};
use crate::domain::tool_call::DENY;

/// Where a question ended.
pub enum Ending {
    /// Answered or decided (by a person, or by the default or policy at the deadline): the final
    /// view.
    Answered(Value),
    /// Withdrawn by its owner or abandoned.
    Withdrawn(Value),
    /// The client deadline passed without an answer (and without a default).
    TimedOut,
    /// The server refused to show the gate (a revoked token, a gate it no longer has): waiting
    /// longer would not help.
    Refused(String),
}

/// The gate an asker waits for.
pub struct Asked {
    pub api: Api,
    pub session: String,
    /// The loop that owns the gate; `None` for a host-owned gate.
    pub loop_id: Option<String>,
    pub gate: String,
    /// Who waits (`ask`, `mcp`), for the lines it writes to stderr.
    pub who: &'static str,
}

/// What is asked: the question, its choices, and what happens at a deadline.
#[derive(Debug, Clone)]
pub struct Question {
    pub text: String,
    pub choices: Vec<String>,
    pub allow_other: bool,
    /// Stop waiting after this long: answer with `default`, or (without one) withdraw the gate.
    pub timeout: Option<Duration>,
    /// The answer the server gives at the deadline.
    pub default: Option<String>,
    /// The gate's title (the server's default when `None`).
    pub title: Option<String>,
}

impl Question {
    /// The open body for this question from `loop_id`'s tool execution `tool`.
    pub fn body(&self, loop_id: &str, tool: &str) -> Result<Value, String> {
        let mut body = json!({"loop_id": loop_id, "tool_execution_id": tool, "question": self.text});
        if !self.choices.is_empty() {
            body["choices"] = json!(self.choices);
            body["allow_other"] = json!(self.allow_other);
        }
        if let Some(title) = &self.title {
            body["title"] = json!(title);
        }
        if let Some(timeout) = self.timeout {
            let nanos = nanos(timeout)?;
            body["response_policy"] = match &self.default {
                Some(default) => json!({"timeout": nanos, "on_timeout": "respond",
                                        "response": {"action": "answer", "values": {"answer": default}}}),
                None => json!({"timeout": nanos, "on_timeout": "wait"}),
            };
        }
        Ok(body)
    }

    /// How long the asker waits by itself: the timeout, unless the server answers then.
    pub fn own_timeout(&self) -> Option<Duration> {
        self.timeout.filter(|_| self.default.is_none())
    }

    /// When the asker stops waiting by itself (see `own_timeout`).
    pub fn deadline(&self) -> Option<Instant> {
        self.own_timeout().map(|t| Instant::now() + t)
    }
}

/// What a permission gate asks: leave to run one tool call. The server always decides it: a
/// person does, or the gate's policy denies it at the deadline (the server's default policy
/// without a timeout here), so its asker never stops waiting by itself.
#[derive(Debug, Clone)]
pub struct Approval {
    pub tool_name: String,
    /// The call's arguments, a JSON object.
    pub input: Value,
    /// The JSON Schema of the input, which an edit must fit.
    pub schema: Option<Value>,
    /// Whether the person may edit the input before approving it.
    pub editable: bool,
    /// `low`, `medium`, `high` or `critical`.
    pub risk: Option<String>,
    /// What the call does, in a line (the server shows the tool's name without one).
    pub summary: Option<String>,
    /// The capabilities the call needs, in words.
    pub requirements: Vec<String>,
    /// Deny the call when nobody decides within this long.
    pub timeout: Option<Duration>,
}

impl Approval {
    /// The open body for this call from `loop_id`'s tool execution `tool`.
    pub fn body(&self, loop_id: &str, tool: &str) -> Result<Value, String> {
        let mut body = json!({
            "kind": PERMISSION, "loop_id": loop_id, "tool_execution_id": tool,
            "tool_name": self.tool_name, "tool_input": self.input,
        });
        if let Some(schema) = &self.schema {
            body["tool_input_schema"] = schema.clone();
        }
        if self.editable {
            body["editable"] = json!(true);
        }
        if let Some(risk) = &self.risk {
            body["risk"] = json!(risk);
        }
        if let Some(summary) = &self.summary {
            body["summary"] = json!(summary);
        }
        if !self.requirements.is_empty() {
            body["requirements"] = json!(self.requirements);
        }
        if let Some(timeout) = self.timeout {
            body["response_policy"] =
                json!({"timeout": nanos(timeout)?, "on_timeout": "respond", "response": {"action": DENY}});
        }
        Ok(body)
    }
}

/// A permission gate's decision, as its resolved view shows it (`decision`).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub approved: bool,
    /// The input the call runs with: the one asked for, or the person's edit (approvals only).
    pub tool_input: Option<Value>,
    pub edited: bool,
    /// A denial's reason, when the person gave one.
    pub reason: Option<String>,
    /// Who decided, when the server knows.
    pub principal: Option<String>,
    /// Denied by the gate's policy at its deadline: nobody decided in time.
    pub by_policy: bool,
}

impl Decision {
    /// The decision of a resolved permission gate's view; `None` for any other view.
    pub fn of(view: &Value) -> Option<Self> {
        let decision = &view["decision"];
        let approved = match decision["effect"].as_str()? {
            "approve" => true,
            "deny" => false,
            _ => return None,
        };
        let text = |key: &str| decision[key].as_str().map(str::to_owned);
        Some(Self {
            approved,
            tool_input: decision.get("tool_input").filter(|input| !input.is_null()).cloned(),
            edited: decision["edited"].as_bool().unwrap_or(false),
            reason: text("reason").filter(|reason| !reason.is_empty()),
            principal: text("principal"),
            by_policy: decision["source"] == "policy",
        })
    }
}

/// What a form asks: a message and the fields a person fills in.
#[derive(Debug, Clone)]
pub struct Form {
    /// The server's default ("Input requested") when `None`.
    pub title: Option<String>,
    /// The message above the fields.
    pub body: String,
    pub schema: FormSchema,
    /// Cancel the form (by policy) when nobody answers within this long.
    pub timeout: Option<Duration>,
}

/// A form's fields, in one of the two shapes the API takes, each sent as it is.
#[derive(Debug, Clone)]
pub enum FormSchema {
    /// gatehouse's own shape, `{"fields": […]}`, sent as `schema`.
    Harness(Value),
    /// A JSON Schema of an object, sent as `json_schema`, as its text: the server translates its
    /// properties into fields in their order, which a `Value` (its keys sorted) would lose.
    JsonSchema(Box<RawValue>),
}

impl FormSchema {
    /// The shape the JSON text `schema` is in: an object with a `fields` array is gatehouse's (no
    /// JSON Schema keyword is named `fields`), any other object a JSON Schema. `Err` completes
    /// "the schema …".
    pub fn parse(schema: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(schema).map_err(|e| format!("is not JSON: {e}"))?;
        match &value {
            Value::Object(members) if members.get("fields").is_some_and(Value::is_array) => Ok(Self::Harness(value)),
            Value::Object(_) => {
                let raw = RawValue::from_string(schema.trim().to_owned()).map_err(|e| format!("is not JSON: {e}"))?;
                Ok(Self::JsonSchema(raw))
            }
            _ => Err("is not a JSON object: give {\"fields\": [...]} or a JSON Schema of an object".to_owned()),
        }
    }
}

impl Form {
    /// The open body, as JSON text: owned by `loop_id`'s tool execution `tool` when `owner`
    /// names them, by the host (no loop) when it is `None`.
    pub fn body(&self, owner: Option<(&str, &str)>) -> Result<Box<RawValue>, String> {
        let mut body = json!({"kind": FORM, "body": self.body});
        if let Some((loop_id, tool)) = owner {
            body["loop_id"] = json!(loop_id);
            body["tool_execution_id"] = json!(tool);
        }
        if let Some(title) = &self.title {
            body["title"] = json!(title);
        }
        if let Some(timeout) = self.timeout {
            body["response_policy"] =
                json!({"timeout": nanos(timeout)?, "on_timeout": "respond", "response": {"action": CANCEL}});
        }
        let text = match &self.schema {
            FormSchema::Harness(schema) => {
                body["schema"] = schema.clone();
                body.to_string()
            }
            // The JSON Schema goes in as its own text: the object's closing brace makes way for
            // one more member (the object has `kind`, so a comma goes first).
            FormSchema::JsonSchema(schema) => {
                let mut text = body.to_string();
                text.pop();
                text.push_str(",\"json_schema\":");
                text.push_str(schema.get());
                text.push('}');
                text
            }
        };
        RawValue::from_string(text).map_err(|e| format!("cannot write the form: {e}"))
    }
}

/// The names of a form's top-level fields, in their order, as the gate (`view["gate"]`, or an
/// event's `gate`) shows them: the keys its values take.
pub fn field_names(gate: &Value) -> Vec<&str> {
    let fields = gate["prompt"]["schema"]["fields"].as_array().map(Vec::as_slice).unwrap_or_default();
    fields.iter().filter_map(|field| field["name"].as_str()).collect()
}

/// How a person (or the policy, at the deadline) answered a form or an open-URL gate, as its
/// resolved view shows it (`decision`).
#[derive(Debug, Clone, PartialEq)]
pub struct FormReply {
    /// `accept`, `decline` or `cancel`.
    pub action: String,
    /// The values of an accepted form, by field name.
    pub values: Option<Value>,
    /// Who answered, when the server knows.
    pub principal: Option<String>,
    /// Answered by the gate's policy at its deadline: nobody answered in time.
    pub by_policy: bool,
}

impl FormReply {
    /// The reply of a resolved form or open-URL gate's view; `None` for any other view.
    pub fn of(view: &Value) -> Option<Self> {
        let decision = &view["decision"];
        let action = decision["action"].as_str().filter(|a| ACTIONS.contains(a))?;
        Some(Self {
            action: action.to_owned(),
            values: decision.get("values").filter(|values| values.is_object()).cloned(),
            principal: decision["principal"].as_str().map(str::to_owned),
            by_policy: decision["source"] == "policy" || view["resolution"]["reason"] == "policy_response",
        })
    }

    /// The action as a past participle: "accepted", "declined", "cancelled".
    pub fn done(&self) -> &'static str {
        match self.action.as_str() {
            ACCEPT => "accepted",
            DECLINE => "declined",
            _ => "cancelled",
        }
    }
}

/// A timeout as the API's nanoseconds.
fn nanos(timeout: Duration) -> Result<i64, String> {
    i64::try_from(timeout.as_nanos()).map_err(|_| "the timeout is too long".to_owned())
}

/// Opens the gate `body` describes in `session` (or finds the one its ids opened before) and
/// returns its view. The ids make it idempotent, so transient trouble is simply retried.
pub async fn open(api: &Api, session: &str, body: &(impl Serialize + ?Sized)) -> Result<Value, String> {
    let path = format!("/v1/sessions/{session}/gates");
    const TRIES: usize = 5;
    let mut backoff = server_backoff();
    for attempt in 1..=TRIES {
        match api.post(&path, Some(body), None).await {
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
    pub fn gate_path(&self) -> String {
        format!("/v1/sessions/{}/gates/{}", self.session, self.gate)
    }

    /// Long-polls until the gate leaves `open` or the deadline passes. Connection trouble and
    /// restarts are waited out: the gate is durable, so the answer will still be there.
    pub async fn wait(&self, deadline: Option<Instant>) -> Ending {
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
                Ok(reply) if !reply.retryable() => return Ending::Refused(reply.message()),
                outcome => {
                    if !reported {
                        let why = outcome.map_or_else(|e| e.to_string(), |r| r.message());
                        eprintln!("gatehouse {}: {why}; still waiting", self.who);
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
    pub async fn withdraw(&self) -> Result<(), String> {
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

    /// Acknowledges the command this gate put in our loop's inbox (`ProvideUserInput`,
    /// `ApproveToolCall` / `DenyToolCall`, or `ProvideFormInput`): the asker is the loop, and it
    /// has used the answer.
    pub async fn ack(&self) -> Result<(), String> {
        let (loop_id, command) = self.command().await?;
        let id = command["command"]["command_id"].as_str().ok_or("a command without an id")?;
        let path = format!("/v1/sessions/{}/loops/{loop_id}/commands/{id}/ack", self.session);
        let reply = self.api.post(&path, None::<&Value>, None).await.map_err(|e| e.to_string())?;
        if reply.ok() { Ok(()) } else { Err(reply.message()) }
    }

    /// Whether this gate's command was acknowledged: its answer was taken.
    pub async fn acked(&self) -> Result<bool, String> {
        Ok(self.command().await?.1["acked_at"].is_string())
    }

    /// The owning loop and this gate's entry in its inbox, acknowledged or not, looked up page by
    /// page.
    async fn command(&self) -> Result<(&str, Value), String> {
        let loop_id = self.loop_id.as_deref().ok_or("a host-owned gate puts no command in an inbox")?;
        let mut after = 0;
        loop {
            let inbox = format!(
                "/v1/sessions/{}/loops/{loop_id}/commands?include_acked=true&limit=1000&after={after}",
                self.session
            );
            let reply = self.api.get(&inbox).await.map_err(|e| e.to_string())?;
            if !reply.ok() {
                return Err(reply.message());
            }
            let commands = reply.body["commands"].as_array().cloned().unwrap_or_default();
            if let Some(entry) = commands.iter().find(|c| c["command"]["gate_id"] == self.gate.as_str()) {
                return Ok((loop_id, entry.clone()));
            }
            match reply.body["next_after"].as_i64() {
                Some(next) if !commands.is_empty() && next > after => after = next,
                _ => return Err("the command is not in the inbox".into()),
            }
        }
    }
}

/// How a view ends the wait, if it does.
pub fn ending_of(view: Value) -> Option<Ending> {
    match view["state"].as_str() {
        Some("resolved") => Some(Ending::Answered(view)),
        Some("closed") => Some(Ending::Withdrawn(view)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_schema_goes_out_as_its_text_and_fields_as_they_are() {
        // Properties out of alphabetical order: a `Value` would sort them, the form must not.
        let text = r#" {"type": "object", "properties": {"zone": {"type": "string"}, "app": {"type": "string"}}} "#;
        let schema = FormSchema::parse(text).unwrap();
        assert!(matches!(schema, FormSchema::JsonSchema(_)));
        let form = Form { title: None, body: "Where?".into(), schema, timeout: None };
        let body = form.body(None).unwrap();
        assert!(body.get().contains(r#""properties": {"zone": {"type": "string"}, "app""#), "{}", body.get());
        let sent: Value = serde_json::from_str(body.get()).unwrap();
        assert_eq!(sent["kind"], FORM);
        assert_eq!((sent.get("loop_id"), sent.get("tool_execution_id")), (None, None), "host-owned: no loop");
        assert_eq!(sent["json_schema"]["properties"]["app"], json!({"type": "string"}));
        assert_eq!(sent.get("schema"), None);

        let fields = json!({"fields": [{"name": "env", "kind": "text"}]});
        let form = Form {
            title: Some("Deploy".into()),
            body: "Where?".into(),
            schema: FormSchema::parse(&fields.to_string()).unwrap(),
            timeout: Some(Duration::from_secs(2)),
        };
        let sent: Value = serde_json::from_str(form.body(Some(("l", "t"))).unwrap().get()).unwrap();
        assert_eq!(
            sent,
            json!({"kind": FORM, "body": "Where?", "title": "Deploy", "loop_id": "l", "tool_execution_id": "t",
                   "schema": fields, "response_policy": {"timeout": 2_000_000_000_i64, "on_timeout": "respond",
                                                          "response": {"action": "cancel"}}})
        );
        for bad in ["[1]", "\"x\"", "{", ""] {
            assert!(FormSchema::parse(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(FormSchema::parse(r#"{"fields": {}}"#), Ok(FormSchema::JsonSchema(_))), "not an array");
    }

    #[test]
    fn a_form_reply_is_read_from_the_decision() {
        let view = json!({"state": "resolved", "decision": {"action": "accept", "values": {"env": "prod"},
                          "source": "user", "principal": "alice"}});
        assert_eq!(
            FormReply::of(&view),
            Some(FormReply {
                action: ACCEPT.into(),
                values: Some(json!({"env": "prod"})),
                principal: Some("alice".into()),
                by_policy: false,
            })
        );
        let timed_out = json!({"decision": {"action": "cancel", "source": "policy"}});
        let reply = FormReply::of(&timed_out).unwrap();
        assert!(reply.by_policy && reply.values.is_none() && reply.done() == "cancelled");
        assert_eq!(FormReply::of(&json!({"decision": {"effect": "approve"}})), None, "a permission decision");
        assert_eq!(FormReply::of(&json!({"answer": "yes"})), None);
    }
}
