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
/// The kinds gatehouse serves.
pub const KINDS: [&str; 2] = [ASK_USER, PERMISSION];
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    pub tool_execution_id: ToolExecutionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub title: String,
    pub body: String,
    /// AskUser's one field; a permission prompt has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Schema>,
    pub controls: Vec<Control>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    pub label: String,
    pub kind: FieldKind,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<ChoiceOption>,
    /// Additive to the harness shape: free text is accepted besides the options.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_other: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    Text,
    Select,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceOption {
    pub value: String,
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
