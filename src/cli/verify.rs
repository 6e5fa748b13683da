//! `lazybatch verify`: a real device's outputs alone against under forced preemptions and
//! merges (and, on CUDA, against the CPU reference).

use super::{emit, positive, ModelArgs};
use anyhow::{bail, Result};
use clap::Args;
use lazybatch::device::open::open_real;
use lazybatch::device::RealOptions;
use lazybatch::error::num;
use serde_json::json;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(super) struct VerifyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Device: cpu or cuda (cuda also compares with the CPU reference).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Requests to serve.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    requests: i64,
    /// Maximum batch (activation slots).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    max_batch: i64,
    /// Seed of weights, inputs and lengths.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CUDA: precision of GEMMs and convolutions: f32, f16 or tf32.
    #[arg(long, default_value = "f32")]
    precision: String,
    /// CUDA: replay each node's launches as a CUDA graph (captured once per launch shape).
    #[arg(long)]
    cuda_graphs: bool,
    /// CUDA: how convolutions run: auto (cuDNN where it loads, else im2col), cudnn or im2col.
    #[arg(long, default_value = "auto")]
    conv: String,
    /// CUDA: also compare with the CPU reference node by node (two requests), printing each op
    /// kind's largest relative difference and the first node execution above --tolerance.
    #[arg(long)]
    ops: bool,
    /// Relative tolerance for --ops.
    #[arg(long, default_value_t = 1e-3, allow_negative_numbers = true)]
    tolerance: f64,
    /// Also write each request's model input and output, served alone, to FILE as JSON
    /// (`{"inputs": [[…]], "outputs": [[…]]}`), to compare with another runtime on the same
    /// inputs (`scripts/onnx-check.py MODEL.onnx FILE` runs onnxruntime).
    #[arg(long, value_name = "FILE")]
    io_json: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The request count and maximum batch, every argument checked before any work.
fn check(a: &VerifyArgs) -> Result<(usize, u32)> {
    let n = positive("--requests", a.requests)? as usize;
    let mb = positive("--max-batch", a.max_batch)?;
    if !(a.tolerance > 0.0 && a.tolerance < 1.0) {
        bail!(
            "invalid --tolerance: must be in (0, 1), got {}",
            num(a.tolerance)
        );
    }
    if a.ops && a.device != "cuda" {
        bail!("--ops compares a CUDA device with the CPU: use it with --device cuda");
    }
    if n > 10_000 || mb > 4096 {
        bail!("verify serves at most 10000 requests at a maximum batch of at most 4096 (got --requests {n}, --max-batch {mb})");
    }
    Ok((n, mb))
}

