//! Outbound webhook state: one cursor per endpoint and the attempts at the event after it.

use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::Timestamp;
use crate::store::model::{Attempt, Delivery, DeliveryStatus, Endpoint, Pending};

/// Makes sure every configured endpoint has a row (a new one starts at the journal head: it gets
/// what happens from now on), re-enables the listed ones, and returns them all.
pub fn register(conn: &Connection, urls: &[String], reenable: &[String], head: i64) -> rusqlite::Result<Vec<Endpoint>> {
    for url in urls {
        conn.execute(
            "INSERT INTO webhook_endpoints (url, cursor) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![url, head],
        )?;
    }
    for url in reenable {
        conn.execute("UPDATE webhook_endpoints SET disabled_at = NULL, disabled_by = NULL WHERE url = ?1", [url])?;
    }
    urls.iter().map(|url| endpoint(conn, url).map(|e| e.expect("registered above"))).collect()
}

pub fn endpoint(conn: &Connection, url: &str) -> rusqlite::Result<Option<Endpoint>> {
    conn.prepare_cached("SELECT cursor, disabled_at IS NOT NULL FROM webhook_endpoints WHERE url = ?1")?
        .query_row([url], |r| Ok(Endpoint { url: url.to_owned(), cursor: r.get(0)?, disabled: r.get(1)? }))
        .optional()
}

pub fn pending(conn: &Connection, url: &str, seq: i64) -> rusqlite::Result<Option<Pending>> {
    conn.prepare_cached(
        "SELECT attempts, next_at FROM webhook_attempts WHERE url = ?1 AND journal_seq = ?2 AND status = 'pending'",
    )?
    .query_row(params![url, seq], |r| {
        Ok(Pending { attempts: r.get(0)?, next_at: Timestamp::from_nanos(r.get::<_, Option<i64>>(1)?.unwrap_or(0)) })
    })
    .optional()
}

/// What became of an attempt at event `seq`. Delivered: the cursor moves past it and its
/// attempts are forgotten (once per delivered event on the writer, so the statements are
/// cached). Retried: its attempt is kept, with when to try again. A dead letter: kept as
/// `failed`, and the endpoint moves on.
pub fn record(conn: &Connection, url: &str, seq: i64, attempt: &Attempt) -> rusqlite::Result<()> {
    let (status, attempts, next_at, error) = match attempt {
        Attempt::Delivered => {
            advance_cursor(conn, url, seq)?;
            conn.prepare_cached("DELETE FROM webhook_attempts WHERE url = ?1 AND journal_seq = ?2")?
                .execute(params![url, seq])?;
            return Ok(());
        }
        Attempt::Retry { attempts, next_at, error } => (DeliveryStatus::Pending, attempts, Some(next_at), error),
        Attempt::DeadLetter { attempts, error } => (DeliveryStatus::Failed, attempts, None, error),
    };
    conn.prepare_cached(
        "INSERT INTO webhook_attempts (url, journal_seq, status, attempts, next_at, last_error, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (url, journal_seq) DO UPDATE SET
           status = excluded.status, attempts = excluded.attempts, next_at = excluded.next_at,
           last_error = excluded.last_error, updated_at = excluded.updated_at",
    )?
    .execute(params![
        url,
        seq,
        status.as_str(),
        attempts,
        next_at.map(|at| at.as_nanos()),
        error,
        Timestamp::now().as_nanos()
    ])?;
    if status == DeliveryStatus::Failed {
        advance_cursor(conn, url, seq)?;
    }
    Ok(())
}

/// Every event up to `seq` was delivered or dead-lettered.
fn advance_cursor(conn: &Connection, url: &str, seq: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE webhook_endpoints SET cursor = ?2 WHERE url = ?1 AND cursor < ?2")?
        .execute(params![url, seq])?;
    Ok(())
}

/// The endpoint answered 410 Gone: stop until an operator re-enables it.
pub fn disable(conn: &Connection, url: &str, why: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE webhook_endpoints SET disabled_at = ?2, disabled_by = ?3 WHERE url = ?1",
        params![url, Timestamp::now().as_nanos(), why],
    )?;
    Ok(())
}

/// Deliveries in one status, ordered by (url, seq), after a cursor, one more than `limit`.
pub fn list(
    conn: &Connection,
    status: DeliveryStatus,
    after: Option<(String, i64)>,
    limit: usize,
) -> rusqlite::Result<Vec<Delivery>> {
    let (url, seq) = after.unwrap_or_default();
    conn.prepare_cached(
        "SELECT url, journal_seq, status, attempts, next_at, last_error, updated_at FROM webhook_attempts
         WHERE status = ?1 AND (url > ?2 OR (url = ?2 AND journal_seq > ?3))
         ORDER BY url, journal_seq LIMIT ?4",
    )?
    .query_map(params![status.as_str(), url, seq, limit as i64 + 1], |r| {
        Ok(Delivery {
            url: r.get(0)?,
            journal_seq: r.get(1)?,
            status: r.get(2)?,
            attempts: r.get(3)?,
            next_at: r.get::<_, Option<i64>>(4)?.map(Timestamp::from_nanos),
            last_error: r.get(5)?,
            updated_at: Timestamp::from_nanos(r.get(6)?),
        })
    })?
    .collect()
}
