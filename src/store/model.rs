//! The store's vocabulary, the same for every backend: what a gate looks like as stored, what
//! each write can come to, what a listing asks for, and the webhook delivery state. Pure types;
//! the backends (`sqlite`, `postgres`) produce and take them.

use serde::Serialize;
use serde_json::value::RawValue;

use super::{PageLimit, StoreError};
use crate::domain::events::{DecisionView, FormDecisionView, command, to_json};
use crate::domain::{
    Answer, AnsweredBy, CommandId, Coordinates, Gate, GateId, GateOpened, GateResolved, GateState, GateView, IdError,
    LoopId, PermissionDecided, PermissionRequested, Question, Reply, SessionId, Timestamp, UserInputRequested,
};

/// A gate as stored: its view plus what only the server sees.
#[derive(Debug, Clone)]
pub struct GateRecord {
    pub view: GateView,
    /// The winning answer's `Idempotency-Key` and fingerprint, if it sent a key.
    pub idempotency: Option<(String, String)>,
    /// The gate's secret (an open-URL gate's URL), sealed with the server key; cleared when the
    /// gate leaves `open`.
    pub secret: Option<Vec<u8>>,
}

/// How a gate's owner is stored: the unique (session, loop, tool execution) that finds a loop's
/// re-ask. A host-owned gate has neither, and is stored under the nil loop with its own id as
/// its tool execution, so it is unique and no re-ask ever finds it.
pub(crate) fn owner_columns(question: &Question, gate: GateId) -> (uuid::Uuid, uuid::Uuid) {
    match question.owner() {
        Some((loop_id, tool)) => (loop_id.as_uuid(), tool.as_uuid()),
        None => (uuid::Uuid::nil(), gate.as_uuid()),
    }
}

/// The loop of a stored owner: none for the nil loop of a host-owned gate (no loop id is nil, so
/// it can stand for none).
pub(crate) fn stored_loop(raw: uuid::Uuid) -> Result<Option<LoopId>, IdError> {
    if raw.is_nil() { Ok(None) } else { LoopId::from_uuid(raw).map(Some) }
}

/// `stored_loop` of a loop id stored as text.
pub(crate) fn stored_loop_text(raw: &str) -> Result<Option<LoopId>, IdError> {
    stored_loop(uuid::Uuid::try_parse(raw).map_err(|_| IdError::Malformed)?)
}

impl GateRecord {
    /// The envelope, parsed (it was written by this program).
    pub fn gate(&self) -> Result<Gate, StoreError> {
        parse_gate(self.view.gate.get())
    }
}

/// The gate an answer is for, as its caller read it: the envelope and the loop are fixed when a
/// gate opens, so the claim may build the `GateResolved` event and the command from them instead
/// of reading and parsing the gate again inside the transaction. Whether the gate is still open
/// is the claim's own question.
#[derive(Debug, Clone)]
pub struct Answering {
    pub session: SessionId,
    pub gate_id: GateId,
    pub loop_id: Option<LoopId>,
    pub gate: Gate,
}

impl GateRecord {
    /// What answering this gate needs to know of it.
    pub fn answering(&self) -> Result<Answering, StoreError> {
        let view = &self.view;
        Ok(Answering { session: view.session_id, gate_id: view.gate_id, loop_id: view.loop_id, gate: self.gate()? })
    }
}

/// An answer to claim a gate with: checked against its gate already, with the key it came with
/// and who gave it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub target: Answering,
    pub answer: Answer,
    pub key: Option<Idempotency>,
    pub by: AnsweredBy,
}

