//! What the server says about itself past a model's metadata, in the forms Triton's tools ask
//! for: the server's metadata (`GET /v2`, which the protocol requires and Performance Analyzer
//! reads first), the model configuration extension (`/v2/models/{m}/config`, Triton's model
//! configuration JSON) and the statistics extension (`/v2/models/stats`,
//! `/v2/models/{m}/stats`: counts and cumulative durations, from the observations that
//! `/metrics`' histograms take). Every route also answers under `/versions/1/`.

use super::front::{hosted, not_found, ModelPath};
use super::protocol::{error, Io};
use super::state::{Front, Hosted, VERSION};
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

/// An input's or output's dims in the model configuration: a variable axis at the length a
/// request of the model's reference lengths has (`dims` must be concrete for clients that
/// generate inputs; any length in [1, `max_len`] is accepted, as the metadata's -1 says).
pub(super) fn dims(io: &Io, reference: i64) -> Vec<i64> {
    io.shape
        .iter()
        .map(|&d| if d < 0 { reference } else { d })
        .collect()
}

fn entry(io: &Io, reference: i64) -> Value {
    json!({ "name": io.name, "data_type": data_type(io), "dims": dims(io, reference) })
}

/// Model `h`'s configuration parameters: the policy, the device and the limits a client may
/// want to know (and, co-located, the models that share the device).
pub(super) fn config_parameters(f: &Front, h: &Hosted) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("policy", f.policy.clone()),
        ("device", f.device.clone()),
        ("server_max_batch", f.max_batch.to_string()),
        ("max_input_length", h.input.max_len.to_string()),
    ];
    if h.max_dec > 0 {
        p.push(("max_decode_steps", h.max_dec.to_string()));
    }
    if f.models.len() > 1 {
        let names: Vec<&str> = f.models.iter().map(|m| m.name.as_str()).collect();
        p.push(("colocated_with", names.join(",")));
    }
    p
}

/// `GET /v2/models/{m}/config`: the model configuration as Triton writes it. One request per
/// call (`max_batch_size` 0: the dims are a request's whole shape, batch axis of 1 first); the
/// server batches requests itself, by the policy the parameters name, up to its own maximum.
pub(super) async fn config(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    let h = match hosted(&f, &path) {
        Ok(h) => h,
        Err(msg) => return not_found(msg),
    };
    let parameters: serde_json::Map<String, Value> = config_parameters(&f, h)
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!({ "string_value": v })))
        .collect();
    axum::Json(json!({
        "name": h.name,
        "platform": "lazybatch",
        "backend": "lazybatch",
        "version_policy": { "latest": { "num_versions": 1 } },
        "max_batch_size": 0,
        "input": [entry(&h.input, h.reference.0)],
        "output": [entry(&h.output, h.reference.1)],
        "parameters": parameters,
    }))
    .into_response()
}

/// One duration statistic: a count and its total in nanoseconds.
fn duration(count: u64, ns: u64) -> Value {
    json!({ "count": count, "ns": ns })
}

/// The model's statistics as Triton reports them: counts and cumulative nanoseconds.
pub(super) struct Stats {
    /// Milliseconds since the epoch of the last completed request (0: none yet).
    pub last_ms: u64,
    /// Completed requests, and their total time in the server.
    pub success: (u64, u64),
    /// Failed ones.
    pub fail: u64,
    /// Total queueing and computing time of the completed ones.
    pub queue_ns: u64,
    pub compute_ns: u64,
    /// Node executions.
    pub executions: u64,
    /// By sub-batch size, the sizes batches entered the model at: (size, those batches, device
    /// time of every node execution at that size in ns).
    pub by_size: Vec<(u64, u64, u64)>,
}

/// Model `h`'s statistics.
pub(super) fn stats_of(f: &Front, h: &Hosted) -> Stats {
    let t = &f.metrics.totals[usize::from(h.part)];
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Stats {
        last_ms: get(&t.last_ms),
        success: (get(&t.success.0), get(&t.success.1)),
        fail: get(&t.fail),
        queue_ns: get(&t.queue_ns),
        compute_ns: get(&t.compute_ns),
        executions: get(&t.executions),
        by_size: (1u64..)
            .zip(&t.by_size)
            .map(|(b, (n, ns))| (b, get(n), get(ns)))
            // Triton lists the sizes batches ran at; a size only a merge grew a sub-batch to
            // has device time but no batch, and is not listed (a client divides ns by count)
            .filter(|&(_, n, _)| n > 0)
            .collect(),
    }
}

/// Model `h`'s statistics in Triton's `model_stats` form.
fn model_stats(f: &Front, h: &Hosted) -> Value {
    let s = stats_of(f, h);
    let done = s.success.0;
    json!({
        "name": h.name,
        "version": VERSION,
        "last_inference": s.last_ms,
        "inference_count": done,
        "execution_count": s.executions,
        "inference_stats": {
            "success": duration(done, s.success.1),
            "fail": duration(s.fail, 0),
            "queue": duration(done, s.queue_ns),
            // inputs and outputs move inside the device's node time: counted, no time of
            // their own (Performance Analyzer requires the three counts equal)
            "compute_input": duration(done, 0),
            "compute_infer": duration(done, s.compute_ns),
            "compute_output": duration(done, 0),
        },
        // per sub-batch size: the batches that entered the model at it, and the device time
        // of every node execution at it (a sub-batch that grows by a merge runs its later
        // nodes at the larger size)
        "batch_stats": s.by_size.iter().map(|&(b, n, ns)| json!({
            "batch_size": b,
            "compute_input": duration(n, 0),
            "compute_infer": duration(n, ns),
            "compute_output": duration(n, 0),
        })).collect::<Vec<_>>(),
    })
}

