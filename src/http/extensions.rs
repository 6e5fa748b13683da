//! What the server says about itself past a model's metadata, in the forms Triton's tools ask
//! for: the server's metadata (`GET /v2`, which the protocol requires and Performance Analyzer
//! reads first), the model configuration extension (`/v2/models/{m}/config`, Triton's model
//! configuration JSON) and the statistics extension (`/v2/models/stats`,
//! `/v2/models/{m}/stats`: counts and cumulative durations, from the observations that
//! `/metrics`' histograms take). Every route also answers under `/versions/1/`.

use super::front::{unknown, Front, ModelPath, VERSION};
use super::protocol::{error, Io};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The extensions this server implements, as `GET /v2` lists them.
pub(super) const EXTENSIONS: &[&str] = &["binary_tensor_data", "model_configuration", "statistics"];

/// `GET /v2`: the server's name, version and extensions.
pub(super) async fn server_metadata() -> Response {
    axum::Json(json!({
        "name": "lazybatch",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
    .into_response()
}

/// Triton's name of a protocol datatype (`FP32` → `TYPE_FP32`).
fn data_type(io: &Io) -> String {
    format!("TYPE_{}", io.datatype)
}

/// An input's or output's entry: its dims with a variable axis at the length a request of the
/// model's reference lengths has (`dims` must be concrete for clients that generate inputs;
/// any length in [1, `max_len`] is accepted, as the metadata's -1 says).
fn entry(io: &Io, reference: i64) -> Value {
    let dims: Vec<i64> = io
        .shape
        .iter()
        .map(|&d| if d < 0 { reference } else { d })
        .collect();
    json!({ "name": io.name, "data_type": data_type(io), "dims": dims })
}

/// `GET /v2/models/{m}/config`: the model configuration as Triton writes it. One request per
/// call (`max_batch_size` 0: the dims are a request's whole shape, batch axis of 1 first); the
/// server batches requests itself, by the policy the parameters name, up to its own maximum.
pub(super) async fn config(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    if let Some(r) = unknown(&f, &path) {
        return r;
    }
    let string = |v: String| json!({ "string_value": v });
    let mut parameters = json!({
        "policy": string(f.policy.clone()),
        "device": string(f.device.clone()),
        "server_max_batch": string(f.max_batch.to_string()),
        "max_input_length": string(f.input.max_len.to_string()),
    });
    if f.max_dec > 0 {
        parameters["max_decode_steps"] = string(f.max_dec.to_string());
    }
    axum::Json(json!({
        "name": f.model,
        "platform": "lazybatch",
        "backend": "lazybatch",
        "version_policy": { "latest": { "num_versions": 1 } },
        "max_batch_size": 0,
        "input": [entry(&f.input, f.reference.0)],
        "output": [entry(&f.output, f.reference.1)],
        "parameters": parameters,
    }))
    .into_response()
}

/// One duration statistic: a count and its total in nanoseconds.
fn duration(count: u64, ns: u64) -> Value {
    json!({ "count": count, "ns": ns })
}

/// The model's statistics in Triton's `model_stats` form.
fn model_stats(f: &Front) -> Value {
    let t = &f.metrics.totals;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let done = get(&t.success.0);
    json!({
        "name": f.model,
        "version": VERSION,
        "last_inference": get(&t.last_ms),
        "inference_count": done,
        "execution_count": get(&t.executions),
        "inference_stats": {
            "success": duration(done, get(&t.success.1)),
            "fail": duration(get(&t.fail), 0),
            "queue": duration(done, get(&t.queue_ns)),
            "compute_input": duration(0, 0),
            "compute_infer": duration(done, get(&t.compute_ns)),
            "compute_output": duration(0, 0),
        },
    })
}

/// `GET /v2/models/stats`: every model's statistics (this server's one).
pub(super) async fn all_stats(State(f): State<Arc<Front>>) -> Response {
    axum::Json(json!({ "model_stats": [model_stats(&f)] })).into_response()
}

/// `GET /v2/models/{m}/stats`.
pub(super) async fn stats(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    if let Some(r) = unknown(&f, &path) {
        return r;
    }
    axum::Json(json!({ "model_stats": [model_stats(&f)] })).into_response()
}

/// Any other path: a 404 with the protocol's error object, naming the routes there are.
pub(super) async fn no_route(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no route {} (routes: /v2, /v2/health/live|ready, /v2/models/stats, /v2/models/{{model}}[/versions/{VERSION}][/ready|/infer|/config|/stats], /metrics)",
            uri.path()
        ),
    )
}

/// A known path asked with a method it does not take: a 405 with the protocol's error object.
pub(super) async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} {}: not a method this route takes (infer is POST, the rest GET)",
            uri.path()
        ),
    )
}
