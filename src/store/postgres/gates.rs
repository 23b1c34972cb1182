//! The gates on PostgreSQL: the three transactions that change a gate (open with idempotent
//! re-ask, answer with its exactly-once claim, close), the timer's claim, and the reads. The
//! writes run as writer jobs, after the batch took the ordering lock, so the read-then-write of a
//! re-ask and of the open-gate cap cannot race another replica; the claim is one conditional
//! update, as on SQLite.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::writer::Conn;
use super::{classify, json_column, query_page, uuid_column};
use crate::domain::events::to_json;
use crate::domain::view::PageBytes;
use crate::domain::{
    Answer, AnsweredBy, CloseReason, Coordinates, Gate, GateId, GateResolved, GateState, GateView, LoopId, Question,
    SessionId, Timestamp,
};
use crate::store::model::{
    AnswerOutcome, Answering, Claim, CloseOutcome, Expiry, GateRecord, GateStats, Idempotency, ListParam, ListQuery,
    Listing, OpenOutcome, Opening, Resolution, owner_columns, parse_gate, stored_loop, unclaimed,
};
use crate::store::{NewGate, StoreError};

/// The columns `record` reads.
macro_rules! select_record {
    () => {
        "SELECT g.session_id, g.loop_id, g.state, g.gate, g.opened_seq, g.opened_at, g.deadline,
        g.resolved_seq, j.event, g.answer, g.idempotency_key, g.fingerprint, g.gate_id, g.decision, g.secret
    FROM gates g LEFT JOIN journal j ON j.seq = g.resolved_seq"
    };
}

fn record(row: &Row) -> Result<GateRecord, StoreError> {
    let state: String = row.try_get(2).map_err(classify)?;
    let state = GateState::parse(&state).ok_or_else(|| StoreError::Internal(format!("stored state {state:?}")))?;
    let key: Option<String> = row.try_get(10).map_err(classify)?;
    let fingerprint: Option<String> = row.try_get(11).map_err(classify)?;
    Ok(GateRecord {
        view: GateView {
            gate_id: uuid_column(row, 12, GateId::from_uuid)?,
            session_id: uuid_column(row, 0, SessionId::from_uuid)?,
            loop_id: uuid_column(row, 1, stored_loop)?,
            state,
            gate: json_column(row.try_get(3).map_err(classify)?)?,
            opened_seq: row.try_get(4).map_err(classify)?,
            opened_at: Timestamp::from_nanos(row.try_get(5).map_err(classify)?),
            deadline: row.try_get::<_, Option<i64>>(6).map_err(classify)?.map(Timestamp::from_nanos),
            resolved_seq: row.try_get(7).map_err(classify)?,
            resolution: row.try_get::<_, Option<String>>(8).map_err(classify)?.map(json_column).transpose()?,
            answer: row.try_get(9).map_err(classify)?,
            decision: row.try_get::<_, Option<String>>(13).map_err(classify)?.map(json_column).transpose()?,
        },
        idempotency: key.zip(fingerprint),
        secret: row.try_get(14).map_err(classify)?,
    })
}

/// One gate by id, in whatever session.
pub async fn find(conn: &Conn, gate: GateId) -> Result<Option<GateRecord>, StoreError> {
    let stmt = conn.prepare_cached(concat!(select_record!(), " WHERE g.gate_id = $1")).await.map_err(classify)?;
    conn.query_opt(&stmt, &[&gate.as_uuid()]).await.map_err(classify)?.as_ref().map(record).transpose()
}

/// The gate whose answer-link token has this digest.
pub async fn find_by_link(conn: &Conn, digest: &[u8; 32]) -> Result<Option<GateRecord>, StoreError> {
    let stmt = conn.prepare_cached(concat!(select_record!(), " WHERE g.link_digest = $1")).await.map_err(classify)?;
    conn.query_opt(&stmt, &[&digest.as_slice()]).await.map_err(classify)?.as_ref().map(record).transpose()
}

