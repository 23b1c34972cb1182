//! A tool call that asks leave to run: the harness's prepared request (`tool.Request`: what the
//! call is and which capabilities it needs), what agents outside the harness send besides (the
//! call's input, the input's JSON Schema, a risk, whether the approver may edit the input), and the
//! decision a person or a policy gives on it. Pure data and rules; the permission gate is built
//! from these in `permission.rs`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use jsonschema::Validator;

use super::fields::{FieldCode, FieldError, check_normalized, pointer_token};

/// The harness's three approval actions, exact and case-sensitive.
pub const APPROVE: &str = "Approve";
pub const APPROVE_ALWAYS: &str = "Approve always for this workspace";
pub const DENY: &str = "Deny";

pub const MAX_TEXT_BYTES: usize = 1024;
pub const MAX_SUMMARY_BYTES: usize = 4096;
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;
pub const MAX_REQUIREMENTS: usize = 32;
pub const MAX_CANDIDATES: usize = 16;
/// The call's input and its schema, each as compact JSON.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
pub const MAX_REASON_BYTES: usize = 4096;

/// The harness `tool.Request`, members in its declaration order (its encoder's order), empty ones
/// omitted as it omits them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_directory: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expires_at_unix_milli: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<Requirement>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One capability the call needs. `scope` is always written, even empty, as the harness writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub kind: String,
    #[serde(default)]
    pub scope: String,
    #[serde(rename = "match")]
    pub matches: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grant_class: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grant_target: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
}

/// A rule "Approve always" would save for a requirement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub kind: String,
    #[serde(rename = "match")]
    pub matches: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grant_class: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grant_target: String,
}

/// The kind a requirement given as a plain string (only a description) gets.
pub const DESCRIBED: &str = "described";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
    Critical,
}

/// What the permission gate's envelope carries besides the harness members (additive `tool_call`):
/// the request as displayed, and what deciding on it needs, so that any reader of the gate, and the
/// answer check, have the whole call in hand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(flatten)]
    pub request: ToolRequest,
    /// The call's arguments, a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_input_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub editable: bool,
}

/// A decision on a tool call: approved (perhaps with an edited input, perhaps saving the
/// workspace rules) or denied (perhaps with a reason for the model).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub approved: bool,
    /// `Approve always for this workspace`.
    pub always: bool,
    /// The input the call runs with: the original, or the approver's edit (approvals only).
    pub tool_input: Option<Value>,
    pub edited: bool,
    /// A denial's reason.
    pub reason: Option<String>,
}

impl Decision {
    pub fn effect(&self) -> &'static str {
        if self.approved { "approve" } else { "deny" }
    }

    /// What decides whether two answers are the same: the action's effect and scope, the final
    /// input and the reason.
    pub fn canonical_values(&self) -> Value {
        let mut values = Map::new();
        if let Some(input) = &self.tool_input {
            values.insert("tool_input".into(), input.clone());
        }
        if let Some(reason) = &self.reason {
            values.insert("reason".into(), Value::String(reason.clone()));
        }
        Value::Object(values)
    }
}

impl ToolCall {
    /// Whether `Approve always for this workspace` has anything to save.
    pub fn has_candidates(&self) -> bool {
        self.request.requirements.iter().any(|r| !r.candidates.is_empty())
    }

