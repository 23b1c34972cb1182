//! Storage: the one seam between the server and its database. `Store` offers the same async
//! operations whatever the backend: the embedded default, one SQLite file (`sqlite`), or
//! PostgreSQL shared by several replicas (`postgres`). Inside it is an enum over the two; the
//! private trait `Backend` makes the compiler check that both offer every operation. Handlers,
//! the timer and webhooks see only this module's API and its vocabulary (`model`), never a driver.
//!
//! Every backend keeps the same promises: a claim is one conditional update in one transaction
//! with its journal row and inbox command; the journal's seq is strictly increasing in commit
//! order, so a reader never skips a row committed later with a lower seq; nothing reaches the bus
//! (streams, waiters, the timer) before the commit that made it.

mod key_file;
mod model;
pub mod postgres;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use model::{
    AnswerOutcome, Answering, CloseOutcome, Delivery, Endpoint, Expiry, GateRecord, GateStats, Idempotency, Lease,
    ListCursor, ListOrder, ListQuery, Listing, OpenOutcome, Pending, replay,
};
pub use postgres::{PgBeforeCommit, PgSettings};
pub use sqlite::{
    BeforeCommit, Durability, OneTransactionPerAnswer, PendingCommit, SqliteSettings, minimal_claim_latencies_ms,
    minimal_claims_per_second,
};

use crate::bus::{Bus, FrameFn};
use crate::domain::{
    Answer, AnsweredBy, AskUser, CloseReason, CommandId, GateId, InboxEntry, JournalPage, LoopId, ServerKey, SessionId,
    Timestamp,
};
use crate::metrics::WriterMetrics;

/// Which database, and how to open it.
#[derive(Clone, Debug)]
pub enum StoreSettings {
    Sqlite(SqliteSettings),
    Postgres(PgSettings),
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
    /// Busy, read-only, full, unreachable or failing storage, or the writer has stopped:
    /// retryable (503). After a failed COMMIT the outcome is unknown.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A broken invariant or damaged data: a bug (500).
    #[error("storage invariant broken: {0}")]
    Internal(String),
}

/// How much one page of rows may hold: at most `rows` rows and about `bytes` bytes (by
/// `PageBytes`), but always at least one row, so the largest row fits any page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit {
    pub rows: usize,
    pub bytes: usize,
}

impl PageLimit {
    /// Takes rows while they fit. The second value says whether rows were left over: for it to
    /// be right, the query must offer one row more than `rows` when more exist (`rows + 1`).
    fn fill<T, E>(
        self,
        rows: impl IntoIterator<Item = Result<T, E>>,
        size: impl Fn(&T) -> usize,
    ) -> Result<(Vec<T>, bool), E> {
        let mut page = self.start();
        for row in rows {
            if !page.offer(row?, &size) {
                return Ok((page.rows, true));
            }
        }
        Ok((page.rows, false))
    }

    /// An empty page to `offer` rows to one at a time (rows that arrive from a stream).
    fn start<T>(self) -> PageFill<T> {
        PageFill { limit: self, rows: Vec::new(), bytes: 0 }
    }

    /// The `LIMIT` that lets `fill` see whether more rows exist.
    fn sql_limit(self) -> i64 {
        i64::try_from(self.rows).unwrap_or(i64::MAX - 1) + 1
    }
}

/// A page being filled.
struct PageFill<T> {
    limit: PageLimit,
    rows: Vec<T>,
    bytes: usize,
}

impl<T> PageFill<T> {
    /// Adds `row` if it fits; `false` (and the row dropped) when the page is full, which means
    /// more rows exist.
    fn offer(&mut self, row: T, size: impl Fn(&T) -> usize) -> bool {
        let grown = self.bytes + size(&row);
        if self.rows.len() == self.limit.rows || (!self.rows.is_empty() && grown > self.limit.bytes) {
            return false;
        }
        self.bytes = grown;
        self.rows.push(row);
        true
    }
}

/// Whether storage works, for `/readyz`: set unhealthy by a failed write (or a lost connection),
/// healthy again by the next success.
#[derive(Debug)]
pub struct Health(AtomicBool);

impl Default for Health {
    /// Healthy until something fails.
    fn default() -> Self {
        Self(AtomicBool::new(true))
    }
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, healthy: bool) {
        if self.0.swap(healthy, Ordering::Relaxed) != healthy {
            if healthy {
                tracing::info!("storage healthy again");
            } else {
                tracing::error!("storage unhealthy; /readyz answers 503 until it works again");
            }
        }
    }
}

