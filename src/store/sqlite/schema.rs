//! Opening the database file: pragmas, recognising the file, and embedded versioned migrations
//! (`PRAGMA user_version`).

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, ffi};

use super::{Durability, files};
use crate::domain::ServerKey;
use crate::store::{OpenError, key_file};

/// Marks the file as ours (`PRAGMA application_id`), so another program's SQLite database is
/// refused instead of being migrated. The bytes spell "gate".
const APPLICATION_ID: i32 = 0x6761_7465;

/// One step of the schema: SQL, then work that needs Rust (and the server key).
struct Migration {
    sql: &'static str,
    then: Option<fn(&Connection, &ServerKey) -> rusqlite::Result<()>>,
}

/// Each step brings the schema from version `index` to `index + 1`. Never edit a released step;
/// append a new one.
const MIGRATIONS: &[Migration] = &[
    Migration { sql: FIRST, then: None },
    Migration { sql: LINK_DIGESTS, then: Some(digest_links) },
    Migration { sql: NO_RESOLUTION_INDEX, then: None },
    Migration { sql: GATE_KINDS, then: None },
    Migration { sql: GATE_SECRETS, then: None },
];

const FIRST: &str = r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

-- The journal: one append-only sequence of enduring events for the whole server. `seq` is
-- assigned inside the committing transaction and never reused (AUTOINCREMENT), so commit order
-- is seq order. `event` is the JSON served verbatim.
CREATE TABLE journal (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    gate_id    TEXT,
    type       TEXT NOT NULL,
    event      TEXT NOT NULL
) STRICT;
CREATE INDEX journal_by_session ON journal (session_id, seq);
-- Guard: at most one resolution per gate, whatever the code above it does.
CREATE UNIQUE INDEX journal_one_resolution ON journal (gate_id) WHERE type = 'GateResolved';

CREATE TABLE gates (
    gate_id           TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL,
    loop_id           TEXT NOT NULL,
    tool_execution_id TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('open', 'resolved', 'closed')),
    content           TEXT NOT NULL,   -- normalised question; equal text = same re-ask
    gate              TEXT NOT NULL,   -- the envelope JSON
    opened_seq        INTEGER NOT NULL REFERENCES journal (seq),
    opened_at         INTEGER NOT NULL, -- ns since the epoch
    deadline          INTEGER,          -- ns since the epoch
    respond_at        INTEGER,          -- the deadline, when the policy answers at it
    link_token        TEXT UNIQUE,      -- the answer link's token (HMAC of the gate id)
    resolved_seq      INTEGER REFERENCES journal (seq),
    answer            TEXT,
    idempotency_key   TEXT,             -- the winner's key and answer fingerprint only
    fingerprint       TEXT,
    -- Guard: one question per tool execution; a re-ask finds the same gate.
    UNIQUE (session_id, loop_id, tool_execution_id)
) STRICT;
CREATE INDEX gates_by_session ON gates (session_id, opened_seq);
CREATE INDEX gates_by_state ON gates (state, opened_seq);
-- `order=deadline` sorts by exactly this expression list, so the listing can walk the index.
CREATE INDEX gates_by_deadline ON gates (deadline IS NULL, deadline, opened_seq);
-- What the open-gates cap counts, and what the timer arms at start-up.
CREATE INDEX gates_by_resolution ON gates (resolved_seq) WHERE resolved_seq IS NOT NULL;
CREATE INDEX gates_open_by_session ON gates (session_id) WHERE state = 'open';
CREATE INDEX gates_due ON gates (respond_at) WHERE state = 'open' AND respond_at IS NOT NULL;

-- Per-loop durable command queues. Rows are kept after the ack (`acked_at`).
CREATE TABLE inbox (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    loop_id    TEXT NOT NULL,
    command_id TEXT NOT NULL UNIQUE,
    gate_id    TEXT NOT NULL UNIQUE REFERENCES gates (gate_id), -- guard: one command per gate
    command    TEXT NOT NULL,   -- the command JSON, stored at claim time and served verbatim
    acked_at   INTEGER
) STRICT;
CREATE INDEX inbox_by_loop ON inbox (session_id, loop_id, seq);

