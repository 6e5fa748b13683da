//! The HTTP handlers of `lazybatch serve` and the state they share ([`Front`]): health and
//! readiness, model metadata, and `infer`, which checks a request, puts its input in the
//! device's exchange, sends its arrival down the engine's channel and waits for the engine's
//! observer to answer it.

use super::metrics::outcome;
use super::protocol::{error, tensor, InferRequest, Io, HEADER_LENGTH};
use super::served::{self, Served};
use super::state::{take_in, Front, Hosted, VERSION};
use crate::error::{Error, Result};
use crate::graph::op::Op;
use crate::graph::{Model, Rows};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// Part `p` of `m` (the model itself when it is not co-located) in the protocol's terms: its
/// input and output (one request: batch 1), and its decoder's most and default steps (0, 0 for
/// a static model).
pub(super) fn describe(m: &Model, p: usize) -> Result<Hosted> {
    let part = &m.parts[p];
    let in_part = |n: &&crate::graph::Node| m.part_of(n.id) == p;
    let (Some(first), Some(last)) = (
        m.nodes.iter().find(in_part),
        m.nodes.iter().rev().find(in_part),
    ) else {
        return Err(Error::invalid(
            "serve",
            format!("model '{}' is empty", part.name),
        ));
    };
    let Op::Input { shape, tokens, .. } = &first.op else {
        return Err(Error::invalid(
            "serve",
            format!("model '{}': its first node is not its input", part.name),
        ));
    };
    let seq = part.seq.as_ref();
    let seq2seq = m.loops.iter().any(|l| m.part_of(l.first) == p);
    let (max_enc, max_dec, ref_dec) = seq.map_or((1, 0, 0), |s| (s.max_enc, s.max_dec, s.ref_dec));
    let reference = m.ref_lengths_of(p);
    let enc = reference.enc;
    let variable = match first.out.rows {
        Rows::Src { div: 1 } => true,
        Rows::Src { .. } => {
            return Err(Error::invalid(
                "serve",
                format!(
                    "model '{}': an input read at a coarser time resolution is not served yet",
                    part.name
                ),
            ))
        }
        _ => false,
    };
    let rows = first.out.rows.count(enc) as i64;
    let lead = if variable { -1 } else { rows };
    let in_shape: Vec<i64> = if *tokens {
        vec![1, lead]
    } else {
        let rows = (variable || rows > 1).then_some(lead);
        std::iter::once(1)
            .chain(rows)
            .chain(shape.iter().map(|&d| d as i64))
            .collect()
    };
    let vocab = m
        .nodes
        .iter()
        .find(|n| n.inputs.first().is_some_and(|i| i.node == first.id))
        .and_then(|n| match n.op {
            Op::Embedding { vocab, .. } => Some(vocab),
            _ => None,
        });
    let argmax = matches!(last.op, Op::Argmax);
    let out_rows = last.out.rows.count(enc) as i64;
    let out_lead = if seq2seq { -1 } else { out_rows };
    let out_shape: Vec<i64> = std::iter::once(1)
        .chain((seq2seq || out_rows > 1).then_some(out_lead))
        .chain(
            (!argmax)
                .then_some(last.out.feat.iter().map(|&d| d as i64))
                .into_iter()
                .flatten(),
        )
        .collect();
    // a co-located model's nodes are named `model/node`; a client knows the model's own names
    let own = |n: &str| match m.parts.len() {
        1 => n.to_string(),
        _ => n
            .strip_prefix(&format!("{}/", part.name))
            .unwrap_or(n)
            .to_string(),
    };
    let input = Io {
        name: own(&first.name),
        datatype: if *tokens { "INT64" } else { "FP32" },
        shape: in_shape,
        vocab: if *tokens { vocab } else { None },
        max_len: max_enc as usize,
        finite: true,
    };
    let output = Io {
        name: own(&last.name),
        datatype: if argmax { "INT64" } else { "FP32" },
        shape: out_shape,
        vocab: None,
        max_len: max_dec as usize,
        finite: true,
    };
    Ok(Hosted {
        name: part.name.clone(),
        part: p as u16,
        input,
        output,
        max_dec,
        default_dec: ref_dec,
        reference: (i64::from(reference.enc), i64::from(reference.dec)),
        sla: None,
    })
}

