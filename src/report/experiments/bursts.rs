//! Bursty traffic (our extension, not the paper's): LazyB against graph batching, continuous
//! batching and Serial when the gaps between arrivals are gamma-distributed with a coefficient
//! of variation of 1 (Poisson), 2 and 4, at 0.7 of each model's serial capacity.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Bursty traffic.
pub(super) struct Bursts;

const MODELS: &[&str] = &["resnet50", "gnmt", "transformer_base"];
const POLICIES: &[&str] = &[
    "serial",
    "graph:0",
    "graph:25",
    "continuous",
    "lazy",
    "lazy:adaptive",
];
/// The arrival processes, by coefficient of variation (CV 1 is the paper's Poisson traffic).
const PROCESSES: &[(f64, &str)] = &[(1.0, "poisson"), (2.0, "gamma:2"), (4.0, "gamma:4")];
/// The load: a fraction of the serial capacity (1 / single-input latency).
const LOAD: f64 = 0.7;

/// The rate of `model` at [`LOAD`] on `npu` (the same in both phases).
fn rate(model: &'static str, npu: &NpuConfig) -> Result<f64> {
    Ok(rate_at(serial_capacity(model, npu)?, LOAD))
}

impl Experiment for Bursts {
    fn name(&self) -> &'static str {
        "bursts"
    }
    fn by_default(&self) -> bool {
        false
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        for &m in MODELS {
            let r = rate(m, npu)?;
            for p in POLICIES {
                for &(_, a) in PROCESSES {
                    for s in seeds(plan) {
                        let j = Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH);
                        jobs.insert(j.arriving(a));
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        bursts(ctx)
    }
}

fn bursts(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "rate_rps",
        "arrivals",
        "cv",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
        "p99_ms",
        "sla_violation",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from(
        "| model | CV | Serial | GraphB(0) | GraphB(25) | Continuous | LazyB | LazyB (adaptive) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for &m in MODELS {
        let r = rate(m, ctx.npu())?;
        let mut panel = Panel {
            title: format!("{} at {r} req/s", short(m)),
            x_label: "coefficient of variation of the gaps".into(),
            y_label: "mean latency (ms)".into(),
            log_y: true,
            ..Panel::default()
        };
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); PROCESSES.len()];
        for p in POLICIES {
            let mut s = Series {
                name: label(p),
                markers: true,
                dashed: p.starts_with("graph") || *p == "serial",
                ..Series::default()
            };
            for (k, &(cv, a)) in PROCESSES.iter().enumerate() {
                let runs = ctx.runs_with(m, p, r, &|j| j.arriving(a))?;
                let f = |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|x| g(x)).collect());
                let lat = f(&|x| x.stats.latency_ms.mean);
                let p99 = f(&|x| x.stats.latency_ms.p99).0;
                let viol = f(&|x| x.violation(SLA_MS)).0;
                t.push(vec![
                    m.into(),
                    (*p).into(),
                    r.into(),
                    a.into(),
                    cv.into(),
                    lat.0.into(),
                    lat.1.into(),
                    lat.2.into(),
                    p99.into(),
                    viol.into(),
                ]);
                s.push_spread(cv, lat);
                rows[k].push(lat.0);
            }
            panel.series.push(s);
        }
        for (k, &(cv, _)) in PROCESSES.iter().enumerate() {
            let cells: Vec<String> = rows[k].iter().map(|v| format!("{v:.1}")).collect();
            let _ = writeln!(text, "| {} | {cv} | {} |", short(m), cells.join(" | "));
        }
        fig.panels.push(panel);
    }
    ctx.table(&t, "bursts")?;
    ctx.figure(&fig, "bursts", 440, 400)?;
    ctx.sections.push((
        "Bursty traffic (our extension)".into(),
        format!(
            "![bursts](bursts.svg)\n\nMean latency (ms) at {LOAD} of each model's serial capacity when the gaps between \
             arrivals are gamma-distributed with coefficient of variation 1 (Poisson, the paper's traffic), 2 and 4 \
             (`--arrivals gamma:CV`; `bursts.csv` has the p99 and SLA violations). Batching absorbs bursts that a serial \
             server queues behind; `continuous` is iteration-level batching as Orca does it.\n\n{text}"
        ),
    ));
    Ok(())
}
