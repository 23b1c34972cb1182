//! Server-Sent Events plumbing shared by the journal and inbox streams (spec §6): the response
//! headers, `retry:` first, `: ping` heartbeats, the `--max-streams` cap, and an end on shutdown
//! or disconnect. Each stream is a task feeding a small channel that the response body drains,
//! so a slow client only ever slows its own task.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::metrics::Kind;

/// The reconnect delay browsers should use, sent first on every stream.
const RETRY: &[u8] = b"retry: 3000\n\n";
/// A comment: keeps proxies from timing the connection out, and carries no `id:`.
const PING: &[u8] = b": ping\n\n";
/// Chunks queued between a stream's task and its socket.
const BUFFER: usize = 4;
/// The most bytes of frames sent as one chunk. Frames committed together go out together: one
/// channel send and one body chunk per burst instead of one per event, which is most of what a
/// fan-out to thousands of streams costs. With `BUFFER`, it also bounds what a client that stopped
/// reading holds in its queue: 64 KiB.
const CHUNK_BYTES: usize = 16 * 1024;
/// Seconds a client over its token's stream cap is told to wait.
const RETRY_AFTER_STREAMS: u64 = 5;
/// Rows read from the database per batch by a stream that is behind.
pub const BATCH: usize = 256;

/// `event: enduring`, `id:` the seq, and the event inside `{"v":1,"event":…}` on one line (the
/// stored event is compact JSON, so it holds no raw line break).
pub fn enduring_frame(seq: i64, event: &str) -> Bytes {
    let head = format!("event: enduring\nid: {seq}\ndata: {{\"v\":1,\"event\":");
    // Exactly sized: the ring holds thousands of these, and spare capacity would be held too.
    let mut frame = Vec::with_capacity(head.len() + event.len() + 3);
    frame.extend_from_slice(head.as_bytes());
    frame.extend_from_slice(event.as_bytes());
    frame.extend_from_slice(b"}\n\n");
    Bytes::from(frame)
}

/// Where a stream resumes: the `Last-Event-ID` header, else `?after=N`; `None` when neither is
/// given.
pub fn cursor(headers: &HeaderMap, after: Option<u64>) -> Result<Option<i64>, ApiError> {
    let header = headers.get("last-event-id").map(|v| v.to_str().unwrap_or("!").trim()).filter(|v| !v.is_empty());
    let raw = match header {
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|_| ApiError::InvalidParameter("Last-Event-ID must be a journal seq".into()))?,
        ),
        None => after,
    };
    raw.map(|n| super::seq("the cursor", n)).transpose()
}

/// Whether the client accepts a stream (`text/event-stream` listed without `q=0`) rather than a
/// JSON page.
pub fn wants_stream(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let is_stream = parts.next().is_some_and(|media| media.eq_ignore_ascii_case("text/event-stream"));
        let refused = parts.any(|param| {
            param
                .split_once('=')
                .is_some_and(|(k, v)| k.trim().eq_ignore_ascii_case("q") && v.trim().parse() == Ok(0.0))
        });
        is_stream && !refused
    })
}

/// The client went away or the server is shutting down.
#[derive(Debug)]
pub struct Closed;

/// A stream's outlet.
pub struct Sink {
    tx: mpsc::Sender<Bytes>,
    done: CancellationToken,
}

impl Sink {
    /// Queues one frame; waits while the socket is full (the stall guard bounds that wait).
    pub async fn send(&self, frame: Bytes) -> Result<(), Closed> {
        tokio::select! {
            sent = self.tx.send(frame) => sent.map_err(|_| Closed),
            () = self.done.cancelled() => Err(Closed),
        }
    }

    /// Queues frames in order, joined into chunks of at most `CHUNK_BYTES`.
    pub async fn send_all(&self, frames: impl IntoIterator<Item = Bytes>) -> Result<(), Closed> {
        let mut chunk = Chunk::default();
        for frame in frames {
            if let Some(full) = chunk.push(frame) {
                self.send(full).await?;
            }
        }
        match chunk.take() {
            Some(rest) => self.send(rest).await,
            None => Ok(()),
        }
    }

    /// Resolves when the stream should end.
    pub async fn closed(&self) {
        tokio::select! {
            () = self.tx.closed() => {}
            () = self.done.cancelled() => {}
        }
    }
}

/// Frames being joined into one chunk. Only frames that are actually joined are copied: a lone
/// frame (the usual live event) or one bigger than a chunk goes out as the ring's own bytes.
#[derive(Default)]
struct Chunk {
    first: Option<Bytes>,
    joined: Vec<u8>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.joined.len()
    }

    /// Adds a frame; returns the chunk so far when the frame does not fit in it.
    fn push(&mut self, frame: Bytes) -> Option<Bytes> {
        let full = if self.len() > 0 && self.len() + frame.len() > CHUNK_BYTES { self.take() } else { None };
        match self.first.take() {
            None if self.joined.is_empty() => self.first = Some(frame),
            Some(first) => {
                self.joined.extend_from_slice(&first);
                self.joined.extend_from_slice(&frame);
            }
            None => self.joined.extend_from_slice(&frame),
        }
        full
    }

    /// The chunk so far, if any, leaving it empty.
    fn take(&mut self) -> Option<Bytes> {
        match self.first.take() {
            Some(first) => Some(first),
            None if self.joined.is_empty() => None,
            None => Some(Bytes::from(std::mem::take(&mut self.joined))),
        }
    }
}

