//! Journal streams (spec §6): every committed journal event as an `event: enduring` frame whose
//! `id:` is its seq. Resume with `Last-Event-ID` or `?after=N`; without a cursor a stream starts
//! live from now.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use tokio::sync::watch;

use super::extract::{Params, QueryParams};
use super::sse::{self, BATCH, Sink, enduring_frame};
use super::{AppState, SessionPath};
use crate::auth::Caller;
use crate::domain::SessionId;
use crate::http::error::ApiError;
use crate::metrics::Kind;
use crate::store::JournalRange;

#[derive(Deserialize)]
pub(super) struct StreamParams {
    after: Option<u64>,
}

#[derive(Deserialize)]
pub(super) struct AllParams {
    after: Option<u64>,
    session_id: Option<SessionId>,
}

pub(super) async fn session_events(
    State(state): State<AppState>,
    Params(SessionPath { session_id }): Params<SessionPath>,
    QueryParams(p): QueryParams<StreamParams>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let cursor = sse::cursor(&headers, p.after)?;
    start(state, &caller, Some(session_id), cursor).await
}

pub(super) async fn all_events(
    State(state): State<AppState>,
    QueryParams(p): QueryParams<AllParams>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let cursor = sse::cursor(&headers, p.after)?;
    start(state, &caller, p.session_id, cursor).await
}

/// Subscribes to the head before the response exists, so "live from now" means from the moment
/// the request was accepted, and nothing committed after it can be missed. "Now" is the stored
/// head when the bus lags it (on PostgreSQL the bus hears of a commit a moment after it): a
/// stream without a cursor never starts with events committed before it was asked for.
async fn start(
    state: AppState,
    caller: &Caller,
    session: Option<SessionId>,
    cursor: Option<i64>,
) -> Result<Response, ApiError> {
    let mut head = state.bus.head();
    let mut now = *head.borrow_and_update();
    if cursor.is_none() {
        now = now.max(state.store.journal_bounds().await?.1);
    }
    let stream_state = state.clone();
    sse::open(&state, caller, Kind::Journal, move |sink| follow(stream_state, session, head, now, cursor, sink))
}

/// Replays what the client missed, then follows the journal live. The head was subscribed to
/// before anything was read, so a commit in between is never lost; the cursor only moves
/// forward, so no seq is sent twice.
async fn follow(
    state: AppState,
    session: Option<SessionId>,
    mut head: watch::Receiver<i64>,
    start: i64,
    requested: Option<i64>,
    sink: Sink,
) {
    let bus = &state.bus;
    let mut cursor = match requested {
        Some(n) if n > start => {
            // Ahead of the doorbell is not yet ahead of the journal: a listing reads commits the
            // writer has not announced yet. Only a cursor past the stored head is a stranger.
            let Ok((earliest, stored)) = state.store.journal_bounds().await else { return };
            if n <= stored {
                n
            } else {
                // The client knows of events this journal never had: it must re-snapshot.
                let reset = format!("event: reset\ndata: {{\"earliest\":{earliest},\"head\":{stored}}}\n\n");
                if sink.send(Bytes::from(reset)).await.is_err() {
                    return;
                }
                stored
            }
        }
        Some(n) => n,
        None => start,
    };
    loop {
        let upto = *head.borrow_and_update();
        while cursor < upto {
            let (frames, next) = match bus.frames_after(cursor, upto, session, BATCH) {
                Some((frames, next)) => (frames.into_iter().map(|f| f.bytes).collect::<Vec<_>>(), next),
                // Behind the ring: a bounded batch from the database, released before sending.
                None => match state
                    .store
                    .journal_range(JournalRange { session, after: cursor, upto, page: state.limits.page(BATCH) })
                    .await
                {
                    Ok((rows, more)) => {
                        let next = if more { rows.last().map_or(upto, |(seq, _)| *seq) } else { upto };
                        (rows.iter().map(|(seq, event)| enduring_frame(*seq, event)).collect(), next)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "a stream could not read the journal; closing it");
                        return;
                    }
                },
            };
            if sink.send_all(frames).await.is_err() {
                return;
            }
            cursor = next;
        }
        tokio::select! {
            changed = head.changed() => if changed.is_err() { return },
            () = sink.closed() => return,
        }
    }
}
