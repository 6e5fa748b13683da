//! Sensitivity to dec_timesteps (paper §VI): LazyB's violations and throughput against the coverage of the profiled output lengths.

use super::*;
use crate::graph::zoo;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use crate::traffic::lengths::dec_timesteps;

/// Sensitivity to dec_timesteps (paper §VI): LazyB's violations and throughput against the coverage of the profiled output lengths.
pub(super) struct DecTimesteps;

impl Experiment for DecTimesteps {
    fn name(&self) -> &'static str {
        "dec_timesteps"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
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
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        dec_ts(ctx)
    }
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
            sv.push_spread(c, a.viol);
            st.push_spread(c, a.tp);
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
