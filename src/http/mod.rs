//! `lazybatch serve`: the engine behind an HTTP front end speaking the Open Inference Protocol
//! (KServe v2) — health, model metadata and readiness, and `infer` with JSON tensors — with
//! Prometheus metrics at `/metrics`. Handlers ([`front`]) put a request's input in the
//! device's [`Exchange`], send its arrival down the engine's channel and wait; the engine runs
//! on its own thread, unchanged, and its observer ([`metrics`]) answers each request as it
//! leaves (completed with its outputs, or rejected with the protocol's status). A bounded
//! queue answers 503 instead of growing; shutting down stops accepting, answers every admitted
//! request and returns the run's outcome. With the NPU model the answer comes after the
//! modelled latency and carries no computed values (said so in the response's parameters).
//! [`load`] is the other side: an open-loop load generator.

mod extensions;
mod front;
pub mod grpc;
mod listen;
pub mod load;
mod metrics;
mod numbers;
mod protocol;
mod served;
#[cfg(test)]
mod shutdown_tests;
mod state;
mod tonic_refusals;

use crate::device::exchange::Exchange;
use crate::engine::{ChannelArrivals, Outcome};
use crate::error::{Error, Result};
use crate::metrics::KeepRecords;
use crate::run::drive::Arrivals;
use crate::run::{RunSpec, Testbed};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use metrics::{Metrics, OnEngineExit, Waiting};
use state::Front;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

pub use listen::Timeouts;

/// How the server listens and admits.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// Where to serve the protocol over gRPC too (port 0: any free port), if anywhere.
    pub grpc: Option<SocketAddr>,
    /// The most requests admitted and not yet answered; more get 503.
    pub max_queue: usize,
    /// The largest request body accepted (bytes); more get 413.
    pub max_body: usize,
    /// The most bytes the request bodies in flight may reserve before they are read (each its
    /// declared length times the parse's amplification); a request beyond it gets 503 unread.
    pub max_inflight: usize,
    /// The most connections open at once; one more is answered 503 and closed at once.
    pub max_connections: usize,
    /// Header, body and shutdown time limits.
    pub timeouts: Timeouts,
}

/// A running server: its address, and how to stop it.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where it serves gRPC, if it does.
    pub grpc_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    http: Option<std::thread::JoinHandle<Result<()>>>,
    engine: Option<std::thread::JoinHandle<Result<Outcome>>>,
    exchange: Arc<Exchange>,
    metrics: Arc<Metrics>,
    waiting: Arc<Waiting>,
}

/// How many requests a server answered under each outcome (`lazybatch_requests_total`'s
/// counts), readable after it stopped.
#[derive(Clone, Debug)]
pub struct Tally(Arc<Metrics>);

impl Tally {
    /// Each outcome (`completed`, `abandoned`, `bad_request`, `timed_out`, `too_large`,
    /// `queue_full`, `shed`, `shutting_down`) and its count.
    pub fn by_outcome(&self) -> Vec<(&'static str, u64)> {
        self.0.by_outcome()
    }
}

impl Server {
    /// Stops accepting, answers every admitted request, and returns the engine's outcome.
    pub fn shutdown(mut self) -> Result<Outcome> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait()
    }

    /// Stops accepting and stops within the shutdown limit, as a signal would:
    /// [`Server::wait_within_limit`].
    pub fn stop_within_limit(mut self) -> Result<Option<Outcome>> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait_within_limit()
    }

    /// The server's counts by outcome, readable after it stopped.
    pub fn tally(&self) -> Tally {
        Tally(self.metrics.clone())
    }

    /// Requests whose inputs and outputs the device exchange still holds (none once every
    /// request has been answered, also those whose clients went away).
    pub fn held(&self) -> (usize, usize) {
        self.exchange.held()
    }

    /// Waits until the server stops (a signal, or [`Server::shutdown`]) and its engine has
    /// ended.
    pub fn wait(mut self) -> Result<Outcome> {
        self.join_front()?;
        match self.engine.take() {
            Some(h) => h.join().map_err(panicked)?,
            None => Err(Error::Internal("the engine thread is gone".into())),
        }
    }

    /// Waits until the server stops, within its shutdown limit: the engine's outcome, or None
    /// when the engine was still inside a node when the limit passed (it gives up what it
    /// holds at its next node boundary; a node may take longer than the limit). The front
    /// end's counts ([`Server::tally`]) hold every request either way.
    pub fn wait_within_limit(mut self) -> Result<Option<Outcome>> {
        self.join_front()?;
        match self.engine.take() {
            Some(h) if h.is_finished() => h.join().map_err(panicked)?.map(Some),
            Some(_) => {
                self.waiting.close_books();
                Ok(None)
            }
            None => Err(Error::Internal("the engine thread is gone".into())),
        }
    }

    fn join_front(&mut self) -> Result<()> {
        if let Some(h) = self.http.take() {
            h.join().map_err(panicked)??;
        }
        Ok(())
    }
}

