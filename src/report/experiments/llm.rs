//! Beyond the paper's models (our extension): a decoder-only language model, GPT-2, served by
//! the policies LLM servers use beside LazyB — `continuous` (Orca/vLLM's iteration-level
//! batching), `chunked:2` (Sarathi-Serve's chunked prefill, in node spans of 2 ms), LazyB and
//! `lazy:adaptive` — with Serial and GraphB(5) for reference and the Oracle. Two things: each
//! policy's p99 time to first token (TTFT) and per output token (TPOT) as the load grows, and
//! its capacity under an LLM service's SLO on both (`capacity --ttft-p99-ms --tpot-p99-ms`).
//!
//! The SLO is scaled from the model's own unloaded figures on the configuration (the method
//! of DistServe's SLO scale; the factors are our choice): TTFT within [`TTFT_X`] times the
//! reference prompt's prefill alone, TPOT within [`TPOT_X`] times a decode step alone, then
//! the same doubled (a loose SLO). The end-to-end SLA the SLA-aware policies (LazyB, its
//! adaptive variant, the Oracle) check their slack against is [`LLM_SLA_MS`]: at a deadline the
//! load cannot meet, LazyB stops preempting (docs/llm.md measures it).

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use crate::run::capacity::{search_all_as, Bound, Search};
use crate::run::RunSpec;
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::Sla;
use std::fmt::Write as _;

/// The decoder-only language model.
pub(super) struct Llm;

const MODEL: &str = "gpt2";
const POLICIES: &[&str] = &[
    "serial",
    "graph:5",
    "continuous",
    "chunked:2",
    "lazy",
    "lazy:adaptive",
    "oracle",
];
/// The loads: multiples of the model's serial capacity (1 / single-input latency); LLM
/// batching serves several times it.
const LOADS: &[f64] = &[0.5, 1.0, 2.0, 4.0];
/// The load of the report's table.
const TABLE_LOAD: f64 = 2.0;
/// The whole-request deadline (ms) of the SLA-aware policies: every request of the trace's
/// distribution can meet it alone on both configurations (the longest, 982 prompt tokens and
/// 562 output tokens, takes under one second alone on the NPU model), with room for queueing.
pub(super) const LLM_SLA_MS: f64 = 5000.0;
/// The tight SLO: TTFT at most this many times the reference prompt's prefill alone …
const TTFT_X: f64 = 5.0;
/// … and TPOT at most this many times a decode step alone; the loose SLO doubles both.
const TPOT_X: f64 = 2.0;

