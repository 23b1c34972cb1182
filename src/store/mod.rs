//! Storage: one SQLite file in WAL mode. Writes go through the one writer thread (`writer`);
//! reads use separate read-only connections on blocking threads (single-row lookups run in place,
//! see `lookup`), and never hold a statement or a transaction across an `.await`. Handlers see
//! only this module's async API, never rusqlite.

mod baseline;
mod gates;
mod inbox;
mod journal;
mod row;
mod schema;
mod webhooks;
mod writer;

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

pub use baseline::OneTransactionPerAnswer;
pub use gates::{
    AnswerOutcome, CloseOutcome, Expiry, GateRecord, Idempotency, ListCursor, ListOrder, ListQuery, Listing,
    OpenOutcome, replay,
};
pub use schema::SCHEMA_VERSION;
pub use webhooks::{Delivery, Endpoint, Pending};
pub use writer::{BeforeCommit, Health, PendingCommit};

use crate::bus::{Bus, Effect};
use crate::domain::{
    Answer, AnsweredBy, AskUser, CloseReason, CommandId, GateId, InboxEntry, JournalPage, LoopId, SessionId, Timestamp,
};
use writer::{Job, Msg, Writer};

/// How many write jobs may queue before senders wait.
const QUEUE_DEPTH: usize = 1024;
/// How many read connections may be open at once (reads beyond wait for one); idle ones are
/// kept for reuse.
const MAX_READERS: usize = 16;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: a 202 survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: faster; the last commits may roll back after power loss or an OS
    /// crash (never after a mere process crash).
    Normal,
}

/// How to open the store.
#[derive(Clone)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub durability: Durability,
    /// Test-only: called on the writer thread just before every COMMIT.
    pub before_commit: Option<BeforeCommit>,
    /// Test-only: a file naming a storage fault to inject (spec §7, `--fault-file`).
    #[cfg(feature = "fault-injection")]
    pub fault_file: Option<PathBuf>,
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Locked(String),
    #[error("{0}")]
    Database(String),
}

/// A failed storage operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Busy, read-only, full or failing storage, or the writer has stopped: retryable (503).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A broken invariant or damaged data: a bug (500).
    #[error("storage invariant broken: {0}")]
    Internal(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::*;
        match e.sqlite_error_code() {
            Some(
                DatabaseBusy
                | DatabaseLocked
                | ReadOnly
                | DiskFull
                | SystemIoFailure
                | CannotOpen
                | DatabaseCorrupt
                | NotADatabase
                | OutOfMemory
                | OperationAborted
                | FileLockingProtocolFailed,
            ) => Self::Unavailable(e.to_string()),
            // Constraint hits are guards against our own bugs: every expected conflict is decided
            // by a query before the write.
            _ => Self::Internal(e.to_string()),
        }
    }
}

/// Cheap, clonable handle on the store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    jobs: mpsc::Sender<Msg>,
    readers: Mutex<Vec<Connection>>,
    reader_slots: Arc<tokio::sync::Semaphore>,
    health: Arc<Health>,
    bus: Arc<Bus>,
    /// The server secret answer-link tokens are derived with (kept in `meta`, so links survive
    /// restarts).
    link_key: Arc<Vec<u8>>,
    lock: Mutex<Option<File>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// `<db>.lock`, beside the database, named after its canonical path so that two spellings of the
/// same file (a symlink, `./x.db`) share one lock.
fn lock_path(db: &Path) -> PathBuf {
    let canonical = std::fs::canonicalize(db).unwrap_or_else(|_| {
        // Not created yet: the directory can still be resolved.
        let dir = db.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = db.file_name().map(PathBuf::from).unwrap_or_default();
        std::fs::canonicalize(dir).map(|d| d.join(&name)).unwrap_or_else(|_| db.to_owned())
    });
    let mut p = canonical.into_os_string();
    p.push(".lock");
    PathBuf::from(p)
}

