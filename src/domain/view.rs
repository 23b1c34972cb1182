//! The gate view: what every read of a gate returns (spec §4.2).

use serde::Serialize;
use serde_json::value::RawValue;

use super::ids::{GateId, LoopId, SessionId};
use super::time::Timestamp;

/// A gate leaves `open` exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateState {
    Open,
    Resolved,
    Closed,
}

impl GateState {
    pub const ALL: [Self; 3] = [Self::Open, Self::Resolved, Self::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Resolved => "resolved",
            Self::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }
}

/// One gate as clients see it. `gate` and `resolution` are the stored JSON, served verbatim, so
/// `resolution` is byte-for-byte the journaled `GateResolved`.
#[derive(Debug, Clone, Serialize)]
pub struct GateView {
    /// Also inside `gate`; kept apart for the server's own use.
    #[serde(skip)]
    pub gate_id: GateId,
    pub session_id: SessionId,
    /// The loop that asked; none for a host-owned gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<LoopId>,
    pub state: GateState,
    pub gate: Box<RawValue>,
    pub opened_seq: i64,
    pub opened_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_seq: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// A permission gate's decision (`DecisionView`), or a form's or open-URL gate's answer
    /// (`FormDecisionView`), as stored at its claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Box<RawValue>>,
}

/// One journal event with its seq, as journal pages list them.
#[derive(Debug, Clone, Serialize)]
pub struct JournalEntry {
    pub journal_seq: i64,
    pub event: Box<RawValue>,
}

/// A page of the journal (harness `EventJournalPage`: exactly these members).
#[derive(Debug, Clone, Serialize)]
pub struct JournalPage {
    pub events: Vec<JournalEntry>,
    pub next_journal_seq: i64,
    pub done: bool,
}

/// One command in a loop's inbox.
#[derive(Debug, Clone, Serialize)]
pub struct InboxEntry {
    pub seq: i64,
    pub command: Box<RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acked_at: Option<Timestamp>,
}

/// About how many bytes a row adds to a JSON page: its stored JSON and text, plus the ids, seqs
/// and timestamps around them (escaping may add a little). Pages are capped in these bytes as
/// well as in rows, so a page of the largest gates stays bounded.
pub trait PageBytes {
    fn page_bytes(&self) -> usize;
}

impl PageBytes for GateView {
    fn page_bytes(&self) -> usize {
        const AROUND: usize = 320;
        let resolution = self.resolution.as_ref().map_or(0, |r| r.get().len());
        let decision = self.decision.as_ref().map_or(0, |d| d.get().len());
        self.gate.get().len() + resolution + decision + self.answer.as_ref().map_or(0, String::len) + AROUND
    }
}

impl PageBytes for JournalEntry {
    fn page_bytes(&self) -> usize {
        self.event.get().len() + 40
    }
}

impl PageBytes for InboxEntry {
    fn page_bytes(&self) -> usize {
        self.command.get().len() + 80
    }
}
