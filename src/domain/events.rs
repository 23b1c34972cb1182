//! Journal events and the loop command, in the harness envelope: `type`, `v: 1`, the header ids
//! and the type's own members. Top-level members are declared in lexicographic order because the
//! harness emits them sorted; optional members are omitted when empty (spec §4 omission rule).
//! These structs only serialise: the journal stores their JSON text and serves it verbatim.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::answer::{Answer, CloseReason, Reply};
use super::form::audit_values;
use super::gate::{Gate, LOOP, SESSION};
use super::ids::{CommandId, EventId, GateId, LoopId, SessionId, StepId, ToolExecutionId, TurnId};
use super::time::Timestamp;
use super::tool_call::{APPROVE_ALWAYS, Decision, Risk, ToolCall, ToolRequest};

/// Where an event or command belongs: the gate's prepare-time coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coordinates {
    pub session_id: SessionId,
    /// None for a host-owned gate.
    pub loop_id: Option<LoopId>,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
}

impl Coordinates {
    pub fn of(session_id: SessionId, gate: &Gate, loop_id: Option<LoopId>) -> Self {
        Self { session_id, loop_id, turn_id: gate.subject.turn_id, step_id: gate.subject.step_id }
    }
}

#[derive(Debug, Serialize)]
pub struct GateOpened<'a> {
    pub created_at: Timestamp,
    pub event_id: EventId,
    pub gate: &'a Gate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

impl<'a> GateOpened<'a> {
    pub const TYPE: &'static str = "GateOpened";

