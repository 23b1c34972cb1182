//! Storage: the one seam between the server and its database. `Store` offers the same async
//! operations whatever the backend: the embedded default, one SQLite file (`sqlite`), or
//! PostgreSQL shared by several replicas (`postgres`). Handlers, the timer and webhooks see only
//! this module's API and its vocabulary (`model`), never a driver.
//!
//! Every operation is declared once, in the lists below (`operations!`): each list becomes a
//! private trait that both backends implement, so the compiler checks that they offer the same
//! operations with the same signatures, and the public method that calls whichever backend this
//! store is. The lists read the way the API does: gates, the journal, inboxes, the outbox of
//! deliveries (`store.outbox()`).
//!
//! Every backend keeps the same promises: a claim is one conditional update in one transaction
//! with its journal row and inbox command; the journal's seq is strictly increasing in commit
//! order, so a reader never skips a row committed later with a lower seq; nothing reaches the bus
//! (streams, waiters, the timer) before the commit that made it.

mod error;
mod key_file;
mod model;
mod page;
pub mod postgres;
mod queue;
mod settings;
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::value::RawValue;

pub use error::{OpenError, Result, StoreError};
pub use model::{
    AnswerOutcome, Answering, Attempt, Claim, CloseOutcome, Delivery, DeliveryStatus, Endpoint, Expiry, GateRecord,
    GateStats, Idempotency, InboxQuery, JournalRange, JournalRows, Lease, ListCursor, ListOrder, ListQuery, Listing,
    OpenOutcome, Pending, replay,
};
pub use page::PageLimit;
pub use settings::{DatabaseUrl, StoreSettings};

use crate::bus::Bus;
use crate::domain::{
    CloseReason, CommandId, GateId, InboxEntry, JournalEntry, JournalPage, LoopId, Question, ServerKey, SessionId,
    Timestamp,
};
use crate::metrics::WriterMetrics;

