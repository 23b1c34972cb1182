//! The HTTP API: one module per resource with its handlers, and one route table (`routes`) that
//! names every route, who may call it and its handler. The table is the router's only source, so
//! the OpenAPI drift test can compare the two.

mod address_budget;
mod assets;
mod connection;
mod edge;
pub mod error;
mod events;
mod extract;
mod gates;
mod guard;
mod headers;
mod journal;
mod links;
mod login;
mod loops;
mod meta;
mod pages;
mod server;
mod sse;
mod webhooks;

pub use connection::ReadTimeouts;
pub use edge::Edge;
pub use pages::PageReads;
pub use server::{Caps, ConnectionLimits, ConnectionSettings, OpenFileLimitError, raise_open_file_limit, serve};
pub use sse::enduring_frame;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower::util::Either;
use tower_http::cors::{AllowOrigin, Cors, CorsLayer};

use crate::auth::{Access, Auth};
use crate::bus::Bus;
use crate::domain::OpenRules;
use crate::http::error::ApiError;
use crate::metrics::Metrics;
use crate::store::{PageLimit, Store};
use crate::supervise::Supervisor;
use guard::RouteTemplate;

/// The HTTP flags, checked (`config::HttpArgs::settings`).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub limits: Limits,
    /// `--max-streams`, if given (its default fits the open-file limit: `fit_connection_caps`).
    pub max_streams: Option<u32>,
    /// `--max-page-reads-per-token`.
    pub max_page_reads_per_token: u32,
    pub connections: ConnectionSettings,
    /// `--metrics-bind`.
    pub metrics_bind: Option<std::net::SocketAddr>,
}

/// Limits that handlers enforce.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted request body, in bytes.
    pub max_body: usize,
    /// Largest body of a request without a token or login cookie (`--max-unauthenticated-body`).
    pub max_unauthenticated_body: usize,
    /// A request body that brings no new byte for this long gets 408.
    pub body_idle_timeout: Duration,
    /// A request body not whole this long after its head gets 408.
    pub body_timeout: Duration,
    /// How often streams send `: ping`.
    pub heartbeat: Duration,
    /// The longest timeout a policy may ask for, and a permission gate's default one.
    pub open_rules: OpenRules,
    /// Open gates one session may hold.
    pub max_open_gates: usize,
    /// About how many bytes one page of rows may hold (`--max-page-bytes`).
    pub max_page_bytes: usize,
}

impl Limits {
    /// A page of at most `rows` rows and `--max-page-bytes` bytes.
    pub fn page(&self, rows: usize) -> PageLimit {
        PageLimit { rows, bytes: self.max_page_bytes }
    }
}

/// What every handler can reach, behind one `Arc`: axum clones the state for every request, and
/// this makes that one atomic increment (a `CancellationToken` alone takes a lock to clone).
#[derive(Clone)]
pub struct AppState(Arc<Handles>);

impl AppState {
    pub fn new(handles: Handles) -> Self {
        Self(Arc::new(handles))
    }
}

impl std::ops::Deref for AppState {
    type Target = Handles;

    fn deref(&self) -> &Handles {
        &self.0
    }
}

/// The server's shared handles.
pub struct Handles {
    pub store: Store,
    /// Rung after commits: streams follow its head, long-polls wait on its keyed interests.
    pub bus: Arc<Bus>,
    /// The background tasks (those that use the store, and the store's own): readiness needs
    /// them all running.
    pub tasks: [Arc<Supervisor>; 2],
    pub limits: Limits,
    /// One permit per open stream (`--max-streams`).
    pub streams: Arc<Semaphore>,
    /// Cancelled at shutdown; long-polls and streams end on it.
    pub shutdown: CancellationToken,
    /// Tokens, login cookies, per-token limits, the webhook secret of signed answers.
    pub auth: Arc<Auth>,
    /// Pages in flight per token (`--max-page-reads-per-token`).
    pub page_reads: Arc<PageReads>,
    pub metrics: Arc<Metrics>,
    /// How many deadlines the timer holds (for the metrics).
    pub armed: Arc<crate::timer::Armed>,
    /// The configured webhook endpoints (for the metrics).
    pub webhook_urls: Vec<String>,
}