/// `GET /v2/models/stats`: every model's statistics.
pub(super) async fn all_stats(State(f): State<Arc<Front>>) -> Response {
    let all: Vec<Value> = f.models.iter().map(|h| model_stats(&f, h)).collect();
    axum::Json(json!({ "model_stats": all })).into_response()
}

/// `GET /v2/models/{m}/stats`.
pub(super) async fn stats(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    let h = match hosted(&f, &path) {
        Ok(h) => h,
        Err(msg) => return not_found(msg),
    };
    axum::Json(json!({ "model_stats": [model_stats(&f, h)] })).into_response()
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

#[cfg(test)]
mod tests {
    use super::super::state::owned_front;
    use super::*;

    /// The test front (one model, not a seq2seq one) with its model's fields changed by `edit`
    /// and, when `colocated`, a second copy of it named `other`.
    fn front_with(edit: impl Fn(&mut Hosted), colocated: bool) -> Front {
        let mut f = owned_front();
        edit(&mut f.models[0]);
        if colocated {
            let mut other = f.models[0].clone();
            other.name = "other".into();
            other.part = 1;
            f.models.push(other);
        }
        f
    }

    #[test]
    fn the_configuration_names_decode_steps_and_co_located_models_only_where_there_are_some() {
        let f = front_with(|_| {}, false);
        let h = &f.models[0];
        assert_eq!(h.max_dec, 0, "the fixture is not a seq2seq model");
        let expected = vec![
            ("policy", "serial".to_string()),
            ("device", "test".to_string()),
            ("server_max_batch", "8".to_string()),
            ("max_input_length", h.input.max_len.to_string()),
        ];
        assert_eq!(config_parameters(&f, h), expected);
        // a decoder's most steps, and the models sharing the device, each when there are
        let f = front_with(|h| h.max_dec = 1, true);
        let p = config_parameters(&f, &f.models[1]);
        assert_eq!(p.len(), 6, "{p:?}");
        assert_eq!(p[4], ("max_decode_steps", "1".to_string()));
        let first = f.models[0].name.clone();
        assert_eq!(p[5], ("colocated_with", format!("{first},other")));
    }

    #[test]
    fn a_variable_axis_has_the_reference_length_and_a_fixed_one_keeps_its_own_even_zero() {
        let io = Io {
            name: "x".into(),
            datatype: "FP32",
            shape: vec![1, -1, 0, 3],
            vocab: None,
            max_len: 9,
            finite: true,
        };
        assert_eq!(dims(&io, 7), vec![1, 7, 0, 3]);
        assert_eq!(data_type(&io), "TYPE_FP32");
        assert_eq!(
            entry(&io, 7),
            json!({ "name": "x", "data_type": "TYPE_FP32", "dims": [1, 7, 0, 3] })
        );
    }

    #[test]
    fn statistics_list_the_sizes_batches_entered_at_and_every_total_as_kept() {
        let f = front_with(|_| {}, false);
        let t = &f.metrics.totals[0];
        let set = |a: &std::sync::atomic::AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&t.last_ms, 11);
        set(&t.success.0, 3);
        set(&t.success.1, 300);
        set(&t.fail, 2);
        set(&t.queue_ns, 40);
        set(&t.compute_ns, 260);
        set(&t.executions, 3);
        // size 1: two batches; size 2: only a merge grew a sub-batch to it (time, no batch);
        // size 3: one batch
        for (i, (n, ns)) in [(2, 10), (0, 5), (1, 7)].into_iter().enumerate() {
            set(&t.by_size[i].0, n);
            set(&t.by_size[i].1, ns);
        }
        let s = stats_of(&f, &f.models[0]);
        assert_eq!(
            (s.last_ms, s.success, s.fail, s.queue_ns, s.compute_ns),
            (11, (3, 300), 2, 40, 260)
        );
        assert_eq!(s.executions, 3);
        assert_eq!(s.by_size, vec![(1, 2, 10), (3, 1, 7)]);
        let v = model_stats(&f, &f.models[0]);
        assert_eq!(v["inference_count"], 3);
        assert_eq!(v["execution_count"], 3);
        assert_eq!(v["last_inference"], 11);
        assert_eq!(
            v["inference_stats"]["success"],
            json!({ "count": 3, "ns": 300 })
        );
        assert_eq!(v["inference_stats"]["fail"], json!({ "count": 2, "ns": 0 }));
        assert_eq!(
            v["inference_stats"]["queue"],
            json!({ "count": 3, "ns": 40 })
        );
        assert_eq!(
            v["inference_stats"]["compute_infer"],
            json!({ "count": 3, "ns": 260 })
        );
        assert_eq!(v["batch_stats"][1]["batch_size"], 3);
        assert_eq!(
            v["batch_stats"][1]["compute_infer"],
            json!({ "count": 1, "ns": 7 })
        );
    }
}
