//! `lazybatch load`: an open-loop load generator for a server speaking the Open Inference
//! Protocol. It sends the same arrivals as `run` draws for a model, rate, process and seed
//! (their instants, sequence lengths and SLA classes), each at its instant whatever the earlier
//! ones are doing, with at most `concurrency` requests in flight (an arrival beyond that is
//! not sent and counted), and measures each request from its scheduled instant to its answer,
//! so that a slow server cannot slow the offered load down (no coordinated omission). What it
//! keeps is a [`Recorder`], the one `run` fills, and the server's engine counters read from
//! `/metrics` before and after, so the same table, JSON and `.hgrm` come out.

use super::front::describe;
use super::protocol::{le_bytes, tensor, Io, HEADER_LENGTH};
use super::state::Hosted;
use crate::device::exchange::lock;
use crate::device::weights::fill_input;
use crate::engine::Counters;
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::metrics::{KeepRecords, Recorder};
use crate::runtime::{Rejection, Request, RequestId};
use crate::time::Nanos;
use crate::traffic::{Arrival, Traffic};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Where to send and how hard.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The server's base URL (`http://host:port`).
    pub url: String,
    /// The most requests in flight; an arrival beyond them is not sent (counted).
    pub concurrency: usize,
    /// The SLA of requests whose class names none (their deadline: arrival + SLA).
    pub sla: Nanos,
    /// SLA classes (1: none), each tallied apart.
    pub classes: usize,
    /// Seed of the input values.
    pub seed: u64,
    /// Send tensors as JSON numbers instead of the binary tensor extension.
    pub json_tensors: bool,
    /// The most a request may take, from sending to its whole answer (then: `timed_out`).
    pub timeout: Duration,
    /// The largest answer read (bytes; more: `too_large`, the rest not read).
    pub max_response: usize,
}

/// Requests that got no usable answer, by why (each counted once, none in the latency
/// statistics: the server never answered them, or answered with an error).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failures {
    /// No answer within `--timeout-s`.
    pub timed_out: u64,
    /// The connection failed (refused, reset, closed mid-answer).
    pub transport: u64,
    /// Answered 4xx (a malformed request, or another model).
    pub http_4xx: u64,
    /// Answered 5xx other than the server's own turn-aways (its 503s for a full queue or a
    /// shed request, which are counted as the server's rejections).
    pub http_5xx: u64,
    /// An answer larger than `--max-response-mib`.
    pub too_large: u64,
}

impl Failures {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.timed_out + self.transport + self.http_4xx + self.http_5xx + self.too_large
    }
}

/// What the load generator saw.
#[derive(Debug)]
pub struct LoadOutcome {
    /// Every request's latency (scheduled instant to answer) and how it left.
    pub record: Recorder,
    /// The server engine's counters over the run (executions, batch sizes, preemptions,
    /// merges), from `/metrics`; zero where the server exports none.
    pub counters: Counters,
    /// The server's own mean latency over the run (arrival in its engine to completion), from
    /// `/metrics`; the difference from the client's is the network and HTTP's share.
    pub server_mean_ms: Option<f64>,
    /// Arrivals not sent: `concurrency` requests were already in flight (not in `record`).
    pub not_sent: u64,
    /// Requests sent that got no usable answer, by why (not in `record`).
    pub failed: Failures,
    /// The first error, if any.
    pub first_error: Option<String>,
    /// The server's device (and address), from its metadata.
    pub device: String,
    /// The server's policy, from its metadata.
    pub policy: String,
    /// Seconds from the first arrival's instant to the last answer.
    pub wall_s: f64,
}

/// How one request left, as the client saw it.
enum Seen {
    Answered,
    Refused(Rejection),
    Failed(Failure, String),
    NotSent,
}

/// Why a sent request got no usable answer ([`Failures`]' kinds).
#[derive(Clone, Copy, Debug)]
enum Failure {
    TimedOut,
    Transport,
    Http4xx,
    Http5xx,
    TooLarge,
}

