//! gatehouse: a durable gate server. An agent loop opens a gate (a question); a person answers
//! it exactly once; the answer is routed to the owning loop's inbox.
//!
//! The layering is the architecture: `http` → `store` + `bus` → `domain`. `domain` is pure,
//! `store` owns the database (SQLite, or PostgreSQL for several replicas) behind one API, `bus`
//! rings after commits; `supervise` watches the background tasks.

pub mod auth;
pub mod backoff;
pub mod bench;
pub mod bus;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod http;
pub mod log_writer;
pub mod metrics;
pub mod store;
pub mod supervise;
pub mod timer;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use auth::{Auth, Security};
use bus::Bus;
pub use config::ServeArgs;
pub use http::router;
use http::{AppState, ConnectionLimits, Handles, Limits, PageReads, ReadTimeouts};
use metrics::Metrics;
use store::{BeforeCommit, DatabaseUrl, OpenError, Opened, PgBeforeCommit, PgSettings, SqliteSettings, StoreSettings};
use supervise::Supervisor;
use timer::Armed;

/// Why `serve` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot load the deadlines of open gates: {0}")]
    Deadlines(store::StoreError),
    #[error("webhooks: {0}")]
    Webhooks(webhook::WebhookError),
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

/// Where `args` say the database is: the SQLite file, or PostgreSQL (`--database-url`, or the URL
/// in `--database-url-file`).
pub fn store_settings(args: &ServeArgs, hooks: &Hooks) -> Result<StoreSettings, OpenError> {
    let url = match (&args.database_url, &args.database_url_file) {
        (Some(url), _) => Some(url.trim().to_owned()),
        (None, Some(file)) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| OpenError::Database(format!("cannot read --database-url-file {}: {e}", file.display())))?
                .trim()
                .to_owned(),
        ),
        (None, None) => None,
    };
    Ok(match url {
        Some(url) => StoreSettings::Postgres(PgSettings {
            before_commit: hooks.pg_before_commit.clone(),
            ..PgSettings::new(DatabaseUrl::new(url), args.secret_file.clone())
        }),
        None => StoreSettings::Sqlite(SqliteSettings {
            path: args.db.clone(),
            durability: args.sync.into(),
            key_file: args.secret_file.clone(),
            before_commit: hooks.before_commit.clone(),
            writer_metrics: Arc::default(),
            #[cfg(feature = "fault-injection")]
            fault_file: args.fault_file.clone(),
        }),
    })
}

/// Opens the store for `args`: on SQLite it takes the database lock, migrates and starts the
/// writer; on PostgreSQL it connects and migrates. Call it before binding, so a second server on
/// the same SQLite file is refused for the right reason.
pub async fn open_store(args: &ServeArgs, hooks: &Hooks) -> Result<Opened, OpenError> {
    store::Store::open(store_settings(args, hooks)?, http::enduring_frame).await
}

/// Raises the open-file limit to the hard limit and fits `--max-connections` and `--max-streams`
/// to it (`http::fit_connection_caps`): defaults it cannot hold are lowered, with one warning; a
/// `--max-connections` it cannot hold (plus the descriptors the server needs besides) is refused.
/// The caps in force are written back into `args`, so that a second call lowers nothing and
/// warns no more.
pub fn raise_open_file_limit(args: &mut ServeArgs) -> Result<http::Caps, ServeError> {
    let caps = http::raise_open_file_limit(args.max_connections, args.max_streams)?;
    if let Some(warning) = caps.warning() {
        tracing::warn!("{warning}");
    }
    args.max_connections = Some(caps.connections);
    args.max_streams = Some(caps.streams);
    Ok(caps)
}

/// A server that is running: what tests and embedders may look at, and how to wait for its end.
pub struct Running {
    /// The address it listens on.
    pub address: SocketAddr,
    /// Its bus, to see who is waiting.
    pub bus: Arc<Bus>,
    /// How many deadlines its timer holds.
    pub armed: Arc<Armed>,
    served: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Waits until the server has stopped (after `shutdown` resolved) and closed its database.
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.served.await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(ServeError::Io(std::io::Error::other(e))),
        }
    }
}

/// Reads the security flags, opens the store and runs the server on `listener` until `shutdown`
/// resolves (see `start`).
pub async fn serve(
    args: ServeArgs,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    start(args, Hooks::default(), listener, shutdown).await?.wait().await
}

