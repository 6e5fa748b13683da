//! Graph batching's batch size per traffic (paper Fig. 5): ResNet-50 under each window at a low, medium and high rate.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;

/// Graph batching's batch size per traffic (paper Fig.
pub(super) struct Traffic;

impl Experiment for Traffic {
    fn name(&self) -> &'static str {
        "traffic"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
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
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        traffic(ctx)
    }
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
            sb.push_spread(w, a.batch);
            sl.push_spread(w, a.lat);
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