impl Store {
    /// Takes the exclusive lock, opens and migrates the database, and starts the writer thread.
    /// Must be called from inside a tokio runtime.
    pub fn open(config: StoreConfig) -> Result<Self, OpenError> {
        let lock_file = lock_path(&config.path);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_file)
            .map_err(|e| OpenError::Locked(format!("cannot create the lock file {}: {e}", lock_file.display())))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(OpenError::Locked(format!(
                    "{} is in use by another gatehouse server (its lock {} is held); stop that server \
                     or choose another --db",
                    config.path.display(),
                    lock_file.display()
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(OpenError::Locked(format!("cannot lock {}: {e}", lock_file.display())));
            }
        }

        let conn = schema::open_writer(&config.path, config.durability)?;
        let link_key = schema::link_key(&conn, &config.path)?;
        let head = journal::head(&conn)
            .map_err(|e| OpenError::Database(format!("{}: cannot read the journal: {e}", config.path.display())))?;
        let bus = Arc::new(Bus::new(head));
        let health = Arc::new(Health::default());
        let (jobs, rx) = mpsc::channel(QUEUE_DEPTH);
        let writer = Writer {
            conn,
            rx,
            bus: Arc::clone(&bus),
            health: Arc::clone(&health),
            before_commit: config.before_commit,
            #[cfg(feature = "fault-injection")]
            fault_file: config.fault_file,
            runtime: tokio::runtime::Handle::current(),
        };
        let thread = std::thread::Builder::new()
            .name("gatehouse-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| OpenError::Database(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path: config.path,
                jobs,
                readers: Mutex::new(Vec::new()),
                reader_slots: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
                health,
                bus,
                link_key: Arc::new(link_key),
                lock: Mutex::new(Some(lock)),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The doorbell the writer rings after each commit.
    pub fn bus(&self) -> &Arc<Bus> {
        &self.inner.bus
    }

    /// The key answer-link tokens are derived with.
    pub fn link_key(&self) -> &Arc<Vec<u8>> {
        &self.inner.link_key
    }

    /// Whether the last write succeeded (for `/readyz`).
    pub fn is_healthy(&self) -> bool {
        self.inner.health.is_healthy()
    }

    /// Drains the writer, checkpoints and closes the database, and releases the lock. Later
    /// operations fail with `Unavailable`.
    pub async fn shutdown(&self) {
        self.inner.readers.lock().expect("reader pool").clear();
        let (ack, done) = oneshot::channel();
        if self.inner.jobs.send(Msg::Shutdown(ack)).await.is_ok() {
            let _ = done.await;
        }
        let thread = self.inner.thread.lock().expect("writer handle").take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        drop(self.inner.lock.lock().expect("lock file").take());
    }

    /// Runs `work` in the writer's next transaction and waits until that transaction is decided.
    async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Vec<Effect>) -> Result<T, StoreError> + Send + 'static,
    {
        let (job, reply) = Job::new(work);
        self.inner
            .jobs
            .send(Msg::Job(job))
            .await
            .map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
        // A job dropped without a reply panicked (the writer carried on without it).
        reply.await.map_err(|_| StoreError::Internal("a write job failed without a reply".into()))?
    }

    /// Runs a single-row lookup by key right here on the calling task: it takes microseconds,
    /// while handing it to a blocking thread costs two thread wake-ups, several times the lookup
    /// itself (the gate lookup of every GET and every answer). It runs only on an idle warm
    /// connection told not to wait for locks, so it can never put a runtime thread to sleep: with
    /// no idle connection, or should SQLite have to wait, it runs as an ordinary `read`.
    async fn lookup<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let idle = self.inner.readers.lock().expect("reader pool").pop();
        if let Some(conn) = idle {
            let result = conn.busy_timeout(std::time::Duration::ZERO).and_then(|()| {
                let result = work(&conn);
                conn.busy_timeout(schema::BUSY_TIMEOUT)?;
                result
            });
            self.inner.readers.lock().expect("reader pool").push(conn);
            match result {
                Err(e) if matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy)) => {}
                done => return done.map_err(StoreError::from),
            }
        }
        self.read(work).await
    }

    /// Runs `work` on a read-only connection on a blocking thread.
    async fn read<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        // Bounded: a burst of reads queues here instead of opening connections without limit.
        let slot = Arc::clone(&inner.reader_slots)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable("the store is closed".into()))?;
        let joined = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let idle = inner.readers.lock().expect("reader pool").pop();
            let conn = match idle {
                Some(conn) => conn,
                None => schema::open_reader(&inner.path)?,
            };
            let result = work(&conn);
            inner.readers.lock().expect("reader pool").push(conn);
            result
        })
        .await;
        match joined {
            Ok(result) => result.map_err(StoreError::from),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(StoreError::Unavailable(e.to_string())),
        }
    }

    /// Opens a gate or finds the one this tool execution already opened; a session holds at most
    /// `max_open` open gates.
    pub async fn open_gate(
        &self,
        session: SessionId,
        ask: AskUser,
        max_open: usize,
    ) -> Result<OpenOutcome, StoreError> {
        let key = Arc::clone(&self.inner.link_key);
        self.write(move |conn, effects| gates::open(conn, session, &ask, max_open, &key, effects)).await
    }

    /// Answers each still-open gate with its policy's default answer (the timer's claim).
    pub async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>, StoreError> {
        self.write(move |conn, effects| gates::expire(conn, &gates, effects)).await
    }

    /// Open gates whose policy answers at a deadline, soonest first.
    pub async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>, StoreError> {
        self.read(gates::deadlines).await
    }

    /// Claims, journals and enqueues an answer that was already checked against its gate.
    pub async fn answer_gate(
        &self,
        session: SessionId,
        gate: GateId,
        answer: Answer,
        key: Option<Idempotency>,
        by: AnsweredBy,
    ) -> Result<AnswerOutcome, StoreError> {
        self.write(move |conn, effects| gates::answer(conn, session, gate, &answer, key.as_ref(), &by, effects)).await
    }

    /// Withdraws an open gate.
    pub async fn close_gate(
        &self,
        session: SessionId,
        gate: GateId,
        reason: CloseReason,
    ) -> Result<CloseOutcome, StoreError> {
        self.write(move |conn, effects| gates::close(conn, session, gate, reason, effects)).await
    }

    /// Acknowledges a command; `false` when it is not in that loop's inbox.
    pub async fn ack_command(
        &self,
        session: SessionId,
        loop_id: LoopId,
        command: CommandId,
    ) -> Result<bool, StoreError> {
        self.write(move |conn, _| Ok(inbox::ack(conn, session, loop_id, command, Timestamp::now())?)).await
    }

    /// The gate an answer-link token belongs to.
    pub async fn gate_by_link(&self, token: String) -> Result<Option<GateRecord>, StoreError> {
        self.lookup(move |conn| gates::find_by_link(conn, &token)).await
    }

    /// One gate by id, in whatever session.
    pub async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>, StoreError> {
        self.lookup(move |conn| gates::find(conn, gate)).await
    }

    /// A page of gates with the journal head of the same snapshot.
    pub async fn list_gates(&self, query: ListQuery) -> Result<Listing, StoreError> {
        self.read(move |conn| gates::list(conn, &query)).await
    }

    /// A page of one loop's inbox.
    pub async fn inbox(
        &self,
        session: SessionId,
        loop_id: LoopId,
        after: i64,
        limit: usize,
        include_acked: bool,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.read(move |conn| inbox::list(conn, session, loop_id, after, limit, include_acked)).await
    }

    /// Journal events with `after < seq <= upto`, for a stream behind the frame ring.
    pub async fn journal_range(
        &self,
        session: Option<SessionId>,
        after: i64,
        upto: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.read(move |conn| journal::range(conn, session, after, upto, limit)).await
    }

    /// Registers the configured webhook endpoints (new ones start at the journal head) and
    /// re-enables the listed ones.
    pub async fn webhook_register(
        &self,
        urls: Vec<String>,
        reenable: Vec<String>,
    ) -> Result<Vec<Endpoint>, StoreError> {
        self.write(move |conn, _| Ok(webhooks::register(conn, &urls, &reenable, journal::head(conn)?)?)).await
    }

    pub async fn webhook_endpoint(&self, url: String) -> Result<Option<Endpoint>, StoreError> {
        self.read(move |conn| webhooks::endpoint(conn, &url)).await
    }

    pub async fn webhook_pending(&self, url: String, seq: i64) -> Result<Option<Pending>, StoreError> {
        self.read(move |conn| webhooks::pending(conn, &url, seq)).await
    }

    pub async fn webhook_delivered(&self, url: String, seq: i64) -> Result<(), StoreError> {
        self.write(move |conn, _| Ok(webhooks::delivered(conn, &url, seq)?)).await
    }

    pub async fn webhook_retry_at(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        next_at: Timestamp,
        error: String,
    ) -> Result<(), StoreError> {
        self.write(move |conn, _| Ok(webhooks::retry_at(conn, &url, seq, attempts, next_at, &error)?)).await
    }

    pub async fn webhook_dead_letter(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        error: String,
    ) -> Result<(), StoreError> {
        self.write(move |conn, _| Ok(webhooks::dead_letter(conn, &url, seq, attempts, &error)?)).await
    }

    pub async fn webhook_disable(&self, url: String, why: String) -> Result<(), StoreError> {
        self.write(move |conn, _| Ok(webhooks::disable(conn, &url, &why)?)).await
    }

    /// Webhook deliveries in one status (`pending` or `failed`), a page after a cursor.
    pub async fn webhook_deliveries(
        &self,
        status: &'static str,
        after: Option<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.read(move |conn| webhooks::list(conn, status, after, limit)).await
    }

    /// The oldest retained and the newest committed journal seq.
    pub async fn journal_bounds(&self) -> Result<(i64, i64), StoreError> {
        self.lookup(|conn| Ok((journal::earliest(conn)?, journal::head(conn)?))).await
    }

    /// A page of the journal, optionally of one session.
    pub async fn journal(
        &self,
        session: Option<SessionId>,
        from: i64,
        limit: usize,
    ) -> Result<JournalPage, StoreError> {
        self.read(move |conn| journal::page(conn, session, from, limit)).await
    }
}
