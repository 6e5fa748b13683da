//! `lazybatch serve`: the engine behind an HTTP front end speaking the Open Inference Protocol
//! (KServe v2) — health, model metadata and readiness, and `infer` with JSON tensors — with
//! Prometheus metrics at `/metrics`. Handlers (tokio + axum) put a request's input in the
//! device's [`Exchange`], send its arrival down the engine's channel and wait; the engine runs
//! on its own thread, unchanged, and its [`Observer`] answers each request as it leaves
//! (completed with its outputs, or rejected with the protocol's status). A bounded queue
//! answers 503 instead of growing; shutting down stops accepting, answers every admitted
//! request and returns the run's outcome. With the NPU model the answer comes after the
//! modelled latency and carries no computed values (said so in the response's parameters).

mod protocol;

use crate::bench::{Bench, RunConfig};
use crate::device::exchange::Exchange;
use crate::engine::{Left, Observer, Outcome};
use crate::error::{Error, Result};
use crate::graph::op::Op;
use crate::runtime::{Rejection, Request};
use crate::traffic::Arrival;
use crate::wall::{stamped, ChannelArrivals};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use protocol::{error, InferRequest, Tensor};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How the server listens and admits.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// The most requests admitted and not yet answered; more get 503.
    pub max_queue: usize,
    /// The largest request body accepted (bytes); more get 413.
    pub max_body: usize,
}

/// One model's input and output as the protocol describes them.
#[derive(Clone, Debug)]
struct Io {
    name: String,
    datatype: &'static str,
    /// One request's shape (the batch axis of 1 first).
    shape: Vec<usize>,
}

/// How a request left, as its handler hears it.
enum Answer {
    Done {
        outputs: Option<Vec<f32>>,
        latency: Duration,
    },
    Refused(Rejection),
}

/// The handlers' shared state.
struct Front {
    model: String,
    input: Io,
    output: Io,
    emulated: bool,
    tx: Mutex<Option<mpsc::Sender<Arrival>>>,
    origin: Instant,
    exchange: Arc<Exchange>,
    waiting: Arc<Waiting>,
    next_key: AtomicU64,
    admitted: AtomicUsize,
    max_queue: usize,
    closing: AtomicBool,
    metrics: Metrics,
}

/// Handlers waiting for their request, by key: the engine's observer answers them.
#[derive(Debug)]
struct Waiting {
    replies: Mutex<HashMap<u64, oneshot::Sender<(Left, Duration)>>>,
    exchange: Arc<Exchange>,
}

impl Observer for Waiting {
    fn left(&self, q: &Request, how: Left) {
        let tx = self.replies.lock().ok().and_then(|mut m| m.remove(&q.key));
        let latency = match how {
            Left::Completed(at) => Duration::from_nanos(at.saturating_sub(q.arrival).0),
            Left::Rejected(_) => Duration::ZERO,
        };
        let heard = tx.is_some_and(|tx| tx.send((how, latency)).is_ok());
        if !heard {
            // the client went away: drop what the exchange still holds for it
            self.exchange.take_input(q.key);
            self.exchange.take_output(q.key);
        } else if matches!(how, Left::Rejected(_)) {
            // turned away before its input node ran
            self.exchange.take_input(q.key);
        }
    }
}

/// What `/metrics` exports.
struct Metrics {
    registry: Registry,
    requests: Family<Vec<(String, String)>, Counter>,
    latency: Histogram,
    in_server: Gauge,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("lazybatch");
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        let latency = Histogram::new(exponential_buckets(1e-4, 2.0, 20));
        let in_server = Gauge::default();
        registry.register(
            "requests",
            "Requests by model and outcome",
            requests.clone(),
        );
        registry.register(
            "request_latency_seconds",
            "End-to-end latency of completed requests (arrival to completion, in the engine)",
            latency.clone(),
        );
        registry.register(
            "requests_in_server",
            "Requests admitted and not yet answered",
            in_server.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            in_server,
        }
    }

    fn count(&self, model: &str, outcome: &str) {
        let labels = vec![
            ("model".to_string(), model.to_string()),
            ("outcome".to_string(), outcome.to_string()),
        ];
        self.requests.get_or_create(&labels).inc();
    }
}

/// A running server: its address, and how to stop it.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    http: Option<std::thread::JoinHandle<Result<()>>>,
    engine: Option<std::thread::JoinHandle<Result<Outcome>>>,
}