    /// Checks an answer's values for an action (already known to be a control): an approval may
    /// carry the edited input (an editable gate only; it must fit the input's schema), a denial a
    /// reason. Other values carry no authority and are ignored, as in the harness.
    pub fn decide(&self, action: &str, values: &Map<String, Value>) -> Result<Decision, Vec<FieldError>> {
        let approved = match action {
            APPROVE | APPROVE_ALWAYS => true,
            DENY => false,
            other => {
                let message = format!("{other:?} is not an approval action");
                return Err(vec![FieldError::new("/action", FieldCode::NotAChoice, message)]);
            }
        };
        let present = |key: &str| values.get(key).filter(|v| !v.is_null());
        if !approved {
            const PATH: &str = "/values/reason";
            let reason = match present("reason") {
                None => None,
                Some(Value::String(reason)) if reason.trim().is_empty() => None,
                Some(Value::String(reason)) if reason.len() > MAX_REASON_BYTES => {
                    let message = format!("a reason must be at most {MAX_REASON_BYTES} bytes");
                    return Err(vec![FieldError::new(PATH, FieldCode::TooLong, message)]);
                }
                Some(Value::String(reason)) => Some(reason.clone()),
                Some(_) => return Err(vec![FieldError::new(PATH, FieldCode::Type, "the reason must be a string")]),
            };
            return Ok(Decision { approved, always: false, tool_input: None, edited: false, reason });
        }
        let always = action == APPROVE_ALWAYS;
        let Some(edit) = present("tool_input") else {
            return Ok(Decision { approved, always, tool_input: self.tool_input.clone(), edited: false, reason: None });
        };
        const PATH: &str = "/values/tool_input";
        if !self.editable {
            let message = "this gate is not editable: approve the input as it is, or deny it";
            return Err(vec![FieldError::new(PATH, FieldCode::UnknownKey, message)]);
        }
        let schema = self.tool_input_schema.as_ref().map(|schema| {
            // Checked when the gate opened; a stored schema that no longer compiles is the
            // server's fault, but the edit still cannot be checked, so it is refused, not waved on.
            compile_schema(PATH, schema)
                .map_err(|e| vec![FieldError { message: format!("the gate's {}", e.message), ..e }])
        });
        check_input(PATH, edit, schema.transpose()?.as_ref())?;
        let edited = self.tool_input.as_ref() != Some(edit);
        Ok(Decision { approved, always, tool_input: Some(edit.clone()), edited, reason: None })
    }
}

/// A call's input: a JSON object within its cap that fits its schema (compiled by
/// `compile_schema`), if it has one. Each schema violation is one field problem at its JSON
/// Pointer under `path`.
pub fn check_input(path: &str, input: &Value, schema: Option<&Validator>) -> Result<(), Vec<FieldError>> {
    if !input.is_object() {
        return Err(vec![FieldError::new(path, FieldCode::Type, "the tool input must be a JSON object")]);
    }
    let size = input.to_string().len();
    if size > MAX_INPUT_BYTES {
        let message = format!("the tool input must be at most {MAX_INPUT_BYTES} bytes of JSON (got {size})");
        return Err(vec![FieldError::new(path, FieldCode::TooLong, message)]);
    }
    let Some(validator) = schema else { return Ok(()) };
    let problems: Vec<FieldError> = validator
        .iter_errors(input)
        .map(|e| {
            use jsonschema::error::ValidationErrorKind as K;
            let code = match e.kind() {
                K::Required { .. } => FieldCode::Required,
                K::Type { .. } => FieldCode::Type,
                K::Enum { .. } | K::Constant { .. } => FieldCode::NotAChoice,
                K::MaxLength { .. } | K::MaxItems { .. } | K::MaxProperties { .. } => FieldCode::TooLong,
                K::Minimum { .. } | K::Maximum { .. } | K::ExclusiveMinimum { .. } | K::ExclusiveMaximum { .. } => {
                    FieldCode::OutOfRange
                }
                K::AdditionalProperties { .. } | K::UnevaluatedProperties { .. } => FieldCode::UnknownKey,
                K::UniqueItems => FieldCode::Duplicate,
                _ => FieldCode::Invalid,
            };
            let mut at = format!("{path}{}", e.instance_path().as_str());
            // A missing member is reported where it belongs, not at its parent.
            if let K::Required { property: Value::String(name) } = e.kind() {
                at = format!("{at}/{}", pointer_token(name.as_str()));
            }
            FieldError::new(at, code, e.to_string())
        })
        .collect();
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// Compiles a JSON Schema for the input, once for all the inputs it checks: an object or boolean
/// within its cap that is valid JSON Schema (by its meta-schema) and compiles without fetching
/// anything.
pub fn compile_schema(path: &str, schema: &Value) -> Result<Validator, FieldError> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err(FieldError::new(path, FieldCode::Type, "input schema must be a JSON Schema object"));
    }
    let size = schema.to_string().len();
    if size > MAX_SCHEMA_BYTES {
        let message = format!("input schema must be at most {MAX_SCHEMA_BYTES} bytes of JSON (got {size})");
        return Err(FieldError::new(path, FieldCode::TooLong, message));
    }
    jsonschema::validator_for(schema)
        .map_err(|e| FieldError::new(path, FieldCode::Invalid, format!("input schema is not valid JSON Schema: {e}")))
}