/// Sends `traffic` for `model` to the server at `opts.url`, open loop, and waits for every
/// answer.
pub fn drive(model: &Model, traffic: Traffic, opts: &LoadOptions) -> Result<LoadOutcome> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("the load generator's runtime", e))?;
    let hosted = describe(model, 0)?;
    let input = hosted.input.clone();
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    // each arrival is sent once: a request the client retried on a fresh connection (hyper's
    // default when a pooled one closes first) was counted twice by a server that refuses
    // connections, and a refusal the retry then passed was hidden from the client's counts;
    // idle connections are let go before a server's idle timeout closes them (lazybatch
    // serve's: 10 s), so that no request meets one closing under it
    let client: Http = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(opts.concurrency)
        .pool_idle_timeout(std::time::Duration::from_secs(4))
        .retry_canceled_requests(false)
        .build(connector);
    let base = opts.url.trim_end_matches('/').to_string();
    // the server's metadata and metrics within the request timeout too (a silent server
    // is said so, not waited on)
    let within = |what: &str| {
        Error::invalid(
            "--url",
            format!(
                "{base}: no {what} within {} s (--timeout-s)",
                opts.timeout.as_secs_f64()
            ),
        )
    };
    let (device, policy) = rt
        .block_on(async {
            tokio::time::timeout(
                opts.timeout,
                check_metadata(&client, &base, &model.name, &input),
            )
            .await
        })
        .map_err(|_| within("metadata"))??;
    let scraped = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            tokio::time::timeout(opts.timeout, scrape(&client, &base, &model.name)).await
        })
        .unwrap_or_default()
    };
    let before = scraped(&rt);
    let uri: hyper::Uri = format!("{base}/v2/models/{}/infer", model.name)
        .parse()
        .map_err(|e| Error::invalid("--url", format!("{base}: {e}")))?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<(Arrival, Seen, Nanos)>>> =
        Arc::new(Mutex::new(Vec::with_capacity(traffic.expected)));
    let bodies = Bodies::of(&hosted, opts);
    let origin = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, a) in traffic.arrivals.enumerate() {
        // this thread keeps the schedule (the OS sleeps to tens of µs; tokio's timer to 1 ms)
        let due = origin + Duration::from_nanos(a.time.0);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // reap what has finished, so the set stays as small as what is in flight
        while tasks.try_join_next().is_some() {}
        if in_flight.fetch_add(1, Ordering::SeqCst) >= opts.concurrency {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            lock(&seen).push((a, Seen::NotSent, a.time));
            continue;
        }
        let body = bodies.body(i as u64, &a);
        let (client, uri, seen, in_flight) =
            (client.clone(), uri.clone(), seen.clone(), in_flight.clone());
        let (timeout, cap) = (opts.timeout, opts.max_response);
        tasks.spawn_on(
            async move {
                let how = match tokio::time::timeout(timeout, send(&client, uri, body, cap)).await {
                    Ok(how) => how,
                    Err(_) => Seen::Failed(
                        Failure::TimedOut,
                        format!("no answer within {} s (--timeout-s)", timeout.as_secs_f64()),
                    ),
                };
                let at = Nanos(origin.elapsed().as_nanos() as u64);
                in_flight.fetch_sub(1, Ordering::SeqCst);
                lock(&seen).push((a, how, at));
            },
            rt.handle(),
        );
    }
    rt.block_on(async { while tasks.join_next().await.is_some() {} });
    let wall_s = origin.elapsed().as_secs_f64();
    let after = scraped(&rt);
    let seen = std::mem::take(&mut *lock(&seen));
    let mut out = tally(seen, opts)?;
    out.counters = delta(&before.0, &after.0);
    out.server_mean_ms = server_mean_ms(before.1, after.1);
    (out.device, out.policy) = (device, policy);
    out.wall_s = wall_s;
    Ok(out)
}

/// The server's mean latency (ms) over the run, from its latency histogram's (sum in s,
/// count) scraped before and after it; None when it counted no request meanwhile.
fn server_mean_ms(before: (f64, f64), after: (f64, f64)) -> Option<f64> {
    let (sum, count) = (after.0 - before.0, after.1 - before.1);
    (count > 0.0).then(|| 1e3 * sum / count)
}

