//! The edge: what every request goes through once, around the whole router. It gives the request
//! its id, marks credentials sensitive, turns a panic into a JSON 500, sets the headers every
//! response carries, and writes the request's metrics and its one log line (request id, route
//! template, status, latency, principal; INFO, WARN for a 503 and ERROR for other 5xx, with their
//! cause). This is the one place errors are logged: a response carries its `Failure`, the guard
//! its `Principal` and its route template.
//!
//! One hand-written service instead of a tower layer per concern: axum's `Router::layer` wraps
//! every route in each layer and boxes the stack, which then is cloned for every request, and each
//! `from_fn` boxes its future and its `Next` again. Here the request pays one small clone, and one
//! allocation for a fresh id.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use futures_util::future::CatchUnwind;
use pin_project_lite::pin_project;
use tower::Service;

use super::guard::{Principal, RouteTemplate};
use super::headers;
use crate::http::error::{ApiError, Failure};
use crate::metrics::Metrics;

/// The header a request's id travels in, both ways.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The routes that answer a gate, whose refusals the metrics count by code.
const ANSWER_ROUTES: [&str; 2] = ["/v1/sessions/{session_id}/gates/{gate_id}", "/v1/answers/{token}"];

/// The edge around `inner` (the router, with CORS when configured).
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Edge<S> {
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

impl<S> Service<Request> for Edge<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let started = Instant::now();
        let method = match *req.method() {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => "other",
        };
        // A caller's own id is kept (it ties our line to theirs); otherwise a fresh one.
        let request_id = req.headers().get(REQUEST_ID).cloned().unwrap_or_else(new_request_id);
        // Whatever later prints a request's headers shows these as redacted.
        mark_sensitive(req.headers_mut(), &[header::AUTHORIZATION, header::COOKIE]);
        let handling = std::panic::catch_unwind(AssertUnwindSafe(|| AssertUnwindSafe(self.inner.call(req))));
        EdgeFuture {
            handling: handling.ok().map(FutureExt::catch_unwind),
            line: Some(Line { started, method, request_id, metrics: Arc::clone(&self.metrics) }),
        }
    }
}

pin_project! {
    /// The inner response future (`None` when calling the inner service panicked), and what the
    /// log line needs once it is ready.
    pub struct EdgeFuture<F> {
        #[pin]
        handling: Option<CatchUnwind<AssertUnwindSafe<F>>>,
        line: Option<Line>,
    }
}

/// What the edge knows of a request before it is handled.
struct Line {
    started: Instant,
    method: &'static str,
    request_id: HeaderValue,
    metrics: Arc<Metrics>,
}

impl<F: Future<Output = Result<Response, Infallible>>> Future for EdgeFuture<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = match this.handling.as_pin_mut() {
            Some(handling) => ready!(handling.poll(cx)),
            None => Err(Box::new("the router panicked") as Box<dyn Any + Send>),
        };
        let mut response = match outcome {
            Ok(Ok(response)) => response,
            Err(_panic) => ApiError::internal("handler panicked").into_response(),
        };
        let line = this.line.take().expect("an edge future polled after it completed");
        finish(&mut response, &line);
        Poll::Ready(Ok(response))
    }
}

