//! The accept loop: which connections are served at all, and how serving ends.
//!
//! - `--max-connections` bounds the connections open at once, streams included. Past it a new
//!   connection is closed as soon as it is accepted: no task, no read, no allocation.
//! - `--max-unauthenticated-per-address` bounds the connections one client address (IPv4, or an
//!   IPv6 /64) holds before they authenticate (see `connection`); past it, that address's new
//!   connections are closed the same way. Clients that authenticate, and other addresses, are
//!   not held up by one address's half-open connections. A `--trusted-proxy` is not counted: it
//!   carries the connections of many clients.
//! - The open-file limit is raised to its hard limit at start (`raise_open_file_limit`), and the
//!   caps are fitted to it (`fit_connection_caps`): left at their defaults, `--max-connections`
//!   becomes what the limit holds beside the reserve (and `--max-streams` no more than that), with
//!   one warning; a `--max-connections` the operator set that the limit cannot hold refuses to
//!   start.
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
use super::connection::{Connection, ConnectionIo, ConnectionService, MAX_HEAD_BYTES, ReadTimeouts};
use crate::auth::TrustedProxies;
use crate::metrics::Metrics;

/// The kernel send buffer asked for on every accepted connection. Linux autotunes it up to 4 MiB,
/// which would let one stalled client pin that much memory and would delay `--stream-stall` by as
/// much data; 256 KiB (which Linux doubles to 512 KiB) still lets the largest responses flow at
/// full speed.
const SEND_BUFFER: usize = 256 * 1024;

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
    /// `--max-connections`, if given (its default fits the open-file limit).
    pub max_connections: Option<u32>,
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

/// `--max-connections` when the operator sets none and the open-file limit holds it.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16_384;

/// `--max-streams` when the operator sets none and the connection cap holds it.
pub const DEFAULT_MAX_STREAMS: u32 = 10_000;

/// Why `serve` will not start with this open-file limit.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
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

/// The connection caps in force, fitted to an open-file limit (`fit_connection_caps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The open-file limit they were fitted to.
    pub limit: u64,
    /// `--max-connections` in force.
    pub connections: u32,
    /// `--max-streams` in force.
    pub streams: u32,
    /// A default was lowered to fit the limit.
    pub lowered: bool,
}

impl Caps {
    /// The one warning to log when defaults were lowered: what, why and how to raise the limit.
    pub fn warning(&self) -> Option<String> {
        self.lowered.then(|| {
            let needed = u64::from(DEFAULT_MAX_CONNECTIONS) + RESERVED_FILES;
            format!(
                "the open-file limit is {limit} (the hard limit, `ulimit -Hn`), too low for the default \
                 --max-connections {DEFAULT_MAX_CONNECTIONS} plus {RESERVED_FILES} descriptors for the database, the \
                 listener and webhooks: serving with --max-connections {connections} and --max-streams {streams} \
                 instead; for the defaults raise the hard limit to at least {needed} (`ulimit -Hn {needed}`, \
                 LimitNOFILE= under systemd, --ulimit nofile= under Docker), or set --max-connections \
                 (GATEHOUSE_MAX_CONNECTIONS) yourself",
                limit = self.limit,
                connections = self.connections,
                streams = self.streams,
            )
        })
    }
}

