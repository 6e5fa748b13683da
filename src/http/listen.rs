//! Accepting connections for `serve`: HTTP/1.1 through hyper with the server's time limits —
//! a client must send a request's headers within [`Timeouts::header`] of the server waiting
//! for them (an idle keep-alive connection included), and its body within [`Timeouts::body`]
//! (the infer handler reads it) — and a shutdown that stops accepting, lets the requests in
//! flight finish, and after [`Timeouts::shutdown`] drops whatever connections remain (a client
//! holding half-sent headers or a stalled body no longer keeps the server alive).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;

/// The server's time limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    /// The most a client may take to send a request's headers, from when the server waits for
    /// them (also the most a keep-alive connection may sit idle); the connection is closed.
    pub header: Duration,
    /// The most a client may take to send a request's body once its headers are in: 408.
    pub body: Duration,
    /// After a shutdown begins, the most the server waits for the connections it has (requests
    /// in flight finishing) before it drops them and exits.
    pub shutdown: Duration,
}

impl Default for Timeouts {
    /// 10 s for headers, 30 s for a body, 30 s to shut down.
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            shutdown: Duration::from_secs(30),
        }
    }
}

/// Serves `app` on `listener` until `stop` completes, then shuts down within `limits.shutdown`.
/// Returns whether the shutdown finished every connection in time (`false`: some were dropped).
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Timeouts,
    stop: impl Future<Output = ()>,
) -> bool {
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // a failed accept (a connection reset before it was taken, too many files)
                // costs that connection only
                let Ok((tcp, _)) = accepted else { continue };
                // answers leave at once (no Nagle delay behind the client's delayed ACK)
                let _ = tcp.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header)
                    .serve_connection(TokioIo::new(tcp), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(limits.shutdown) => false,
    }
}
