//! About the server: capabilities, liveness, readiness and the contract itself.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{AppState, Route};
use crate::auth::Access;
use crate::error::ApiError;

/// The contract, embedded so the binary serves it from any directory.
const OPENAPI: &str = include_str!("../../openapi.yaml");

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::get(Access::Open, "/v1/capabilities", capabilities),
        Route::get(Access::Open, "/healthz", healthz),
        Route::get(Access::Open, "/readyz", readyz),
        Route::get(Access::Open, "/openapi.yaml", openapi),
    ]
}

/// Deliberately `gatehouse`, not `looprig.serve`: gatehouse serves only the gate subset of that
/// protocol, so a harness capability probe fails by design.
async fn capabilities() -> Response {
    let features = ["gates", "answers", "idempotency", "wait", "inbox", "journal"];
    axum::Json(json!({"protocol": "gatehouse", "version": 1, "features": features})).into_response()
}

async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// Ready while the writer's last write succeeded.
async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.store.is_healthy() {
        Err(ApiError::StorageUnavailable("storage is unhealthy".into()))
    } else if !state.tasks.iter().all(|tasks| tasks.healthy()) {
        Err(ApiError::StorageUnavailable("a background task stopped (see the log)".into()))
    } else {
        Ok(axum::Json(json!({"status": "ready"})).into_response())
    }
}

async fn openapi() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}
