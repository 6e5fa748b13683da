//! Cellular batching against graph batching, and LazyB's merge rule against its strict ablation.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Cellular batching against graph batching, and LazyB's merge rule against its strict ablation.
pub(super) struct Cellular;

impl Experiment for Cellular {
    fn name(&self) -> &'static str {
        "cellular"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        for &m in CELL_MODELS {
            for p in CELL_POLICIES {
                for &r in &plan.cell_rates {
                    for s in seeds(plan) {
                        jobs.insert(Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        cellular(ctx)
    }
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
                s.push_spread(r, a.lat);
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
