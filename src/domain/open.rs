//! The open request (`POST /v1/sessions/{sid}/gates`, spec §5.1): every member checked, each
//! problem reported at its JSON Pointer, defaults applied, into the `Question` of one kind.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::answer::{Answer, AnswerRejection};
use super::ask_user::{
    AskContent, AskUser, DEFAULT_TITLE, MAX_CHOICE_BYTES, MAX_CHOICES, MAX_QUESTION_BYTES, MAX_TITLE_BYTES,
};
use super::fields::{FieldCode, FieldError, check_length, check_text};
use super::gate::{ASK_USER, Gate, KINDS, OnTimeout, PERMISSION, ResponsePolicy, ResponseTemplate};
use super::ids::{GateId, IdError, LoopId, StepId, ToolExecutionId, TurnId};
use super::permission::{Permission, PermissionContent};
use super::tool_call::{DENY, DESCRIBED, Requirement, Risk, ToolRequest, check_input, compile_schema};

/// The default longest timeout a policy may ask for (7 days, in nanoseconds).
pub const MAX_TIMEOUT_NANOS: i64 = 7 * 24 * 3600 * 1_000_000_000;

/// The server's rules for opens: the longest timeout a policy may ask for, and the timeout of a
/// permission gate's default policy (both in nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRules {
    pub max_timeout: i64,
    pub permission_timeout: i64,
}

impl Default for OpenRules {
    fn default() -> Self {
        Self { max_timeout: MAX_TIMEOUT_NANOS, permission_timeout: super::permission::DEFAULT_TIMEOUT_NANOS }
    }
}

/// The body of `POST /v1/sessions/{sid}/gates`: the members of every kind. Members are loose JSON
/// at this stage so that a missing or mistyped one is reported as a field problem (with its path)
/// rather than a bare decoding error; unknown members are still refused by the decoder, and a
/// member of another kind is a field problem of its own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenGateIn {
    pub kind: Option<Value>,
    pub loop_id: Option<Value>,
    pub tool_execution_id: Option<Value>,
    pub turn_id: Option<Value>,
    pub step_id: Option<Value>,
    pub response_policy: Option<Value>,
    // harness.ask_user
    pub question: Option<Value>,
    pub choices: Option<Value>,
    pub allow_other: Option<Value>,
    pub title: Option<Value>,
    // harness.permission: the harness's prepared request…
    pub tool_name: Option<Value>,
    pub summary: Option<Value>,
    pub execution_id: Option<Value>,
    pub command: Option<Value>,
    pub working_directory: Option<Value>,
    pub expires_at_unix_milli: Option<Value>,
    pub requirements: Option<Value>,
    // …and what agents outside the harness have.
    pub tool_input: Option<Value>,
    pub tool_input_schema: Option<Value>,
    pub risk: Option<Value>,
    pub editable: Option<Value>,
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
    /// A `kind` gatehouse does not serve.
    KindMismatch(String),
    /// One or more members are missing or out of bounds.
    Fields(Vec<FieldError>),
    /// The `respond` template's action is not a control of this gate.
    TemplateAction(Vec<FieldError>),
    /// The `respond` template's values are not a valid answer of this gate.
    TemplateValues(Vec<FieldError>),
}

/// A validated open request, of one kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    AskUser(AskUser),
    Permission(Permission),
}

impl Question {
    pub fn loop_id(&self) -> LoopId {
        match self {
            Self::AskUser(ask) => ask.loop_id,
            Self::Permission(permission) => permission.loop_id,
        }
    }

    pub fn tool_execution_id(&self) -> ToolExecutionId {
        match self {
            Self::AskUser(ask) => ask.tool_execution_id,
            Self::Permission(permission) => permission.tool_execution_id,
        }
    }

    /// The envelope of the gate this request opens.
    pub fn gate(&self, id: GateId) -> Gate {
        match self {
            Self::AskUser(ask) => ask.gate(id),
            Self::Permission(permission) => permission.gate(id),
        }
    }

    /// Canonical text of the content; equal text means the same question. AskUser's is its
    /// content alone (as stored before there were other kinds); other kinds name themselves, so
    /// a re-ask of another kind never matches.
    pub fn canonical(&self) -> String {
        let text = match self {
            Self::AskUser(ask) => serde_json::to_string(&ask.content),
            Self::Permission(permission) => {
                serde_json::to_string(&serde_json::json!({"kind": PERMISSION, "content": permission.content}))
            }
        };
        text.expect("plain data serialises")
    }
}

