//! Graph batching's maximum batch (paper §VI): LazyB's gains with 16, 32 and 64.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Graph batching's maximum batch (paper §VI): LazyB's gains with 16, 32 and 64.
pub(super) struct MaxBatch;

impl Experiment for MaxBatch {
    fn name(&self) -> &'static str {
        "max_batch"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
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
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        max_batch(ctx)
    }
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
