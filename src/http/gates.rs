//! Gates: open (with idempotent re-ask), read, list, wait, answer (the exactly-once path) and
//! close (spec §5.1–§5.5).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::extract::{IdempotencyKey, JsonBody, OptionalJsonBody, Params, QueryParams, SignedJsonBody};
use super::{AppState, SessionPath, json, limit, pages, wait_deadline, wait_until};
use crate::auth::{Caller, PRINCIPAL_WEBHOOK};
use crate::domain::gate::{KINDS, OPEN_URL};
use crate::domain::{
    Answer, AnswerIn, AnswerRejection, AnsweredBy, CloseIn, FieldCode, FieldError, GateId, GateState, GateView,
    OpenGateIn, OpenRejection, SessionId,
};
use crate::http::error::ApiError;
use crate::metrics::Kind;
use crate::store::{
    self, AnswerOutcome, Claim, CloseOutcome, GateRecord, Idempotency, ListCursor, ListOrder, ListQuery, OpenOutcome,
};

#[derive(Deserialize)]
pub(super) struct GatePath {
    session_id: SessionId,
    gate_id: GateId,
}

#[derive(Deserialize)]
pub(super) struct GateIdPath {
    gate_id: GateId,
}

fn location(view: &GateView) -> HeaderValue {
    let path = format!("/v1/sessions/{}/gates/{}", view.session_id, view.gate_id);
    HeaderValue::from_str(&path).expect("ids are plain ASCII")
}

#[tracing::instrument(skip_all, fields(session_id = %session_id))]
pub(super) async fn open_gate(
    State(state): State<AppState>,
    Params(SessionPath { session_id }): Params<SessionPath>,
    JsonBody(body): JsonBody<OpenGateIn>,
) -> Result<Response, ApiError> {
    let question = body.validate(state.limits.open_rules).map_err(|rejection| match rejection {
        OpenRejection::KindMismatch(kind) => ApiError::GateKindMismatch(kind),
        OpenRejection::Fields(fields) => {
            ApiError::InvalidBody { message: "the gate request has invalid fields".into(), fields }
        }
        OpenRejection::TemplateAction(fields) => ApiError::GateActionInvalid(fields),
        OpenRejection::TemplateValues(fields) => ApiError::GateValuesInvalid(fields),
    })?;
    let (status, view) = match state.store.open_gate(session_id, question, state.limits.max_open_gates).await? {
        OpenOutcome::Created(view) => {
            state.metrics.gate_opened();
            (StatusCode::CREATED, view)
        }
        OpenOutcome::Existing(view) => (StatusCode::OK, view),
        OpenOutcome::Conflict(view) => return Err(ApiError::GateConflict(Box::new(view))),
        OpenOutcome::Capacity => return Err(ApiError::GateCapacity("the session holds its maximum of open gates")),
    };
    let mut response = json(status, &view);
    response.headers_mut().insert(header::LOCATION, location(&view));
    Ok(response)
}

/// A gate of this session, or 404 (also for a gate of another session).
async fn find_in_session(state: &AppState, session: SessionId, gate: GateId) -> Result<GateRecord, ApiError> {
    state.store.gate(gate).await?.filter(|r| r.view.session_id == session).ok_or(ApiError::GateNotFound)
}

pub(super) async fn get_gate(
    State(state): State<AppState>,
    Params(GatePath { session_id, gate_id }): Params<GatePath>,
) -> Result<Response, ApiError> {
    let record = find_in_session(&state, session_id, gate_id).await?;
    Ok(json(StatusCode::OK, &record.view))
}

pub(super) async fn get_gate_by_id(
    State(state): State<AppState>,
    Params(GateIdPath { gate_id }): Params<GateIdPath>,
) -> Result<Response, ApiError> {
    let record = state.store.gate(gate_id).await?.ok_or(ApiError::GateNotFound)?;
    Ok(json(StatusCode::OK, &record.view))
}