impl OpenGateIn {
    /// Checks every member and applies defaults, reporting all field problems at once.
    pub fn validate(mut self, rules: OpenRules) -> Result<Question, OpenRejection> {
        let mut problems = Vec::new();
        let kind = match present(self.kind.take()) {
            None => ASK_USER.to_owned(),
            Some(Value::String(kind)) if KINDS.contains(&kind.as_str()) => kind,
            Some(Value::String(other)) => return Err(OpenRejection::KindMismatch(other)),
            Some(_) => {
                problems.push(type_error("/kind", "a string"));
                ASK_USER.to_owned()
            }
        };
        let p = &mut problems;
        let loop_id = id(p, "/loop_id", present(self.loop_id.take()), true, LoopId::parse);
        let tool_execution_id =
            id(p, "/tool_execution_id", present(self.tool_execution_id.take()), true, ToolExecutionId::parse);
        let turn_id = id(p, "/turn_id", present(self.turn_id.take()), false, TurnId::parse);
        let step_id = id(p, "/step_id", present(self.step_id.take()), false, StepId::parse);
        let coordinates = Coordinates { loop_id, tool_execution_id, turn_id, step_id };
        let question = if kind == PERMISSION {
            self.permission(p, coordinates, rules)
        } else {
            self.ask_user(p, coordinates, rules)
        };
        if !problems.is_empty() {
            return Err(OpenRejection::Fields(problems));
        }
        let question = question.expect("no problems means every member parsed");
        check_default_answer(&question)?;
        Ok(question)
    }

    fn ask_user(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
        refuse_foreign(p, self.permission_members(), ASK_USER);
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
        let allow_other = flag(p, "/allow_other", self.allow_other);
        if allow_other && choices.is_empty() {
            p.push(FieldError::new(
                "/allow_other",
                FieldCode::OutOfRange,
                "allow_other is only meaningful together with choices",
            ));
        }
        let response_policy = present(self.response_policy).and_then(|v| check_policy(p, v, rules.max_timeout));
        let (loop_id, tool_execution_id) = (at.loop_id?, at.tool_execution_id?);
        let content = AskContent {
            question,
            choices,
            allow_other,
            title,
            turn_id: at.turn_id,
            step_id: at.step_id,
            response_policy,
        };
        Some(Question::AskUser(AskUser { loop_id, tool_execution_id, content }))
    }

    /// The members only an AskUser gate has, to refuse them on another kind.
    fn ask_user_members(&self) -> [(&'static str, &Option<Value>); 4] {
        [
            ("question", &self.question),
            ("choices", &self.choices),
            ("allow_other", &self.allow_other),
            ("title", &self.title),
        ]
    }

    /// The members only a permission gate has, to refuse them on another kind.
    fn permission_members(&self) -> [(&'static str, &Option<Value>); 11] {
        [
            ("tool_name", &self.tool_name),
            ("summary", &self.summary),
            ("execution_id", &self.execution_id),
            ("command", &self.command),
            ("working_directory", &self.working_directory),
            ("expires_at_unix_milli", &self.expires_at_unix_milli),
            ("requirements", &self.requirements),
            ("tool_input", &self.tool_input),
            ("tool_input_schema", &self.tool_input_schema),
            ("risk", &self.risk),
            ("editable", &self.editable),
        ]
    }

    fn permission(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
        refuse_foreign(p, self.ask_user_members(), PERMISSION);
        let mut string = |path: &str, raw: Option<Value>| match present(raw) {
            None => String::new(),
            Some(Value::String(s)) => s,
            Some(_) => {
                p.push(type_error(path, "a string"));
                String::new()
            }
        };
        let tool_name = string("/tool_name", self.tool_name);
        let summary = string("/summary", self.summary);
        let execution_id = string("/execution_id", self.execution_id);
        let command = string("/command", self.command);
        let working_directory = string("/working_directory", self.working_directory);
        let expires_at_unix_milli = match present(self.expires_at_unix_milli) {
            None => 0,
            Some(v) => v.as_i64().unwrap_or_else(|| {
                p.push(type_error("/expires_at_unix_milli", "an integer (milliseconds since the epoch)"));
                0
            }),
        };
        let requirements = present(self.requirements).map(|r| check_requirements(p, r)).unwrap_or_default();
        let request = ToolRequest {
            tool_name,
            summary,
            execution_id,
            command,
            working_directory,
            expires_at_unix_milli,
            requirements,
        };
        p.extend(request.check(at.tool_execution_id.map(|t| t.to_string()).as_deref()));
        let tool_input_schema = present(self.tool_input_schema);
        let schema = tool_input_schema
            .as_ref()
            .and_then(|schema| compile_schema("/tool_input_schema", schema).map_err(|problem| p.push(problem)).ok());
        let tool_input = present(self.tool_input);
        if let Some(input) = &tool_input {
            // An input that breaks its own schema could never be approved as it is.
            if let Err(problems) = check_input("/tool_input", input, schema.as_ref()) {
                p.extend(problems);
            }
        }
        let risk = match present(self.risk) {
            None => None,
            Some(raw) => serde_json::from_value::<Risk>(raw)
                .map_err(|_| {
                    p.push(FieldError::new("/risk", FieldCode::NotAChoice, "risk is low, medium, high or critical"))
                })
                .ok(),
        };
        let editable = flag(p, "/editable", self.editable);
        if editable && tool_input.is_none() {
            let message = "an editable gate needs the tool_input the approver edits";
            p.push(FieldError::new("/tool_input", FieldCode::Required, message));
        }
        let response_policy = permission_policy(p, self.response_policy, rules);
        let (loop_id, tool_execution_id) = (at.loop_id?, at.tool_execution_id?);
        let content = PermissionContent {
            request,
            tool_input,
            tool_input_schema,
            risk,
            editable,
            turn_id: at.turn_id,
            step_id: at.step_id,
            response_policy,
        };
        Some(Question::Permission(Permission { loop_id, tool_execution_id, content }))
    }
}

/// The members every kind shares, parsed (`None` where a problem was recorded).
struct Coordinates {
    loop_id: Option<LoopId>,
    tool_execution_id: Option<ToolExecutionId>,
    turn_id: Option<TurnId>,
    step_id: Option<StepId>,
}

/// `null` means absent, as the harness omits empty members.
fn present(v: Option<Value>) -> Option<Value> {
    v.filter(|v| !v.is_null())
}

/// A member of another kind, sent with this one: refused, not ignored, so that a body meant for
/// one kind is never read as another.
fn refuse_foreign<'a>(
    p: &mut Vec<FieldError>,
    members: impl IntoIterator<Item = (&'static str, &'a Option<Value>)>,
    kind: &str,
) {
    for (member, value) in members {
        if value.is_some() {
            let message = format!("{member} is not a member of a {kind} gate");
            p.push(FieldError::new(format!("/{member}"), FieldCode::UnknownKey, message));
        }
    }
}

fn flag(p: &mut Vec<FieldError>, path: &str, raw: Option<Value>) -> bool {
    match present(raw) {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            p.push(type_error(path, "a boolean"));
            false
        }
    }
}

