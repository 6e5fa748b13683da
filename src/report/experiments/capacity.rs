//! Capacity at the SLA: for the three main models and the four co-located ones, each policy's
//! highest Poisson rate whose p99 latency stays within the SLA (100 ms), found by `lazybatch
//! capacity`'s bracket-and-bisect search ([`crate::capacity`]). Not a figure of the paper: its
//! throughput claims (1.1× / 1.3× / 1.2×, 1.8× co-located) measured where they can show, past
//! the load at which graph batching stops keeping up. The searches run while the report is
//! written (their probes depend on earlier probes, so they are not fixed jobs), the policies in
//! parallel.

use super::*;
use crate::report::table::Table;
use crate::run::capacity::{search_all_as, Bound, Search};
use crate::run::spec::Colocation;
use crate::run::RunSpec;
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::Sla;
use std::fmt::Write as _;

/// The capacity experiment.
pub(super) struct Capacity;

/// The policies searched (those that cannot serve co-located models are left out there; those
/// with a queue per model are searched on the co-located models only, where they differ):
/// Serial, GraphB, every LazyB reading, `lazy:adaptive`.
const POLICIES: &[&str] = &[
    "serial",
    "graph:0",
    "graph:5",
    "graph:25",
    "graph:50",
    "graph:5:per-model",
    "graph:25:per-model",
    "graph:50:per-model",
    "lazy",
    "lazy:recheck",
    "lazy:all",
    "lazy:past-max",
    "lazy:strict",
    "lazy:adaptive",
    "oracle",
];

/// The graph-batching windows "best GraphB" is chosen from here: the paper's, among those
/// searched.
const WINDOWS: &[&str] = &["graph:5", "graph:25", "graph:50"];

/// One model's (or the co-location's) capacities, policy by policy.
#[derive(Clone, Debug)]
pub(crate) struct ModelCapacity {
    /// Zoo model name, or [`COLO`].
    pub model: &'static str,
    /// Every policy searched, in [`POLICIES`] order.
    pub caps: Vec<crate::run::capacity::Capacity>,
}

impl ModelCapacity {
    /// A policy's capacity (req/s), if it has one.
    pub fn of(&self, policy: &str) -> Option<f64> {
        self.caps
            .iter()
            .find(|c| c.policy == policy)
            .and_then(|c| c.capacity_rps)
    }

