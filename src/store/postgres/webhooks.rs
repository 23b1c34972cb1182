//! Outbound webhook state on PostgreSQL: the cursor and attempts of each endpoint, as on SQLite,
//! plus a fenced lease, so that one replica at a time delivers to an endpoint, in journal order.
//! Every write of the delivery state names the lease (owner and epoch) it was made under and
//! changes nothing when that lease has passed to another replica; lease times are the database's.

use std::time::Duration;

use tokio_postgres::types::ToSql;

use super::classify;
use super::writer::Conn;
use crate::domain::Timestamp;
use crate::store::StoreError;
use crate::store::model::{Attempt, Delivery, DeliveryStatus, Endpoint, Lease, Pending};

/// Makes sure every configured endpoint has a row (a new one starts at the journal head: it gets
/// what happens from now on), re-enables the listed ones, and returns them all.
pub async fn register(conn: &Conn, urls: &[String], reenable: &[String]) -> Result<Vec<Endpoint>, StoreError> {
    let insert = conn
        .prepare_cached(
            "INSERT INTO webhook_endpoints (url, cursor) SELECT $1, COALESCE(MAX(seq), 0) FROM journal
             ON CONFLICT DO NOTHING",
        )
        .await
        .map_err(classify)?;
    for url in urls {
        conn.execute(&insert, &[url]).await.map_err(classify)?;
    }
    for url in reenable {
        conn.execute("UPDATE webhook_endpoints SET disabled_at = NULL, disabled_by = NULL WHERE url = $1", &[url])
            .await
            .map_err(classify)?;
    }
    let mut endpoints = Vec::with_capacity(urls.len());
    for url in urls {
        let row = conn
            .query_one("SELECT cursor, disabled_at IS NOT NULL FROM webhook_endpoints WHERE url = $1", &[url])
            .await
            .map_err(classify)?;
        endpoints.push(Endpoint { url: url.clone(), cursor: row.get(0), disabled: row.get(1) });
    }
    Ok(endpoints)
}

/// One endpoint's state, if it is registered.
pub async fn endpoint(conn: &Conn, url: &str) -> Result<Option<Endpoint>, StoreError> {
    let stmt = conn
        .prepare_cached("SELECT cursor, disabled_at IS NOT NULL FROM webhook_endpoints WHERE url = $1")
        .await
        .map_err(classify)?;
    let row = conn.query_opt(&stmt, &[&url]).await.map_err(classify)?;
    Ok(row.map(|row| Endpoint { url: url.to_owned(), cursor: row.get(0), disabled: row.get(1) }))
}

/// Takes the endpoint's lease for `ttl` (or renews it, if `owner` holds it already): granted when
/// nobody holds it, or its holder's time ran out. A change of hands bumps the epoch.
pub async fn lease(
    conn: &Conn,
    url: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<(Lease, Endpoint)>, StoreError> {
    let stmt = conn
        .prepare_cached(concat!(
            "UPDATE webhook_endpoints SET
                 lease_epoch = lease_epoch + CASE WHEN owner IS DISTINCT FROM $2 THEN 1 ELSE 0 END,
                 owner = $2,
                 lease_until = ",
            now_ns!(),
            " + $3
             WHERE url = $1 AND (owner IS NULL OR owner = $2 OR lease_until < ",
            now_ns!(),
            ")
             RETURNING lease_epoch, cursor, disabled_at IS NOT NULL"
        ))
        .await
        .map_err(classify)?;
    let ttl = i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX);
    let row = conn.query_opt(&stmt, &[&url, &owner, &ttl]).await.map_err(classify)?;
    Ok(row.map(|row| {
        (
            Lease { owner: owner.to_owned(), epoch: row.get(0) },
            Endpoint { url: url.to_owned(), cursor: row.get(1), disabled: row.get(2) },
        )
    }))
}

/// Gives the lease up, if it is still this one.
pub async fn release(conn: &Conn, url: &str, lease: &Lease) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE webhook_endpoints SET owner = NULL, lease_until = NULL WHERE url = $1 AND owner = $2 AND lease_epoch = $3",
        &[&url, &lease.owner, &lease.epoch],
    )
    .await
    .map_err(classify)?;
    Ok(())
}

pub async fn pending(conn: &Conn, url: &str, seq: i64) -> Result<Option<Pending>, StoreError> {
    let stmt = conn
        .prepare_cached(
            "SELECT attempts, next_at FROM webhook_attempts WHERE url = $1 AND journal_seq = $2 AND status = 'pending'",
        )
        .await
        .map_err(classify)?;
    let row = conn.query_opt(&stmt, &[&url, &seq]).await.map_err(classify)?;
    Ok(row.map(|r| Pending {
        attempts: u32::try_from(r.get::<_, i32>(0)).unwrap_or(0),
        next_at: Timestamp::from_nanos(r.get::<_, Option<i64>>(1).unwrap_or(0)),
    }))
}

