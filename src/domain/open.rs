//! The open request (`POST /v1/sessions/{sid}/gates`, spec §5.1): every member checked, each
//! problem reported at its JSON Pointer, defaults applied, into the `Question` of one kind.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::answer::{Answer, AnswerRejection};
use super::ask_user::{
    AskContent, AskUser, DEFAULT_TITLE, MAX_CHOICE_BYTES, MAX_CHOICES, MAX_QUESTION_BYTES, MAX_TITLE_BYTES,
};
use super::fields::{FieldCode, FieldError, check_length, check_text};
use super::form::{Form, FormContent, check_fields};
use super::gate::{
    ASK_USER, FORM, Field, Gate, KINDS, OPEN_URL, OnTimeout, PERMISSION, ResponsePolicy, ResponseTemplate,
};
use super::ids::{GateId, IdError, LoopId, StepId, ToolExecutionId, TurnId};
use super::open_url::{OpenUrl, OpenUrlContent, origin_of};
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
    // harness.form and harness.open_url (and `title`, above)
    pub body: Option<Value>,
    /// The harness's `{"fields": […]}`…
    pub schema: Option<Value>,
    /// …or a JSON Schema, as text: its property order is the form's field order.
    pub json_schema: Option<Box<RawValue>>,
    pub url: Option<Value>,
    pub requires_completion: Option<Value>,
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
    Form(Form),
    OpenUrl(OpenUrl),
}

impl Question {
    /// The loop that asks and the tool call it asks for; `None` for a host-owned gate.
    pub fn owner(&self) -> Option<(LoopId, ToolExecutionId)> {
        match self {
            Self::AskUser(ask) => Some((ask.loop_id, ask.tool_execution_id)),
            Self::Permission(permission) => Some((permission.loop_id, permission.tool_execution_id)),
            Self::Form(form) => form.owner,
            Self::OpenUrl(_) => None,
        }
    }

    pub fn loop_id(&self) -> Option<LoopId> {
        self.owner().map(|(loop_id, _)| loop_id)
    }

    /// The envelope of the gate this request opens.
    pub fn gate(&self, id: GateId) -> Gate {
        match self {
            Self::AskUser(ask) => ask.gate(id),
            Self::Permission(permission) => permission.gate(id),
            Self::Form(form) => form.gate(id),
            Self::OpenUrl(open) => open.gate(id),
        }
    }