#[derive(Serialize)]
struct GateUrl {
    url: String,
}

/// An open-URL gate's URL, for a person allowed to answer it, while it is open: the one place it
/// leaves the server besides the answer-link page.
pub(super) async fn gate_url(
    State(state): State<AppState>,
    Params(GatePath { session_id, gate_id }): Params<GatePath>,
) -> Result<Response, ApiError> {
    let record = find_in_session(&state, session_id, gate_id).await?;
    match open_url_of(&state, &record)? {
        Some(url) => Ok(json(StatusCode::OK, &GateUrl { url })),
        None => match record.view.resolution {
            Some(resolution) if record.gate()?.kind == OPEN_URL => Err(ApiError::GateNotReady(resolution)),
            _ => Err(ApiError::GateNotFound),
        },
    }
}

/// The URL of an open-URL gate that is still open (the claim that closes it forgets the URL).
pub(super) fn open_url_of(state: &AppState, record: &GateRecord) -> Result<Option<String>, ApiError> {
    Ok(state.store.secret(record)?)
}

#[derive(Deserialize)]
pub(super) struct WaitQuery {
    timeout: Option<u64>,
}

/// Long-poll until the gate leaves `open`, the timeout passes, or the server shuts down.
pub(super) async fn wait_gate(
    State(state): State<AppState>,
    Params(GatePath { session_id, gate_id }): Params<GatePath>,
    QueryParams(WaitQuery { timeout }): QueryParams<WaitQuery>,
) -> Result<Response, ApiError> {
    let deadline = wait_deadline("timeout", timeout.unwrap_or(30))?;
    let _parked = state.metrics.long_poll(Kind::Gate);
    // Register interest before reading, so a resolution committed in between still wakes us.
    let mut interest = state.bus.watch_gate(gate_id);
    loop {
        let record = find_in_session(&state, session_id, gate_id).await?;
        if record.view.state != GateState::Open {
            return Ok(json(StatusCode::OK, &record.view));
        }
        if !wait_until(&state, deadline, interest.changed()).await {
            break;
        }
    }
    // Timed out (or shutting down) while open: the freshest view, whatever it is now.
    let record = find_in_session(&state, session_id, gate_id).await?;
    Ok(json(StatusCode::OK, &record.view))
}

#[derive(Serialize)]
struct Accepted {
    gate_id: GateId,
    journal_seq: i64,
}

/// The exactly-once path (spec §4.5 check order): lookup → idempotency → still open → action →
/// values → one writer job that claims, journals and enqueues.
#[tracing::instrument(skip_all, fields(session_id = %session_id, gate_id = %gate_id))]
pub(super) async fn answer_gate(
    State(state): State<AppState>,
    Params(GatePath { session_id, gate_id }): Params<GatePath>,
    caller: Caller,
    IdempotencyKey(key): IdempotencyKey,
    SignedJsonBody(body, signed_by): SignedJsonBody<AnswerIn>,
) -> Result<Response, ApiError> {
    // The guard lets an uncredentialled request through only with a signature, which the body
    // extractor has verified by now; this stays as a second lock should either change.
    if matches!(caller, Caller::Signature) && signed_by.is_none() {
        return Err(ApiError::Unauthorized("this route needs a token or a webhook signature".into()));
    }
    if !body.names_gate(gate_id) {
        return Err(ApiError::invalid_body("gate_id in the body must name the gate in the path"));
    }
    // A signature covers the body, not the path: a signed body must name its gate, or a captured
    // request could be replayed onto any other gate.
    if signed_by.is_some() && body.gate_id.is_none() {
        return Err(ApiError::Unauthorized("a signed answer must name its gate_id in the body".into()));
    }
    let record = find_in_session(&state, session_id, gate_id).await?;
    // A signed answer's `webhook-id` is its idempotency key. The principal is the caller's token
    // name; a signed answer without a token is `webhook`; in open mode an unsigned one has none.
    let (key, principal) = match signed_by {
        Some(webhook_id) => (Some(webhook_id), caller.principal().or_else(|| Some(PRINCIPAL_WEBHOOK.into()))),
        None => (key, caller.principal()),
    };
    let by = AnsweredBy::Person { principal };
    answer_record(&state, record, &body, key, by).await
}

