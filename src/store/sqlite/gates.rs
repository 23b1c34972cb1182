//! The gates table and the three transactions that change a gate: open (with idempotent re-ask),
//! answer (the exactly-once claim) and close. Each runs as one writer job.

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use super::row::{id, raw_json, raw_json_opt};
use super::{inbox, journal};
use crate::bus::Effect;
use crate::domain::events::to_json;
use crate::domain::view::PageBytes;
use crate::domain::{
    Answer, AnsweredBy, CloseReason, Coordinates, Gate, GateId, GateOpened, GateResolved, GateState, GateView, LoopId,
    PermissionDecided, Question, SessionId, Timestamp,
};
use crate::store::model::{
    AnswerOutcome, CloseOutcome, Expiry, GateRecord, Idempotency, ListParam, ListQuery, Listing, OpenOutcome, Opening,
    Resolution, owner_columns, parse_gate, stored_loop_text, unclaimed,
};
use crate::store::model::{Answering, GateStats};
use crate::store::{NewGate, StoreError};

/// The columns `record` reads. A macro, so the single-row lookups are constant strings (`concat!`)
/// rather than formatted on every call.
macro_rules! select_record {
    () => {
        "SELECT g.session_id, g.loop_id, g.state, g.gate, g.opened_seq, g.opened_at, g.deadline,
        g.resolved_seq, j.event, g.answer, g.idempotency_key, g.fingerprint, g.gate_id, g.decision, g.secret
    FROM gates g LEFT JOIN journal j ON j.seq = g.resolved_seq"
    };
}

fn record(row: &Row<'_>) -> rusqlite::Result<GateRecord> {
    let state: String = row.get(2)?;
    let state = GateState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, format!("state {state:?}").into())
    })?;
    let key: Option<String> = row.get(10)?;
    let fingerprint: Option<String> = row.get(11)?;
    Ok(GateRecord {
        view: GateView {
            gate_id: id(row, 12, GateId::parse)?,
            session_id: id(row, 0, SessionId::parse)?,
            loop_id: id(row, 1, stored_loop_text)?,
            state,
            gate: raw_json(row, 3)?,
            opened_seq: row.get(4)?,
            opened_at: Timestamp::from_nanos(row.get(5)?),
            deadline: row.get::<_, Option<i64>>(6)?.map(Timestamp::from_nanos),
            resolved_seq: row.get(7)?,
            resolution: raw_json_opt(row, 8)?,
            answer: row.get(9)?,
            decision: raw_json_opt(row, 13)?,
        },
        idempotency: key.zip(fingerprint),
        secret: row.get(14)?,
    })
}

/// The gate whose answer-link token has this digest (`ServerKey::link_digest`).
pub fn find_by_link(conn: &Connection, digest: &[u8; 32]) -> rusqlite::Result<Option<GateRecord>> {
    conn.prepare_cached(concat!(select_record!(), " WHERE g.link_digest = ?1"))?
        .query_row([digest.as_slice()], record)
        .optional()
}

/// One gate by id, in whatever session.
pub fn find(conn: &Connection, gate: GateId) -> rusqlite::Result<Option<GateRecord>> {
    conn.prepare_cached(concat!(select_record!(), " WHERE g.gate_id = ?1"))?
        .query_row([gate.to_string()], record)
        .optional()
}