impl ToolRequest {
    /// What `Approve always for this workspace` would save: every requirement's candidates'
    /// descriptions, in order.
    pub fn candidate_descriptions(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().flat_map(|r| &r.candidates).map(|c| c.description.as_str())
    }

    /// The harness's `ValidateRequest`, with caps: normalized texts; requirements unique by their
    /// identity; each candidate of the requirement's kind and grant; and a request with a grant
    /// bound to one execution (`execution_id` equal to the gate's tool execution, when that is
    /// known), command, directory and expiry.
    pub fn check(&self, tool_execution_id: Option<&str>) -> Vec<FieldError> {
        let mut problems = Vec::new();
        let mut text = |path: &str, value: &str, max: usize, required: bool| {
            if required || !value.is_empty() {
                problems.extend(check_normalized(path, value, max));
            }
        };
        text("/tool_name", &self.tool_name, MAX_TEXT_BYTES, true);
        text("/summary", &self.summary, MAX_SUMMARY_BYTES, false);
        text("/command", &self.command, MAX_COMMAND_BYTES, false);
        text("/working_directory", &self.working_directory, MAX_TEXT_BYTES, false);
        text("/execution_id", &self.execution_id, MAX_TEXT_BYTES, false);
        if let Some(tool) = tool_execution_id
            && !self.execution_id.is_empty()
            && !self.execution_id.eq_ignore_ascii_case(tool)
        {
            let message = "execution_id, when given, must be the gate's tool_execution_id";
            problems.push(FieldError::new("/execution_id", FieldCode::Invalid, message));
        }
        if self.expires_at_unix_milli < 0 {
            problems.push(FieldError::new("/expires_at_unix_milli", FieldCode::OutOfRange, "must be positive"));
        }
        if self.requirements.len() > MAX_REQUIREMENTS {
            let message = format!("at most {MAX_REQUIREMENTS} requirements (got {})", self.requirements.len());
            problems.push(FieldError::new("/requirements", FieldCode::TooLong, message));
        }
        let mut seen = Vec::new();
        for (i, requirement) in self.requirements.iter().enumerate() {
            let at = format!("/requirements/{i}");
            problems.extend(requirement.check(&at, &self.command));
            let identity = (
                &requirement.kind,
                &requirement.scope,
                &requirement.matches,
                &requirement.grant_class,
                &requirement.grant_target,
            );
            if seen.contains(&identity) {
                problems.push(FieldError::new(at, FieldCode::Duplicate, "requirements must be distinct"));
            }
            seen.push(identity);
        }
        if self.requirements.iter().any(|r| !r.grant_class.is_empty()) {
            let mut need = |path: &str, missing: bool| {
                if missing {
                    let message = "required when a requirement carries a grant";
                    problems.push(FieldError::new(path, FieldCode::Required, message));
                }
            };
            need("/execution_id", self.execution_id.is_empty());
            need("/command", self.command.is_empty());
            need("/working_directory", self.working_directory.is_empty());
            need("/expires_at_unix_milli", self.expires_at_unix_milli <= 0);
        }
        problems
    }
}

