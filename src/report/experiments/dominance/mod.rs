//! The dominance grid (`reproduce --figures dominance`): does `auto` match the best peer
//! everywhere? Every zoo model on the NPU configuration (and, under the primary one, every
//! card table recorded in `docs/gpu`, `--device profile:`), at loads of
//! [`Plan::dominance_loads`] × Serial's capacity, under Poisson arrivals and gamma arrivals of
//! CV 2 and 4, over [`Plan::dominance_seeds`] seeds: `auto`'s mean and p99 latency (each the mean over
//! seeds) against the best peer's on each, the peers being `auto`'s candidates and
//! `chunked:2`. A point meets the goal when both ratios are at most 1.05.

use super::*;
use crate::device::open::Opened;
use crate::device::table::TableDevice;
use crate::metrics::Stats;
use crate::run::grid::{run_one, Keep};
use crate::run::{RunSpec, Testbed, TestbedOptions};
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::Sla;
use rayon::prelude::*;

mod capacity;

/// The dominance grid.
pub(super) struct Dominance;

/// The zoo models of the grid: every one the other grids serve, and GPT-2.
fn models() -> Vec<&'static str> {
    NON_LLM_MODELS.iter().chain(&["gpt2"]).copied().collect()
}
/// Arrival processes.
const ARRIVALS: &[&str] = &["poisson", "gamma:2", "gamma:4"];
/// Peers that are not `auto`'s candidates.
const OTHER_PEERS: &[&str] = &["chunked:2"];
/// Where the card tables are (read when the grid runs, from the working directory).
const CARD_TABLES: &str = "docs/gpu";
/// The goal: `auto` within this factor of the best peer.
const GOAL: f64 = 1.05;

/// Every peer: `auto`'s candidates, then the others.
fn peers() -> Vec<&'static str> {
    crate::policy::auto::CANDIDATES
        .iter()
        .chain(OTHER_PEERS)
        .copied()
        .collect()
}

impl Experiment for Dominance {
    fn name(&self) -> &'static str {
        "dominance"
    }
    fn by_default(&self) -> bool {
        false
    }
    fn jobs(&self, _: &Plan, _: &NpuConfig, _: &mut BTreeSet<Job>) -> Result<()> {
        // its runs are its own (card tables are not NPU configurations): `write` runs them
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        dominance(ctx)
    }
}

/// One bench of the grid: a model on a device, and its name in the report.
struct Bench {
    name: String,
    model: &'static str,
    bed: Testbed,
}

/// The card tables under [`CARD_TABLES`], sorted by path (none when the folder is absent).
fn card_tables() -> Result<Vec<std::path::PathBuf>> {
    let root = std::path::Path::new(CARD_TABLES);
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.map_err(|e| Error::io(&d, e))?.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.to_string_lossy().ends_with(".profile.json") {
                found.push(p);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// A card table's short name: its loan's card and what the file adds to the model's name
/// (`docs/gpu/2026-11-27-h200/profiles/resnet50-f16-cudnn-graphs.profile.json` → `h200
/// f16-cudnn-graphs`).
fn card_name(path: &std::path::Path, model: &str) -> String {
    let rel = path.strip_prefix(CARD_TABLES).unwrap_or(path);
    let loan = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    // the loan's folder is its date and card: 2026-11-27-h200-capacity → h200-capacity
    let card = loan.splitn(4, '-').nth(3).unwrap_or(&loan).to_string();
    let file = rel
        .file_name()
        .map(|f| {
            f.to_string_lossy()
                .trim_end_matches(".profile.json")
                .to_string()
        })
        .unwrap_or_default();
    let rest = file.strip_prefix(model).unwrap_or(&file);
    let rest = rest.trim_start_matches(['-', '.']);
    if rest.is_empty() {
        card
    } else {
        format!("{card} {rest}")
    }
}

fn benches(ctx: &Ctx) -> Result<Vec<Bench>> {
    let mb = MaxBatch::new(MAX_BATCH)?;
    let models = models();
    let mut out: Vec<Bench> = models
        .par_iter()
        .map(|&m| {
            let model = crate::graph::zoo::load(m)?;
            let mb = MaxBatch::new(MAX_BATCH.min(model.max_batch))?;
            Ok(Bench {
                name: format!("{} · NPU {}", short(m), ctx.npu_name),
                model: m,
                bed: Testbed::new(model, ctx.npu().clone(), mb, COVERAGE)?,
            })
        })
        .collect::<Result<_>>()?;
    if ctx.npu_idx > 0 {
        return Ok(out);
    }
    for path in card_tables()? {
        let table = TableDevice::load(&path)?;
        let Some(&m) = models.iter().find(|&&m| m == table.table().model) else {
            continue;
        };
        let model = crate::graph::zoo::load(m)?;
        let opts = TestbedOptions {
            max_batch: mb,
            coverage: COVERAGE,
            profile: None,
            sampling: crate::device::measure::Sampling::default(),
        };
        let name = card_name(&path, m);
        out.push(Bench {
            name: format!("{} · {name}", short(m)),
            model: m,
            bed: Testbed::open(model, Opened::Table(table), &opts)?,
        });
    }
    Ok(out)
}

/// A bench's SLA: [`SLA_MS`], or twice a request's latency alone where that is longer (GPT-2,
/// 150 ms alone on the NPU model, could meet no 100 ms SLA and the SLA-aware peers would
/// gate on a deadline no request meets).
fn sla_ms(bed: &Testbed) -> f64 {
    let alone = 1e3 / bed.serial_capacity();
    if alone < SLA_MS {
        SLA_MS
    } else {
        2.0 * alone
    }
}

/// Each policy with the points it met, most first (ties in the policies' order).
fn ranked<'a>(each_met: &[usize], policies: &[&'a str]) -> Vec<(usize, &'a str)> {
    let mut ranked: Vec<(usize, &str)> = each_met
        .iter()
        .copied()
        .zip(policies.iter().copied())
        .collect();
    ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
    ranked
}