/// Opens a gate, or finds the one this tool execution already opened. The re-ask check comes
/// before the cap, so a re-ask at the cap still finds its gate.
pub async fn open(
    conn: &Conn,
    session: SessionId,
    question: &Question,
    new: NewGate,
    max_open: usize,
) -> Result<OpenOutcome, StoreError> {
    let content = question.canonical();
    let (loop_id, tool_execution_id) = owner_columns(question, new.id);
    let existing = conn
        .prepare_cached(
            "SELECT gate_id, content FROM gates WHERE session_id = $1 AND loop_id = $2 AND tool_execution_id = $3",
        )
        .await
        .map_err(classify)?;
    let ids = [session.as_uuid(), loop_id, tool_execution_id];
    if let Some(row) = conn.query_opt(&existing, &[&ids[0], &ids[1], &ids[2]]).await.map_err(classify)? {
        let gate_id = uuid_column(&row, 0, GateId::from_uuid)?;
        let stored: String = row.try_get(1).map_err(classify)?;
        let view = find(conn, gate_id)
            .await?
            .ok_or_else(|| StoreError::Internal(format!("gate {gate_id} vanished inside its transaction")))?
            .view;
        return Ok(if stored == content { OpenOutcome::Existing(view) } else { OpenOutcome::Conflict(view) });
    }
    let count = conn
        .prepare_cached("SELECT count(*) FROM gates WHERE session_id = $1 AND state = 'open'")
        .await
        .map_err(classify)?;
    let open: i64 = conn.query_one(&count, &[&ids[0]]).await.map_err(classify)?.get(0);
    if open as usize >= max_open {
        return Ok(OpenOutcome::Capacity);
    }

    let Opening { gate, now, opened, requested, deadline, respond_at } = Opening::new(session, question, new.id);
    let envelope = to_json(&gate);
    // Both events and the gate in one statement; the seqs are drawn in order, under the lock.
    let insert = conn
        .prepare_cached(
            "WITH seqs AS MATERIALIZED (
                 SELECT nextval('journal_seq') AS opened,
                        CASE WHEN $11::text IS NOT NULL THEN nextval('journal_seq') END AS requested),
             events AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, respond_at, event)
                 SELECT opened, $1::uuid, $2::uuid, 'GateOpened', $9::bigint, $10::text FROM seqs
                 UNION ALL SELECT requested, $1::uuid, $2::uuid, $13::text, NULL, $11::text FROM seqs
                 WHERE requested IS NOT NULL),
             gate AS (
                 INSERT INTO gates (gate_id, session_id, loop_id, tool_execution_id, state, content, gate, opened_seq,
                                    opened_at, deadline, respond_at, link_digest, kind, secret)
                 SELECT $2::uuid, $1::uuid, $3::uuid, $4::uuid, 'open', $5::text, $6::text, opened, $7::bigint,
                        $8::bigint, $9::bigint, $12::bytea, $14::text, $15::bytea FROM seqs)
             SELECT opened FROM seqs",
        )
        .await
        .map_err(classify)?;
    let (requested_type, requested) = requested.unzip();
    let params: [&(dyn ToSql + Sync); 15] = [
        &ids[0],
        &gate.id.as_uuid(),
        &ids[1],
        &ids[2],
        &content,
        &envelope,
        &now.as_nanos(),
        &deadline.map(Timestamp::as_nanos),
        &respond_at.map(Timestamp::as_nanos),
        &opened,
        &requested,
        &new.link_digest.as_slice(),
        &requested_type,
        &gate.kind,
        &new.secret,
    ];
    let opened_seq: i64 = conn.query_one(&insert, &params).await.map_err(classify)?.get(0);
    Ok(OpenOutcome::Created(GateView {
        gate_id: gate.id,
        session_id: session,
        loop_id: question.loop_id(),
        state: GateState::Open,
        gate: json_column(envelope)?,
        opened_seq,
        opened_at: now,
        deadline,
        resolved_seq: None,
        resolution: None,
        answer: None,
        decision: None,
    }))
}

/// A gate this transaction took out of `open`.
struct Claimed {
    loop_id: Option<LoopId>,
    gate: Gate,
    row: Row,
}

/// The claim: a conditional write that moves the gate out of `open` only if it is still open
/// (and in this session), recording the winner's answer and key. Under READ COMMITTED a
/// concurrent claimer waits for this one, re-checks `state = 'open'` and matches nothing.
async fn claim(
    conn: &Conn,
    session: SessionId,
    gate_id: GateId,
    to: GateState,
    resolution: Option<&Resolution>,
    key: Option<&Idempotency>,
) -> Result<Option<Claimed>, StoreError> {
    let stmt = conn
        .prepare_cached(
            "UPDATE gates SET state = $3, answer = $4, decision = $5, idempotency_key = $6, fingerprint = $7,
                              secret = NULL
             WHERE gate_id = $1 AND session_id = $2 AND state = 'open'
             RETURNING loop_id, gate, opened_seq, opened_at, deadline",
        )
        .await
        .map_err(classify)?;
    let params: [&(dyn ToSql + Sync); 7] = [
        &gate_id.as_uuid(),
        &session.as_uuid(),
        &to.as_str(),
        &resolution.and_then(|r| r.answer_text.as_deref()),
        &resolution.and_then(|r| r.decision.as_deref()),
        &key.map(|k| k.key.as_str()),
        &key.and_then(|k| k.fingerprint.as_deref()),
    ];
    let Some(row) = conn.query_opt(&stmt, &params).await.map_err(classify)? else { return Ok(None) };
    let loop_id = uuid_column(&row, 0, stored_loop)?;
    let gate = parse_gate(row.try_get(1).map_err(classify)?)?;
    Ok(Some(Claimed { loop_id, gate, row }))
}