pub(super) async fn ready(State(f): State<Arc<Front>>) -> StatusCode {
    if f.closing_down() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

/// A model route's path parameters: `name`, and `version` in the `/versions/{version}/` form.
pub(super) type ModelPath = Path<HashMap<String, String>>;

/// The model the path names (at its version, in the `/versions/{version}/` form), or what is
/// wrong (its [`not_found`] answer).
pub(super) fn hosted<'f>(
    f: &'f Front,
    path: &HashMap<String, String>,
) -> std::result::Result<&'f Hosted, String> {
    let name = path.get("name").map_or("", String::as_str);
    f.hosted(name, path.get("version").map(String::as_str))
}

/// The 404 of a path that names no model served.
pub(super) fn not_found(msg: String) -> Response {
    error(StatusCode::NOT_FOUND, msg)
}

pub(super) async fn model_ready(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    if let Err(msg) = hosted(&f, &path) {
        return not_found(msg);
    }
    ready(State(f)).await.into_response()
}

pub(super) async fn metadata(State(f): State<Arc<Front>>, Path(path): ModelPath) -> Response {
    let h = match hosted(&f, &path) {
        Ok(h) => h,
        Err(msg) => return not_found(msg),
    };
    let io = |t: &Io| json!({"name": t.name, "datatype": t.datatype, "shape": t.shape});
    let mut parameters = json!({
        "device": f.device,
        "policy": f.policy,
        "max_input_length": h.input.max_len,
    });
    if h.max_dec > 0 {
        parameters["max_decode_steps"] = json!(h.max_dec);
        parameters["default_decode_steps"] = json!(h.default_dec);
    }
    if f.models.len() > 1 {
        // co-located: which models share the device (and its batches' SLA check)
        let names: Vec<&str> = f.models.iter().map(|m| m.name.as_str()).collect();
        parameters["colocated_with"] = json!(names);
    }
    axum::Json(json!({
        "name": h.name,
        "versions": [VERSION],
        "platform": "lazybatch",
        "inputs": [io(&h.input)],
        "outputs": [io(&h.output)],
        "parameters": parameters,
    }))
    .into_response()
}

pub(super) async fn metrics(State(f): State<Arc<Front>>) -> Response {
    f.metrics.exchange(&f.exchange);
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

/// A body declared (`Content-Length`) larger than `--max-body-mib`: the 413 it gets at once,
/// before a byte of it is read or any budget reserved.
fn declared_too_large(f: &Front, headers: &axum::http::HeaderMap) -> Option<String> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u128>()
        .ok()?;
    (declared > f.max_body as u128).then(|| {
        format!(
            "the body is declared {declared} bytes, larger than {} bytes (--max-body-mib)",
            f.max_body
        )
    })
}

/// How much memory a body takes while it is parsed, as a multiple of its size: a JSON tensor's
/// text becomes `serde_json` values and then `f32`s (the reliability probe measured 8 → 316 MB
/// resident for one 60 MB JSON body, about 5×).
pub(super) const PARSE_FACTOR: usize = 5;

fn unavailable(f: &Front, h: &Hosted, outcome: &str, msg: String) -> Response {
    f.metrics.count(Some(h.part), outcome);
    error(StatusCode::SERVICE_UNAVAILABLE, msg)
}