impl Requirement {
    fn check(&self, at: &str, command: &str) -> Vec<FieldError> {
        let mut problems = Vec::new();
        for (member, value) in [("kind", &self.kind), ("match", &self.matches), ("description", &self.description)] {
            problems.extend(check_normalized(&format!("{at}/{member}"), value, MAX_TEXT_BYTES));
        }
        if !self.scope.is_empty() {
            problems.extend(check_normalized(&format!("{at}/scope"), &self.scope, MAX_TEXT_BYTES));
        }
        if self.grant_class.is_empty() != self.grant_target.is_empty() {
            let message = "grant_class and grant_target come together or not at all";
            problems.push(FieldError::new(format!("{at}/grant_class"), FieldCode::Required, message));
        }
        if self.kind == "command.execute" && !self.grant_class.is_empty() {
            let bound = self.scope.is_empty()
                && self.grant_class == "command.start.v1"
                && self.grant_target == self.matches
                && self.matches == command;
            if !bound {
                let message =
                    "a command.execute grant has no scope, class command.start.v1, and target = match = command";
                problems.push(FieldError::new(format!("{at}/grant_target"), FieldCode::Invalid, message));
            }
        }
        if self.candidates.len() > MAX_CANDIDATES {
            let message = format!("at most {MAX_CANDIDATES} candidates (got {})", self.candidates.len());
            problems.push(FieldError::new(format!("{at}/candidates"), FieldCode::TooLong, message));
        }
        let mut seen = Vec::new();
        for (j, candidate) in self.candidates.iter().enumerate() {
            let at = format!("{at}/candidates/{j}");
            for (member, value) in
                [("kind", &candidate.kind), ("match", &candidate.matches), ("description", &candidate.description)]
            {
                problems.extend(check_normalized(&format!("{at}/{member}"), value, MAX_TEXT_BYTES));
            }
            if candidate.kind != self.kind {
                let message = "a candidate has its requirement's kind";
                problems.push(FieldError::new(format!("{at}/kind"), FieldCode::Invalid, message));
            }
            if (&candidate.grant_class, &candidate.grant_target) != (&self.grant_class, &self.grant_target) {
                let message = "a candidate carries its requirement's grant";
                problems.push(FieldError::new(format!("{at}/grant_class"), FieldCode::Invalid, message));
            }
            let identity = (&candidate.kind, &candidate.matches, &candidate.grant_class, &candidate.grant_target);
            if seen.contains(&identity) {
                problems.push(FieldError::new(at, FieldCode::Duplicate, "candidates must be distinct"));
            }
            seen.push(identity);
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(editable: bool) -> ToolCall {
        ToolCall {
            request: ToolRequest { tool_name: "Bash".into(), ..ToolRequest::default() },
            tool_input: Some(json!({"command": "ls", "timeout": 10})),
            tool_input_schema: Some(json!({
                "type": "object", "required": ["command"], "additionalProperties": false,
                "properties": {"command": {"type": "string", "minLength": 1}, "timeout": {"type": "integer", "maximum": 600}}
            })),
            risk: Some(Risk::High),
            editable,
        }
    }

    fn values(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn edits_fit_the_schema_at_their_pointer() {
        let c = call(true);
        let bad = c.decide(APPROVE, &values(json!({"tool_input": {"timeout": 9000, "x": 1}}))).unwrap_err();
        let got: Vec<_> = bad.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert!(got.contains(&("/values/tool_input/command", FieldCode::Required)), "{got:?}");
        assert!(got.contains(&("/values/tool_input/timeout", FieldCode::OutOfRange)), "{got:?}");
        assert!(got.contains(&("/values/tool_input", FieldCode::UnknownKey)), "{got:?}");
        let edit = json!({"command": "ls -la"});
        let ok = c.decide(APPROVE, &values(json!({"tool_input": edit.clone()}))).unwrap();
        assert_eq!((ok.tool_input, ok.edited), (Some(edit), true));
        let same = c.decide(APPROVE, &values(json!({"tool_input": {"command": "ls", "timeout": 10}}))).unwrap();
        assert!(!same.edited, "an unchanged input is no edit");
    }

    #[test]
    fn only_an_editable_gate_takes_an_edit() {
        let err = call(false).decide(APPROVE, &values(json!({"tool_input": {"command": "rm"}}))).unwrap_err();
        assert_eq!(err[0].path, "/values/tool_input");
        let plain = call(false).decide(APPROVE, &values(json!({"scope": "workspace"}))).unwrap();
        assert_eq!(plain.tool_input, call(false).tool_input, "other values carry no authority");
    }

    #[test]
    fn a_denial_carries_a_bounded_reason() {
        let d = call(false).decide(DENY, &values(json!({"reason": "not on main", "tool_input": 5}))).unwrap();
        assert_eq!((d.approved, d.reason.as_deref(), d.tool_input), (false, Some("not on main"), None));
        assert_eq!(call(false).decide(DENY, &values(json!({"reason": "  "}))).unwrap().reason, None);
        let long = call(false).decide(DENY, &values(json!({"reason": "x".repeat(MAX_REASON_BYTES + 1)})));
        assert_eq!(long.unwrap_err()[0].code, FieldCode::TooLong);
    }

    #[test]
    fn schemas_must_be_json_schema() {
        let code = |schema: Value| compile_schema("/s", &schema).err().map(|e| e.code);
        assert_eq!(code(json!({"type": "object"})), None);
        assert_eq!(code(json!(true)), None);
        assert_eq!(code(json!({"type": "nope"})), Some(FieldCode::Invalid));
        assert_eq!(code(json!({"minLength": -1})), Some(FieldCode::Invalid));
        assert_eq!(code(json!("string")), Some(FieldCode::Type));
        assert!(code(json!({"$ref": "https://example.com/remote.json"})).is_some(), "nothing is fetched");
    }

    #[test]
    fn requests_follow_the_harness_rules() {
        let request: ToolRequest = serde_json::from_value(json!({
            "tool_name": "Bash", "summary": "git push", "command": "git push",
            "requirements": [
                {"kind": "command.execute", "scope": "", "match": "git push", "description": "run git push",
                 "grant_class": "command.start.v1", "grant_target": "git push",
                 "candidates": [{"kind": "network", "match": "Bash(git:*)", "description": " d"}]},
                {"kind": "command.execute", "scope": "", "match": "git push", "description": "run git push",
                 "grant_class": "command.start.v1", "grant_target": "git push"}
            ]
        }))
        .unwrap();
        let got: Vec<_> = request.check(Some("x")).into_iter().map(|f| (f.path, f.code)).collect();
        for expected in [
            ("/requirements/0/candidates/0/description".to_owned(), FieldCode::Blank),
            ("/requirements/0/candidates/0/kind".to_owned(), FieldCode::Invalid),
            ("/requirements/0/candidates/0/grant_class".to_owned(), FieldCode::Invalid),
            ("/requirements/1".to_owned(), FieldCode::Duplicate),
            ("/execution_id".to_owned(), FieldCode::Required),
            ("/working_directory".to_owned(), FieldCode::Required),
            ("/expires_at_unix_milli".to_owned(), FieldCode::Required),
        ] {
            assert!(got.contains(&expected), "{expected:?} not in {got:?}");
        }
    }

    #[test]
    fn the_request_keeps_the_harness_key_order() {
        let request = ToolRequest {
            tool_name: "Bash".into(),
            summary: "s".into(),
            requirements: vec![Requirement {
                kind: "network".into(),
                scope: String::new(),
                matches: "tcp:h:443".into(),
                description: "d".into(),
                grant_class: String::new(),
                grant_target: String::new(),
                candidates: Vec::new(),
            }],
            ..ToolRequest::default()
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"tool_name":"Bash","summary":"s","requirements":[{"kind":"network","scope":"","match":"tcp:h:443","description":"d"}]}"#
        );
    }
}