/// The exactly-once path for a gate already found, whoever answers (spec §4.5 order from the
/// idempotency check on).
pub(super) async fn answer_record(
    state: &AppState,
    record: GateRecord,
    body: &AnswerIn,
    key: Option<String>,
    by: AnsweredBy,
) -> Result<Response, ApiError> {
    let target = record.answering()?;
    let gate_id = target.gate_id;
    // Checked now, reported after the idempotency and state checks. Only a valid answer has a
    // fingerprint; an invalid one cannot match the stored winner's.
    let checked = Answer::check(&target.gate, body.action.as_deref(), body.values.as_ref());
    let keyed = key.map(|key| Idempotency { key, fingerprint: checked.as_ref().ok().map(Answer::fingerprint) });
    if let Some(outcome) = store::replay(&record, keyed.as_ref()) {
        return accepted_or(gate_id, outcome);
    }
    if let Some(resolution) = record.view.resolution {
        return Err(ApiError::GateNotReady(resolution));
    }
    let checked = checked.map_err(|rejection| match rejection {
        AnswerRejection::Action(action) => ApiError::GateActionInvalid(vec![FieldError::new(
            "/action",
            FieldCode::NotAChoice,
            format!("action {action:?} is not among the gate's controls"),
        )]),
        AnswerRejection::Values(fields) => ApiError::GateValuesInvalid(fields),
    })?;
    let outcome = state.store.answer_gate(Claim { target, answer: checked, key: keyed, by }).await?;
    if matches!(outcome, AnswerOutcome::Accepted { .. }) {
        state.metrics.gate_resolved("answered");
    }
    accepted_or(gate_id, outcome)
}

fn accepted_or(gate_id: GateId, outcome: AnswerOutcome) -> Result<Response, ApiError> {
    match outcome {
        AnswerOutcome::Accepted { journal_seq } => Ok(json(StatusCode::ACCEPTED, &Accepted { gate_id, journal_seq })),
        AnswerOutcome::NotFound => Err(ApiError::GateNotFound),
        AnswerOutcome::NotReady { resolution } => Err(ApiError::GateNotReady(resolution)),
        AnswerOutcome::IdempotencyConflict => Err(ApiError::IdempotencyConflict),
    }
}

#[tracing::instrument(skip_all, fields(session_id = %session_id, gate_id = %gate_id))]
pub(super) async fn close_gate(
    State(state): State<AppState>,
    Params(GatePath { session_id, gate_id }): Params<GatePath>,
    OptionalJsonBody(body): OptionalJsonBody<CloseIn>,
) -> Result<Response, ApiError> {
    match state.store.close_gate(session_id, gate_id, body.reason).await? {
        CloseOutcome::Closed(view) => {
            state.metrics.gate_resolved(body.reason.as_str());
            Ok(json(StatusCode::OK, &view))
        }
        CloseOutcome::NotFound => Err(ApiError::GateNotFound),
        CloseOutcome::NotReady { resolution } => Err(ApiError::GateNotReady(resolution)),
    }
}

