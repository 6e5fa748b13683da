//! `lazybatch reproduce`: every experiment of the paper's evaluation on the NPU model, under
//! one or several NPU configurations (by default the paper-calibrated one and Table I taken
//! literally), each run through the same [`Testbed::run`](crate::run::Testbed::run) path as `run`
//! and `compare`, in parallel (rayon), over seeds. Each configuration's experiments write their
//! data (CSV and JSON), SVG figures and a report into a directory of their own; the top-level
//! `report.md` puts the paper's headline claims next to every configuration's, with the
//! measured cause of every large difference ([`headline`]).

pub mod calibration;
pub(crate) mod heatmap;
pub mod shard;
pub mod spectrum;
pub mod table;

mod claims;
mod differences;
mod experiments;
mod headline;

/// Experiment names, in report order (the values `--figures` accepts, besides [`GROUPS`]).
pub fn experiment_names() -> Vec<&'static str> {
    experiments::ALL.iter().map(|e| e.name()).collect()
}

/// Names `--figures` accepts for several experiments at once.
pub const GROUPS: &[(&str, &[&str])] = &[(
    "beyond",
    &["bursts", "goodput", "adaptive", "tokens", "llm"],
)];

/// The experiments `reproduce` runs unless `--figures` names others: the paper's evaluation and
/// the capacity at its SLA; [`GROUPS`]' `beyond` (our experiments past the paper, minutes more)
/// runs when named, or with `all`.
pub fn default_experiment_names() -> Vec<&'static str> {
    experiments::ALL
        .iter()
        .filter(|e| e.by_default())
        .map(|e| e.name())
        .collect()
}

