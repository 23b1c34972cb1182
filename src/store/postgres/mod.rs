//! The PostgreSQL backend: several `gatehouse serve` replicas share one database, with the same
//! API and the same promises as the embedded SQLite file.
//!
//! Per replica: one writer task with a connection of its own (`writer`: group commit, and the
//! ordering lock that makes seq order commit order across replicas), one follower (`follower`:
//! the only feeder of this replica's bus, from the committed journal rows, woken by LISTEN/NOTIFY,
//! by its own writer and by a 1 s poll), and a small pool of connections for reads and for the
//! writes that add no journal row (acks, webhook state). Reads go to the primary: a standby's
//! journal may lag the cursor a client got from the primary.

/// The database's clock in nanoseconds since the epoch, as SQL: deadlines and leases are compared
/// with one clock, whatever the replicas' clocks say.
macro_rules! now_ns {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000000000)::bigint"
    };
}

mod follower;
mod gates;
mod journal;
mod schema;
mod webhooks;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use serde_json::value::RawValue;
use tokio::sync::Notify;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

pub use schema::SCHEMA_VERSION;
pub use writer::PgBeforeCommit;

use super::model::{
    AnswerOutcome, Attempt, Claim, CloseOutcome, Delivery, DeliveryStatus, Endpoint, Expiry, GateRecord, GateStats,
    InboxQuery, JournalRange, JournalRows, Lease, ListQuery, Listing, OpenOutcome, Pending,
};
use super::{Background, DatabaseUrl, Health, NewGate, OpenError, PageLimit, Result, StoreError, key_file};
use crate::bus::Bus;
use crate::common::innermost_cause;
use crate::domain::{
    CloseReason, CommandId, GateId, IdError, InboxEntry, LoopId, Question, ServerKey, SessionId, Timestamp,
};
use crate::metrics::WriterMetrics;
use writer::{Writer, WriterHandle};

/// The advisory locks' class ("gate"), and the locks in it.
const LOCK_CLASS: i32 = 0x6761_7465;
/// Held by a journal-writing batch from its start to its commit: one at a time, cluster-wide.
const LOCK_ORDER: i32 = 1;
/// Held while migrating.
const LOCK_MIGRATE: i32 = 2;
/// The NOTIFY channel writers ring after a commit.
const CHANNEL: &str = "gatehouse_journal";
/// Connections in each replica's pool (reads, acks, webhook state, the writer's own).
const POOL_SIZE: usize = 16;
/// How long a request waits for a pooled connection, or for a new one, before `503`.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// How to open the PostgreSQL backend.
#[derive(Clone)]
pub struct PgSettings {
    pub url: DatabaseUrl,
    /// The server key's file: required, and the same for every replica (links and logins made by
    /// one replica are checked by another).
    pub key_file: Option<PathBuf>,
    /// Test-only: awaited by the writer just before every COMMIT.
    pub before_commit: Option<PgBeforeCommit>,
    /// Test-only: `false` turns the ordering lock off (the ordering test's negative control).
    pub order_lock: bool,
    /// Where the writer records its batches and failures.
    pub writer_metrics: Arc<WriterMetrics>,
}

impl PgSettings {
    pub fn new(url: DatabaseUrl, key_file: Option<PathBuf>) -> Self {
        Self { url, key_file, before_commit: None, order_lock: true, writer_metrics: Arc::default() }
    }
}

impl std::fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSettings")
            .field("url", &self.url)
            .field("key_file", &self.key_file)
            .field("order_lock", &self.order_lock)
            .finish_non_exhaustive()
    }
}