/// An answer ready to be written: the claim's arguments, and what it writes (the events and the
/// command) made from the gate as the caller read it.
pub struct AnswerJob {
    target: Answering,
    key: Option<Idempotency>,
    resolution: Resolution,
}

impl AnswerJob {
    pub fn new(claim: Claim) -> Self {
        let Claim { target, answer, key, by } = claim;
        let resolution = Resolution::new(target.session, target.loop_id, &target.gate, &answer, &by);
        Self { target, key, resolution }
    }
}

/// The exactly-once path in one statement: claim the gate (a conditional update that moves it
/// out of `open` only if it is still open, and draws its resolution's seq), append
/// `GateResolved` (and after it a permission gate's `PermissionDecided`), enqueue the command.
/// Under READ COMMITTED a concurrent claimer waits for this one, re-checks `state = 'open'` and
/// matches nothing; the inserts run only for a row the claim took, so a lost race writes nothing
/// and draws no seq.
pub async fn answer(conn: &Conn, job: &AnswerJob) -> Result<AnswerOutcome, StoreError> {
    let stmt = conn
        .prepare_cached(
            "WITH claimed AS (
                 UPDATE gates SET state = 'resolved', answer = $3::text, decision = $9::text,
                                  idempotency_key = $4::text, fingerprint = $5::text, secret = NULL,
                                  resolved_seq = nextval('journal_seq')
                 WHERE gate_id = $1::uuid AND session_id = $2::uuid AND state = 'open'
                 RETURNING loop_id, resolved_seq),
             event AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, loop_id, event)
                 SELECT resolved_seq, $2::uuid, $1::uuid, 'GateResolved',
                        NULLIF(loop_id, '00000000-0000-0000-0000-000000000000'), $6::text FROM claimed),
             decided AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, event)
                 SELECT nextval('journal_seq'), $2::uuid, $1::uuid, 'PermissionDecided', $10::text
                 FROM claimed WHERE $10::text IS NOT NULL),
             command AS (
                 INSERT INTO inbox (seq, session_id, loop_id, command_id, gate_id, command)
                 SELECT nextval('inbox_seq'), $2::uuid, loop_id, $7::uuid, $1::uuid, $8::text FROM claimed
                 WHERE $8::text IS NOT NULL)
             SELECT resolved_seq FROM claimed",
        )
        .await
        .map_err(classify)?;
    let (target, key, r) = (&job.target, job.key.as_ref(), &job.resolution);
    let (command_id, command) = r.command_parts();
    let command_id = command_id.map(|id| id.as_uuid());
    let params: [&(dyn ToSql + Sync); 10] = [
        &target.gate_id.as_uuid(),
        &target.session.as_uuid(),
        &r.answer_text,
        &key.map(|k| k.key.as_str()),
        &key.and_then(|k| k.fingerprint.as_deref()),
        &r.resolved,
        &command_id,
        &command,
        &r.decision,
        &r.decided,
    ];
    match conn.query_opt(&stmt, &params).await.map_err(classify)? {
        Some(row) => Ok(AnswerOutcome::Accepted { journal_seq: row.try_get(0).map_err(classify)? }),
        // Lost the race (or never had a chance): the same key check as before the claim.
        None => unclaimed(find(conn, target.gate_id).await?, target.session, key),
    }
}

