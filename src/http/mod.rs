//! The HTTP API: one module per resource, each listing its routes; `router` merges them. The
//! route table is the router's only source, so the OpenAPI drift test can compare the two.

mod assets;
mod connection;
mod events;
mod extract;
mod gates;
mod guard;
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
pub use pages::PageReads;
pub use server::{ConnectionLimits, OpenFileLimitError, raise_open_file_limit, serve};
pub use sse::enduring_frame;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::sensitive_headers::{SetSensitiveRequestHeadersLayer, SetSensitiveResponseHeadersLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{Access, Auth, Caller};
use crate::bus::Bus;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::store::{PageLimit, Store};
use crate::supervise::Supervisor;
use connection::Authenticate;

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
    /// The longest timeout a policy may ask for, in nanoseconds.
    pub max_timeout_nanos: i64,
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

/// Every route of the API.
pub fn routes() -> Vec<Route> {
    [
        gates::routes(),
        loops::routes(),
        events::routes(),
        journal::routes(),
        links::routes(),
        login::routes(),
        webhooks::routes(),
        meta::routes(),
        assets::routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The (method, path template, access) of every route the router serves.
pub fn route_table() -> Vec<(Method, &'static str, Access)> {
    routes().into_iter().map(|r| (r.method, r.path, r.access)).collect()
}

/// The whole application, ready to serve.
pub fn router(state: AppState) -> Router {
    let metrics = Arc::clone(&state.metrics);
    let cors = cors(state.auth.security.cors_origins());
    let credentials = !state.auth.security.is_open();
    let mut router = Router::new();
    for route in routes() {
        let guarded = guard::GuardState { auth: Arc::clone(&state.auth), access: route.access };
        let mut handler = route.handler;
        if credentials {
            // Behind the guard: a request it let through with a token or login cookie
            // authenticates its connection (see `connection`).
            handler = handler.layer(axum::middleware::map_request(authenticates_connection));
        }
        let template = RouteTemplate(route.path);
        let handler = handler
            .layer(axum::middleware::from_fn_with_state(guarded, guard::guard))
            // Outside the guard, so its refusals carry it too: on the response, for `observe`,
            // which wraps the route and so never sees its request's extensions.
            .layer(axum::middleware::map_response(move |mut response: Response| async move {
                response.extensions_mut().insert(template);
                response
            }));
        // Routes sharing a path merge their methods.
        router = router.route(route.path, handler);
    }
    router
        .fallback(|| async { ApiError::NotFound("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
        .layer(tower::util::option_layer(cors))
        // Outermost last: panics become JSON 500s inside the request's span.
        .layer(CatchPanicLayer::custom(|_| ApiError::internal("handler panicked").into_response()))
        .layer(axum::middleware::from_fn_with_state(metrics, observe))
        .layer(
            // Spans record the matched route, never the raw URI (later it may carry a token), and
            // the request id that the client also gets back, so a 500 can be found in the log.
            // The span only: `observe` writes the one line per request (errors included).
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str());
                    let id = req.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok());
                    tracing::info_span!("request", method = %req.method(), route, request_id = id.unwrap_or("-"))
                })
                .on_request(())
                .on_response(())
                .on_failure(())
                .on_eos(()),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        // Every answer, errors included, is what its Content-Type says and nothing else.
        .layer(SetResponseHeaderLayer::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        // API answers are one caller's view at one moment (and may name its gates or tokens): no
        // cache, shared or private, may keep them. Pages, files and streams set their own.
        .layer(SetResponseHeaderLayer::if_not_present(header::CACHE_CONTROL, |response: &Response| {
            let json = response.headers().get(header::CONTENT_TYPE).is_some_and(|ct| extract::is_json(ct.as_bytes()));
            json.then_some(HeaderValue::from_static("no-store"))
        }))
        // Outermost: whatever logs a request or response later shows these as redacted.
        .layer(SetSensitiveResponseHeadersLayer::new([header::SET_COOKIE]))
        .layer(SetSensitiveRequestHeadersLayer::new([header::AUTHORIZATION, header::COOKIE]))
}

/// The metrics alone, without a guard, for `--metrics-bind` (a listener of their own).
pub fn metrics_router(state: AppState) -> Router {
    Router::new().route("/metrics", axum::routing::get(meta::metrics)).with_state(state)
}

/// The request log and the request metrics, for every request: one line each (request id,
/// route template, status, latency, principal; at INFO, WARN for a 503 and ERROR for other 5xx,
/// with their cause), and the counters and latency histogram by route template. This is the one
/// place errors are logged: a response carries its `Failure`, the guard its `Principal`.
async fn observe(State(metrics): State<Arc<Metrics>>, req: Request, next: axum::middleware::Next) -> Response {
    let started = Instant::now();
    let method = match *req.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    // A shared handle on the id's bytes, not a copy: the request is gone once it is handled.
    let request_id = req.extensions().get::<RequestId>().cloned();
    let response = next.run(req).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let route = response.extensions().get::<RouteTemplate>().map_or("unmatched", |t| t.0);
    metrics.request(method, route, status, took);
    let failure = response.extensions().get::<crate::error::Failure>();
    let principal = response.extensions().get::<guard::Principal>().map(|p| p.0.as_str());
    let code = failure.map(|f| f.code);
    if method == "POST"
        && ANSWER_ROUTES.contains(&route)
        && let Some(code) = code
    {
        metrics.answer_refused(code);
    }
    let cause = failure.and_then(|f| f.cause.as_deref());
    let request_id = request_id.as_ref().and_then(|id| id.header_value().to_str().ok()).unwrap_or("-");
    let latency_ms = took.as_secs_f64() * 1000.0;
    macro_rules! log {
        ($level:ident) => {
            tracing::$level!(request_id, method, route, status, latency_ms, principal, code, cause, "request")
        };
    }
    match status {
        503 => log!(warn),
        500.. => log!(error),
        _ => log!(info),
    }
    response
}

/// The path template of the route that answered, on its response.
#[derive(Debug, Clone, Copy)]
struct RouteTemplate(&'static str);

/// The routes that answer a gate, whose refusals the metrics count by code.
const ANSWER_ROUTES: [&str; 2] = ["/v1/sessions/{session_id}/gates/{gate_id}", "/v1/answers/{token}"];

/// Marks the request's connection authenticated when the guard let it through with a token or
/// its login cookie.
async fn authenticates_connection(req: Request) -> Request {
    if let (Some(Caller::Token(_)), Some(connection)) =
        (req.extensions().get::<Caller>(), req.extensions().get::<Authenticate>())
    {
        connection.authenticated();
    }
    req
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
