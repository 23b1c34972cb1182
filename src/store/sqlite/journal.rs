//! The journal table: appends (inside the writer's transaction) and pages.

use rusqlite::{Connection, params};

use crate::bus::Effect;
use crate::domain::{GateId, SessionId};
use crate::store::{JournalRange, JournalRows};

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
    // The new row's rowid, not RETURNING: SQLite builds a temporary b-tree for every statement
    // with a RETURNING clause.
    conn.prepare_cached("INSERT INTO journal (session_id, gate_id, type, event) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![session.to_string(), gate.to_string(), kind, event])?;
    let seq = conn.last_insert_rowid();
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

/// Events with `after < seq <= upto`, of one session or all, ascending, as many as `page` holds:
/// what a stream behind the frame ring reads. The flag says whether more remain up to `upto`.
pub fn range(conn: &Connection, range: &JournalRange) -> rusqlite::Result<JournalRows> {
    let JournalRange { session, after, upto, page } = *range;
    // Two statements, so a session's reads use its index instead of scanning the whole journal.
    let limit = page.sql_limit();
    let row = |r: &rusqlite::Row<'_>| Ok((r.get(0)?, r.get(1)?));
    let size = |(_, event): &(i64, String)| event.len() + 40;
    match session {
        Some(session) => {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, event FROM journal WHERE session_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
            )?;
            page.fill(stmt.query_map(params![session.to_string(), after, upto, limit], row)?, size)
        }
        None => {
            let mut stmt = conn
                .prepare_cached("SELECT seq, event FROM journal WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3")?;
            page.fill(stmt.query_map(params![after, upto, limit], row)?, size)
        }
    }
}