impl Experiment for Llm {
    fn name(&self) -> &'static str {
        "llm"
    }
    fn by_default(&self) -> bool {
        false
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        let cap = serial_capacity(MODEL, npu)?;
        for p in POLICIES {
            for &load in LOADS {
                for s in seeds(plan) {
                    let r = rate_at(cap, load);
                    jobs.insert(Job::new(MODEL, p, r, s, LLM_SLA_MS, COVERAGE, MAX_BATCH));
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        llm(ctx)
    }
}

/// The model's unloaded figures on the configuration (ms): the reference prompt's prefill
/// alone (every node before the decoder, batch 1) and a decode step alone (every decoder node,
/// batch 1, at the table's middle step).
pub(super) fn unloaded(bench: &crate::run::Testbed) -> (f64, f64) {
    let (mut prefill, mut step) = (0.0, 0.0);
    for n in &bench.model.nodes {
        let t = bench.profile.latency(n.id, 1).as_ms();
        match n.class {
            crate::graph::Class::Decoder => step += t,
            crate::graph::Class::Static | crate::graph::Class::Encoder => prefill += t,
        }
    }
    (prefill, step)
}

/// The tight and the loose token SLO on a bench, `(TTFT p99 ms, TPOT p99 ms)` each: the tight
/// one [`TTFT_X`] × the reference prompt's prefill alone and [`TPOT_X`] × a decode step alone,
/// the loose one both doubled (the dominance grid's GPT-2 capacities use the same).
pub(super) fn token_slos(bench: &crate::run::Testbed) -> [(&'static str, f64, f64); 2] {
    let (prefill, step) = unloaded(bench);
    [("tight", 1.0), ("loose", 2.0)]
        .map(|(name, k)| (name, k * TTFT_X * prefill, k * TPOT_X * step))
}

/// One SLO's capacity search over every policy.
fn search(
    ctx: &Ctx,
    bench: &crate::run::Testbed,
    bound: Bound,
    slo: &str,
) -> Result<Vec<crate::run::capacity::Capacity>> {
    let plan = ctx.plan;
    let sla = Sla::from_ms(LLM_SLA_MS)?;
    let templates = POLICIES
        .iter()
        .map(|p| {
            Ok(RunSpec {
                policy: crate::policy::Spec::parse(p, MAX_BATCH)?,
                rate: 0.0,
                arrivals: "poisson".parse()?,
                classes: None,
                shed: false,
                abandon_late: false,
                admit: Default::default(),
                requests: plan.capacity.requests,
                sla,
                seed: 1,
                max_batch: MaxBatch::new(MAX_BATCH)?,
                max_pending: MaxPending::DEFAULT,
                colocated: None,
                replicas: crate::engine::Replicas::ONE,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let how = Search {
        bound,
        precision: plan.capacity.precision,
        seeds: plan.capacity.seeds,
        lowest_share: crate::run::capacity::lowest_share(bench.is_virtual()),
    };
    let label = format!("{}: GPT-2 capacity, {slo} SLO", ctx.npu_name);
    search_all_as(&label, bench, &templates, &how, ctx.progress)
}

/// A run's p99 of a token figure (NaN when the run has none).
fn p99(of: Option<&crate::metrics::LatencyMs>) -> f64 {
    of.map_or(f64::NAN, |l| l.p99)
}

fn llm(ctx: &mut Ctx) -> Result<()> {
    let bench = crate::report::bench_for(MODEL, ctx.npu(), MAX_BATCH, COVERAGE)?;
    let cap = bench.serial_capacity();
    let mut t = Table::new(&[
        "policy",
        "load",
        "rate_rps",
        "ttft_mean_ms",
        "ttft_p99_ms",
        "tpot_mean_ms",
        "tpot_p99_ms",
        "tokens_per_s",
        "latency_p99_ms",
        "sla_violations",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let panel = |what: &str| Panel {
        title: format!("GPT-2: p99 {what}"),
        x_label: "load (× serial capacity)".into(),
        y_label: format!("p99 {what} (ms)"),
        log_y: true,
        ..Panel::default()
    };
    let (mut first, mut per) = (panel("time to first token"), panel("time per output token"));
    let mut at_load: Vec<(f64, f64, f64, f64, f64)> = Vec::new();
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
            let runs = ctx.runs(MODEL, p, r, LLM_SLA_MS, COVERAGE, MAX_BATCH)?;
            let mean = |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|x| g(x)).collect());
            let ttft = mean(&|x| x.stats.ttft_ms.as_ref().map_or(f64::NAN, |l| l.mean));
            let ttft99 = mean(&|x| p99(x.stats.ttft_ms.as_ref()));
            let tpot = mean(&|x| x.stats.tpot_ms.as_ref().map_or(f64::NAN, |l| l.mean));
            let tpot99 = mean(&|x| p99(x.stats.tpot_ms.as_ref()));
            let tokens = mean(&|x| x.stats.tokens_per_s.unwrap_or(f64::NAN)).0;
            let lat99 = mean(&|x| x.stats.latency_ms.p99).0;
            let viol = mean(&|x| x.stats.sla_violation_rate).0;
            t.push(vec![
                (*p).into(),
                load.into(),
                r.into(),
                ttft.0.into(),
                ttft99.0.into(),
                tpot.0.into(),
                tpot99.0.into(),
                tokens.into(),
                lat99.into(),
                viol.into(),
            ]);
            sf.push_spread(load, ttft99);
            sp.push_spread(load, tpot99);
            if load == TABLE_LOAD {
                at_load.push((ttft.0, ttft99.0, tpot.0, tpot99.0, tokens));
            }
        }
        first.series.push(sf);
        per.series.push(sp);
    }
    fig.panels.push(first);
    fig.panels.push(per);
    ctx.table(&t, "llm")?;
    ctx.figure(&fig, "llm", 420, 380)?;
    // capacity at the tight and the loose SLO
    let slos = token_slos(&bench).map(|(_, ttft, tpot)| (ttft, tpot));
    let caps = token_slos(&bench)
        .iter()
        .map(|&(slo, ttft_ms, tpot_ms)| {
            search(ctx, &bench, Bound::TokenSlo { ttft_ms, tpot_ms }, slo)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut c = Table::new(&[
        "slo_ttft_p99_ms",
        "slo_tpot_p99_ms",
        "policy",
        "capacity_rps",
        "ttft_p99_ms",
        "tpot_p99_ms",
        "mean_batch",
        "probes",
        "note",
    ]);
    for (&(ttft_ms, tpot_ms), found) in slos.iter().zip(&caps) {
        for k in found {
            let st = &k.at;
            c.push(vec![
                ttft_ms.into(),
                tpot_ms.into(),
                k.policy.as_str().into(),
                k.capacity_rps.unwrap_or(f64::NAN).into(),
                p99(st.ttft_ms.as_ref()).into(),
                p99(st.tpot_ms.as_ref()).into(),
                st.mean_batch_size.into(),
                (k.probes.len() as f64).into(),
                k.note.clone().unwrap_or_default().into(),
            ]);
        }
    }
    ctx.table(&c, "llm_capacity")?;
    let rps = |found: &[crate::run::capacity::Capacity], p: &str| {
        found
            .iter()
            .find(|k| k.policy == p)
            .and_then(|k| k.capacity_rps)
            .map_or("none".into(), |x| format!("{x:.1}"))
    };
    let mut text = String::from(
        "| policy | TTFT mean / p99 (ms) | TPOT mean / p99 (ms) | tokens/s | capacity, tight SLO (req/s) | capacity, loose SLO (req/s) |\n|---|---|---|---|---|---|\n",
    );
    for (p, (ttft, ttft99, tpot, tpot99, tokens)) in POLICIES.iter().zip(&at_load) {
        let _ = writeln!(
            text,
            "| {} | {ttft:.1} / {ttft99:.1} | {tpot:.2} / {tpot99:.2} | {tokens:.0} | {} | {} |",
            label(p),
            rps(&caps[0], p),
            rps(&caps[1], p),
        );
    }
    ctx.sections.push((
        "A decoder-only language model: GPT-2 (our extension)".into(),
        format!(
            "![llm](llm.svg)\n\nGPT-2 small (prefill, then KV-cached decode steps) on the Azure LLM inference \
             trace's lengths, at 0.5–4 × its serial capacity ({cap:.1} req/s), SLA {LLM_SLA_MS} ms for the \
             SLA-aware policies (`llm.csv`). The table: at {TABLE_LOAD} × the serial capacity, mean over seeds, \
             and each policy's capacity under the tight SLO (p99 time to first token ≤ {:.1} ms, {TTFT_X} × the \
             reference prompt's prefill alone; p99 time per output token ≤ {:.2} ms, {TPOT_X} × a decode step \
             alone) and the loose one (both doubled; `llm_capacity.csv` has every search):\n\n{text}",
            slos[0].0, slos[0].1
        ),
    ));
    Ok(())
}
