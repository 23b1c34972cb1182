//! Webhook delivery state for operators: what is still being retried and what was given up on.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::extract::QueryParams;
use super::{AppState, json, limit};
use crate::http::error::ApiError;
use crate::store::{Delivery, DeliveryStatus};

#[derive(Deserialize)]
pub(super) struct DeliveryParams {
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

pub(super) async fn list_deliveries(
    State(state): State<AppState>,
    QueryParams(p): QueryParams<DeliveryParams>,
) -> Result<Response, ApiError> {
    let status = match p.status.as_deref() {
        None => DeliveryStatus::Pending,
        Some(name) => DeliveryStatus::parse(name)
            .ok_or_else(|| ApiError::InvalidParameter(format!("status must be pending or failed (got {name:?})")))?,
    };
    let limit = limit(p.limit)?;
    // The cursor is `{journal_seq}:{url}`, base64url-encoded: opaque, and safe in a query string.
    let after = p
        .after
        .map(|raw| {
            URL_SAFE_NO_PAD
                .decode(raw)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .and_then(|text| {
                    let (seq, url) = text.split_once(':')?;
                    Some((url.to_owned(), seq.parse::<i64>().ok()?))
                })
                .ok_or_else(|| ApiError::InvalidParameter("after is not a cursor of this listing".into()))
        })
        .transpose()?;
    let mut deliveries = state.store.outbox().deliveries(status, after, limit).await?;
    let more = deliveries.len() > limit;
    deliveries.truncate(limit);
    let next_after =
        deliveries.last().filter(|_| more).map(|d| URL_SAFE_NO_PAD.encode(format!("{}:{}", d.journal_seq, d.url)));
    Ok(json(StatusCode::OK, &DeliveryListing { deliveries, next_after }))
}