/// A task an open store needs running until it shuts down (the PostgreSQL writer and journal
/// follower). The caller spawns and supervises it: one that ends early is a failure.
pub struct Background {
    pub name: &'static str,
    pub task: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// An open store, the bus its commits ring, and the tasks it needs running.
pub struct Opened {
    pub store: Store,
    pub bus: Arc<Bus>,
    pub background: Vec<Background>,
    /// What the store's writer records (batches, commit times, storage errors).
    pub writer_metrics: Arc<WriterMetrics>,
}

impl Opened {
    /// Closes a store whose background tasks never ran (the server could not start after all).
    pub async fn close(self) {
        // Dropped unstarted, the writer's queue closes, so the store's shutdown does not wait
        // for a writer that will never answer.
        drop(self.background);
        self.store.shutdown().await;
    }
}

/// A gate about to be opened: its id and the digest of its answer-link token, made outside the
/// backend, so no backend needs the server key.
#[derive(Debug, Clone, Copy)]
struct NewGate {
    id: GateId,
    link_digest: [u8; 32],
}

/// What every backend offers. Private: it exists so the compiler checks that both backends have
/// every operation with the same signature; callers use `Store`.
trait Backend {
    async fn open_gate(
        &self,
        session: SessionId,
        ask: AskUser,
        new: NewGate,
        max_open: usize,
    ) -> Result<OpenOutcome, StoreError>;
    async fn answer_gate(
        &self,
        target: Answering,
        answer: Answer,
        key: Option<Idempotency>,
        by: AnsweredBy,
    ) -> Result<AnswerOutcome, StoreError>;
    async fn close_gate(
        &self,
        session: SessionId,
        gate: GateId,
        reason: CloseReason,
    ) -> Result<CloseOutcome, StoreError>;
    async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>, StoreError>;
    async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>, StoreError>;
    async fn ack_command(&self, session: SessionId, loop_id: LoopId, command: CommandId) -> Result<bool, StoreError>;
    async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>, StoreError>;
    async fn gate_by_link(&self, digest: [u8; 32]) -> Result<Option<GateRecord>, StoreError>;
    async fn list_gates(&self, query: ListQuery) -> Result<Listing, StoreError>;
    async fn inbox(
        &self,
        session: SessionId,
        loop_id: LoopId,
        after: i64,
        page: PageLimit,
        include_acked: bool,
    ) -> Result<Vec<InboxEntry>, StoreError>;
    async fn journal(&self, session: Option<SessionId>, from: i64, page: PageLimit) -> Result<JournalPage, StoreError>;
    async fn journal_range(
        &self,
        session: Option<SessionId>,
        after: i64,
        upto: i64,
        page: PageLimit,
    ) -> Result<(Vec<(i64, String)>, bool), StoreError>;
    async fn journal_bounds(&self) -> Result<(i64, i64), StoreError>;
    async fn webhook_register(&self, urls: Vec<String>, reenable: Vec<String>) -> Result<Vec<Endpoint>, StoreError>;
    async fn webhook_lease(
        &self,
        url: String,
        owner: String,
        ttl: std::time::Duration,
    ) -> Result<Option<(Lease, Endpoint)>, StoreError>;
    async fn webhook_release(&self, url: String, lease: Lease) -> Result<(), StoreError>;
    async fn webhook_pending(&self, url: String, seq: i64) -> Result<Option<Pending>, StoreError>;
    async fn webhook_delivered(&self, url: String, seq: i64, lease: Lease) -> Result<bool, StoreError>;
    async fn webhook_retry_at(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        next_at: Timestamp,
        error: String,
        lease: Lease,
    ) -> Result<bool, StoreError>;
    async fn webhook_dead_letter(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        error: String,
        lease: Lease,
    ) -> Result<bool, StoreError>;
    async fn webhook_disable(&self, url: String, why: String, lease: Lease) -> Result<bool, StoreError>;
    async fn webhook_deliveries(
        &self,
        status: &'static str,
        after: Option<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError>;
    async fn webhook_endpoint(&self, url: String) -> Result<Option<Endpoint>, StoreError>;
    async fn gate_stats(&self) -> Result<GateStats, StoreError>;
    /// Write jobs waiting for the writer.
    fn queue_depth(&self) -> usize;
    fn is_healthy(&self) -> bool;
    async fn shutdown(&self);
}

#[derive(Clone)]
enum Backends {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// Cheap, clonable handle on the store.
#[derive(Clone)]
pub struct Store {
    backend: Backends,
    /// The server key: answer-link tokens and their digests are made here, above the backends.
    key: Arc<ServerKey>,
}

/// Calls one `Backend` method on whichever backend this store is.
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* $(,)? )) => {
        match &$self.backend {
            Backends::Sqlite(backend) => backend.$method($($arg),*).await,
            Backends::Postgres(backend) => backend.$method($($arg),*).await,
        }
    };
}