/// What became of an attempt at event `seq`, under the lease. Delivered: the cursor moves past
/// it and its attempts are forgotten. Retried: its attempt is kept, with when to try again. A dead
/// letter: kept as `failed`, and the endpoint moves on.
pub async fn record(conn: &Conn, url: &str, seq: i64, lease: &Lease, attempt: &Attempt) -> Result<bool, StoreError> {
    let (status, attempts, next_at, error) = match attempt {
        Attempt::Delivered => return delivered(conn, url, seq, lease).await,
        Attempt::Retry { attempts, next_at, error } => (DeliveryStatus::Pending, attempts, Some(next_at), error),
        Attempt::DeadLetter { attempts, error } => (DeliveryStatus::Failed, attempts, None, error),
    };
    // The fence's update locks the endpoint's row whatever the status; only a dead letter moves
    // the cursor.
    let stmt = conn
        .prepare_cached(
            "WITH fence AS (
                 UPDATE webhook_endpoints
                 SET cursor = CASE WHEN $3::text = 'failed' THEN GREATEST(cursor, $2) ELSE cursor END
                 WHERE url = $1 AND owner = $7 AND lease_epoch = $8 RETURNING url),
             recorded AS (
                 INSERT INTO webhook_attempts (url, journal_seq, status, attempts, next_at, last_error, updated_at)
                 SELECT url, $2::bigint, $3::text, $4::integer, $5::bigint, $6::text, $9::bigint FROM fence
                 ON CONFLICT (url, journal_seq) DO UPDATE SET
                     status = excluded.status, attempts = excluded.attempts, next_at = excluded.next_at,
                     last_error = excluded.last_error, updated_at = excluded.updated_at)
             SELECT count(*) FROM fence",
        )
        .await
        .map_err(classify)?;
    let attempts = i32::try_from(*attempts).unwrap_or(i32::MAX);
    let next_at = next_at.map(|at| at.as_nanos());
    let params: [&(dyn ToSql + Sync); 9] = [
        &url,
        &seq,
        &status.as_str(),
        &attempts,
        &next_at,
        &error.as_str(),
        &lease.owner,
        &lease.epoch,
        &Timestamp::now().as_nanos(),
    ];
    let held: i64 = conn.query_one(&stmt, &params).await.map_err(classify)?.get(0);
    Ok(held == 1)
}

/// Delivered: the cursor moves past it and its attempts are forgotten, under the lease.
async fn delivered(conn: &Conn, url: &str, seq: i64, lease: &Lease) -> Result<bool, StoreError> {
    let stmt = conn
        .prepare_cached(
            "WITH fence AS (
                 UPDATE webhook_endpoints SET cursor = GREATEST(cursor, $2)
                 WHERE url = $1 AND owner = $3 AND lease_epoch = $4 RETURNING url),
             forgotten AS (DELETE FROM webhook_attempts WHERE url IN (SELECT url FROM fence) AND journal_seq = $2)
             SELECT count(*) FROM fence",
        )
        .await
        .map_err(classify)?;
    let held: i64 = conn.query_one(&stmt, &[&url, &seq, &lease.owner, &lease.epoch]).await.map_err(classify)?.get(0);
    Ok(held == 1)
}

/// The endpoint answered 410 Gone: stop until an operator re-enables it, under the lease.
pub async fn disable(conn: &Conn, url: &str, why: &str, lease: &Lease) -> Result<bool, StoreError> {
    let changed = conn
        .execute(
            "UPDATE webhook_endpoints SET disabled_at = $2, disabled_by = $3
             WHERE url = $1 AND owner = $4 AND lease_epoch = $5",
            &[&url, &Timestamp::now().as_nanos(), &why, &lease.owner, &lease.epoch],
        )
        .await
        .map_err(classify)?;
    Ok(changed == 1)
}

/// Deliveries in one status, ordered by (url, seq), after a cursor, one more than `limit`.
pub async fn list(
    conn: &Conn,
    status: DeliveryStatus,
    after: Option<(String, i64)>,
    limit: usize,
) -> Result<Vec<Delivery>, StoreError> {
    let (url, seq) = after.unwrap_or_default();
    let stmt = conn
        .prepare_cached(
            "SELECT url, journal_seq, status, attempts, next_at, last_error, updated_at FROM webhook_attempts
             WHERE status = $1 AND (url > $2 OR (url = $2 AND journal_seq > $3))
             ORDER BY url, journal_seq LIMIT $4",
        )
        .await
        .map_err(classify)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
    let rows = conn.query(&stmt, &[&status.as_str(), &url, &seq, &limit]).await.map_err(classify)?;
    Ok(rows
        .iter()
        .map(|r| Delivery {
            url: r.get(0),
            journal_seq: r.get(1),
            status: r.get(2),
            attempts: u32::try_from(r.get::<_, i32>(3)).unwrap_or(0),
            next_at: r.get::<_, Option<i64>>(4).map(Timestamp::from_nanos),
            last_error: r.get(5),
            updated_at: Timestamp::from_nanos(r.get(6)),
        })
        .collect())
}