/// Fits the connection caps to the open-file `limit`, keeping `RESERVED_FILES` beside the
/// connections. `None` is a cap the operator did not set: `--max-connections` then becomes
/// `DEFAULT_MAX_CONNECTIONS` or what the limit holds, whichever is less (at least 1), and a
/// default `--max-streams` beside it no more than those connections. A `--max-connections` the operator set
/// is kept, or refused when the limit cannot hold it; a `--max-streams` the operator set is kept.
pub fn fit_connection_caps(
    limit: u64,
    connections: Option<u32>,
    streams: Option<u32>,
) -> Result<Caps, OpenFileLimitError> {
    let most = limit.saturating_sub(RESERVED_FILES);
    let (connections, connections_lowered) = match connections {
        Some(connections) if u64::from(connections) > most => {
            return Err(OpenFileLimitError { limit, connections, most });
        }
        Some(connections) => (connections, false),
        None => {
            let fits = u32::try_from(most).unwrap_or(u32::MAX).clamp(1, DEFAULT_MAX_CONNECTIONS);
            (fits, fits < DEFAULT_MAX_CONNECTIONS)
        }
    };
    let (streams, streams_lowered) = match streams {
        Some(streams) => (streams, false),
        // Only beside a lowered default: a --max-connections the operator chose below the default
        // streams keeps them (and `run`'s warning that connections run out first).
        None if connections_lowered => {
            let fits = DEFAULT_MAX_STREAMS.min(connections);
            (fits, fits < DEFAULT_MAX_STREAMS)
        }
        None => (DEFAULT_MAX_STREAMS, false),
    };
    let lowered = connections_lowered || streams_lowered;
    Ok(Caps { limit, connections, streams, lowered })
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and fits the connection caps to the limit
/// now in force (`fit_connection_caps`).
pub fn raise_open_file_limit(connections: Option<u32>, streams: Option<u32>) -> Result<Caps, OpenFileLimitError> {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit; checking the current one");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft)
        }
    };
    fit_connection_caps(limit, connections, streams)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ample_open_file_limit_keeps_the_defaults_without_a_warning() {
        let caps = fit_connection_caps(1 << 20, None, None).unwrap();
        assert_eq!((caps.connections, caps.streams), (DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_STREAMS));
        assert_eq!(caps.warning(), None);
        let exact = u64::from(DEFAULT_MAX_CONNECTIONS) + RESERVED_FILES;
        assert_eq!(fit_connection_caps(exact, None, None).unwrap().connections, DEFAULT_MAX_CONNECTIONS);
        assert!(!fit_connection_caps(exact, None, None).unwrap().lowered);
    }

    #[test]
    fn a_low_open_file_limit_lowers_the_defaults_with_a_warning() {
        let caps = fit_connection_caps(1024, None, None).unwrap();
        assert_eq!(caps.connections, 768);
        assert!(caps.streams <= caps.connections, "{caps:?}");
        let warning = caps.warning().expect("lowered defaults are told");
        for says in ["1024", "ulimit -Hn", "--max-connections 768", "--max-streams 768", "16640"] {
            assert!(warning.contains(says), "{says:?} in {warning}");
        }
        // A limit that holds the default connections but not the reserve lowers them only.
        let caps = fit_connection_caps(12_256, None, None).unwrap();
        assert_eq!((caps.connections, caps.streams, caps.lowered), (12_000, DEFAULT_MAX_STREAMS, true));
        // Streams the operator set are kept, whatever the connections became.
        assert_eq!(fit_connection_caps(1024, None, Some(5000)).unwrap().streams, 5000);
        // A limit below the reserve still leaves one connection.
        assert_eq!(fit_connection_caps(100, None, None).unwrap().connections, 1);
    }

    #[test]
    fn an_explicit_connection_cap_is_kept_or_refused() {
        let refused = fit_connection_caps(1024, Some(DEFAULT_MAX_CONNECTIONS), None).unwrap_err();
        assert_eq!(refused, OpenFileLimitError { limit: 1024, connections: DEFAULT_MAX_CONNECTIONS, most: 768 });
        let message = refused.to_string();
        assert!(message.contains("lower --max-connections") && message.contains("at most 768"), "{message}");
        let caps = fit_connection_caps(1024, Some(768), None).unwrap();
        assert_eq!((caps.connections, caps.streams, caps.warning()), (768, DEFAULT_MAX_STREAMS, None));
        let caps = fit_connection_caps(1024, Some(500), Some(20)).unwrap();
        assert_eq!((caps.connections, caps.streams, caps.lowered), (500, 20, false));
    }
}