/// Requirements as the harness sends them (objects), or as plain descriptions (strings).
fn check_requirements(p: &mut Vec<FieldError>, raw: Value) -> Vec<Requirement> {
    let Value::Array(items) = raw else {
        p.push(type_error("/requirements", "an array of requirement objects or strings"));
        return Vec::new();
    };
    let mut requirements = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("/requirements/{i}");
        match item {
            Value::String(description) => requirements.push(Requirement {
                kind: DESCRIBED.into(),
                scope: String::new(),
                matches: description.clone(),
                description,
                grant_class: String::new(),
                grant_target: String::new(),
                candidates: Vec::new(),
            }),
            object @ Value::Object(_) => match serde_json::from_value::<Requirement>(object) {
                Ok(requirement) => requirements.push(requirement),
                Err(e) => p.push(FieldError::new(path, FieldCode::Type, format!("not a requirement: {e}"))),
            },
            _ => p.push(type_error(&path, "a requirement object or a string")),
        }
    }
    requirements
}

/// A permission gate's policy: the caller's, or, when it sets neither a timeout nor what happens
/// at one, the harness default (deny after `--permission-timeout`).
fn permission_policy(p: &mut Vec<FieldError>, raw: Option<Value>, rules: OpenRules) -> Option<ResponsePolicy> {
    let chosen = present(raw).filter(|v| !(v.get("timeout").is_none() && v.get("on_timeout").is_none()));
    match chosen {
        Some(raw) => check_policy(p, raw, rules.max_timeout),
        None => Some(ResponsePolicy {
            timeout: Some(rules.permission_timeout.min(rules.max_timeout)),
            on_timeout: OnTimeout::Respond,
            response: Some(ResponseTemplate { action: DENY.into(), values: Map::new() }),
        }),
    }
}

/// A `respond` template must itself be a valid answer of the gate it belongs to.
fn check_default_answer(question: &Question) -> Result<(), OpenRejection> {
    let gate = question.gate(GateId::mint());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::gate::FieldKind;

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
        .validate(OpenRules::default())
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
        .validate(OpenRules::default())
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
        let plain = body(base.clone()).validate(OpenRules::default()).unwrap();
        for policy in [serde_json::json!({}), serde_json::json!({"on_timeout": "wait"}), serde_json::Value::Null] {
            let mut with = base.clone();
            with["response_policy"] = policy;
            let ask = body(with).validate(OpenRules::default()).unwrap();
            assert_eq!(ask.canonical(), plain.canonical());
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
            let OpenRejection::Fields(fields) = body(with).validate(OpenRules::default()).unwrap_err() else {
                panic!()
            };
            assert_eq!(fields[0].path, path);
        }
    }

    #[test]
    fn other_kinds_are_a_mismatch() {
        let err = body(serde_json::json!({"kind": "harness.form"})).validate(OpenRules::default()).unwrap_err();
        assert_eq!(err, OpenRejection::KindMismatch("harness.form".into()));
        let err = body(serde_json::json!({"kind": 5})).validate(OpenRules::default()).unwrap_err();
        assert!(matches!(err, OpenRejection::Fields(_)));
    }
}