/// Every request into a [`Recorder`], in arrival order.
fn tally(mut seen: Vec<(Arrival, Seen, Nanos)>, opts: &LoadOptions) -> Result<LoadOutcome> {
    seen.sort_by_key(|(a, _, _)| a.time);
    let mut record = Recorder::new((1, opts.classes.max(1)), KeepRecords::default())?;
    let (mut not_sent, mut failed, mut first_error) = (0, Failures::default(), None);
    let mut id = 0u32;
    for (a, how, at) in seen {
        // what the server answered goes into the record; what was never sent, or got no
        // usable answer, is counted under its own name
        let answered = match how {
            Seen::Answered => Ok(true),
            Seen::Refused(why) => Err(why),
            Seen::NotSent => {
                not_sent += 1;
                continue;
            }
            Seen::Failed(kind, e) => {
                *match kind {
                    Failure::TimedOut => &mut failed.timed_out,
                    Failure::Transport => &mut failed.transport,
                    Failure::Http4xx => &mut failed.http_4xx,
                    Failure::Http5xx => &mut failed.http_5xx,
                    Failure::TooLarge => &mut failed.too_large,
                } += 1;
                first_error.get_or_insert(e);
                continue;
            }
        };
        let mut q = Request::new(RequestId(id), a.time, a.sla.unwrap_or(opts.sla), a.len);
        id = id
            .checked_add(1)
            .ok_or_else(|| Error::invalid("--requests", "too many"))?;
        q.class = a.class;
        record.arrive(&q);
        match answered {
            Ok(_) => {
                q.completion = Some(at.max(a.time));
                record.complete(q)?;
            }
            Err(why) => record.reject(q, why)?,
        }
    }
    record.finish()?;
    Ok(LoadOutcome {
        record,
        counters: Counters::default(),
        server_mean_ms: None,
        not_sent,
        failed,
        first_error,
        device: String::new(),
        policy: String::new(),
        wall_s: 0.0,
    })
}

/// One inference call; an answer longer than `cap` bytes is not read past it.
async fn send(
    client: &Http,
    uri: hyper::Uri,
    (body, json_len): (Bytes, Option<usize>),
    cap: usize,
) -> Seen {
    let req = match json_len {
        Some(n) => hyper::Request::post(uri)
            .header("content-type", "application/octet-stream")
            .header(HEADER_LENGTH, n),
        None => hyper::Request::post(uri).header("content-type", "application/json"),
    };
    let req = req.body(Full::new(body));
    let req = match req {
        Ok(r) => r,
        Err(e) => return Seen::Failed(Failure::Transport, e.to_string()),
    };
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => return Seen::Failed(Failure::Transport, unreachable_why(&e)),
    };
    let status = resp.status().as_u16();
    let body = http_body_util::Limited::new(resp.into_body(), cap)
        .collect()
        .await
        .map(|b| b.to_bytes());
    verdict(status, body, cap)
}

/// How a request left, from its answer's status and its body as read (at most `cap` bytes).
fn verdict(
    status: u16,
    body: std::result::Result<Bytes, Box<dyn std::error::Error + Send + Sync>>,
    cap: usize,
) -> Seen {
    let body = match body {
        Ok(b) => b,
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Seen::Failed(
                Failure::TooLarge,
                format!("{status}: an answer over {cap} bytes (--max-response-mib)"),
            )
        }
        Err(e) => return Seen::Failed(Failure::Transport, e.to_string()),
    };
    // the start of an error's body is enough to say what it was
    let text = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    match status {
        200 => Seen::Answered,
        503 if body.starts_with(br#"{"error":"shed"#) => Seen::Refused(Rejection::Shed),
        503 if body.starts_with(br#"{"error":"queue full"#) => Seen::Refused(Rejection::QueueFull),
        // (the wait ahead is the server's; an open-loop client does not retry)
        429 if body.starts_with(br#"{"error":"not admitted"#) => {
            Seen::Refused(Rejection::NotAdmitted(Nanos::ZERO))
        }
        s @ 400..=499 => Seen::Failed(Failure::Http4xx, format!("{s}: {}", text())),
        s => Seen::Failed(Failure::Http5xx, format!("{s}: {}", text())),
    }
}

/// GET `uri`: its status and body (an error names the URL: `--url`).
async fn get(client: &Http, uri: &str) -> Result<(hyper::StatusCode, Bytes)> {
    let bad = |e: String| Error::invalid("--url", format!("{uri}: {e}"));
    let u: hyper::Uri = uri.parse().map_err(|e| bad(format!("{e}")))?;
    let resp = client.get(u).await.map_err(|e| Error::Connect {
        url: uri.to_string(),
        why: unreachable_why(&e),
    })?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| bad(e.to_string()))?;
    Ok((status, body.to_bytes()))
}

