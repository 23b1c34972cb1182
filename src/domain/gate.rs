//! The gate envelope (harness shape, spec §4.1) and the AskUser open request that produces it
//! (spec §5.1).

use serde::{Deserialize, Serialize};

use super::fields::{FieldCode, FieldError, check_text};
use super::ids::{GateId, IdError, LoopId, StepId, ToolExecutionId, TurnId};

/// The only gate kind so far.
pub const ASK_USER: &str = "harness.ask_user";
/// The one control of an AskUser gate, and the one key of its values.
pub const ANSWER: &str = "answer";
const DEFAULT_TITLE: &str = "User input requested";

pub const MAX_QUESTION_BYTES: usize = 4096;
pub const MAX_TITLE_BYTES: usize = 256;
pub const MAX_CHOICES: usize = 64;
pub const MAX_CHOICE_BYTES: usize = 256;

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
    pub schema: Schema,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Record the deadline only; the gate waits for a person.
    Wait,
}

impl Gate {
    /// The single schema field of an AskUser gate.
    pub fn answer_field(&self) -> Option<&Field> {
        self.prompt.schema.fields.iter().find(|f| f.name == ANSWER)
    }

    pub fn has_control(&self, action: &str) -> bool {
        self.prompt.controls.iter().any(|c| c.action == action)
    }

    /// Nanoseconds after opening at which the policy may act, if any.
    pub fn timeout_nanos(&self) -> Option<i64> {
        self.response_policy.as_ref().and_then(|p| p.timeout)
    }
}

/// The body of `POST /v1/sessions/{sid}/gates`. Every member is optional at this stage so that a
/// missing one is reported as a field problem rather than a decoding error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenGateIn {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub loop_id: Option<String>,
    #[serde(default)]
    pub tool_execution_id: Option<String>,
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub step_id: Option<String>,
    #[serde(default)]
    pub question: Option<String>,
    #[serde(default)]
    pub choices: Option<Vec<String>>,
    #[serde(default)]
    pub allow_other: Option<bool>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub response_policy: Option<ResponsePolicyIn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponsePolicyIn {
    #[serde(default)]
    pub timeout: Option<i64>,
    #[serde(default)]
    pub on_timeout: Option<String>,
    #[serde(default)]
    pub response: Option<serde_json::Value>,
}

/// Why an open request was refused.
#[derive(Debug, PartialEq)]
pub enum OpenRejection {
    /// A `kind` other than AskUser.
    KindMismatch(String),
    /// One or more members are missing or out of bounds.
    Fields(Vec<FieldError>),
}

/// A validated AskUser question: who asks, and the normalised content that decides whether a
/// re-ask is the same question.
#[derive(Debug, Clone, PartialEq)]
pub struct AskUser {
    pub loop_id: LoopId,
    pub tool_execution_id: ToolExecutionId,
    pub content: AskContent,
}

/// Everything a re-ask must repeat exactly (spec §5.1), after defaults are applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AskContent {
    pub question: String,
    pub choices: Vec<String>,
    pub allow_other: bool,
    pub title: String,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
    pub response_policy: Option<ResponsePolicy>,
}

impl AskContent {
    /// Canonical text of the content; equal text means the same question.
    pub fn canonical(&self) -> String {
        serde_json::to_string(self).expect("plain data serialises")
    }
}

