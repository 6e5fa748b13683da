//! The experiments of `reproduce`: which runs each needs ([`jobs`]), and the data, figures and
//! report rows each writes from the results ([`write`], [`write_report`]).

use super::plot::{Figure, Mark, Panel, Series};
use super::table::{Cell, Table};
use super::{Job, Plan, Results, RunOut};
use crate::device::npu::{Npu, NpuConfig};
use crate::error::{Error, Result};
use crate::graph::zoo;
use crate::metrics::{quantile as q, spread};
use crate::profile::Profile;
use crate::runtime::lengths::dec_timesteps;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Experiment names, in report order (the values `--figures` accepts).
pub const EXPERIMENTS: &[&str] = &[
    "batching",
    "traffic",
    "eval",
    "cdf",
    "sla",
    "sensitivity",
    "dec_timesteps",
    "max_batch",
    "cellular",
    "colocation",
    "lifo",
];

/// The four co-located models (the paper's §VI names four; we take the three main ones and BERT).
pub(super) const COLO: &str = "resnet50,gnmt,transformer_base,bert_base";
pub(super) const COLO_POLICIES: &[&str] = &["lazy", "graph:5", "graph:25", "graph:50"];

const CELL_MODELS: &[&str] = &["resnet50", "gnmt", "transformer_base", "lstm_stack"];
const CELL_POLICIES: &[&str] = &[
    "graph:5",
    "graph:25",
    "cellular:5",
    "cellular:25",
    "lazy",
    "lazy:strict",
];

pub(super) const MAIN: &[&str] = &["resnet50", "gnmt", "transformer_base"];
const OTHERS: &[&str] = &["vgg16", "mobilenet_v1", "las", "bert_base"];
pub(super) const MAX_BATCH: u32 = 64;
/// Ablations run beside the main evaluation: LazyB with the strict (node, timestep) merge rule.
pub(super) const ABLATIONS: &[&str] = &["lazy:strict"];
pub(super) const SLA_MS: f64 = 100.0;
pub(super) const COVERAGE: f64 = 90.0;

/// Paper-style label of a policy string.
pub(super) fn label(p: &str) -> String {
    match p {
        "serial" => "Serial".into(),
        "lazy" => "LazyB".into(),
        "oracle" => "Oracle".into(),
        "lazy:strict" => "LazyB (strict)".into(),
        "oracle:strict" => "Oracle (strict)".into(),
        g => match (g.strip_prefix("graph:"), g.strip_prefix("cellular:")) {
            (Some(rest), _) => format!("GraphB({})", rest.split(':').next().unwrap_or(rest)),
            (_, Some(rest)) => format!("Cellular({})", rest.split(':').next().unwrap_or(rest)),
            _ => g.into(),
        },
    }
}

pub(super) fn short(model: &str) -> &str {
    match model {
        "resnet50" => "ResNet-50",
        "gnmt" => "GNMT",
        "transformer_base" => "Transformer",
        "vgg16" => "VGG-16",
        "mobilenet_v1" => "MobileNet",
        "las" => "LAS",
        "bert_base" => "BERT",
        "lstm_stack" => "LSTM stack (pure RNN)",
        m => m,
    }
}

pub(super) fn graph_policy(w: f64, b: u32) -> String {
    if b == MAX_BATCH {
        format!("graph:{w}")
    } else {
        format!("graph:{w}:{b}")
    }
}

/// The policies of the main evaluation: the paper's four design points, and graph batching
/// without a window (`graph:0`, Triton's dynamic batcher with no queue delay), which the paper
/// does not evaluate; "best GraphB" is chosen among the paper's windows only.
fn policies(plan: &Plan) -> Vec<String> {
    let mut v = vec!["serial".to_string(), "graph:0".to_string()];
    v.extend(plan.windows.iter().map(|&w| graph_policy(w, MAX_BATCH)));
    v.push("lazy".into());
    v.push("oracle".into());
    v
}

fn seeds(plan: &Plan) -> impl Iterator<Item = u64> {
    1..=u64::from(plan.seeds)
}