/// Why a request got no answer, in words: connection refused, host not found, timed out, or
/// the deepest cause's own text.
fn unreachable_why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = e.to_string();
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            let text = io.to_string();
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    "connection refused: nothing listens there (is `lazybatch serve` running on that address and port?)".into()
                }
                std::io::ErrorKind::TimedOut => "timed out".into(),
                _ if text.contains("lookup address") || text.contains("not known") => {
                    format!("host not found ({text})")
                }
                _ => text,
            };
        }
        deepest = err.to_string();
        at = err.source();
    }
    deepest
}

/// GET `uri` as JSON (an error unless 200).
async fn get_json(client: &Http, uri: &str) -> Result<Value> {
    let (status, body) = get(client, uri).await?;
    if !status.is_success() {
        return Err(Error::invalid(
            "--url",
            format!("{uri}: {status} {}", String::from_utf8_lossy(&body)),
        ));
    }
    serde_json::from_slice(&body).map_err(|e| Error::invalid("--url", format!("{uri}: {e}")))
}

/// Whether a server's input shape `served` takes requests of this model's shape `ours`: the
/// same, except that a server batching along the first axis (Triton's, `max_batch_size` > 0)
/// says -1 there, and each request is sent with a batch of 1 as `ours` says.
fn shape_fits(served: &[i64], ours: &[i64]) -> bool {
    served.len() == ours.len()
        && served
            .iter()
            .zip(ours)
            .enumerate()
            .all(|(k, (&s, &o))| s == o || (k == 0 && s == -1 && o == 1))
}

/// True when the server's description of its input (`served`, from its metadata) is the
/// local model's `input`: its name, data type and shape.
fn serves_as(served: &Value, input: &Io) -> bool {
    let shape: Vec<i64> = serde_json::from_value(served["shape"].clone()).unwrap_or_default();
    served["name"] == input.name.as_str()
        && served["datatype"] == input.datatype
        && shape_fits(&shape, &input.shape)
}

/// The server serves `name` with the input `input` describes; its device and policy.
async fn check_metadata(
    client: &Http,
    base: &str,
    name: &str,
    input: &Io,
) -> Result<(String, String)> {
    let meta = get_json(client, &format!("{base}/v2/models/{name}")).await?;
    let served = &meta["inputs"][0];
    if !serves_as(served, input) {
        return Err(Error::invalid(
            "--model",
            format!(
                "the server's '{name}' takes {served}, not the local model's {} {} {:?} (give the same --model, --width, --res as serve)",
                input.name, input.datatype, input.shape
            ),
        ));
    }
    let p = &meta["parameters"];
    Ok((
        format!("{} at {base}", p["device"].as_str().unwrap_or("a server")),
        p["policy"].as_str().unwrap_or("unknown").to_string(),
    ))
}

/// The engine counters the server exports, and model `model`'s latency histogram's sum (s)
/// and count (zero where it exports none; a server older than its `model` label: the whole
/// server's).
async fn scrape(client: &Http, base: &str, model: &str) -> (Counters, (f64, f64)) {
    let text = match get(client, &format!("{base}/metrics")).await {
        Ok((status, body)) if status.is_success() => String::from_utf8_lossy(&body).into_owned(),
        _ => String::new(),
    };
    scraped(&text, model)
}

/// [`scrape`]'s reading of the server's Prometheus `text`.
fn scraped(text: &str, model: &str) -> (Counters, (f64, f64)) {
    let read = |name: &str| sample(text, name).unwrap_or(0.0);
    let counters = Counters {
        executions: read("lazybatch_node_executions_total") as u64,
        batch_sum: read("lazybatch_batch_size_sum") as u64,
        preemptions: read("lazybatch_preemptions_total") as u64,
        merges: read("lazybatch_merges_total") as u64,
        cross_step: read("lazybatch_cross_step_executions_total") as u64,
        ..Counters::default()
    };
    let of_model = |name: &str| {
        sample(text, &format!("{name}{{model=\"{model}\"}}"))
            .or_else(|| sample(text, name))
            .unwrap_or(0.0)
    };
    let latency = (
        of_model("lazybatch_request_latency_seconds_sum"),
        of_model("lazybatch_request_latency_seconds_count"),
    );
    (counters, latency)
}

