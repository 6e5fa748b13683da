//! Time to first token and per output token (our extension, not the paper's): on the models
//! with a decoder, each policy's p99 time to its requests' first output token (the end of the
//! first decoder step: a word for these translation models) and p99 time per token after it,
//! at 0.3 to 0.9 of the model's serial capacity — the figures LLM serving is
//! judged by (Orca, vLLM, Sarathi-Serve), on the paper's translation models.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use std::fmt::Write as _;

/// Time to first token and per output token.
pub(super) struct Tokens;

const MODELS: &[&str] = &["gnmt", "transformer_base"];
const POLICIES: &[&str] = &[
    "serial",
    "graph:5",
    "continuous",
    "lazy",
    "lazy:adaptive",
    "oracle",
];
/// The loads: fractions of the serial capacity (1 / single-input latency).
const LOADS: &[f64] = &[0.3, 0.5, 0.7, 0.9];
/// The load of the report's table.
const TABLE_LOAD: f64 = 0.7;

impl Experiment for Tokens {
    fn name(&self) -> &'static str {
        "tokens"
    }
    fn by_default(&self) -> bool {
        false
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        for &m in MODELS {
            let cap = serial_capacity(m, npu)?;
            for p in POLICIES {
                for &load in LOADS {
                    for s in seeds(plan) {
                        let r = rate_at(cap, load);
                        jobs.insert(Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        tokens(ctx)
    }
}

/// A run's p99 of a token figure (NaN when the run has none).
fn p99(of: Option<&crate::metrics::LatencyMs>) -> f64 {
    of.map_or(f64::NAN, |l| l.p99)
}

fn tokens(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "load",
        "rate_rps",
        "ttft_mean_ms",
        "ttft_p99_ms",
        "tpot_mean_ms",
        "tpot_p99_ms",
        "tokens_per_s",
        "latency_p99_ms",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from(
        "| model | policy | TTFT mean / p99 (ms) | TPOT mean / p99 (ms) | tokens/s |\n|---|---|---|---|---|\n",
    );
    for &m in MODELS {
        let cap = serial_capacity(m, ctx.npu())?;
        let panel = |what: &str| Panel {
            title: format!("{}: p99 {what}", short(m)),
            x_label: "load (× serial capacity)".into(),
            y_label: format!("p99 {what} (ms)"),
            log_y: true,
            ..Panel::default()
        };
        let (mut first, mut per) = (panel("time to first token"), panel("time per output token"));
        for p in POLICIES {
            let series = || Series {
                name: label(p),
                markers: true,
                dashed: p.starts_with("graph") || *p == "serial",
                ..Series::default()
            };
            let (mut sf, mut sp) = (series(), series());
            for &load in LOADS {
                let r = rate_at(cap, load);
                let runs = ctx.runs(m, p, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                let mean = |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|x| g(x)).collect());
                let ttft = mean(&|x| x.stats.ttft_ms.as_ref().map_or(f64::NAN, |l| l.mean));
                let ttft99 = mean(&|x| p99(x.stats.ttft_ms.as_ref()));
                let tpot = mean(&|x| x.stats.tpot_ms.as_ref().map_or(f64::NAN, |l| l.mean));
                let tpot99 = mean(&|x| p99(x.stats.tpot_ms.as_ref()));
                let tokens = mean(&|x| x.stats.tokens_per_s.unwrap_or(f64::NAN)).0;
                let lat99 = mean(&|x| x.stats.latency_ms.p99).0;
                t.push(vec![
                    m.into(),
                    (*p).into(),
                    load.into(),
                    r.into(),
                    ttft.0.into(),
                    ttft99.0.into(),
                    tpot.0.into(),
                    tpot99.0.into(),
                    tokens.into(),
                    lat99.into(),
                ]);
                sf.push_spread(load, ttft99);
                sp.push_spread(load, tpot99);
                if load == TABLE_LOAD {
                    let _ = writeln!(
                        text,
                        "| {} | {} | {:.1} / {:.1} | {:.2} / {:.2} | {:.0} |",
                        short(m),
                        label(p),
                        ttft.0,
                        ttft99.0,
                        tpot.0,
                        tpot99.0,
                        tokens
                    );
                }
            }
            first.series.push(sf);
            per.series.push(sp);
        }
        fig.panels.push(first);
        fig.panels.push(per);
    }
    ctx.table(&t, "tokens")?;
    ctx.figure(&fig, "tokens", 420, 380)?;
    ctx.sections.push((
        "Time to first token and per output token (our extension)".into(),
        format!(
            "![tokens](tokens.svg)\n\nThe decoder models' p99 time to first token (arrival to the end of a \
             request's first decoder step) and p99 time per output token after it, at 0.3–0.9 of each model's \
             serial capacity (`tokens.csv` has the means and tokens/s). At {TABLE_LOAD} of the serial capacity, \
             mean over seeds:\n\n{text}"
        ),
    ));
    Ok(())
}
