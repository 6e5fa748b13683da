//! The `lifo` experiment: why LazyB can lose to Serial. LazyB preempts whenever the slack
//! allows and merges when it catches up, so when batching gains little it serves newcomers
//! first, like preemptive last-come-first-served (LIFO-PR), whose M/G/1 mean response time
//! `E[S]/(1−ρ)` is above first-come-first-served's `E[S] + λE[S²]/(2(1−ρ))`
//! (Pollaczek–Khinchine; for a deterministic service time, M/D/1) — and worse than LIFO-PR,
//! since a merged newcomer finishes only with the older members. Serial and LazyB run against load for a model whose
//! batching gains little (ResNet-50) and one whose batching gains much (the Transformer), with
//! both curves drawn from the service-time moments of the NPU configuration (each request
//! served alone at its own WMT 2019 lengths).

use super::{short, Ctx, Experiment, COVERAGE, MAX_BATCH, SLA_MS};
use crate::device::measure::alone_latency;
use crate::device::npu::{Npu, NpuConfig};
use crate::device::Device;
use crate::error::Result;
use crate::graph::{zoo, Lengths, Model};
use crate::metrics::spread;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use crate::report::{Job, Plan};
use crate::traffic::lengths::{to_steps, JointLengths};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Serial and LazyB against load beside M/G/1 theory.
pub(super) struct Lifo;

impl Experiment for Lifo {
    fn name(&self) -> &'static str {
        "lifo"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        add_jobs(plan, npu, jobs)
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        write(ctx)
    }
}

/// The models: a small batching gain, a large one.
pub(crate) const MODELS: &[&str] = &["resnet50", "transformer_base"];
const POLICIES: &[&str] = &["serial", "lazy"];

/// Service-time moments of one request served alone: (E[S], E[S²]) in seconds, over the
/// model's request lengths (WMT 2019 pairs for a seq2seq model).
pub(crate) fn service_moments(cfg: &NpuConfig, model: &Model) -> Result<(f64, f64)> {
    let mut npu = Npu::new(cfg.clone())?;
    npu.prepare(model, 1)?;
    let Some(seq) = &model.seq else {
        let s = alone_latency(&mut npu, model, model.ref_lengths())?.as_secs();
        return Ok((s, s * s));
    };
    let joint = JointLengths::wmt19()?;
    let (mut m1, mut m2, mut n) = (0.0, 0.0, 0u64);
    for ((en, de), c) in joint.pairs() {
        let len = Lengths {
            enc: to_steps(en, seq.enc_scale, seq.max_enc),
            dec: to_steps(de, seq.dec_scale, seq.max_dec),
        };
        let s = alone_latency(&mut npu, model, len)?.as_secs();
        m1 += s * c as f64;
        m2 += s * s * c as f64;
        n += c;
    }
    let n = n.max(1) as f64;
    Ok((m1 / n, m2 / n))
}

/// The arrival rate (req/s) of load `rho` for mean service time `es` (s), as a job stores it.
fn rate_of(rho: f64, es: f64) -> f64 {
    (rho / es * 1e3).round() / 1e3
}