fn panicked(e: Box<dyn std::any::Any + Send>) -> Error {
    Error::Internal(format!("a server thread panicked: {e:?}"))
}

/// The part of `--shutdown-timeout-s` kept for the engine to reach a node boundary and give up
/// what it holds, after the connections' share: a tenth of it, at most a second.
fn engine_share(shutdown: std::time::Duration) -> std::time::Duration {
    (shutdown / 10).min(std::time::Duration::from_secs(1))
}

/// Starts serving `bench` under `cfg` (its policy, SLA, maximum batch): the engine on one
/// thread, the HTTP front end on another. Returns once the address is bound.
pub fn start(bench: Testbed, cfg: RunSpec, opts: &ServeOptions) -> Result<Server> {
    let mut models = (0..bench.model.parts.len())
        .map(|p| front::describe(&bench.model, p))
        .collect::<Result<Vec<_>>>()?;
    // each model is called by its name: one listed twice could never be reached
    for (k, h) in models.iter().enumerate() {
        if models[..k].iter().any(|o| o.name == h.name) {
            return Err(Error::invalid(
                "--model",
                format!(
                    "'{}' is listed twice: a server calls each model by its name",
                    h.name
                ),
            ));
        }
    }
    let slas = cfg.colocated.as_ref().map(|c| c.slas());
    for (k, h) in models.iter_mut().enumerate() {
        // a model device computes nothing on the values: any bits are taken
        h.input.finite = !bench.is_virtual();
        h.sla = slas.and_then(|s| s.get(k)).map(|s| s.nanos());
    }
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|e| Error::listen(opts.listen, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("--listen", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("--listen", e))?;
    let grpc_listener = match opts.grpc {
        None => None,
        Some(at) => {
            let l = std::net::TcpListener::bind(at).map_err(|e| Error::listen(at, e))?;
            l.set_nonblocking(true)
                .map_err(|e| Error::io("--grpc-listen", e))?;
            Some(l)
        }
    };
    let grpc_addr = match &grpc_listener {
        None => None,
        Some(l) => Some(l.local_addr().map_err(|e| Error::io("--grpc-listen", e))?),
    };
    let (tx, rx) = mpsc::channel();
    let origin = Instant::now();
    let exchange = Arc::new(Exchange::new());
    let metrics = Arc::new(Metrics::new(&bench.model, cfg.max_batch.get()));
    let tally = metrics.clone();
    let waiting = Arc::new(Waiting::new(exchange.clone(), metrics.clone()));
    let front = Arc::new(Front {
        models,
        emulated: bench.is_virtual(),
        device: bench.description(),
        policy: cfg.policy.build().name(),
        tx: Mutex::new(Some(tx)),
        origin,
        exchange: exchange.clone(),
        waiting: waiting.clone(),
        next_key: AtomicU64::new(1),
        admitted: AtomicUsize::new(0),
        inflight: AtomicUsize::new(0),
        max_inflight: opts.max_inflight,
        max_queue: opts.max_queue,
        closing: AtomicBool::new(false),
        metrics,
        max_batch: cfg.max_batch.get(),
        max_body: opts.max_body,
        body_timeout: opts.timeouts.body,
    });
    let held = exchange.clone();
    // set once the connections' share of the shutdown limit has passed: the engine then gives
    // up every request it holds at its next node boundary
    let give_up = waiting.give_up_flag();
    let engine_waiting = waiting.clone();
    let books = waiting.clone();
    let giving_up = give_up.clone();
    let engine = std::thread::spawn(move || {
        let waiting = engine_waiting;
        let _exit = OnEngineExit(waiting.clone());
        let mut src = ChannelArrivals::new(rx, origin, 0).giving_up_on(giving_up);
        let arrivals = Arrivals::FrontEnd {
            channel: &mut src,
            observer: waiting.as_ref(),
            exchange,
        };
        bench.drive(&cfg, KeepRecords::default(), arrivals)
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let (max_body, timeouts) = (opts.max_body, opts.timeouts);
    let engine_share = engine_share(timeouts.shutdown);
    // the connections may take the shutdown limit less the engine's share
    let drain = Timeouts {
        shutdown: timeouts.shutdown.saturating_sub(engine_share),
        ..timeouts
    };
    let max_connections = opts.max_connections;
    let http = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::io("the HTTP runtime", e))?;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| Error::io("--listen", e))?;
            let app = router(front.clone(), max_body);
            let closing = front.clone();
            let (closed, on_close) = tokio::sync::watch::channel(false);
            let shutdown = async move {
                tokio::select! {
                    _ = stopped => {}
                    _ = signal() => {}
                    _ = closing.waiting.gone.notified() => {}
                }
                // a second signal does not wait for anything
                tokio::spawn(async {
                    signal().await;
                    eprintln!("serve: a second signal: exiting at once");
                    std::process::exit(130);
                });
                // new requests get 503 while the admitted ones finish
                closing.closing.store(true, Ordering::SeqCst);
                let _ = closed.send(true);
            };
            let grpc = match grpc_listener {
                None => None,
                Some(l) => {
                    let l = tokio::net::TcpListener::from_std(l)
                        .map_err(|e| Error::io("--grpc-listen", e))?;
                    let serving = grpc_serve(front.clone(), l, (max_body, drain), on_close);
                    Some(tokio::spawn(serving))
                }
            };
            let count = {
                let m = front.metrics.clone();
                move |outcome: &'static str| m.count(None, outcome)
            };
            let limits = listen::Limits {
                times: drain,
                connections: max_connections,
            };
            let mut finished = listen::serve(listener, app, limits, (shutdown, count)).await;
            if let Some(g) = grpc {
                finished &= g.await.unwrap_or(false);
            }
            if !finished {
                eprintln!(
                    "serve: connections still open {:.1} s after the shutdown began were dropped (--shutdown-timeout-s)",
                    drain.shutdown.as_secs_f64()
                );
            }
            // every handler has answered or is gone: what the engine still holds has no
            // client; it gives it up at its next node boundary, and closing the channel ends it
            give_up.store(true, Ordering::SeqCst);
            front.tx.lock().map(|mut t| t.take()).ok();
            let engine_done = async {
                while !front.waiting.has_stopped() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            };
            if tokio::time::timeout(engine_share, engine_done).await.is_err() {
                eprintln!(
                    "serve: the engine was still inside a node {:.1} s after the shutdown began: not waited for (it gives up what it holds at its next node boundary)",
                    timeouts.shutdown.as_secs_f64()
                );
            }
            Ok(())
        })
    });
    Ok(Server {
        addr,
        grpc_addr,
        stop: Some(stop),
        http: Some(http),
        engine: Some(engine),
        exchange: held,
        metrics: tally,
        waiting: books,
    })
}

