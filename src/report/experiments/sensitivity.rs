//! The four other models (paper Fig. 15): latency, throughput and SLA violations at low and high load.

use super::eval::{eval_table, rate_panels};
use super::*;
use crate::report::table::Cell;
use std::fmt::Write as _;

/// The four other models (paper Fig.
pub(super) struct Sensitivity;

impl Experiment for Sensitivity {
    fn name(&self) -> &'static str {
        "sensitivity"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        eval_jobs(OTHERS, &[plan.low_rate, plan.high_rate], plan, false, jobs);
        sla_jobs(OTHERS, &["lazy", "oracle"], plan, jobs);
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        sensitivity(ctx)
    }
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