/// The value of sample `name` in Prometheus text, summed over its labels (a server of
/// co-located models labels its requests' metrics by model), or of the one sample `name`
/// names with its labels (`m{model="a"}`); None: not there. (A comment line, `# HELP m ...`,
/// never matches: what precedes its value starts with `#`.)
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| {
            let (n, v) = l.rsplit_once(' ')?;
            let base = n.split_once('{').map_or(n, |(b, _)| b);
            (n == name || base == name)
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
        .fold(None, |sum, x| Some(sum.unwrap_or(0.0) + x))
}

fn delta(a: &Counters, b: &Counters) -> Counters {
    Counters {
        executions: b.executions.saturating_sub(a.executions),
        batch_sum: b.batch_sum.saturating_sub(a.batch_sum),
        preemptions: b.preemptions.saturating_sub(a.preemptions),
        merges: b.merges.saturating_sub(a.merges),
        cross_step: b.cross_step.saturating_sub(a.cross_step),
        ..Counters::default()
    }
}

/// Request bodies (and the length of their JSON part, with the binary tensor extension): a
/// fixed-shape input's body is built once and shared (its values do not change the work); a
/// sequence's is built per request, its length the arrival's.
struct Bodies {
    input: Io,
    /// The model decodes: each request asks for its arrival's decoder steps.
    decoder: bool,
    seed: u64,
    json: bool,
    shared: Option<(Bytes, Option<usize>)>,
}

impl Bodies {
    /// The bodies for the model `h` describes (asking for decoder steps when it has some).
    fn of(h: &Hosted, opts: &LoadOptions) -> Self {
        Bodies::new(&h.input, h.max_dec > 0, opts)
    }

    fn new(input: &Io, decoder: bool, opts: &LoadOptions) -> Self {
        let mut b = Bodies {
            input: input.clone(),
            decoder,
            seed: opts.seed,
            json: opts.json_tensors,
            shared: None,
        };
        if !input.shape.contains(&-1) && !decoder {
            b.shared = Some(b.build(0, &Arrival::default()));
        }
        b
    }

    fn body(&self, i: u64, a: &Arrival) -> (Bytes, Option<usize>) {
        match &self.shared {
            Some(b) if a.sla.is_none() => b.clone(),
            _ => self.build(i, a),
        }
    }

    /// Request `i`'s body: its variable axis `a.len.enc` long, asking for `a.len.dec` decoder
    /// steps, and its class's SLA.
    fn build(&self, i: u64, a: &Arrival) -> (Bytes, Option<usize>) {
        let shape: Vec<usize> = self
            .input
            .shape
            .iter()
            .map(|&d| {
                if d < 0 {
                    a.len.enc as usize
                } else {
                    d as usize
                }
            })
            .collect();
        let n: usize = shape.iter().product();
        // the CPU device's own generated inputs: token ids (reduced to the vocabulary), or
        // values in [-1, 1)
        let mut values = vec![0.0f32; n];
        fill_input(&mut values, self.seed, i, 0, self.input.vocab.is_some());
        if let Some(v) = self.input.vocab {
            values
                .iter_mut()
                .for_each(|x| *x = (*x as usize % v.max(1)) as f32);
        }
        let mut parameters = serde_json::Map::new();
        if self.decoder {
            parameters.insert("decode_steps".into(), json!(a.len.dec));
        }
        if let Some(s) = a.sla {
            parameters.insert("sla_ms".into(), json!(s.as_ms()));
        }
        let mut input =
            json!({"name": self.input.name, "datatype": self.input.datatype, "shape": shape});
        if self.json {
            input["data"] = tensor(&self.input, &shape, &values, false).0["data"].take();
            let body = json!({"inputs": [input], "parameters": parameters});
            return (Bytes::from(body.to_string()), None);
        }
        let bytes = le_bytes(self.input.datatype, &values);
        input["parameters"] = json!({"binary_data_size": bytes.len()});
        parameters.insert("binary_data_output".into(), json!(true));
        let mut body = json!({"inputs": [input], "parameters": parameters})
            .to_string()
            .into_bytes();
        let n = body.len();
        body.extend_from_slice(&bytes);
        (Bytes::from(body), Some(n))
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