/// After a claim: `GateResolved` in the journal (naming the loop, so every replica's follower
/// wakes its inbox waiters) and a permission gate's `PermissionDecided` after it, the command in
/// the loop's inbox (if the gate has a loop), and the gate pointed at its resolution, in one
/// statement.
async fn deliver(
    conn: &Conn,
    session: SessionId,
    gate_id: GateId,
    loop_id: Option<LoopId>,
    resolution: &Resolution,
) -> Result<i64, StoreError> {
    let stmt = conn
        .prepare_cached(
            "WITH event AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, loop_id, event)
                 VALUES (nextval('journal_seq'), $1, $2, 'GateResolved', $3, $4) RETURNING seq),
             decided AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, event)
                 SELECT nextval('journal_seq'), $1, $2, 'PermissionDecided', $7::text
                 FROM event WHERE $7::text IS NOT NULL),
             command AS (
                 INSERT INTO inbox (seq, session_id, loop_id, command_id, gate_id, command)
                 SELECT nextval('inbox_seq'), $1, $3, $5, $2, $6 WHERE $6::text IS NOT NULL),
             pointed AS (UPDATE gates SET resolved_seq = (SELECT seq FROM event) WHERE gate_id = $2)
             SELECT seq FROM event",
        )
        .await
        .map_err(classify)?;
    let (command_id, command) = resolution.command_parts();
    let (loop_id, command_id) = (loop_id.map(LoopId::as_uuid), command_id.map(|id| id.as_uuid()));
    let params: [&(dyn ToSql + Sync); 7] = [
        &session.as_uuid(),
        &gate_id.as_uuid(),
        &loop_id,
        &resolution.resolved,
        &command_id,
        &command,
        &resolution.decided,
    ];
    Ok(conn.query_one(&stmt, &params).await.map_err(classify)?.get(0))
}

/// Withdraws an open gate: `GateResolved` with the reason and no action, and no command.
pub async fn close(
    conn: &Conn,
    session: SessionId,
    gate_id: GateId,
    reason: CloseReason,
) -> Result<CloseOutcome, StoreError> {
    let Some(claimed) = claim(conn, session, gate_id, GateState::Closed, None, None).await? else {
        return Ok(match unclaimed(find(conn, gate_id).await?, session, None)? {
            AnswerOutcome::NotReady { resolution } => CloseOutcome::NotReady { resolution },
            _ => CloseOutcome::NotFound,
        });
    };
    let at = Coordinates::of(session, &claimed.gate, claimed.loop_id);
    let resolved = to_json(&GateResolved::closed(at, Timestamp::now(), &claimed.gate, reason));
    let stmt = conn
        .prepare_cached(
            "WITH event AS (
                 INSERT INTO journal (seq, session_id, gate_id, type, event)
                 VALUES (nextval('journal_seq'), $1, $2, 'GateResolved', $3) RETURNING seq),
             pointed AS (UPDATE gates SET resolved_seq = (SELECT seq FROM event) WHERE gate_id = $2)
             SELECT seq FROM event",
        )
        .await
        .map_err(classify)?;
    let seq: i64 =
        conn.query_one(&stmt, &[&session.as_uuid(), &gate_id.as_uuid(), &resolved]).await.map_err(classify)?.get(0);
    let row = &claimed.row;
    Ok(CloseOutcome::Closed(GateView {
        gate_id,
        session_id: session,
        loop_id: claimed.loop_id,
        state: GateState::Closed,
        gate: json_column(row.try_get(1).map_err(classify)?)?,
        opened_seq: row.try_get(2).map_err(classify)?,
        opened_at: Timestamp::from_nanos(row.try_get(3).map_err(classify)?),
        deadline: row.try_get::<_, Option<i64>>(4).map_err(classify)?.map(Timestamp::from_nanos),
        resolved_seq: Some(seq),
        resolution: Some(json_column(resolved)?),
        answer: None,
        decision: None,
    }))
}

/// The timer's claim on due gates. Only gates that are open, due by the database's clock (not the
/// replica's, which may run ahead) and not being claimed by another transaction right now (`SKIP
/// LOCKED`) are answered; a gate that is open but not among them is `Busy`, and the timer looks
/// again shortly. Whichever claim commits first wins, as for a person's answer.
pub async fn expire(conn: &Conn, gates: &[GateId]) -> Result<Vec<Expiry>, StoreError> {
    let ids: Vec<Uuid> = gates.iter().map(|g| g.as_uuid()).collect();
    let due = conn
        .prepare_cached(concat!(
            "SELECT gate_id FROM gates WHERE gate_id = ANY($1) AND state = 'open' AND respond_at <= ",
            now_ns!(),
            " ORDER BY gate_id FOR UPDATE SKIP LOCKED"
        ))
        .await
        .map_err(classify)?;
    let claimable: Vec<Uuid> = conn.query(&due, &[&ids]).await.map_err(classify)?.iter().map(|r| r.get(0)).collect();
    let mut outcomes = Vec::with_capacity(gates.len());
    for &gate_id in gates {
        if !claimable.contains(&gate_id.as_uuid()) {
            let open = find(conn, gate_id).await?.is_some_and(|r| r.view.state == GateState::Open);
            outcomes.push(if open { Expiry::Busy } else { Expiry::Moot });
            continue;
        }
        outcomes.push(expire_one(conn, gate_id).await?);
    }
    Ok(outcomes)
}

