//! The journal table: appends (inside the writer's transaction) and pages.

use rusqlite::{Connection, params};

use super::row::raw_json;
use crate::bus::Effect;
use crate::domain::{GateId, JournalEntry, JournalPage, SessionId};

/// Appends one event and returns its seq, assigned inside the committing transaction. The event
/// is announced (doorbell, frame ring) once the transaction commits.
pub fn append(
    conn: &Connection,
    effects: &mut Vec<Effect>,
    session: SessionId,
    gate: GateId,
    kind: &str,
    event: String,
) -> rusqlite::Result<i64> {
    let seq = conn
        .prepare_cached("INSERT INTO journal (session_id, gate_id, type, event) VALUES (?1, ?2, ?3, ?4) RETURNING seq")?
        .query_row(params![session.to_string(), gate.to_string(), kind, event], |r| r.get(0))?;
    effects.push(Effect::Journal { seq, session, event });
    Ok(seq)
}

/// The latest committed seq (0 for an empty journal).
pub fn head(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM journal")?.query_row([], |r| r.get(0))
}

/// The oldest retained seq (0 for an empty journal).
pub fn earliest(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MIN(seq), 0) FROM journal")?.query_row([], |r| r.get(0))
}

/// Events with `after < seq <= upto`, of one session or all, at most `limit`, ascending: what a
/// stream behind the frame ring reads.
pub fn range(
    conn: &Connection,
    session: Option<SessionId>,
    after: i64,
    upto: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, String)>> {
    let session = session.map(|s| s.to_string());
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event FROM journal WHERE seq > ?1 AND seq <= ?2 AND (?3 IS NULL OR session_id = ?3)
         ORDER BY seq LIMIT ?4",
    )?;
    stmt.query_map(params![after, upto, session, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
}

/// Events with seq ≥ `from`, at most `limit`, optionally of one session (spec §5.7).
pub fn page(conn: &Connection, session: Option<SessionId>, from: i64, limit: usize) -> rusqlite::Result<JournalPage> {
    let session = session.map(|s| s.to_string());
    // One row more than asked tells whether the journal is exhausted.
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event FROM journal WHERE seq >= ?1 AND (?2 IS NULL OR session_id = ?2) ORDER BY seq LIMIT ?3",
    )?;
    let mut events = stmt
        .query_map(params![from, session, limit as i64 + 1], |r| {
            Ok(JournalEntry { journal_seq: r.get(0)?, event: raw_json(r, 1)? })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let done = events.len() <= limit;
    events.truncate(limit);
    let next_journal_seq = events.last().map_or(from, |e| e.journal_seq + 1);
    Ok(JournalPage { events, next_journal_seq, done })
}