/// Serves gRPC on `listener` until `closing` turns true, then lets the calls in flight finish
/// within the shutdown limit. Returns whether they did (`false`: some were dropped).
async fn grpc_serve(
    front: Arc<Front>,
    listener: tokio::net::TcpListener,
    (max_body, timeouts): (usize, Timeouts),
    mut closing: tokio::sync::watch::Receiver<bool>,
) -> bool {
    use tonic::codec::CompressionEncoding::{Deflate, Gzip};
    // a compressed message is inflated up to --max-body-mib (past it: RESOURCE_EXHAUSTED, so a
    // small bomb cannot take the memory a large message may not)
    let refusals = tonic_refusals::CountRefusals(front.metrics.clone());
    let service = grpc::GrpcInferenceServiceServer::new(grpc::Grpc(front))
        .accept_compressed(Gzip)
        .accept_compressed(Deflate)
        .max_decoding_message_size(max_body)
        .max_encoding_message_size(usize::MAX);
    // the standard health service (grpc.health.v1: grpc_health_probe, Kubernetes' gRPC
    // probes): the server ("") and the inference service SERVING until the shutdown begins
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<grpc::GrpcInferenceServiceServer<grpc::Grpc>>()
        .await;
    let (told, heard) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(timeouts.header))
        .layer(refusals)
        .add_service(health_service)
        .add_service(service)
        .serve_with_incoming_shutdown(
            // answers leave at once (no Nagle delay behind the client's delayed ACK: 40 ms a
            // call otherwise)
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                let _ = heard.await;
            },
        );
    let mut server = std::pin::pin!(server);
    tokio::select! {
        _ = &mut server => return true,
        _ = closing.wait_for(|c| *c) => {}
    }
    // not ready while the calls in flight finish, as the HTTP readiness says
    health
        .set_not_serving::<grpc::GrpcInferenceServiceServer<grpc::Grpc>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    let _ = told.send(());
    tokio::select! {
        done = server => done.is_ok(),
        () = tokio::time::sleep(timeouts.shutdown) => false,
    }
}

/// SIGINT or SIGTERM.
async fn signal() {
    let int = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = int => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = int.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = int.await;
    }
}

fn router(front: Arc<Front>, max_body: usize) -> Router {
    let mut r = Router::new()
        .route("/v2", get(extensions::server_metadata))
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(front::ready))
        .route("/v2/models/stats", get(extensions::all_stats));
    // every model route, also under /versions/{version}/ (a version other than 1 is a 404)
    for base in ["/v2/models/{name}", "/v2/models/{name}/versions/{version}"] {
        r = r
            .route(base, get(front::metadata))
            .route(&format!("{base}/ready"), get(front::model_ready))
            .route(&format!("{base}/infer"), post(front::infer))
            .route(&format!("{base}/config"), get(extensions::config))
            .route(&format!("{base}/stats"), get(extensions::stats));
    }
    r.route("/metrics", get(front::metrics))
        .fallback(extensions::no_route)
        .method_not_allowed_fallback(extensions::wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(front)
}
