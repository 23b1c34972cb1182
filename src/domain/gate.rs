//! The gate envelope (harness shape, spec §4.1) and the AskUser open request that produces it
//! (spec §5.1).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::answer::{Answer, AnswerRejection};
use super::fields::{FieldCode, FieldError, check_length, check_text};
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
/// The default longest timeout a policy may ask for (7 days, in nanoseconds).
pub const MAX_TIMEOUT_NANOS: i64 = 7 * 24 * 3600 * 1_000_000_000;

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
        self.prompt.schema.fields.iter().find(|f| f.name == ANSWER)
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

/// The body of `POST /v1/sessions/{sid}/gates`. Members are loose JSON at this stage so that a
/// missing or mistyped one is reported as a field problem (with its path) rather than a bare
/// decoding error; unknown members are still refused by the decoder.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenGateIn {
    pub kind: Option<Value>,
    pub loop_id: Option<Value>,
    pub tool_execution_id: Option<Value>,
    pub turn_id: Option<Value>,
    pub step_id: Option<Value>,
    pub question: Option<Value>,
    pub choices: Option<Value>,
    pub allow_other: Option<Value>,
    pub title: Option<Value>,
    pub response_policy: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ResponsePolicyIn {
    timeout: Option<i64>,
    on_timeout: Option<String>,
    response: Option<ResponseTemplate>,
}

/// Why an open request was refused.
#[derive(Debug, PartialEq)]
pub enum OpenRejection {
    /// A `kind` other than AskUser.
    KindMismatch(String),
    /// One or more members are missing or out of bounds.
    Fields(Vec<FieldError>),
    /// The `respond` template's action is not a control of this gate.
    TemplateAction(Vec<FieldError>),
    /// The `respond` template's values are not a valid answer of this gate.
    TemplateValues(Vec<FieldError>),
}

/// A validated AskUser question: who asks, and the normalised content that decides whether a
/// re-ask is the same question.
#[derive(Debug, Clone, PartialEq)]
pub struct AskUser {
    pub loop_id: LoopId,
    pub tool_execution_id: ToolExecutionId,
    pub content: AskContent,
}

/// Everything a re-ask must repeat exactly (spec §5.1), after defaults are applied. Its canonical
/// text is stored with the gate, so a member added later must be skipped while at its default,
/// or every stored gate would stop matching its own re-ask.
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
    /// Checks every member and applies defaults, reporting all field problems at once. A policy
    /// may wait at most `max_timeout` nanoseconds.
    pub fn validate(self, max_timeout: i64) -> Result<AskUser, OpenRejection> {
        let mut problems = Vec::new();
        let p = &mut problems;
        // `null` means absent, as the harness omits empty members.
        let present = |v: Option<Value>| v.filter(|v| !v.is_null());
        if let Some(kind) = present(self.kind) {
            match kind.as_str() {
                Some(ASK_USER) => {}
                Some(other) => return Err(OpenRejection::KindMismatch(other.to_owned())),
                None => p.push(type_error("/kind", "a string")),
            }
        }
        let loop_id = id(p, "/loop_id", present(self.loop_id), true, LoopId::parse);
        let tool_execution_id =
            id(p, "/tool_execution_id", present(self.tool_execution_id), true, ToolExecutionId::parse);
        let turn_id = id(p, "/turn_id", present(self.turn_id), false, TurnId::parse);
        let step_id = id(p, "/step_id", present(self.step_id), false, StepId::parse);

        let question = match present(self.question) {
            None => {
                p.push(FieldError::new("/question", FieldCode::Required, "a question is required"));
                String::new()
            }
            Some(q) => text(p, "/question", q, MAX_QUESTION_BYTES),
        };
        let title = match present(self.title) {
            None => DEFAULT_TITLE.to_owned(),
            Some(t) => text(p, "/title", t, MAX_TITLE_BYTES),
        };
        let choices = present(self.choices).map(|c| check_choices(p, c)).unwrap_or_default();
        let allow_other = match present(self.allow_other) {
            None => false,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                p.push(type_error("/allow_other", "a boolean"));
                false
            }
        };
        if allow_other && choices.is_empty() {
            p.push(FieldError::new(
                "/allow_other",
                FieldCode::OutOfRange,
                "allow_other is only meaningful together with choices",
            ));
        }
        let response_policy = present(self.response_policy).and_then(|v| check_policy(p, v, max_timeout));

        if !problems.is_empty() {
            return Err(OpenRejection::Fields(problems));
        }
        let ask = AskUser {
            loop_id: loop_id.expect("no problems means the id parsed"),
            tool_execution_id: tool_execution_id.expect("no problems means the id parsed"),
            content: AskContent { question, choices, allow_other, title, turn_id, step_id, response_policy },
        };
        ask.check_default_answer()?;
        Ok(ask)
    }
}