-- Outbound webhooks: per endpoint, a cursor over the journal (every event up to it was delivered
-- or dead-lettered) and the attempts at the event after it. Nothing here is written by the claim
-- transaction: delivery follows the journal.
CREATE TABLE webhook_endpoints (
    url         TEXT PRIMARY KEY,
    cursor      INTEGER NOT NULL,
    disabled_at INTEGER,            -- a 410 answer; cleared by --webhook-reenable
    disabled_by TEXT
) STRICT;
CREATE TABLE webhook_attempts (
    url         TEXT NOT NULL REFERENCES webhook_endpoints (url),
    journal_seq INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'failed')),
    attempts    INTEGER NOT NULL,   -- failed attempts so far
    next_at     INTEGER,            -- ns; when a pending event is tried again
    last_error  TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (url, journal_seq)
) STRICT;
CREATE INDEX webhook_attempts_by_status ON webhook_attempts (status, url, journal_seq);
"#;

/// Version 2: answer-link tokens are no longer stored, only their keyed digests, and the key
/// leaves the database for its key file. `link_token` stays as a column (SQLite cannot drop a
/// UNIQUE one without rebuilding the table) but is emptied and never written again; the old
/// `meta.link_key` is deleted. `digest_links` fills the digests.
const LINK_DIGESTS: &str = r#"
ALTER TABLE gates ADD COLUMN link_digest BLOB;
CREATE UNIQUE INDEX gates_by_link_digest ON gates (link_digest);
"#;

/// Version 3: `gates_by_resolution` is dropped. No query plan uses it (listings by resolution sort
/// through a temporary b-tree either way, and the resolution join goes through the journal's
/// key), yet every answer wrote it.
const NO_RESOLUTION_INDEX: &str = "DROP INDEX gates_by_resolution;";

/// Version 4: gates of more than one kind. `kind` is what `GET /v1/gates?kind=` filters on (every
/// gate before it was an AskUser gate); `decision` is a permission gate's decision as its view
/// shows it, written by the claim beside `answer` (an AskUser answer's text).
const GATE_KINDS: &str = r#"
ALTER TABLE gates ADD COLUMN kind TEXT NOT NULL DEFAULT 'harness.ask_user';
ALTER TABLE gates ADD COLUMN decision TEXT;
"#;

/// Version 5: a gate's secret (an open-URL gate's URL), sealed with the server key; the claim that
/// takes the gate out of `open` clears it.
const GATE_SECRETS: &str = "ALTER TABLE gates ADD COLUMN secret BLOB;";

/// Replaces each stored token with its keyed digest, and forgets the key, overwriting what is
/// deleted (`secure_delete`), so neither the tokens nor the key stay readable in free pages.
fn digest_links(conn: &Connection, key: &ServerKey) -> rusqlite::Result<()> {
    conn.execute_batch("PRAGMA secure_delete = ON")?;
    let tokens: Vec<(String, String)> = conn
        .prepare("SELECT gate_id, link_token FROM gates WHERE link_token IS NOT NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = conn.prepare("UPDATE gates SET link_digest = ?2, link_token = NULL WHERE gate_id = ?1")?;
    for (gate, token) in tokens {
        update.execute(rusqlite::params![gate, key.link_digest(&token).as_slice()])?;
    }
    conn.execute("DELETE FROM meta WHERE key = 'link_key'", [])?;
    conn.execute_batch("PRAGMA secure_delete = OFF")
}

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Distinct statements a connection keeps prepared: every query of the store, the writer's
/// transaction control, and every variant of the listing query (filters × orders × cursors, some
/// fifty) fit, so none is parsed again on the hot path.
const STATEMENT_CACHE: usize = 256;

/// How long a connection waits for a lock before giving up with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The writer's page cache, in KiB. Every answer inserts into indexes at places spread over the
/// file (by gate id); SQLite's default 2 MiB reads many of those pages back from the OS. But not
/// much more: when a b-tree split swaps two pages, SQLite parks one at the page of the 1 GiB lock
/// byte, and the COMMIT after it walks the whole page cache to drop that page (seen in the
/// profile: a 64 MiB cache spent 15% of the writer's time there).
const WRITER_CACHE_KIB: u32 = 8 * 1024;

/// What every connection, writer or reader, is set up with.
fn tune(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner stability guarantee: a plan never depends on bound values. Without it,
    // SQLite compares parameters with the WHERE clauses of partial indexes while planning, and a
    // statement doing so (the gate lookup, through its join on the journal) is parsed and
    // planned again every time it runs with a new value.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Opens the write connection: recognises the file, sets pragmas, finds the server key (in
/// `key_file`, creating it when the database is new), migrates. A new database file is created
/// readable by its owner only.
pub fn open_writer(path: &Path, durability: Durability, key_file: &Path) -> Result<(Connection, ServerKey), OpenError> {
    files::create_database(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| describe(path, e))?;
    tune(&conn).map_err(|e| describe(path, e))?;
    recognise(&conn).map_err(|e| describe(path, e))??;
    // Refuse a newer schema or a damaged file before changing anything in it.
    check_version(&conn).map_err(|e| describe(path, e))??;
    check_structure(&conn, path).map_err(|e| describe(path, e))??;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(|e| describe(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Database(format!("{}: could not switch to WAL (got {mode})", path.display())));
    }
    let sync = synchronous(durability);
    // `temp_store = MEMORY` keeps the statement journal of each job's savepoint in memory: on
    // the default (a file) every batch that outgrows 64 KiB of it writes, then deletes, a file.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; PRAGMA cache_size = -{WRITER_CACHE_KIB};
         PRAGMA temp_store = MEMORY;"
    ))
    .map_err(|e| describe(path, e))?;
    let key = server_key(&conn, path, key_file)?;
    migrate(&conn, &key).map_err(|e| describe(path, e))??;
    Ok((conn, key))
}

