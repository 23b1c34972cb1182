//! The load generator: plain HTTP/1.1 keep-alive connections (hyper's client connection, no pool,
//! no URL parsing) and raw SSE readers that only count frames. The bench shares the machine with
//! the servers it measures, so it spends as little CPU on itself as it can, and the same way on
//! gatehouse as on the ceilings.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderValue, Method, header};
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;

use super::{BenchError, bounded};

/// How long one request or one connection set-up may take before the bench gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections being set up at once: more would overflow the listen backlog and wait out SYN
/// retransmits, measuring the kernel instead of the server.
const CONNECTING_AT_ONCE: usize = 128;
/// What marks an SSE frame that carries a cursor (`enduring` frames; `retry:` and pings have none).
const FRAME_WITH_ID: &[u8] = b"\nid: ";

/// One request, ready to send many times.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    path: String,
    body: Option<Bytes>,
    idempotency_key: Option<String>,
}

impl Request {
    pub fn get(path: impl Into<String>) -> Self {
        Self { method: Method::GET, path: path.into(), body: None, idempotency_key: None }
    }

    pub fn post(path: impl Into<String>, body: &serde_json::Value) -> Self {
        Self { method: Method::POST, path: path.into(), body: Some(body.to_string().into()), idempotency_key: None }
    }