/// Opens a gate, or finds the one this tool execution already opened. Lookup and insert run in
/// one writer job, so concurrent identical re-asks cannot both insert. The re-ask check comes
/// before the cap, so a re-ask at the cap still finds its gate.
pub fn open(
    conn: &Connection,
    session: SessionId,
    question: &Question,
    new: NewGate,
    max_open: usize,
    effects: &mut Vec<Effect>,
) -> Result<OpenOutcome, StoreError> {
    let content = question.canonical();
    let (loop_id, tool_execution_id) = owner_columns(question, new.id);
    let existing: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT gate_id, content FROM gates WHERE session_id = ?1 AND loop_id = ?2 AND tool_execution_id = ?3",
        )?
        .query_row(params![session.to_string(), loop_id.to_string(), tool_execution_id.to_string()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    if let Some((gate_id, stored)) = existing {
        let gate_id = GateId::parse(&gate_id).map_err(|e| StoreError::Internal(format!("stored gate id: {e}")))?;
        let view = view(conn, gate_id)?;
        return Ok(if stored == content { OpenOutcome::Existing(view) } else { OpenOutcome::Conflict(view) });
    }
    let open: i64 = conn
        .prepare_cached("SELECT count(*) FROM gates WHERE session_id = ?1 AND state = 'open'")?
        .query_row([session.to_string()], |r| r.get(0))?;
    if open as usize >= max_open {
        return Ok(OpenOutcome::Capacity);
    }

    let Opening { gate, now, opened, requested, deadline, respond_at } = Opening::new(session, question, new.id);
    let opened_seq = journal::append(conn, effects, session, gate.id, GateOpened::TYPE, opened)?;
    if let Some((kind, event)) = requested {
        journal::append(conn, effects, session, gate.id, kind, event)?;
    }
    conn.prepare_cached(
        "INSERT INTO gates (gate_id, session_id, loop_id, tool_execution_id, state, content, gate, opened_seq, opened_at,
                            deadline, respond_at, link_digest, kind, secret)
         VALUES (?1, ?2, ?3, ?4, 'open', ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        gate.id.to_string(),
        session.to_string(),
        loop_id.to_string(),
        tool_execution_id.to_string(),
        content,
        to_json(&gate),
        opened_seq,
        now.as_nanos(),
        deadline.map(Timestamp::as_nanos),
        respond_at.map(Timestamp::as_nanos),
        new.link_digest.as_slice(),
        gate.kind,
        new.secret,
    ])?;
    if let Some(at) = respond_at {
        effects.push(Effect::Deadline(gate.id, at));
    }
    Ok(OpenOutcome::Created(view(conn, gate.id)?))
}

