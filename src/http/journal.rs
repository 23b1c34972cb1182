//! Journal pages (spec §5.7): `from_journal_seq` is inclusive (an SSE cursor is exclusive).

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::extract::{Params, QueryParams};
use super::{AppState, SessionPath, limit, pages, seq};
use crate::auth::Caller;
use crate::domain::SessionId;
use crate::http::error::ApiError;

#[derive(Deserialize)]
pub(super) struct PageParams {
    from_journal_seq: Option<u64>,
    limit: Option<u32>,
}

async fn page(
    state: AppState,
    caller: Caller,
    session: Option<SessionId>,
    p: PageParams,
) -> Result<Response, ApiError> {
    let from = seq("from_journal_seq", p.from_journal_seq.unwrap_or(0))?;
    let page_limit = state.limits.page(limit(p.limit)?);
    let read = state.page_reads.take(&caller)?;
    let journal = state.store.journal(session, from, page_limit).await?;
    Ok(pages::page(&journal, read))
}

pub(super) async fn session_journal(
    State(state): State<AppState>,
    Params(SessionPath { session_id }): Params<SessionPath>,
    QueryParams(p): QueryParams<PageParams>,
    caller: Caller,
) -> Result<Response, ApiError> {
    page(state, caller, Some(session_id), p).await
}

pub(super) async fn global_journal(
    State(state): State<AppState>,
    QueryParams(p): QueryParams<PageParams>,
    caller: Caller,
) -> Result<Response, ApiError> {
    page(state, caller, None, p).await
}
