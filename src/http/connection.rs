//! One accepted connection, from the moment `server` admits it until it closes: what its socket
//! may wait for, when it stops counting as unauthenticated, and the service that hands its
//! requests to the shared router.
//!
//! **Reads.** hyper waits for a request head as long as the client likes, so the socket itself
//! keeps the clock (`ConnectionIo`): a request head must arrive whole within `--header-timeout`
//! of its first byte (of the accept, for a connection's first request), and a kept-alive
//! connection may stay silent between requests for `--keep-alive-timeout`. Past either, the read
//! fails and hyper drops the connection. From a request's head until its response has been
//! handed to hyper nothing times out here: streams and long-polls last as long as they need, and
//! request bodies have timeouts of their own (`extract`), which answer with a JSON 408. A
//! response still being flushed after that is not silence either: sent bytes restart the
//! keep-alive clock.
//!
//! **Writes.** A slow SSE client never blocks the writer (streams pull from the ring and the
//! database), but its socket would stay open forever: hyper stops polling a response body while
//! the socket is full, so only the socket itself can notice. A write pending for longer than
//! `--stream-stall` fails, which makes hyper drop the connection; the client then resumes from
//! its cursor.
//!
//! **Heads too large.** hyper refuses a request head larger than `MAX_HEAD_BYTES` while it is
//! still arriving, and answers a bare `431` itself (its own `414` is only for a URI of 64 KiB or
//! more in a head that fits, which this bound never lets through). The socket turns that answer
//! into the API's JSON error: hyper's head buffer holds exactly the last `MAX_HEAD_BYTES` bytes
//! read when it refuses (its buffer is no larger), so if none of them ended a line, the request
//! line alone did not fit: `414 uri_too_long`; else the header fields are what grew too large:
//! `431 headers_too_large`. hyper stays the one that decides a head is too large (nothing it
//! accepts is refused here); only the words of its answer change. The connection then closes,
//! as hyper's would, but after the answer has gone out and the client has had a moment to stop
//! sending (`LINGER`), so that the unread rest of its request does not reset the connection
//! under the answer.
//!
//! **Authentication.** A connection counts against its client address's budget of
//! unauthenticated connections (`address_budget::AddressSlot`) until one of its requests passes the route
//! guard with a token or login cookie (`Authenticate`, marked by a hook behind the guard); in open
//! mode, where there are no credentials, until a request head arrived whole.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tower::Service;

use super::address_budget::AddressSlot;
use super::{App, AppFuture};
use crate::http::error::ApiError;
use crate::metrics::Metrics;

/// The largest request head (request line and headers): far above any request of the API, and it
/// bounds what a client that never finishes its head can make the server hold. A bigger head is
/// refused by hyper (the accept loop sets its bound), which answers `431`; this module turns that into a JSON `414 uri_too_long`
/// when the request line alone did not fit, or a JSON `431 headers_too_large` (below).
pub(super) const MAX_HEAD_BYTES: usize = 32 * 1024;

/// How hyper's own answer to a request head larger than `MAX_HEAD_BYTES` begins.
const HYPER_431: &[u8] = b"HTTP/1.1 431 ";

/// After answering a head that is too large: how long the rest of the request is read and
/// dropped before the connection closes.
const LINGER: Duration = Duration::from_secs(1);

/// How long a connection may wait for what it waits for between requests.
#[derive(Debug, Clone, Copy)]
pub struct ReadTimeouts {
    /// From a request head's first byte (from the accept, for the first request) to its end.
    pub header: Duration,
    /// Silence between two requests of a kept-alive connection.
    pub keep_alive: Duration,
}

/// Where a connection is in its request cycle; it decides what a read may wait for.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Accepted at this instant; its first request head is due `header` later.
    Opened(Instant),
    /// Between requests since this instant, without a byte of the next one yet.
    Idle(Instant),
    /// The first byte of a request head arrived at this instant.
    Head(Instant),
    /// A request is being handled, from its complete head until its response body is done.
    Busy,
}

