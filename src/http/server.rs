//! The accept loop: which connections are served at all, and how serving ends.
//!
//! - `--max-connections` bounds the connections open at once, streams included. Past it a new
//!   connection is closed as soon as it is accepted: no task, no read, no allocation.
//! - `--max-unauthenticated-per-address` bounds the connections one client address (IPv4, or an
//!   IPv6 /64) holds before they authenticate (see `connection`); past it, that address's new
//!   connections are closed the same way. Clients that authenticate, and other addresses, are
//!   not held up by one address's half-open connections. A `--trusted-proxy` is not counted: it
//!   carries the connections of many clients.
//! - The open-file limit is raised to its hard limit at start, and a limit that cannot hold the
//!   connection cap refuses to start (`raise_open_file_limit`).
//! - Shutdown stops accepting, lets every connection finish the request it is in (streams and
//!   long-polls end on the shutdown token), and closes what is still open after the grace.
//!
//! Every connection gets the same router (one route table per server, not per connection) and
//! its own `connection::Connection` bookkeeping.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::App;
use super::address_budget::AddressBudget;
use super::connection::{Connection, ConnectionIo, ConnectionService, ReadTimeouts};
use crate::auth::TrustedProxies;
use crate::metrics::Metrics;

/// The kernel send buffer asked for on every accepted connection. Linux autotunes it up to 4 MiB,
/// which would let one stalled client pin that much memory and would delay `--stream-stall` by as
/// much data; 256 KiB (which Linux doubles to 512 KiB) still lets the largest responses flow at
/// full speed.
const SEND_BUFFER: usize = 256 * 1024;

/// The largest request head (request line and headers): far above any request of the API, and it
/// bounds what a client that never finishes its head can make the server hold. A bigger head gets
/// hyper's `431`.
const MAX_HEAD_BYTES: usize = 32 * 1024;

/// hyper's read buffer (and its write buffer) per connection: room for the largest head. hyper
/// grows the read buffer while a body streams in, by default up to about 400 KiB, which a client
/// that stops short of the end of its body would pin; bodies are collected (and bounded) by the
/// extractors instead, so a bigger buffer would only save some reads.
const CONNECTION_BUFFER: usize = MAX_HEAD_BYTES;

/// File descriptors kept beside the connections: the database (its file, WAL, shared memory and
/// lock, for the writer and up to 16 readers), the listener, webhook deliveries and their DNS
/// lookups, the runtime and the standard streams.
const RESERVED_FILES: u64 = 256;

/// How often, at most, the log says that connections are being refused.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The connection flags, checked (`config::HttpArgs::settings`).
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// `--max-connections`.
    pub max_connections: u32,
    /// `--max-unauthenticated-per-address`.
    pub max_unauthenticated_per_address: u32,
    /// `--header-timeout`, `--keep-alive-timeout`.
    pub read_timeouts: ReadTimeouts,
    /// `--stream-stall`.
    pub stream_stall: Duration,
}

/// What the accept loop enforces.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--max-unauthenticated-per-address`.
    pub max_unauthenticated_per_address: usize,
    /// `--header-timeout`, `--keep-alive-timeout`.
    pub read_timeouts: ReadTimeouts,
    /// `--stream-stall`.
    pub stream_stall: Duration,
    /// No tokens file: a connection authenticates with its first complete request head.
    pub open_mode: bool,
    /// `--trusted-proxy`: their connections are not counted per address.
    pub trusted_proxies: TrustedProxies,
    /// Counts the connections closed for stalling.
    pub metrics: Arc<Metrics>,
}

