//! A loop's inbox: the durable queue of commands for one (session, loop), delivered until acked
//! (spec §5.6).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::extract::{Params, QueryParams};
use super::sse::{self, BATCH, Sink};
use super::{AppState, limit, pages, seq, wait_deadline, wait_until};
use crate::auth::Caller;
use crate::domain::{CommandId, InboxEntry, LoopId, SessionId};
use crate::http::error::ApiError;
use crate::metrics::Kind;
use crate::store::InboxQuery;

#[derive(Deserialize)]
pub(super) struct LoopPath {
    session_id: SessionId,
    loop_id: LoopId,
}

#[derive(Deserialize)]
pub(super) struct CommandPath {
    session_id: SessionId,
    loop_id: LoopId,
    command_id: CommandId,
}

#[derive(Deserialize)]
pub(super) struct InboxParams {
    after: Option<u64>,
    limit: Option<u32>,
    wait: Option<u64>,
    include_acked: Option<bool>,
}

#[derive(Serialize)]
struct InboxPage {
    commands: Vec<InboxEntry>,
    next_after: i64,
}

/// Unacked commands after the cursor; with `wait`, long-polls until one qualifies. Without a
/// cursor a restarted loop gets every unacked command again: that is the redelivery. With
/// `Accept: text/event-stream` the same rows stream as `event: command` frames.
pub(super) async fn list_commands(
    State(state): State<AppState>,
    Params(LoopPath { session_id, loop_id }): Params<LoopPath>,
    QueryParams(p): QueryParams<InboxParams>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // Both forms check every parameter, even those only the page uses.
    let after = seq("after", p.after.unwrap_or(0))?;
    let limit = limit(p.limit)?;
    let deadline = wait_deadline("wait", p.wait.unwrap_or(0))?;
    let include_acked = p.include_acked.unwrap_or(false);
    if sse::wants_stream(&headers) {
        // Never "live from now": a loop that reconnects without a cursor gets every unacked row.
        let cursor = sse::cursor(&headers, p.after)?.unwrap_or(0);
        let stream_state = state.clone();
        return sse::open(&state, &caller, Kind::Inbox, move |sink| {
            stream_commands(stream_state, session_id, loop_id, cursor, sink)
        });
    }
    // Register interest before reading, so a command committed in between still wakes us. The
    // page read is taken for each read, not for the wait: a long-poll holds no page.
    let _parked = (deadline > tokio::time::Instant::now()).then(|| state.metrics.long_poll(Kind::Inbox));
    let mut interest = state.bus.watch_inbox(session_id, loop_id);
    let page = state.limits.page(limit);
    let (commands, read) = loop {
        let read = state.page_reads.take(&caller)?;
        let commands =
            state.store.inbox(InboxQuery { session: session_id, loop_id, after, page, include_acked }).await?;
        if !commands.is_empty() {
            break (commands, read);
        }
        drop(read);
        if !wait_until(&state, deadline, interest.changed()).await {
            break (commands, state.page_reads.take(&caller)?);
        }
    };
    let next_after = commands.last().map_or(after, |c| c.seq);
    Ok(pages::page(&InboxPage { commands, next_after }, read))
}

/// Streams unacked commands after the cursor, then new ones as they commit.
async fn stream_commands(state: AppState, session: SessionId, loop_id: LoopId, mut cursor: i64, sink: Sink) {
    // Register before reading, so a command committed in between still wakes the stream.
    let mut interest = state.bus.watch_inbox(session, loop_id);
    loop {
        let rows = match state
            .store
            .inbox(InboxQuery { session, loop_id, after: cursor, page: state.limits.page(BATCH), include_acked: false })
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "an inbox stream could not read; closing it");
                return;
            }
        };
        if rows.is_empty() {
            tokio::select! {
                () = interest.changed() => continue,
                () = sink.closed() => return,
            }
        }
        let frames: Vec<Bytes> = rows
            .iter()
            .map(|row| {
                let data = serde_json::to_string(&row).expect("inbox rows serialise");
                Bytes::from(format!("event: command\nid: {}\ndata: {data}\n\n", row.seq))
            })
            .collect();
        if sink.send_all(frames).await.is_err() {
            return;
        }
        cursor = rows.last().map_or(cursor, |row| row.seq);
    }
}

/// Idempotent: 204 every time the command is in this inbox.
pub(super) async fn ack_command(
    State(state): State<AppState>,
    Params(CommandPath { session_id, loop_id, command_id }): Params<CommandPath>,
) -> Result<Response, ApiError> {
    if state.store.ack_command(session_id, loop_id, command_id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::NotFound("no such command in this loop's inbox"))
    }
}