/// Opens a stream: takes one of the caller's token's stream slots (else `429 rate_limited`) and
/// one of the server's `--max-streams` (else `503 gate_capacity`), then runs `produce` with the
/// stream's sink until it returns, the client goes, or the server shuts down.
pub fn open<F, Fut>(state: &AppState, caller: &Caller, kind: Kind, produce: F) -> Result<Response, ApiError>
where
    F: FnOnce(Sink) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let token_slot = state.auth.stream_slot(caller).ok_or(ApiError::RateLimited {
        what: "this token holds its maximum of open streams (--max-streams-per-token)",
        retry_after: RETRY_AFTER_STREAMS,
    })?;
    let permit = state
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::GateCapacity("the server holds its maximum number of open streams"))?;
    let counted = state.metrics.stream_open(kind);
    let (tx, rx) = mpsc::channel(BUFFER);
    tx.try_send(Bytes::from_static(RETRY)).expect("a new channel has room");
    // Ending either task (shutdown, disconnect, or the producer finishing) ends both, which drops
    // the last sender and so ends the response body.
    let done = state.shutdown.child_token();

    let beat = Sink { tx: tx.clone(), done: done.clone() };
    let every = state.limits.heartbeat;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
        // After a blocked send, one ping is enough: not a burst of the missed ones.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => if beat.send(Bytes::from_static(PING)).await.is_err() { break },
                () = beat.closed() => break,
            }
        }
        beat.done.cancel();
    });

    let work = produce(Sink { tx, done: done.clone() });
    tokio::spawn(async move {
        let _slots = (permit, token_slot, counted);
        tokio::select! {
            () = work => {}
            () = done.cancelled() => {}
        }
        done.cancel();
    });

    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, Infallible>));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn frames_are_one_line_json_with_an_id() {
        let frame = enduring_frame(7, r#"{"type":"GateOpened","v":1}"#);
        assert_eq!(
            &frame[..],
            b"event: enduring\nid: 7\ndata: {\"v\":1,\"event\":{\"type\":\"GateOpened\",\"v\":1}}\n\n"
        );
    }

    #[test]
    fn accept_negotiation() {
        assert!(wants_stream(&headers(&[("accept", "text/event-stream")])));
        assert!(wants_stream(&headers(&[("accept", "application/json;q=0.5, Text/Event-Stream")])));
        assert!(!wants_stream(&headers(&[("accept", "application/json, text/event-stream;q=0")])));
        assert!(!wants_stream(&headers(&[("accept", "*/*")])));
        assert!(!wants_stream(&headers(&[])));
    }

    #[test]
    fn frames_are_joined_into_bounded_chunks_and_copied_only_to_be_joined() {
        let frame = |byte: u8, len: usize| Bytes::from(vec![byte; len]);
        let mut chunk = Chunk::default();
        let lone = frame(b'a', 10);
        assert_eq!(chunk.push(lone.clone()), None);
        let out = chunk.take().unwrap();
        assert_eq!(out.as_ptr(), lone.as_ptr(), "a lone frame is sent as it is");
        assert_eq!(chunk.take(), None);

        let third = CHUNK_BYTES / 3;
        let mut sent = Vec::new();
        for byte in b'a'..b'f' {
            sent.extend(chunk.push(frame(byte, third)));
        }
        sent.extend(chunk.take());
        assert_eq!(sent.iter().map(Bytes::len).collect::<Vec<_>>(), [3 * third, 2 * third]);
        let mut expected = Vec::new();
        for byte in b'a'..b'f' {
            expected.extend(std::iter::repeat_n(byte, third));
        }
        assert_eq!(sent.concat(), expected, "every byte, in order");

        let big = frame(b'z', CHUNK_BYTES + 1);
        assert_eq!(chunk.push(frame(b'y', 5)), None);
        assert_eq!(chunk.push(big.clone()).map(|c| c.len()), Some(5));
        assert_eq!(chunk.take().unwrap().as_ptr(), big.as_ptr(), "a big frame goes alone, uncopied");
    }

    #[test]
    fn the_header_wins_over_the_query() {
        assert_eq!(cursor(&headers(&[("last-event-id", "41")]), Some(7)).unwrap(), Some(41));
        assert_eq!(cursor(&headers(&[]), Some(7)).unwrap(), Some(7));
        assert_eq!(cursor(&headers(&[]), None).unwrap(), None);
        assert_eq!(cursor(&headers(&[("last-event-id", "")]), Some(7)).unwrap(), Some(7));
        assert!(cursor(&headers(&[("last-event-id", "abc")]), None).is_err());
        assert!(cursor(&headers(&[]), Some(u64::MAX)).is_err());
    }
}