/// What a connection's socket, its service and its requests share.
pub struct Connection {
    phase: Mutex<Phase>,
    timeouts: ReadTimeouts,
    address: AddressSlot,
}

impl Connection {
    pub(super) fn new(address: AddressSlot, timeouts: ReadTimeouts) -> Self {
        Self { phase: Mutex::new(Phase::Opened(Instant::now())), timeouts, address }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        // The lock only guards a `Copy` value: a panic elsewhere cannot leave it half-written.
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When a read that finds nothing must give up, and why; `None` while a request is handled.
    fn read_deadline(&self) -> Option<(Instant, &'static str)> {
        let ReadTimeouts { header, keep_alive } = self.timeouts;
        match *self.phase() {
            Phase::Opened(at) | Phase::Head(at) => Some((at + header, "the request head did not arrive in time")),
            Phase::Idle(at) => Some((at + keep_alive, "the kept-alive connection was idle too long")),
            Phase::Busy => None,
        }
    }

    /// Bytes arrived: between requests they start the next head's clock. (A connection's first
    /// head is timed from the accept, so that a trickle cannot restart it.)
    fn bytes_arrived(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
        }
    }

    /// Bytes went out: a response still being flushed after hyper took its last frame is not
    /// silence, so the keep-alive clock starts over.
    fn bytes_sent(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Idle(Instant::now());
        }
    }

    /// hyper is handling a request (its head was not refused).
    fn is_busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy)
    }

    fn request_started(&self) {
        *self.phase() = Phase::Busy;
    }

    fn response_finished(&self) {
        *self.phase() = Phase::Idle(Instant::now());
    }

    /// The connection stops counting against its address's budget of unauthenticated
    /// connections, for good (idempotent).
    pub fn authenticated(&self) {
        self.address.release();
    }

    /// The connection closed.
    pub(super) fn end(&self) {
        self.address.release();
    }
}

/// In a request's extensions (with a tokens file): the hook behind the route guard calls
/// `authenticated` once the guard let the request through with a credential.
#[derive(Clone)]
pub struct Authenticate(Arc<Connection>);

impl std::ops::Deref for Authenticate {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0
    }
}

/// The socket of one connection, with its read deadlines and its write stall limit.
pub struct ConnectionIo {
    io: TcpStream,
    connection: Arc<Connection>,
    stall: Duration,
    /// Counts the connections closed for stalling.
    metrics: Arc<Metrics>,
    /// Armed when a write first finds the socket full; cleared by any write that succeeds.
    write_pending_since: Option<Pin<Box<Sleep>>>,
    /// Armed while a read waits under a deadline; reset when the deadline moves.
    read_timer: Option<Pin<Box<Sleep>>>,
    /// Bytes read since the last line feed (saturating): whether the head hyper refuses ended
    /// its request line.
    since_line_end: usize,
    /// The JSON answer sent instead of hyper's `431`, once hyper refused a head.
    refusal: Option<Refusal>,
}

/// The answer to a head that is too large, on its way out, then the close.
struct Refusal {
    response: Vec<u8>,
    written: usize,
    /// The write side is shut (after the whole answer).
    shut: bool,
    /// The end of `LINGER`, once the write side is shut.
    linger: Option<Pin<Box<Sleep>>>,
}

impl Refusal {
    /// The answer for a refused head: `414` if its request line did not fit, else `431`.
    fn new(request_line_fits: bool) -> Self {
        let error = if request_line_fits {
            ApiError::HeadersTooLarge(MAX_HEAD_BYTES)
        } else {
            ApiError::UriTooLong(MAX_HEAD_BYTES)
        };
        tracing::debug!(code = error.code(), "request head too large; closing the connection");
        let body = error.envelope();
        let status = error.status();
        let mut response = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or_default(),
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(&body);
        Self { response, written: 0, shut: false, linger: None }
    }
}

