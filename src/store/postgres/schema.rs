//! The PostgreSQL schema: embedded, versioned migrations, run at start under a session advisory
//! lock so that replicas starting together migrate once; a database whose schema is newer than
//! this build is refused.
//!
//! Differences from the SQLite schema, each for the replicas: journal and inbox seqs come from
//! sequences drawn only under the writers' ordering lock (never a column default, so no other
//! path can draw one out of commit order); the journal carries `loop_id` and `respond_at`, so a
//! follower can wake inbox waiters and arm deadlines from the rows alone; webhook endpoints carry
//! a fenced lease (`owner`, `lease_until`, `lease_epoch`).

use tokio_postgres::Client;

use super::{LOCK_CLASS, LOCK_MIGRATE, db_error};
use crate::store::OpenError;

/// Each step brings the schema from version `index` to `index + 1`. Never edit a released step;
/// append a new one.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Drawn only by the writers, under the ordering lock, so seq order is commit order.
CREATE SEQUENCE journal_seq;
CREATE TABLE journal (
    seq        bigint PRIMARY KEY,
    session_id uuid NOT NULL,
    gate_id    uuid,
    type       text NOT NULL,
    loop_id    uuid,    -- a GateResolved that enqueued a command: the loop whose inbox to wake
    respond_at bigint,  -- a GateOpened whose policy answers at a deadline (ns): arm it
    event      text NOT NULL
);
CREATE INDEX journal_by_session ON journal (session_id, seq);
-- Guard: at most one resolution per gate, whatever the code above it does.
CREATE UNIQUE INDEX journal_one_resolution ON journal (gate_id) WHERE type = 'GateResolved';

CREATE TABLE gates (
    gate_id           uuid PRIMARY KEY,
    session_id        uuid NOT NULL,
    loop_id           uuid NOT NULL,
    tool_execution_id uuid NOT NULL,
    state             text NOT NULL CHECK (state IN ('open', 'resolved', 'closed')),
    content           text NOT NULL,    -- normalised question; equal text = same re-ask
    gate              text NOT NULL,    -- the envelope JSON
    opened_seq        bigint NOT NULL REFERENCES journal (seq),
    opened_at         bigint NOT NULL,  -- ns since the epoch
    deadline          bigint,
    respond_at        bigint,           -- the deadline, when the policy answers at it
    link_digest       bytea UNIQUE,     -- keyed digest of the answer link's token
    resolved_seq      bigint REFERENCES journal (seq),
    answer            text,
    idempotency_key   text,             -- the winner's key and answer fingerprint only
    fingerprint       text,
    -- Guard: one question per tool execution; a re-ask finds the same gate.
    UNIQUE (session_id, loop_id, tool_execution_id)
);
CREATE INDEX gates_by_session ON gates (session_id, opened_seq);
CREATE INDEX gates_by_state ON gates (state, opened_seq);
CREATE INDEX gates_by_deadline ON gates ((deadline IS NULL), deadline, opened_seq);
CREATE INDEX gates_by_resolution ON gates (resolved_seq) WHERE resolved_seq IS NOT NULL;
CREATE INDEX gates_open_by_session ON gates (session_id) WHERE state = 'open';
CREATE INDEX gates_due ON gates (respond_at) WHERE state = 'open' AND respond_at IS NOT NULL;

-- Per-loop durable command queues. Rows are kept after the ack (`acked_at`).
CREATE SEQUENCE inbox_seq;
CREATE TABLE inbox (
    seq        bigint PRIMARY KEY,
    session_id uuid NOT NULL,
    loop_id    uuid NOT NULL,
    command_id uuid NOT NULL UNIQUE,
    gate_id    uuid NOT NULL UNIQUE REFERENCES gates (gate_id), -- guard: one command per gate
    command    text NOT NULL,
    acked_at   bigint
);
CREATE INDEX inbox_by_loop ON inbox (session_id, loop_id, seq);

-- Outbound webhooks: per endpoint a cursor over the journal, and a fenced lease: one replica at a
-- time delivers to an endpoint, and every write of its state names the lease it holds.
CREATE TABLE webhook_endpoints (
    url         text PRIMARY KEY,
    cursor      bigint NOT NULL,
    disabled_at bigint,
    disabled_by text,
    owner       text,
    lease_until bigint,                 -- ns, by the database's clock
    lease_epoch bigint NOT NULL DEFAULT 0
);
CREATE TABLE webhook_attempts (
    url         text NOT NULL REFERENCES webhook_endpoints (url),
    journal_seq bigint NOT NULL,
    status      text NOT NULL CHECK (status IN ('pending', 'failed')),
    attempts    integer NOT NULL,
    next_at     bigint,
    last_error  text NOT NULL,
    updated_at  bigint NOT NULL,
    PRIMARY KEY (url, journal_seq)
);
CREATE INDEX webhook_attempts_by_status ON webhook_attempts (status, url, journal_seq);
"#,
    // Version 2: no query plan uses it (the resolution join goes through the journal's key), yet
    // every answer wrote it.
    "DROP INDEX gates_by_resolution;",
    // Version 3: gates of more than one kind. `kind` is what `GET /v1/gates?kind=` filters on
    // (every gate before it was an AskUser gate); `decision` is a permission gate's decision as
    // its view shows it, written by the claim beside `answer` (an AskUser answer's text).
    "ALTER TABLE gates ADD COLUMN kind text NOT NULL DEFAULT 'harness.ask_user';
     ALTER TABLE gates ADD COLUMN decision text;",
    // Version 4: a gate's secret (an open-URL gate's URL), sealed with the server key; the claim
    // that takes the gate out of `open` clears it.
    "ALTER TABLE gates ADD COLUMN secret bytea;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Migrates the database to this build's schema, holding the migration lock so that only one
/// replica migrates at a time; refuses a newer schema.
pub async fn migrate(client: &Client) -> Result<(), OpenError> {
    let failed = |what: &str, e: tokio_postgres::Error| OpenError::Database(format!("{what}: {}", db_error(&e)));
    client
        .execute("SELECT pg_advisory_lock($1, $2)", &[&LOCK_CLASS, &LOCK_MIGRATE])
        .await
        .map_err(|e| failed("cannot take the migration lock", e))?;
    let migrated = steps(client).await;
    // The lock is the session's: released here, or when the connection closes.
    let _ = client.execute("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_CLASS, &LOCK_MIGRATE]).await;
    migrated
}

async fn steps(client: &Client) -> Result<(), OpenError> {
    let failed = |what: &str, e: tokio_postgres::Error| OpenError::Database(format!("{what}: {}", db_error(&e)));
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS gatehouse_schema (
                 version    bigint PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(|e| failed("cannot record the schema version", e))?;
    let version: i64 = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM gatehouse_schema", &[])
        .await
        .map_err(|e| failed("cannot read the schema version", e))?
        .get(0);
    if version > SCHEMA_VERSION {
        return Err(OpenError::Database(format!(
            "the database has schema version {version}, newer than this gatehouse supports ({SCHEMA_VERSION}); \
             run a newer gatehouse"
        )));
    }
    for (from, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = from as i64 + 1;
        let sql = format!("BEGIN; {step}; INSERT INTO gatehouse_schema (version) VALUES ({to}); COMMIT;");
        if let Err(e) = client.batch_execute(&sql).await {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(failed(&format!("migrating the schema to version {to} failed"), e));
        }
        tracing::info!(from, to, "migrated the database schema");
    }
    Ok(())
}
