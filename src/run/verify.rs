//! `verify`: serve requests once alone and once under forced preemptions and merges at varied
//! nodes on a real device, and compare every request's output. A request's activations never
//! leave its slot and every kernel computes a row from that row's inputs only. On the CPU the
//! GEMM's reduction order does not depend on the batch, so the outputs must be bit-identical.
//! A GPU's BLAS picks kernels (split-K, stream-K) by shape and batch, which reorders sums: there
//! the outputs are judged by a stated per-precision [`tolerance`], and bit-identity is reported
//! as information.

use crate::device::capture::{Capture, CaptureMode, Captured, TraceEntry};
use crate::device::cpu::CpuDevice;
use crate::device::Device;
use crate::engine;
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::policy::{Forced, Policy, Serial};
use crate::profile::Profile;
use crate::runtime::{MaxBatch, Predictor};
use crate::time::{Nanos, Sla, VirtualClock, MAX_SLA};
use crate::traffic::Process;
use crate::traffic::{self, Arrival};

/// What `verify` found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// Model.
    pub model: String,
    /// Requests compared.
    pub requests: usize,
    /// Values compared.
    pub values: usize,
    /// Requests whose outputs differ at all.
    pub mismatched_requests: usize,
    /// Largest absolute difference.
    pub max_abs_diff: f64,
    /// Largest relative difference, `|a − b| / (1 + |b|)`.
    pub max_rel_diff: f64,
    /// Every output bit-identical between alone and batched.
    pub bit_identical: bool,
    /// The relative difference allowed ([`tolerance`]; 0 on a device that must be
    /// bit-identical).
    pub tolerance: f64,
    /// The verdict: bit-identical where required, else within the tolerance.
    pub ok: bool,
    /// Preemptions the forced run made.
    pub preemptions: u64,
    /// Merges the forced run made.
    pub merges: u64,
    /// Node executions of the forced run whose members stood at different timesteps (merges
    /// across timesteps of an encoder or decoder layer).
    pub cross_step: u64,
    /// Mean sub-batch size of the forced run.
    pub mean_batch: f64,
}

fn serve(
    model: &Model,
    dev: &mut dyn Device,
    policy: &mut dyn Policy,
    arrivals: &[Arrival],
    max_batch: u32,
    mode: CaptureMode,
) -> Result<(Capture, engine::Counters)> {
    let profile = Profile::uniform(model, max_batch, Nanos(1));
    let pred = Predictor::new(model, &profile, 1);
    dev.set_capture(mode);
    let out = engine::run(
        &engine::Setup::new(model, &pred, Sla::new(MAX_SLA)?, MaxBatch::new(max_batch)?),
        dev,
        policy,
        &mut VirtualClock::new(),
        arrivals,
    )?;
    let captured = dev.take_captured();
    dev.set_capture(CaptureMode::Off);
    Ok((captured, out.counters))
}

/// Verifies `model` on a CPU device with `requests` requests (lengths drawn with `seed`).
pub fn verify_cpu(
    model: &Model,
    requests: usize,
    max_batch: u32,
    seed: u64,
) -> Result<VerifyReport> {
    let mut dev = CpuDevice::new(seed);
    verify(model, &mut dev, requests, max_batch, seed, None)
}

fn arrivals_at_zero(model: &Model, requests: usize, seed: u64) -> Result<Vec<Arrival>> {
    if requests == 0 {
        return Err(Error::invalid("requests", "must be at least 1"));
    }
    // co-located models: requests spread over every model (the SLA plays no part here)
    let parts = model.parts.len();
    let arrivals = if parts > 1 {
        let sla = Nanos::from_secs(1.0);
        let (rates, slas) = (vec![1.0; parts], vec![sla; parts]);
        traffic::generate_parts(model, Process::Poisson, (&rates, &slas), requests, seed)?
    } else {
        traffic::generate(model, (Process::Poisson, 1.0), requests, seed)?
    };
    Ok(arrivals
        .map(|a| Arrival {
            time: Nanos::ZERO,
            ..a
        })
        .collect())
}