/// The server key: from its file; for a database of version 1, moved there from `meta` (the
/// migration to version 2 then deletes it from the database); for a new database, made afresh.
/// A database that has gates but lost its key file gets a new key, with a warning: its answer
/// links and logins stop working, everything else goes on.
fn server_key(conn: &Connection, path: &Path, key_file: &Path) -> Result<ServerKey, OpenError> {
    if let Some(key) = key_file::read(key_file)? {
        return Ok(key);
    }
    // A new database has no tables yet; one of version 1 keeps its key in `meta`.
    let legacy: Option<String> = if has_table(conn, "meta").map_err(|e| describe(path, e))? {
        conn.query_row("SELECT value FROM meta WHERE key = 'link_key'", [], |r| r.get(0))
            .optional()
            .map_err(|e| describe(path, e))?
    } else {
        None
    };
    let key = match legacy {
        Some(key) => ServerKey::new(key.into_bytes())
            .ok_or_else(|| OpenError::Database(format!("{}: the stored link key is damaged", path.display())))?,
        None => {
            let gates: i64 = if has_table(conn, "gates").map_err(|e| describe(path, e))? {
                conn.query_row("SELECT count(*) FROM gates", [], |r| r.get(0)).map_err(|e| describe(path, e))?
            } else {
                0
            };
            if gates > 0 {
                tracing::warn!(
                    "the server key {} is missing: a new one is made, so the answer links already sent and the \
                     page's logins stop working (gates stay answerable through the API); restore the key file \
                     beside the database to keep them",
                    key_file.display()
                );
            }
            ServerKey::generate()
        }
    };
    key_file::write(key_file, &key)?;
    Ok(key)
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
}

/// `PRAGMA synchronous` for a durability.
fn synchronous(durability: Durability) -> &'static str {
    match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

/// Opens the checkpointer's connection (after the writer's, which created and migrated the
/// file): it writes only what a checkpoint copies, and syncs it as hard as the writer syncs.
pub fn open_checkpointer(path: &Path, durability: Durability) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    tune(&conn)?;
    conn.execute_batch(&format!("PRAGMA synchronous = {};", synchronous(durability)))?;
    Ok(conn)
}

/// Opens a read-only connection (the writer has already created and migrated the file).
pub fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    tune(&conn)?;
    Ok(conn)
}

/// Refuses files that are SQLite but not ours. SQLite opens files lazily, so this first read is
/// also where a garbage or truncated file shows up (as `SQLITE_NOTADB`).
fn recognise(conn: &Connection) -> rusqlite::Result<Result<(), OpenError>> {
    let app_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    Ok(match app_id {
        APPLICATION_ID => Ok(()),
        0 if tables == 0 => Ok(()),
        _ => Err(OpenError::Database(
            "this SQLite database belongs to another program (it is not a gatehouse database)".into(),
        )),
    })
}

fn check_version(conn: &Connection) -> rusqlite::Result<Result<(), OpenError>> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    Ok(if version > SCHEMA_VERSION {
        Err(OpenError::Database(format!(
            "the database has schema version {version}, newer than this gatehouse supports \
             ({SCHEMA_VERSION}); run a newer gatehouse"
        )))
    } else {
        Ok(())
    })
}

/// `PRAGMA quick_check`: a truncated or damaged file is refused at start, in words, rather than
/// failing one request at a time later. It reads the whole file once (about a second per GB).
fn check_structure(conn: &Connection, path: &Path) -> rusqlite::Result<Result<(), OpenError>> {
    let verdict: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    Ok(if verdict == "ok" {
        Ok(())
    } else {
        Err(OpenError::Database(format!(
            "{} is damaged (SQLite quick_check: {verdict}); restore it from a backup",
            path.display()
        )))
    })
}

