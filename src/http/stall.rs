//! Connections whose peer stopped reading. A slow SSE client never blocks the writer (streams
//! pull from the ring and the database), but its socket would stay open forever: hyper stops
//! polling a response body while the socket is full, so only the socket itself can notice. This
//! listener wraps every accepted stream so that a write pending for longer than the stall limit
//! fails, which makes hyper drop the connection; the client then resumes from its cursor.
//!
//! The kernel send buffer of each connection is also bounded: Linux autotunes it up to 4 MiB,
//! which would let one stalled client pin that much memory and would delay the stall by as much
//! data. 256 KiB (which Linux doubles to 512 KiB) still lets the largest responses flow at full
//! speed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// The kernel send buffer asked for on every accepted connection.
const SEND_BUFFER: usize = 256 * 1024;

/// A `TcpListener` whose connections fail writes that stall.
pub struct StallGuardListener {
    inner: TcpListener,
    stall: Duration,
}

impl StallGuardListener {
    pub fn new(inner: TcpListener, stall: Duration) -> Self {
        Self { inner, stall }
    }
}

impl axum::serve::Listener for StallGuardListener {
    type Io = StallGuard;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        // Frames are small and must not wait for more data to fill a segment.
        if let Err(e) = io.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        if let Err(e) = socket2::SockRef::from(&io).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!(error = %e, "could not bound the send buffer");
        }
        (StallGuard { io, stall: self.stall, pending_since: None }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP stream whose writes fail once the peer has accepted no data for `stall`.
pub struct StallGuard {
    io: TcpStream,
    stall: Duration,
    /// Armed when a write first finds the socket full; cleared by any write that succeeds.
    pending_since: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    fn guard<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.pending_since = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let stall = self.stall;
                let timer = self.pending_since.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the peer accepted no data for {stall:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.guard(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.guard(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.guard(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