/// How far (relative to `1 + |value|`) two runs of `model` on a GPU may differ when they
/// compute the same requests at other batch sizes, or against the CPU, at storage `precision`:
/// `4 · √g · (1.5 · ε_s + ε_32 · √K)` for a model of `g` GEMM nodes whose longest reduction is
/// `K`. Each GEMM rounds its two operands and its result to the storage format (half a step
/// each: `1.5 · ε_s`, with `ε_s` = 2⁻¹⁰ for f16 and for TF32, whose products read the operands
/// with f16's 10-bit mantissa, 0 for f32), and sums `K` products in
/// f32 in an order the BLAS chooses (a random walk of `√K` roundings of `ε_32` = 2⁻²³). These
/// errors are independent across GEMMs, so they add as `√g`; the factor 4 covers the largest of
/// many outputs and layers that amplify their inputs. ResNet-50 (54 GEMMs, K ≤ 4,608): f32
/// 2.4e-4, f16 4.3e-2.
pub fn tolerance(model: &Model, precision: &str) -> f64 {
    let gemms = model.nodes.iter().filter_map(|n| n.cost.gemm.as_ref());
    let (g, k) = gemms.fold((0u64, 1u64), |(g, k), m| (g + 1, k.max(m.k)));
    let storage = if precision == "f16" || precision == "tf32" {
        half::f16::EPSILON.to_f64()
    } else {
        0.0
    };
    let sum = f64::from(f32::EPSILON) * (k as f64).sqrt();
    4.0 * (g.max(1) as f64).sqrt() * (1.5 * storage + sum)
}

/// Largest absolute and relative differences between two captures (None when the captures
/// differ in shape: a request missing, or a different number of values).
pub fn max_diff(a: &Captured, b: &Captured) -> Option<(f64, f64, usize)> {
    let (mut abs, mut rel, mut n) = (0.0f64, 0.0f64, 0usize);
    for (k, x) in a {
        let y = b.get(k)?;
        if x.len() != y.len() {
            return None;
        }
        for (p, q) in x.iter().zip(y) {
            let d = f64::from((p - q).abs());
            abs = abs.max(d);
            rel = rel.max(d / (1.0 + f64::from(q.abs())));
            n += 1;
        }
    }
    (a.len() == b.len()).then_some((abs, rel, n))
}

/// Serves the same requests alone (serial) on two devices, recording `mode` on both.
fn capture_both(
    model: &Model,
    (a, b): (&mut dyn Device, &mut dyn Device),
    requests: usize,
    max_batch: u32,
    seed: u64,
    mode: CaptureMode,
) -> Result<(Capture, Capture)> {
    let arrivals = arrivals_at_zero(model, requests, seed)?;
    a.prepare(model, max_batch)?;
    b.prepare(model, max_batch)?;
    let (ca, _) = serve(model, a, &mut Serial, &arrivals, max_batch, mode)?;
    let (cb, _) = serve(model, b, &mut Serial, &arrivals, max_batch, mode)?;
    Ok((ca, cb))
}

/// One request's model input, as the graph declares it (`[C, H, W]` for images), and its final
/// outputs ([`Captured`]'s order).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestIo {
    /// The request's input key (what its generated input derives from).
    pub key: u64,
    /// Its model input.
    pub input: Vec<f32>,
    /// Its final outputs.
    pub output: Vec<f32>,
}

/// Serves `requests` requests alone on `dev` and returns what each one read and computed, to
/// compare with another runtime on the same inputs (`tests/it/onnx.rs` against onnxruntime).
pub fn inputs_and_outputs(
    model: &Model,
    dev: &mut dyn Device,
    requests: usize,
    max_batch: u32,
    seed: u64,
) -> Result<Vec<RequestIo>> {
    let arrivals = arrivals_at_zero(model, requests, seed)?;
    dev.prepare(model, max_batch)?;
    let (c, _) = serve(
        model,
        dev,
        &mut Serial,
        &arrivals,
        max_batch,
        CaptureMode::EveryNode,
    )?;
    let first = model.parts[0].first.idx();
    let mut out: Vec<RequestIo> = c
        .trace
        .iter()
        .filter(|e| e.node == first)
        .map(|e| RequestIo {
            key: e.input,
            input: e.values.clone(),
            output: c.outputs.get(&e.input).cloned().unwrap_or_default(),
        })
        .collect();
    out.sort_by_key(|r| r.key);
    Ok(out)
}