/// Cheap, clonable handle on the PostgreSQL backend.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    writer: WriterHandle,
    health: Arc<Health>,
    /// Whether the follower's last read worked.
    following: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl PgStore {
    /// Connects, migrates (under a lock, once for all replicas), reads the server key, and makes
    /// the writer and the follower, returned for the caller to run: the follower feeds `bus` (its
    /// head set to the journal's first).
    pub async fn open(settings: PgSettings, bus: Arc<Bus>) -> Result<(Self, ServerKey, Vec<Background>), OpenError> {
        let mut config: tokio_postgres::Config = settings.url.expose().parse().map_err(|_| {
            // The parser's message may quote the URL, and a URL may hold a password.
            OpenError::Database(
                "the database URL is not a PostgreSQL URL like postgres://USER:PASSWORD@HOST:PORT/DATABASE".into(),
            )
        })?;
        config
            .application_name("gatehouse")
            .connect_timeout(POOL_WAIT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30));
        let key_file = settings.key_file.clone().ok_or_else(|| {
            OpenError::Database(
                "--database-url needs --secret-file: every replica signs answer links and logins with the same \
                 key, kept out of the database. Make one with `head -c 32 /dev/urandom | base64 > gatehouse.key` \
                 and give it to every replica"
                    .into(),
            )
        })?;
        let key = key_file::read(&key_file)?.ok_or_else(|| {
            OpenError::Database(format!(
                "the server key {} does not exist; make it with `head -c 32 /dev/urandom | base64 > {}` and give \
                 the same file to every replica",
                key_file.display(),
                key_file.display()
            ))
        })?;

        let (client, connection) = config.connect(NoTls).await.map_err(|e| cannot_connect(&e))?;
        let driver = tokio::spawn(connection);
        schema::migrate(&client).await?;
        drop(client);
        let _ = driver.await;

        let manager =
            Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| OpenError::Database(format!("cannot make the connection pool: {e}")))?;
        let head = {
            let conn = pool.get().await.map_err(|e| OpenError::Database(pool_error(e).to_string()))?;
            journal::bounds(&conn).await.map_err(|e| OpenError::Database(format!("cannot read the journal: {e}")))?.1
        };
        bus.start_at(head);
        let health = Arc::new(Health::default());
        let following = Arc::new(AtomicBool::new(true));
        let wake = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let (writer, handle) = Writer::new(
            pool.clone(),
            Arc::clone(&health),
            Arc::clone(&wake),
            settings.before_commit,
            settings.order_lock,
            settings.writer_metrics,
        );
        let follower = follower::Follower {
            pool: pool.clone(),
            listen: config,
            bus,
            head,
            wake,
            reading: Arc::clone(&following),
            shutdown: shutdown.clone(),
        };
        let background = vec![
            Background { name: "database writer", task: Box::pin(writer.run()) },
            Background { name: "journal follower", task: Box::pin(follower.run()) },
        ];
        let store = Self { inner: Arc::new(Inner { pool, writer: handle, health, following, shutdown }) };
        Ok((store, key, background))
    }

    /// A pooled connection for a read or a lone statement.
    async fn conn(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.pool.get().await.map_err(pool_error)
    }
}

impl super::MintedGates for PgStore {
    async fn open_gate(
        &self,
        session: SessionId,
        question: Question,
        new: NewGate,
        max_open: usize,
    ) -> Result<OpenOutcome> {
        let question = Arc::new(question);
        self.inner
            .writer
            .write(move |conn| {
                let (question, new) = (Arc::clone(&question), new.clone());
                Box::pin(async move { gates::open(conn, session, &question, new, max_open).await })
            })
            .await
    }

    async fn gate_by_link(&self, digest: [u8; 32]) -> Result<Option<GateRecord>> {
        gates::find_by_link(&*self.conn().await?, &digest).await
    }
}

impl super::Gates for PgStore {
    async fn answer_gate(&self, claim: Claim) -> Result<AnswerOutcome> {
        // The event and the command are made once, here, not inside the writer's transaction
        // (which may run a job again): the claim then writes them in one statement.
        let job = Arc::new(gates::AnswerJob::new(claim));
        self.inner
            .writer
            .write_independent(move |conn| {
                let job = Arc::clone(&job);
                Box::pin(async move { gates::answer(conn, &job).await })
            })
            .await
    }

    async fn close_gate(&self, session: SessionId, gate: GateId, reason: CloseReason) -> Result<CloseOutcome> {
        self.inner.writer.write(move |conn| Box::pin(gates::close(conn, session, gate, reason))).await
    }

    async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>> {
        let gates = Arc::new(gates);
        self.inner
            .writer
            .write(move |conn| {
                let gates = Arc::clone(&gates);
                Box::pin(async move { gates::expire(conn, &gates).await })
            })
            .await
    }

    async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>> {
        gates::deadlines(&*self.conn().await?).await
    }

    async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>> {
        gates::find(&*self.conn().await?, gate).await
    }

    async fn list_gates(&self, query: ListQuery) -> Result<Listing> {
        gates::list(&mut self.conn().await?, &query).await
    }

    async fn gate_stats(&self) -> Result<GateStats> {
        gates::stats(&*self.conn().await?).await
    }
}

impl super::Journal for PgStore {
    async fn journal_range(&self, range: JournalRange) -> Result<JournalRows> {
        journal::range(&*self.conn().await?, &range).await
    }

    async fn journal_bounds(&self) -> Result<(i64, i64)> {
        journal::bounds(&*self.conn().await?).await
    }
}

impl super::Inbox for PgStore {
    async fn inbox(&self, query: InboxQuery) -> Result<Vec<InboxEntry>> {
        journal::inbox(&*self.conn().await?, &query).await
    }

    async fn ack_command(&self, session: SessionId, loop_id: LoopId, command: CommandId) -> Result<bool> {
        journal::ack(&*self.conn().await?, session, loop_id, command, Timestamp::now()).await
    }
}

