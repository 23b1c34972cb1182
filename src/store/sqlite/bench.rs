//! The write path with nothing around it, for the SQLite ceiling of `gatehouse bench`: a file of
//! its own on the same file system, the same schema, pragmas and claim statements as the server, but one `BEGIN IMMEDIATE … COMMIT`
//! per answer on the calling thread: no HTTP, no writer thread, no group commit. What the server
//! must beat.

use std::path::Path;

use rusqlite::Connection;
use serde_json::json;

use super::{Durability, gates, schema};
use crate::domain::{Answer, AnsweredBy, GateId, OpenGateIn, OpenRules, ServerKey, SessionId};
use crate::store::model::{AnswerOutcome, Idempotency, OpenOutcome};
use crate::store::{NewGate, OpenError, StoreError};

/// A database on which gates are opened in bulk, then answered one transaction each.
pub struct OneTransactionPerAnswer {
    conn: Connection,
    key: ServerKey,
    /// Opened and not yet answered.
    open: Vec<GateId>,
}

impl OneTransactionPerAnswer {
    /// Opens (and creates) the database at `path` as the server would.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, OpenError> {
        let mut key_file = path.as_os_str().to_owned();
        key_file.push(".key");
        let (conn, key) = schema::open_writer(path, durability, Path::new(&key_file))?;
        Ok(Self { conn, key, open: Vec::new() })
    }

    /// Opens `count` free-text gates in one transaction (the setup, not what is measured). A
    /// session holds at most 1000 of them, so they are spread over several.
    pub fn open_gates(&mut self, count: usize) -> Result<(), StoreError> {
        const PER_SESSION: usize = 1000;
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let mut session = SessionId::parse(&uuid::Uuid::new_v4().to_string()).expect("a fresh UUID");
        for n in 0..count {
            if n % PER_SESSION == 0 {
                session = SessionId::parse(&uuid::Uuid::new_v4().to_string()).expect("a fresh UUID");
            }
            let (loop_id, tool) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
            let body = json!({"loop_id": loop_id, "tool_execution_id": tool,
                              "question": format!("Baseline question {n}?")});
            let ask = serde_json::from_value::<OpenGateIn>(body)
                .ok()
                .and_then(|open| open.validate(OpenRules::default()).ok())
                .ok_or_else(|| StoreError::Internal("the baseline question is invalid".into()))?;
            let id = GateId::mint();
            let new = NewGate { id, link_digest: self.key.link_digest(&self.key.link_token(id)), secret: None };
            match gates::open(&self.conn, session, &ask, new, PER_SESSION, &mut Vec::new())? {
                OpenOutcome::Created(view) => self.open.push(view.gate_id),
                other => return Err(StoreError::Internal(format!("opening a baseline gate: {other:?}"))),
            }
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(())
    }

    /// Answers every open gate, each in its own transaction, exactly as the server's claim does
    /// (conditional update, `GateResolved`, inbox command, idempotency record). Returns how many.
    pub fn answer_all(&mut self) -> Result<usize, StoreError> {
        let values = json!({"answer": "yes"});
        let values = values.as_object().expect("an object");
        let answered = self.open.len();
        for (n, gate_id) in std::mem::take(&mut self.open).into_iter().enumerate() {
            // The request's own read and check, as the server makes them before its claim.
            let target = gates::find(&self.conn, gate_id)?
                .ok_or_else(|| StoreError::Internal(format!("baseline gate {gate_id} vanished")))?
                .answering()?;
            let answer = Answer::check(&target.gate, Some("answer"), Some(values))
                .map_err(|e| StoreError::Internal(format!("the baseline answer does not fit: {e:?}")))?;
            let key = Idempotency { key: format!("baseline-{n}"), fingerprint: Some(answer.fingerprint()) };
            let by = AnsweredBy::Person { principal: None };
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            match gates::answer(&self.conn, &target, &answer, Some(&key), &by, &mut Vec::new()) {
                Ok(AnswerOutcome::Accepted { .. }) => self.conn.execute_batch("COMMIT")?,
                outcome => {
                    self.conn.execute_batch("ROLLBACK")?;
                    return Err(StoreError::Internal(format!("a baseline answer was not accepted: {outcome:?}")));
                }
            }
        }
        Ok(answered)
    }
}

/// The physical limit of one claim on this file system, with no gatehouse code in the loop: a
/// minimal claim (`UPDATE … WHERE state = 0` on an integer key) and one 100-byte event insert,
/// one `BEGIN IMMEDIATE … COMMIT` each, WAL and the given durability. Returns claims per second.
pub fn minimal_claims_per_second(path: &Path, durability: Durability, claims: usize) -> rusqlite::Result<f64> {
    let conn = minimal_claims(path, durability, claims)?;
    let started = std::time::Instant::now();
    for id in 0..claims {
        minimal_claim(&conn, id)?;
    }
    Ok(claims as f64 / started.elapsed().as_secs_f64())
}

/// The same minimal claims one at a time, `pause` apart, as a person's answers come: how long
/// each transaction takes, in milliseconds. What the disk alone makes every durable answer wait.
pub fn minimal_claim_latencies_ms(
    path: &Path,
    durability: Durability,
    claims: usize,
    pause: std::time::Duration,
) -> rusqlite::Result<Vec<f64>> {
    let conn = minimal_claims(path, durability, claims)?;
    let mut latencies = Vec::with_capacity(claims);
    for id in 0..claims {
        std::thread::sleep(pause);
        let started = std::time::Instant::now();
        minimal_claim(&conn, id)?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}

/// A database of `claims` unclaimed rows and an empty event table (the unmeasured set-up).
fn minimal_claims(path: &Path, durability: Durability, claims: usize) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync};
         CREATE TABLE claims (id INTEGER PRIMARY KEY, state INTEGER NOT NULL);
         CREATE TABLE events (id INTEGER PRIMARY KEY, body BLOB NOT NULL);"
    ))?;
    conn.execute_batch("BEGIN")?;
    for id in 0..claims {
        conn.prepare_cached("INSERT INTO claims (id, state) VALUES (?1, 0)")?.execute([id as i64])?;
    }
    conn.execute_batch("COMMIT")?;
    Ok(conn)
}

/// Claims row `id` and appends one 100-byte event, in a transaction of their own.
fn minimal_claim(conn: &Connection, id: usize) -> rusqlite::Result<()> {
    const EVENT: [u8; 100] = [b'x'; 100];
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let claimed =
        conn.prepare_cached("UPDATE claims SET state = 1 WHERE id = ?1 AND state = 0")?.execute([id as i64])?;
    debug_assert_eq!(claimed, 1);
    conn.prepare_cached("INSERT INTO events (body) VALUES (?1)")?.execute([&EVENT[..]])?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}