    /// What the gate keeps secret (an open-URL gate's URL), to be sealed by the store.
    pub fn secret(&self) -> Option<&str> {
        match self {
            Self::OpenUrl(open) => Some(&open.url),
            _ => None,
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
            Self::Form(form) => serde_json::to_string(&serde_json::json!({"kind": FORM, "content": form.content})),
            // Never the URL: the content is stored in the clear.
            Self::OpenUrl(open) => {
                serde_json::to_string(&serde_json::json!({"kind": OPEN_URL, "content": open.content}))
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
        self.refuse_foreign(p, &kind);
        // A loop's question names its loop and tool call; a host-owned gate names neither.
        let owned = matches!(kind.as_str(), ASK_USER | PERMISSION);
        let loop_id = id(p, "/loop_id", present(self.loop_id.take()), owned, LoopId::parse);
        let tool_execution_id =
            id(p, "/tool_execution_id", present(self.tool_execution_id.take()), owned, ToolExecutionId::parse);
        let turn_id = id(p, "/turn_id", present(self.turn_id.take()), false, TurnId::parse);
        let step_id = id(p, "/step_id", present(self.step_id.take()), false, StepId::parse);
        let coordinates = Coordinates { loop_id, tool_execution_id, turn_id, step_id };
        let question = match kind.as_str() {
            PERMISSION => self.permission(p, coordinates, rules),
            FORM => self.form(p, coordinates, rules),
            OPEN_URL => self.open_url(p, coordinates, rules),
            _ => self.ask_user(p, coordinates, rules),
        };
        if !problems.is_empty() {
            return Err(OpenRejection::Fields(problems));
        }
        let question = question.expect("no problems means every member parsed");
        check_default_answer(&question)?;
        Ok(question)
    }

    fn ask_user(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
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

    /// The members that belong to some kinds only, with those kinds.
    fn kind_members(&self) -> [(&'static str, bool, &'static [&'static str]); 20] {
        const ASK: &[&str] = &[ASK_USER];
        const CALL: &[&str] = &[PERMISSION];
        const PROMPTED: &[&str] = &[ASK_USER, FORM, OPEN_URL];
        const HOSTED: &[&str] = &[FORM, OPEN_URL];
        [
            ("question", self.question.is_some(), ASK),
            ("choices", self.choices.is_some(), ASK),
            ("allow_other", self.allow_other.is_some(), ASK),
            ("title", self.title.is_some(), PROMPTED),
            ("tool_name", self.tool_name.is_some(), CALL),
            ("summary", self.summary.is_some(), CALL),
            ("execution_id", self.execution_id.is_some(), CALL),
            ("command", self.command.is_some(), CALL),
            ("working_directory", self.working_directory.is_some(), CALL),
            ("expires_at_unix_milli", self.expires_at_unix_milli.is_some(), CALL),
            ("requirements", self.requirements.is_some(), CALL),
            ("tool_input", self.tool_input.is_some(), CALL),
            ("tool_input_schema", self.tool_input_schema.is_some(), CALL),
            ("risk", self.risk.is_some(), CALL),
            ("editable", self.editable.is_some(), CALL),
            ("body", self.body.is_some(), HOSTED),
            ("schema", self.schema.is_some(), &[FORM]),
            ("json_schema", self.json_schema.is_some(), &[FORM]),
            ("url", self.url.is_some(), &[OPEN_URL]),
            ("requires_completion", self.requires_completion.is_some(), &[OPEN_URL]),
        ]
    }

    /// A member of another kind, sent with this one: refused, not ignored, so that a body meant
    /// for one kind is never read as another.
    fn refuse_foreign(&self, p: &mut Vec<FieldError>, kind: &str) {
        for (member, present, kinds) in self.kind_members() {
            if present && !kinds.contains(&kind) {
                let message = format!("{member} is not a member of a {kind} gate");
                p.push(FieldError::new(format!("/{member}"), FieldCode::UnknownKey, message));
            }
        }
    }

    /// A form: its fields, as the harness lists them or as JSON Schema, and who owns it.
    fn form(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
        let owner = at.owner(p);
        let (title, body) = prompt_text(p, self.title, self.body, super::form::DEFAULT_TITLE);
        let fields = match (present(self.schema), self.json_schema.filter(|s| s.get() != "null")) {
            (Some(_), Some(_)) => {
                let message = "give the fields either as schema or as json_schema, not both";
                p.push(FieldError::new("/json_schema", FieldCode::UnknownKey, message));
                Vec::new()
            }
            (None, None) => {
                p.push(FieldError::new("/schema", FieldCode::Required, "a form needs schema or json_schema"));
                Vec::new()
            }
            (Some(schema), None) => harness_fields(p, schema),
            (None, Some(json_schema)) => {
                let before = p.len();
                let mut fields = super::json_schema::fields(p, "/json_schema", json_schema.get());
                // The translation's own problems name the schema's keywords; checked further only
                // when it translated cleanly (the fields' paths are then the model's).
                if p.len() == before {
                    check_fields(p, "/json_schema/properties", &mut fields, false);
                }
                fields
            }
        };
        let response_policy = present(self.response_policy).and_then(|v| check_policy(p, v, rules.max_timeout));
        let content = FormContent { title, body, fields, turn_id: at.turn_id, step_id: at.step_id, response_policy };
        Some(Question::Form(Form { owner: owner?, content }))
    }

    /// An open-URL gate: always host-owned; the URL's origin is what the envelope shows.
    fn open_url(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
        let coordinates = [
            ("/loop_id", at.loop_id.is_some()),
            ("/tool_execution_id", at.tool_execution_id.is_some()),
            ("/turn_id", at.turn_id.is_some()),
            ("/step_id", at.step_id.is_some()),
        ];
        for (member, present) in coordinates {
            if present {
                let message = "an open-URL gate is host-owned: it names no loop, tool call, turn or step";
                p.push(FieldError::new(member, FieldCode::UnknownKey, message));
            }
        }
        let (title, body) = prompt_text(p, self.title, self.body, super::open_url::DEFAULT_TITLE);
        let url = match present(self.url) {
            None => {
                p.push(FieldError::new("/url", FieldCode::Required, "an open-URL gate needs its url"));
                None
            }
            Some(Value::String(url)) => Some(url),
            Some(_) => {
                p.push(type_error("/url", "a string"));
                None
            }
        };
        let origin = url.as_deref().and_then(|url| origin_of("/url", url).map_err(|problem| p.push(problem)).ok());
        let requires_completion = flag(p, "/requires_completion", self.requires_completion);
        let response_policy = present(self.response_policy).and_then(|v| check_policy(p, v, rules.max_timeout));
        let content = OpenUrlContent { title, body, origin: origin?, requires_completion, response_policy };
        Some(Question::OpenUrl(OpenUrl { content, url: url? }))
    }

    fn permission(self, p: &mut Vec<FieldError>, at: Coordinates, rules: OpenRules) -> Option<Question> {
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

impl Coordinates {
    /// A form's owner: its loop and tool call together, or neither (host-owned; then no turn or
    /// step either). `None` (with a problem recorded) when they do not go together.
    fn owner(&self, p: &mut Vec<FieldError>) -> Option<Option<(LoopId, ToolExecutionId)>> {
        match (self.loop_id, self.tool_execution_id) {
            (Some(loop_id), Some(tool)) => Some(Some((loop_id, tool))),
            (None, None) if self.turn_id.is_none() && self.step_id.is_none() => Some(None),
            (None, None) => {
                let message = "turn_id and step_id belong to a loop's form: give loop_id and tool_execution_id";
                p.push(FieldError::new("/loop_id", FieldCode::Required, message));
                None
            }
            (Some(_), None) => {
                p.push(FieldError::new("/tool_execution_id", FieldCode::Required, "a loop's form names its tool call"));
                None
            }
            (None, Some(_)) => {
                p.push(FieldError::new("/loop_id", FieldCode::Required, "a loop's form names its loop"));
                None
            }
        }
    }
}

/// A prompt's title (or its default) and its required body.
fn prompt_text(p: &mut Vec<FieldError>, title: Option<Value>, body: Option<Value>, default: &str) -> (String, String) {
    let title = match present(title) {
        None => default.to_owned(),
        Some(t) => text(p, "/title", t, MAX_TITLE_BYTES),
    };
    let body = match present(body) {
        None => {
            p.push(FieldError::new("/body", FieldCode::Required, "a body (what to tell the person) is required"));
            String::new()
        }
        Some(b) => text(p, "/body", b, MAX_QUESTION_BYTES),
    };
    (title, body)
}

/// The harness's `{"fields": […]}`, checked.
fn harness_fields(p: &mut Vec<FieldError>, schema: Value) -> Vec<Field> {
    const MEMBERS: [&str; 14] = [
        "name",
        "label",
        "kind",
        "required",
        "options",
        "description",
        "default",
        "min_length",
        "max_length",
        "minimum",
        "maximum",
        "min_items",
        "max_items",
        "fields",
    ];
    fn unknown_members(p: &mut Vec<FieldError>, path: &str, raw: &Value) {
        let Some(items) = raw.as_array() else { return };
        for (i, item) in items.iter().enumerate() {
            let Some(object) = item.as_object() else { continue };
            for key in object.keys().filter(|k| !MEMBERS.contains(&k.as_str())) {
                let message = format!("{key:?} is not a member of a form field");
                p.push(FieldError::new(format!("{path}/{i}/{key}"), FieldCode::UnknownKey, message));
            }
            if let Some(nested) = object.get("fields") {
                unknown_members(p, &format!("{path}/{i}/fields"), nested);
            }
        }
    }
    let Value::Object(mut schema) = schema else {
        p.push(type_error("/schema", "an object with fields"));
        return Vec::new();
    };
    if let Some(key) = schema.keys().find(|k| *k != "fields") {
        p.push(FieldError::new(format!("/schema/{key}"), FieldCode::UnknownKey, "a schema has only fields"));
    }
    let raw = schema.remove("fields").unwrap_or(Value::Null);
    let before = p.len();
    unknown_members(p, "/schema/fields", &raw);
    if p.len() > before {
        return Vec::new();
    }
    match serde_json::from_value::<Vec<Field>>(raw) {
        Ok(mut fields) => {
            check_fields(p, "/schema/fields", &mut fields, true);
            fields
        }
        Err(e) => {
            p.push(FieldError::new("/schema/fields", FieldCode::Type, format!("not a list of fields: {e}")));
            Vec::new()
        }
    }
}

/// `null` means absent, as the harness omits empty members.
fn present(v: Option<Value>) -> Option<Value> {
    v.filter(|v| !v.is_null())
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
        let err = body(serde_json::json!({"kind": "harness.elicit"})).validate(OpenRules::default()).unwrap_err();
        assert_eq!(err, OpenRejection::KindMismatch("harness.elicit".into()));
        let err = body(serde_json::json!({"kind": 5})).validate(OpenRules::default()).unwrap_err();
        assert!(matches!(err, OpenRejection::Fields(_)));
    }
}
