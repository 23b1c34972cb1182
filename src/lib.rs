//! gatehouse: a durable gate server. An agent loop opens a gate (a question); a person answers
//! it exactly once; the answer is routed to the owning loop's inbox.
//!
//! The layering is the architecture: `http` → `store` + `bus` → `domain`. `domain` is pure,
//! `store` owns SQLite (one writer thread, read-only readers), `bus` rings after commits.

pub mod auth;
pub mod backoff;
pub mod bench;
pub mod bus;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod http;
pub mod store;
pub mod timer;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use auth::{Auth, Security};
pub use config::ServeArgs;
pub use http::router;
use http::{AppState, ConnectionLimits, Handles, Limits, ReadTimeouts};
use store::{OpenError, Store, StoreConfig};

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
}

/// How long shutdown waits for in-flight requests (a client still sending its body, say) and for
/// webhook requests in flight before closing their connections anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Opens the store for `args`: takes the database lock, migrates, starts the writer. Call it
/// before binding, so a second server on the same database is refused for the right reason.
pub fn open_store(args: &ServeArgs) -> Result<Store, OpenError> {
    Store::open(StoreConfig {
        path: args.db.clone(),
        durability: args.sync.into(),
        before_commit: args.hooks.before_commit.clone(),
        #[cfg(feature = "fault-injection")]
        fault_file: args.fault_file.clone(),
    })
}

/// Raises the open-file limit to the hard limit; refuses a limit that cannot hold
/// `--max-connections` (plus the descriptors the server needs besides).
pub fn raise_open_file_limit(args: &ServeArgs) -> Result<u64, ServeError> {
    Ok(http::raise_open_file_limit(args.max_connections)?)
}

/// Reads the security flags, opens the store and runs the server on `listener` until
/// `shutdown` resolves (see `run`).
pub async fn serve(
    args: ServeArgs,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let security = Security::load(&args)?;
    let store = open_store(&args)?;
    run(args, security, store, listener, shutdown).await
}

/// Runs the server until `shutdown` resolves, then drains: streams and long-polls end,
/// in-flight requests get a short grace, the writer commits what is queued, and the database is
/// checkpointed and closed.
pub async fn run(
    args: ServeArgs,
    security: Security,
    store: Store,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    // The listener actually served, not only the flag, must pass the fail-secure bind.
    let address = listener.local_addr()?;
    if let Err(e) = raise_open_file_limit(&args) {
        store.shutdown().await;
        return Err(e);
    }
    if let Err(e) = auth::check_exposure(address, !security.is_open(), &args) {
        store.shutdown().await;
        return Err(e.into());
    }
    if let Some(slot) = &args.hooks.bus {
        let _ = slot.set(Arc::clone(store.bus()));
    }
    let token = CancellationToken::new();
    // Overdue gates are answered before the first request is served.
    let armed = match timer::start(&store, token.clone()).await {
        Ok(armed) => armed,
        Err(e) => {
            store.shutdown().await;
            return Err(ServeError::Deadlines(e));
        }
    };
    if let Some(slot) = &args.hooks.armed {
        let _ = slot.set(armed);
    }
    let mut deliveries = JoinSet::new();
    let webhook_secret = match webhook::start(&args, address, &store, token.clone(), &mut deliveries).await {
        Ok(secret) => secret,
        Err(e) => {
            token.cancel();
            store.shutdown().await;
            return Err(ServeError::Webhooks(e));
        }
    };
    let state = AppState::new(Handles {
        store: store.clone(),
        limits: Limits {
            max_body: args.max_body,
            max_unauthenticated_body: args.max_unauthenticated_body,
            body_idle_timeout: args.body_idle_timeout,
            body_timeout: args.body_timeout,
            heartbeat: args.heartbeat,
            max_timeout_nanos: i64::try_from(args.max_timeout.as_nanos()).unwrap_or(i64::MAX),
            max_open_gates: args.max_open_gates as usize,
        },
        streams: Arc::new(Semaphore::new(args.max_streams as usize)),
        shutdown: token.clone(),
        auth: Arc::new(Auth::new(security, store.link_key(), webhook_secret)),
    });
    match state.auth.security.tokens() {
        None => tracing::info!("no --tokens-file: every route is open (loopback only)"),
        Some(tokens) => tracing::info!(tokens = tokens.len(), "tokens file loaded; routes need credentials"),
    }
    tracing::info!("gatehouse listening on http://{address} with database {}", args.db.display());

    let signal = token.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        signal.cancel();
    });
    if args.max_streams > args.max_connections {
        tracing::warn!(
            "--max-streams ({}) is above --max-connections ({}): every stream is a connection, so connections run \
             out first and streams past them are closed at once instead of getting 503",
            args.max_streams,
            args.max_connections
        );
    }
    let limits = ConnectionLimits {
        max_connections: args.max_connections as usize,
        max_unauthenticated_per_address: args.max_unauthenticated_per_address as usize,
        read_timeouts: ReadTimeouts { header: args.header_timeout, keep_alive: args.keep_alive_timeout },
        stream_stall: args.stream_stall,
        open_mode: state.auth.security.is_open(),
    };
    // One router for every connection: its handlers became services once, when it got its state
    // (axum's `Router` served per connection would clone the route table, tens of KiB, each time).
    let app = router(state);
    let http = async {
        http::serve(listener, app, limits, token.clone(), SHUTDOWN_GRACE).await;
        token.cancel();
    };
    tokio::join!(http, finish_deliveries(deliveries, &token));
    // The writer drains what is queued (deliveries just recorded included); the database closes.
    store.shutdown().await;
    Ok(())
}

/// From shutdown on, waits up to `SHUTDOWN_GRACE` for the webhook requests in flight to be
/// answered and recorded (each delivery task ends after the request it is in), so a restart does
/// not send them again; a delivery still unanswered then is cancelled and sent again at the next
/// start.
async fn finish_deliveries(mut deliveries: JoinSet<()>, shutdown: &CancellationToken) {
    shutdown.cancelled().await;
    let finished = tokio::time::timeout(SHUTDOWN_GRACE, async { while deliveries.join_next().await.is_some() {} });
    if finished.await.is_err() {
        tracing::warn!(
            "webhook requests still unanswered {SHUTDOWN_GRACE:?} after shutdown began; cancelled (they are sent \
             again at the next start)"
        );
        deliveries.abort_all();
    }
}
