//! Accepting connections for `serve`: HTTP/1.1 through hyper with the server's time limits —
//! a client must send a request's headers within [`Timeouts::header`] of the server waiting
//! for them (an idle keep-alive connection included), and its body within [`Timeouts::body`]
//! (the infer handler reads it) — and a shutdown that stops accepting, lets the requests in
//! flight finish, and after [`Timeouts::shutdown`] drops whatever connections remain (a client
//! holding half-sent headers or a stalled body no longer keeps the server alive). At most
//! [`Limits::connections`] connections are open at once: one more is answered 503 with the
//! protocol's error object and closed before anything of it is read.

use super::metrics::outcome;
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

/// The server's limits on time and on connections.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub times: Timeouts,
    /// The most connections open at once.
    pub connections: usize,
}

/// What a connection beyond [`Limits::connections`] is told before it is closed.
const TOO_MANY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 68\r\nconnection: close\r\n\r\n{\"error\":\"too many connections are open (--max-connections): retry\"}";

/// Connections being told "too many" at once; beyond them a refused connection is closed
/// without a word.
const REFUSING: usize = 64;

/// Tells a connection beyond the limit so (503, the protocol's error object) and closes it:
/// the answer is written, the request the client may already have sent is read and dropped
/// for up to a second (closing a socket with unread bytes resets it, and the client would see
/// a reset instead of the answer), then the socket closes. At most [`REFUSING`] at once.
fn refuse(tcp: tokio::net::TcpStream, refusing: &std::sync::Arc<tokio::sync::Semaphore>) {
    let Ok(slot) = refusing.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tcp;
        let told = async {
            tcp.write_all(TOO_MANY).await?;
            tcp.shutdown().await?;
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), told).await;
        drop(slot);
    });
}

/// The outcome a connection that ended in `e` is counted under, if it was a request: a request
/// head hyper could not parse (hyper has answered it 400, 414 or 431). A header timeout is not
/// counted: hyper's header timer also runs while a kept-alive connection idles between requests.
fn failed(e: &hyper::Error) -> Option<&'static str> {
    (e.is_parse() || e.is_parse_too_large()).then_some(outcome::MALFORMED)
}

/// Serves `app` on `listener` until `stop` completes, then shuts down within the shutdown
/// limit; `count` is told the outcome of every connection turned away
/// (`too_many_connections`) and of every request hyper refused before a handler saw it
/// (`malformed`). Returns whether the shutdown finished every connection in time (`false`:
/// some were dropped).
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    (stop, count): (
        impl Future<Output = ()>,
        impl Fn(&'static str) + Clone + Send + 'static,
    ),
) -> bool {
    let graceful = GracefulShutdown::new();
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let refusing = std::sync::Arc::new(tokio::sync::Semaphore::new(REFUSING));
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // a failed accept (a connection reset before it was taken, too many files)
                // costs that connection only
                let Ok((tcp, _)) = accepted else { continue };
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    count(outcome::TOO_MANY_CONNECTIONS);
                    refuse(tcp, &refusing);
                    continue;
                };
                // answers leave at once (no Nagle delay behind the client's delayed ACK)
                let _ = tcp.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.times.header)
                    .serve_connection(TokioIo::new(tcp), service);
                let conn = graceful.watch(conn);
                let count = count.clone();
                tokio::spawn(async move {
                    if let Some(o) = conn.await.err().as_ref().and_then(failed) {
                        count(o);
                    }
                    drop(permit);
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(limits.times.shutdown) => false,
    }
}