#[derive(Deserialize)]
pub(super) struct ListParams {
    state: Option<String>,
    kind: Option<String>,
    order: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

#[derive(Serialize)]
struct GateListing {
    gates: Vec<GateView>,
    journal_seq: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
}

/// Cursors are opaque to clients; inside they name the order they belong to and the position of
/// the last gate returned, so a cursor of one order cannot be replayed against another.
fn cursor(order: ListOrder, last: &GateView) -> String {
    match order {
        ListOrder::Opened => format!("o{}", last.opened_seq),
        ListOrder::Newest => format!("n{}", last.opened_seq),
        ListOrder::Deadline => keyed('d', last.deadline.map(|d| d.as_nanos()), last.opened_seq),
        ListOrder::Resolved => keyed('r', last.resolved_seq, last.opened_seq),
    }
}

/// `{prefix}{key or -}.{opened_seq}`.
fn keyed(prefix: char, key: Option<i64>, opened_seq: i64) -> String {
    match key {
        Some(key) => format!("{prefix}{key}.{opened_seq}"),
        None => format!("{prefix}-.{opened_seq}"),
    }
}

fn parse_cursor(order: ListOrder, raw: &str) -> Result<ListCursor, ApiError> {
    let seq = |n: &str| n.parse::<i64>().ok().filter(|n| *n >= 0);
    let keyed = |prefix: char| {
        let (key, s) = raw.strip_prefix(prefix)?.split_once('.')?;
        let key = if key == "-" { None } else { Some(key.parse::<i64>().ok()?) };
        Some(ListCursor { key, opened_seq: seq(s)? })
    };
    let parsed = match order {
        ListOrder::Opened => raw.strip_prefix('o').and_then(seq).map(|s| ListCursor { key: None, opened_seq: s }),
        ListOrder::Newest => raw.strip_prefix('n').and_then(seq).map(|s| ListCursor { key: None, opened_seq: s }),
        ListOrder::Deadline => keyed('d'),
        ListOrder::Resolved => keyed('r'),
    };
    parsed.ok_or_else(|| ApiError::InvalidParameter("after is not a cursor of this listing and order".into()))
}

async fn list(
    state: AppState,
    caller: Caller,
    session: Option<SessionId>,
    p: ListParams,
) -> Result<Response, ApiError> {
    let states = match p.state.as_deref() {
        None | Some("") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| {
                GateState::parse(s.trim()).ok_or_else(|| {
                    ApiError::InvalidParameter(format!("state must be open, resolved or closed (got {s:?})"))
                })
            })
            .collect::<Result<std::collections::BTreeSet<_>, _>>()?
            .into_iter()
            .collect(),
    };
    let order = match p.order.as_deref() {
        None | Some("opened") => ListOrder::Opened,
        Some("newest") => ListOrder::Newest,
        Some("deadline") => ListOrder::Deadline,
        Some("resolved") => ListOrder::Resolved,
        Some(other) => {
            return Err(ApiError::InvalidParameter(format!(
                "order must be opened, newest, deadline or resolved (got {other:?})"
            )));
        }
    };
    let kind = match p.kind.as_deref() {
        None | Some("") => None,
        Some(kind) if KINDS.contains(&kind) => Some(kind.to_owned()),
        Some(other) => {
            return Err(ApiError::InvalidParameter(format!("kind must be one of {KINDS:?} (got {other:?})")));
        }
    };
    let after = p.after.as_deref().map(|raw| parse_cursor(order, raw)).transpose()?;
    let query = ListQuery { session, states, kind, order, page: state.limits.page(limit(p.limit)?), after };
    let read = state.page_reads.take(&caller)?;
    let listing = state.store.list_gates(query).await?;
    let next_after = match listing.gates.last() {
        Some(last) if listing.more => Some(cursor(order, last)),
        _ => None,
    };
    let body = GateListing { gates: listing.gates, journal_seq: listing.journal_seq, next_after };
    Ok(pages::page(&body, read))
}

pub(super) async fn list_session_gates(
    State(state): State<AppState>,
    Params(SessionPath { session_id }): Params<SessionPath>,
    QueryParams(params): QueryParams<ListParams>,
    caller: Caller,
) -> Result<Response, ApiError> {
    list(state, caller, Some(session_id), params).await
}

pub(super) async fn list_gates(
    State(state): State<AppState>,
    QueryParams(params): QueryParams<ListParams>,
    caller: Caller,
) -> Result<Response, ApiError> {
    list(state, caller, None, params).await
}
