//! Throughput past graph batching's saturation, and how long a run must be for it to mean
//! anything. The paper's throughput claims (LazyB 1.1 / 1.3 / 1.2× the best graph batching)
//! need a load at which graph batching falls behind, and there a queue grows for the whole run:
//! a short run ends before it has grown, and damps every ratio. So at `high_rate` (1,000 req/s,
//! the paper's "high load") and each overload rate, LazyB and every GraphB window run at
//! several lengths ([`Plan::overload_lengths`]), and the report shows the LazyB / best GraphB
//! throughput ratio at each: the length from which it stops moving (within 2% of the longest
//! run's) is the one the claims use. The same long runs count the GraphB configurations with
//! more than half their requests over the SLA at each rate, the paper's own check of its
//! operating point ("two-thirds of GraphB configurations have > 50% violations" at 1 K req/s).
//! Every LazyB reading runs at the longest length.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Throughput past graph batching's saturation by run length.
pub(super) struct Overload;

/// How close to the longest run's ratio a shorter run's must be, for every longer run too, to
/// count as converged.
const CONVERGED: f64 = 0.02;

/// The rates of the experiment: the paper's high load, then the overload rates.
fn rates(plan: &Plan) -> Vec<f64> {
    let mut v = vec![plan.high_rate];
    v.extend(plan.overload_rates.iter().copied());
    v.dedup();
    v
}

/// The graph-batching policies of the paper's windows.
fn windows(plan: &Plan) -> Vec<String> {
    plan.windows
        .iter()
        .map(|&w| graph_policy(w, MAX_BATCH))
        .collect()
}

/// The longest run length.
fn longest(plan: &Plan) -> u32 {
    plan.overload_lengths.iter().copied().max().unwrap_or(0)
}

fn job(m: &'static str, p: &str, r: f64, len: u32, seed: u64) -> Job {
    Job::new(m, p, r, seed, SLA_MS, COVERAGE, MAX_BATCH).lasting(len)
}