/// Why `serve` will not start with this open-file limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "the open-file limit is {limit} (the hard limit, `ulimit -Hn`), too low for --max-connections {connections} \
     plus {RESERVED_FILES} descriptors for the database, the listener and webhooks: lower --max-connections \
     (GATEHOUSE_MAX_CONNECTIONS) to at most {most}, or raise the hard limit"
)]
pub struct OpenFileLimitError {
    limit: u64,
    connections: u32,
    most: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and checks that it holds `max_connections`
/// connections beside the reserve. Returns the limit now in force.
pub fn raise_open_file_limit(max_connections: u32) -> Result<u64, OpenFileLimitError> {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit; checking the current one");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft)
        }
    };
    if u64::from(max_connections) + RESERVED_FILES > limit {
        return Err(OpenFileLimitError {
            limit,
            connections: max_connections,
            most: limit.saturating_sub(RESERVED_FILES),
        });
    }
    Ok(limit)
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then drains: no new connections,
/// the requests in flight get `grace` to finish, and what is still open after it is closed.
pub async fn serve(
    listener: TcpListener,
    app: App,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let unauthenticated = Arc::new(AddressBudget::new(limits.max_unauthenticated_per_address));
    let graceful = GracefulShutdown::new();
    let close_now = CancellationToken::new();
    let mut http = http1::Builder::new();
    // The read deadlines are `ConnectionIo`'s: hyper's own header timeout would also cut the
    // silence between requests short.
    http.header_read_timeout(None).max_header_size(MAX_HEAD_BYTES).max_buf_size(CONNECTION_BUFFER);
    let mut refusals = Refusals::default();

    let stop = shutdown.cancelled();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(e, &mut refusals).await;
                continue;
            }
        };
        // Refusals drop the socket right here, which closes it: no task, no read.
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            refusals.refuse(Refusal::Connections(limits.max_connections));
            continue;
        };
        // A trusted proxy carries many clients' connections; it is not one client.
        let slot = if limits.trusted_proxies.trusts(peer.ip()) {
            Some(unauthenticated.exempt(peer.ip()))
        } else {
            unauthenticated.admit(peer.ip())
        };
        let Some(slot) = slot else {
            refusals.refuse(Refusal::Address(peer.ip(), limits.max_unauthenticated_per_address));
            continue;
        };
        tune(&tcp);
        let connection = Arc::new(Connection::new(slot, limits.read_timeouts));
        let io = ConnectionIo::new(tcp, Arc::clone(&connection), limits.stream_stall, Arc::clone(&limits.metrics));
        let service = ConnectionService::new(app.clone(), Arc::clone(&connection), peer, limits.open_mode);
        let served = graceful.watch(http.serve_connection(TokioIo::new(io), service));
        let close_now = close_now.clone();
        tokio::spawn(async move {
            tokio::select! {
                served = served => {
                    if let Err(e) = served {
                        tracing::debug!(%peer, error = %e, "connection closed");
                    }
                }
                () = close_now.cancelled() => {}
            }
            connection.end();
            drop(permit);
        });
    }
    // New connections are refused by the kernel from here on.
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still open {grace:?} after shutdown began; closing them");
        close_now.cancel();
    }
}

/// Frames are small and must not wait for more data to fill a segment; the send buffer is bounded
/// (see `SEND_BUFFER`).
fn tune(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    if let Err(e) = socket2::SockRef::from(tcp).set_send_buffer_size(SEND_BUFFER) {
        tracing::debug!(error = %e, "could not bound the send buffer");
    }
}

/// An accept that failed: a connection that died in the queue is nothing; anything else (out of
/// descriptors, say) waits a moment rather than spinning.
async fn accept_failed(e: io::Error, refusals: &mut Refusals) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    refusals.refuse(Refusal::AcceptFailed(e));
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Why a connection was not served.
enum Refusal {
    Connections(usize),
    Address(IpAddr, usize),
    AcceptFailed(io::Error),
}

/// Logs refusals at most once per `REFUSAL_LOG_EVERY`, with how many there were since: under an
/// attack the log must not become the next thing that runs out.
#[derive(Default)]
struct Refusals {
    logged_at: Option<Instant>,
    unlogged: u64,
}

impl Refusals {
    fn refuse(&mut self, refusal: Refusal) {
        self.unlogged += 1;
        if self.logged_at.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
            return;
        }
        let refused = std::mem::take(&mut self.unlogged);
        self.logged_at = Some(Instant::now());
        match refusal {
            Refusal::Connections(cap) => tracing::warn!(
                refused,
                "closing new connections at once: --max-connections ({cap}) are open; refusals are logged at most every \
                 {REFUSAL_LOG_EVERY:?}"
            ),
            Refusal::Address(ip, cap) => tracing::warn!(
                refused,
                %ip,
                "closing new connections at once: this client address holds --max-unauthenticated-per-address ({cap}) \
                 connections that have not authenticated; refusals are logged at most every {REFUSAL_LOG_EVERY:?}"
            ),
            Refusal::AcceptFailed(e) => tracing::error!(
                refused,
                error = %e,
                "cannot accept connections; retrying every 100ms (failures are logged at most every \
                 {REFUSAL_LOG_EVERY:?})"
            ),
        }
    }
}