fn eval_jobs(
    models: &[&'static str],
    rates: &[f64],
    plan: &Plan,
    ablations: bool,
    jobs: &mut BTreeSet<Job>,
) {
    for &m in models {
        for p in with_ablations(plan, ablations) {
            for &r in rates {
                for s in seeds(plan) {
                    jobs.insert(Job::new(m, &p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                }
            }
        }
    }
}

fn sla_jobs(models: &[&'static str], plan: &Plan, jobs: &mut BTreeSet<Job>) {
    for &m in models {
        for p in ["lazy", "oracle"] {
            for &sla in &plan.slas {
                for s in seeds(plan) {
                    jobs.insert(Job::new(m, p, plan.high_rate, s, sla, COVERAGE, MAX_BATCH));
                }
            }
        }
    }
}

fn dec_rate(model: &str, plan: &Plan) -> f64 {
    // at 1,000 req/s GNMT saturates the NPU model under `default` (and LazyB under `paper`)
    if model == "gnmt" {
        256.0
    } else {
        plan.high_rate
    }
}

/// Adds the runs experiment `e` needs on NPU configuration `npu` (their `npu` index is set by
/// the caller).
pub fn jobs(e: &str, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
    match e {
        "traffic" => {
            for &w in &plan.traffic_windows {
                for &r in &plan.traffic_rates {
                    for s in seeds(plan) {
                        jobs.insert(Job::new(
                            "resnet50",
                            &graph_policy(w, MAX_BATCH),
                            r,
                            s,
                            SLA_MS,
                            COVERAGE,
                            MAX_BATCH,
                        ));
                    }
                }
            }
        }
        "eval" | "cdf" => eval_jobs(MAIN, &plan.rates, plan, true, jobs),
        "lifo" => super::lifo::jobs(plan, npu, jobs)?,
        "sla" => {
            eval_jobs(MAIN, &plan.rates, plan, true, jobs);
            sla_jobs(MAIN, plan, jobs);
        }
        "sensitivity" => {
            eval_jobs(OTHERS, &[plan.low_rate, plan.high_rate], plan, false, jobs);
            sla_jobs(OTHERS, plan, jobs);
        }
        "dec_timesteps" => {
            for m in ["transformer_base", "gnmt"] {
                for &c in &plan.coverages {
                    for s in seeds(plan) {
                        jobs.insert(Job::new(
                            m,
                            "lazy",
                            dec_rate(m, plan),
                            s,
                            SLA_MS,
                            c,
                            MAX_BATCH,
                        ));
                    }
                }
            }
        }
        "cellular" => {
            for &m in CELL_MODELS {
                for p in CELL_POLICIES {
                    for &r in &plan.cell_rates {
                        for s in seeds(plan) {
                            jobs.insert(Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                        }
                    }
                }
            }
        }
        "colocation" => {
            for p in COLO_POLICIES {
                for &r in &plan.colo_rates {
                    for s in seeds(plan) {
                        jobs.insert(Job::new(COLO, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                    }
                }
            }
        }
        "max_batch" => {
            for &m in MAIN {
                for &b in &plan.max_batches {
                    for &r in &plan.rates {
                        for s in seeds(plan) {
                            for &w in &plan.windows {
                                jobs.insert(Job::new(
                                    m,
                                    &graph_policy(w, b),
                                    r,
                                    s,
                                    SLA_MS,
                                    COVERAGE,
                                    b,
                                ));
                            }
                            jobs.insert(Job::new(m, "lazy", r, s, SLA_MS, COVERAGE, b));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Across-seed aggregate of one configuration.
#[derive(Clone, Debug, Default)]
pub struct Agg {
    /// Mean latency (mean over seeds) and its 25th/75th percentiles across seeds.
    pub lat: (f64, f64, f64),
    /// Throughput, likewise.
    pub tp: (f64, f64, f64),
    /// p99 latency (mean over seeds).
    pub p99: f64,
    /// SLA violation at the run's SLA.
    pub viol: (f64, f64, f64),
    /// Mean executed batch size.
    pub batch: (f64, f64, f64),
}

/// Shared state of the writers.
pub struct Ctx<'a> {
    pub(super) plan: &'a Plan,
    res: &'a Results,
    pub(super) out: PathBuf,
    npu: &'a NpuConfig,
    /// Which configuration (index into the options' list) and its name.
    pub(super) npu_idx: u8,
    pub(super) npu_name: String,
    /// Files written so far (relative to `out`).
    pub files: Vec<String>,
    /// report.md sections, by experiment.
    pub(super) sections: Vec<(String, String)>,
    /// The co-location experiment's (latency gain, throughput gain, best GraphB), when run.
    pub(super) colo_gains: Option<(f64, f64, String)>,
}

impl<'a> Ctx<'a> {
    /// A context for NPU configuration `npu_idx` (`npu`, named `name`), writing into `out`.
    pub fn new(
        plan: &'a Plan,
        res: &'a Results,
        out: PathBuf,
        npu: &'a NpuConfig,
        npu_idx: u8,
        name: &str,
    ) -> Result<Self> {
        Ok(Ctx {
            plan,
            res,
            out,
            npu,
            npu_idx,
            npu_name: name.to_string(),
            files: Vec::new(),
            sections: Vec::new(),
            colo_gains: None,
        })
    }

    /// The NPU configuration.
    pub(super) fn npu(&self) -> &NpuConfig {
        self.npu
    }

    /// Writes this configuration's `config.json`: the NPU configuration and the plan.
    pub fn write_config(&mut self, selected: &[&str], quick: bool, runs: usize) -> Result<()> {
        let config = serde_json::json!({
            "lazybatch_version": env!("CARGO_PKG_VERSION"),
            "quick": quick,
            "experiments": selected,
            "plan": self.plan,
            "npu_name": self.npu_name,
            "npu": self.npu,
            "runs_all_configurations": runs,
            "device": "npu",
        });
        let path = self.out.join("config.json");
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&config).map_err(|e| Error::Internal(e.to_string()))?
                + "\n",
        )
        .map_err(|e| Error::io(&path, e))?;
        self.files.push("config.json".into());
        Ok(())
    }

    pub(super) fn runs(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
        sla: f64,
        cov: f64,
        mb: u32,
    ) -> Result<Vec<&'a RunOut>> {
        seeds(self.plan)
            .map(|s| {
                let j = Job::new(model, policy, rate, s, sla, cov, mb).on(self.npu_idx);
                self.res
                    .get(&j)
                    .ok_or_else(|| Error::Internal(format!("missing run {j:?}")))
            })
            .collect()
    }

    pub(super) fn runs_named(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
    ) -> Result<Vec<&'a RunOut>> {
        self.runs(model, policy, rate, SLA_MS, COVERAGE, MAX_BATCH)
    }

    pub(super) fn agg(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
        sla: f64,
        cov: f64,
        mb: u32,
    ) -> Result<Agg> {
        let runs = self.runs(model, policy, rate, sla, cov, mb)?;
        let f = |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|r| g(r)).collect());
        Ok(Agg {
            lat: f(&|r| r.stats.latency_ms.mean),
            tp: f(&|r| r.stats.throughput_rps),
            p99: f(&|r| r.stats.latency_ms.p99).0,
            viol: f(&|r| r.violation(sla)),
            batch: f(&|r| r.stats.mean_batch_size),
        })
    }

    pub(super) fn table(&mut self, t: &Table, name: &str) -> Result<()> {
        t.write(&self.out, name)?;
        self.files.push(format!("{name}.csv"));
        self.files.push(format!("{name}.json"));
        Ok(())
    }

    pub(super) fn figure(&mut self, f: &Figure, name: &str, w: u32, h: u32) -> Result<()> {
        f.write_svg(&self.out.join(format!("{name}.svg")), w, h)?;
        self.files.push(format!("{name}.svg"));
        Ok(())
    }

    /// The GraphB window (at max batch `mb`) with the lowest mean latency averaged over the
    /// evaluated rates: our definition of "the best performing graph batching".
    pub(super) fn best_graph(&self, model: &'static str, rates: &[f64], mb: u32) -> Result<String> {
        let mut best: Option<(f64, String)> = None;
        for &w in &self.plan.windows {
            let p = graph_policy(w, mb);
            let mut s = 0.0;
            for &r in rates {
                s += self.agg(model, &p, r, SLA_MS, COVERAGE, mb)?.lat.0;
            }
            if best.as_ref().is_none_or(|b| s < b.0) {
                best = Some((s, p));
            }
        }
        best.map(|b| b.1)
            .ok_or_else(|| Error::Internal("no graph windows".into()))
    }
}

pub(super) fn geomean(v: &[f64]) -> f64 {
    let v: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Writes experiment `e`.
pub fn write(e: &str, ctx: &mut Ctx) -> Result<()> {
    match e {
        "batching" => batching(ctx),
        "traffic" => traffic(ctx),
        "eval" => eval(ctx),
        "cdf" => cdf(ctx),
        "sla" => sla(ctx),
        "sensitivity" => sensitivity(ctx),
        "dec_timesteps" => dec_ts(ctx),
        "max_batch" => max_batch(ctx),
        "cellular" => cellular(ctx),
        "colocation" => colocation(ctx),
        "lifo" => super::lifo::write(ctx),
        _ => Ok(()),
    }
}

fn batching(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "batch",
        "latency_ms",
        "throughput_rps",
        "latency_per_input_ms",
        "throughput_vs_batch1",
    ]);
    let mut tp = Panel {
        title: "Throughput vs batch size (NPU model)".into(),
        x_label: "batch size".into(),
        y_label: "throughput / throughput at batch 1".into(),
        log_x: true,
        log_y: true,
        ..Panel::default()
    };
    let mut lat = Panel {
        title: "Latency per input vs batch size".into(),
        x_label: "batch size".into(),
        y_label: "batch latency / batch size (ms)".into(),
        log_x: true,
        log_y: true,
        ..Panel::default()
    };
    let mut text = String::from("| model | batch-1 latency (ms) | throughput at 1 / 16 / 64 (req/s) | batch reaching 95% of the batch-64 throughput |\n|---|---|---|---|\n");
    for name in zoo::builtin_names() {
        let m = zoo::load(name)?;
        let mut npu = Npu::new(ctx.npu.clone())?;
        let len = m.ref_lengths();
        let p = Profile::measure(&mut npu, &m, MAX_BATCH, len)?;
        let curve = p.batch_curve(&m, len);
        let base = curve[0].2;
        let mut s1 = Series {
            name: short(name).into(),
            ..Series::default()
        };
        let mut s2 = s1.clone();
        for &(b, l, thr) in &curve {
            t.push(vec![
                name.into(),
                b.into(),
                l.as_ms().into(),
                thr.into(),
                (l.as_ms() / f64::from(b)).into(),
                (thr / base).into(),
            ]);
            s1.points.push((f64::from(b), thr / base));
            s2.points.push((f64::from(b), l.as_ms() / f64::from(b)));
        }
        tp.series.push(s1);
        lat.series.push(s2);
        let sat = curve
            .iter()
            .find(|c| c.2 >= 0.95 * curve[curve.len() - 1].2)
            .map_or(0, |c| c.0);
        let _ = writeln!(
            text,
            "| {} | {:.3} | {:.0} / {:.0} / {:.0} | {} |",
            short(name),
            curve[0].1.as_ms(),
            curve[0].2,
            curve[15].2,
            curve[63].2,
            sat
        );
    }
    ctx.table(&t, "batching")?;
    ctx.figure(
        &Figure {
            panels: vec![tp, lat],
            shared_legend: true,
        },
        "batching",
        560,
        440,
    )?;
    ctx.sections.push(("Batching impact (paper Fig. 3)".into(), format!("![batching](batching.svg)\n\nEvery member at the model's reference lengths (seq2seq: 30/30 words; LAS 800/120 steps).\n\n{text}")));
    Ok(())
}

fn traffic(ctx: &mut Ctx) -> Result<()> {
    let plan = ctx.plan;
    let mut t = Table::new(&[
        "rate_rps",
        "window_ms",
        "mean_batch",
        "mean_batch_p25",
        "mean_batch_p75",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
    ]);
    let mut pb = Panel {
        title: "GraphB batch size vs window (ResNet-50)".into(),
        x_label: "batching time window (ms)".into(),
        y_label: "mean executed batch size".into(),
        log_y: true,
        ..Panel::default()
    };
    let mut pl = Panel {
        title: "GraphB latency vs window (ResNet-50)".into(),
        x_label: "batching time window (ms)".into(),
        y_label: "mean latency (ms)".into(),
        log_y: true,
        ..Panel::default()
    };
    for &r in &plan.traffic_rates {
        let mut sb = Series {
            name: format!("{r} req/s"),
            markers: true,
            ..Series::default()
        };
        let mut sl = sb.clone();
        for &w in &plan.traffic_windows {
            let a = ctx.agg(
                "resnet50",
                &graph_policy(w, MAX_BATCH),
                r,
                SLA_MS,
                COVERAGE,
                MAX_BATCH,
            )?;
            t.push(vec![
                r.into(),
                w.into(),
                a.batch.0.into(),
                a.batch.1.into(),
                a.batch.2.into(),
                a.lat.0.into(),
                a.lat.1.into(),
                a.lat.2.into(),
            ]);
            sb.points.push((w, a.batch.0));
            sb.bars.push((a.batch.1, a.batch.2));
            sl.points.push((w, a.lat.0));
            sl.bars.push((a.lat.1, a.lat.2));
        }
        pb.series.push(sb);
        pl.series.push(sl);
    }
    ctx.table(&t, "traffic")?;
    ctx.figure(
        &Figure {
            panels: vec![pb, pl],
            shared_legend: true,
        },
        "traffic",
        540,
        420,
    )?;
    ctx.sections.push(("Graph batching's batch size per traffic (paper Fig. 5)".into(), "![traffic](traffic.svg)\n\nAt low load a longer window adds latency without forming larger batches; at high load it forms larger batches.".into()));
    Ok(())
}

/// The policies of a table or figure: the evaluation's, and (`ablations`) the ablations.
fn with_ablations(plan: &Plan, ablations: bool) -> Vec<String> {
    let mut v = policies(plan);
    if ablations {
        v.extend(ABLATIONS.iter().map(|a| a.to_string()));
    }
    v
}

fn eval_table(ctx: &Ctx, models: &[&'static str], rates: &[f64], ablations: bool) -> Result<Table> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "rate_rps",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
        "p99_ms",
        "throughput_rps",
        "throughput_p25",
        "throughput_p75",
        "sla_violation_100ms",
        "mean_batch",
    ]);
    for &m in models {
        for p in with_ablations(ctx.plan, ablations) {
            for &r in rates {
                let a = ctx.agg(m, &p, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                t.push(vec![
                    m.into(),
                    p.as_str().into(),
                    r.into(),
                    a.lat.0.into(),
                    a.lat.1.into(),
                    a.lat.2.into(),
                    a.p99.into(),
                    a.tp.0.into(),
                    a.tp.1.into(),
                    a.tp.2.into(),
                    a.viol.0.into(),
                    a.batch.0.into(),
                ]);
            }
        }
    }
    Ok(t)
}

fn rate_panels(
    ctx: &Ctx,
    models: &[&'static str],
    rates: &[f64],
    latency: bool,
    ablations: bool,
) -> Result<Figure> {
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    for &m in models {
        let mut p = Panel {
            title: format!(
                "{} ({})",
                short(m),
                if latency {
                    "mean latency"
                } else {
                    "throughput"
                }
            ),
            x_label: "arrival rate (req/s)".into(),
            y_label: if latency {
                "mean latency (ms)".into()
            } else {
                "throughput (req/s)".into()
            },
            log_x: true,
            log_y: true,
            ..Panel::default()
        };
        for pol in with_ablations(ctx.plan, ablations) {
            let mut s = Series {
                name: label(&pol),
                markers: true,
                dashed: pol.starts_with("oracle") || pol.contains(":strict"),
                ..Series::default()
            };
            for &r in rates {
                let a = ctx.agg(m, &pol, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                let v = if latency { a.lat } else { a.tp };
                s.points.push((r, v.0));
                s.bars.push((v.1, v.2));
            }
            p.series.push(s);
        }
        fig.panels.push(p);
    }
    Ok(fig)
}

fn eval(ctx: &mut Ctx) -> Result<()> {
    let rates = ctx.plan.rates.clone();
    let t = eval_table(ctx, MAIN, &rates, true)?;
    ctx.table(&t, "eval")?;
    let f = rate_panels(ctx, MAIN, &rates, true, true)?;
    ctx.figure(&f, "eval_latency", 520, 440)?;
    let f = rate_panels(ctx, MAIN, &rates, false, true)?;
    ctx.figure(&f, "eval_throughput", 520, 440)?;
    let mut text = String::from("| model | best GraphB | LazyB latency gain (geomean over rates) | LazyB throughput gain |\n|---|---|---|---|\n");
    for &m in MAIN {
        let (best, l, tput) = gains(ctx, m, MAX_BATCH)?;
        let _ = writeln!(
            text,
            "| {} | {} | {:.2}× | {:.2}× |",
            short(m),
            label(&best),
            l,
            tput
        );
    }
    ctx.sections.push((
        "Latency and throughput vs arrival rate (paper Figs. 11, 12)".into(),
        format!("![latency](eval_latency.svg)\n\n![throughput](eval_throughput.svg)\n\nError bars: 25th/75th percentile across seeds.\n\n{text}"),
    ));
    Ok(())
}

/// (best GraphB, geomean latency ratio GraphB/LazyB, geomean throughput ratio LazyB/GraphB).
pub(super) fn gains(ctx: &Ctx, m: &'static str, mb: u32) -> Result<(String, f64, f64)> {
    gains_of(ctx, m, mb, "lazy")
}

/// [`gains`] of the LazyB variant `lazy_pol` (an ablation).
pub(super) fn gains_of(
    ctx: &Ctx,
    m: &'static str,
    mb: u32,
    lazy_pol: &str,
) -> Result<(String, f64, f64)> {
    let rates = &ctx.plan.rates;
    let best = ctx.best_graph(m, rates, mb)?;
    let mut lr = Vec::new();
    let mut tr = Vec::new();
    for &r in rates {
        let g = ctx.agg(m, &best, r, SLA_MS, COVERAGE, mb)?;
        let z = ctx.agg(m, lazy_pol, r, SLA_MS, COVERAGE, mb)?;
        lr.push(g.lat.0 / z.lat.0);
        tr.push(z.tp.0 / g.tp.0);
    }
    Ok((best, geomean(&lr), geomean(&tr)))
}

pub(super) fn pooled(ctx: &Ctx, m: &'static str, p: &str, r: f64) -> Result<Vec<f64>> {
    let mut v: Vec<f64> = ctx
        .runs(m, p, r, SLA_MS, COVERAGE, MAX_BATCH)?
        .iter()
        .flat_map(|x| x.lat_ms.iter().copied())
        .collect();
    v.sort_by(f64::total_cmp);
    Ok(v)
}

fn cdf(ctx: &mut Ctx) -> Result<()> {
    let r = ctx.plan.high_rate;
    let mut t = Table::new(&["model", "policy", "latency_ms", "fraction"]);
    let mut t99 = Table::new(&["model", "policy", "p99_ms"]);
    let mut fig = Figure::default();
    let mut text = String::from(
        "| model | LazyB p99 (ms) | best GraphB | its p99 (ms) |\n|---|---|---|---|\n",
    );
    for &m in MAIN {
        let best = ctx.best_graph(m, &ctx.plan.rates.clone(), MAX_BATCH)?;
        let mut p = Panel {
            title: format!("{} latency CDF at {r} req/s", short(m)),
            x_label: "latency (ms)".into(),
            y_label: "fraction of requests".into(),
            log_x: true,
            y_range: Some((0.0, 1.02)),
            legend_lower_right: true,
            ..Panel::default()
        };
        let mut row = Vec::new();
        for (i, pol) in ["lazy", best.as_str()].into_iter().enumerate() {
            let v = pooled(ctx, m, pol, r)?;
            let n = v.len();
            let step = (n / 400).max(1);
            let mut s = Series {
                name: label(pol),
                ..Series::default()
            };
            for (k, &x) in v.iter().enumerate() {
                if k % step == 0 || k + 1 == n {
                    let f = (k + 1) as f64 / n as f64;
                    s.points.push((x.max(1e-3), f));
                    t.push(vec![m.into(), pol.into(), x.into(), f.into()]);
                }
            }
            let p99 = q(&v, 0.99);
            t99.push(vec![m.into(), pol.into(), p99.into()]);
            p.marks.push(Mark {
                at: (p99.max(1e-3), 0.99),
                text_y: 0.55 - 0.08 * i as f64,
                label: format!("p99 {p99:.1} ms"),
                series: i,
            });
            p.series.push(s);
            row.push(p99);
        }
        let _ = writeln!(
            text,
            "| {} | {:.1} | {} | {:.1} |",
            short(m),
            row[0],
            label(&best),
            row[1]
        );
        fig.panels.push(p);
    }
    ctx.table(&t, "cdf")?;
    ctx.table(&t99, "cdf_p99")?;
    ctx.figure(&fig, "cdf", 520, 420)?;
    ctx.sections.push((
        "Latency CDF at high load (paper Fig. 13)".into(),
        format!("![cdf](cdf.svg)\n\nLatencies pooled over seeds.\n\n{text}"),
    ));
    Ok(())
}

pub(super) fn sla_curve(
    ctx: &Ctx,
    m: &'static str,
    pol: &str,
) -> Result<Vec<(f64, f64, f64, f64)>> {
    let r = ctx.plan.high_rate;
    let mut out = Vec::new();
    for &sla in &ctx.plan.slas {
        let runs = ctx.runs(m, pol, r, sla, COVERAGE, MAX_BATCH)?;
        let (mean, lo, hi) = spread(runs.iter().map(|x| x.violation(sla)).collect());
        out.push((sla, mean, lo, hi));
    }
    Ok(out)
}

/// Smallest SLA target from which on LazyB has no violation (mean over seeds), if any.
pub(super) fn zero_from(curve: &[(f64, f64, f64, f64)]) -> Option<f64> {
    let mut from = None;
    for &(sla, v, _, _) in curve.iter().rev() {
        if v == 0.0 {
            from = Some(sla);
        } else {
            break;
        }
    }
    from
}

fn sla(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "sla_ms",
        "violation_rate",
        "violation_p25",
        "violation_p75",
    ]);
    let mut fig = Figure::default();
    let mut text =
        String::from("| model | LazyB has no violations from | Oracle from |\n|---|---|---|\n");
    fig.shared_legend = true;
    for &m in MAIN {
        let mut p = Panel {
            title: format!("{} at {} req/s", short(m), ctx.plan.high_rate),
            x_label: "SLA target (ms)".into(),
            y_label: "SLA violation rate".into(),
            y_range: Some((-0.02, 1.02)),
            ..Panel::default()
        };
        let mut zeros = Vec::new();
        for pol in policies(ctx.plan) {
            let c = sla_curve(ctx, m, &pol)?;
            let mut s = Series {
                name: label(&pol),
                markers: true,
                dashed: pol == "oracle",
                ..Series::default()
            };
            for &(sla, v, lo, hi) in &c {
                t.push(vec![
                    m.into(),
                    pol.as_str().into(),
                    sla.into(),
                    v.into(),
                    lo.into(),
                    hi.into(),
                ]);
                s.points.push((sla, v));
                s.bars.push((lo, hi));
            }
            if pol == "lazy" || pol == "oracle" {
                zeros.push(
                    zero_from(&c)
                        .map_or("never (in 20–100 ms)".to_string(), |z| format!("{z} ms")),
                );
            }
            p.series.push(s);
        }
        let _ = writeln!(text, "| {} | {} | {} |", short(m), zeros[0], zeros[1]);
        fig.panels.push(p);
    }
    ctx.table(&t, "sla")?;
    ctx.figure(&fig, "sla", 520, 420)?;
    ctx.sections.push(("SLA violations vs SLA target (paper Fig. 14)".into(), format!("![sla](sla.svg)\n\nLazyB and the Oracle are re-run at every target (their decisions use it); Serial and GraphB decide without it, so one run gives their violations at every target.\n\n{text}")));
    Ok(())
}

fn sensitivity(ctx: &mut Ctx) -> Result<()> {
    let rates = [ctx.plan.low_rate, ctx.plan.high_rate];
    let mut t = eval_table(ctx, OTHERS, &rates, false)?;
    t.columns.push("mean_sla_violation_20_100");
    let high = ctx.plan.high_rate;
    let mut text = String::from("| model | best GraphB | latency gain at 16 / 1,000 req/s | throughput gain at 16 / 1,000 | mean violation over SLA targets: LazyB / best GraphB |\n|---|---|---|---|---|\n");
    let rows = std::mem::take(&mut t.rows);
    for mut row in rows {
        let (Cell::S(m), Cell::S(p), Cell::F(r)) = (&row[0], &row[1], &row[2]) else {
            continue;
        };
        let m: &'static str = OTHERS
            .iter()
            .find(|x| **x == m.as_str())
            .copied()
            .unwrap_or("vgg16");
        let v = if *r == high {
            let c = sla_curve(ctx, m, p)?;
            c.iter().map(|x| x.1).sum::<f64>() / c.len() as f64
        } else {
            f64::NAN
        };
        row.push(v.into());
        t.rows.push(row);
    }
    for &m in OTHERS {
        let best = ctx.best_graph(m, &rates, MAX_BATCH)?;
        let (mut lg, mut tg) = (Vec::new(), Vec::new());
        for &r in &rates {
            let g = ctx.agg(m, &best, r, SLA_MS, COVERAGE, MAX_BATCH)?;
            let z = ctx.agg(m, "lazy", r, SLA_MS, COVERAGE, MAX_BATCH)?;
            lg.push(g.lat.0 / z.lat.0);
            tg.push(z.tp.0 / g.tp.0);
        }
        let vz = sla_curve(ctx, m, "lazy")?;
        let vg = sla_curve(ctx, m, &best)?;
        let mv = |c: &[(f64, f64, f64, f64)]| c.iter().map(|x| x.1).sum::<f64>() / c.len() as f64;
        let _ = writeln!(
            text,
            "| {} | {} | {:.2}× / {:.2}× | {:.2}× / {:.2}× | {:.1}% / {:.1}% |",
            short(m),
            label(&best),
            lg[0],
            lg[1],
            tg[0],
            tg[1],
            100.0 * mv(&vz),
            100.0 * mv(&vg)
        );
    }
    ctx.table(&t, "sensitivity")?;
    let f = rate_panels(ctx, OTHERS, &rates, true, false)?;
    ctx.figure(&f, "sensitivity_latency", 420, 400)?;
    let f = rate_panels(ctx, OTHERS, &rates, false, false)?;
    ctx.figure(&f, "sensitivity_throughput", 420, 400)?;
    ctx.sections.push(("Other models (paper Fig. 15)".into(), format!("![sensitivity](sensitivity_latency.svg)\n\n![sensitivity](sensitivity_throughput.svg)\n\nBest GraphB chosen over these two rates.\n\n{text}")));
    Ok(())
}

fn dec_ts(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "rate_rps",
        "coverage_pct",
        "dec_timesteps",
        "sla_violation_100ms",
        "violation_p25",
        "violation_p75",
        "throughput_rps",
        "mean_latency_ms",
    ]);
    let mut pv = Panel {
        title: "LazyB SLA violations vs dec_timesteps coverage".into(),
        x_label: "coverage N of the profiled output lengths (%)".into(),
        y_label: "SLA violation rate (100 ms)".into(),
        ..Panel::default()
    };
    let mut pt = Panel {
        title: "LazyB throughput vs coverage".into(),
        x_label: "coverage N (%)".into(),
        y_label: "throughput (req/s)".into(),
        ..Panel::default()
    };
    for m in ["transformer_base", "gnmt"] {
        let model = zoo::load(m)?;
        let seq = model
            .seq
            .clone()
            .ok_or_else(|| Error::Internal("seq2seq".into()))?;
        let r = dec_rate(m, ctx.plan);
        let mut sv = Series {
            name: format!("{} at {r} req/s", short(m)),
            markers: true,
            ..Series::default()
        };
        let mut st = sv.clone();
        for &c in &ctx.plan.coverages {
            let a = ctx.agg(m, "lazy", r, SLA_MS, c, MAX_BATCH)?;
            let dts = dec_timesteps(&seq, c)?;
            t.push(vec![
                m.into(),
                r.into(),
                c.into(),
                dts.into(),
                a.viol.0.into(),
                a.viol.1.into(),
                a.viol.2.into(),
                a.tp.0.into(),
                a.lat.0.into(),
            ]);
            sv.points.push((c, a.viol.0));
            sv.bars.push((a.viol.1, a.viol.2));
            st.points.push((c, a.tp.0));
            st.bars.push((a.tp.1, a.tp.2));
        }
        pv.series.push(sv);
        pt.series.push(st);
    }
    ctx.table(&t, "dec_timesteps")?;
    ctx.figure(
        &Figure {
            panels: vec![pv, pt],
            shared_legend: true,
        },
        "dec_timesteps",
        520,
        420,
    )?;
    ctx.sections.push(("Sensitivity to dec_timesteps (paper §VI)".into(), "![dec_timesteps](dec_timesteps.svg)\n\nGNMT runs at 256 req/s under every configuration: at 1,000 req/s it is at or past saturation under `default` (and under `paper` LazyB is), which would hide the predictor's effect.".into()));
    Ok(())
}

fn max_batch(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "max_batch",
        "best_graph",
        "latency_gain",
        "throughput_gain",
    ]);
    let mut pl = Panel {
        title: "LazyB latency gain over best GraphB".into(),
        x_label: "model-allowed maximum batch".into(),
        y_label: "GraphB / LazyB mean latency".into(),
        log_x: true,
        log_y: true,
        ..Panel::default()
    };
    let mut pt = Panel {
        title: "LazyB throughput gain over best GraphB".into(),
        x_label: "model-allowed maximum batch".into(),
        y_label: "LazyB / GraphB throughput".into(),
        log_x: true,
        ..Panel::default()
    };
    let mut text = String::from(
        "| max batch | latency gain (geomean over models) | throughput gain |\n|---|---|---|\n",
    );
    let mut by_b: Vec<(u32, Vec<f64>, Vec<f64>)> = ctx
        .plan
        .max_batches
        .iter()
        .map(|&b| (b, Vec::new(), Vec::new()))
        .collect();
    for &m in MAIN {
        let mut sl = Series {
            name: short(m).into(),
            markers: true,
            ..Series::default()
        };
        let mut st = sl.clone();
        for (i, &b) in ctx.plan.max_batches.clone().iter().enumerate() {
            let (best, l, tp) = gains(ctx, m, b)?;
            t.push(vec![
                m.into(),
                b.into(),
                best.as_str().into(),
                l.into(),
                tp.into(),
            ]);
            sl.points.push((f64::from(b), l));
            st.points.push((f64::from(b), tp));
            by_b[i].1.push(l);
            by_b[i].2.push(tp);
        }
        pl.series.push(sl);
        pt.series.push(st);
    }
    for (b, l, tp) in &by_b {
        let _ = writeln!(text, "| {b} | {:.2}× | {:.2}× |", geomean(l), geomean(tp));
    }
    ctx.table(&t, "max_batch")?;
    ctx.figure(
        &Figure {
            panels: vec![pl, pt],
            shared_legend: true,
        },
        "max_batch",
        520,
        420,
    )?;
    ctx.sections.push(("Graph batching's maximum batch (paper §VI)".into(), format!("![max_batch](max_batch.svg)\n\nBoth policies run with the same model-allowed maximum batch.\n\n{text}")));
    Ok(())
}

fn cellular(ctx: &mut Ctx) -> Result<()> {
    let rates = ctx.plan.cell_rates.clone();
    let mut t = Table::new(&[
        "model",
        "policy",
        "rate_rps",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
        "throughput_rps",
        "mean_batch",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from(
        "| model | Cellular(5) / GraphB(5) mean latency | Cellular(25) / GraphB(25) | LazyB / LazyB (strict) |\n|---|---|---|---|\n",
    );
    for &m in CELL_MODELS {
        let mut p = Panel {
            title: short(m).into(),
            x_label: "arrival rate (req/s)".into(),
            y_label: "mean latency (ms)".into(),
            log_x: true,
            log_y: true,
            ..Panel::default()
        };
        for pol in CELL_POLICIES {
            let mut s = Series {
                name: label(pol),
                markers: true,
                dashed: pol.starts_with("graph"),
                ..Series::default()
            };
            for &r in &rates {
                let a = ctx.agg(m, pol, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                t.push(vec![
                    m.into(),
                    (*pol).into(),
                    r.into(),
                    a.lat.0.into(),
                    a.lat.1.into(),
                    a.lat.2.into(),
                    a.tp.0.into(),
                    a.batch.0.into(),
                ]);
                s.points.push((r, a.lat.0));
                s.bars.push((a.lat.1, a.lat.2));
            }
            p.series.push(s);
        }
        let ratio = |x: &str, y: &str| -> Result<f64> {
            let mut v = Vec::new();
            for &r in &rates {
                v.push(
                    ctx.agg(m, x, r, SLA_MS, COVERAGE, MAX_BATCH)?.lat.0
                        / ctx.agg(m, y, r, SLA_MS, COVERAGE, MAX_BATCH)?.lat.0,
                );
            }
            Ok(geomean(&v))
        };
        let _ = writeln!(
            text,
            "| {} | {:.2} | {:.2} | {:.2} |",
            short(m),
            ratio("cellular:5", "graph:5")?,
            ratio("cellular:25", "graph:25")?,
            ratio("lazy", "lazy:strict")?
        );
        fig.panels.push(p);
    }
    ctx.table(&t, "cellular")?;
    ctx.figure(&fig, "cellular", 440, 400)?;
    ctx.sections.push((
        "Cellular batching, and LazyB's merge rule".into(),
        format!(
            "![cellular](cellular.svg)\n\nRatios are geometric means over the rates (below 1: the first policy is faster). \
             Cellular batching can add a newcomer to a running batch only on the pure-RNN model; on ResNet-50 it is graph batching \
             exactly (a test checks it). On GNMT and the Transformer, whose first layer is an embedding, newcomers cannot join either, \
             but requests still leave the batch when their own sequence ends, while graph batching runs every member to the longest \
             member's length: that difference, not joining, is what the ratios show there. The last column is LazyB against the \
             ablation of its merge rule (`lazy:strict`: sub-batches merge only at an identical node and timestep).\n\n{text}"
        ),
    ));
    Ok(())
}

fn colocation(ctx: &mut Ctx) -> Result<()> {
    let rates = ctx.plan.colo_rates.clone();
    let names: Vec<&str> = COLO.split(',').collect();
    let mut t = Table::new(&[
        "policy",
        "total_rate_rps",
        "model",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
        "throughput_rps",
        "sla_violation_100ms",
    ]);
    let mut pl = Panel {
        title: "Four co-located models: mean latency".into(),
        x_label: "total arrival rate (req/s)".into(),
        y_label: "mean latency (ms)".into(),
        log_y: true,
        ..Panel::default()
    };
    let mut pt = Panel {
        title: "Four co-located models: throughput".into(),
        x_label: "total arrival rate (req/s)".into(),
        y_label: "throughput (req/s)".into(),
        ..Panel::default()
    };
    // per policy: (overall mean latency, overall throughput) at each rate, means over seeds
    let mut overall: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for p in COLO_POLICIES {
        let mut sl = Series {
            name: label(p),
            markers: true,
            dashed: p.starts_with("graph"),
            ..Series::default()
        };
        let mut st = sl.clone();
        let mut pts = Vec::new();
        for &r in &rates {
            let runs = ctx.runs_named(COLO, p, r)?;
            let lat = spread(runs.iter().map(|x| x.stats.latency_ms.mean).collect());
            let tp = spread(runs.iter().map(|x| x.stats.throughput_rps).collect());
            let viol = spread(runs.iter().map(|x| x.stats.sla_violation_rate).collect());
            t.push(vec![
                (*p).into(),
                r.into(),
                "overall".into(),
                lat.0.into(),
                lat.1.into(),
                lat.2.into(),
                tp.0.into(),
                viol.0.into(),
            ]);
            for (k, name) in names.iter().enumerate() {
                let l = spread(runs.iter().map(|x| x.parts[k].latency_ms.mean).collect());
                let tpk = spread(runs.iter().map(|x| x.parts[k].throughput_rps).collect());
                let v = spread(runs.iter().map(|x| x.parts[k].sla_violation_rate).collect());
                t.push(vec![
                    (*p).into(),
                    r.into(),
                    (*name).into(),
                    l.0.into(),
                    l.1.into(),
                    l.2.into(),
                    tpk.0.into(),
                    v.0.into(),
                ]);
            }
            sl.points.push((r, lat.0));
            sl.bars.push((lat.1, lat.2));
            st.points.push((r, tp.0));
            st.bars.push((tp.1, tp.2));
            pts.push((lat.0, tp.0));
        }
        pl.series.push(sl);
        pt.series.push(st);
        overall.push(((*p).to_string(), pts));
    }
    // best GraphB: the lowest overall mean latency averaged over the rates
    let lazy = overall[0].1.clone();
    let best = overall[1..]
        .iter()
        .min_by(|a, b| {
            let sa: f64 = a.1.iter().map(|x| x.0).sum();
            let sb: f64 = b.1.iter().map(|x| x.0).sum();
            sa.total_cmp(&sb)
        })
        .cloned()
        .ok_or_else(|| Error::Internal("no graph policy".into()))?;
    let lat_gain = geomean(
        &best
            .1
            .iter()
            .zip(&lazy)
            .map(|(g, z)| g.0 / z.0)
            .collect::<Vec<_>>(),
    );
    let tp_gain = geomean(
        &best
            .1
            .iter()
            .zip(&lazy)
            .map(|(g, z)| z.1 / g.1)
            .collect::<Vec<_>>(),
    );
    ctx.colo_gains = Some((lat_gain, tp_gain, label(&best.0)));
    ctx.table(&t, "colocation")?;
    ctx.figure(
        &Figure {
            panels: vec![pl, pt],
            shared_legend: true,
        },
        "colocation",
        520,
        420,
    )?;
    ctx.sections.push((
        "Four co-located models (paper §VI)".into(),
        format!(
            "![colocation](colocation.svg)\n\nResNet-50, GNMT, Transformer and BERT share one NPU, each receiving a quarter of the total rate, \
             SLA 100 ms each. LazyB's slack check counts every in-flight request of every model; graph batching runs the models' batches \
             one after another, the model of the oldest request first. Against the best GraphB ({}), geometric mean over {:?} req/s: \
             LazyB's mean latency is {:.2}× lower and its throughput {:.2}× (the paper: 2.4× and 1.8×). The rates are the same for \
             every NPU configuration (under `default`, GNMT's requests bring the device near saturation above them). \
             Per-model figures: `colocation.csv`.",
            label(&best.0),
            rates,
            lat_gain,
            tp_gain
        ),
    ));
    Ok(())
}