/// The open gates: how many, in how many sessions, and since when the oldest (by the indexes on
/// open gates, not a scan of every gate).
pub fn stats(conn: &Connection) -> rusqlite::Result<GateStats> {
    let (open, sessions) = conn
        .prepare_cached("SELECT count(*), count(DISTINCT session_id) FROM gates WHERE state = 'open'")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let oldest = conn
        .prepare_cached("SELECT opened_at FROM gates WHERE state = 'open' ORDER BY opened_seq LIMIT 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .map(Timestamp::from_nanos);
    Ok(GateStats { open, sessions, oldest_opened_at: oldest })
}

fn view(conn: &Connection, gate: GateId) -> Result<GateView, StoreError> {
    find(conn, gate)?
        .map(|r| r.view)
        .ok_or_else(|| StoreError::Internal(format!("gate {gate} vanished inside its transaction")))
}

fn not_open(
    conn: &Connection,
    session: SessionId,
    gate: GateId,
    key: Option<&Idempotency>,
) -> Result<AnswerOutcome, StoreError> {
    unclaimed(find(conn, gate)?, session, key)
}

/// The exactly-once path: claim the gate if it is still open, append `GateResolved`, enqueue
/// `ProvideUserInput` for the owning loop, and store the winner's idempotency key, all in the
/// caller's transaction. The event and the command are made from the gate as the caller read it
/// (its envelope and loop are fixed at the open): the claim reads back nothing.
pub fn answer(
    conn: &Connection,
    target: &Answering,
    answer: &Answer,
    key: Option<&Idempotency>,
    by: &AnsweredBy,
    effects: &mut Vec<Effect>,
) -> Result<AnswerOutcome, StoreError> {
    let (session, gate_id) = (target.session, target.gate_id);
    let resolution = Resolution::new(session, target.loop_id, &target.gate, answer, by);
    // The claim of `claim`, without reading the gate back (it is in hand).
    let claimed = conn
        .prepare_cached(
            "UPDATE gates SET state = 'resolved', answer = ?3, decision = ?4, idempotency_key = ?5, fingerprint = ?6,
                              secret = NULL
             WHERE gate_id = ?1 AND session_id = ?2 AND state = 'open'",
        )?
        .execute(params![
            gate_id.to_string(),
            session.to_string(),
            resolution.answer_text,
            resolution.decision,
            key.map(|k| &k.key),
            key.map(|k| &k.fingerprint)
        ])?;
    if claimed == 0 {
        // Lost the race (or never had a chance): the same key check as before the claim.
        return not_open(conn, session, gate_id, key);
    }
    let seq = deliver(conn, effects, session, gate_id, target.loop_id, resolution)?;
    Ok(AnswerOutcome::Accepted { journal_seq: seq })
}

/// After a claim: append `GateResolved` (and a permission gate's `PermissionDecided`) and put the
/// command, if the gate has an owning loop, in its inbox.
fn deliver(
    conn: &Connection,
    effects: &mut Vec<Effect>,
    session: SessionId,
    gate_id: GateId,
    loop_id: Option<LoopId>,
    resolution: Resolution,
) -> Result<i64, StoreError> {
    let seq = resolve(conn, effects, session, gate_id, resolution.resolved)?;
    if let Some(decided) = resolution.decided {
        journal::append(conn, effects, session, gate_id, PermissionDecided::TYPE, decided)?;
    }
    if let (Some(loop_id), Some((command_id, command))) = (loop_id, &resolution.command) {
        inbox::enqueue(conn, session, loop_id, gate_id, *command_id, command)?;
        effects.push(Effect::Inbox(session, loop_id));
    }
    Ok(seq)
}

/// The timer's claim on one due gate (one write job each, so group commit batches them and the
/// writer's savepoint per job lets a broken gate fail alone): answers it with its policy's
/// template, through the same claim as a person's answer, so whichever commits first wins.
pub fn expire(conn: &Connection, gate_id: GateId, effects: &mut Vec<Effect>) -> Result<Expiry, StoreError> {
    let Some(record) = find(conn, gate_id)?.filter(|r| r.view.state == GateState::Open) else {
        return Ok(Expiry::Moot);
    };
    let gate = record.gate()?;
    let Some(template) = gate.default_answer() else { return Ok(Expiry::Moot) };
    let answer = Answer::check(&gate, Some(&template.action), Some(&template.values))
        .map_err(|e| StoreError::Internal(format!("gate {gate_id} has an invalid default answer: {e:?}")))?;
    let (session, loop_id) = (record.view.session_id, record.view.loop_id);
    let resolution = Resolution::new(session, loop_id, &gate, &answer, &AnsweredBy::Timeout);
    if claim(conn, session, gate_id, GateState::Resolved, Some(&resolution), None)?.is_none() {
        return Ok(Expiry::Moot);
    }
    Ok(Expiry::Answered(deliver(conn, effects, session, gate_id, loop_id, resolution)?))
}

/// Open gates whose policy answers at a deadline, soonest first.
pub fn deadlines(conn: &Connection) -> rusqlite::Result<Vec<(GateId, Timestamp)>> {
    conn.prepare_cached(
        "SELECT gate_id, respond_at FROM gates WHERE state = 'open' AND respond_at IS NOT NULL ORDER BY respond_at",
    )?
    .query_map([], |r| Ok((id(r, 0, GateId::parse)?, Timestamp::from_nanos(r.get(1)?))))?
    .collect()
}

/// Withdraws an open gate: `GateResolved` with the reason and no action, and no command.
pub fn close(
    conn: &Connection,
    session: SessionId,
    gate_id: GateId,
    reason: CloseReason,
    effects: &mut Vec<Effect>,
) -> Result<CloseOutcome, StoreError> {
    let Some(Claimed { loop_id, gate }) = claim(conn, session, gate_id, GateState::Closed, None, None)? else {
        return Ok(match not_open(conn, session, gate_id, None)? {
            AnswerOutcome::NotReady { resolution } => CloseOutcome::NotReady { resolution },
            _ => CloseOutcome::NotFound,
        });
    };
    let at = Coordinates::of(session, &gate, loop_id);
    resolve(conn, effects, session, gate_id, to_json(&GateResolved::closed(at, Timestamp::now(), &gate, reason)))?;
    Ok(CloseOutcome::Closed(view(conn, gate_id)?))
}

/// A gate this transaction took out of `open`.
struct Claimed {
    loop_id: Option<LoopId>,
    gate: Gate,
}

/// The claim: a conditional write that moves the gate out of `open` only if it is still open
/// (and in this session), recording what it keeps of the winner's answer, and its key. `None`
/// when it was not open; the unique index on resolutions guards this again.
fn claim(
    conn: &Connection,
    session: SessionId,
    gate_id: GateId,
    to: GateState,
    resolution: Option<&Resolution>,
    key: Option<&Idempotency>,
) -> Result<Option<Claimed>, StoreError> {
    let claimed: Option<(String, String)> = conn
        .prepare_cached(
            "UPDATE gates SET state = ?3, answer = ?4, decision = ?5, idempotency_key = ?6, fingerprint = ?7,
                              secret = NULL
             WHERE gate_id = ?1 AND session_id = ?2 AND state = 'open'
             RETURNING loop_id, gate",
        )?
        .query_row(
            params![
                gate_id.to_string(),
                session.to_string(),
                to.as_str(),
                resolution.and_then(|r| r.answer_text.as_deref()),
                resolution.and_then(|r| r.decision.as_deref()),
                key.map(|k| &k.key),
                key.map(|k| &k.fingerprint),
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((loop_id, gate)) = claimed else { return Ok(None) };
    let loop_id = stored_loop_text(&loop_id).map_err(|e| StoreError::Internal(format!("stored loop id: {e}")))?;
    Ok(Some(Claimed { loop_id, gate: parse_gate(&gate)? }))
}

/// Appends the `GateResolved` of a claim and points the gate at it.
fn resolve(
    conn: &Connection,
    effects: &mut Vec<Effect>,
    session: SessionId,
    gate: GateId,
    resolved: String,
) -> Result<i64, StoreError> {
    let seq = journal::append(conn, effects, session, gate, GateResolved::TYPE, resolved)?;
    conn.prepare_cached("UPDATE gates SET resolved_seq = ?2 WHERE gate_id = ?1")?
        .execute(params![gate.to_string(), seq])?;
    effects.push(Effect::Gate(gate));
    Ok(seq)
}

pub fn list(conn: &Connection, q: &ListQuery) -> rusqlite::Result<Listing> {
    // One read transaction: the head and the rows are one snapshot.
    let tx = conn.unchecked_transaction()?;
    let journal_seq = journal::head(&tx)?;
    let mut args: Vec<SqlValue> = Vec::new();
    let mut bind = |value: SqlValue| {
        args.push(value);
        format!("?{}", args.len())
    };
    let sql = q.sql(select_record!(), |param| match param {
        ListParam::Session(session) => bind(SqlValue::Text(session.to_string())),
        ListParam::States(states) => {
            let marks: Vec<String> = states.iter().map(|s| bind(SqlValue::Text(s.as_str().to_owned()))).collect();
            format!("IN ({})", marks.join(", "))
        }
        ListParam::Text(text) => bind(SqlValue::Text(text.to_owned())),
        ListParam::Int(value) => bind(SqlValue::Integer(value)),
    });
    let mut stmt = tx.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), |r| record(r).map(|r| r.view))?;
    let (gates, more) = q.page.fill(rows, PageBytes::page_bytes)?;
    Ok(Listing { gates, journal_seq, more })
}