impl ConnectionIo {
    pub(super) fn new(io: TcpStream, connection: Arc<Connection>, stall: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            io,
            connection,
            stall,
            metrics,
            write_pending_since: None,
            read_timer: None,
            since_line_end: 0,
            refusal: None,
        }
    }

    /// Bytes hyper is about to write: if they are its own `431` for a head it refused (no request
    /// is being handled), they are replaced by the JSON answer (see the module's doc). Returns
    /// whether they were.
    fn replaces(&mut self, first: &[u8]) -> bool {
        if self.refusal.is_none() && first.starts_with(HYPER_431) && !self.connection.is_busy() {
            self.refusal = Some(Refusal::new(self.since_line_end < MAX_HEAD_BYTES));
        }
        self.refusal.is_some()
    }

    /// Writes what is left of the answer to a refused head.
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some(refusal) = &self.refusal else { return Poll::Ready(Ok(())) };
            if refusal.written == refusal.response.len() {
                return Poll::Ready(Ok(()));
            }
            let polled = Pin::new(&mut self.io).poll_write(cx, &refusal.response[refusal.written..]);
            let written = ready!(self.guard_write(cx, polled))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if let Some(refusal) = &mut self.refusal {
                refusal.written += written;
            }
        }
    }

    /// After the answer to a refused head: shut the write side, then read and drop what the
    /// client still sends until it closes, or `LINGER` has passed.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_refusal(cx))?;
        let Some(refusal) = &mut self.refusal else { return Poll::Ready(Ok(())) };
        if !refusal.shut {
            ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
            refusal.shut = true;
        }
        let linger = refusal.linger.get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER)));
        let mut scratch = [0u8; 4096];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {}
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => return linger.as_mut().poll(cx).map(Ok),
            }
        }
    }

    /// A read found nothing: it waits, unless the connection's read deadline has passed.
    fn wait_for_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((deadline, why)) = self.connection.read_deadline() else {
            return Poll::Pending;
        };
        let timer = match &mut self.read_timer {
            Some(timer) => {
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => self.read_timer.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write went through (bytes out are not silence), or waits; one that has waited `stall`
    /// fails: the peer stopped reading.
    fn guard_write<T: Written>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.write_pending_since = None;
                if result.as_ref().is_ok_and(Written::any) {
                    self.connection.bytes_sent();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let stall = self.stall;
                let timer = self.write_pending_since.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        self.metrics.stalled();
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the peer accepted no data for {stall:?}"),
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

/// What a successful write operation reports: bytes written (a flush writes none of its own).
trait Written {
    fn any(&self) -> bool;
}

impl Written for usize {
    fn any(&self) -> bool {
        *self > 0
    }
}

impl Written for () {
    fn any(&self) -> bool {
        false
    }
}

impl AsyncRead for ConnectionIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if !read.is_empty() {
                    self.since_line_end = match memchr::memrchr(b'\n', read) {
                        Some(at) => read.len() - at - 1,
                        None => self.since_line_end.saturating_add(read.len()),
                    };
                    self.connection.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.wait_for_read(cx),
        }
    }
}

impl AsyncWrite for ConnectionIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.replaces(buf) {
            // hyper's bytes count as written; the answer goes out in their place.
            ready!(self.poll_refusal(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.guard_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|buf| !buf.is_empty()).map_or(&[][..], |buf| &buf[..]);
        if self.replaces(first) {
            ready!(self.poll_refusal(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|buf| buf.len()).sum()));
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.guard_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_refusal(cx))?;
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.guard_write(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.refusal.is_some() {
            return self.poll_linger(cx);
        }
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The hyper service of one connection: the router every connection shares (cloning it is one
/// reference count), and the connection's bookkeeping around each request.
pub struct ConnectionService {
    app: App,
    connection: Arc<Connection>,
    peer: SocketAddr,
    /// Open mode: a complete request head is all the authentication there is.
    open_mode: bool,
}

impl ConnectionService {
    pub(super) fn new(app: App, connection: Arc<Connection>, peer: SocketAddr, open_mode: bool) -> Self {
        Self { app, connection, peer, open_mode }
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Handling;

    fn call(&self, mut req: Request<Incoming>) -> Handling {
        self.connection.request_started();
        if self.open_mode {
            self.connection.authenticated();
        } else {
            req.extensions_mut().insert(Authenticate(Arc::clone(&self.connection)));
        }
        // The client's address, for whoever needs it (`ConnectInfo<SocketAddr>`).
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let mut app = self.app.clone();
        Handling { response: app.call(req.map(Body::new)), connection: Some(Arc::clone(&self.connection)) }
    }
}

/// The router's response future; its body tells the connection when the response is done.
pub struct Handling {
    response: AppFuture,
    connection: Option<Arc<Connection>>,
}

impl Future for Handling {
    type Output = Result<Response<ResponseBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(response) = ready!(Pin::new(&mut self.response).poll(cx));
        let connection = self.connection.take();
        Poll::Ready(Ok(response.map(|body| ResponseBody { body, connection })))
    }
}

/// A response body that marks its connection idle once hyper is done with it (hyper drops a
/// body as soon as it has taken its last frame, or when the connection closes).
pub struct ResponseBody {
    body: Body,
    connection: Option<Arc<Connection>>,
}

impl HttpBody for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            connection.response_finished();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::address_budget::AddressBudget;

    fn connection() -> (Arc<AddressBudget>, Connection) {
        let budget = Arc::new(AddressBudget::new(1));
        let slot = budget.admit("127.0.0.1".parse().unwrap()).unwrap();
        let timeouts = ReadTimeouts { header: Duration::from_secs(10), keep_alive: Duration::from_secs(60) };
        (budget, Connection::new(slot, timeouts))
    }

    fn due_in(connection: &Connection) -> Option<Duration> {
        connection.read_deadline().map(|(at, _)| at.saturating_duration_since(Instant::now()))
    }

    #[tokio::test]
    async fn what_a_read_may_wait_for_follows_the_request_cycle() {
        let (_budget, connection) = connection();
        // A new connection has the header timeout from the accept, however it trickles.
        let opened = connection.read_deadline().unwrap().0;
        tokio::time::sleep(Duration::from_millis(5)).await;
        connection.bytes_arrived();
        assert_eq!(connection.read_deadline().unwrap().0, opened);
        // While a request is handled, nothing.
        connection.request_started();
        assert_eq!(due_in(&connection), None);
        connection.bytes_arrived();
        assert_eq!(due_in(&connection), None);
        // Between requests, the keep-alive timeout; bytes sent (a response still flushing)
        // start it over.
        connection.response_finished();
        let idle = connection.read_deadline().unwrap().0;
        assert!(due_in(&connection).unwrap() > Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(5)).await;
        connection.bytes_sent();
        assert!(connection.read_deadline().unwrap().0 > idle);
        // The next head's first byte starts the header timeout.
        connection.bytes_arrived();
        assert!(due_in(&connection).unwrap() <= Duration::from_secs(10));
        let head = connection.read_deadline().unwrap().0;
        tokio::time::sleep(Duration::from_millis(5)).await;
        connection.bytes_sent();
        connection.bytes_arrived();
        assert_eq!(connection.read_deadline().unwrap().0, head, "more of the head does not extend it");
    }

    #[tokio::test]
    async fn authenticating_gives_the_address_slot_back_once() {
        let (budget, connection) = connection();
        let ip = "127.0.0.1".parse().unwrap();
        assert!(budget.admit(ip).is_none(), "the address is at its budget of one");
        connection.authenticated();
        let next = budget.admit(ip).expect("the slot came back");
        connection.end();
        assert!(budget.admit(ip).is_none(), "ending an authenticated connection gives nothing back twice");
        drop(next);
    }
}