impl Experiment for Overload {
    fn name(&self) -> &'static str {
        "overload"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        // the best GraphB is chosen on the evaluation's runs
        eval_jobs(MAIN, &plan.rates, plan, true, jobs);
        for &m in MAIN {
            for &r in &rates(plan) {
                for s in 1..=u64::from(plan.overload_seeds) {
                    for &len in &plan.overload_lengths {
                        for p in windows(plan).iter().map(String::as_str).chain(["lazy"]) {
                            jobs.insert(job(m, p, r, len, s));
                        }
                    }
                    for &p in READINGS {
                        jobs.insert(job(m, p, r, longest(plan), s));
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        overload(ctx)
    }
}

/// Mean throughput and SLA violation (at 100 ms) over the experiment's seeds of `p` at `r`,
/// runs of `len` requests.
fn point(ctx: &Ctx, m: &'static str, p: &str, r: f64, len: u32) -> Result<(f64, f64)> {
    let n = ctx.plan.overload_seeds.max(1);
    let (mut tp, mut viol) = (0.0, 0.0);
    for s in 1..=u64::from(n) {
        let run = ctx.run_of(job(m, p, r, len, s))?;
        tp += run.stats.throughput_rps;
        viol += run.violation(SLA_MS);
    }
    Ok((tp / f64::from(n), viol / f64::from(n)))
}

/// `reading`'s throughput over the best GraphB's on `m`, geometric mean over the paper's rates
/// (the evaluation's runs) and the overload rates (the longest runs here).
pub(crate) fn throughput_with_overload(ctx: &Ctx, m: &'static str, reading: &str) -> Result<f64> {
    let best = ctx.best_graph(m, &ctx.plan.rates, MAX_BATCH)?;
    let mut v = Vec::new();
    for &r in &ctx.plan.rates {
        let z = ctx.agg(m, reading, r, SLA_MS, COVERAGE, MAX_BATCH)?.tp.0;
        let g = ctx.agg(m, &best, r, SLA_MS, COVERAGE, MAX_BATCH)?.tp.0;
        v.push(z / g);
    }
    let len = longest(ctx.plan);
    for &r in &ctx.plan.overload_rates {
        let z = point(ctx, m, reading, r, len)?.0;
        let g = point(ctx, m, &best, r, len)?.0;
        v.push(z / g);
    }
    Ok(geomean(&v))
}

/// At each rate of the experiment, how many GraphB configurations (models × the paper's
/// windows) have more than half their requests over the 100 ms SLA, in the longest runs: (rate,
/// count, configurations).
pub(crate) fn graph_over_half(ctx: &Ctx) -> Result<Vec<(f64, usize, usize)>> {
    let len = longest(ctx.plan);
    rates(ctx.plan)
        .into_iter()
        .map(|r| {
            let mut over = 0;
            let mut all = 0;
            for &m in MAIN {
                for g in windows(ctx.plan) {
                    all += 1;
                    if point(ctx, m, &g, r, len)?.1 > 0.5 {
                        over += 1;
                    }
                }
            }
            Ok((r, over, all))
        })
        .collect()
}

fn overload(ctx: &mut Ctx) -> Result<()> {
    let plan = ctx.plan;
    let lengths = plan.overload_lengths.clone();
    let mut t = Table::new(&[
        "model",
        "policy",
        "rate_rps",
        "requests",
        "throughput_rps",
        "sla_violation_100ms",
    ]);
    let mut text = format!(
        "LazyB's throughput over the best GraphB's at each run length ({} seed(s) a point; the paper's windows, the best chosen on the evaluation's runs); *stops moving at*: the shortest length from which on every ratio is within {:.0}% of the longest run's.\n\n| model | rate (req/s) |",
        plan.overload_seeds,
        100.0 * CONVERGED
    );
    for l in &lengths {
        let _ = write!(text, " {l} requests |");
    }
    let _ = writeln!(
        text,
        " stops moving at |\n|---|---|{}---|",
        "---|".repeat(lengths.len())
    );
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    for &m in MAIN {
        let best = ctx.best_graph(m, &plan.rates, MAX_BATCH)?;
        let mut panel = Panel {
            title: format!("{}: LazyB / {}", short(m), label(&best)),
            x_label: "run length (requests)".into(),
            y_label: "throughput ratio".into(),
            log_x: true,
            ..Panel::default()
        };
        for &r in &rates(plan) {
            let mut ratios = Vec::new();
            for &len in &lengths {
                let (z, zv) = point(ctx, m, "lazy", r, len)?;
                let (g, _) = point(ctx, m, &best, r, len)?;
                ratios.push(z / g);
                t.push(vec![
                    m.into(),
                    "lazy".into(),
                    r.into(),
                    len.into(),
                    z.into(),
                    zv.into(),
                ]);
                for w in windows(plan) {
                    let (tp, v) = point(ctx, m, &w, r, len)?;
                    t.push(vec![
                        m.into(),
                        w.as_str().into(),
                        r.into(),
                        len.into(),
                        tp.into(),
                        v.into(),
                    ]);
                }
            }
            let last = ratios.last().copied().unwrap_or(f64::NAN);
            let from = (0..ratios.len())
                .find(|&i| {
                    ratios[i..]
                        .iter()
                        .all(|x| (x / last - 1.0).abs() <= CONVERGED)
                })
                .map_or("–".to_string(), |i| format!("{} requests", lengths[i]));
            panel.series.push(Series {
                name: format!("{r} req/s"),
                points: lengths
                    .iter()
                    .map(|&l| f64::from(l))
                    .zip(ratios.iter().copied())
                    .collect(),
                markers: true,
                ..Series::default()
            });
            let cells: Vec<String> = ratios.iter().map(|x| format!("{x:.2}×")).collect();
            let _ = writeln!(
                text,
                "| {} (vs {}) | {r} | {} | {from} |",
                short(m),
                label(&best),
                cells.join(" | ")
            );
        }
        fig.panels.push(panel);
    }
    ctx.figure(&fig, "overload", 420, 380)?;
    for &m in MAIN {
        for &p in READINGS {
            if p == "lazy" {
                continue;
            }
            for &r in &rates(plan) {
                let (tp, v) = point(ctx, m, p, r, longest(plan))?;
                t.push(vec![
                    m.into(),
                    p.into(),
                    r.into(),
                    longest(plan).into(),
                    tp.into(),
                    v.into(),
                ]);
            }
        }
    }
    ctx.table(&t, "overload")?;
    let _ = writeln!(
        text,
        "\nEvery reading's throughput over the best GraphB's, geometric mean over the paper's rates ({:?} req/s, the evaluation's runs) and the overload rates ({:?} req/s, runs of {} requests) — the paper's throughput claims with the loads at which graph batching falls behind in the average:\n",
        plan.rates,
        plan.overload_rates,
        longest(plan)
    );
    let (head, rule) = readings_columns();
    let _ = writeln!(text, "| model | {head} |\n|---|{rule}");
    for &m in MAIN {
        let cells: Vec<String> = READINGS
            .iter()
            .map(|r| throughput_with_overload(ctx, m, r).map(|x| format!("{x:.2}×")))
            .collect::<Result<_>>()?;
        let _ = writeln!(text, "| {} | {} |", short(m), cells.join(" | "));
    }
    let counts = graph_over_half(ctx)?;
    let _ = writeln!(
        text,
        "\nThe paper's operating point: \"two-thirds of GraphB configurations have > 50% violations\" at 100 ms and 1 K req/s. Here, GraphB configurations (3 models × the paper's {} windows) with more than half their requests over 100 ms, in runs of {} requests: {}.",
        plan.windows.len(),
        longest(plan),
        counts
            .iter()
            .map(|(r, n, all)| format!("{n} of {all} at {r} req/s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    ctx.sections.push((
        "Throughput past graph batching's saturation, by run length".into(),
        format!("![overload](overload.svg)\n\n{text}"),
    ));
    Ok(())
}
