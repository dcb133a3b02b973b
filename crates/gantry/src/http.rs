//! The HTTP servers (plain and TLS) on hyper, with what `axum::serve` leaves out: a request's
//! headers must arrive within the header timeout (`--http-header-timeout`), which in HTTP/1 also closes a keep-alive
//! connection that sends no next request, so idle or trickling clients cannot hold the
//! process's open files; and each request carries its peer address (`PeerAddr`) for the login
//! guard. Accept errors (the open-file limit reached) are retried by the listener, which keeps
//! serving the connections it has.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::server::conn::http1::Builder;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt;

/// On shutdown, requests in flight get this long to finish.
const DRAIN: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight finish.
pub async fn serve<L>(mut listener: L, router: Router, header_timeout: Duration, shutdown: impl Future<Output = ()>)
where
    L: Listener<Addr = SocketAddr>,
{
    // HTTP/1.1 alone (HTTPS offers it alone by ALPN): its deadline starts at accept, where a
    // protocol sniff would wait for a first byte without one.
    let mut builder = Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
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
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::trace!(%peer, error = %e, "HTTP connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("HTTP requests still in flight after the drain time; closing them");
    }
}
