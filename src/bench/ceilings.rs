//! This machine's ceilings, measured in the same run as gatehouse: the raw SQLite claim rate
//! (one transaction per answer, same file system and pragmas), and the bare server that `bench`
//! starts as `gatehouse bench-ceiling`: axum's hello and a tokio-broadcast SSE fan-out, nothing
//! else.

use std::convert::Infallible;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use super::BenchError;
use crate::config::CeilingArgs;
use crate::http::enduring_frame;
use crate::store::sqlite::Durability;
use crate::store::sqlite::bench::{self as sqlite_bench, OneTransactionPerAnswer};

/// Answers per second with one `BEGIN IMMEDIATE … COMMIT` each, on a database in `dir` (the
/// gates are opened first, unmeasured).
pub async fn sqlite_claims_per_second(dir: &Path, durability: Durability, answers: usize) -> Result<f64, BenchError> {
    let db = dir.join("baseline.db");
    tokio::task::spawn_blocking(move || {
        let mut baseline = OneTransactionPerAnswer::open(&db, durability)?;
        baseline.open_gates(answers)?;
        let started = Instant::now();
        let answered = baseline.answer_all()?;
        Ok(answered as f64 / started.elapsed().as_secs_f64())
    })
    .await?
}

/// Claims per second at the file system's physical limit: a minimal claim and one 100-byte
/// event, one transaction each, on a database of their own in `dir` (no gatehouse code).
pub async fn minimal_claims_per_second(dir: &Path, durability: Durability, claims: usize) -> Result<f64, BenchError> {
    on_minimal_db(dir, "the minimal claim ceiling", move |db| {
        sqlite_bench::minimal_claims_per_second(db, durability, claims)
    })
    .await
}

/// Milliseconds of each of `claims` minimal claims (as `minimal_claims_per_second`), one at a
/// time and `pause` apart: the disk's own part of every durable answer.
pub async fn minimal_claim_latencies_ms(
    dir: &Path,
    durability: Durability,
    claims: usize,
    pause: Duration,
) -> Result<Vec<f64>, BenchError> {
    on_minimal_db(dir, "the minimal claim latency", move |db| {
        sqlite_bench::minimal_claim_latencies_ms(db, durability, claims, pause)
    })
    .await
}

/// Runs `measure` on a blocking thread with a fresh database file in `dir`, its error named
/// `what`.
async fn on_minimal_db<T: Send + 'static>(
    dir: &Path,
    what: &str,
    measure: impl FnOnce(&Path) -> rusqlite::Result<T> + Send + 'static,
) -> Result<T, BenchError> {
    let db = dir.join(format!("minimal-{}.db", uuid::Uuid::new_v4().simple()));
    tokio::task::spawn_blocking(move || measure(&db)).await?.map_err(|e| BenchError(format!("{what}: {e}")))
}

/// Frames a bare stream keeps for its slowest reader: more than any burst the bench publishes,
/// so no reader lags.
const BROADCAST_CAPACITY: usize = 4096;

struct Ceiling {
    frames: broadcast::Sender<Bytes>,
    seq: AtomicI64,
}

/// The hidden `gatehouse bench-ceiling`: `GET /hello`, `GET /sse` (every published frame, live)
/// and `POST /publish?frames=N&bytes=B` (N frames of B bytes each, shaped like gatehouse's).
pub async fn serve_ceiling(args: CeilingArgs) -> ExitCode {
    let ceiling = Arc::new(Ceiling { frames: broadcast::Sender::new(BROADCAST_CAPACITY), seq: AtomicI64::new(0) });
    let app = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route("/sse", get(subscribe))
        .route("/publish", post(publish))
        .with_state(ceiling);
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("gatehouse bench-ceiling: cannot listen on {}: {e}", args.bind);
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => tracing::info!("bench ceiling listening on http://{addr}"),
        Err(e) => {
            eprintln!("gatehouse bench-ceiling: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Like gatehouse, small frames go out at once instead of waiting to fill a segment.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    match axum::serve(listener, app).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gatehouse bench-ceiling: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn subscribe(State(ceiling): State<Arc<Ceiling>>) -> Response {
    let retry = futures_util::stream::once(async { Bytes::from_static(b"retry: 3000\n\n") });
    // A reader that lagged would skip frames; the capacity keeps that from happening.
    let live = BroadcastStream::new(ceiling.frames.subscribe()).filter_map(|frame| async move { frame.ok() });
    let body = Body::from_stream(retry.chain(live).map(Ok::<_, Infallible>));
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

#[derive(Deserialize)]
struct Publish {
    frames: usize,
    bytes: usize,
}

async fn publish(State(ceiling): State<Arc<Ceiling>>, Query(p): Query<Publish>) -> StatusCode {
    if p.frames > BROADCAST_CAPACITY {
        return StatusCode::BAD_REQUEST;
    }
    for _ in 0..p.frames {
        let seq = ceiling.seq.fetch_add(1, Ordering::Relaxed) + 1;
        // Sending fails only without subscribers, which is no error here.
        let _ = ceiling.frames.send(frame_of_size(seq, p.bytes));
    }
    StatusCode::NO_CONTENT
}

/// An `enduring` frame made as gatehouse makes them, its event a string padded to `bytes`.
fn frame_of_size(seq: i64, bytes: usize) -> Bytes {
    let pad = bytes.saturating_sub(enduring_frame(seq, "\"\"").len());
    enduring_frame(seq, &format!("\"{}\"", "x".repeat(pad)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_the_asked_size_and_one_id() {
        let frame = frame_of_size(42, 700);
        assert_eq!(frame.len(), 700);
        assert!(frame.starts_with(b"event: enduring\nid: 42\ndata: {"));
        assert!(frame.ends_with(b"}\n\n"));
    }

    #[tokio::test]
    async fn one_transaction_per_answer_answers_every_gate() {
        let dir = tempfile::tempdir().unwrap();
        let rate = sqlite_claims_per_second(dir.path(), Durability::Normal, 20).await.unwrap();
        assert!(rate > 0.0);
    }
}
