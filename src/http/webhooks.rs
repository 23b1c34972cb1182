//! Webhook delivery state for operators: what is still being retried and what was given up on.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::extract::QueryParams;
use super::{AppState, Route, json, limit};
use crate::error::ApiError;
use crate::store::Delivery;

pub(super) fn routes() -> Vec<Route> {
    vec![Route::get("/v1/webhooks/deliveries", list_deliveries)]
}

#[derive(Deserialize)]
struct DeliveryParams {
    status: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

#[derive(Serialize)]
struct DeliveryListing {
    deliveries: Vec<Delivery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<String>,
}

async fn list_deliveries(
    State(state): State<AppState>,
    QueryParams(p): QueryParams<DeliveryParams>,
) -> Result<Response, ApiError> {
    let status = match p.status.as_deref() {
        None | Some("pending") => "pending",
        Some("failed") => "failed",
        Some(other) => {
            return Err(ApiError::InvalidParameter(format!("status must be pending or failed (got {other:?})")));
        }
    };
    let limit = limit(p.limit)?;
    // The cursor is `{journal_seq}:{url}` (opaque to clients).
    let after = p
        .after
        .map(|raw| {
            raw.split_once(':')
                .and_then(|(seq, url)| Some((url.to_owned(), seq.parse::<i64>().ok()?)))
                .ok_or_else(|| ApiError::InvalidParameter("after is not a cursor of this listing".into()))
        })
        .transpose()?;
    let mut deliveries = state.store.webhook_deliveries(status, after, limit).await?;
    let more = deliveries.len() > limit;
    deliveries.truncate(limit);
    let next_after = deliveries.last().filter(|_| more).map(|d| format!("{}:{}", d.journal_seq, d.url));
    Ok(json(StatusCode::OK, &DeliveryListing { deliveries, next_after }))
}