/// The headers every response carries, then the metrics and the log line.
fn finish(response: &mut Response, line: &Line) {
    let took = line.started.elapsed();
    let headers = response.headers_mut();
    // Every answer, errors included, is what its Content-Type says and nothing else.
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // API answers are one caller's view at one moment (and may name its gates or tokens): no
    // cache, shared or private, may keep them. Pages, files and streams set their own.
    if !headers.contains_key(header::CACHE_CONTROL)
        && headers.get(header::CONTENT_TYPE).is_some_and(|ct| headers::is_json(ct.as_bytes()))
    {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.entry(REQUEST_ID).or_insert_with(|| line.request_id.clone());
    mark_sensitive(headers, &[header::SET_COOKIE]);

    let method = line.method;
    let status = response.status().as_u16();
    let route = response.extensions().get::<RouteTemplate>().map_or("unmatched", |t| t.0);
    line.metrics.request(method, route, status, took);
    let failure = response.extensions().get::<Failure>();
    let principal = response.extensions().get::<Principal>().map(|p| p.0.as_str());
    let code = failure.map(|f| f.code);
    if method == "POST"
        && ANSWER_ROUTES.contains(&route)
        && let Some(code) = code
    {
        line.metrics.answer_refused(code);
    }
    let cause = failure.and_then(|f| f.cause.as_deref());
    let request_id = line.request_id.to_str().unwrap_or("-");
    // Whole microseconds: more digits are noise, and would make every line longer.
    let latency_ms = took.as_micros() as f64 / 1000.0;
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
}

/// A random (version 4) UUID from the thread's own generator: a request id must be unique, not
/// secret, and the system's generator would cost a system call per request.
fn new_request_id() -> HeaderValue {
    let id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid();
    let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
    HeaderValue::from_str(id.hyphenated().encode_lower(&mut text)).expect("a UUID is a valid header value")
}

fn mark_sensitive(headers: &mut HeaderMap, names: &[HeaderName]) {
    for name in names {
        if let header::Entry::Occupied(mut entry) = headers.entry(name) {
            for value in entry.iter_mut() {
                value.set_sensitive(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    fn edge<S>(inner: S) -> Edge<S> {
        Edge::new(inner, Metrics::new(Arc::default()))
    }

    async fn body_json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_panic_becomes_a_json_500_with_every_edge_header() {
        // One panics inside its future, the other while it is called, before it has one.
        let in_future = edge(tower::service_fn(|_: Request| async { panic!("boom") }));
        let in_call = edge(tower::service_fn(|_: Request| -> std::future::Ready<Result<Response, Infallible>> {
            panic!("boom")
        }));
        for response in [
            in_future.oneshot(Request::new(Body::empty())).await.unwrap(),
            in_call.oneshot(Request::new(Body::empty())).await.unwrap(),
        ] {
            assert_eq!(response.status(), 500);
            let headers = response.headers();
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(headers[header::CACHE_CONTROL], "no-store");
            let id = uuid::Uuid::parse_str(headers[REQUEST_ID].to_str().unwrap()).unwrap();
            assert_eq!(id.get_version(), Some(uuid::Version::Random));
            assert_eq!(body_json(response).await["error"]["code"], "internal");
        }
    }

    #[tokio::test]
    async fn a_callers_request_id_is_kept_and_fresh_ones_differ() {
        let ok = || edge(tower::service_fn(|_: Request| async { Ok::<_, Infallible>("fine".into_response()) }));
        let mut request = Request::new(Body::empty());
        request.headers_mut().insert(REQUEST_ID, HeaderValue::from_static("trace-42"));
        let response = ok().oneshot(request).await.unwrap();
        assert_eq!(response.headers()[REQUEST_ID], "trace-42");
        // Plain text sets no cache rule of ours: only JSON gets `no-store` from the edge.
        assert!(!response.headers().contains_key(header::CACHE_CONTROL));
        let first = ok().oneshot(Request::new(Body::empty())).await.unwrap();
        let second = ok().oneshot(Request::new(Body::empty())).await.unwrap();
        assert_ne!(first.headers()[REQUEST_ID], second.headers()[REQUEST_ID]);
    }

    #[tokio::test]
    async fn credentials_are_marked_sensitive_both_ways() {
        let inner = tower::service_fn(|req: Request| async move {
            assert!(req.headers()[header::AUTHORIZATION].is_sensitive());
            assert!(req.headers()[header::COOKIE].is_sensitive());
            Ok::<_, Infallible>(([(header::SET_COOKIE, "a=b")], "set").into_response())
        });
        let mut request = Request::new(Body::empty());
        request.headers_mut().insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        request.headers_mut().insert(header::COOKIE, HeaderValue::from_static("a=b"));
        let response = edge(inner).oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()[header::SET_COOKIE].is_sensitive());
    }
}
