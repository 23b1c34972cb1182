//! Journal events and the loop command, in the harness envelope: `type`, `v: 1`, the header ids
//! and the type's own members. Top-level members are declared in lexicographic order because the
//! harness emits them sorted; optional members are omitted when empty (spec §4 omission rule).
//! These structs only serialise: the journal stores their JSON text and serves it verbatim.

use serde::Serialize;

use super::answer::{Answer, CloseReason};
use super::gate::Gate;
use super::ids::{CommandId, EventId, GateId, LoopId, SessionId, StepId, ToolExecutionId, TurnId};
use super::time::Timestamp;

/// Where an event or command belongs: the gate's prepare-time coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coordinates {
    pub session_id: SessionId,
    pub loop_id: LoopId,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
}

impl Coordinates {
    pub fn of(session_id: SessionId, gate: &Gate, loop_id: LoopId) -> Self {
        Self { session_id, loop_id, turn_id: gate.subject.turn_id, step_id: gate.subject.step_id }
    }
}

#[derive(Debug, Serialize)]
pub struct GateOpened<'a> {
    pub created_at: Timestamp,
    pub event_id: EventId,
    pub gate: &'a Gate,
    pub loop_id: LoopId,
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
    pub loop_id: LoopId,
    pub question: &'a str,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    pub tool_execution_id: ToolExecutionId,
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
struct AuditData {
    answer_preview: String,
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
    pub loop_id: LoopId,
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

    fn new(at: Coordinates, created_at: Timestamp, gate_id: GateId, reason: &'static str) -> Self {
        Self {
            action: None,
            audit: None,
            created_at,
            event_id: EventId::mint(),
            gate_id,
            loop_id: at.loop_id,
            reason,
            resolver: "loop",
            session_id: at.session_id,
            source: None,
            step_id: at.step_id,
            turn_id: at.turn_id,
            kind: Self::TYPE,
            v: 1,
        }
    }

    /// An answer, by a person or by the policy.
    pub fn answered(at: Coordinates, created_at: Timestamp, gate_id: GateId, answer: &Answer, by: &AnsweredBy) -> Self {
        Self {
            action: Some(answer.action.clone()),
            audit: Some(Audit { kind: "ask_user", data: AuditData { answer_preview: answer.preview() } }),
            source: Some(by.source()),
            ..Self::new(at, created_at, gate_id, by.reason())
        }
    }

    /// A withdrawal: no action, source or audit.
    pub fn closed(at: Coordinates, created_at: Timestamp, gate_id: GateId, reason: CloseReason) -> Self {
        Self::new(at, created_at, gate_id, reason.as_str())
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
    pub loop_id: LoopId,
    pub session_id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<StepId>,
    pub tool_execution_id: ToolExecutionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(rename = "type")]
    kind: &'static str,
    v: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl<'a> ProvideUserInput<'a> {
    /// An answer for the loop that asked.
    pub fn new(at: Coordinates, created_at: Timestamp, gate: &Gate, answer: &'a Answer, by: &AnsweredBy) -> Self {
        Self {
            agency: by.agency(),
            answer: &answer.text,
            command_id: CommandId::mint(),
            created_at,
            gate_id: gate.id,
            loop_id: at.loop_id,
            session_id: at.session_id,
            step_id: at.step_id,
            tool_execution_id: gate.subject.tool_execution_id,
            turn_id: at.turn_id,
            kind: "ProvideUserInput",
            v: 1,
        }
    }
}

/// Serialises an event or command to the compact JSON text the journal and inbox store.
pub fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("events serialise")
}