/// The experiments `names` select (groups expanded; `all`: every one), in report order, each
/// once; `None`: [`default_experiment_names`].
fn select(names: Option<&[String]>) -> Result<Vec<&'static dyn experiments::Experiment>> {
    let Some(names) = names else {
        return Ok(experiments::ALL
            .iter()
            .copied()
            .filter(|e| e.by_default())
            .collect());
    };
    let mut wanted = Vec::new();
    for f in names {
        if f == "all" {
            wanted.extend(experiment_names().iter().map(|m| m.to_string()));
            continue;
        }
        match GROUPS.iter().find(|(g, _)| g == f) {
            Some((_, members)) => wanted.extend(members.iter().map(|m| m.to_string())),
            None if experiments::find(f).is_some() => wanted.push(f.clone()),
            None => {
                let groups: Vec<&str> = GROUPS.iter().map(|g| g.0).collect();
                return Err(Error::invalid(
                    "figures",
                    format!(
                        "unknown experiment '{f}' (known: {}; groups: {}, all)",
                        experiment_names().join(", "),
                        groups.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(experiments::ALL
        .iter()
        .copied()
        .filter(|e| wanted.iter().any(|w| w == e.name()))
        .collect())
}

use crate::device::npu::NpuConfig;
use crate::error::{Error, Result};
use crate::graph::zoo;
use crate::progress::Mode;
use crate::run::grid::{run_one, Keep};
use crate::run::spec::Colocation;
use crate::run::{RunSpec, Testbed};
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::{Nanos, Sla};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

/// What `reproduce` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Output directory.
    pub out: PathBuf,
    /// Fewer seeds, requests and sweep points (CI).
    pub quick: bool,
    /// Seeds per configuration (default 20, quick 2).
    pub seeds: Option<u32>,
    /// Experiments to run (default: all of [`experiment_names`]).
    pub figures: Option<Vec<String>>,
    /// Progress on stderr ([`crate::progress`]); unless off, also a line per experiment with
    /// its run time and write time.
    pub progress: Mode,
    /// NPU configurations (name, configuration), the first the primary one (its figures head
    /// the report; the ablations run on it).
    pub npus: Vec<(String, NpuConfig)>,
}

/// The sweep parameters that follow from the options.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// Seeds 1..=seeds.
    pub seeds: u32,
    /// Requests per run for static (CNN, BERT) models.
    pub requests_static: usize,
    /// Requests per run for seq2seq models.
    pub requests_seq: usize,
    /// Arrival rates of the latency/throughput sweep (req/s), the averages' rates.
    pub rates: Vec<f64>,
    /// Rates past graph batching's saturation (the paper's Fig. 5 reaches 2,000 req/s), drawn
    /// and tabled beside [`Plan::rates`] but kept out of the averages, where a queue that grows
    /// without bound would swamp every other rate.
    pub overload_rates: Vec<f64>,
    /// Run lengths (requests) of the overload experiment, shortest first: how long a run must be
    /// before throughput past saturation stops moving.
    pub overload_lengths: Vec<u32>,
    /// Seeds per point of the overload experiment (1..=seeds; its runs are long).
    pub overload_seeds: u32,
    /// The capacity experiment's search.
    pub capacity: CapacityPlan,
    /// Graph-batching windows of the main evaluation (ms).
    pub windows: Vec<f64>,
    /// Windows of the batch-size-per-traffic sweep (ms).
    pub traffic_windows: Vec<f64>,
    /// Rates of the batch-size-per-traffic sweep.
    pub traffic_rates: Vec<f64>,
    /// SLA targets (ms).
    pub slas: Vec<f64>,
    /// Coverages N (%) of the dec_timesteps sweep.
    pub coverages: Vec<f64>,
    /// High load (req/s) of the CDF, SLA and sensitivity experiments.
    pub high_rate: f64,
    /// Low load (req/s) of the sensitivity experiment.
    pub low_rate: f64,
    /// Graph batching's maximum batch sizes of the max-batch sweep.
    pub max_batches: Vec<u32>,
    /// Rates of the cellular-batching comparison (low, medium, high load).
    pub cell_rates: Vec<f64>,
    /// Total rates of the co-location experiment.
    pub colo_rates: Vec<f64>,
    /// Loads (arrival rate × mean service time) of the LIFO experiment.
    pub lifo_loads: Vec<f64>,
    /// Loads (× Serial's capacity) of the dominance grid.
    pub dominance_loads: Vec<f64>,
    /// Requests per run of the dominance grid.
    pub dominance_requests: usize,
    /// Seeds per point of the dominance grid (1..=seeds; `--seeds` sets it too): fewer than the
    /// plan's, so that the grid's 1,000-odd points run in minutes on two cores.
    pub dominance_seeds: u32,
    /// The dominance grid's capacity searches (Poisson arrivals; a quarter of the grid's
    /// seeds, at least one: the searches are the grid's longest part).
    pub dominance_capacity: CapacityPlan,
}

/// How `reproduce` searches capacities (`lazybatch capacity`'s search, smaller).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct CapacityPlan {
    /// Requests per probe run.
    pub requests: usize,
    /// Seeds per probe (1..=seeds; the probe is their mean).
    pub seeds: u64,
    /// The bracket's relative width at which the search stops.
    pub precision: f64,
}

impl Plan {
    /// The plan for `opts`.
    pub fn new(opts: &Options) -> Result<Plan> {
        let seeds = opts.seeds.unwrap_or(if opts.quick { 2 } else { 20 });
        let dominance_seeds = opts.seeds.unwrap_or(if opts.quick { 2 } else { 4 });
        if seeds == 0 {
            return Err(Error::invalid("seeds", "must be at least 1"));
        }
        Ok(if opts.quick {
            Plan {
                seeds,
                requests_static: 400,
                requests_seq: 150,
                rates: vec![16.0, 256.0, 1000.0],
                overload_rates: vec![2000.0],
                overload_lengths: vec![150, 600],
                overload_seeds: 1,
                capacity: CapacityPlan {
                    requests: 300,
                    seeds: 1,
                    precision: 0.1,
                },
                windows: vec![5.0, 25.0, 50.0, 75.0, 95.0],
                traffic_windows: vec![5.0, 25.0, 99.0],
                traffic_rates: vec![16.0, 250.0, 2000.0],
                slas: vec![20.0, 60.0, 100.0],
                coverages: vec![16.0, 90.0, 99.0],
                high_rate: 1000.0,
                low_rate: 16.0,
                max_batches: vec![16, 32, 64],
                cell_rates: vec![16.0, 256.0, 1000.0],
                colo_rates: vec![64.0, 128.0, 256.0, 384.0],
                lifo_loads: vec![0.3, 0.7, 0.9],
                dominance_loads: vec![0.3, 0.9, 2.0, 4.0],
                dominance_requests: 300,
                dominance_seeds,
                dominance_capacity: CapacityPlan {
                    requests: 300,
                    seeds: u64::from(dominance_seeds.div_ceil(4)),
                    precision: 0.1,
                },
            }
        } else {
            Plan {
                seeds,
                requests_static: 2000,
                requests_seq: 500,
                rates: vec![16.0, 128.0, 256.0, 512.0, 1000.0],
                overload_rates: vec![1500.0, 2000.0],
                overload_lengths: vec![500, 1000, 2000, 5000, 10000],
                overload_seeds: 5,
                capacity: CapacityPlan {
                    requests: 2000,
                    seeds: 2,
                    precision: 0.02,
                },
                windows: vec![5.0, 25.0, 50.0, 75.0, 95.0],
                traffic_windows: vec![5.0, 10.0, 25.0, 50.0, 75.0, 99.0],
                traffic_rates: vec![16.0, 250.0, 2000.0],
                slas: vec![20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0],
                coverages: vec![16.0, 30.0, 50.0, 70.0, 90.0, 95.0, 99.0],
                high_rate: 1000.0,
                low_rate: 16.0,
                max_batches: vec![16, 32, 64],
                cell_rates: vec![16.0, 256.0, 1000.0],
                colo_rates: vec![64.0, 128.0, 256.0, 384.0],
                lifo_loads: vec![0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95],
                dominance_loads: vec![0.1, 0.3, 0.9, 1.5, 2.0, 4.0],
                dominance_requests: 600,
                dominance_seeds,
                dominance_capacity: CapacityPlan {
                    requests: 600,
                    seeds: u64::from(dominance_seeds.div_ceil(4)),
                    precision: 0.05,
                },
            }
        })
    }

    /// The latency/throughput sweep's rates and the overload rates, in order.
    pub fn all_rates(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .rates
            .iter()
            .chain(&self.overload_rates)
            .copied()
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// Requests per run for a model.
    pub fn requests(&self, model: &str) -> usize {
        if model.contains(',')
            || ["gnmt", "transformer_base", "las", "lstm_stack", "gpt2"].contains(&model)
        {
            self.requests_seq
        } else {
            self.requests_static
        }
    }
}

/// One simulated run's identity. Policies whose decisions ignore the SLA (serial, graph) are
/// run once at 100 ms and their violations at other targets computed from the latencies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Job {
    /// Model name (zoo name).
    pub model: &'static str,
    /// Policy string.
    pub policy: String,
    /// Rate in milli-requests per second.
    pub rate_milli: u64,
    /// Seed.
    pub seed: u64,
    /// SLA in µs.
    pub sla_us: u64,
    /// Coverage in tenths of a percent.
    pub coverage_tenths: u32,
    /// Server maximum batch.
    pub max_batch: u32,
    /// Which NPU configuration (index into [`Options::npus`]).
    pub npu: u8,
    /// The arrival process (`--arrivals` syntax; `poisson` for the paper's traffic).
    pub arrivals: &'static str,
    /// SLA classes (`--classes` syntax; empty: every request at the run's SLA).
    pub classes: String,
    /// Shed requests whose deadline is lost (`--shed`).
    pub shed: bool,
    /// Let go of requests past their deadline at the next node boundary (`--abandon-late`).
    pub abandon_late: bool,
    /// Requests in the run; 0: the plan's for the model ([`Plan::requests`]).
    pub requests: u32,
}

impl Job {
    /// A job; the SLA and coverage are normalized to the defaults for SLA-blind policies, so
    /// their runs are shared across SLA targets.
    pub fn new(
        model: &'static str,
        policy: &str,
        rate: f64,
        seed: u64,
        sla_ms: f64,
        coverage: f64,
        max_batch: u32,
    ) -> Job {
        // an unknown policy keeps its settings: its run reports the parse error
        let sla_aware =
            crate::policy::Spec::parse(policy, max_batch).map_or(true, |p| p.uses_sla());
        let (sla_ms, coverage) = if sla_aware {
            (sla_ms, coverage)
        } else {
            (experiments::SLA_MS, experiments::COVERAGE)
        };
        Job {
            model,
            policy: policy.to_string(),
            rate_milli: (rate * 1e3).round() as u64,
            seed,
            sla_us: (sla_ms * 1e3).round() as u64,
            coverage_tenths: (coverage * 10.0).round() as u32,
            max_batch,
            npu: 0,
            arrivals: "poisson",
            classes: String::new(),
            shed: false,
            abandon_late: false,
            requests: 0,
        }
    }
    /// The same run with `requests` requests instead of the plan's.
    pub fn lasting(self, requests: u32) -> Job {
        Job { requests, ..self }
    }
    /// The same run on NPU configuration `npu`.
    pub fn on(self, npu: u8) -> Job {
        Job { npu, ..self }
    }
    /// The same run with another arrival process.
    pub fn arriving(self, arrivals: &'static str) -> Job {
        Job { arrivals, ..self }
    }
    /// The same run with SLA classes, shedding or not.
    pub fn classed(self, classes: String, shed: bool) -> Job {
        Job {
            classes,
            shed,
            ..self
        }
    }
    /// The same run letting go of late requests (`--abandon-late`) or not.
    pub fn abandoning_late(self, abandon_late: bool) -> Job {
        Job {
            abandon_late,
            ..self
        }
    }
    /// The rate in req/s.
    pub fn rate(&self) -> f64 {
        self.rate_milli as f64 / 1e3
    }
}

pub use crate::run::grid::RunOut;

/// Results of every job, by job.
pub(crate) type Results = HashMap<Job, RunOut>;

/// The bench of a zoo model, or of the co-location of a comma-separated list of them, on `npu`.
pub(crate) fn bench_for(
    model: &str,
    npu: &NpuConfig,
    max_batch: u32,
    coverage: f64,
) -> Result<Testbed> {
    let model = if model.contains(',') {
        crate::graph::Model::compose(
            model
                .split(',')
                .map(zoo::load)
                .collect::<Result<Vec<_>>>()?,
        )
    } else {
        zoo::load(model)?
    };
    Testbed::new(model, npu.clone(), MaxBatch::new(max_batch)?, coverage)
}

/// Runs `jobs` in parallel (deterministic: each job depends only on its own key); returns the
/// results and each job's run time in seconds (reported, never part of a result).
fn run_jobs(
    jobs: &BTreeSet<Job>,
    plan: &Plan,
    npus: &[(String, NpuConfig)],
    progress: Mode,
) -> Result<(Results, HashMap<Job, f64>)> {
    // one bench (model, profiled device, predictor) per model, maximum batch and coverage,
    // built in parallel
    type Key = (u8, &'static str, u32, u32);
    let key_of = |j: &Job| (j.npu, j.model, j.max_batch, j.coverage_tenths);
    let keys: BTreeSet<Key> = jobs.iter().map(key_of).collect();
    let benches: BTreeMap<Key, Testbed> = keys
        .into_par_iter()
        .map(|key @ (npu, model, max_batch, coverage_tenths)| {
            let cfg = npus
                .get(usize::from(npu))
                .ok_or_else(|| Error::Internal(format!("no NPU configuration #{npu}")))?;
            let coverage = f64::from(coverage_tenths) / 10.0;
            Ok((key, bench_for(model, &cfg.1, max_batch, coverage)?))
        })
        .collect::<Result<_>>()?;
    let bar = progress.start("reproduce", jobs.len() as u64, "runs");
    // in a fixed shuffled order: the jobs' costs then arrive evenly over the pool's work, so the
    // progress estimate holds (in key order the costly experiments came last), and each
    // result depends only on its own job, so the order changes no byte
    let mut list: Vec<&Job> = jobs.iter().collect();
    list.sort_by_cached_key(|j| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        j.hash(&mut h);
        h.finish()
    });
    let outs: Vec<Result<(RunOut, f64)>> = list
        .par_iter()
        .with_max_len(1)
        .map(|j| {
            let t0 = std::time::Instant::now();
            let bench = &benches[&key_of(j)];
            let sla = Sla::new(Nanos(j.sla_us * 1000))?;
            // co-located models: the rate split evenly, every model at the run's SLA
            let nparts = bench.model.parts.len();
            let colocated = match nparts {
                1 => None,
                n => Some(Colocation::new(n, None, None, sla)?),
            };
            let cfg = RunSpec {
                policy: crate::policy::Spec::parse(&j.policy, j.max_batch)?,
                rate: j.rate(),
                arrivals: j.arrivals.parse()?,
                classes: match j.classes.as_str() {
                    "" => None,
                    c => Some(c.parse()?),
                },
                shed: j.shed,
                abandon_late: j.abandon_late,
                admit: Default::default(),
                requests: match j.requests {
                    0 => plan.requests(j.model),
                    n => n as usize,
                },
                sla,
                seed: j.seed,
                max_batch: MaxBatch::new(j.max_batch)?,
                max_pending: MaxPending::DEFAULT,
                colocated,
                replicas: crate::engine::Replicas::ONE,
            };
            // the latencies feed the CDFs and the SLA sweeps
            let keep = Keep {
                latencies: true,
                ..Keep::default()
            };
            let out = run_one(bench, &cfg, keep)?;
            bar.inc(1);
            Ok((out, t0.elapsed().as_secs_f64()))
        })
        .collect();
    bar.finish();
    let mut res = HashMap::with_capacity(list.len());
    let mut secs = HashMap::with_capacity(list.len());
    for (j, o) in list.into_iter().zip(outs) {
        let (out, s) = o?;
        res.insert(j.clone(), out);
        secs.insert(j.clone(), s);
    }
    Ok((res, secs))
}

/// What a `reproduce` sweep runs, before it runs: the plan, the experiments chosen, every
/// job (sorted: a job's place in this set is its row for `--shard`) and each experiment's own
/// jobs on each configuration.
pub(crate) struct Sweep {
    pub(crate) plan: Plan,
    chosen: Vec<&'static dyn experiments::Experiment>,
    selected: Vec<&'static str>,
    pub(crate) jobs: BTreeSet<Job>,
    own: Vec<Vec<BTreeSet<Job>>>,
}

impl Sweep {
    /// The sweep `opts` asks for.
    pub(crate) fn new(opts: &Options) -> Result<Sweep> {
        let plan = Plan::new(opts)?;
        if opts.npus.is_empty() || opts.npus.len() > usize::from(u8::MAX) {
            return Err(Error::invalid(
                "NPU configurations",
                "give 1 to 255 configurations",
            ));
        }
        let chosen = select(opts.figures.as_deref())?;
        let selected: Vec<&'static str> = chosen.iter().map(|e| e.name()).collect();
        let mut jobs = BTreeSet::new();
        // each experiment's own runs on each configuration, for its run time below
        let mut own: Vec<Vec<BTreeSet<Job>>> = Vec::with_capacity(opts.npus.len());
        for (i, (_, cfg)) in opts.npus.iter().enumerate() {
            let mut per = Vec::with_capacity(chosen.len());
            for e in &chosen {
                let mut mine = BTreeSet::new();
                e.jobs(&plan, cfg, &mut mine)?;
                let mine: BTreeSet<Job> = mine.into_iter().map(|j| j.on(i as u8)).collect();
                jobs.extend(mine.iter().cloned());
                per.push(mine);
            }
            own.push(per);
        }
        Ok(Sweep {
            plan,
            chosen,
            selected,
            jobs,
            own,
        })
    }

    /// Its fingerprint: every job, the plan, the experiments, the NPU configurations and
    /// lazybatch's version (another version may model the same runs otherwise).
    pub(crate) fn fingerprint(&self, opts: &Options) -> String {
        crate::run::shard::fingerprint(&format!(
            "reproduce {}\n{:?}\n{:?}\n{:?}\n{:?}\n{}",
            env!("CARGO_PKG_VERSION"),
            self.jobs,
            self.plan,
            self.selected,
            opts.npus,
            opts.quick
        ))
    }
}

/// Says `msg` on stderr unless progress is off.
fn say(opts: &Options, msg: &str) {
    if opts.progress != Mode::Off {
        eprintln!("{msg}");
    }
}

/// Runs the selected experiments under every configuration of `opts.npus` and writes
/// everything to `opts.out`: each configuration's files under `<out>/<name>/`, and the
/// top-level `report.md` and `config.json`. Returns the files written, relative to `opts.out`.
pub fn reproduce(opts: &Options) -> Result<Vec<String>> {
    let sweep = Sweep::new(opts)?;
    std::fs::create_dir_all(&opts.out).map_err(|e| Error::io(&opts.out, e))?;
    let (results, secs) = run_sweep(opts, &sweep, &sweep.jobs)?;
    write_all(opts, &sweep, &results, &secs)
}

/// Runs `jobs` of `sweep`, saying how long they took.
pub(crate) fn run_sweep(
    opts: &Options,
    sweep: &Sweep,
    jobs: &BTreeSet<Job>,
) -> Result<(Results, HashMap<Job, f64>)> {
    say(
        opts,
        &format!(
            "reproduce: {} runs of {} experiments on {} NPU configuration(s), on {} threads",
            jobs.len(),
            sweep.selected.len(),
            opts.npus.len(),
            rayon::current_num_threads()
        ),
    );
    let t_runs = std::time::Instant::now();
    let (results, secs) = run_jobs(jobs, &sweep.plan, &opts.npus, opts.progress)?;
    say(
        opts,
        &format!(
            "reproduce: {} runs took {} ({} of run time over all threads)",
            jobs.len(),
            crate::progress::human(t_runs.elapsed().as_secs_f64()),
            crate::progress::human(secs.values().sum::<f64>())
        ),
    );
    Ok((results, secs))
}

/// Writes every experiment's files from the sweep's `results` (each job's run time, `secs`,
/// only said); the files written, relative to `opts.out`.
pub(crate) fn write_all(
    opts: &Options,
    sweep: &Sweep,
    results: &Results,
    secs: &HashMap<Job, f64>,
) -> Result<Vec<String>> {
    let (plan, chosen, selected) = (&sweep.plan, &sweep.chosen, &sweep.selected);
    std::fs::create_dir_all(&opts.out).map_err(|e| Error::io(&opts.out, e))?;
    let mut files = Vec::new();
    let mut ctxs = Vec::new();
    for (i, (name, cfg)) in opts.npus.iter().enumerate() {
        let dir = opts.out.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let mut ctx = experiments::Ctx::new(plan, results, dir, cfg, i as u8, name, opts.progress)?;
        for (k, e) in chosen.iter().enumerate() {
            let t0 = std::time::Instant::now();
            e.write(&mut ctx)?;
            let mine = &sweep.own[i][k];
            let run_s: f64 = mine
                .iter()
                .map(|j| secs.get(j).copied().unwrap_or(0.0))
                .sum::<f64>()
                .max(0.0);
            say(
                opts,
                &format!(
                    "reproduce: {name}: {}: {} runs, {:.1} s of run time; written in {:.1} s",
                    e.name(),
                    mine.len(),
                    run_s,
                    t0.elapsed().as_secs_f64()
                ),
            );
        }
        ctx.write_config(selected, opts.quick, sweep.jobs.len())?;
        headline::write_config_report(&mut ctx, selected, opts.quick)?;
        files.extend(ctx.files.iter().map(|f| format!("{name}/{f}")));
        ctxs.push(ctx);
    }
    files.extend(headline::write_top_report(
        &opts.out, &ctxs, selected, opts.quick,
    )?);
    let config = serde_json::json!({
        "lazybatch_version": env!("CARGO_PKG_VERSION"),
        "quick": opts.quick,
        "experiments": selected,
        "plan": plan,
        "npu": opts.npus.iter().map(|(n, c)| serde_json::json!({"name": n, "config": c})).collect::<Vec<_>>(),
        "runs": sweep.jobs.len(),
        "device": "npu",
    });
    let cfg_path = opts.out.join("config.json");
    std::fs::write(
        &cfg_path,
        serde_json::to_string_pretty(&config).map_err(|e| Error::Internal(e.to_string()))? + "\n",
    )
    .map_err(|e| Error::io(&cfg_path, e))?;
    files.push("config.json".into());
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<&'static str> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        select(Some(&list))
            .unwrap()
            .iter()
            .map(|e| e.name())
            .collect()
    }

    #[test]
    fn beyond_names_the_experiments_past_the_paper_once_each_in_report_order() {
        assert_eq!(
            names(&["beyond"]),
            ["bursts", "goodput", "adaptive", "tokens", "llm"]
        );
        assert_eq!(
            names(&["adaptive", "eval", "beyond"]),
            ["eval", "bursts", "goodput", "adaptive", "tokens", "llm"]
        );
        let e = select(Some(&["nope".to_string()]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("groups: beyond, all"), "{e}");
    }

    #[test]
    fn by_default_the_papers_experiments_and_capacity_run_and_all_adds_beyond() {
        let default: Vec<&str> = select(None).unwrap().iter().map(|e| e.name()).collect();
        assert_eq!(default, default_experiment_names());
        assert!(default.contains(&"eval") && default.contains(&"capacity"));
        for b in ["bursts", "goodput", "adaptive", "tokens", "llm"] {
            assert!(!default.contains(&b), "{b} is opt-in");
        }
        assert_eq!(names(&["all"]), experiment_names());
        assert_eq!(names(&["all", "eval"]), experiment_names());
    }
}