/// Declares a list of storage operations once. It emits the private trait every backend
/// implements and, unless the list is marked `by hand`, the façade's public methods, each a
/// match over the backends.
macro_rules! operations {
    ($(#[doc = $what:literal])* trait $trait:ident for $facade:ty { $($ops:tt)* }) => {
        operations!(@trait $(#[doc = $what])* $trait { $($ops)* });
        operations!(@facade $trait, $facade { $($ops)* });
    };
    ($(#[doc = $what:literal])* trait $trait:ident by hand { $($ops:tt)* }) => {
        operations!(@trait $(#[doc = $what])* $trait { $($ops)* });
    };
    (@trait $(#[doc = $what:literal])* $trait:ident {
        $( $(#[doc = $doc:literal])* async fn $op:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*
    }) => {
        $(#[doc = $what])*
        trait $trait {
            $( async fn $op(&self $(, $arg: $ty)*) -> $ret; )*
        }
    };
    (@facade $trait:ident, $facade:ty {
        $( $(#[doc = $doc:literal])* async fn $op:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*
    }) => {
        impl $facade {
            $(
                $(#[doc = $doc])*
                pub async fn $op(&self $(, $arg: $ty)*) -> $ret {
                    match self.backends() {
                        Backends::Sqlite(backend) => $trait::$op(backend $(, $arg)*).await,
                        Backends::Postgres(backend) => $trait::$op(backend $(, $arg)*).await,
                    }
                }
            )*
        }
    };
}

operations! {
    /// Gates: open, answer, close, expire, and read them.
    trait Gates for Store {
        /// Claims, journals and enqueues an answer that was already checked against its gate.
        async fn answer_gate(&self, claim: Claim) -> Result<AnswerOutcome>;
        /// Withdraws an open gate.
        async fn close_gate(&self, session: SessionId, gate: GateId, reason: CloseReason) -> Result<CloseOutcome>;
        /// Answers each still-open, due gate with its policy's default answer (the timer's claim).
        async fn expire_gates(&self, gates: Vec<GateId>) -> Result<Vec<Expiry>>;
        /// Open gates whose policy answers at a deadline, soonest first.
        async fn deadlines(&self) -> Result<Vec<(GateId, Timestamp)>>;
        /// One gate by id, in whatever session.
        async fn gate(&self, gate: GateId) -> Result<Option<GateRecord>>;
        /// A page of gates with the journal head of the same snapshot.
        async fn list_gates(&self, query: ListQuery) -> Result<Listing>;
        /// How many gates are open, in how many sessions, and since when the oldest.
        async fn gate_stats(&self) -> Result<GateStats>;
    }
}

operations! {
    /// The gate operations that take what only the façade makes (the gate id and the digest of
    /// its answer-link token): their public methods are written by hand, below.
    trait MintedGates by hand {
        async fn open_gate(
            &self, session: SessionId, question: Question, new: NewGate, max_open: usize
        ) -> Result<OpenOutcome>;
        async fn gate_by_link(&self, digest: [u8; 32]) -> Result<Option<GateRecord>>;
    }
}

operations! {
    /// The journal: every committed event, in seq order.
    trait Journal for Store {
        /// Journal events with `after < seq <= upto`, for a stream behind the frame ring or a
        /// webhook endpoint, and whether more remain up to `upto` after the last one returned.
        async fn journal_range(&self, range: JournalRange) -> Result<JournalRows>;
        /// The oldest retained and the newest committed journal seq.
        async fn journal_bounds(&self) -> Result<(i64, i64)>;
    }
}

operations! {
    /// The loops' inboxes of commands.
    trait Inbox for Store {
        /// A page of one loop's inbox.
        async fn inbox(&self, query: InboxQuery) -> Result<Vec<InboxEntry>>;
        /// Acknowledges a command; `false` when it is not in that loop's inbox.
        async fn ack_command(&self, session: SessionId, loop_id: LoopId, command: CommandId) -> Result<bool>;
    }
}

operations! {
    /// The outbox: each delivery target's cursor in the journal, its lease, and the state of the
    /// attempts at its events.
    trait Deliveries for Outbox<'_> {
        /// Registers the configured endpoints (new ones start at the journal head) and re-enables
        /// the listed ones.
        async fn register(&self, urls: Vec<String>, reenable: Vec<String>) -> Result<Vec<Endpoint>>;
        /// Takes, or renews, the delivery lease of an endpoint for `ttl`: `None` while another
        /// replica holds it (or the endpoint is unknown). With the lease, the endpoint as it stands.
        async fn lease(&self, url: String, owner: String, ttl: Duration) -> Result<Option<(Lease, Endpoint)>>;
        /// Gives a lease up (at shutdown), so another replica need not wait for it to run out.
        async fn release(&self, url: String, lease: Lease) -> Result<()>;
        /// The pending attempt at one event, if any.
        async fn pending(&self, url: String, seq: i64) -> Result<Option<Pending>>;
        /// What became of an attempt at event `seq`. `false` when the lease was lost (nothing
        /// changed).
        async fn record(&self, url: String, seq: i64, lease: Lease, attempt: Attempt) -> Result<bool>;
        /// The endpoint answered 410: disabled until re-enabled. `false` when the lease was lost.
        async fn disable(&self, url: String, why: String, lease: Lease) -> Result<bool>;
        /// Deliveries in one status, a page after a cursor (one more than `limit`, when more exist).
        async fn deliveries(
            &self, status: DeliveryStatus, after: Option<(String, i64)>, limit: usize
        ) -> Result<Vec<Delivery>>;
        /// One endpoint's state (its cursor), if it is registered.
        async fn endpoint(&self, url: String) -> Result<Option<Endpoint>>;
    }
}

operations! {
    /// Closing the store.
    trait Lifecycle for Store {
        /// Drains the writer and closes the database. Later operations fail with `Unavailable`.
        async fn shutdown(&self) -> ();
    }
}

/// What a backend tells synchronously, for `/readyz` and the metrics.
trait Status {
    /// Write jobs waiting for the writer.
    fn queue_depth(&self) -> usize;
    /// Whether storage works.
    fn is_healthy(&self) -> bool;
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

/// The store's deliveries (`Store::outbox`).
pub struct Outbox<'a>(&'a Store);

impl Outbox<'_> {
    fn backends(&self) -> &Backends {
        &self.0.backend
    }
}

/// A gate about to be opened: its id, the digest of its answer-link token and its sealed secret,
/// made outside the backend, so no backend needs the server key.
#[derive(Debug, Clone)]
struct NewGate {
    id: GateId,
    link_digest: [u8; 32],
    secret: Option<Vec<u8>>,
}

impl Store {
    /// Opens the database `settings` name (migrating it, starting its writer) and returns it with
    /// the tasks it needs running. Its commits ring `bus`, whose head it sets to the journal's.
    pub async fn open(settings: StoreSettings, bus: Arc<Bus>) -> Result<Opened, OpenError> {
        let writer_metrics = Arc::clone(settings.writer_metrics());
        let (backend, key, background) = match settings {
            StoreSettings::Sqlite(settings) => {
                let (store, key) = sqlite::SqliteStore::open(settings, bus)?;
                (Backends::Sqlite(store), key, Vec::new())
            }
            StoreSettings::Postgres(settings) => {
                let (store, key, background) = postgres::PgStore::open(settings, bus).await?;
                (Backends::Postgres(store), key, background)
            }
        };
        Ok(Opened { store: Self { backend, key: Arc::new(key) }, background, writer_metrics })
    }

    fn backends(&self) -> &Backends {
        &self.backend
    }

    fn status(&self) -> &dyn Status {
        match &self.backend {
            Backends::Sqlite(backend) => backend,
            Backends::Postgres(backend) => backend,
        }
    }

    /// The key answer-link tokens and login cookies are derived from.
    pub fn server_key(&self) -> &Arc<ServerKey> {
        &self.key
    }

    /// The deliveries: endpoints, their cursors and leases, and the attempts at their events.
    pub fn outbox(&self) -> Outbox<'_> {
        Outbox(self)
    }

    /// Write jobs waiting for the writer.
    pub fn queue_depth(&self) -> usize {
        self.status().queue_depth()
    }

    /// Whether storage works (for `/readyz`).
    pub fn is_healthy(&self) -> bool {
        self.status().is_healthy()
    }

    /// Opens a gate or finds the one this tool execution already opened; a session holds at most
    /// `max_open` open gates.
    pub async fn open_gate(&self, session: SessionId, question: Question, max_open: usize) -> Result<OpenOutcome> {
        let id = GateId::mint();
        let link_digest = self.key.link_digest(&self.key.link_token(id));
        let new = NewGate { id, link_digest, secret: question.secret().map(|secret| self.key.seal(id, secret)) };
        match &self.backend {
            Backends::Sqlite(backend) => backend.open_gate(session, question, new, max_open).await,
            Backends::Postgres(backend) => backend.open_gate(session, question, new, max_open).await,
        }
    }

    /// An open gate's secret (an open-URL gate's URL), unsealed; `None` when it has none (any
    /// gate no longer open).
    pub fn secret(&self, record: &GateRecord) -> Result<Option<String>> {
        let Some(sealed) = &record.secret else { return Ok(None) };
        let id = record.view.gate_id;
        let secret = self.key.unseal(id, sealed);
        secret.map(Some).ok_or_else(|| StoreError::Internal(format!("gate {id}'s secret does not open with this key")))
    }

    /// A page of the journal from seq `from` on, optionally of one session.
    pub async fn journal(&self, session: Option<SessionId>, from: i64, page: PageLimit) -> Result<JournalPage> {
        let (rows, more) = self.journal_range(JournalRange { session, after: from - 1, upto: i64::MAX, page }).await?;
        let events = rows
            .into_iter()
            .map(|(journal_seq, event)| {
                let event =
                    RawValue::from_string(event).map_err(|e| StoreError::Internal(format!("stored event: {e}")))?;
                Ok(JournalEntry { journal_seq, event })
            })
            .collect::<Result<Vec<_>>>()?;
        let next_journal_seq = events.last().map_or(from, |e| e.journal_seq + 1);
        Ok(JournalPage { events, next_journal_seq, done: !more })
    }

    /// The gate an answer-link token belongs to.
    pub async fn gate_by_link(&self, token: String) -> Result<Option<GateRecord>> {
        let digest = self.key.link_digest(&token);
        match &self.backend {
            Backends::Sqlite(backend) => backend.gate_by_link(digest).await,
            Backends::Postgres(backend) => backend.gate_by_link(digest).await,
        }
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

/// An open store and the tasks it needs running.
pub struct Opened {
    pub store: Store,
    pub background: Vec<Background>,
    /// What the store's writer records (batches, commit times, storage errors).
    pub writer_metrics: Arc<WriterMetrics>,
}
