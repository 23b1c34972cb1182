//! Per-loop durable command queues (spec §5.6).

use rusqlite::{Connection, params};

use super::row::raw_json;
use crate::domain::view::PageBytes;
use crate::domain::{CommandId, GateId, InboxEntry, LoopId, SessionId, Timestamp};
use crate::store::InboxQuery;

/// Puts one command in a loop's inbox (inside the claim transaction).
pub fn enqueue(
    conn: &Connection,
    session: SessionId,
    loop_id: LoopId,
    gate: GateId,
    command_id: CommandId,
    command: &str,
) -> rusqlite::Result<i64> {
    // The rowid, not RETURNING (a temporary b-tree per statement), as for the journal.
    conn.prepare_cached(
        "INSERT INTO inbox (session_id, loop_id, command_id, gate_id, command) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        session.to_string(),
        loop_id.to_string(),
        command_id.to_string(),
        gate.to_string(),
        command
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Commands of one loop with seq > `after`, ascending; unacked ones unless `include_acked`.
pub fn list(conn: &Connection, query: &InboxQuery) -> rusqlite::Result<Vec<InboxEntry>> {
    let InboxQuery { session, loop_id, after, page, include_acked } = *query;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, command, acked_at FROM inbox
         WHERE session_id = ?1 AND loop_id = ?2 AND seq > ?3 AND (?4 OR acked_at IS NULL)
         ORDER BY seq LIMIT ?5",
    )?;
    let rows = stmt.query_map(
        params![session.to_string(), loop_id.to_string(), after, include_acked, page.sql_limit()],
        |r| {
            Ok(InboxEntry {
                seq: r.get(0)?,
                command: raw_json(r, 1)?,
                acked_at: r.get::<_, Option<i64>>(2)?.map(Timestamp::from_nanos),
            })
        },
    )?;
    // An inbox page says nothing of what remains: the loop asks again after the last seq.
    Ok(page.fill(rows, PageBytes::page_bytes)?.0)
}

/// Marks a command delivered; idempotent. `false` when the command is not in that inbox.
pub fn ack(
    conn: &Connection,
    session: SessionId,
    loop_id: LoopId,
    command: CommandId,
    now: Timestamp,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE inbox SET acked_at = COALESCE(acked_at, ?4)
             WHERE command_id = ?1 AND session_id = ?2 AND loop_id = ?3",
        )?
        .execute(params![command.to_string(), session.to_string(), loop_id.to_string(), now.as_nanos()])?;
    Ok(changed == 1)
}
