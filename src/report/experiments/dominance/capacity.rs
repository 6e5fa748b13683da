//! The capacity half of the dominance grid: on every bench, each policy's capacity — the
//! highest Poisson rate whose p99 latency is within the bench's SLA (`lazybatch capacity
//! --p99-ms`) — and on GPT-2 also under the tight and the loose token SLO of the `llm`
//! experiment (`--ttft-p99-ms --tpot-p99-ms`; the SLA-aware policies' deadline derived from
//! the bound as `capacity` derives it, [`token_sla_ms`]). Goals: `auto`'s capacity at least
//! [`GOAL`] × the best peer's on every bench and bound, and on GPT-2 under each token SLO at
//! least [`LLM_GOAL`] × `continuous`'s.

use super::super::{llm::token_slos, Ctx};
use super::{sla_ms, Bench};
use crate::error::{Error, Result};
use crate::report::table::Table;
use crate::run::capacity::{search_one, token_sla_ms, Bound, Capacity, Search};
use crate::run::grid::{mean_stats, run_one, Keep};
use crate::run::RunSpec;
use crate::runtime::MaxPending;
use crate::time::Sla;
use rayon::prelude::*;

/// The goal: `auto`'s capacity at least this share of the best peer's.
pub(super) const GOAL: f64 = 0.95;
/// The goal on GPT-2 under a token SLO: `auto`'s capacity at least this many times
/// `continuous`'s (the policy LLM servers run).
pub(super) const LLM_GOAL: f64 = 1.1;
/// The peer of [`LLM_GOAL`].
const LLM_PEER: &str = "continuous";
/// The language model, held to token SLOs.
const LLM: &str = "gpt2";
/// The lowest rate a search tries, as a share of Serial's capacity: a policy that misses the
/// bound there counts as having no capacity (`capacity` goes down to 1/1024; here the
/// searches are the grid's cost, and a capacity under 1/64 of Serial's loses to every peer
/// that has one anyway).
const LOWEST_SHARE: f64 = 1.0 / 64.0;

/// One search's bound on one bench.
struct Bounded {
    bench: usize,
    /// `p99 ≤ SLA`, or the token SLO's name.
    name: String,
    bound: Bound,
    /// The SLA-aware policies' deadline.
    sla: Sla,
    /// A token SLO (held to [`LLM_GOAL`] too).
    tokens: bool,
}

/// Every bench's bounds: p99 within its SLA; on the language model the two token SLOs instead
/// (its end-to-end p99 grows with its output's length, a few hundred tokens: no policy met
/// a p99 bound of twice a reference request's latency at any rate, on either NPU
/// configuration).
fn bounds(benches: &[Bench]) -> Result<Vec<Bounded>> {
    let mut out = Vec::new();
    for (b, bench) in benches.iter().enumerate() {
        if bench.model != LLM {
            let sla = sla_ms(&bench.bed);
            out.push(Bounded {
                bench: b,
                name: format!("p99 ≤ {sla:.0} ms"),
                bound: Bound::P99Ms(sla),
                sla: Sla::from_ms(sla)?,
                tokens: false,
            });
            continue;
        }
        for (slo, ttft_ms, tpot_ms) in token_slos(&bench.bed) {
            let bound = Bound::TokenSlo { ttft_ms, tpot_ms };
            let deadline = token_sla_ms(&bench.bed, bound).ok_or_else(|| {
                Error::Internal(format!(
                    "{}: a token bound on a model without a decoder",
                    bench.name
                ))
            })?;
            out.push(Bounded {
                bench: b,
                name: format!(
                    "{slo} token SLO (TTFT p99 ≤ {ttft_ms:.1} ms, TPOT p99 ≤ {tpot_ms:.2} ms)"
                ),
                bound,
                sla: Sla::from_ms(deadline)?,
                tokens: true,
            });
        }
    }
    Ok(out)
}

/// The rate a search reached: its capacity; the highest rate tried where the bound was met at
/// every rate tried (a lower bound: the probes were too short to fill a queue there); 0 where
/// it was met at none.
fn reached(c: &Capacity) -> f64 {
    match c.capacity_rps {
        Some(r) => r,
        None if !c.probes.is_empty() && c.probes.iter().all(|p| p.ok) => {
            c.probes.iter().map(|p| p.rate).fold(0.0, f64::max)
        }
        None => 0.0,
    }
}