impl OpenGateIn {
    /// Checks every member and applies defaults, reporting all field problems at once.
    pub fn validate(self) -> Result<AskUser, OpenRejection> {
        if let Some(kind) = self.kind.filter(|k| k != ASK_USER) {
            return Err(OpenRejection::KindMismatch(kind));
        }
        let mut problems = Vec::new();
        let loop_id = required_id(&mut problems, "/loop_id", self.loop_id, LoopId::parse);
        let tool_execution_id =
            required_id(&mut problems, "/tool_execution_id", self.tool_execution_id, ToolExecutionId::parse);
        let turn_id = optional_id(&mut problems, "/turn_id", self.turn_id, TurnId::parse);
        let step_id = optional_id(&mut problems, "/step_id", self.step_id, StepId::parse);

        let question = match self.question {
            None => {
                problems.push(FieldError::new("/question", FieldCode::Required, "a question is required"));
                String::new()
            }
            Some(q) => {
                problems.extend(check_text("/question", &q, MAX_QUESTION_BYTES));
                q
            }
        };
        let title = match self.title {
            None => DEFAULT_TITLE.to_owned(),
            Some(t) => {
                problems.extend(check_text("/title", &t, MAX_TITLE_BYTES));
                t
            }
        };
        let choices = self.choices.unwrap_or_default();
        check_choices(&mut problems, &choices);
        let allow_other = self.allow_other.unwrap_or(false);
        if allow_other && choices.is_empty() {
            problems.push(FieldError::new(
                "/allow_other",
                FieldCode::OutOfRange,
                "allow_other is only meaningful together with choices",
            ));
        }
        let response_policy = self.response_policy.and_then(|p| check_policy(&mut problems, p));

        if !problems.is_empty() {
            return Err(OpenRejection::Fields(problems));
        }
        Ok(AskUser {
            loop_id: loop_id.expect("no problems means the id parsed"),
            tool_execution_id: tool_execution_id.expect("no problems means the id parsed"),
            content: AskContent { question, choices, allow_other, title, turn_id, step_id, response_policy },
        })
    }
}

fn required_id<T>(
    problems: &mut Vec<FieldError>,
    path: &str,
    raw: Option<String>,
    parse: fn(&str) -> Result<T, IdError>,
) -> Option<T> {
    match raw {
        None => {
            problems.push(FieldError::new(path, FieldCode::Required, "a UUID is required"));
            None
        }
        some => optional_id(problems, path, some, parse),
    }
}

fn optional_id<T>(
    problems: &mut Vec<FieldError>,
    path: &str,
    raw: Option<String>,
    parse: fn(&str) -> Result<T, IdError>,
) -> Option<T> {
    let raw = raw?;
    parse(&raw).map_err(|e| problems.push(FieldError::new(path, FieldCode::Type, e.to_string()))).ok()
}

fn check_choices(problems: &mut Vec<FieldError>, choices: &[String]) {
    if choices.len() > MAX_CHOICES {
        problems.push(FieldError::new(
            "/choices",
            FieldCode::OutOfRange,
            format!("at most {MAX_CHOICES} choices (got {})", choices.len()),
        ));
    }
    for (i, choice) in choices.iter().enumerate() {
        let path = format!("/choices/{i}");
        if choice.is_empty() {
            problems.push(FieldError::new(path, FieldCode::Empty, "a choice must not be empty"));
        } else if choice.len() > MAX_CHOICE_BYTES {
            problems.push(FieldError::new(
                path,
                FieldCode::TooLong,
                format!("a choice must be at most {MAX_CHOICE_BYTES} bytes"),
            ));
        } else if choices[..i].contains(choice) {
            problems.push(FieldError::new(path, FieldCode::Duplicate, "choices must be distinct"));
        }
    }
}

/// Normalises a policy: an empty one is no policy; `on_timeout` defaults to `wait`.
fn check_policy(problems: &mut Vec<FieldError>, policy: ResponsePolicyIn) -> Option<ResponsePolicy> {
    let before = problems.len();
    if let Some(t) = policy.timeout.filter(|t| *t <= 0) {
        problems.push(FieldError::new(
            "/response_policy/timeout",
            FieldCode::OutOfRange,
            format!("timeout is in nanoseconds and must be positive (got {t})"),
        ));
    }
    match policy.on_timeout.as_deref() {
        None | Some("wait") => {}
        // Timeout answers arrive with the timer; until then refusing beats silently waiting.
        Some("respond") => problems.push(FieldError::new(
            "/response_policy/on_timeout",
            FieldCode::OutOfRange,
            "on_timeout \"respond\" is not supported yet; use \"wait\"",
        )),
        Some(other) => problems.push(FieldError::new(
            "/response_policy/on_timeout",
            FieldCode::OutOfRange,
            format!("on_timeout must be \"wait\" (got {other:?})"),
        )),
    }
    if policy.response.is_some() {
        problems.push(FieldError::new(
            "/response_policy/response",
            FieldCode::UnknownKey,
            "response is only allowed with on_timeout \"respond\"",
        ));
    }
    if problems.len() > before || (policy.timeout.is_none() && policy.on_timeout.is_none()) {
        return None;
    }
    Some(ResponsePolicy { timeout: policy.timeout, on_timeout: OnTimeout::Wait })
}

