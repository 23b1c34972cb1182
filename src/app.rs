//! Start-up in one place: `Server::start` checks the flags, opens the store, answers overdue gates,
//! starts webhooks and serves HTTP, in that order, with `?` throughout. Once the store is open,
//! whatever fails unwinds through one `Stopping`, the same shutdown order a running server takes.
//! The binary, the tests and embedders all start a server this way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Auth, Security};
use crate::bus::Bus;
use crate::config::serve::{FlagError, ServeArgs, ServeSettings};
use crate::http::{self, AppState, Caps, ConnectionLimits, Handles, HttpSettings, PageReads};
use crate::metrics::Metrics;
use crate::store::postgres::PgBeforeCommit;
use crate::store::sqlite::BeforeCommit;
use crate::store::{OpenError, Opened, Store, StoreError, StoreSettings};
use crate::supervise::Supervisor;
use crate::timer::{self, Armed};
use crate::webhook;
use crate::webhook::WebhookSettings;

/// Why a server did not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Flag(#[from] FlagError),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot listen on {0}: {1}; choose another address with --bind or GATEHOUSE_BIND")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot load the deadlines of open gates: {0}")]
    Deadlines(StoreError),
    #[error("webhooks: {0}")]
    Webhooks(#[from] webhook::WebhookError),
    #[error(transparent)]
    Security(#[from] auth::SecurityError),
    #[error(transparent)]
    OpenFiles(#[from] http::OpenFileLimitError),
    #[error("cannot listen on {0} for --metrics-bind: {1}; choose another address (GATEHOUSE_METRICS_BIND)")]
    MetricsBind(SocketAddr, std::io::Error),
}

/// How long shutdown waits for in-flight requests (a client still sending its body, say) and for
/// webhook requests in flight before closing their connections anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Hooks only tests set (never from the command line).
#[derive(Clone, Default)]
pub struct Hooks {
    /// Called on the SQLite writer thread just before every COMMIT (the commit barrier).
    pub before_commit: Option<BeforeCommit>,
    /// Awaited by the PostgreSQL writer just before every COMMIT.
    pub pg_before_commit: Option<PgBeforeCommit>,
}

impl Hooks {
    fn apply(self, store: &mut StoreSettings) {
        match store {
            StoreSettings::Sqlite(sqlite) => sqlite.before_commit = self.before_commit,
            StoreSettings::Postgres(postgres) => postgres.before_commit = self.pg_before_commit,
        }
    }
}

/// Where the server listens.
pub enum Listen {
    /// `--bind`, bound once the store is open: a second server on the same SQLite file is
    /// refused for that reason, not for the port it would also share.
    Bind,
    /// A listener bound already (a test's port 0).
    On(TcpListener),
}

/// A server that is running: what tests and embedders may look at, and how to wait for its end.
pub struct Server {
    /// The address it listens on.
    pub address: SocketAddr,
    /// Its bus, to see who is waiting.
    pub bus: Arc<Bus>,
    /// How many deadlines its timer holds.
    pub armed: Arc<Armed>,
    served: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Checks `args`, opens the store, answers overdue gates and starts serving until `shutdown`
    /// resolves; returns once it serves. Then it drains: streams and long-polls end, in-flight
    /// requests get a short grace, the background tasks stop, the writer commits what is queued,
    /// and the database is closed.
    pub async fn start(
        args: ServeArgs,
        hooks: Hooks,
        listen: Listen,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self, ServeError> {
        let ServeSettings { bind, mut store, http: http_settings, security, webhooks } = args.settings()?;
        // What the flags alone can refuse is refused before anything opens: an open-file limit
        // that cannot hold an explicit connection cap (defaults are fitted to it, with one
        // warning), then flags that would expose the server.
        let connections = &http_settings.connections;
        let caps = http::raise_open_file_limit(connections.max_connections, http_settings.max_streams)?;
        if let Some(warning) = caps.warning() {
            tracing::warn!("{warning}");
        }
        let security = Security::load(&security, bind)?;
        hooks.apply(&mut store);
        let plan = Plan { bind, database: store.describe(), http: http_settings, webhooks, caps, security };
        let bus = Arc::new(Bus::new(http::enduring_frame));
        let opened = Store::open(store, Arc::clone(&bus)).await?;
        let stopping = Stopping::new(opened.store.clone());
        let started = assemble(plan, opened, Arc::clone(&bus), listen, &stopping).await;
        let Serving { address, armed, http_server } = match started {
            Ok(serving) => serving,
            Err(e) => {
                stopping.stop().await;
                return Err(e);
            }
        };
        let token = stopping.token.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down");
            token.cancel();
        });
        let served = tokio::spawn(async move {
            // Whatever ended the server, the background tasks stop (a webhook request in flight
            // is answered first, within the grace), the writer drains and the database closes.
            let _ = http_server.await;
            stopping.stop().await;
        });
        Ok(Self { address, bus, armed, served })
    }

    /// Waits until the server has stopped (after `shutdown` resolved) and closed its database.
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.served.await {
            Ok(()) => Ok(()),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(ServeError::Io(std::io::Error::other(e))),
        }
    }
}

/// What the server is to be, once the flags are checked and the store is about to open.
struct Plan {
    bind: SocketAddr,
    /// The database in words, for the start-up line.
    database: String,
    http: HttpSettings,
    webhooks: WebhookSettings,
    caps: Caps,
    security: Security,
}

