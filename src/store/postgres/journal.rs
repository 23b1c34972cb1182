//! The journal and the inboxes on PostgreSQL: pages, stream batches, bounds, and the ack. Every
//! read here sees a prefix of the journal (the ordering lock makes seq order commit order), so a
//! reader resuming after seq N never misses a row committed later.

use tokio_postgres::types::ToSql;

use super::writer::Conn;
use super::{classify, json_column, query_page};
use crate::domain::view::PageBytes;
use crate::domain::{CommandId, InboxEntry, LoopId, SessionId, Timestamp};
use crate::store::{InboxQuery, JournalRange, JournalRows, StoreError};

/// Events with `after < seq <= upto`, of one session or all, ascending, as many as `page` holds,
/// and whether more remain up to `upto`.
pub async fn range(conn: &Conn, range: &JournalRange) -> Result<JournalRows, StoreError> {
    let JournalRange { session, after, upto, page } = *range;
    let limit = page.sql_limit();
    let row = |r: tokio_postgres::Row| Ok((r.get::<_, i64>(0), r.get::<_, String>(1)));
    let size = |(_, event): &(i64, String)| event.len() + 40;
    match session {
        Some(session) => {
            let stmt = conn
                .prepare_cached(
                    "SELECT seq, event FROM journal WHERE session_id = $1 AND seq > $2 AND seq <= $3
                     ORDER BY seq LIMIT $4",
                )
                .await
                .map_err(classify)?;
            query_page(&**conn, &stmt, &[&session.as_uuid(), &after, &upto, &limit], page, row, size).await
        }
        None => {
            let stmt = conn
                .prepare_cached("SELECT seq, event FROM journal WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3")
                .await
                .map_err(classify)?;
            query_page(&**conn, &stmt, &[&after, &upto, &limit], page, row, size).await
        }
    }
}

/// The oldest retained and the newest committed seq (0 and 0 for an empty journal).
pub async fn bounds(conn: &Conn) -> Result<(i64, i64), StoreError> {
    let stmt = conn
        .prepare_cached("SELECT COALESCE(MIN(seq), 0), COALESCE(MAX(seq), 0) FROM journal")
        .await
        .map_err(classify)?;
    let row = conn.query_one(&stmt, &[]).await.map_err(classify)?;
    Ok((row.get(0), row.get(1)))
}

/// Commands of one loop with seq > `after`, ascending; unacked ones unless `include_acked`.
pub async fn inbox(conn: &Conn, query: &InboxQuery) -> Result<Vec<InboxEntry>, StoreError> {
    let InboxQuery { session, loop_id, after, page, include_acked } = *query;
    let stmt = conn
        .prepare_cached(
            "SELECT seq, command, acked_at FROM inbox
             WHERE session_id = $1 AND loop_id = $2 AND seq > $3 AND ($4 OR acked_at IS NULL)
             ORDER BY seq LIMIT $5",
        )
        .await
        .map_err(classify)?;
    let params: [&(dyn ToSql + Sync); 5] =
        [&session.as_uuid(), &loop_id.as_uuid(), &after, &include_acked, &page.sql_limit()];
    let entry = |r: tokio_postgres::Row| {
        Ok(InboxEntry {
            seq: r.get(0),
            command: json_column(r.get(1))?,
            acked_at: r.get::<_, Option<i64>>(2).map(Timestamp::from_nanos),
        })
    };
    // An inbox page says nothing of what remains: the loop asks again after the last seq.
    Ok(query_page(&**conn, &stmt, &params, page, entry, PageBytes::page_bytes).await?.0)
}

/// Marks a command delivered; idempotent. `false` when it is not in that loop's inbox. One
/// statement on its own: it writes no journal row, so it needs neither the writer nor its lock.
pub async fn ack(
    conn: &Conn,
    session: SessionId,
    loop_id: LoopId,
    command: CommandId,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let stmt = conn
        .prepare_cached(
            "UPDATE inbox SET acked_at = COALESCE(acked_at, $4)
             WHERE command_id = $1 AND session_id = $2 AND loop_id = $3",
        )
        .await
        .map_err(classify)?;
    let params: [&(dyn ToSql + Sync); 4] =
        [&command.as_uuid(), &session.as_uuid(), &loop_id.as_uuid(), &now.as_nanos()];
    Ok(conn.execute(&stmt, &params).await.map_err(classify)? == 1)
}