/// Serves the same requests alone (serial) on two devices and returns both captures, for
/// device-against-device checks (CUDA against the CPU reference).
pub fn serve_both(
    model: &Model,
    a: &mut dyn Device,
    b: &mut dyn Device,
    requests: usize,
    max_batch: u32,
    seed: u64,
) -> Result<(Captured, Captured)> {
    let (ca, cb) = capture_both(
        model,
        (a, b),
        requests,
        max_batch,
        seed,
        CaptureMode::Outputs,
    )?;
    Ok((ca.outputs, cb.outputs))
}

/// Serves the same requests alone (serial) on two devices and returns each execution of an
/// output node on both, in execution order, for [`compare_outputs`].
pub fn output_steps_both(
    model: &Model,
    a: &mut dyn Device,
    b: &mut dyn Device,
    requests: usize,
    max_batch: u32,
    seed: u64,
) -> Result<(Vec<TraceEntry>, Vec<TraceEntry>)> {
    traces_both(
        model,
        (a, b),
        requests,
        max_batch,
        seed,
        CaptureMode::OutputSteps,
    )
}

/// The relative difference `|p − q| / (1 + |q|)` of a value `p` from its reference `q`, NaN
/// counted as infinite.
fn rel_diff(p: f32, q: f32) -> f64 {
    let d = f64::from((p - q).abs()) / (1.0 + f64::from(q.abs()));
    if d.is_nan() {
        f64::INFINITY
    } else {
        d
    }
}

/// A decoded token on which two devices disagree: after it a greedy decoder feeds each its own
/// token, so the two runs compute different things and are compared no further.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenFlip {
    /// The request's input key.
    pub request: u64,
    /// The argmax node.
    pub node: String,
    /// The step it ran at.
    pub step: u32,
    /// The token the device chose.
    pub token: usize,
    /// The token the reference chose.
    pub reference_token: usize,
    /// How far apart the reference's logits for the two tokens are, relative to its chosen
    /// one's (`|l[ref] − l[token]| / (1 + |l[ref]|)`; infinite when the logits are not among
    /// the outputs): within the tolerance, a near tie that rounding may tip either way.
    pub gap: f64,
}

/// Two devices' outputs, compared up to each request's first differing token.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputComparison {
    /// Values compared.
    pub values: usize,
    /// The largest absolute difference among them.
    pub max_abs: f64,
    /// The largest relative difference among them, `|a − b| / (1 + |b|)`.
    pub max_rel: f64,
    /// The first differing token of each request that has one.
    pub flips: Vec<TokenFlip>,
}

impl OutputComparison {
    /// Within `tol`: every value compared, and every flipped token a near tie.
    pub fn ok(&self, tol: f64) -> bool {
        self.max_rel <= tol && self.flips.iter().all(|f| f.gap <= tol)
    }
}