/// Every write of the delivery state names the lease: a replica that lost it changes nothing.
impl super::Deliveries for PgStore {
    async fn register(&self, urls: Vec<String>, reenable: Vec<String>) -> Result<Vec<Endpoint>> {
        webhooks::register(&*self.conn().await?, &urls, &reenable).await
    }

    async fn lease(&self, url: String, owner: String, ttl: Duration) -> Result<Option<(Lease, Endpoint)>> {
        webhooks::lease(&*self.conn().await?, &url, &owner, ttl).await
    }

    async fn release(&self, url: String, lease: Lease) -> Result<()> {
        webhooks::release(&*self.conn().await?, &url, &lease).await
    }

    async fn pending(&self, url: String, seq: i64) -> Result<Option<Pending>> {
        webhooks::pending(&*self.conn().await?, &url, seq).await
    }

    async fn record(&self, url: String, seq: i64, lease: Lease, attempt: Attempt) -> Result<bool> {
        webhooks::record(&*self.conn().await?, &url, seq, &lease, &attempt).await
    }

    async fn disable(&self, url: String, why: String, lease: Lease) -> Result<bool> {
        webhooks::disable(&*self.conn().await?, &url, &why, &lease).await
    }

    async fn deliveries(
        &self,
        status: DeliveryStatus,
        after: Option<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Delivery>> {
        webhooks::list(&*self.conn().await?, status, after, limit).await
    }

    async fn endpoint(&self, url: String) -> Result<Option<Endpoint>> {
        webhooks::endpoint(&*self.conn().await?, &url).await
    }
}

impl super::Lifecycle for PgStore {
    /// Finishes the queued writes, stops the follower and closes the pool.
    async fn shutdown(&self) {
        self.inner.writer.shutdown().await;
        self.inner.shutdown.cancel();
        self.inner.pool.close();
    }
}

impl super::Status for PgStore {
    fn queue_depth(&self) -> usize {
        self.inner.writer.queue_depth()
    }

    /// The writer's last transaction worked and the follower's last read did.
    fn is_healthy(&self) -> bool {
        self.inner.health.is_healthy() && self.inner.following.load(Ordering::Relaxed)
    }
}

/// Sorts a driver error: what a retry may cure (a lost or refused connection, a database that is
/// read-only, full, shutting down or recovering, a lock or statement timeout, a serialization
/// failure) is `Unavailable`; anything else (a constraint guard, a bad statement) is a bug.
fn classify(e: tokio_postgres::Error) -> StoreError {
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection itself failed (I/O, closed, protocol).
        return StoreError::Unavailable(db_error(&e));
    };
    let class = &code.code()[..2];
    let retryable = matches!(class, "08" | "53" | "57" | "58")
        || [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        ]
        .contains(code);
    if retryable { StoreError::Unavailable(db_error(&e)) } else { StoreError::Internal(db_error(&e)) }
}

/// A pool error: every one is about reaching the database (a timeout, a refused connection).
fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("no database connection: {e}"))
}

/// A driver error in words: the server's message when it sent one, else the innermost cause.
fn db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => innermost_cause(e),
    }
}

fn cannot_connect(e: &tokio_postgres::Error) -> OpenError {
    OpenError::Database(format!("cannot connect to the database: {}", db_error(e)))
}

/// A stored UUID column as one of our ids.
fn uuid_column<T>(
    row: &tokio_postgres::Row,
    idx: usize,
    from: fn(uuid::Uuid) -> Result<T, IdError>,
) -> Result<T, StoreError> {
    let id: uuid::Uuid = row.try_get(idx).map_err(classify)?;
    from(id).map_err(|e| StoreError::Internal(format!("stored id in column {idx}: {e}")))
}

/// Stored JSON text, kept raw to be served verbatim.
fn json_column(text: String) -> Result<Box<RawValue>, StoreError> {
    RawValue::from_string(text).map_err(|e| StoreError::Internal(format!("stored JSON: {e}")))
}

/// The rows of `stmt` that `page` holds, read as they arrive and mapped by `map`: once the page
/// is full the rest of the result is discarded as it comes, never held (the query offers one row
/// more than the page, so the second value says whether more rows exist).
async fn query_page<C, T>(
    client: &C,
    stmt: &tokio_postgres::Statement,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    page: PageLimit,
    map: impl Fn(tokio_postgres::Row) -> Result<T, StoreError>,
    size: impl Fn(&T) -> usize,
) -> Result<(Vec<T>, bool), StoreError>
where
    C: tokio_postgres::GenericClient,
{
    use futures_util::TryStreamExt;
    let rows = client.query_raw(stmt, params.iter().copied()).await.map_err(classify)?;
    let mut rows = std::pin::pin!(rows);
    let mut fill = page.start();
    while let Some(row) = rows.try_next().await.map_err(classify)? {
        if !fill.offer(map(row)?, &size) {
            return Ok((fill.rows, true));
        }
    }
    Ok((fill.rows, false))
}