pub(super) async fn infer(
    State(f): State<Arc<Front>>,
    Path(path): ModelPath,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Response {
    let h = match hosted(&f, &path) {
        Ok(h) => h,
        Err(msg) => return lingering(&f, body, not_found(msg)),
    };
    if let Some(msg) = declared_too_large(&f, &headers) {
        f.metrics.count(Some(h.part), outcome::TOO_LARGE);
        return lingering(&f, body, error(StatusCode::PAYLOAD_TOO_LARGE, msg));
    }
    // a place now; the body's share of the budget as its bytes arrive
    let (_taken, mut held) = match take_in(&f, 0) {
        Ok(held) => held,
        Err((why, msg)) => return lingering(&f, body, unavailable(&f, h, why, msg)),
    };
    let body = match received(&f, body, &mut held)
        .await
        .and_then(|b| decoded(&headers, b, f.max_body))
    {
        Ok(b) => b,
        Err((status, msg)) => {
            f.metrics.count(
                Some(h.part),
                match status {
                    StatusCode::REQUEST_TIMEOUT => outcome::TIMED_OUT,
                    StatusCode::PAYLOAD_TOO_LARGE => outcome::TOO_LARGE,
                    StatusCode::SERVICE_UNAVAILABLE => outcome::OVERLOADED,
                    _ => outcome::BAD_REQUEST,
                },
            );
            return error(status, msg);
        }
    };
    let mut req = match split(&headers, &body).and_then(|(json, binary)| {
        serde_json::from_slice::<InferRequest>(json)
            .map_err(|e| format!("malformed request body: {e}"))
            .and_then(|r| {
                r.check_outputs(&h.output)?;
                r.check(&h.input, h.max_dec, binary)
            })
    }) {
        Ok(v) => v,
        Err(msg) => {
            f.metrics.count(Some(h.part), outcome::BAD_REQUEST);
            return error(StatusCode::BAD_REQUEST, msg);
        }
    };
    let id = req.id.take();
    let binary = req.binary_output;
    let (served, key) = served::serve(&f, h, req).await;
    match served {
        Served::Done {
            values,
            shape,
            latency,
        } => {
            let id = id.unwrap_or_else(|| key.to_string());
            respond(&f, h, (&id, binary), (&shape, &values, latency))
        }
        Served::Refused(msg) => error(StatusCode::SERVICE_UNAVAILABLE, msg),
        Served::NotAdmitted(msg, wait) => not_admitted(msg, wait),
        Served::Failed(msg) => error(StatusCode::INTERNAL_SERVER_ERROR, msg),
    }
}

/// A request not admitted (`--admit predicted`): 429 with `Retry-After` in whole seconds.
fn not_admitted(msg: String, wait: u64) -> Response {
    let mut r = error(StatusCode::TOO_MANY_REQUESTS, msg);
    r.headers_mut()
        .insert(axum::http::header::RETRY_AFTER, wait.into());
    r
}

/// The answer to a completed request (`id` to the client) in JSON, or with its output in the
/// binary part of the body.
fn respond(
    f: &Front,
    h: &Hosted,
    (id, binary): (&str, bool),
    (shape, data, latency): (&[usize], &[f32], std::time::Duration),
) -> Response {
    let mut parameters = json!({"latency_ms": latency.as_secs_f64() * 1e3});
    if f.emulated {
        parameters["timing_emulation"] = json!(served::EMULATED);
    }
    let (t, bytes) = tensor(&h.output, shape, data, binary);
    let head = json!({
        "model_name": h.name,
        "model_version": VERSION,
        "id": id,
        "outputs": [t],
        "parameters": parameters,
    });
    if !binary {
        return axum::Json(head).into_response();
    }
    let mut body = head.to_string().into_bytes();
    let len = body.len();
    body.extend_from_slice(&bytes);
    (
        [
            (HEADER_LENGTH, len.to_string()),
            (
                axum::http::header::CONTENT_TYPE.as_str(),
                "application/octet-stream".to_string(),
            ),
        ],
        body,
    )
        .into_response()
}

/// How long a refused request's unread body may pause before the connection is closed (nginx's
/// `lingering_timeout` is the same idea, 5 s by default; shorter here, as a connection that
/// lingers holds one of `--max-connections`).
const LINGER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Answers a request refused before its body was read with `answer` at once, and reads the body
/// behind the answer, keeping none of it (at most `--max-body-mib`, within `--body-timeout-s`, and
/// until it pauses for [`LINGER_IDLE`]), then closes the connection: a client still sending its
/// body then reads the answer instead of a reset connection and a broken pipe.
fn lingering(f: &Front, body: axum::body::Body, mut answer: Response) -> Response {
    use http_body_util::BodyExt;
    let mut rest = http_body_util::Limited::new(body, f.max_body);
    let deadline = f.body_timeout;
    tokio::spawn(tokio::time::timeout(deadline, async move {
        while let Ok(Some(Ok(_))) = tokio::time::timeout(LINGER_IDLE, rest.frame()).await {}
    }));
    answer.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    answer
}

/// The request's body, read within the body timeout and up to `--max-body-mib` (408 and 413
/// with the protocol's error object otherwise; a connection that fails mid-body, 400), each
/// chunk charged to `held` as it arrives, [`PARSE_FACTOR`] times its size (503 when the
/// bodies in flight hold `--max-inflight-mib`).
async fn received(
    f: &Front,
    mut body: axum::body::Body,
    held: &mut super::state::Reserved<'_>,
) -> std::result::Result<axum::body::Bytes, (StatusCode, String)> {
    use http_body_util::BodyExt;
    let deadline = tokio::time::Instant::now() + f.body_timeout;
    let mut got: Vec<u8> = Vec::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {} s (--body-timeout-s)",
                        f.body_timeout.as_secs_f64()
                    ),
                ))
            }
            Ok(None) => return Ok(got.into()),
            Ok(Some(Err(e))) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("the body could not be read: {e}"),
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            // trailers: nothing to keep
            continue;
        };
        if got.len() + data.len() > f.max_body {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the body is larger than {} bytes (--max-body-mib)",
                    f.max_body
                ),
            ));
        }
        held.grow(data.len().saturating_mul(PARSE_FACTOR))
            .map_err(|(_, msg)| (StatusCode::SERVICE_UNAVAILABLE, msg))?;
        got.extend_from_slice(&data);
    }
}

