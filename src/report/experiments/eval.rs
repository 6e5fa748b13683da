//! Latency and throughput against arrival rate (paper Figs. 11, 12), and the gains over the best graph batching.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Latency and throughput against arrival rate (paper Figs.
pub(super) struct Eval;

impl Experiment for Eval {
    fn name(&self) -> &'static str {
        "eval"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        eval_jobs(MAIN, &plan.all_rates(), plan, true, jobs);
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        eval(ctx)
    }
}

pub(super) fn eval_table(
    ctx: &Ctx,
    models: &[&'static str],
    rates: &[f64],
    ablations: bool,
) -> Result<Table> {
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

pub(super) fn rate_panels(
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
        // the tables list every reading; the figures draw the drawn ones
        for pol in with_ablations(ctx.plan, ablations)
            .into_iter()
            .filter(|p| !ABLATIONS.contains(&p.as_str()) || DRAWN_ABLATIONS.contains(&p.as_str()))
        {
            let mut s = Series {
                name: label(&pol),
                markers: true,
                dashed: pol.starts_with("oracle") || ABLATIONS.contains(&pol.as_str()),
                ..Series::default()
            };
            for &r in rates {
                let a = ctx.agg(m, &pol, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                let v = if latency { a.lat } else { a.tp };
                s.push_spread(r, v);
            }
            p.series.push(s);
        }
        fig.panels.push(p);
    }
    Ok(fig)
}

fn eval(ctx: &mut Ctx) -> Result<()> {
    // the averages' rates and, past graph batching's saturation, the overload rates
    let rates = ctx.plan.all_rates();
    let t = eval_table(ctx, MAIN, &rates, true)?;
    ctx.table(&t, "eval")?;
    let f = rate_panels(ctx, MAIN, &rates, true, true)?;
    ctx.figure(&f, "eval_latency", 520, 440)?;
    let f = rate_panels(ctx, MAIN, &rates, false, true)?;
    ctx.figure(&f, "eval_throughput", 520, 440)?;
    let high = ctx.plan.overload_rates.iter().copied().fold(0.0, f64::max);
    let mut text = format!(
        "| model | best GraphB | LazyB latency gain (geomean over {:?} req/s) | LazyB throughput gain (same rates) | throughput at {high} req/s, LazyB / best GraphB |\n|---|---|---|---|---|\n",
        ctx.plan.rates
    );
    for &m in MAIN {
        let (best, l, tput) = gains(ctx, m, MAX_BATCH)?;
        let at = throughput_at(ctx, m, "lazy", &best, high)?;
        let _ = writeln!(
            text,
            "| {} | {} | {:.2}× | {:.2}× | {} |",
            short(m),
            label(&best),
            l,
            tput,
            at.map_or("–".into(), |(z, g)| format!(
                "{:.2}× ({z:.0} / {g:.0} req/s)",
                z / g
            ))
        );
    }
    let _ = write!(
        text,
        "\nThe gains average over the paper's rates only ({:?} req/s): past graph batching's saturation ({:?} req/s, drawn above) \
         a queue that grows for the whole run would swamp the average. Throughput equals the offered load for every policy that keeps up; \
         the last column and the capacity experiment measure it where one does not.",
        ctx.plan.rates, ctx.plan.overload_rates
    );
    ctx.sections.push((
        "Latency and throughput vs arrival rate (paper Figs. 11, 12)".into(),
        format!("![latency](eval_latency.svg)\n\n![throughput](eval_throughput.svg)\n\nError bars: 25th/75th percentile across seeds.\n\n{text}"),
    ));
    Ok(())
}

/// (best GraphB, geomean latency ratio GraphB/LazyB, geomean throughput ratio LazyB/GraphB).
pub(crate) fn gains(ctx: &Ctx, m: &'static str, mb: u32) -> Result<(String, f64, f64)> {
    gains_of(ctx, m, mb, "lazy")
}

/// [`gains`] of the LazyB variant `lazy_pol` (an ablation).
pub(crate) fn gains_of(
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

/// (`lazy`'s, `best`'s) mean throughput at `rate` (none at a rate of 0: no overload rate).
pub(crate) fn throughput_at(
    ctx: &Ctx,
    m: &'static str,
    lazy: &str,
    best: &str,
    rate: f64,
) -> Result<Option<(f64, f64)>> {
    if rate <= 0.0 {
        return Ok(None);
    }
    let z = ctx.agg(m, lazy, rate, SLA_MS, COVERAGE, MAX_BATCH)?.tp.0;
    let g = ctx.agg(m, best, rate, SLA_MS, COVERAGE, MAX_BATCH)?.tp.0;
    Ok(Some((z, g)))
}

pub(crate) fn pooled(ctx: &Ctx, m: &'static str, p: &str, r: f64) -> Result<Vec<f64>> {
    let mut v: Vec<f64> = ctx
        .runs(m, p, r, SLA_MS, COVERAGE, MAX_BATCH)?
        .iter()
        .flat_map(|x| x.lat_ms.iter().copied())
        .collect();
    v.sort_by(f64::total_cmp);
    Ok(v)
}