/// What opening a gate writes, made the same way on every backend: the gate, its events
/// (`GateOpened`, then `UserInputRequested` or `PermissionRequested` for a loop's question or
/// call; a form or an open-URL gate has only the first) and its deadlines, as of one instant.
pub(crate) struct Opening {
    pub gate: Gate,
    pub now: Timestamp,
    pub opened: String,
    /// The second event's type and JSON, if the kind has one.
    pub requested: Option<(&'static str, String)>,
    /// When its timeout passes, if it has one…
    pub deadline: Option<Timestamp>,
    /// …and when the policy answers then, if it has a default answer.
    pub respond_at: Option<Timestamp>,
}

impl Opening {
    pub(crate) fn new(session: SessionId, question: &Question, id: GateId) -> Self {
        let gate = question.gate(id);
        let now = Timestamp::now();
        let at = Coordinates::of(session, &gate, question.loop_id());
        let opened = to_json(&GateOpened::new(at, now, &gate));
        let requested = match question {
            Question::AskUser(ask) => Some((
                UserInputRequested::TYPE,
                to_json(&UserInputRequested::new(at, now, &gate, &ask.content.choices)),
            )),
            Question::Permission(_) => {
                let call = gate.tool_call.as_ref().expect("a permission gate carries its call");
                Some((PermissionRequested::TYPE, to_json(&PermissionRequested::new(at, now, &gate, call))))
            }
            Question::Form(_) | Question::OpenUrl(_) => None,
        };
        let deadline = gate.timeout_nanos().map(|t| now.plus_nanos(t));
        let respond_at = deadline.filter(|_| gate.default_answer().is_some());
        Self { gate, now, opened, requested, deadline, respond_at }
    }
}

/// What a claim writes besides the claim itself, made the same way on every backend from the
/// gate as the caller read it: `GateResolved`, for a permission gate `PermissionDecided` after it,
/// the loop's command (a host-owned gate has none), and what the gate row keeps of the answer (an
/// AskUser answer's text; the view of a decision, or of a form's or open-URL gate's answer).
pub(crate) struct Resolution {
    pub resolved: String,
    pub decided: Option<String>,
    pub command: Option<(CommandId, String)>,
    pub answer_text: Option<String>,
    pub decision: Option<String>,
}

impl Resolution {
    pub(crate) fn new(
        session: SessionId,
        loop_id: Option<LoopId>,
        gate: &Gate,
        answer: &Answer,
        by: &AnsweredBy,
    ) -> Self {
        let now = Timestamp::now();
        let at = Coordinates::of(session, gate, loop_id);
        let resolved = to_json(&GateResolved::answered(at, now, gate, answer, by));
        let decided = answer.decision().map(|d| to_json(&PermissionDecided::new(at, now, gate, d, by)));
        let decision = match &answer.reply {
            Reply::Text(_) => None,
            Reply::Decision(d) => Some(to_json(&DecisionView::new(answer, d, by, now))),
            Reply::Values(_) | Reply::Action => Some(to_json(&FormDecisionView::new(answer, by, now))),
        };
        Self {
            resolved,
            decided,
            command: command(at, now, gate, answer, by),
            answer_text: answer.text().map(str::to_owned),
            decision,
        }
    }

    /// The command's id and text, or nulls to bind for a host-owned gate's missing command.
    pub(crate) fn command_parts(&self) -> (Option<CommandId>, Option<&str>) {
        match &self.command {
            Some((id, text)) => (Some(*id), Some(text)),
            None => (None, None),
        }
    }
}

/// The result of an open.
#[derive(Debug)]
pub enum OpenOutcome {
    /// A new gate (201).
    Created(GateView),
    /// The same question asked again: the existing gate, whatever its state (200).
    Existing(GateView),
    /// The same tool execution asked something different (409 `gate_conflict`).
    Conflict(GateView),
    /// The session already holds its maximum of open gates (503 `gate_capacity`).
    Capacity,
}

/// The result of an answer.
#[derive(Debug)]
pub enum AnswerOutcome {
    /// Claimed, journaled and enqueued (202), or the replay of that with the same key and answer.
    Accepted { journal_seq: i64 },
    /// No such gate in this session (404).
    NotFound,
    /// Someone else's answer or a close won (409 `gate_not_ready`).
    NotReady { resolution: Box<RawValue> },
    /// The winner's key, with a different answer (409 `idempotency_conflict`).
    IdempotencyConflict,
}

/// An `Idempotency-Key` and the fingerprint of the answer it came with (`None` when the answer
/// does not fit the gate, so it can match no stored fingerprint).
#[derive(Debug, Clone)]
pub struct Idempotency {
    pub key: String,
    pub fingerprint: Option<String>,
}

/// What a request with this key gets from a gate that is no longer open, if the key decides it:
/// the winner's key with the winner's answer is the original 202 again; with another answer, a
/// conflict.
pub fn replay(record: &GateRecord, key: Option<&Idempotency>) -> Option<AnswerOutcome> {
    let (stored_key, stored_fingerprint) = record.idempotency.as_ref()?;
    let key = key.filter(|k| k.key == *stored_key)?;
    Some(if key.fingerprint.as_ref() == Some(stored_fingerprint) {
        AnswerOutcome::Accepted { journal_seq: record.view.resolved_seq? }
    } else {
        AnswerOutcome::IdempotencyConflict
    })
}

/// What an answer gets from a gate its claim did not take: `NotFound` for a gate not in this
/// session; for the winner's key, the winner's outcome again (`replay`); else `NotReady` with
/// the winning resolution.
pub(crate) fn unclaimed(
    record: Option<GateRecord>,
    session: SessionId,
    key: Option<&Idempotency>,
) -> Result<AnswerOutcome, StoreError> {
    let Some(record) = record.filter(|r| r.view.session_id == session) else {
        return Ok(AnswerOutcome::NotFound);
    };
    if let Some(outcome) = replay(&record, key) {
        return Ok(outcome);
    }
    match record.view.resolution {
        Some(resolution) => Ok(AnswerOutcome::NotReady { resolution }),
        None => Err(StoreError::Internal(format!(
            "gate {} is {:?} without a resolution",
            record.view.gate_id, record.view.state
        ))),
    }
}

/// What a deadline did to its gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expiry {
    /// The policy's answer won; this is its `GateResolved` seq.
    Answered(i64),
    /// The gate was no longer open (a person or a close won), or is unknown.
    Moot,
    /// Not yet, or not here: the gate is not due by the database's clock, or another replica is
    /// claiming it right now. The timer looks again shortly; the claim decides the winner anyway.
    Busy,
    /// This gate alone could not be answered (a broken stored gate); it was rolled back.
    Failed(String),
}