/// The body as sent, or inflated when its `Content-Encoding` is `gzip` or `deflate` (zlib, as
/// HTTP means it): at most `max` bytes once inflated (`--max-body-mib`; a body that inflates
/// past it is refused with 413, so a small bomb cannot take the memory a large body may not).
fn decoded(
    headers: &axum::http::HeaderMap,
    body: axum::body::Bytes,
    max: usize,
) -> std::result::Result<axum::body::Bytes, (StatusCode, String)> {
    use std::io::Read;
    let Some(enc) = headers.get(axum::http::header::CONTENT_ENCODING) else {
        return Ok(body);
    };
    let enc = enc.to_str().unwrap_or("").trim().to_ascii_lowercase();
    let mut reader: Box<dyn Read + '_> = match enc.as_str() {
        "identity" | "" => return Ok(body),
        "gzip" | "x-gzip" => Box::new(flate2::read::GzDecoder::new(&body[..])),
        "deflate" => Box::new(flate2::read::ZlibDecoder::new(&body[..])),
        other => {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding '{other}': this server takes gzip, deflate or identity"),
            ))
        }
    };
    let mut out = Vec::new();
    (&mut reader)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("Content-Encoding {enc}: the body does not inflate: {e}"),
            )
        })?;
    if out.len() > max {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body inflates past {max} bytes (--max-body-mib)"),
        ));
    }
    Ok(out.into())
}

/// The body's JSON part and its binary part (the binary tensor extension: the JSON's length
/// in the `Inference-Header-Content-Length` header; without it the body is all JSON).
fn split<'b>(
    headers: &axum::http::HeaderMap,
    body: &'b [u8],
) -> std::result::Result<(&'b [u8], &'b [u8]), String> {
    let Some(h) = headers.get(HEADER_LENGTH) else {
        return Ok((body, &[]));
    };
    // given twice, one of the two would be dropped unseen
    if headers.get_all(HEADER_LENGTH).iter().count() > 1 {
        return Err("Inference-Header-Content-Length given more than once: give it once".into());
    }
    let n: usize = h
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n <= body.len())
        .ok_or_else(|| {
            format!(
                "Inference-Header-Content-Length {h:?}: a byte count within the body's {}",
                body.len()
            )
        })?;
    Ok(body.split_at(n))
}

#[cfg(test)]
#[path = "front_tests.rs"]
mod tests;