/// Searches every (bench, bound, policy), writes `dominance_capacity.csv`/`.json` and the
/// report's section, and returns the section's text.
pub(super) fn capacities(ctx: &mut Ctx, benches: &[Bench], policies: &[&str]) -> Result<String> {
    let plan = ctx.plan.dominance_capacity;
    let bounded = bounds(benches)?;
    let searches: Vec<(usize, usize)> = (0..bounded.len())
        .flat_map(|k| (0..policies.len()).map(move |p| (k, p)))
        .collect();
    let shown = ctx
        .progress
        .start("dominance capacity", searches.len() as u64, "searches");
    let found: Vec<Capacity> = searches
        .par_iter()
        .map(|&(k, p)| {
            let bd = &bounded[k];
            let bed = &benches[bd.bench].bed;
            let name = if bd.tokens {
                crate::policy::auto::under_token_bound(policies[p])
            } else {
                policies[p]
            };
            let template = RunSpec {
                policy: crate::policy::Spec::parse(name, bed.max_batch.get())?,
                rate: 0.0,
                arrivals: "poisson".parse()?,
                classes: None,
                shed: false,
                abandon_late: false,
                admit: Default::default(),
                requests: plan.requests,
                sla: bd.sla,
                seed: 1,
                max_batch: bed.max_batch,
                max_pending: MaxPending::DEFAULT,
                colocated: None,
                replicas: crate::engine::Replicas::ONE,
            };
            let how = Search {
                bound: bd.bound,
                precision: plan.precision,
                seeds: plan.seeds,
                lowest_share: LOWEST_SHARE,
            };
            let c = search_one(
                name,
                bed.serial_capacity(),
                bed.max_batch.get(),
                &how,
                |rate| {
                    let runs = (1..=plan.seeds)
                        .into_par_iter()
                        .map(|seed| {
                            let spec = RunSpec {
                                rate,
                                seed,
                                ..template.clone()
                            };
                            run_one(bed, &spec, Keep::default()).map(|o| o.stats)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Ok(mean_stats(&runs.iter().collect::<Vec<_>>()))
                },
            );
            shown.inc(1);
            c
        })
        .collect::<Result<_>>()?;
    shown.finish();
    let rps = |k: usize, p: usize| reached(&found[k * policies.len() + p]);
    let auto = policies.len() - 1;
    let peers = auto;
    let continuous = policies.iter().position(|p| *p == LLM_PEER);
    let mut t = Table::new(&[
        "bench",
        "model",
        "bound",
        "sla_ms",
        "auto_rps",
        "best_peer",
        "best_rps",
        "ratio",
        "continuous_rps",
        "auto_bound_figure",
        "met",
    ]);
    let (mut points, mut met) = (0usize, 0usize);
    let mut each_met = vec![0usize; policies.len()];
    let mut misses = Vec::new();
    let mut llm_lines = Vec::new();
    let mut unmet = Vec::new();
    for (k, bd) in bounded.iter().enumerate() {
        let bench = &benches[bd.bench];
        let (best, bp) =
            (0..peers)
                .map(|p| (rps(k, p), p))
                .fold((0.0, 0), |x, y| if y.0 > x.0 { y } else { x });
        if best == 0.0 && rps(k, auto) == 0.0 {
            unmet.push(format!("{} under {}", bench.name, bd.name));
            continue;
        }
        let share = |p: usize| if best > 0.0 { rps(k, p) / best } else { 1.0 };
        for (p, n) in each_met.iter_mut().enumerate() {
            *n += usize::from(share(p) >= GOAL);
        }
        let a = rps(k, auto);
        let ratio = share(auto);
        let ok = ratio >= GOAL;
        points += 1;
        met += usize::from(ok);
        let at = &found[k * policies.len() + auto];
        let figure = match at.capacity_rps {
            Some(_) => bd.bound.shown(&at.at),
            None => at.note.clone().unwrap_or_default(),
        };
        if !ok {
            misses.push(format!(
                "- {} under {}: `auto` {a:.1} req/s, {:.2}× `{}`'s {best:.1}",
                bench.name, bd.name, ratio, policies[bp]
            ));
        }
        let cont = continuous.map_or(f64::NAN, |c| rps(k, c));
        if bd.tokens {
            let c_at = continuous.map(|c| &found[k * policies.len() + c]);
            llm_lines.push(format!(
                "- {} under the {}: `auto` {a:.1} req/s ({}), `continuous` {cont:.1} ({}): {:.2}× (goal {LLM_GOAL}×)",
                bench.name,
                bd.name,
                figure,
                c_at.map_or(String::new(), |c| bd.bound.shown(&c.at)),
                a / cont
            ));
        }
        t.push(vec![
            bench.name.clone().into(),
            bench.model.into(),
            bd.name.clone().into(),
            bd.sla.as_ms().into(),
            a.into(),
            policies[bp].into(),
            best.into(),
            ratio.into(),
            cont.into(),
            figure.into(),
            ok.to_string().into(),
        ]);
    }
    ctx.table(&t, "dominance_capacity")?;
    let ranking: Vec<String> = super::ranked(&each_met, policies)
        .iter()
        .map(|(n, p)| format!("| `{p}` | {n} of {points} |"))
        .collect();
    Ok(format!(
        "### Capacity\n\nEach policy's capacity (the highest Poisson rate whose p99 latency is within the bench's SLA; on GPT-2 also \
         under the `llm` experiment's tight and loose token SLOs, the SLA-aware policies' deadline derived from the bound as \
         `capacity` does), searched to {prec}% with {seeds} seed(s) of {requests} requests a probe: `auto`'s capacity is at least \
         {GOAL}× the best peer's on **{met} of {points}** benches and bounds (`dominance_capacity.csv`).\n\n\
         | policy | capacities within {GOAL}× of the best peer's |\n|---|---|\n{ranking}\n\n\
         A policy that met the bound at every rate tried counts at the highest rate tried (a lower bound: \
         its probes were too short to fill a queue). {unmet}\n\n\
         `auto`'s misses ({missed}):\n\n{misses}\n\nGPT-2 under the token SLOs, where `auto` is searched as `{tokens}` (it \
         scores its candidates on TTFT and TPOT p99, as `capacity` does under a token bound; goal: at least {LLM_GOAL}× `continuous`):\n\n{llm}\n",
        prec = 100.0 * plan.precision,
        seeds = plan.seeds,
        requests = plan.requests,
        ranking = ranking.join("\n"),
        missed = misses.len(),
        unmet = if unmet.is_empty() {
            "Some policy met every bench's bound.".to_string()
        } else {
            format!(
                "No policy met the bound at any rate on {} (left out): {}.",
                unmet.len(),
                unmet.join("; ")
            )
        },
        tokens = crate::policy::FOR_TOKENS,
        misses = if misses.is_empty() { "none".to_string() } else { misses.join("\n") },
        llm = llm_lines.join("\n"),
    ))
}