impl Store {
    /// Opens the database `settings` name (migrating it, starting its writer) and returns it with
    /// the bus its commits ring and the tasks it needs running. `frame` turns a committed journal
    /// event into the bytes streams send (the bus keeps them, shared).
    pub async fn open(settings: StoreSettings, frame: FrameFn) -> Result<Opened, OpenError> {
        let writer_metrics = match &settings {
            StoreSettings::Sqlite(settings) => Arc::clone(&settings.writer_metrics),
            StoreSettings::Postgres(settings) => Arc::clone(&settings.writer_metrics),
        };
        let (backend, bus, key, background) = match settings {
            StoreSettings::Sqlite(settings) => {
                let (store, bus, key) = sqlite::SqliteStore::open(settings, frame)?;
                (Backends::Sqlite(store), bus, key, Vec::new())
            }
            StoreSettings::Postgres(settings) => {
                let (store, bus, key, background) = postgres::PgStore::open(settings, frame).await?;
                (Backends::Postgres(store), bus, key, background)
            }
        };
        Ok(Opened { store: Self { backend, key: Arc::new(key) }, bus, background, writer_metrics })
    }

    /// The key answer-link tokens and login cookies are derived from.
    pub fn server_key(&self) -> &Arc<ServerKey> {
        &self.key
    }

    /// One webhook endpoint's state (its cursor), if it is registered.
    pub async fn webhook_endpoint(&self, url: String) -> Result<Option<Endpoint>, StoreError> {
        dispatch!(self.webhook_endpoint(url))
    }

    /// How many gates are open, in how many sessions, and since when the oldest.
    pub async fn gate_stats(&self) -> Result<GateStats, StoreError> {
        dispatch!(self.gate_stats())
    }

    /// Write jobs waiting for the writer.
    pub fn queue_depth(&self) -> usize {
        match &self.backend {
            Backends::Sqlite(backend) => backend.queue_depth(),
            Backends::Postgres(backend) => backend.queue_depth(),
        }
    }

    /// Whether storage works (for `/readyz`).
    pub fn is_healthy(&self) -> bool {
        match &self.backend {
            Backends::Sqlite(backend) => backend.is_healthy(),
            Backends::Postgres(backend) => backend.is_healthy(),
        }
    }

    /// Drains the writer and closes the database. Later operations fail with `Unavailable`.
    pub async fn shutdown(&self) {
        dispatch!(self.shutdown())
    }

    /// Opens a gate or finds the one this tool execution already opened; a session holds at most
    /// `max_open` open gates.
    pub async fn open_gate(
        &self,
        session: SessionId,
        ask: AskUser,
        max_open: usize,
    ) -> Result<OpenOutcome, StoreError> {
        let id = GateId::mint();
        let new = NewGate { id, link_digest: self.key.link_digest(&self.key.link_token(id)) };
        dispatch!(self.open_gate(session, ask, new, max_open))
    }

    /// Claims, journals and enqueues an answer that was already checked against its gate.
    pub async fn answer_gate(
        &self,
        target: Answering,
        answer: Answer,
        key: Option<Idempotency>,
        by: AnsweredBy,
    ) -> Result<AnswerOutcome, StoreError> {
        dispatch!(self.answer_gate(target, answer, key, by))
    }

    /// Withdraws an open gate.
    pub async fn close_gate(
        &self,
        session: SessionId,
        gate: GateId,
        reason: CloseReason,
    ) -> Result<CloseOutcome, StoreError> {
        dispatch!(self.close_gate(session, gate, reason))
    }

    /// Answers each still-open, due gate with its policy's default answer (the timer's claim).
    pub async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>, StoreError> {
        dispatch!(self.expire_gates(gates))
    }

    /// Open gates whose policy answers at a deadline, soonest first.
    pub async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>, StoreError> {
        dispatch!(self.deadlines())
    }

    /// Acknowledges a command; `false` when it is not in that loop's inbox.
    pub async fn ack_command(
        &self,
        session: SessionId,
        loop_id: LoopId,
        command: CommandId,
    ) -> Result<bool, StoreError> {
        dispatch!(self.ack_command(session, loop_id, command))
    }

    /// The gate an answer-link token belongs to.
    pub async fn gate_by_link(&self, token: String) -> Result<Option<GateRecord>, StoreError> {
        let digest = self.key.link_digest(&token);
        dispatch!(self.gate_by_link(digest))
    }