/// One documented route, with who may call it.
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub access: Access,
    handler: MethodRouter<AppState>,
}

impl Route {
    fn get<H: Handler<T, AppState>, T: 'static>(access: Access, path: &'static str, handler: H) -> Self {
        Self { method: Method::GET, path, access, handler: axum::routing::get(handler) }
    }

    fn post<H: Handler<T, AppState>, T: 'static>(access: Access, path: &'static str, handler: H) -> Self {
        Self { method: Method::POST, path, access, handler: axum::routing::post(handler) }
    }
}

/// Every route of the API, who may call it, and the handler that serves it: the route × role
/// table in one place (the OpenAPI drift test compares it with `openapi.yaml`'s `x-roles`).
pub fn routes() -> Vec<Route> {
    vec![
        Route::post(Access::AGENT, "/v1/sessions/{session_id}/gates", gates::open_gate),
        Route::get(Access::SESSION_READ, "/v1/sessions/{session_id}/gates", gates::list_session_gates),
        Route::get(Access::RESPONDER, "/v1/gates", gates::list_gates),
        Route::get(Access::RESPONDER, "/v1/gates/{gate_id}", gates::get_gate_by_id),
        Route::get(Access::SESSION_READ, "/v1/sessions/{session_id}/gates/{gate_id}", gates::get_gate),
        Route::get(Access::SESSION_READ, "/v1/sessions/{session_id}/gates/{gate_id}/wait", gates::wait_gate),
        Route::get(Access::RESPONDER, "/v1/sessions/{session_id}/gates/{gate_id}/url", gates::gate_url),
        Route::post(Access::Answer, "/v1/sessions/{session_id}/gates/{gate_id}", gates::answer_gate),
        Route::post(Access::AGENT, "/v1/sessions/{session_id}/gates/{gate_id}/close", gates::close_gate),
        Route::get(Access::AGENT, "/v1/sessions/{session_id}/loops/{loop_id}/commands", loops::list_commands),
        Route::post(
            Access::AGENT,
            "/v1/sessions/{session_id}/loops/{loop_id}/commands/{command_id}/ack",
            loops::ack_command,
        ),
        Route::get(Access::SESSION_READ, "/v1/sessions/{session_id}/events", events::session_events),
        Route::get(Access::RESPONDER, "/v1/events", events::all_events),
        Route::get(Access::SESSION_READ, "/v1/sessions/{session_id}/journal", journal::session_journal),
        Route::get(Access::RESPONDER, "/v1/journal", journal::global_journal),
        Route::get(Access::Link, "/v1/answers/{token}", links::confirm_page),
        Route::post(Access::Link, "/v1/answers/{token}", links::answer_by_link),
        Route::post(Access::Open, "/v1/login", login::login),
        Route::post(Access::Open, "/v1/logout", login::logout),
        Route::get(Access::ADMIN, "/v1/webhooks/deliveries", webhooks::list_deliveries),
        Route::get(Access::Open, "/v1/capabilities", meta::capabilities),
        Route::get(Access::Open, "/healthz", meta::healthz),
        Route::get(Access::Open, "/readyz", meta::readyz),
        Route::get(Access::Open, "/openapi.yaml", meta::openapi),
        Route::get(Access::ADMIN, "/metrics", meta::metrics),
        Route::get(Access::Open, "/", assets::page),
        Route::get(Access::Open, "/static/{name}", assets::file),
    ]
}

/// The (method, path template, access) of every route the router serves.
pub fn route_table() -> Vec<(Method, &'static str, Access)> {
    routes().into_iter().map(|r| (r.method, r.path, r.access)).collect()
}

