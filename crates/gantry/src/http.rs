//! The HTTP servers (plain and TLS) on hyper, with what `axum::serve` leaves out: a request's
//! headers must arrive within the header timeout (`--http-header-timeout`), which in HTTP/1 also closes a keep-alive
//! connection that sends no next request, so idle or trickling clients cannot hold the
//! process's open files; and each request carries its peer address (`PeerAddr`) for the login
//! guard. A client that leaves the server's writes waiting past the write timeout
//! (`--http-write-timeout`: it stopped reading a push stream, say) is disconnected, so it holds
//! neither a connection nor what was queued for it. Accept errors (the open-file limit reached) are retried by the listener, which keeps
//! serving the connections it has. Requests hyper refuses before any service sees them get the
//! API's JSON error body all the same (`ApiErrors`).

use std::convert::Infallible;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// On shutdown, requests in flight get this long to finish.
const DRAIN: Duration = Duration::from_secs(30);

/// How long a client may keep the server waiting.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For a request's headers (and a kept-alive connection's next request).
    pub header: Duration,
    /// For a write to go out: the client must read.
    pub write: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight finish;
/// each connection is a task of `tasks`, closed if it outlasts the drain.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    timeouts: Timeouts,
    tasks: TaskTracker,
    shutdown: impl Future<Output = ()>,
) where
    L: Listener<Addr = SocketAddr>,
{
    // HTTP/1.1 alone (HTTPS offers it alone by ALPN): its deadline starts at accept, where a
    // protocol sniff would wait for a first byte without one.
    let mut builder = Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(timeouts.header);
    let graceful = GracefulShutdown::new();
    let drained = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(gantry_api::PeerAddr(peer));
            let router = router.clone();
            async move {
                Ok::<_, Infallible>(
                    router
                        .oneshot(request.map(Body::new))
                        .await
                        .unwrap_or_else(|e| match e {}),
                )
            }
        });
        let io = ApiErrors::new(WriteDeadline::new(io, timeouts.write));
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let connection = graceful.watch(connection);
        let drained = drained.clone();
        tasks.spawn(async move {
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::trace!(%peer, error = %e, "HTTP connection ended");
                },
                _ = drained.cancelled() => tracing::trace!(%peer, "HTTP connection closed after the drain time"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("HTTP requests still in flight after the drain time; closing them");
        drained.cancel();
    }
}

/// A connection's stream whose writes fail once they have waited `limit` for the client to read:
/// hyper then drops the connection. A write that makes progress restarts the clock.
struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Set while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn new(inner: T, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Passes `poll` on; a pending one starts (or goes on waiting on) the clock, which fails it
    /// with `TimedOut` when it runs out.
    fn watch<R>(&mut self, cx: &mut Context<'_>, poll: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let clock = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing within the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The answers hyper writes by itself, before any service runs, for a request it cannot parse:
/// the status line, `returnCode` and message of the JSON body that replaces their empty one
/// (the codes are listed with the API's others in README, Errors).
const HYPER_ANSWERS: &[(&str, u32, &str)] = &[
    (
        "HTTP/1.1 414 URI Too Long",
        41400,
        "the request URI is longer than 65,534 bytes",
    ),
    (
        "HTTP/1.1 431 Request Header Fields Too Large",
        43100,
        "the request headers are too large (over 100 headers, or about 400 KiB)",
    ),
    (
        "HTTP/1.1 400 Bad Request",
        40002,
        "the request is not valid HTTP/1.1 (request line or a header malformed)",
    ),
];

/// A connection's stream that gives hyper's own error answers the API's JSON error shape.
///
/// hyper answers a request it cannot parse (a URI over its fixed limit, headers over its
/// buffer, a malformed request line) with a bodiless head and closes the connection; no layer
/// of the router sees that request. Such a head is recognised on its way out (one of
/// `HYPER_ANSWERS`, `content-length: 0`, no `content-type`: the service's own answers always
/// carry a type) and written as the same status with a JSON body instead. Every other byte
/// passes through untouched.
struct ApiErrors<T> {
    inner: T,
    /// A replacement answer and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> ApiErrors<T> {
    fn new(inner: T) -> Self {
        Self { inner, pending: None }
    }
}

impl<T: AsyncWrite + Unpin> ApiErrors<T> {
    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((answer, written)) = &mut self.pending {
            if *written == answer.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &answer[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` when it is one of hyper's own answers: its replacement is queued.
    fn replaced(&mut self, buf: &[u8]) -> bool {
        match json_answer(buf) {
            Some(answer) => {
                self.pending = Some((answer, 0));
                true
            }
            None => false,
        }
    }
}

/// The JSON answer that replaces `head` when it is a bodiless answer of hyper's own.
fn json_answer(head: &[u8]) -> Option<Vec<u8>> {
    // Most writes are the service's bodies and heads: refused at a glance.
    if head.len() > 512 || !head.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(head).ok()?;
    let fields = head.strip_suffix("\r\n\r\n")?;
    let mut lines = fields.split("\r\n");
    let status_line = lines.next()?;
    let &(_, code, message) = HYPER_ANSWERS.iter().find(|(line, ..)| *line == status_line)?;
    let mut bodiless = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        if name.eq_ignore_ascii_case("content-type") {
            return None;
        }
        bodiless |= name.eq_ignore_ascii_case("content-length") && value.trim() == "0";
    }
    if !bodiless {
        return None;
    }
    let body = serde_json::json!({"returnCode": code, "message": message}).to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for ApiErrors<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ApiErrors<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if self.replaced(buf) {
            // Taken whole; the replacement goes out now or on the flush hyper makes next.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        // hyper queues a response head as a slice of its own: a slice that is one of hyper's
        // answers is taken alone, the slices before it are written first.
        let bufs = match bufs.iter().position(|b| json_answer(b).is_some()) {
            Some(0) => return self.poll_write(cx, &bufs[0]),
            Some(i) => &bufs[..i],
            None => bufs,
        };
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_answers_are_replaced() {
        let hyper = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Wed, 25 Nov 2026 19:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(json_answer(hyper).expect("replaced")).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["returnCode"], 41400);
        // The service's own answers carry a type, or a body.
        let own = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert!(json_answer(own).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n";
        assert!(json_answer(with_body).is_none());
        assert!(json_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(json_answer(b"{\"returnCode\": 0}").is_none());
    }
}