    /// One gate by id, in whatever session.
    pub async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>, StoreError> {
        dispatch!(self.gate(gate))
    }

    /// A page of gates with the journal head of the same snapshot.
    pub async fn list_gates(&self, query: ListQuery) -> Result<Listing, StoreError> {
        dispatch!(self.list_gates(query))
    }

    /// A page of one loop's inbox.
    pub async fn inbox(
        &self,
        session: SessionId,
        loop_id: LoopId,
        after: i64,
        page: PageLimit,
        include_acked: bool,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        dispatch!(self.inbox(session, loop_id, after, page, include_acked))
    }

    /// A page of the journal, optionally of one session.
    pub async fn journal(
        &self,
        session: Option<SessionId>,
        from: i64,
        page: PageLimit,
    ) -> Result<JournalPage, StoreError> {
        dispatch!(self.journal(session, from, page))
    }

    /// Journal events with `after < seq <= upto`, for a stream behind the frame ring or a webhook
    /// endpoint, and whether more remain up to `upto` after the last one returned.
    pub async fn journal_range(
        &self,
        session: Option<SessionId>,
        after: i64,
        upto: i64,
        page: PageLimit,
    ) -> Result<(Vec<(i64, String)>, bool), StoreError> {
        dispatch!(self.journal_range(session, after, upto, page))
    }

    /// The oldest retained and the newest committed journal seq.
    pub async fn journal_bounds(&self) -> Result<(i64, i64), StoreError> {
        dispatch!(self.journal_bounds())
    }

    /// Registers the configured webhook endpoints (new ones start at the journal head) and
    /// re-enables the listed ones.
    pub async fn webhook_register(
        &self,
        urls: Vec<String>,
        reenable: Vec<String>,
    ) -> Result<Vec<Endpoint>, StoreError> {
        dispatch!(self.webhook_register(urls, reenable))
    }

    /// Takes, or renews, the delivery lease of an endpoint for `ttl`: `None` while another
    /// replica holds it (or the endpoint is unknown). With the lease, the endpoint as it stands.
    pub async fn webhook_lease(
        &self,
        url: String,
        owner: String,
        ttl: std::time::Duration,
    ) -> Result<Option<(Lease, Endpoint)>, StoreError> {
        dispatch!(self.webhook_lease(url, owner, ttl))
    }

    /// Gives a lease up (at shutdown), so another replica need not wait for it to run out.
    pub async fn webhook_release(&self, url: String, lease: Lease) -> Result<(), StoreError> {
        dispatch!(self.webhook_release(url, lease))
    }

    pub async fn webhook_pending(&self, url: String, seq: i64) -> Result<Option<Pending>, StoreError> {
        dispatch!(self.webhook_pending(url, seq))
    }

    /// Delivered: the cursor moves past `seq`. `false` when the lease was lost (nothing changed).
    pub async fn webhook_delivered(&self, url: String, seq: i64, lease: Lease) -> Result<bool, StoreError> {
        dispatch!(self.webhook_delivered(url, seq, lease))
    }

    /// Failed, to be tried again at `next_at`. `false` when the lease was lost.
    pub async fn webhook_retry_at(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        next_at: Timestamp,
        error: String,
        lease: Lease,
    ) -> Result<bool, StoreError> {
        dispatch!(self.webhook_retry_at(url, seq, attempts, next_at, error, lease))
    }

    /// Out of attempts: a dead letter, and the cursor moves on. `false` when the lease was lost.
    pub async fn webhook_dead_letter(
        &self,
        url: String,
        seq: i64,
        attempts: u32,
        error: String,
        lease: Lease,
    ) -> Result<bool, StoreError> {
        dispatch!(self.webhook_dead_letter(url, seq, attempts, error, lease))
    }

    /// The endpoint answered 410: disabled until re-enabled. `false` when the lease was lost.
    pub async fn webhook_disable(&self, url: String, why: String, lease: Lease) -> Result<bool, StoreError> {
        dispatch!(self.webhook_disable(url, why, lease))
    }

    /// Webhook deliveries in one status (`pending` or `failed`), a page after a cursor.
    pub async fn webhook_deliveries(
        &self,
        status: &'static str,
        after: Option<(String, i64)>,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        dispatch!(self.webhook_deliveries(status, after, limit))
    }
}

/// Where the database is, as the command line names it (never logged: a URL may hold a password).
#[derive(Clone)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: String) -> Self {
        Self(url)
    }

    /// The URL itself, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
    }
}