impl Expiry {
    /// The outcome's name, as the metrics count it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Answered(_) => "answered",
            Self::Moot => "moot",
            Self::Busy => "busy",
            Self::Failed(_) => "failed",
        }
    }
}

/// The result of a close.
#[derive(Debug)]
pub enum CloseOutcome {
    Closed(GateView),
    NotFound,
    NotReady { resolution: Box<RawValue> },
}

pub(crate) fn parse_gate(json: &str) -> Result<Gate, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Internal(format!("stored gate: {e}")))
}

/// The orders a listing can come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOrder {
    /// Oldest first.
    Opened,
    /// Newest first.
    Newest,
    /// Soonest deadline first; gates without a deadline last (oldest first among them).
    Deadline,
    /// Most recently resolved or closed first; open gates last (newest first among them).
    Resolved,
}

/// Where the previous page of a listing ended: the last gate's `opened_seq`, and its deadline
/// (`order=deadline`) or its `resolved_seq` (`order=resolved`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    pub key: Option<i64>,
    pub opened_seq: i64,
}

/// Which gates a listing wants.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub session: Option<SessionId>,
    /// Empty means every state.
    pub states: Vec<GateState>,
    /// Only gates of this kind (`harness.ask_user`, `harness.permission`).
    pub kind: Option<String>,
    pub order: ListOrder,
    pub page: PageLimit,
    pub after: Option<ListCursor>,
}