/// What `assemble` started.
struct Serving {
    address: SocketAddr,
    armed: Arc<Armed>,
    /// The HTTP server, until it has drained.
    http_server: tokio::task::JoinHandle<()>,
}

/// Everything after the store opened: the listener, the fail-secure check of the address really
/// served, the timer, webhooks, the metrics listener and the HTTP server.
async fn assemble(
    plan: Plan,
    opened: Opened,
    bus: Arc<Bus>,
    listen: Listen,
    stopping: &Stopping,
) -> Result<Serving, ServeError> {
    let Plan { bind, database, http: http_settings, webhooks, caps, security } = plan;
    let Opened { store, background, writer_metrics } = opened;
    for task in background {
        stopping.store_tasks.spawn(task.name, task.task);
    }
    let token = stopping.token.clone();
    let metrics = Metrics::new(writer_metrics);
    let listener = match listen {
        Listen::On(listener) => listener,
        Listen::Bind => TcpListener::bind(bind).await.map_err(|e| ServeError::Bind(bind, e))?,
    };
    // The listener actually served, not only the flag, must pass the fail-secure bind.
    let address = listener.local_addr()?;
    security.check_exposure(address)?;
    // Overdue gates are answered before the first request is served.
    let (armed, timer) =
        timer::start(&store, &bus, Arc::clone(&metrics), token.clone()).await.map_err(ServeError::Deadlines)?;
    stopping.tasks.spawn("timer", timer);
    let inbound_secret = webhook::inbound_secret(&webhooks)?;
    webhook::start(&webhooks, address, &store, &bus, &metrics, &stopping.tasks, token.clone()).await?;

    let connections = &http_settings.connections;
    let state = AppState::new(Handles {
        store: store.clone(),
        bus: Arc::clone(&bus),
        tasks: [Arc::clone(&stopping.tasks), Arc::clone(&stopping.store_tasks)],
        limits: http_settings.limits.clone(),
        page_reads: PageReads::new(http_settings.max_page_reads_per_token),
        streams: Arc::new(Semaphore::new(caps.streams as usize)),
        shutdown: token.clone(),
        auth: Arc::new(Auth::new(security, store.server_key().expose(), inbound_secret)),
        metrics: Arc::clone(&metrics),
        armed: Arc::clone(&armed),
        webhook_urls: webhooks.urls.clone(),
    });
    match state.auth.security.tokens() {
        None => tracing::info!("no --tokens-file: every route is open (loopback only)"),
        Some(tokens) => tracing::info!(tokens = tokens.len(), "tokens file loaded; routes need credentials"),
    }
    tracing::info!("gatehouse listening on http://{address} with {database}");
    if caps.streams > caps.connections {
        tracing::warn!(
            "--max-streams ({}) is above --max-connections ({}): every stream is a connection, so connections run \
             out first and streams past them are closed at once instead of getting 503",
            caps.streams,
            caps.connections
        );
    }
    let limits = ConnectionLimits {
        max_connections: caps.connections as usize,
        max_unauthenticated_per_address: connections.max_unauthenticated_per_address as usize,
        read_timeouts: connections.read_timeouts,
        stream_stall: connections.stream_stall,
        open_mode: state.auth.security.is_open(),
        trusted_proxies: state.auth.security.trusted_proxies().clone(),
        metrics: Arc::clone(&metrics),
    };
    if let Some(bind) = http_settings.metrics_bind {
        let listener = TcpListener::bind(bind).await.map_err(|e| ServeError::MetricsBind(bind, e))?;
        tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
        let metrics = http::metrics_router(state.clone());
        let stop = token.clone();
        stopping.tasks.spawn("metrics listener", async move {
            let served = axum::serve(listener, metrics).with_graceful_shutdown(stop.cancelled_owned()).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the metrics listener failed");
            }
        });
    }
    // One router for every connection: its handlers became services once, when it got its state
    // (axum's `Router` served per connection would clone the route table, tens of KiB, each time).
    let app = http::router(state);
    let http_server = tokio::spawn(http::serve(listener, app, limits, token, SHUTDOWN_GRACE));
    Ok(Serving { address, armed, http_server })
}

/// How a server stops, whatever ended it: cancel, let the tasks that use the store finish (a
/// webhook request in flight, the timer), then close the store, which stops its own tasks.
struct Stopping {
    token: CancellationToken,
    store: Store,
    /// The tasks that use the store.
    tasks: Arc<Supervisor>,
    /// The store's own tasks (writer, follower): they stop with the store, after the others.
    store_tasks: Arc<Supervisor>,
}

impl Stopping {
    fn new(store: Store) -> Self {
        let token = CancellationToken::new();
        let tasks = Arc::new(Supervisor::new(token.clone()));
        let store_tasks = Arc::new(Supervisor::new(token.clone()));
        Self { token, store, tasks, store_tasks }
    }

    async fn stop(&self) {
        self.token.cancel();
        if !self.tasks.wait(Some(SHUTDOWN_GRACE)).await {
            tracing::warn!(
                "webhook requests still unanswered {SHUTDOWN_GRACE:?} after shutdown began; cancelled (they are sent \
                 again at the next start)"
            );
        }
        self.store.shutdown().await;
        self.store_tasks.wait(None).await;
    }
}
