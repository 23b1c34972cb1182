//! Answers and closes: decoding the request bodies and deciding whether an answer fits its gate
//! (spec §5.2, §5.3). Checked before anything is claimed, so a typo never burns the one-shot
//! answer.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::fields::{FieldCode, FieldError, check_length, pointer_token};
use super::form::{ACCEPT, check_values};
use super::gate::{ANSWER, ASK_USER, FORM, Gate, PERMISSION};
use super::ids::GateId;
use super::tool_call::Decision;

pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
const PREVIEW_CHARS: usize = 80;

/// The body of an answer: `{"action","values"}`, or a full `GateResponse` whose `gate_id` must
/// name the gate in the path and whose `source` is ignored (the server stamps provenance).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnswerIn {
    pub gate_id: Option<String>,
    pub action: Option<String>,
    /// Kept as loose JSON here: what may appear inside `values` is a question for the gate
    /// (`gate_values_invalid`), which is checked after the gate is found.
    pub values: Option<Map<String, Value>>,
    #[allow(dead_code)]
    source: Option<IgnoredAny>,
}

impl AnswerIn {
    /// Whether the body names no gate, or names `gate` (in any letter case).
    pub fn names_gate(&self, gate: GateId) -> bool {
        self.gate_id.as_deref().is_none_or(|named| GateId::parse(named).ok() == Some(gate))
    }
}

/// Why an answer does not fit its gate.
#[derive(Debug, PartialEq)]
pub enum AnswerRejection {
    /// The action is not among the gate's controls.
    Action(String),
    /// The values do not fit the gate's schema.
    Values(Vec<FieldError>),
}

/// An answer that fits its gate.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub action: String,
    pub reply: Reply,
}

/// What an answer says, by the kind of its gate.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An AskUser answer's text.
    Text(String),
    /// A decision on a permission gate's tool call.
    Decision(Decision),
    /// An accepted form's values, checked against its fields.
    Values(Map<String, Value>),
    /// The action alone: a form declined or cancelled, any answer of an open-URL gate.
    Action,
}

impl Answer {
    /// Checks action, then values, against the gate (spec §4.5 order).
    pub fn check(
        gate: &Gate,
        action: Option<&str>,
        values: Option<&Map<String, Value>>,
    ) -> Result<Self, AnswerRejection> {
        let action = action.unwrap_or_default();
        if !gate.has_control(action) {
            return Err(AnswerRejection::Action(action.to_owned()));
        }
        let empty = Map::new();
        let values = values.unwrap_or(&empty);
        let reply = match (gate.kind.as_str(), &gate.tool_call) {
            (ASK_USER, _) => Reply::Text(text_answer(gate, values)?),
            (PERMISSION, Some(call)) => Reply::Decision(call.decide(action, values).map_err(AnswerRejection::Values)?),
            (FORM, _) if action == ACCEPT => {
                let fields = gate.prompt.schema.as_ref().map_or(&[][..], |s| &s.fields);
                Reply::Values(check_values(fields, values).map_err(AnswerRejection::Values)?)
            }
            // Declined, cancelled, or an open-URL gate's answer: values are ignored, as the
            // harness ignores them.
            _ => Reply::Action,
        };
        Ok(Self { action: action.to_owned(), reply })
    }

    /// An AskUser answer's text.
    pub fn text(&self) -> Option<&str> {
        match &self.reply {
            Reply::Text(text) => Some(text),
            _ => None,
        }
    }

    /// A permission gate's decision.
    pub fn decision(&self) -> Option<&Decision> {
        match &self.reply {
            Reply::Decision(decision) => Some(decision),
            _ => None,
        }
    }

    /// An accepted form's values.
    pub fn values(&self) -> Option<&Map<String, Value>> {
        match &self.reply {
            Reply::Values(values) => Some(values),
            _ => None,
        }
    }