    pub fn with_idempotency_key(mut self, key: String) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON, when the status is the expected one.
    pub fn json(&self, expected: u16, what: &str) -> Result<serde_json::Value, BenchError> {
        if self.status != expected {
            return Err(BenchError(format!(
                "{what}: expected {expected}, got {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )));
        }
        Ok(serde_json::from_slice(&self.body)?)
    }
}

/// One keep-alive HTTP/1.1 connection.
pub struct Http {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl Http {
    pub async fn connect(addr: SocketAddr) -> Result<Self, BenchError> {
        let tcp = bounded("connecting", REQUEST_TIMEOUT, async { Ok(TcpStream::connect(addr).await?) }).await?;
        tcp.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        // Drives the socket; ends when the sender is dropped or the server closes.
        tokio::spawn(connection);
        let host = HeaderValue::from_str(&addr.to_string()).expect("an address is a valid header");
        Ok(Self { sender, host })
    }

    pub async fn send(&mut self, request: &Request) -> Result<Reply, BenchError> {
        let mut builder = hyper::Request::builder()
            .method(request.method.clone())
            .uri(&request.path)
            .header(header::HOST, self.host.clone());
        if request.body.is_some() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(key) = &request.idempotency_key {
            builder = builder.header("idempotency-key", key);
        }
        let http_request = builder
            .body(Full::new(request.body.clone().unwrap_or_default()))
            .map_err(|e| BenchError(format!("{} {}: {e}", request.method, request.path)))?;
        bounded(&request.path, REQUEST_TIMEOUT, async {
            self.sender.ready().await?;
            let response = self.sender.send_request(http_request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok(Reply { status, body })
        })
        .await
    }
}

/// Opens `count` connections, a bounded number at a time.
async fn connect_many(addr: SocketAddr, count: usize) -> Result<Vec<Http>, BenchError> {
    connect_over(&[addr], count).await
}

/// `count` connections, the `i`th to `addrs[i % addrs.len()]`.
async fn connect_over(addrs: &[SocketAddr], count: usize) -> Result<Vec<Http>, BenchError> {
    futures_util::stream::iter((0..count).map(|i| Http::connect(addrs[i % addrs.len()])))
        .buffer_unordered(CONNECTING_AT_ONCE)
        .try_collect()
        .await
}

/// Completed requests per second: `concurrency` connections send back to back until `duration`
/// has passed, connection `i` cycling through `paths` from its own starting point.
pub async fn requests_per_second(
    addr: SocketAddr,
    concurrency: usize,
    duration: Duration,
    paths: &[String],
) -> Result<f64, BenchError> {
    let requests: Arc<Vec<Request>> = Arc::new(paths.iter().map(Request::get).collect());
    let connections = connect_many(addr, concurrency).await?;
    let started = Instant::now();
    let until = started + duration;
    let workers: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(worker, mut http)| {
            let requests = Arc::clone(&requests);
            tokio::spawn(async move {
                let mut done = 0usize;
                while Instant::now() < until {
                    let request = &requests[(worker + done) % requests.len()];
                    let reply = http.send(request).await?;
                    if reply.status != 200 {
                        return Err(BenchError(format!("GET {}: {}", request.path, reply.status)));
                    }
                    done += 1;
                }
                Ok(done)
            })
        })
        .collect();
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Sends every request once from `concurrency` connections, each taking the next request in
/// order; returns the replies in request order and how long it all took.
pub async fn send_all(
    addr: SocketAddr,
    concurrency: usize,
    requests: Vec<Request>,
) -> Result<(Vec<Reply>, Duration), BenchError> {
    send_all_over(&[addr], concurrency, requests).await
}

/// Like `send_all`, with the connections spread over several servers (replicas of one
/// database): connection `i` goes to `addrs[i % addrs.len()]`.
pub async fn send_all_over(
    addrs: &[SocketAddr],
    concurrency: usize,
    requests: Vec<Request>,
) -> Result<(Vec<Reply>, Duration), BenchError> {
    let count = requests.len();
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let connections = connect_over(addrs, concurrency.min(count)).await?;
    let started = Instant::now();
    let workers: Vec<_> = connections
        .into_iter()
        .map(|mut http| {
            let (requests, next) = (Arc::clone(&requests), Arc::clone(&next));
            tokio::spawn(async move {
                let mut replies = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(request) = requests.get(index) else { return Ok::<_, BenchError>(replies) };
                    replies.push((index, http.send(request).await?));
                }
            })
        })
        .collect();
    let mut replies: Vec<Option<Reply>> = (0..count).map(|_| None).collect();
    for worker in workers {
        for (index, reply) in worker.await?? {
            replies[index] = Some(reply);
        }
    }
    let took = started.elapsed();
    Ok((replies.into_iter().map(|r| r.expect("every request was sent")).collect(), took))
}

/// Sends every request at the same instant, each on its own connection opened beforehand;
/// returns the statuses.
pub async fn race(addr: SocketAddr, requests: Vec<Request>) -> Result<Vec<u16>, BenchError> {
    let connections = connect_many(addr, requests.len()).await?;
    let (start, gate) = watch::channel(false);
    let racers: Vec<_> = connections
        .into_iter()
        .zip(requests)
        .map(|(mut http, request)| {
            let mut gate = gate.clone();
            tokio::spawn(async move {
                // Every racer waits here until all of them are ready.
                let _ = gate.wait_for(|go| *go).await;
                http.send(&request).await.map(|reply| reply.status)
            })
        })
        .collect();
    start.send_replace(true);
    let mut statuses = Vec::with_capacity(racers.len());
    for racer in racers {
        statuses.push(racer.await??);
    }
    Ok(statuses)
}

/// One SSE stream read straight off its socket. It only counts the frames that carry an `id:`:
/// each server sends every frame as one chunk, so a frame's text is never split by chunk
/// framing, only (possibly) between two reads.
pub struct SseReader {
    tcp: TcpStream,
    frames: usize,
    /// The last bytes of the previous read, too few to hold a whole marker but maybe its start.
    tail: Vec<u8>,
}

impl SseReader {
    /// Opens a stream and reads its response head. A `stuck` reader asks the kernel for the
    /// smallest receive buffer, as a client that will never read: the server's send buffer is
    /// what fills up.
    pub async fn connect(addr: SocketAddr, path: &str, stuck: bool) -> Result<Self, BenchError> {
        bounded(path, REQUEST_TIMEOUT, async {
            let socket = TcpSocket::new_v4()?;
            if stuck {
                socket.set_recv_buffer_size(4096)?;
            }
            let mut tcp = socket.connect(addr).await?;
            tcp.set_nodelay(true)?;
            let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
            tcp.write_all(request.as_bytes()).await?;
            let mut head = Vec::with_capacity(512);
            let body_at = loop {
                if let Some(end) = memchr::memmem::find(&head, b"\r\n\r\n") {
                    break end + 4;
                }
                if tcp.read_buf(&mut head).await? == 0 || head.len() > 64 * 1024 {
                    return Err(BenchError(format!("{path}: the stream ended before its response head")));
                }
            };
            if !head.starts_with(b"HTTP/1.1 200") {
                let status = String::from_utf8_lossy(&head[..head.len().min(200)]).into_owned();
                return Err(BenchError(format!("{path}: {status}")));
            }
            let mut reader = Self { tcp, frames: 0, tail: Vec::new() };
            reader.count(&head[body_at..]);
            Ok(reader)
        })
        .await
    }

    /// Frames with an `id:` seen so far.
    #[cfg(test)]
    fn frames(&self) -> usize {
        self.frames
    }

    /// Reads until `total` frames with an `id:` have arrived since the stream opened.
    pub async fn until_frames(&mut self, total: usize) -> Result<(), BenchError> {
        let mut buf = vec![0; 16 * 1024];
        while self.frames < total {
            let read = self.tcp.read(&mut buf).await?;
            if read == 0 {
                return Err(BenchError(format!("a stream ended after {} of {total} frames", self.frames)));
            }
            self.count(&buf[..read]);
        }
        Ok(())
    }

    fn count(&mut self, bytes: &[u8]) {
        // A marker split between two reads is found in the tail plus the new bytes; one wholly
        // inside the tail cannot be, as the tail is shorter than a marker.
        self.tail.extend_from_slice(bytes);
        self.frames += memchr::memmem::find_iter(&self.tail, FRAME_WITH_ID).count();
        let keep = self.tail.len().min(FRAME_WITH_ID.len() - 1);
        self.tail.drain(..self.tail.len() - keep);
    }
}

/// Opens `count` streams, a bounded number at a time.
pub async fn connect_streams(
    addr: SocketAddr,
    path: &str,
    count: usize,
    stuck: bool,
) -> Result<Vec<SseReader>, BenchError> {
    futures_util::stream::iter((0..count).map(|_| SseReader::connect(addr, path, stuck)))
        .buffer_unordered(CONNECTING_AT_ONCE)
        .try_collect()
        .await
}

/// Reads every stream until it has seen `total` frames, each on its own task so the reading is
/// spread over the runtime's threads; gives the streams back.
pub async fn read_until(streams: Vec<SseReader>, total: usize) -> Result<Vec<SseReader>, BenchError> {
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                stream.until_frames(total).await?;
                Ok::<_, BenchError>(stream)
            })
        })
        .collect();
    let mut streams = Vec::with_capacity(readers.len());
    for reader in readers {
        streams.push(reader.await??);
    }
    Ok(streams)
}

