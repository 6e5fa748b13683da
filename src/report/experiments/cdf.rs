//! The latency CDF at high load (paper Fig. 13), with LazyB's and the best graph batching's p99.

use super::*;
use crate::metrics::quantile as q;
use crate::plot::{Figure, Mark, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// The latency CDF at high load (paper Fig.
pub(super) struct Cdf;

impl Experiment for Cdf {
    fn name(&self) -> &'static str {
        "cdf"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        eval_jobs(MAIN, &plan.rates, plan, true, jobs);
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        cdf(ctx)
    }
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