impl Server {
    /// Stops accepting, answers every admitted request, and returns the engine's outcome.
    pub fn shutdown(mut self) -> Result<Outcome> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait()
    }

    /// Waits until the server stops (a signal, or [`Server::shutdown`]).
    pub fn wait(mut self) -> Result<Outcome> {
        let joined = |e| Error::Internal(format!("a server thread panicked: {e:?}"));
        if let Some(h) = self.http.take() {
            h.join().map_err(joined)??;
        }
        match self.engine.take() {
            Some(h) => h.join().map_err(joined)?,
            None => Err(Error::Internal("the engine thread is gone".into())),
        }
    }
}

/// The model's input and output in the protocol's terms (one request: batch 1).
fn describe(bench: &Bench) -> Result<(Io, Io)> {
    let m = &bench.model;
    let first = m
        .nodes
        .first()
        .ok_or_else(|| Error::invalid("serve", "an empty model"))?;
    let last = m
        .nodes
        .last()
        .ok_or_else(|| Error::invalid("serve", "an empty model"))?;
    if m.parts.len() > 1 || m.is_seq2seq() {
        return Err(Error::invalid(
            "serve",
            "serves one static model (seq2seq and co-located models are not served yet)",
        ));
    }
    let Op::Input { shape, tokens, .. } = &first.op else {
        return Err(Error::invalid(
            "serve",
            "the model's first node is not its input",
        ));
    };
    let enc = m.ref_lengths().enc;
    let rows = first.out.rows.count(enc) as usize;
    let in_shape: Vec<usize> = if *tokens {
        vec![1, rows]
    } else {
        std::iter::once(1).chain(shape.iter().copied()).collect()
    };
    let out_rows = last.out.rows.count(enc) as usize;
    let out_shape: Vec<usize> = std::iter::once(1)
        .chain((out_rows > 1).then_some(out_rows))
        .chain(last.out.feat.iter().copied())
        .collect();
    Ok((
        Io {
            name: first.name.clone(),
            datatype: if *tokens { "INT64" } else { "FP32" },
            shape: in_shape,
        },
        Io {
            name: last.name.clone(),
            datatype: "FP32",
            shape: out_shape,
        },
    ))
}

/// Starts serving `bench` under `cfg` (its policy, SLA, maximum batch): the engine on one
/// thread, the HTTP front end on another. Returns once the address is bound.
pub fn start(mut bench: Bench, cfg: RunConfig, opts: &ServeOptions) -> Result<Server> {
    let (input, output) = describe(&bench)?;
    let listener = std::net::TcpListener::bind(opts.listen)
        .map_err(|e| Error::invalid("--listen", format!("{}: {e}", opts.listen)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("--listen", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("--listen", e))?;
    let (tx, rx) = mpsc::channel();
    let origin = Instant::now();
    let exchange = Arc::new(Exchange::new());
    let waiting = Arc::new(Waiting {
        replies: Mutex::default(),
        exchange: exchange.clone(),
    });
    let front = Arc::new(Front {
        model: bench.model.name.clone(),
        input,
        output,
        emulated: bench.is_virtual(),
        tx: Mutex::new(Some(tx)),
        origin,
        exchange: exchange.clone(),
        waiting: waiting.clone(),
        next_key: AtomicU64::new(1),
        admitted: AtomicUsize::new(0),
        max_queue: opts.max_queue,
        closing: AtomicBool::new(false),
        metrics: Metrics::new(),
    });
    let engine = std::thread::spawn(move || {
        let mut src = ChannelArrivals::new(rx, origin, 0);
        bench.serve_front_end(&cfg, waiting.as_ref(), exchange, &mut src)
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let max_body = opts.max_body;
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
            let shutdown = async move {
                tokio::select! {
                    _ = stopped => {}
                    _ = signal() => {}
                }
                // new requests get 503 while the admitted ones finish
                closing.closing.store(true, Ordering::SeqCst);
            };
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
                .map_err(|e| Error::io("serving HTTP", e));
            // every handler has answered: closing the channel lets the engine drain and end
            front.tx.lock().map(|mut t| t.take()).ok();
            served
        })
    });
    Ok(Server {
        addr,
        stop: Some(stop),
        http: Some(http),
        engine: Some(engine),
    })
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
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{name}", get(metadata))
        .route("/v2/models/{name}/ready", get(model_ready))
        .route("/v2/models/{name}/infer", post(infer))
        .route("/metrics", get(metrics))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(front)
}

async fn ready(State(f): State<Arc<Front>>) -> StatusCode {
    if f.closing.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

fn unknown(f: &Front, name: &str) -> Option<Response> {
    (name != f.model).then(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("unknown model '{name}' (this server serves '{}')", f.model),
        )
    })
}