fn migrate(conn: &Connection, key: &ServerKey) -> rusqlite::Result<Result<(), OpenError>> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let migrated = version < SCHEMA_VERSION;
    for (from, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = from + 1;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let applied = (|| {
            conn.execute_batch(step.sql)?;
            if let Some(then) = step.then {
                then(conn, key)?;
            }
            conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {to};"))
        })();
        match applied {
            Ok(()) => conn.execute_batch("COMMIT")?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
        tracing::info!(from, to, "migrated the database schema");
    }
    if migrated {
        // What a migration deleted may still sit in the WAL's older frames: move everything into
        // the main file (whose deleted bytes `secure_delete` overwrote) and empty the WAL.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    Ok(Ok(()))
}

/// Turns an SQLite error at start-up into words an operator can act on.
fn describe(path: &Path, e: rusqlite::Error) -> OpenError {
    let what = match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            "is not a SQLite database (garbage, truncated or encrypted file)".to_owned()
        }
        Some(rusqlite::ErrorCode::CannotOpen) => "cannot be opened (missing directory or no permission)".to_owned(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            "is corrupt (damaged or truncated); restore it from a backup".to_owned()
        }
        Some(rusqlite::ErrorCode::ReadOnly) => "is read-only".to_owned(),
        _ => match &e {
            rusqlite::Error::SqliteFailure(f, _) if f.extended_code == ffi::SQLITE_IOERR_SHORT_READ => {
                "is truncated".to_owned()
            }
            _ => format!("could not be opened: {e}"),
        },
    };
    OpenError::Database(format!("{} {what}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OLD_TOKEN: &str = "c3RvcmVkLWluLWNsZWFyLWJ5LXZlcnNpb24tb25lLXRva2Vu";

    /// A database as version 1 left it: the link key in `meta`, a gate's token in clear.
    fn version_one(path: &Path) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL").unwrap();
        conn.execute_batch(FIRST).unwrap();
        conn.execute("INSERT INTO meta (key, value) VALUES ('link_key', ?1)", [OLD_KEY]).unwrap();
        conn.execute_batch(&format!(
            "INSERT INTO journal (seq, session_id, gate_id, type, event) VALUES (1, 's', 'g', 'GateOpened', '{{}}');
             INSERT INTO gates (gate_id, session_id, loop_id, tool_execution_id, state, content, gate, opened_seq,
                                opened_at, link_token)
             VALUES ('g', 's', 'l', 't', 'open', 'c', '{{}}', 1, 0, '{OLD_TOKEN}');
             PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;"
        ))
        .unwrap();
    }

    /// Every byte of the database's files.
    fn file_bytes(db: &Path) -> Vec<u8> {
        ["", "-wal", "-shm"]
            .iter()
            .flat_map(|suffix| {
                let mut path = db.as_os_str().to_owned();
                path.push(suffix);
                std::fs::read(path).unwrap_or_default()
            })
            .collect()
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    #[test]
    fn version_two_moves_the_key_out_and_keeps_only_digests_of_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let (db, key_file) = (dir.path().join("old.db"), dir.path().join("old.db.key"));
        version_one(&db);
        assert!(contains(&file_bytes(&db), OLD_TOKEN) && contains(&file_bytes(&db), OLD_KEY), "the setup stores both");

        let (conn, key) = open_writer(&db, Durability::Normal, &key_file).unwrap();
        assert_eq!(key.expose(), OLD_KEY.as_bytes(), "the old key goes on, so links already sent still work");
        assert_eq!(std::fs::read_to_string(&key_file).unwrap().trim(), OLD_KEY);
        let (token, digest): (Option<String>, Vec<u8>) =
            conn.query_row("SELECT link_token, link_digest FROM gates", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!((token, digest), (None, key.link_digest(OLD_TOKEN).to_vec()));
        drop(conn);
        let bytes = file_bytes(&db);
        assert!(!contains(&bytes, OLD_TOKEN), "no token is left in the database's files");
        assert!(!contains(&bytes, OLD_KEY), "nor the key");
    }

    #[test]
    fn a_new_database_gets_a_new_private_key_file_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let (db, key_file) = (dir.path().join("new.db"), dir.path().join("new.db.key"));
        let (_, first) = open_writer(&db, Durability::Normal, &key_file).unwrap();
        let (_, again) = open_writer(&db, Durability::Normal, &key_file).unwrap();
        assert_eq!(first.expose(), again.expose());
        assert!(!contains(&file_bytes(&db), std::str::from_utf8(first.expose()).unwrap()));
    }
}
