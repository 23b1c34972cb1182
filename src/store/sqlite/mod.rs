//! The embedded backend: one SQLite file in WAL mode. Writes go through the one writer thread
//! (`writer`), which rings the bus after each commit; reads use separate read-only connections on
//! blocking threads (short indexed reads run in place, see `lookup`), and never hold a statement or
//! a transaction across an `.await`. One process owns the file (`<db>.lock`).

pub mod bench;
mod cache;
mod checkpointer;
pub(crate) mod files;
mod gates;
mod inbox;
mod journal;
mod row;
mod schema;
mod webhooks;
mod writer;

use std::fs::{File, TryLockError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use cache::GateCache;
pub use schema::SCHEMA_VERSION;
pub use writer::{BeforeCommit, PendingCommit};

use super::model::{
    AnswerOutcome, Attempt, Claim, CloseOutcome, Delivery, DeliveryStatus, Endpoint, Expiry, GateRecord, GateStats,
    InboxQuery, JournalRange, JournalRows, Lease, ListQuery, Listing, OpenOutcome, Pending,
};
use super::{Health, NewGate, OpenError, Result, StoreError};

use crate::bus::{Bus, Effect};
use crate::domain::{CloseReason, CommandId, GateId, InboxEntry, LoopId, Question, ServerKey, SessionId, Timestamp};
use crate::metrics::WriterMetrics;
use checkpointer::Checkpointer;
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

/// How to open the SQLite backend.
#[derive(Clone)]
pub struct SqliteSettings {
    pub path: PathBuf,
    pub durability: Durability,
    /// The server key's file (`--secret-file`; default `<db>.key` beside the database).
    pub key_file: Option<PathBuf>,
    /// Test-only: called on the writer thread just before every COMMIT.
    pub before_commit: Option<BeforeCommit>,
    /// Where the writer records its batches and failures.
    pub writer_metrics: Arc<WriterMetrics>,
    /// Test-only: a file naming a storage fault to inject (spec §7, `--fault-file`).
    #[cfg(feature = "fault-injection")]
    pub fault_file: Option<PathBuf>,
}

impl std::fmt::Debug for SqliteSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSettings")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
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

/// Cheap, clonable handle on the SQLite backend.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    jobs: mpsc::Sender<Msg>,
    readers: Mutex<Vec<Connection>>,
    cache: Arc<GateCache>,
    reader_slots: Arc<tokio::sync::Semaphore>,
    health: Arc<Health>,
    lock: Mutex<Option<File>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SqliteStore {
    /// Takes the exclusive lock, opens and migrates the database, reads (or makes) the server
    /// key beside it, and starts the writer thread, which rings `bus` after each commit (its
    /// head set to the journal's first). Must be called from inside a tokio runtime.
    pub fn open(config: SqliteSettings, bus: Arc<Bus>) -> Result<(Self, ServerKey), OpenError> {
        let lock_file = files::sibling(&config.path, ".lock");
        let lock = files::open_lock(&lock_file)?;
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

        let key_file = config.key_file.clone().unwrap_or_else(|| files::sibling(&config.path, ".key"));
        let [wal, shm] = ["-wal", "-shm"].map(|suffix| files::sibling(&config.path, suffix));
        files::warn_if_exposed(&[&config.path, &wal, &shm, &lock_file, &key_file]);
        let (conn, key) = schema::open_writer(&config.path, config.durability, &key_file)?;
        let head = journal::head(&conn)
            .map_err(|e| OpenError::Database(format!("{}: cannot read the journal: {e}", config.path.display())))?;
        bus.start_at(head);
        let health = Arc::new(Health::default());
        let (jobs, rx) = mpsc::channel(QUEUE_DEPTH);
        let cache = Arc::new(GateCache::default());
        let writer = Writer {
            conn,
            rx,
            bus,
            cache: Arc::clone(&cache),
            health: Arc::clone(&health),
            before_commit: config.before_commit,
            metrics: config.writer_metrics,
            #[cfg(feature = "fault-injection")]
            fault_file: config.fault_file,
            runtime: tokio::runtime::Handle::current(),
            wal_frames: Default::default(),
            checkpointer: Some(
                Checkpointer::start(&config.path, config.durability)
                    .map_err(|e| OpenError::Database(format!("cannot start the checkpointer: {e}")))?,
            ),
        };
        let thread = std::thread::Builder::new()
            .name("gatehouse-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| OpenError::Database(format!("cannot start the writer thread: {e}")))?;
        let store = Self {
            inner: Arc::new(Inner {
                path: config.path,
                jobs,
                readers: Mutex::new(Vec::new()),
                cache,
                reader_slots: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
                health,
                lock: Mutex::new(Some(lock)),
                thread: Mutex::new(Some(thread)),
            }),
        };
        Ok((store, key))
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

    /// Runs a short indexed read right here on the calling task: it takes microseconds, while
    /// handing it to a blocking thread costs two thread wake-ups, several times the read itself
    /// (the gate lookup of every GET and every answer, a loop's inbox page). It runs only on an
    /// idle warm connection told not to wait for locks, so it can never put a runtime thread to
    /// sleep: with no idle connection, or should SQLite have to wait, it runs as an ordinary
    /// `read`.
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
}

impl super::MintedGates for SqliteStore {
    async fn open_gate(
        &self,
        session: SessionId,
        question: Question,
        new: NewGate,
        max_open: usize,
    ) -> Result<OpenOutcome> {
        self.write(move |conn, effects| gates::open(conn, session, &question, new, max_open, effects)).await
    }

    async fn gate_by_link(&self, digest: [u8; 32]) -> Result<Option<GateRecord>> {
        self.lookup(move |conn| gates::find_by_link(conn, &digest)).await
    }
}

impl super::Gates for SqliteStore {
    async fn answer_gate(&self, claim: Claim) -> Result<AnswerOutcome> {
        let Claim { target, answer, key, by } = claim;
        self.write(move |conn, effects| gates::answer(conn, &target, &answer, key.as_ref(), &by, effects)).await
    }

    async fn close_gate(&self, session: SessionId, gate: GateId, reason: CloseReason) -> Result<CloseOutcome> {
        self.write(move |conn, effects| gates::close(conn, session, gate, reason, effects)).await
    }

    async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>> {
        // A job per gate: they queue together and commit together, and one that fails on its
        // own (a broken stored gate) rolls back alone.
        let jobs = gates.into_iter().map(|gate| self.write(move |conn, effects| gates::expire(conn, gate, effects)));
        futures_util::future::join_all(jobs)
            .await
            .into_iter()
            .map(|outcome| match outcome {
                Err(StoreError::Internal(cause)) => Ok(Expiry::Failed(cause)),
                outcome => outcome,
            })
            .collect()
    }

    async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>> {
        self.read(gates::deadlines).await
    }

    async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>> {
        let miss = match self.inner.cache.get(gate) {
            Ok(record) => return Ok(Some(record)),
            Err(miss) => miss,
        };
        let record = self.lookup(move |conn| gates::find(conn, gate)).await?;
        if let Some(record) = &record {
            self.inner.cache.fill(miss, record);
        }
        Ok(record)
    }

    async fn list_gates(&self, query: ListQuery) -> Result<Listing> {
        self.read(move |conn| gates::list(conn, &query)).await
    }

    async fn gate_stats(&self) -> Result<GateStats> {
        self.read(gates::stats).await
    }
}

impl super::Journal for SqliteStore {
    async fn journal_range(&self, range: JournalRange) -> Result<JournalRows> {
        self.read(move |conn| journal::range(conn, &range)).await
    }

    async fn journal_bounds(&self) -> Result<(i64, i64)> {
        self.lookup(|conn| Ok((journal::earliest(conn)?, journal::head(conn)?))).await
    }
}

impl super::Inbox for SqliteStore {
    async fn inbox(&self, query: InboxQuery) -> Result<Vec<InboxEntry>> {
        // In place: the agent is waiting on this read (its long-poll just woke), and it is one
        // range of one loop's index, bounded by the page.
        self.lookup(move |conn| inbox::list(conn, &query)).await
    }

    async fn ack_command(&self, session: SessionId, loop_id: LoopId, command: CommandId) -> Result<bool> {
        self.write(move |conn, _| Ok(inbox::ack(conn, session, loop_id, command, Timestamp::now())?)).await
    }
}

/// One process owns the database (its lock file), so every lease is granted and never lost.
impl super::Deliveries for SqliteStore {
    async fn register(&self, urls: Vec<String>, reenable: Vec<String>) -> Result<Vec<Endpoint>> {
        self.write(move |conn, _| Ok(webhooks::register(conn, &urls, &reenable, journal::head(conn)?)?)).await
    }

    async fn lease(&self, url: String, owner: String, _ttl: Duration) -> Result<Option<(Lease, Endpoint)>> {
        let endpoint = self.read(move |conn| webhooks::endpoint(conn, &url)).await?;
        Ok(endpoint.map(|endpoint| (Lease { owner, epoch: 0 }, endpoint)))
    }

    async fn release(&self, _url: String, _lease: Lease) -> Result<()> {
        Ok(())
    }

    async fn pending(&self, url: String, seq: i64) -> Result<Option<Pending>> {
        self.read(move |conn| webhooks::pending(conn, &url, seq)).await
    }

    async fn record(&self, url: String, seq: i64, _lease: Lease, attempt: Attempt) -> Result<bool> {
        self.write(move |conn, _| Ok(webhooks::record(conn, &url, seq, &attempt)?)).await.map(|()| true)
    }

    async fn disable(&self, url: String, why: String, _lease: Lease) -> Result<bool> {
        self.write(move |conn, _| Ok(webhooks::disable(conn, &url, &why)?)).await.map(|()| true)
    }

    async fn deliveries(
        &self,
        status: DeliveryStatus,
        after: Option<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Delivery>> {
        self.read(move |conn| webhooks::list(conn, status, after, limit)).await
    }

    async fn endpoint(&self, url: String) -> Result<Option<Endpoint>> {
        self.read(move |conn| webhooks::endpoint(conn, &url)).await
    }
}

impl super::Lifecycle for SqliteStore {
    /// Drains the writer, checkpoints and closes the database, and releases the lock.
    async fn shutdown(&self) {
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
}

impl super::Status for SqliteStore {
    fn queue_depth(&self) -> usize {
        self.inner.jobs.max_capacity() - self.inner.jobs.capacity()
    }

    fn is_healthy(&self) -> bool {
        self.inner.health.is_healthy()
    }
}