/// Adds the runs: both policies at every load, on configuration `cfg`.
fn add_jobs(plan: &Plan, cfg: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
    for &m in MODELS {
        let (es, _) = service_moments(cfg, &zoo::load(m)?)?;
        for &rho in &plan.lifo_loads {
            for p in POLICIES {
                for s in 1..=u64::from(plan.seeds) {
                    let r = rate_of(rho, es);
                    jobs.insert(Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                }
            }
        }
    }
    Ok(())
}

/// M/G/1 mean response times at arrival rate `lambda` (req/s): (FIFO, preemptive LIFO), in ms.
pub(crate) fn mg1(lambda: f64, es: f64, es2: f64) -> Option<(f64, f64)> {
    let rho = lambda * es;
    (rho < 1.0).then(|| {
        let fifo = es + lambda * es2 / (2.0 * (1.0 - rho));
        let lifo = es / (1.0 - rho);
        (fifo * 1e3, lifo * 1e3)
    })
}

/// Writes the table, the figure and the report section.
fn write(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "load",
        "rate_rps",
        "serial_mean_ms",
        "lazy_mean_ms",
        "lazy_mean_batch",
        "mg1_fifo_ms",
        "mg1_preemptive_lifo_ms",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from(
        "| model | batching gain at 64 | load | Serial (ms) | M/G/1 FIFO | LazyB (ms) | preemptive LIFO | LazyB mean batch |\n|---|---|---|---|---|---|---|---|\n",
    );
    for &m in MODELS {
        let model = zoo::load(m)?;
        let (es, es2) = service_moments(ctx.npu(), &model)?;
        let gain = batching_gain(ctx.npu(), &model)?;
        let mut panel = Panel {
            title: format!("{} (batching gain {gain:.2}×)", short(m)),
            x_label: "load ρ = arrival rate × mean service time".into(),
            y_label: "mean latency (ms)".into(),
            log_y: true,
            ..Panel::default()
        };
        let mut measured: Vec<Series> = POLICIES
            .iter()
            .map(|p| Series {
                name: if *p == "lazy" { "LazyB" } else { "Serial" }.into(),
                markers: true,
                ..Series::default()
            })
            .collect();
        for &rho in &ctx.plan.lifo_loads {
            let r = rate_of(rho, es);
            let (fifo, lifo) = mg1(r, es, es2).unwrap_or((f64::NAN, f64::NAN));
            let mut row = vec![m.into(), rho.into(), r.into()];
            let mut cells = Vec::new();
            for (k, p) in POLICIES.iter().enumerate() {
                let runs = ctx.runs_named(m, p, r)?;
                let lat = spread(runs.iter().map(|x| x.stats.latency_ms.mean).collect());
                let batch = spread(runs.iter().map(|x| x.stats.mean_batch_size).collect());
                measured[k].push_spread(rho, lat);
                row.push(lat.0.into());
                cells.push((lat.0, batch.0));
            }
            row.push(cells[1].1.into());
            row.push(fifo.into());
            row.push(lifo.into());
            t.push(row);
            let _ = writeln!(
                text,
                "| {} | {gain:.2}× | {rho} | {:.3} | {fifo:.3} | {:.3} | {lifo:.3} | {:.2} |",
                short(m),
                cells[0].0,
                cells[1].0,
                cells[1].1
            );
        }
        let curve = |name: &str, pick: fn((f64, f64)) -> f64| {
            let hi = ctx.plan.lifo_loads.iter().copied().fold(0.0, f64::max);
            Series {
                name: name.into(),
                dashed: true,
                points: (1..=96)
                    .map(|i| f64::from(i) / 100.0)
                    .filter(|&x| x <= hi.max(0.5) + 1e-9)
                    .filter_map(|x| mg1(x / es, es, es2).map(|v| (x, pick(v))))
                    .collect(),
                ..Series::default()
            }
        };
        panel.series.extend(measured);
        panel.series.push(curve("FIFO, M/G/1", |v| v.0));
        panel.series.push(curve("LIFO-PR, M/G/1", |v| v.1));
        fig.panels.push(panel);
    }
    ctx.table(&t, "lifo")?;
    ctx.figure(&fig, "lifo", 460, 400)?;
    ctx.sections.push((
        "Why LazyB can lose to Serial: preemptive LIFO".into(),
        format!(
            "![lifo](lifo.svg)\n\nLazyB preempts the running batch whenever the slack allows and \
             merges with it when the newcomer catches up. When batching gains little, the merged \
             batch takes about as long as its members one after another, so LazyB serves newcomers \
             first, like preemptive last-come-first-served (LIFO-PR), whose mean response time in \
             an M/G/1 queue is E[S]/(1−ρ) — above first-come-first-served's \
             E[S] + λE[S²]/(2(1−ρ)), which Serial follows. LazyB does worse still than LIFO-PR: \
             after a merge every member finishes when the merged batch does, so the newcomer also \
             waits for the older members' remaining work, where LIFO-PR would let it leave first. \
             When batching gains much, the newcomer's catch-up and the merged batch cost little \
             more than the batch alone, and LazyB stays near E[S] at every load. The curves use \
             the service-time moments of this NPU configuration (each request served alone at its \
             own WMT 2019 lengths); the points are means over seeds with 25th/75th-percentile \
             bars.\n\n{text}"
        ),
    ));
    Ok(())
}

/// Whole-graph throughput at batch 64 over batch 1, at the reference lengths.
fn batching_gain(cfg: &NpuConfig, model: &Model) -> Result<f64> {
    let mut npu = Npu::new(cfg.clone())?;
    let len = model.ref_lengths();
    let p = crate::profile::Profile::measure(&mut npu, model, MAX_BATCH, len)?;
    let c = crate::runtime::Predictor::new(model, &p, len.dec).batch_curve(len);
    Ok(c[c.len() - 1].2 / c[0].2)
}

#[cfg(test)]
mod tests {
    use super::mg1;

    #[test]
    fn mg1_formulas() {
        // M/D/1 at ρ = 0.5 with S = 1 ms: FIFO 1 + 0.5/(2·0.5) = 1.5 ms, LIFO-PR 2 ms
        let (f, l) = mg1(500.0, 1e-3, 1e-6).unwrap();
        assert!((f - 1.5).abs() < 1e-9 && (l - 2.0).abs() < 1e-9, "{f} {l}");
        assert!(mg1(1000.0, 1e-3, 1e-6).is_none());
    }
}