async fn expire_one(conn: &Conn, gate_id: GateId) -> Result<Expiry, StoreError> {
    let Some(record) = find(conn, gate_id).await? else { return Ok(Expiry::Moot) };
    // A broken stored gate fails alone, before anything of it was written.
    let gate = match record.gate() {
        Ok(gate) => gate,
        Err(e) => return Ok(Expiry::Failed(e.to_string())),
    };
    let Some(template) = gate.default_answer() else { return Ok(Expiry::Moot) };
    let answer = match Answer::check(&gate, Some(&template.action), Some(&template.values)) {
        Ok(answer) => answer,
        Err(e) => return Ok(Expiry::Failed(format!("gate {gate_id} has an invalid default answer: {e:?}"))),
    };
    let (session, loop_id) = (record.view.session_id, record.view.loop_id);
    let resolution = Resolution::new(session, loop_id, &gate, &answer, &AnsweredBy::Timeout);
    if claim(conn, session, gate_id, GateState::Resolved, Some(&resolution), None).await?.is_none() {
        return Ok(Expiry::Moot);
    }
    Ok(Expiry::Answered(deliver(conn, session, gate_id, loop_id, &resolution).await?))
}

/// Open gates whose policy answers at a deadline, soonest first.
pub async fn deadlines(conn: &Conn) -> Result<Vec<(GateId, Timestamp)>, StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT gate_id, respond_at FROM gates WHERE state = 'open' AND respond_at IS NOT NULL ORDER BY respond_at",
        )
        .await
        .map_err(classify)?;
    conn.query(&stmt, &[])
        .await
        .map_err(classify)?
        .iter()
        .map(|r| Ok((uuid_column(r, 0, GateId::from_uuid)?, Timestamp::from_nanos(r.get(1)))))
        .collect()
}

/// The open gates: how many, in how many sessions, and since when the oldest.
pub async fn stats(conn: &Conn) -> Result<GateStats, StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT count(*), count(DISTINCT session_id),
                    (SELECT opened_at FROM gates WHERE state = 'open' ORDER BY opened_seq LIMIT 1)
             FROM gates WHERE state = 'open'",
        )
        .await
        .map_err(classify)?;
    let row = conn.query_one(&stmt, &[]).await.map_err(classify)?;
    Ok(GateStats {
        open: row.get(0),
        sessions: row.get(1),
        oldest_opened_at: row.get::<_, Option<i64>>(2).map(Timestamp::from_nanos),
    })
}

/// A page of gates and the journal head, read in one snapshot.
pub async fn list(conn: &mut deadpool_postgres::Object, q: &ListQuery) -> Result<Listing, StoreError> {
    let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let sql = q.sql(select_record!(), |param| {
        let states = matches!(param, ListParam::States(_));
        args.push(match param {
            ListParam::Session(session) => Box::new(session.as_uuid()),
            ListParam::States(states) => Box::new(states.iter().map(|s| s.as_str().to_owned()).collect::<Vec<_>>()),
            ListParam::Text(text) => Box::new(text.to_owned()),
            ListParam::Int(value) => Box::new(value),
        });
        // The states are one array parameter.
        if states { format!("= ANY(${})", args.len()) } else { format!("${}", args.len()) }
    });
    // One snapshot: the head and the rows agree.
    let tx = conn
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(classify)?;
    let journal_seq: i64 =
        tx.query_one("SELECT COALESCE(MAX(seq), 0) FROM journal", &[]).await.map_err(classify)?.get(0);
    let stmt = tx.prepare_cached(&sql).await.map_err(classify)?;
    let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)).collect();
    let view = |row: Row| record(&row).map(|r| r.view);
    let (gates, more) = query_page(&*tx, &stmt, &params, q.page, view, PageBytes::page_bytes).await?;
    tx.commit().await.map_err(classify)?;
    Ok(Listing { gates, journal_seq, more })
}