fn type_error(path: &str, expected: &str) -> FieldError {
    FieldError::new(path, FieldCode::Type, format!("must be {expected}"))
}

/// A UUID member; `None` (with a problem recorded if it was required or malformed) otherwise.
fn id<T>(
    problems: &mut Vec<FieldError>,
    path: &str,
    raw: Option<Value>,
    required: bool,
    parse: fn(&str) -> Result<T, IdError>,
) -> Option<T> {
    match raw {
        None if required => {
            problems.push(FieldError::new(path, FieldCode::Required, "a UUID is required"));
            None
        }
        None => None,
        Some(Value::String(s)) => {
            parse(&s).map_err(|e| problems.push(FieldError::new(path, FieldCode::Type, e.to_string()))).ok()
        }
        Some(_) => {
            problems.push(type_error(path, "a UUID string"));
            None
        }
    }
}

/// A bounded, non-blank text member.
fn text(problems: &mut Vec<FieldError>, path: &str, raw: Value, max_bytes: usize) -> String {
    match raw {
        Value::String(s) => {
            problems.extend(check_text(path, &s, max_bytes));
            s
        }
        _ => {
            problems.push(type_error(path, "a string"));
            String::new()
        }
    }
}

fn check_choices(problems: &mut Vec<FieldError>, raw: Value) -> Vec<String> {
    let Value::Array(items) = raw else {
        problems.push(type_error("/choices", "an array of strings"));
        return Vec::new();
    };
    if items.is_empty() || items.len() > MAX_CHOICES {
        problems.push(FieldError::new(
            "/choices",
            FieldCode::OutOfRange,
            format!("1 to {MAX_CHOICES} choices, or none at all (got {})", items.len()),
        ));
    }
    let mut choices: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("/choices/{i}");
        let Value::String(choice) = item else {
            problems.push(type_error(&path, "a string"));
            continue;
        };
        if let Some(problem) = check_length(&path, &choice, MAX_CHOICE_BYTES, "a choice") {
            problems.push(problem);
        } else if choices.contains(&choice) {
            problems.push(FieldError::new(path, FieldCode::Duplicate, "choices must be distinct"));
        }
        choices.push(choice);
    }
    choices
}

/// Normalises a policy: a `wait` without a timeout is no policy (there is no deadline to
/// record), so the omission rule and re-asks see the same thing either way.
fn check_policy(problems: &mut Vec<FieldError>, raw: Value, max_timeout: i64) -> Option<ResponsePolicy> {
    let policy: ResponsePolicyIn = match serde_json::from_value(raw) {
        Ok(policy) => policy,
        Err(e) => {
            problems.push(FieldError::new("/response_policy", FieldCode::Type, e.to_string()));
            return None;
        }
    };
    let before = problems.len();
    if let Some(t) = policy.timeout.filter(|t| !(1..=max_timeout).contains(t)) {
        problems.push(FieldError::new(
            "/response_policy/timeout",
            FieldCode::OutOfRange,
            format!("timeout is in nanoseconds: more than 0 and at most {max_timeout} (got {t})"),
        ));
    }
    let on_timeout = match policy.on_timeout.as_deref() {
        None | Some("wait") => OnTimeout::Wait,
        Some("respond") => OnTimeout::Respond,
        Some(other) => {
            problems.push(FieldError::new(
                "/response_policy/on_timeout",
                FieldCode::OutOfRange,
                format!("on_timeout must be \"wait\" or \"respond\" (got {other:?})"),
            ));
            OnTimeout::Wait
        }
    };
    match (on_timeout, &policy.response) {
        (OnTimeout::Respond, None) => problems.push(FieldError::new(
            "/response_policy/response",
            FieldCode::Required,
            "on_timeout \"respond\" needs the response to give",
        )),
        (OnTimeout::Wait, Some(_)) => problems.push(FieldError::new(
            "/response_policy/response",
            FieldCode::UnknownKey,
            "a response is only given with on_timeout \"respond\"",
        )),
        _ => {}
    }
    if on_timeout == OnTimeout::Respond && policy.timeout.is_none() {
        problems.push(FieldError::new(
            "/response_policy/timeout",
            FieldCode::Required,
            "on_timeout \"respond\" needs a timeout",
        ));
    }
    if problems.len() > before || policy.timeout.is_none() {
        return None;
    }
    Some(ResponsePolicy { timeout: policy.timeout, on_timeout, response: policy.response })
}