    pub fn new(at: Coordinates, created_at: Timestamp, gate: &'a Gate) -> Self {
        Self {
            created_at,
            event_id: EventId::mint(),
            gate,
            loop_id: at.loop_id,
            session_id: at.session_id,
            step_id: at.step_id,
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct UserInputRequested<'a> {
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub choices: &'a [String],
    pub created_at: Timestamp,
    pub event_id: EventId,
    /// Additive to the harness shape, so a client can correlate without the subject.
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub question: &'a str,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

impl<'a> UserInputRequested<'a> {
    pub const TYPE: &'static str = "UserInputRequested";

    pub fn new(at: Coordinates, created_at: Timestamp, gate: &'a Gate, choices: &'a [String]) -> Self {
        Self {
            choices,
            created_at,
            event_id: EventId::mint(),
            gate_id: gate.id,
            loop_id: at.loop_id,
            question: &gate.prompt.body,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id: gate.subject.tool_execution_id,
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }
}

/// Who produced a resolution.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// Who gave an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnsweredBy {
    /// A person, through the API: `principal` is the token's name, `answer-link` or `webhook`
    /// (none in open mode).
    Person { principal: Option<String> },
    /// The gate's `respond` policy, at its deadline.
    Timeout,
}

impl AnsweredBy {
    fn source(&self) -> Source {
        match self {
            Self::Person { principal } => Source { kind: "user", reason: None, principal: principal.clone() },
            Self::Timeout => Source { kind: "policy", reason: Some("timeout"), principal: None },
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Self::Person { .. } => "answered",
            Self::Timeout => "policy_response",
        }
    }

    /// The person's principal, if a person with one answered.
    pub fn principal(&self) -> Option<&str> {
        match self {
            Self::Person { principal } => principal.as_deref(),
            Self::Timeout => None,
        }
    }

    /// 1 for a person; 0 (omitted) for a policy.
    fn agency(&self) -> u8 {
        match self {
            Self::Person { .. } => 1,
            Self::Timeout => 0,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Audit {
    kind: &'static str,
    data: AuditData,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum AuditData {
    AskUser {
        answer_preview: String,
    },
    Permission {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        requirement_descriptions: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        candidate_descriptions: Vec<String>,
    },
    Form {
        values: BTreeMap<String, String>,
    },
}

impl Audit {
    /// What `GateResolved` keeps of an answer (harness rules): an AskUser answer's preview; an
    /// approval's requirement descriptions, and its candidates' for `Approve always`; an accepted
    /// form's values as text; nothing of a denial, a declined or cancelled form, or an open-URL
    /// gate's answer.
    fn of(gate: &Gate, answer: &Answer) -> Option<Self> {
        match (&answer.reply, &gate.tool_call) {
            (Reply::Text(_), _) => {
                Some(Self { kind: "ask_user", data: AuditData::AskUser { answer_preview: answer.preview() } })
            }
            (Reply::Decision(decision), Some(call)) if decision.approved => {
                let requirements = &call.request.requirements;
                Some(Self {
                    kind: "permission",
                    data: AuditData::Permission {
                        requirement_descriptions: requirements.iter().map(|r| r.description.clone()).collect(),
                        candidate_descriptions: match decision.always {
                            true => call.request.candidate_descriptions().map(str::to_owned).collect(),
                            false => Vec::new(),
                        },
                    },
                })
            }
            (Reply::Decision(_), _) | (Reply::Action, _) => None,
            (Reply::Values(values), _) => {
                Some(Self { kind: "form", data: AuditData::Form { values: audit_values(values) } })
            }
        }
    }
}

#[derive(Debug, Serialize)]
pub struct GateResolved {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
    pub created_at: Timestamp,
    pub event_id: EventId,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub reason: &'static str,
    pub resolver: &'static str,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

impl GateResolved {
    pub const TYPE: &'static str = "GateResolved";

    fn new(at: Coordinates, created_at: Timestamp, gate: &Gate, reason: &'static str) -> Self {
        Self {
            action: None,
            audit: None,
            created_at,
            event_id: EventId::mint(),
            gate_id: gate.id,
            loop_id: at.loop_id,
            reason,
            resolver: if gate.host_owned() { SESSION } else { LOOP },
            session_id: at.session_id,
            source: None,
            step_id: at.step_id,
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }

    /// An answer, by a person or by the policy.
    pub fn answered(at: Coordinates, created_at: Timestamp, gate: &Gate, answer: &Answer, by: &AnsweredBy) -> Self {
        Self {
            action: Some(answer.action.clone()),
            audit: Audit::of(gate, answer),
            source: Some(by.source()),
            ..Self::new(at, created_at, gate, by.reason())
        }
    }

    /// A withdrawal: no action, source or audit.
    pub fn closed(at: Coordinates, created_at: Timestamp, gate: &Gate, reason: CloseReason) -> Self {
        Self::new(at, created_at, gate, reason.as_str())
    }
}

/// The command that hands an answer to the owning loop (spec §4.4).
#[derive(Debug, Serialize)]
pub struct ProvideUserInput<'a> {
    /// 1 for a person; omitted (0) for a policy.
    #[serde(skip_serializing_if = "is_zero")]
    pub agency: u8,
    pub answer: &'a str,
    pub command_id: CommandId,
    pub created_at: Timestamp,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// The prepared call a permission gate asks leave for, as the harness announces it after
/// `GateOpened`: the request as displayed, plus (additive) the gate's id and what the harness's
/// request has no member for.
#[derive(Debug, Serialize)]
pub struct PermissionRequested<'a> {
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub editable: bool,
    pub event_id: EventId,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub request: &'a ToolRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

impl<'a> PermissionRequested<'a> {
    pub const TYPE: &'static str = "PermissionRequested";

    pub fn new(at: Coordinates, created_at: Timestamp, gate: &Gate, call: &'a ToolCall) -> Self {
        Self {
            created_at,
            editable: call.editable,
            event_id: EventId::mint(),
            gate_id: gate.id,
            loop_id: at.loop_id,
            request: &call.request,
            risk: call.risk,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id: gate.subject.tool_execution_id,
            tool_input: call.tool_input.as_ref(),
            tool_input_schema: call.tool_input_schema.as_ref(),
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }
}

/// The longest `audit` summary of a `PermissionDecided` (the harness's bound).
const MAX_DECIDED_AUDIT_BYTES: usize = 1024;

/// The decision on a permission gate, journaled right after its `GateResolved`: the effect, a
/// reason code (`approved`, `denied`, `timed_out`), the person's words on a denial (`message`),
/// whether the input was edited (and then the input it runs with), and the harness's `subject`
/// (the tool's name) and `audit` (a one-line summary).
#[derive(Debug, Serialize)]
pub struct PermissionDecided {
    pub audit: String,
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
    pub effect: &'static str,
    pub event_id: EventId,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    pub reason: &'static str,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    pub subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

impl PermissionDecided {
    pub const TYPE: &'static str = "PermissionDecided";

    pub fn new(at: Coordinates, created_at: Timestamp, gate: &Gate, decision: &Decision, by: &AnsweredBy) -> Self {
        let request = gate.tool_call.as_ref().map(|c| &c.request);
        let subject = request.map(|r| r.tool_name.clone()).unwrap_or_default();
        let summary = request.map(|r| r.summary.as_str()).filter(|s| !s.is_empty());
        let audit = match summary {
            Some(summary) => format!("{subject}: {summary}"),
            None => subject.clone(),
        };
        let reason = match (by, decision.approved) {
            (AnsweredBy::Timeout, _) => "timed_out",
            (_, true) => "approved",
            (_, false) => "denied",
        };
        Self {
            audit: one_line(&audit, MAX_DECIDED_AUDIT_BYTES),
            created_at,
            edited: decision.edited,
            effect: decision.effect(),
            event_id: EventId::mint(),
            gate_id: gate.id,
            loop_id: at.loop_id,
            message: decision.reason.clone(),
            principal: by.principal().map(str::to_owned),
            reason,
            session_id: at.session_id,
            step_id: at.step_id,
            subject,
            tool_execution_id: gate.subject.tool_execution_id,
            tool_input: decision.tool_input.clone().filter(|_| decision.edited),
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }
}

/// Control characters become spaces, and the text is cut at a character boundary within `max`
/// bytes (the harness's audit summary rules).
fn one_line(text: &str, max: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars().map(|c| if c.is_control() { ' ' } else { c }) {
        if line.len() + c.len_utf8() > max {
            break;
        }
        line.push(c);
    }
    line
}

/// The command that lets the owning loop run its tool call: the action (`Approve`, or `Approve
/// always for this workspace`), and (additive) the input it runs with and whether a person edited
/// it.
#[derive(Debug, Serialize)]
pub struct ApproveToolCall<'a> {
    pub action: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    pub agency: u8,
    pub command_id: CommandId,
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

/// The command that tells the owning loop its tool call was denied, with (additive) the reason.
#[derive(Debug, Serialize)]
pub struct DenyToolCall<'a> {
    #[serde(skip_serializing_if = "is_zero")]
    pub agency: u8,
    pub command_id: CommandId,
    pub created_at: Timestamp,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

/// The command that hands a form's answer to the owning loop (additive to the harness, whose
/// forms are host-owned only): the action and, on accept, the typed values.
#[derive(Debug, Serialize)]
pub struct ProvideFormInput<'a> {
    pub action: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    pub agency: u8,
    pub command_id: CommandId,
    pub created_at: Timestamp,
    pub gate_id: GateId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_execution_id: Option<ToolExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<&'a Map<String, Value>>,
}

/// The command an answer sends the owning loop, made from the gate as its caller read it: its id
/// and JSON text. A host-owned gate has no loop and gets none: its host reads the answer from
/// the gate.
pub fn command(
    at: Coordinates,
    created_at: Timestamp,
    gate: &Gate,
    answer: &Answer,
    by: &AnsweredBy,
) -> Option<(CommandId, String)> {
    if gate.host_owned() || at.loop_id.is_none() {
        return None;
    }
    let command_id = CommandId::mint();
    let (gate_id, tool_execution_id) = (gate.id, gate.subject.tool_execution_id);
    let text = match &answer.reply {
        Reply::Text(text) => to_json(&ProvideUserInput {
            agency: by.agency(),
            answer: text,
            command_id,
            created_at,
            gate_id,
            loop_id: at.loop_id,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id,
            turn_id: at.turn_id,
            kind: "ProvideUserInput",
            v: 1,
        }),
        Reply::Decision(decision) if decision.approved => to_json(&ApproveToolCall {
            action: if decision.always { APPROVE_ALWAYS } else { &answer.action },
            agency: by.agency(),
            command_id,
            created_at,
            edited: decision.edited,
            gate_id,
            loop_id: at.loop_id,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id,
            tool_input: decision.tool_input.as_ref(),
            turn_id: at.turn_id,
            kind: "ApproveToolCall",
            v: 1,
        }),
        Reply::Decision(decision) => to_json(&DenyToolCall {
            agency: by.agency(),
            command_id,
            created_at,
            gate_id,
            loop_id: at.loop_id,
            reason: decision.reason.as_deref(),
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id,
            turn_id: at.turn_id,
            kind: "DenyToolCall",
            v: 1,
        }),
        Reply::Values(_) | Reply::Action => to_json(&ProvideFormInput {
            action: &answer.action,
            agency: by.agency(),
            command_id,
            created_at,
            gate_id,
            loop_id: at.loop_id,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id,
            turn_id: at.turn_id,
            kind: "ProvideFormInput",
            v: 1,
            values: answer.values(),
        }),
    };
    Some((command_id, text))
}

/// A permission gate's decision as its view shows it (`decision`), stored at the claim.
#[derive(Debug, Serialize)]
pub struct DecisionView<'a> {
    pub effect: &'static str,
    pub action: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<&'a Value>,
    pub edited: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// `user` or `policy`.
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<&'a str>,
    pub decided_at: Timestamp,
}

impl<'a> DecisionView<'a> {
    pub fn new(answer: &'a Answer, decision: &'a Decision, by: &'a AnsweredBy, decided_at: Timestamp) -> Self {
        Self {
            effect: decision.effect(),
            action: &answer.action,
            tool_input: decision.tool_input.as_ref(),
            edited: decision.edited,
            reason: decision.reason.as_deref(),
            source: by.source().kind,
            principal: by.principal(),
            decided_at,
        }
    }
}

/// A form's or an open-URL gate's answer as its view shows it (`decision`), stored at the claim:
/// the action, an accepted form's typed values, and who gave it.
#[derive(Debug, Serialize)]
pub struct FormDecisionView<'a> {
    pub action: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<&'a Map<String, Value>>,
    /// `user` or `policy`.
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<&'a str>,
    pub decided_at: Timestamp,
}

impl<'a> FormDecisionView<'a> {
    pub fn new(answer: &'a Answer, by: &'a AnsweredBy, decided_at: Timestamp) -> Self {
        Self {
            action: &answer.action,
            values: answer.values(),
            source: by.source().kind,
            principal: by.principal(),
            decided_at,
        }
    }
}

/// Serialises an event or command to the compact JSON text the journal and inbox store.
pub fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("events serialise")
}