impl AskUser {
    /// The envelope of the gate this question opens.
    pub fn gate(&self, id: GateId) -> Gate {
        let c = &self.content;
        let field = if c.choices.is_empty() {
            Field {
                name: ANSWER.into(),
                label: "Answer".into(),
                kind: FieldKind::Text,
                required: true,
                options: Vec::new(),
                allow_other: false,
            }
        } else {
            Field {
                name: ANSWER.into(),
                label: "Answer".into(),
                kind: FieldKind::Select,
                required: true,
                options: c.choices.iter().map(|v| ChoiceOption { value: v.clone(), label: v.clone() }).collect(),
                allow_other: c.allow_other,
            }
        };
        Gate {
            id,
            kind: ASK_USER.into(),
            resolver: "loop".into(),
            blocks: "tool_call".into(),
            effect: "resume".into(),
            subject: Subject { tool_execution_id: self.tool_execution_id, turn_id: c.turn_id, step_id: c.step_id },
            prompt: Prompt {
                title: c.title.clone(),
                body: c.question.clone(),
                schema: Schema { fields: vec![field] },
                controls: vec![Control { action: ANSWER.into(), label: "Answer".into() }],
            },
            response_policy: c.response_policy.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: serde_json::Value) -> OpenGateIn {
        serde_json::from_value(json).unwrap()
    }

    const LOOP: &str = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff";
    const TOOL: &str = "7e8f9a0b-1c2d-4e3f-9a0b-1c2d3e4f5a6b";

    #[test]
    fn defaults_and_select_field() {
        let ask = body(serde_json::json!({
            "loop_id": LOOP, "tool_execution_id": TOOL, "question": "Which?", "choices": ["a", "b"]
        }))
        .validate()
        .unwrap();
        let gate = ask.gate(GateId::mint());
        assert_eq!(gate.prompt.title, "User input requested");
        let field = gate.answer_field().unwrap();
        assert_eq!(field.kind, FieldKind::Select);
        assert_eq!(field.options.len(), 2);
        assert!(!field.allow_other);
    }

    #[test]
    fn every_problem_is_reported() {
        let err = body(serde_json::json!({
            "loop_id": "nope", "question": "  ", "choices": ["a", "a", ""], "allow_other": true,
            "response_policy": {"on_timeout": "respond", "timeout": 0}
        }))
        .validate()
        .unwrap_err();
        let OpenRejection::Fields(fields) = err else { panic!("{err:?}") };
        let got: Vec<_> = fields.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(
            got,
            [
                ("/loop_id", FieldCode::Type),
                ("/tool_execution_id", FieldCode::Required),
                ("/question", FieldCode::Blank),
                ("/choices/1", FieldCode::Duplicate),
                ("/choices/2", FieldCode::Empty),
                ("/response_policy/timeout", FieldCode::OutOfRange),
                ("/response_policy/on_timeout", FieldCode::OutOfRange),
            ]
        );
    }

    #[test]
    fn empty_policy_is_no_policy_for_reasks() {
        let base = serde_json::json!({"loop_id": LOOP, "tool_execution_id": TOOL, "question": "Q"});
        let mut with_empty = base.clone();
        with_empty["response_policy"] = serde_json::json!({});
        let a = body(base).validate().unwrap();
        let b = body(with_empty).validate().unwrap();
        assert_eq!(a.content.canonical(), b.content.canonical());
    }

    #[test]
    fn other_kinds_are_a_mismatch() {
        let err = body(serde_json::json!({"kind": "harness.permission"})).validate().unwrap_err();
        assert_eq!(err, OpenRejection::KindMismatch("harness.permission".into()));
    }
}