/// Compares the output-node executions of two devices serving the same requests
/// ([`output_steps_both`]; `b` the reference), request by request in execution order: values
/// elementwise, an argmax's tokens exactly. At a request's first differing token the
/// comparison of that request stops, and the flip is judged by the reference's logits (the
/// argmax's input, just before it). None when the two runs part otherwise (another node,
/// step or number of values, or a request missing): a mismatch.
pub fn compare_outputs(
    model: &Model,
    a: &[TraceEntry],
    b: &[TraceEntry],
) -> Option<OutputComparison> {
    let (ra, rb) = (by_request(a), by_request(b));
    if ra.len() != rb.len() {
        return None;
    }
    let mut c = OutputComparison {
        values: 0,
        max_abs: 0.0,
        max_rel: 0.0,
        flips: Vec::new(),
    };
    for (request, xs) in &ra {
        let ys = rb.get(request)?;
        let mut logits: Option<&TraceEntry> = None;
        let mut flipped = false;
        for (x, y) in xs.iter().zip(ys) {
            if (x.node, x.step, x.values.len()) != (y.node, y.step, y.values.len()) {
                return None;
            }
            let node = model.nodes.get(x.node)?;
            if !matches!(node.op, crate::graph::op::Op::Argmax) {
                for (&p, &q) in x.values.iter().zip(&y.values) {
                    c.max_abs = c.max_abs.max(f64::from((p - q).abs()));
                    c.max_rel = c.max_rel.max(rel_diff(p, q));
                }
                c.values += x.values.len();
                logits = Some(y);
                continue;
            }
            c.values += x.values.len();
            let Some(row) = x.values.iter().zip(&y.values).position(|(p, q)| p != q) else {
                continue;
            };
            let (token, reference_token) = (x.values[row] as usize, y.values[row] as usize);
            // the reference's logits for this row, when they are the argmax's input
            let gap = logits
                .filter(|l| Some(l.node) == node.inputs.first().map(|i| i.node.idx()))
                .filter(|l| l.step == y.step)
                .and_then(|l| {
                    let width = l.values.len() / y.values.len().max(1);
                    let at = |t: usize| l.values.get(row * width + t).copied().map(f64::from);
                    let (r, t) = (at(reference_token)?, at(token)?);
                    Some((r - t).abs() / (1.0 + r.abs()))
                })
                .unwrap_or(f64::INFINITY);
            c.flips.push(TokenFlip {
                request: *request,
                node: node.name.clone(),
                step: x.step,
                token,
                reference_token,
                gap,
            });
            flipped = true;
            break;
        }
        if !flipped && xs.len() != ys.len() {
            return None;
        }
    }
    Some(c)
}

/// A trace's entries by request (input key), each request's in execution order.
fn by_request(t: &[TraceEntry]) -> std::collections::BTreeMap<u64, Vec<&TraceEntry>> {
    let mut m: std::collections::BTreeMap<u64, Vec<&TraceEntry>> = Default::default();
    for e in t {
        m.entry(e.input).or_default().push(e);
    }
    m
}

/// Serves the same requests alone (serial) on two devices and returns both devices' traces:
/// every node execution's output rows in execution order, for op-by-op comparison
/// ([`compare_traces`]).
pub fn trace_both(
    model: &Model,
    a: &mut dyn Device,
    b: &mut dyn Device,
    requests: usize,
    max_batch: u32,
    seed: u64,
) -> Result<(Vec<TraceEntry>, Vec<TraceEntry>)> {
    traces_both(
        model,
        (a, b),
        requests,
        max_batch,
        seed,
        CaptureMode::EveryNode,
    )
}

/// Both devices' trace entries of a serial run recording `mode` ([`capture_both`]).
fn traces_both(
    model: &Model,
    devices: (&mut dyn Device, &mut dyn Device),
    requests: usize,
    max_batch: u32,
    seed: u64,
    mode: CaptureMode,
) -> Result<(Vec<TraceEntry>, Vec<TraceEntry>)> {
    let (ca, cb) = capture_both(model, devices, requests, max_batch, seed, mode)?;
    Ok((ca.trace, cb.trace))
}

/// Largest relative difference per node (over all its executions), and the first execution
/// whose difference exceeds the tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceComparison {
    /// Per node index: (node name, op kind, largest relative difference), for nodes that ran.
    pub nodes: Vec<(String, &'static str, f64)>,
    /// Node executions compared.
    pub executions: usize,
    /// The first execution, in execution order, whose relative difference exceeds the
    /// tolerance: (node name, op kind, step, request input key, relative difference).
    pub first_divergence: Option<(String, &'static str, u32, u64, f64)>,
}

/// Compares two traces of the same serving run entry by entry, with the relative difference
/// `|a - b| / (1 + |b|)` (NaN counts as infinite). Errors when the traces do not describe the
/// same executions (a decoded token differed, so the runs took different paths), naming the
/// first entry where they part.
pub fn compare_traces(
    model: &Model,
    a: &[TraceEntry],
    b: &[TraceEntry],
    tolerance: f64,
) -> Result<TraceComparison> {
    let mut worst = vec![None::<f64>; model.nodes.len()];
    let mut first = None;
    for (n, (x, y)) in a.iter().zip(b).enumerate() {
        let node = model.nodes.get(x.node).ok_or_else(|| {
            Error::Internal(format!("trace entry {n}: node {} not in the model", x.node))
        })?;
        if (x.input, x.node, x.step, x.values.len()) != (y.input, y.node, y.step, y.values.len()) {
            return Err(Error::Internal(format!(
                "traces part at entry {n}: node '{}' step {} (request {}, {} values) vs node {} step {} (request {}, {} values)",
                node.name, x.step, x.input, x.values.len(), y.node, y.step, y.input, y.values.len()
            )));
        }
        let rel = x
            .values
            .iter()
            .zip(&y.values)
            .map(|(&p, &q)| rel_diff(p, q))
            .fold(0.0f64, f64::max);
        let w = &mut worst[x.node];
        *w = Some(w.map_or(rel, |v: f64| v.max(rel)));
        if first.is_none() && rel > tolerance {
            first = Some((node.name.clone(), node.op.kind_name(), x.step, x.input, rel));
        }
    }
    if a.len() != b.len() {
        return Err(Error::Internal(format!(
            "traces differ in length: {} vs {} node executions",
            a.len(),
            b.len()
        )));
    }
    Ok(TraceComparison {
        nodes: worst
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                w.map(|w| {
                    (
                        model.nodes[i].name.clone(),
                        model.nodes[i].op.kind_name(),
                        w,
                    )
                })
            })
            .collect(),
        executions: a.len(),
        first_divergence: first,
    })
}