/// Serves requests alone and under forced preemptions and merges; exit code 1 on any
/// difference.
pub(super) fn run(a: VerifyArgs) -> Result<ExitCode> {
    let mut o = String::new();
    let (n, mb) = check(&a)?;
    let model = a.model.load()?;
    let opts = RealOptions {
        seed: a.seed,
        precision: a.precision.clone(),
        cuda_graphs: a.cuda_graphs,
        conv: a.conv.clone(),
    };
    let mut dev = open_real(&a.device, &opts)?;
    super::say_gpu(dev.as_ref(), &opts);
    let t0 = std::time::Instant::now();
    // the CPU must be bit-identical; a GPU's BLAS reorders sums by batch: a stated tolerance
    let gpu = dev.name() == "cuda";
    let tol = gpu.then(|| lazybatch::run::verify::tolerance(&model, &a.precision));
    let r = lazybatch::run::verify::verify(&model, dev.as_mut(), n, mb, a.seed, tol)?;
    // on a GPU, also compare with the CPU reference (same weights and inputs)
    let vs_cpu = if gpu {
        let mut cpu = lazybatch::device::cpu::CpuDevice::new(a.seed);
        let (g, c) = lazybatch::run::verify::output_steps_both(
            &model,
            dev.as_mut(),
            &mut cpu,
            n,
            mb,
            a.seed,
        )?;
        Some(lazybatch::run::verify::compare_outputs(&model, &g, &c))
    } else {
        None
    };
    let vs_cpu_ok = match (&vs_cpu, tol) {
        (Some(Some(c)), Some(t)) => c.ok(t),
        (Some(None), _) => false,
        _ => true,
    };
    if let Some(path) = &a.io_json {
        let io = lazybatch::run::verify::inputs_and_outputs(&model, dev.as_mut(), n, mb, a.seed)?;
        let v = json!({
            "model": model.name,
            "inputs": io.iter().map(|r| &r.input).collect::<Vec<_>>(),
            "outputs": io.iter().map(|r| &r.output).collect::<Vec<_>>(),
        });
        std::fs::write(path, v.to_string())
            .map_err(|e| anyhow::anyhow!("--io-json {}: {e}", path.display()))?;
    }
    let ops = if a.ops {
        let mut cpu = lazybatch::device::cpu::CpuDevice::new(a.seed);
        let (g, c) = lazybatch::run::verify::trace_both(
            &model,
            dev.as_mut(),
            &mut cpu,
            n.min(2),
            mb,
            a.seed,
        )?;
        Some(lazybatch::run::verify::compare_traces(
            &model,
            &g,
            &c,
            a.tolerance,
        )?)
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(t) = &ops {
            v["ops_executions"] = json!(t.executions);
            v["ops_nodes"] = json!(t
                .nodes
                .iter()
                .map(|(name, op, rel)| json!({"node": name, "op": op, "max_rel_diff": rel}))
                .collect::<Vec<_>>());
            v["ops_first_divergence"] = json!(t.first_divergence.as_ref().map(
                |(name, op, step, input, rel)| {
                    json!({"node": name, "op": op, "step": step, "request": input, "rel_diff": rel})
                }
            ));
        }
        if let Some(d) = &vs_cpu {
            v["vs_cpu_max_abs_diff"] = json!(d.as_ref().map(|c| c.max_abs));
            v["vs_cpu_max_rel_diff"] = json!(d.as_ref().map(|c| c.max_rel));
            v["vs_cpu_token_flips"] = json!(d.as_ref().map(|c| &c.flips));
            v["vs_cpu_ok"] = json!(vs_cpu_ok);
        }
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!(o, "{} on {}: {} requests alone vs under {} forced preemptions and {} merges (mean batch {:.2}; {} executions mixed timesteps)", r.model, dev.description(), r.requests, r.preemptions, r.merges, r.mean_batch, r.cross_step);
        out!(
            o,
            "  compared {} output values: {} requests differ, largest difference {:e}",
            r.values,
            r.mismatched_requests,
            r.max_abs_diff
        );
        let verdict = match (r.ok, tol) {
            (true, None) => "bit-identical: OK".to_string(),
            (false, None) => "MISMATCH (the CPU must be bit-identical)".to_string(),
            (ok, Some(t)) => format!(
                "{}: largest relative difference {:e} against a tolerance of {t:e} for {} ({})",
                if ok { "OK" } else { "MISMATCH" },
                r.max_rel_diff,
                a.precision,
                if r.bit_identical {
                    "bit-identical too"
                } else {
                    "not bit-identical: the BLAS summed in another order"
                }
            ),
        };
        out!(o, "  {verdict} ({:.1} s)", t0.elapsed().as_secs_f64());
        match &vs_cpu {
            Some(Some(c)) => {
                out!(o, "  against the CPU reference: {} values, largest difference {:e} (relative {:e}): {}", c.values, c.max_abs, c.max_rel, if vs_cpu_ok { "OK" } else { "MISMATCH" });
                for f in &c.flips {
                    let judged = match tol {
                        Some(t) if f.gap <= t => "a near tie: compared up to there",
                        _ => "NOT a near tie",
                    };
                    out!(o, "    request {} chose token {} at step {} of '{}' where the CPU chose {}; the CPU's logits for the two {:e} apart (relative): {judged}", f.request, f.token, f.step, f.node, f.reference_token, f.gap);
                }
            }
            Some(None) => out!(o, "  against the CPU reference: the outputs part (another node, step or size): MISMATCH"),
            None => {}
        }
        if let Some(t) = &ops {
            let mut per_op: std::collections::BTreeMap<&str, f64> = Default::default();
            for (_, op, rel) in &t.nodes {
                let w = per_op.entry(op).or_insert(0.0);
                *w = w.max(*rel);
            }
            out!(
                o,
                "  node by node against the CPU ({} node executions, {} nodes):",
                t.executions,
                t.nodes.len()
            );
            for (op, rel) in per_op {
                out!(o, "    {op:<12} largest relative difference {rel:e}");
            }
            match &t.first_divergence {
                Some((name, op, step, input, rel)) => out!(
                    o,
                    "  FIRST DIVERGENCE above {:e}: node '{name}' ({op}) at step {step}, request {input}: {rel:e}",
                    a.tolerance
                ),
                None => out!(o, "  no node execution differs by more than {:e}", a.tolerance),
            }
        }
    }
    emit(&o)?;
    let diverged = ops.is_some_and(|t| t.first_divergence.is_some());
    Ok(if !r.ok || !vs_cpu_ok || diverged {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