async fn model_ready(State(f): State<Arc<Front>>, Path(name): Path<String>) -> Response {
    if let Some(r) = unknown(&f, &name) {
        return r;
    }
    ready(State(f)).await.into_response()
}

async fn metadata(State(f): State<Arc<Front>>, Path(name): Path<String>) -> Response {
    if let Some(r) = unknown(&f, &name) {
        return r;
    }
    let io = |t: &Io| json!({"name": t.name, "datatype": t.datatype, "shape": t.shape});
    axum::Json(json!({
        "name": f.model,
        "versions": ["1"],
        "platform": "lazybatch",
        "inputs": [io(&f.input)],
        "outputs": [io(&f.output)],
    }))
    .into_response()
}

async fn metrics(State(f): State<Arc<Front>>) -> Response {
    let mut text = String::new();
    match encode(&mut text, &f.metrics.registry) {
        Ok(()) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("metrics: {e}")),
    }
}

/// Counts a request admitted until its handler returns (also when the client goes away).
struct Admitted<'a>(&'a Front);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.admitted.fetch_sub(1, Ordering::SeqCst);
        self.0.metrics.in_server.dec();
    }
}

async fn infer(
    State(f): State<Arc<Front>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = unknown(&f, &name) {
        return r;
    }
    let values = match serde_json::from_slice::<InferRequest>(&body)
        .map_err(|e| format!("malformed request body: {e}"))
        .and_then(|r| r.one_input(&f.input.name, f.input.datatype, &f.input.shape))
    {
        Ok(v) => v,
        Err(msg) => {
            f.metrics.count(&f.model, "bad_request");
            return error(StatusCode::BAD_REQUEST, msg);
        }
    };
    if f.closing.load(Ordering::SeqCst) {
        f.metrics.count(&f.model, "shutting_down");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down".into(),
        );
    }
    if f.admitted.fetch_add(1, Ordering::SeqCst) >= f.max_queue {
        f.admitted.fetch_sub(1, Ordering::SeqCst);
        f.metrics.count(&f.model, "queue_full");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} requests are in the server (--max-queue)", f.max_queue),
        );
    }
    f.metrics.in_server.inc();
    let _admitted = Admitted(&f);
    let key = f.next_key.fetch_add(1, Ordering::SeqCst);
    let (reply, answer) = oneshot::channel();
    if let Ok(mut w) = f.waiting.replies.lock() {
        w.insert(key, reply);
    }
    f.exchange.put_input(key, values);
    let arrival = stamped(
        Arrival {
            key: Some(key),
            ..Arrival::default()
        },
        f.origin,
    );
    let sent =
        f.tx.lock()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.send(arrival).is_ok()))
            .unwrap_or(false);
    if !sent {
        f.exchange.take_input(key);
        if let Ok(mut w) = f.waiting.replies.lock() {
            w.remove(&key);
        }
        f.metrics.count(&f.model, "shutting_down");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down".into(),
        );
    }
    let answer = match answer.await {
        Ok((Left::Completed(_), latency)) => Answer::Done {
            outputs: f.exchange.take_output(key),
            latency,
        },
        Ok((Left::Rejected(why), _)) => Answer::Refused(why),
        Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the engine stopped before answering".into(),
            )
        }
    };
    respond(&f, key, answer)
}

fn respond(f: &Front, key: u64, answer: Answer) -> Response {
    match answer {
        Answer::Refused(why) => {
            let (outcome, msg) = match why {
                Rejection::QueueFull => ("queue_full", "the engine's pending queue is full"),
                Rejection::Shed => ("shed", "its deadline could no longer be met (--shed)"),
            };
            f.metrics.count(&f.model, outcome);
            error(StatusCode::SERVICE_UNAVAILABLE, msg.into())
        }
        Answer::Done { outputs, latency } => {
            f.metrics.count(&f.model, "completed");
            f.metrics.latency.observe(latency.as_secs_f64());
            let n: usize = f.output.shape.iter().product();
            let data = outputs.unwrap_or_else(|| vec![0.0; n]);
            let mut parameters = json!({"latency_ms": latency.as_secs_f64() * 1e3});
            if f.emulated {
                parameters["timing_emulation"] = json!(
                    "the NPU model's latency for the batch this request ran in; no values computed (zeros)"
                );
            }
            axum::Json(json!({
                "model_name": f.model,
                "id": key.to_string(),
                "outputs": [Tensor {
                    name: f.output.name.clone(),
                    datatype: f.output.datatype.into(),
                    shape: f.output.shape.clone(),
                    data,
                }],
                "parameters": parameters,
            }))
            .into_response()
        }
    }
}