/// Verifies `model` on `dev`: outputs alone against outputs under forced preemptions and
/// merges. `tolerance`: None demands bit-identical outputs (the CPU), Some(t) allows a relative
/// difference up to `t` (a GPU; see [`tolerance`]).
pub fn verify(
    model: &Model,
    dev: &mut dyn Device,
    requests: usize,
    max_batch: u32,
    seed: u64,
    tolerance: Option<f64>,
) -> Result<VerifyReport> {
    let arrivals = arrivals_at_zero(model, requests, seed)?;
    dev.prepare(model, max_batch)?;
    let (alone, _) = serve(
        model,
        dev,
        &mut Serial,
        &arrivals,
        max_batch,
        CaptureMode::Outputs,
    )?;
    let reach = u32::try_from(model.unrolled_len(model.ref_lengths())).unwrap_or(u32::MAX);
    let (lazy, c) = serve(
        model,
        dev,
        &mut Forced::new(reach),
        &arrivals,
        max_batch,
        CaptureMode::Outputs,
    )?;
    let (alone, lazy) = (alone.outputs, lazy.outputs);
    let mut rep = VerifyReport {
        model: model.name.clone(),
        requests,
        values: 0,
        mismatched_requests: 0,
        max_abs_diff: 0.0,
        max_rel_diff: 0.0,
        bit_identical: true,
        tolerance: tolerance.unwrap_or(0.0),
        ok: true,
        preemptions: c.preemptions,
        merges: c.merges,
        cross_step: c.cross_step,
        mean_batch: c.batch_sum as f64 / c.executions.max(1) as f64,
    };
    for k in 0..requests as u64 {
        let (a, b) = match (alone.get(&k), lazy.get(&k)) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(Error::Internal(format!("request {k}: no output captured"))),
        };
        if a.len() != b.len() {
            rep.mismatched_requests += 1;
            rep.max_abs_diff = f64::INFINITY;
            rep.max_rel_diff = f64::INFINITY;
            continue;
        }
        rep.values += a.len();
        let mut differs = false;
        for (x, y) in a.iter().zip(b) {
            if x.to_bits() != y.to_bits() {
                differs = true;
                let d = f64::from((x - y).abs());
                let d = if d.is_nan() { f64::INFINITY } else { d };
                rep.max_abs_diff = rep.max_abs_diff.max(d);
                rep.max_rel_diff = rep.max_rel_diff.max(d / (1.0 + f64::from(y.abs())));
            }
        }
        if !a.iter().all(|v| v.is_finite()) {
            return Err(Error::Internal(format!("request {k}: non-finite output")));
        }
        rep.mismatched_requests += usize::from(differs);
    }
    rep.bit_identical = rep.mismatched_requests == 0;
    rep.ok = match tolerance {
        None => rep.bit_identical,
        Some(t) => rep.max_rel_diff <= t,
    };
    Ok(rep)
}

#[cfg(test)]
mod tests;
