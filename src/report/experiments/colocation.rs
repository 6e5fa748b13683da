//! Four co-located models on one NPU (paper §VI): LazyB against graph batching.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::{Cell, Table};

/// Four co-located models on one NPU (paper §VI): LazyB against graph batching.
pub(super) struct Colocation;

impl Experiment for Colocation {
    fn name(&self) -> &'static str {
        "colocation"
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let _ = npu;
        for p in COLO_POLICIES {
            for &r in &plan.colo_rates {
                for s in seeds(plan) {
                    jobs.insert(Job::new(COLO, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        colocation(ctx)
    }
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
            t.push(row(p, r, "overall", lat, tp.0, viol.0));
            for (k, name) in names.iter().enumerate() {
                let l = spread(runs.iter().map(|x| x.parts[k].latency_ms.mean).collect());
                let tpk = spread(runs.iter().map(|x| x.parts[k].throughput_rps).collect());
                let v = spread(runs.iter().map(|x| x.parts[k].sla_violation_rate).collect());
                t.push(row(p, r, name, l, tpk.0, v.0));
            }
            sl.push_spread(r, lat);
            st.push_spread(r, tp);
            pts.push((lat.0, tp.0));
        }
        pl.series.push(sl);
        pt.series.push(st);
        overall.push(((*p).to_string(), pts));
    }
    let (best, lat_gain, tp_gain) = gains_over_best_graph(&overall)?;
    ctx.colo_gains = Some((lat_gain, tp_gain, label(&best)));
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
            label(&best),
            rates,
            lat_gain,
            tp_gain
        ),
    ));
    Ok(())
}

/// One row of `colocation.csv`: a policy at a total rate, for one model or `overall`.
fn row(p: &str, r: f64, model: &str, lat: (f64, f64, f64), tp: f64, viol: f64) -> Vec<Cell> {
    vec![
        p.into(),
        r.into(),
        model.into(),
        lat.0.into(),
        lat.1.into(),
        lat.2.into(),
        tp.into(),
        viol.into(),
    ]
}

/// The best GraphB (the lowest overall mean latency summed over the rates) and LazyB's gains
/// over it, geometric means over the rates: (policy, latency gain, throughput gain). `overall`
/// holds each policy's (mean latency, throughput) per rate, LazyB first.
fn gains_over_best_graph(overall: &[(String, Vec<(f64, f64)>)]) -> Result<(String, f64, f64)> {
    let lazy = &overall[0].1;
    let best = overall[1..]
        .iter()
        .min_by(|a, b| {
            let sa: f64 = a.1.iter().map(|x| x.0).sum();
            let sb: f64 = b.1.iter().map(|x| x.0).sum();
            sa.total_cmp(&sb)
        })
        .ok_or_else(|| Error::Internal("no graph policy".into()))?;
    let ratio = |f: fn(&(f64, f64), &(f64, f64)) -> f64| -> f64 {
        geomean(
            &best
                .1
                .iter()
                .zip(lazy)
                .map(|(g, z)| f(g, z))
                .collect::<Vec<_>>(),
        )
    };
    let lat_gain = ratio(|g, z| g.0 / z.0);
    let tp_gain = ratio(|g, z| z.1 / g.1);
    Ok((best.0.clone(), lat_gain, tp_gain))
}