/// (bench, load, arrivals, policy) of a point's runs, each over the seeds.
type Key = (usize, usize, usize, usize);

fn dominance(ctx: &mut Ctx) -> Result<()> {
    let plan = ctx.plan;
    let benches = benches(ctx)?;
    let peers = peers();
    let policies: Vec<&str> = peers.iter().copied().chain(["auto"]).collect();
    let loads = &plan.dominance_loads;
    let mut specs = Vec::new();
    for (b, bench) in benches.iter().enumerate() {
        let cap = bench.bed.serial_capacity();
        let sla = Sla::from_ms(sla_ms(&bench.bed))?;
        for (l, &load) in loads.iter().enumerate() {
            for (a, &arr) in ARRIVALS.iter().enumerate() {
                for (p, &pol) in policies.iter().enumerate() {
                    for seed in 1..=u64::from(plan.dominance_seeds) {
                        let spec = RunSpec {
                            policy: crate::policy::Spec::parse(pol, MAX_BATCH)?,
                            rate: load * cap,
                            arrivals: arr.parse()?,
                            classes: None,
                            shed: false,
                            abandon_late: false,
                            admit: Default::default(),
                            requests: plan.dominance_requests,
                            sla,
                            seed,
                            max_batch: bench.bed.max_batch,
                            max_pending: MaxPending::DEFAULT,
                            colocated: None,
                            replicas: crate::engine::Replicas::ONE,
                        };
                        specs.push(((b, l, a, p), spec));
                    }
                }
            }
        }
    }
    // in a fixed shuffled order, so that the costly benches (the decoders on the NPU model)
    // spread over the run and the progress estimate holds; the order is fixed, so every sum
    // below adds in one order and the files come out the same byte for byte
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let shown = ctx.progress.start("dominance", specs.len() as u64, "runs");
    let outs: Vec<(Key, Stats)> = order
        .par_iter()
        .map(|&i| {
            let (k, spec) = &specs[i];
            let out = run_one(&benches[k.0].bed, spec, Keep::default());
            shown.inc(1);
            Ok((*k, out?.stats))
        })
        .collect::<Result<_>>()?;
    shown.finish();
    // (mean, p99), each the mean over seeds
    let mut agg: std::collections::BTreeMap<Key, (f64, f64, u32)> = Default::default();
    for (k, s) in &outs {
        let e = agg.entry(*k).or_default();
        e.0 += s.latency_ms.mean;
        e.1 += s.latency_ms.p99;
        e.2 += 1;
    }
    let point = |k: Key| -> (f64, f64) {
        let e = agg.get(&k).copied().unwrap_or((f64::NAN, f64::NAN, 1));
        (e.0 / f64::from(e.2), e.1 / f64::from(e.2))
    };
    let auto = policies.len() - 1;
    let mut t = Table::new(&[
        "bench",
        "model",
        "load",
        "arrivals",
        "rate_rps",
        "auto_mean_ms",
        "best_mean_peer",
        "best_mean_ms",
        "mean_ratio",
        "auto_p99_ms",
        "best_p99_peer",
        "best_p99_ms",
        "p99_ratio",
        "met",
    ]);
    let mut heats: Vec<HeatMap> = ARRIVALS
        .iter()
        .map(|a| HeatMap {
            title: format!("auto / best peer, worse of mean and p99 ({a})"),
            rows: benches.iter().map(|b| b.name.clone()).collect(),
            cols: loads.iter().map(|l| l.to_string()).collect(),
            x_label: "load (× Serial's capacity)".into(),
            goal: GOAL,
            worst: 1.5,
            cell_w: 52,
            left: 300,
            ..HeatMap::default()
        })
        .collect();
    let (mut points, mut met) = (0usize, 0usize);
    // how many points each policy (every peer, and auto last) meets against the best peer
    let mut each_met = vec![0usize; policies.len()];
    let mut misses: Vec<(f64, String)> = Vec::new();
    for (b, bench) in benches.iter().enumerate() {
        heats.iter_mut().for_each(|h| h.values.push(Vec::new()));
        let cap = bench.bed.serial_capacity();
        for (l, &load) in loads.iter().enumerate() {
            for (a, &arr) in ARRIVALS.iter().enumerate() {
                let best = |f: &dyn Fn((f64, f64)) -> f64| {
                    (0..peers.len())
                        .map(|p| (f(point((b, l, a, p))), p))
                        .fold((f64::INFINITY, 0), |x, y| if y.0 < x.0 { y } else { x })
                };
                let (bm, bmp) = best(&|s| s.0);
                let (bp, bpp) = best(&|s| s.1);
                for (p, n) in each_met.iter_mut().enumerate() {
                    let (m, q) = point((b, l, a, p));
                    *n += usize::from(m / bm <= GOAL && q / bp <= GOAL);
                }
                let (am, ap) = point((b, l, a, auto));
                let (rm, rp) = (am / bm, ap / bp);
                let ok = rm <= GOAL && rp <= GOAL;
                points += 1;
                met += usize::from(ok);
                if !ok {
                    misses.push((
                        rm.max(rp),
                        format!(
                            "{} at {load} × ({arr}): mean {rm:.3}× {}'s, p99 {rp:.3}× {}'s",
                            bench.name, peers[bmp], peers[bpp]
                        ),
                    ));
                }
                t.push(vec![
                    bench.name.clone().into(),
                    bench.model.into(),
                    load.into(),
                    arr.into(),
                    (load * cap).into(),
                    am.into(),
                    peers[bmp].into(),
                    bm.into(),
                    rm.into(),
                    ap.into(),
                    peers[bpp].into(),
                    bp.into(),
                    rp.into(),
                    ok.to_string().into(),
                ]);
                if let Some(row) = heats[a].values.last_mut() {
                    row.push(rm.max(rp));
                }
            }
        }
    }
    ctx.table(&t, "dominance")?;
    ctx.heat_map(&heats, "dominance_heat")?;
    misses.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut safest = Table::new(&["policy", "points_met", "points"]);
    let ranked = ranked(&each_met, &policies);
    let mut lines = vec![
        "| policy | points within 1.05× of the best peer on mean and p99 |".to_string(),
        "|---|---|".to_string(),
    ];
    for (n, p) in &ranked {
        safest.push(vec![
            (*p).into(),
            (*n as f64).into(),
            (points as f64).into(),
        ]);
        lines.push(format!("| `{p}` | {n} of {points} |"));
    }
    ctx.table(&safest, "dominance_policies")?;
    let worst: Vec<String> = misses
        .iter()
        .take(15)
        .map(|m| format!("- {}", m.1))
        .collect();
    let capacities = capacity::capacities(ctx, &benches, &policies)?;
    ctx.sections.push((
        "Dominance: auto against the best peer".into(),
        format!(
            "![dominance](dominance_heat.svg)\n\n`auto` serves with one of its candidates at a time and keeps choosing by serving \
             the last {window} arrivals again on the device's own table (docs/policies.md). Over {benches} benches (models on the \
             NPU model and on the card tables of docs/gpu), loads {loads:?} × Serial's capacity and {arrivals:?} arrivals, {seeds} \
             seed(s) of {requests} requests each, its mean and p99 latency are both within {GOAL}× of the best peer's ({peer_list}) \
             at **{met} of {points} points**. `dominance.csv` has every point and each best peer's name; the cells show the worse of \
             the two ratios (green meets the goal).\n\nEvery policy held to the same goal (the safest to leave on meets the most points; \
             a peer is measured against the best of the peers, itself included):\n\n{safest}\n\nThe {shown} worst misses of \
             `auto` ({missed} in all):\n\n{worst}\n\n{capacities}",
            safest = lines.join("\n"),
            window = crate::policy::auto::WINDOW,
            benches = benches.len(),
            arrivals = ARRIVALS,
            seeds = plan.dominance_seeds,
            requests = plan.dominance_requests,
            peer_list = peers.join(", "),
            shown = worst.len(),
            missed = misses.len(),
            worst = worst.join("\n"),
        ),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_table_is_named_by_its_card_and_what_its_file_adds() {
        let n = |p: &str, m: &str| card_name(std::path::Path::new(p), m);
        assert_eq!(
            n(
                "docs/gpu/2026-11-27-h200/profiles/resnet50-f16-cudnn-graphs.profile.json",
                "resnet50"
            ),
            "h200 f16-cudnn-graphs"
        );
        assert_eq!(
            n("docs/gpu/2026-11-26-h100/gnmt.profile.json", "gnmt"),
            "h100"
        );
        assert_eq!(
            n(
                "docs/gpu/2026-11-27-h200-capacity/transformer.profile.json",
                "transformer_base"
            ),
            "h200-capacity transformer"
        );
        assert_eq!(
            n(
                "docs/gpu/2026-11-27-h200/resnet50/resnet50.graphs.profile.json",
                "resnet50"
            ),
            "h200 graphs"
        );
    }
}