/// Reads the security flags, opens the store, answers overdue gates, and starts serving
/// `listener` until `shutdown` resolves; returns once it serves.
pub async fn start(
    args: ServeArgs,
    hooks: Hooks,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServeError> {
    let security = Security::load(&args)?;
    let opened = open_store(&args, &hooks).await?;
    run(args, security, opened, listener, shutdown).await
}

/// Starts serving `listener` with an open store until `shutdown` resolves, then drains: streams
/// and long-polls end, in-flight requests get a short grace, the background tasks stop, the writer
/// commits what is queued, and the database is closed. Returns once the server serves.
pub async fn run(
    mut args: ServeArgs,
    security: Security,
    opened: Opened,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServeError> {
    let Opened { store, bus, background, writer_metrics } = opened;
    let metrics = Metrics::new(writer_metrics);
    let token = CancellationToken::new();
    // The store's own tasks (writer, follower) stop with the store, after the others.
    let store_tasks = Arc::new(Supervisor::new(token.clone()));
    for task in background {
        store_tasks.spawn(task.name, task.task);
    }
    let tasks = Arc::new(Supervisor::new(token.clone()));
    let stopping =
        Stopping { token: token.clone(), store: store.clone(), tasks: [Arc::clone(&tasks), Arc::clone(&store_tasks)] };
    // The listener actually served, not only the flag, must pass the fail-secure bind.
    let address = listener.local_addr()?;
    let caps = match raise_open_file_limit(&mut args) {
        Ok(caps) => caps,
        Err(e) => {
            stopping.stop().await;
            return Err(e);
        }
    };
    if let Err(e) = auth::check_exposure(address, !security.is_open(), &args) {
        stopping.stop().await;
        return Err(e.into());
    }
    // Overdue gates are answered before the first request is served.
    let armed = match timer::start(&store, &bus, Arc::clone(&metrics), token.clone()).await {
        Ok((armed, timer)) => {
            tasks.spawn("timer", timer);
            armed
        }
        Err(e) => {
            stopping.stop().await;
            return Err(ServeError::Deadlines(e));
        }
    };
    let started = match webhook::inbound_secret(&args) {
        Ok(inbound) => {
            webhook::start(&args, address, &store, &bus, &metrics, &tasks, token.clone()).await.map(|()| inbound)
        }
        Err(e) => Err(e),
    };
    let inbound_secret = match started {
        Ok(secret) => secret,
        Err(e) => {
            stopping.stop().await;
            return Err(ServeError::Webhooks(e));
        }
    };
    let state = AppState::new(Handles {
        store: store.clone(),
        bus: Arc::clone(&bus),
        tasks: [tasks, store_tasks],
        limits: Limits {
            max_body: args.max_body,
            max_unauthenticated_body: args.max_unauthenticated_body,
            body_idle_timeout: args.body_idle_timeout,
            body_timeout: args.body_timeout,
            heartbeat: args.heartbeat,
            max_timeout_nanos: i64::try_from(args.max_timeout.as_nanos()).unwrap_or(i64::MAX),
            max_open_gates: args.max_open_gates as usize,
            max_page_bytes: args.max_page_bytes,
        },
        page_reads: PageReads::new(args.max_page_reads_per_token),
        streams: Arc::new(Semaphore::new(caps.streams as usize)),
        shutdown: token.clone(),
        auth: Arc::new(Auth::new(security, store.server_key().expose(), inbound_secret)),
        metrics: Arc::clone(&metrics),
        armed: Arc::clone(&armed),
        webhook_urls: args.webhook_urls.clone(),
    });
    match state.auth.security.tokens() {
        None => tracing::info!("no --tokens-file: every route is open (loopback only)"),
        Some(tokens) => tracing::info!(tokens = tokens.len(), "tokens file loaded; routes need credentials"),
    }
    let database = match (&args.database_url, &args.database_url_file) {
        (None, None) => format!("database {}", args.db.display()),
        _ => "PostgreSQL".to_owned(),
    };
    tracing::info!("gatehouse listening on http://{address} with {database}");

    let signal = token.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        signal.cancel();
    });
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
        max_unauthenticated_per_address: args.max_unauthenticated_per_address as usize,
        read_timeouts: ReadTimeouts { header: args.header_timeout, keep_alive: args.keep_alive_timeout },
        stream_stall: args.stream_stall,
        open_mode: state.auth.security.is_open(),
        trusted_proxies: state.auth.security.trusted_proxies().clone(),
        metrics: Arc::clone(&metrics),
    };
    if let Some(bind) = args.metrics_bind {
        let listener = match TcpListener::bind(bind).await {
            Ok(listener) => listener,
            Err(e) => {
                stopping.stop().await;
                return Err(ServeError::MetricsBind(bind, e));
            }
        };
        tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
        let metrics = http::metrics_router(state.clone());
        let stop = token.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, metrics).with_graceful_shutdown(stop.cancelled_owned()).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the metrics listener failed");
            }
        });
    }
    // One router for every connection: its handlers became services once, when it got its state
    // (axum's `Router` served per connection would clone the route table, tens of KiB, each time).
    let app = router(state);
    let served = tokio::spawn(async move {
        http::serve(listener, app, limits, token.clone(), SHUTDOWN_GRACE).await;
        // Whatever ended the server, the background tasks stop (a webhook request in flight is
        // answered first, within the grace), the writer drains and the database closes cleanly.
        stopping.stop().await;
        Ok(())
    });
    Ok(Running { address, bus, armed, served })
}

/// How a server stops, whatever ended it: cancel, let the tasks that use the store finish (a
/// webhook request in flight, the timer), then close the store, which stops its own tasks.
struct Stopping {
    token: CancellationToken,
    store: store::Store,
    /// The tasks that use the store, then the store's own.
    tasks: [Arc<Supervisor>; 2],
}

impl Stopping {
    async fn stop(&self) {
        self.token.cancel();
        if !self.tasks[0].wait(Some(SHUTDOWN_GRACE)).await {
            tracing::warn!(
                "webhook requests still unanswered {SHUTDOWN_GRACE:?} after shutdown began; cancelled (they are sent \
                 again at the next start)"
            );
        }
        self.store.shutdown().await;
        self.tasks[1].wait(None).await;
    }
}