    /// SHA-256 (hex) of the canonical (action, values): what an `Idempotency-Key` is bound to.
    pub fn fingerprint(&self) -> String {
        let values = match &self.reply {
            Reply::Text(text) => serde_json::json!({ANSWER: text}),
            Reply::Decision(decision) => decision.canonical_values(),
            Reply::Values(values) => Value::Object(values.clone()),
            Reply::Action => Value::Object(Map::new()),
        };
        let canonical = serde_json::json!({"action": self.action, "values": values});
        let digest = Sha256::digest(canonical.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The first 80 Unicode scalar values of a text answer, for the audit record.
    pub fn preview(&self) -> String {
        self.text().unwrap_or_default().chars().take(PREVIEW_CHARS).collect()
    }
}

/// An AskUser answer's text: `values.answer`, a string within its cap, one of the choices unless
/// others are allowed, and no other key.
fn text_answer(gate: &Gate, values: &Map<String, Value>) -> Result<String, AnswerRejection> {
    let mut problems: Vec<FieldError> = values
        .keys()
        .filter(|k| *k != ANSWER)
        .map(|k| {
            FieldError::new(
                format!("/values/{}", pointer_token(k)),
                FieldCode::UnknownKey,
                format!("unexpected key {k:?}; an AskUser answer has only \"answer\""),
            )
        })
        .collect();
    const PATH: &str = "/values/answer";
    let text = match values.get(ANSWER) {
        None | Some(Value::Null) => {
            problems.push(FieldError::new(PATH, FieldCode::Required, "an answer is required"));
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.push(FieldError::new(PATH, FieldCode::Type, "the answer must be a string"));
            None
        }
    };
    if let Some(text) = &text {
        let field = gate.answer_field();
        if let Some(problem) = check_length(PATH, text, MAX_ANSWER_BYTES, "the answer") {
            problems.push(problem);
        } else if let Some(field) = field.filter(|f| !f.options.is_empty() && !f.allow_other)
            && !field.options.iter().any(|o| o.value == *text)
        {
            let choices: Vec<&str> = field.options.iter().map(|o| o.value.as_str()).collect();
            problems.push(FieldError::new(
                PATH,
                FieldCode::NotAChoice,
                format!("the answer must be one of {choices:?}"),
            ));
        }
    }
    match text {
        Some(text) if problems.is_empty() => Ok(text),
        _ => Err(AnswerRejection::Values(problems)),
    }
}

/// Why a gate was withdrawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    #[default]
    OwnerClosed,
    Abandoned,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OwnerClosed => "owner_closed",
            Self::Abandoned => "abandoned",
        }
    }
}

/// The optional body of a close.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloseIn {
    pub reason: CloseReason,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ask_user::{AskContent, AskUser, DEFAULT_TITLE};
    use crate::domain::ids::{GateId, LoopId, ToolExecutionId};

    fn gate(choices: &[&str], allow_other: bool) -> Gate {
        let content = AskContent {
            question: "Which?".into(),
            choices: choices.iter().map(|c| c.to_string()).collect(),
            allow_other,
            title: DEFAULT_TITLE.into(),
            turn_id: None,
            step_id: None,
            response_policy: None,
        };
        let ids = (LoopId::parse(LOOP).unwrap(), ToolExecutionId::parse(TOOL).unwrap());
        AskUser { loop_id: ids.0, tool_execution_id: ids.1, content }.gate(GateId::mint())
    }

    const LOOP: &str = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff";
    const TOOL: &str = "7e8f9a0b-1c2d-4e3f-9a0b-1c2d3e4f5a6b";

    fn check(gate: &Gate, body: Value) -> Result<Answer, AnswerRejection> {
        let body: AnswerIn = serde_json::from_value(body).unwrap();
        Answer::check(gate, body.action.as_deref(), body.values.as_ref())
    }

    fn codes(r: Result<Answer, AnswerRejection>) -> Vec<(String, FieldCode)> {
        match r {
            Err(AnswerRejection::Values(f)) => f.into_iter().map(|f| (f.path, f.code)).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn choices_are_exact_unless_other_is_allowed() {
        let strict = gate(&["Postgres", "mysql"], false);
        let body = serde_json::json!({"action": "answer", "values": {"answer": "postgres"}});
        assert_eq!(codes(check(&strict, body.clone())), [("/values/answer".into(), FieldCode::NotAChoice)]);
        let open = gate(&["Postgres"], true);
        assert_eq!(check(&open, body).unwrap().text(), Some("postgres"));
    }

    #[test]
    fn value_problems() {
        let g = gate(&[], false);
        let cases = [
            (serde_json::json!({"action": "answer"}), "/values/answer", FieldCode::Required),
            (serde_json::json!({"action": "answer", "values": {"answer": 1}}), "/values/answer", FieldCode::Type),
            (serde_json::json!({"action": "answer", "values": {"answer": ""}}), "/values/answer", FieldCode::Empty),
            (
                serde_json::json!({"action": "answer", "values": {"answer": "x".repeat(MAX_ANSWER_BYTES + 1)}}),
                "/values/answer",
                FieldCode::TooLong,
            ),
        ];
        for (body, path, code) in cases {
            assert_eq!(codes(check(&g, body)), [(path.into(), code)]);
        }
        let extra = serde_json::json!({"action": "answer", "values": {"answer": "x", "a/b": "y"}});
        assert_eq!(codes(check(&g, extra)), [("/values/a~1b".into(), FieldCode::UnknownKey)]);
    }

    #[test]
    fn action_must_be_a_control() {
        let g = gate(&[], false);
        let r = check(&g, serde_json::json!({"action": "Answer", "values": {"answer": "x"}}));
        assert_eq!(r, Err(AnswerRejection::Action("Answer".into())));
    }

    #[test]
    fn preview_counts_scalar_values() {
        let a = Answer { action: "answer".into(), reply: Reply::Text("é".repeat(100)) };
        assert_eq!(a.preview().chars().count(), 80);
        let b = Answer { action: "answer".into(), reply: Reply::Text("é".repeat(100)) };
        assert_eq!(a.fingerprint(), b.fingerprint());
    }
}