/// Streams following one server's live stream, for fan-out runs one after another.
pub struct Fanout {
    streams: Vec<SseReader>,
    /// Frames every stream has been sent so far.
    published: usize,
}

impl Fanout {
    pub async fn connect(addr: SocketAddr, path: &str, count: usize) -> Result<Self, BenchError> {
        Ok(Self { streams: connect_streams(addr, path, count, false).await?, published: 0 })
    }

    /// Runs `publish`, which makes the server send `frames` more frames to every stream, and
    /// waits until every stream has read them all: frames delivered per second.
    pub async fn deliveries_per_second(
        &mut self,
        frames: usize,
        publish: impl Future<Output = Result<(), BenchError>>,
    ) -> Result<f64, BenchError> {
        self.published += frames;
        let started = Instant::now();
        let reading = read_until(std::mem::take(&mut self.streams), self.published);
        let (published, read) = tokio::join!(publish, reading);
        published?;
        self.streams = read?;
        Ok((self.streams.len() * frames) as f64 / started.elapsed().as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_counted_across_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut request = [0; 1024];
            let _ = tcp.read(&mut request).await.unwrap();
            let body =
                "retry: 3000\n\nevent: enduring\nid: 1\ndata: {}\n\n: ping\n\nevent: enduring\nid: 2\ndata: {}\n\n";
            let response = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
            // Byte by byte: every marker is split across reads somewhere.
            for byte in response.as_bytes() {
                tcp.write_all(&[*byte]).await.unwrap();
                tcp.flush().await.unwrap();
            }
            tcp
        });
        let mut reader = SseReader::connect(addr, "/sse", false).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), reader.until_frames(2)).await.unwrap().unwrap();
        assert_eq!(reader.frames(), 2);
        drop(server.await.unwrap());
    }
}