impl AskUser {
    /// A `respond` template must itself be a valid answer of the gate it belongs to.
    fn check_default_answer(&self) -> Result<(), OpenRejection> {
        let gate = self.gate(GateId::mint());
        let Some(template) = gate.default_answer() else { return Ok(()) };
        const AT: &str = "/response_policy/response";
        match Answer::check(&gate, Some(&template.action), Some(&template.values)) {
            Ok(_) => Ok(()),
            Err(AnswerRejection::Action(action)) => Err(OpenRejection::TemplateAction(vec![FieldError::new(
                format!("{AT}/action"),
                FieldCode::NotAChoice,
                format!("action {action:?} is not among the gate's controls"),
            )])),
            Err(AnswerRejection::Values(fields)) => Err(OpenRejection::TemplateValues(
                fields.into_iter().map(|f| FieldError { path: format!("{AT}{}", f.path), ..f }).collect(),
            )),
        }
    }

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
        .validate(MAX_TIMEOUT_NANOS)
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
            "loop_id": "nope", "question": "  ", "choices": ["a", "a", "", 5], "allow_other": true,
            "title": 7, "response_policy": {"on_timeout": "respond", "timeout": 0}
        }))
        .validate(MAX_TIMEOUT_NANOS)
        .unwrap_err();
        let OpenRejection::Fields(fields) = err else { panic!("{err:?}") };
        let got: Vec<_> = fields.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(
            got,
            [
                ("/loop_id", FieldCode::Type),
                ("/tool_execution_id", FieldCode::Required),
                ("/question", FieldCode::Blank),
                ("/title", FieldCode::Type),
                ("/choices/1", FieldCode::Duplicate),
                ("/choices/2", FieldCode::Empty),
                ("/choices/3", FieldCode::Type),
                ("/response_policy/timeout", FieldCode::OutOfRange),
                ("/response_policy/response", FieldCode::Required),
            ]
        );
    }

    #[test]
    fn a_policy_without_timeout_is_no_policy() {
        let base = serde_json::json!({"loop_id": LOOP, "tool_execution_id": TOOL, "question": "Q"});
        let plain = body(base.clone()).validate(MAX_TIMEOUT_NANOS).unwrap();
        for policy in [serde_json::json!({}), serde_json::json!({"on_timeout": "wait"}), serde_json::Value::Null] {
            let mut with = base.clone();
            with["response_policy"] = policy;
            let ask = body(with).validate(MAX_TIMEOUT_NANOS).unwrap();
            assert_eq!(ask.content.canonical(), plain.content.canonical());
            assert!(ask.gate(GateId::mint()).response_policy.is_none(), "omitted when empty");
        }
    }

    #[test]
    fn choices_and_timeouts_are_bounded() {
        let base = serde_json::json!({"loop_id": LOOP, "tool_execution_id": TOOL, "question": "Q"});
        for (member, value, path) in [
            ("choices", serde_json::json!([]), "/choices"),
            ("choices", serde_json::json!("a"), "/choices"),
            ("response_policy", serde_json::json!({"timeout": MAX_TIMEOUT_NANOS + 1}), "/response_policy/timeout"),
            ("response_policy", serde_json::json!({"timeout": "soon"}), "/response_policy"),
        ] {
            let mut with = base.clone();
            with[member] = value;
            let OpenRejection::Fields(fields) = body(with).validate(MAX_TIMEOUT_NANOS).unwrap_err() else { panic!() };
            assert_eq!(fields[0].path, path);
        }
    }

    #[test]
    fn other_kinds_are_a_mismatch() {
        let err = body(serde_json::json!({"kind": "harness.permission"})).validate(MAX_TIMEOUT_NANOS).unwrap_err();
        assert_eq!(err, OpenRejection::KindMismatch("harness.permission".into()));
        let err = body(serde_json::json!({"kind": 5})).validate(MAX_TIMEOUT_NANOS).unwrap_err();
        assert!(matches!(err, OpenRejection::Fields(_)));
        let err = body(serde_json::json!({"kind": "harness.permission"})).validate(MAX_TIMEOUT_NANOS).unwrap_err();
        assert_eq!(err, OpenRejection::KindMismatch("harness.permission".into()));
    }
}