/// A value a listing's SQL binds.
pub(crate) enum ListParam<'a> {
    Session(SessionId),
    States(&'a [GateState]),
    Text(&'a str),
    Int(i64),
}

impl ListQuery {
    /// The listing's SQL after `select`: its filter, order and limit, the same on every backend.
    /// Each value is bound through `bind`, which returns its placeholder (for the states, the
    /// whole test that follows `g.state`).
    pub(crate) fn sql(&self, select: &str, mut bind: impl FnMut(ListParam<'_>) -> String) -> String {
        let mut clauses = Vec::new();
        if let Some(session) = self.session {
            clauses.push(format!("g.session_id = {}", bind(ListParam::Session(session))));
        }
        if !self.states.is_empty() {
            clauses.push(format!("g.state {}", bind(ListParam::States(&self.states))));
        }
        if let Some(kind) = &self.kind {
            clauses.push(format!("g.kind = {}", bind(ListParam::Text(kind))));
        }
        clauses.extend(self.after_clause(|value| bind(ListParam::Int(value))));
        let filter = if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) };
        let limit = bind(ListParam::Int(self.page.sql_limit()));
        format!("{select} {filter} ORDER BY {} LIMIT {limit}", self.order_by())
    }

    /// The listing's `ORDER BY`, the same on every backend.
    fn order_by(&self) -> &'static str {
        match self.order {
            ListOrder::Opened => "g.opened_seq ASC",
            ListOrder::Newest => "g.opened_seq DESC",
            ListOrder::Deadline => "g.deadline IS NULL, g.deadline, g.opened_seq",
            ListOrder::Resolved => "g.resolved_seq IS NULL, g.resolved_seq DESC, g.opened_seq DESC",
        }
    }

    /// The predicate that goes on after the previous page's last gate, if there was one. Each
    /// value is bound through `param`, which returns its placeholder; only the values the
    /// predicate uses are bound (PostgreSQL cannot type a parameter that is not used).
    fn after_clause(&self, mut param: impl FnMut(i64) -> String) -> Option<String> {
        let after = self.after?;
        Some(match (self.order, after.key) {
            (ListOrder::Opened, _) => format!("g.opened_seq > {}", param(after.opened_seq)),
            (ListOrder::Newest, _) => format!("g.opened_seq < {}", param(after.opened_seq)),
            (ListOrder::Deadline, None) => {
                format!("(g.deadline IS NULL AND g.opened_seq > {})", param(after.opened_seq))
            }
            (ListOrder::Deadline, Some(deadline)) => {
                let (seq, d) = (param(after.opened_seq), param(deadline));
                format!("(g.deadline IS NULL OR g.deadline > {d} OR (g.deadline = {d} AND g.opened_seq > {seq}))")
            }
            (ListOrder::Resolved, None) => {
                format!("(g.resolved_seq IS NULL AND g.opened_seq < {})", param(after.opened_seq))
            }
            // resolved_seq is unique, so it alone orders the resolved part.
            (ListOrder::Resolved, Some(resolved)) => {
                format!("(g.resolved_seq IS NULL OR g.resolved_seq < {})", param(resolved))
            }
        })
    }
}

/// A page of gates and the journal head read in the same read transaction.
#[derive(Debug)]
pub struct Listing {
    pub gates: Vec<GateView>,
    pub journal_seq: i64,
    /// More rows exist after the last one returned.
    pub more: bool,
}

/// Which page of one loop's inbox: the commands after `after`, acknowledged ones too if asked.
#[derive(Debug, Clone, Copy)]
pub struct InboxQuery {
    pub session: SessionId,
    pub loop_id: LoopId,
    pub after: i64,
    pub page: PageLimit,
    pub include_acked: bool,
}

/// Journal events with `after < seq <= upto`, of one session or all, a page at a time.
#[derive(Debug, Clone, Copy)]
pub struct JournalRange {
    pub session: Option<SessionId>,
    pub after: i64,
    pub upto: i64,
    pub page: PageLimit,
}

/// Events as stored (seq and JSON), and whether more remain in the range after the last.
pub type JournalRows = (Vec<(i64, String)>, bool);

/// An endpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    /// Every journal event up to this seq was delivered or dead-lettered.
    pub cursor: i64,
    pub disabled: bool,
}

/// The open gates, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    pub open: i64,
    /// Sessions holding at least one open gate.
    pub sessions: i64,
    /// When the oldest open gate opened.
    pub oldest_opened_at: Option<Timestamp>,
}

/// The pending attempt at one event of an endpoint, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub attempts: u32,
    pub next_at: Timestamp,
}

/// What became of one attempt at delivering an event, recorded under the endpoint's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Delivered: the cursor moves past the event.
    Delivered,
    /// Failed, to be tried again at `next_at`.
    Retry { attempts: u32, next_at: Timestamp, error: String },
    /// Out of attempts: a dead letter, and the cursor moves on.
    DeadLetter { attempts: u32, error: String },
}

/// The state of a delivery in the listing: still being tried, or given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    Pending,
    Failed,
}

impl DeliveryStatus {
    /// As stored, and as `GET /v1/webhooks/deliveries?status=` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Failed => "failed",
        }
    }

    /// From the `status` query parameter's words.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Failed].into_iter().find(|status| status.as_str() == name)
    }
}

/// One row of the deliveries listing.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    pub url: String,
    pub journal_seq: i64,
    pub status: String,
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_at: Option<Timestamp>,
    pub last_error: String,
    pub updated_at: Timestamp,
}

/// A fenced hold on one webhook endpoint: only its holder delivers to it, and every write of the
/// delivery state names the lease, so a replica that lost its lease (it paused, the lease ran
/// out, another took over) can no longer move the endpoint's cursor. On SQLite, one process owns
/// the database, so its lease is always granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it (a replica's id).
    pub owner: String,
    /// Bumped each time the endpoint changes hands.
    pub epoch: i64,
}