    /// The paper's GraphB window with the highest capacity, and that capacity.
    pub fn best_graph(&self) -> Option<(&'static str, f64)> {
        WINDOWS
            .iter()
            .filter_map(|&w| self.of(w).map(|c| (w, c)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// `policy`'s capacity (a LazyB reading's) over the best GraphB's.
    pub fn gain_of(&self, policy: &str) -> Option<f64> {
        let (_, g) = self.best_graph()?;
        Some(self.of(policy)? / g)
    }
}

impl Experiment for Capacity {
    fn name(&self) -> &'static str {
        "capacity"
    }
    fn jobs(&self, _: &Plan, _: &NpuConfig, _: &mut BTreeSet<Job>) -> Result<()> {
        // searched while writing: each probe's rate depends on the ones before
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        capacity(ctx)
    }
}

/// Searches one model's (or the co-location's) capacities on this configuration.
fn search(ctx: &Ctx, model: &'static str) -> Result<ModelCapacity> {
    let plan = ctx.plan.capacity;
    let bench = crate::report::bench_for(model, ctx.npu(), MAX_BATCH, COVERAGE)?;
    let sla = Sla::from_ms(SLA_MS)?;
    let parts = bench.model.parts.len();
    let colocated = match parts {
        1 => None,
        n => Some(Colocation::new(n, None, None, sla)?),
    };
    let mut templates = Vec::new();
    for p in POLICIES {
        let spec = crate::policy::Spec::parse(p, MAX_BATCH)?;
        if spec.check_for(&bench.model).is_err() || (parts == 1 && p.ends_with(":per-model")) {
            continue;
        }
        templates.push(RunSpec {
            policy: spec,
            rate: 0.0,
            arrivals: "poisson".parse()?,
            classes: None,
            shed: false,
            abandon_late: false,
            admit: Default::default(),
            requests: plan.requests,
            sla,
            seed: 1,
            max_batch: MaxBatch::new(MAX_BATCH)?,
            max_pending: MaxPending::DEFAULT,
            colocated: colocated.clone(),
            replicas: crate::engine::Replicas::ONE,
        });
    }
    let how = Search {
        bound: Bound::P99Ms(SLA_MS),
        precision: plan.precision,
        seeds: plan.seeds,
        lowest_share: crate::run::capacity::lowest_share(bench.is_virtual()),
    };
    let label = format!("{}: {} capacity", ctx.npu_name, model_label(model));
    let caps = search_all_as(&label, &bench, &templates, &how, ctx.progress)?;
    Ok(ModelCapacity { model, caps })
}

fn model_label(m: &str) -> String {
    if m == COLO {
        "four co-located".into()
    } else {
        short(m).into()
    }
}

fn capacity(ctx: &mut Ctx) -> Result<()> {
    // every model's searches at once, so that one slow search does not idle the other threads
    let models: Vec<&'static str> = MAIN.iter().copied().chain([COLO]).collect();
    let all = {
        use rayon::prelude::*;
        let shared = &*ctx;
        models
            .par_iter()
            .map(|&m| search(shared, m))
            .collect::<Result<Vec<_>>>()?
    };
    let mut t = Table::new(&[
        "model",
        "policy",
        "capacity_rps",
        "mean_latency_ms",
        "p99_ms",
        "throughput_rps",
        "mean_batch",
        "probes",
        "note",
    ]);
    for mc in &all {
        for c in &mc.caps {
            let st = &c.at;
            t.push(vec![
                mc.model.into(),
                c.policy.as_str().into(),
                c.capacity_rps.unwrap_or(f64::NAN).into(),
                st.latency_ms.mean.into(),
                st.latency_ms.p99.into(),
                st.throughput_rps.into(),
                st.mean_batch_size.into(),
                (c.probes.len() as f64).into(),
                c.note.clone().unwrap_or_default().into(),
            ]);
        }
    }
    ctx.table(&t, "capacity")?;
    // the figure: policies down, models across, each cell the capacity in req/s, coloured by
    // its ratio to the best GraphB's
    let mut heat = HeatMap {
        title: format!("capacity at p99 ≤ {SLA_MS} ms (req/s)"),
        rows: POLICIES.iter().map(|p| label(p)).collect(),
        cols: all.iter().map(|mc| model_label(mc.model)).collect(),
        x_label: format!("NPU configuration `{}`", ctx.npu_name),
        goal: 1.0,
        worst: 0.5,
        higher_is_better: true,
        cell_w: 110,
        key: "colour: the capacity ÷ the best GraphB's; green ≥ 1, red at 0.5".into(),
        ..HeatMap::default()
    };
    for p in POLICIES {
        let (mut vals, mut labels) = (Vec::new(), Vec::new());
        for mc in &all {
            let cap = mc.of(p);
            let best = mc.best_graph().map(|b| b.1);
            vals.push(match (cap, best) {
                (Some(c), Some(b)) => c / b,
                _ => f64::NAN,
            });
            labels.push(cap.map_or("–".into(), thousands));
        }
        heat.values.push(vals);
        heat.labels.push(labels);
    }
    ctx.heat_map(&[heat], "capacity")?;
    let mut text = format!(
        "![capacity](capacity.svg)\n\nThe highest Poisson rate at which each policy's p99 latency stays within {SLA_MS} ms \
         (`lazybatch capacity --p99-ms {SLA_MS}`'s search: {} seed(s) × {} requests a probe, {}% precision; the four co-located \
         models at the mix's total rate, a quarter each). Req/s; `–`: no capacity (the policy cannot serve co-located models, or \
         no rate tried meets the bound: `capacity.csv` says which). Probes of {} requests fill a queue less than longer runs do, so \
         these capacities read a few percent higher than `lazybatch capacity`'s defaults (5,000 requests).\n\n| policy |",
        ctx.plan.capacity.seeds,
        ctx.plan.capacity.requests,
        100.0 * ctx.plan.capacity.precision,
        ctx.plan.capacity.requests
    );
    for mc in &all {
        let _ = write!(text, " {} |", model_label(mc.model));
    }
    let _ = write!(text, "\n|---|{}\n", "---|".repeat(all.len()));
    for p in POLICIES {
        let _ = write!(text, "| {} |", label(p));
        for mc in &all {
            let _ = write!(text, " {} |", mc.of(p).map_or("–".into(), thousands));
        }
        text.push('\n');
    }
    let _ = write!(text, "| **LazyB / best GraphB** |");
    for mc in &all {
        let cell = match (mc.gain_of("lazy"), mc.best_graph()) {
            (Some(g), Some((w, _))) => format!(" **{g:.2}×** (best: {}) |", label(w)),
            _ => " – |".into(),
        };
        text.push_str(&cell);
    }
    text.push_str(
        "\n\nThe paper's throughput claims (LazyB over the best graph batching: 1.1× ResNet-50, 1.3× GNMT, 1.2× Transformer, \
         1.8× co-located) read here as capacity at the SLA; the headline table carries them. Capacity.csv has each search's \
         statistics at its capacity.",
    );
    ctx.sections
        .push(("Capacity at the SLA (not in the paper)".into(), text));
    ctx.capacities = all;
    Ok(())
}

/// `1234.5` → `1,235`.
fn thousands(x: f64) -> String {
    crate::report::table::grouped(x.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(7.4), "7");
        assert_eq!(thousands(1234.5), "1,235");
        assert_eq!(thousands(1_000_000.0), "1,000,000");
    }
}
