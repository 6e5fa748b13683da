//! Batching impact (paper Fig. 3): every model's throughput and latency per input against batch size.

use super::*;
use crate::device::npu::Npu;
use crate::graph::zoo;
use crate::plot::{Figure, Panel, Series};
use crate::profile::Profile;
use crate::report::table::Table;
use crate::runtime::Predictor;
use std::fmt::Write as _;

/// Batching impact (paper Fig.
pub(super) struct Batching;

impl Experiment for Batching {
    fn name(&self) -> &'static str {
        "batching"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        let _ = (plan, jobs);
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        batching(ctx)
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
        let curve = Predictor::new(&m, &p, len.dec).batch_curve(len);
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