/// The whole application as every connection serves it: the edge around the router (and CORS,
/// when configured).
pub type App = Edge<Routed>;

/// The router, behind CORS when origins are configured.
pub type Routed = Either<Cors<Router>, Router>;

/// What a connection waits on for each response.
pub type AppFuture = <App as tower::Service<axum::extract::Request>>::Future;

/// The whole application, ready to serve.
pub fn router(state: AppState) -> App {
    let metrics = Arc::clone(&state.metrics);
    let cors = cors(state.auth.security.cors_origins());
    let mut router = Router::new();
    for route in routes() {
        let guarded = guard::GuardState {
            auth: Arc::clone(&state.auth),
            access: route.access,
            template: RouteTemplate(route.path),
        };
        // Routes sharing a path merge their methods.
        router =
            router.route(route.path, route.handler.layer(axum::middleware::from_fn_with_state(guarded, guard::guard)));
    }
    let router = router
        .fallback(|| async { ApiError::NotFound("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state);
    // Around the router, not inside it: `Router::layer` would wrap and box every route.
    Edge::new(ServiceBuilder::new().option_layer(cors).service(router), metrics)
}

/// The metrics alone, without a guard, for `--metrics-bind` (a listener of their own).
pub fn metrics_router(state: AppState) -> Router {
    Router::new().route("/metrics", axum::routing::get(meta::metrics)).with_state(state)
}

/// Cross-origin access for the listed origins only, with credentials; never a wildcard. With
/// no origins there is no layer at all (an empty one would still answer every OPTIONS request
/// as a preflight), so browsers keep the same-origin rule and OPTIONS is a 405 like any other
/// method a route does not serve.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<HeaderValue> = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
    if origins.is_empty() {
        return None;
    }
    let layer = CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_credentials(true)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::HeaderName::from_static("idempotency-key"),
            header::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::LOCATION, header::RETRY_AFTER, header::HeaderName::from_static("x-request-id")])
        .max_age(Duration::from_secs(600));
    Some(layer)
}

/// Path of routes under one session.
#[derive(serde::Deserialize)]
struct SessionPath {
    session_id: crate::domain::SessionId,
}

/// Checks a page size: 1..=1000, default 100.
fn limit(limit: Option<u32>) -> Result<usize, ApiError> {
    const MAX: u32 = 1000;
    match limit.unwrap_or(100) {
        n @ 1..=MAX => Ok(n as usize),
        _ => Err(ApiError::InvalidParameter(format!("limit must be 1..={MAX}"))),
    }
}

/// A journal or inbox seq from the query (`name` in messages): any u64 parses, but seqs are
/// SQLite integers.
fn seq(name: &str, value: u64) -> Result<i64, ApiError> {
    i64::try_from(value).map_err(|_| ApiError::InvalidParameter(format!("{name} is out of range")))
}

/// When a long-poll of `seconds` (0..=60, `name` in messages) started now must answer.
fn wait_deadline(name: &str, seconds: u64) -> Result<Instant, ApiError> {
    const MAX_SECONDS: u64 = 60;
    if seconds > MAX_SECONDS {
        return Err(ApiError::InvalidParameter(format!("{name} must be 0..={MAX_SECONDS} seconds")));
    }
    Ok(Instant::now() + Duration::from_secs(seconds))
}

/// Waits for `changed` until `deadline`, ending early at shutdown. `true` if `changed` fired.
async fn wait_until(state: &AppState, deadline: Instant, changed: impl Future<Output = ()>) -> bool {
    tokio::select! {
        () = changed => true,
        () = tokio::time::sleep_until(deadline) => false,
        () = state.shutdown.cancelled() => false,
    }
}

/// `Response` helper: JSON with a status.
fn json<T: serde::Serialize>(status: axum::http::StatusCode, body: &T) -> Response {
    (status, axum::Json(body)).into_response()
}
