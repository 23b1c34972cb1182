//! About the server: capabilities, liveness, readiness, the metrics and the contract itself.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use crate::common::redact::display_url;
use crate::domain::Timestamp;
use crate::domain::gate::KINDS;
use crate::http::error::ApiError;
use crate::metrics::Scrape;
use crate::store::{JournalRange, PageLimit};

/// The contract, embedded so the binary serves it from any directory.
const OPENAPI: &str = include_str!("../../openapi.yaml");

/// The Prometheus text exposition (admins only; open on `--metrics-bind`).
pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let body = state.metrics.render(scrape(&state).await?);
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response())
}

/// What a scrape reads now: the open gates, the writer's queue, the timer, and how far each
/// webhook endpoint is behind the journal.
async fn scrape(state: &AppState) -> Result<Scrape, ApiError> {
    let stats = state.store.gate_stats().await?;
    let now = Timestamp::now();
    let age = |at: Timestamp| (now.as_nanos() - at.as_nanos()).max(0) as f64 / 1e9;
    let head = *state.bus.head().borrow();
    let mut webhooks = Vec::with_capacity(state.webhook_urls.len());
    for url in &state.webhook_urls {
        let Some(endpoint) = state.store.outbox().endpoint(url.clone()).await? else { continue };
        let one = PageLimit { rows: 1, bytes: usize::MAX };
        let (next, _) = state
            .store
            .journal_range(JournalRange { session: None, after: endpoint.cursor, upto: head, page: one })
            .await?;
        let waiting = next.first().and_then(|(_, event)| created_at(event)).map_or(0.0, age);
        webhooks.push((display_url(url), (head - endpoint.cursor).max(0), waiting));
    }
    Ok(Scrape {
        gates_open: stats.open,
        sessions_with_open_gates: stats.sessions,
        oldest_open_gate_seconds: stats.oldest_opened_at.map_or(0.0, age),
        writer_queue: state.store.queue_depth() as i64,
        timer_armed: state.armed.get() as i64,
        webhooks,
    })
}

/// When a stored journal event was made (its `created_at`).
fn created_at(event: &str) -> Option<Timestamp> {
    #[derive(serde::Deserialize)]
    struct Created {
        created_at: String,
    }
    Timestamp::parse(&serde_json::from_str::<Created>(event).ok()?.created_at)
}

/// Deliberately `gatehouse`, not `looprig.serve`: gatehouse serves only the gate subset of that
/// protocol, so a harness capability probe fails by design. `gate_kinds` lets a client see which
/// kinds it may open.
pub(super) async fn capabilities() -> Response {
    let features = ["gates", "answers", "idempotency", "wait", "inbox", "journal"];
    let body = json!({"protocol": "gatehouse", "version": 1, "features": features, "gate_kinds": KINDS});
    axum::Json(body).into_response()
}

pub(super) async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// Ready while the writer's last write succeeded.
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.store.is_healthy() {
        Err(ApiError::StorageUnavailable("storage is unhealthy".into()))
    } else if !state.tasks.iter().all(|tasks| tasks.healthy()) {
        Err(ApiError::StorageUnavailable("a background task stopped (see the log)".into()))
    } else {
        Ok(axum::Json(json!({"status": "ready"})).into_response())
    }
}

pub(super) async fn openapi() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}
