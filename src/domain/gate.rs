//! The gate envelope (harness shape, spec §4.1), the same for every kind; what differs between
//! kinds is the prompt, and the additive `tool_call` of a permission gate.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ids::{GateId, StepId, ToolExecutionId, TurnId};
use super::tool_call::ToolCall;

/// A question for a person (`ask_user.rs`).
pub const ASK_USER: &str = "harness.ask_user";
/// Leave to run a tool call (`permission.rs`).
pub const PERMISSION: &str = "harness.permission";
/// Typed fields for a person to fill in (`form.rs`).
pub const FORM: &str = "harness.form";
/// Send a person to a URL and hear back when they are done (`open_url.rs`).
pub const OPEN_URL: &str = "harness.open_url";
/// The kinds gatehouse serves.
pub const KINDS: [&str; 4] = [ASK_USER, PERMISSION, FORM, OPEN_URL];
/// Who answers a gate: the loop that opened it (its inbox gets the command), or the host
/// session that waits on it (harness `resolver: "session"`: no loop, no command).
pub const LOOP: &str = "loop";
pub const SESSION: &str = "session";
/// The one control of an AskUser gate, and the one key of its values.
pub const ANSWER: &str = "answer";

/// The public, durable description of one question. Field order is the harness's declaration
/// order, which its byte-exact fixtures rely on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub id: GateId,
    pub kind: String,
    pub resolver: String,
    pub blocks: String,
    pub effect: String,
    pub subject: Subject,
    pub prompt: Prompt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_policy: Option<ResponsePolicy>,
    /// A permission gate may be answered after a restart (harness `restorable`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restorable: bool,
    /// Additive to the harness shape: the call a permission gate decides on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
}

/// What a gate blocks. A host-owned gate blocks no tool call, so its subject may be empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub title: String,
    pub body: String,
    /// An open-URL gate's bare origin (the URL itself is never in the envelope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// AskUser's one field, a form's fields; a permission or open-URL prompt has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Schema>,
    pub controls: Vec<Control>,
    /// Additive: an open-URL gate asks the person to say when they are done there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_completion: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    /// Defaults to the name in an open request.
    #[serde(default)]
    pub label: String,
    pub kind: FieldKind,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ChoiceOption>,
    /// Additive to the harness shape: free text is accepted besides the options.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_other: bool,
    /// Additive from here on (a form's field, `form.rs`): help text, the value the form starts
    /// with, and the constraints of its kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// A group's or a list row's own fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
}

impl Field {
    /// A field with only the harness's members set.
    pub fn plain(name: &str, label: &str, kind: FieldKind) -> Self {
        Self {
            name: name.into(),
            label: label.into(),
            kind,
            required: false,
            options: Vec::new(),
            allow_other: false,
            description: String::new(),
            default: None,
            min_length: None,
            max_length: None,
            minimum: None,
            maximum: None,
            min_items: None,
            max_items: None,
            fields: Vec::new(),
        }
    }
}

/// A field's kind: the harness's `text`, `select` and `confirm`, and (additive) the kinds MCP
/// elicitation and nested forms need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    Text,
    Select,
    Confirm,
    MultiSelect,
    Number,
    Integer,
    Date,
    DateTime,
    Email,
    Url,
    /// A nested object of `fields`.
    Group,
    /// Repeatable rows, each an object of `fields`.
    List,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceOption {
    pub value: String,
    /// Defaults to the value in a form's open request.
    #[serde(default)]
    pub label: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Control {
    pub action: String,
    pub label: String,
}

/// What happens when nobody answers (harness shape; `timeout` in nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponsePolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    pub on_timeout: OnTimeout,
    /// The answer recorded at the deadline (`respond` only); a valid answer of its gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ResponseTemplate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Record the deadline only; the gate waits for a person.
    Wait,
    /// At the deadline, answer with the policy's template.
    Respond,
}

/// A default answer, in the shape of an answer body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseTemplate {
    pub action: String,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub values: Map<String, Value>,
}

impl Gate {
    /// The single schema field of an AskUser gate.
    pub fn answer_field(&self) -> Option<&Field> {
        self.prompt.schema.as_ref()?.fields.iter().find(|f| f.name == ANSWER)
    }

    /// Whether the host session answers this gate (no loop, no command).
    pub fn host_owned(&self) -> bool {
        self.resolver == SESSION
    }

    pub fn has_control(&self, action: &str) -> bool {
        self.prompt.controls.iter().any(|c| c.action == action)
    }

    /// Nanoseconds after opening at which the policy may act, if any.
    pub fn timeout_nanos(&self) -> Option<i64> {
        self.response_policy.as_ref().and_then(|p| p.timeout)
    }

    /// The answer the policy gives at the deadline, if it answers at all.
    pub fn default_answer(&self) -> Option<&ResponseTemplate> {
        self.response_policy.as_ref().filter(|p| p.on_timeout == OnTimeout::Respond)?.response.as_ref()
    }
}

impl Control {
    /// A control whose label is its action, as the harness's fixed controls are.
    pub fn named(action: &str) -> Self {
        Self { action: action.into(), label: action.into() }
    }
}
