//! The experiments of `reproduce`, one file each, every one an [`Experiment`]: which runs it
//! needs and what it writes from their results (data, figure, report section). [`ALL`] lists
//! them once, in report order; this module holds what they share: the writers' context
//! ([`Ctx`]), the policy sets and the helpers that aggregate runs over seeds.

mod adaptive;
mod batching;
mod bursts;
mod capacity;
mod cdf;
mod cellular;
mod colocation;
mod dec_timesteps;
mod dominance;
mod eval;
mod goodput;
mod lifo;
mod llm;
mod max_batch;
mod overload;
mod sensitivity;
mod sla;
mod tokens;
mod traffic;

pub(crate) use capacity::ModelCapacity;
pub(crate) use colocation::ColoGains;
pub(crate) use eval::{gains, gains_of, pooled, throughput_at};
pub(crate) use overload::{graph_over_half, throughput_with_overload};
pub(crate) use sla::{sla_curve, zero_from};

use super::heatmap::HeatMap;
use super::table::Table;
use super::{Job, Plan, Results, RunOut};
use crate::device::npu::NpuConfig;
use crate::error::{Error, Result};
use crate::metrics::spread;
use crate::plot::Figure;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// One experiment of the paper's evaluation.
pub(super) trait Experiment: Sync {
    /// Its name (what `--figures` accepts).
    fn name(&self) -> &'static str;
    /// Adds the runs it needs on NPU configuration `npu` (their `npu` index is set by the
    /// caller).
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()>;
    /// Writes its data, figure and report section from the results.
    fn write(&self, ctx: &mut Ctx) -> Result<()>;
    /// Whether `reproduce` runs it when `--figures` is not given (the `beyond` experiments,
    /// past the paper and minutes long, run when named).
    fn by_default(&self) -> bool {
        true
    }
}

/// Every experiment, in report order: the one registration of an experiment.
pub(super) const ALL: &[&dyn Experiment] = &[
    &batching::Batching,
    &traffic::Traffic,
    &eval::Eval,
    &overload::Overload,
    &capacity::Capacity,
    &cdf::Cdf,
    &sla::Sla,
    &sensitivity::Sensitivity,
    &dec_timesteps::DecTimesteps,
    &max_batch::MaxBatch,
    &cellular::Cellular,
    &bursts::Bursts,
    &goodput::Goodput,
    &adaptive::Adaptive,
    &dominance::Dominance,
    &tokens::Tokens,
    &llm::Llm,
    &colocation::Colocation,
    &lifo::Lifo,
];

/// The experiment named `name`.
pub(super) fn find(name: &str) -> Option<&'static dyn Experiment> {
    ALL.iter().copied().find(|e| e.name() == name)
}

/// The four co-located models (the paper's §VI names four; we take the three main ones and BERT).
pub(super) const COLO: &str = "resnet50,gnmt,transformer_base,bert_base";
/// The co-location experiment's GraphB windows, each run with one queue for every model and with
/// a queue per model (`:per-model`).
pub(super) const COLO_WINDOWS: &[f64] = &[5.0, 25.0, 50.0];
/// The LazyB readings that serve co-located models (the Oracle's look-ahead assumes one model).
pub(super) const COLO_READINGS: &[&str] = &[
    "lazy",
    "lazy:recheck",
    "lazy:all",
    "lazy:past-max",
    "lazy:strict",
];

/// The co-location experiment's GraphB policies: every window with a shared queue, then every
/// window with a queue per model.
pub(super) fn colo_graphs() -> Vec<String> {
    let shared = COLO_WINDOWS.iter().map(|&w| graph_policy(w, MAX_BATCH));
    let per = COLO_WINDOWS
        .iter()
        .map(|&w| format!("{}:per-model", graph_policy(w, MAX_BATCH)));
    shared.chain(per).collect()
}

/// Every policy of the co-location experiment: the readings, then the GraphB policies.
pub(super) fn colo_policies() -> Vec<String> {
    let mut v: Vec<String> = COLO_READINGS.iter().map(|s| s.to_string()).collect();
    v.extend(colo_graphs());
    v
}

pub(super) const CELL_MODELS: &[&str] = &["resnet50", "gnmt", "transformer_base", "lstm_stack"];
pub(super) const CELL_POLICIES: &[&str] = &[
    "graph:5",
    "graph:25",
    "cellular:5",
    "cellular:25",
    "lazy",
    "lazy:strict",
];

/// Every zoo model but GPT-2, the decoder-only language model (the models the grids of our
/// extensions serve, `adaptive` and `dominance`).
pub(super) const NON_LLM_MODELS: &[&str] = &[
    "resnet50",
    "gnmt",
    "transformer_base",
    "vgg16",
    "mobilenet_v1",
    "bert_base",
    "las",
    "lstm_stack",
];
pub(super) const MAIN: &[&str] = &["resnet50", "gnmt", "transformer_base"];
pub(super) const OTHERS: &[&str] = &["vgg16", "mobilenet_v1", "las", "bert_base"];
pub(super) const MAX_BATCH: u32 = 64;
/// Every reading of the paper's LazyB rules that `reproduce` runs and reports side by side
/// (`src/policy/lazy.rs` names each): `lazy` (a refusal holds until the active batch
/// completes, the longest admissible prefix, a request past `dec_timesteps` priced one step
/// from done, merging at a common loop node), then one rule changed at a time — the gate asked
/// again at every node (`lazy:recheck`, the rule until 2026-12), all-or-nothing admission
/// (`lazy:all`), a request past `dec_timesteps` priced at the model's longest decoder
/// (`lazy:past-max`), the exact batched latencies (`oracle`) and merging only at an identical
/// (node, timestep) (`lazy:strict`).
pub(crate) const READINGS: &[&str] = &[
    "lazy",
    "lazy:recheck",
    "lazy:all",
    "lazy:past-max",
    "oracle",
    "lazy:strict",
];
/// A markdown table's columns for every reading: the header cells (`` `lazy` | `lazy:recheck` |
/// … ``) and the matching rule cells (`---|` each).
pub(crate) fn readings_columns() -> (String, String) {
    let head: Vec<String> = READINGS.iter().map(|r| format!("`{r}`")).collect();
    (head.join(" | "), "---|".repeat(READINGS.len()))
}

/// The readings run beside the main evaluation's policies ([`policies`] has `lazy` and
/// `oracle`).
pub(super) const ABLATIONS: &[&str] = &["lazy:recheck", "lazy:all", "lazy:past-max", "lazy:strict"];
/// The ablations the rate figures draw (dashed): the rule until 2026-12 and the merge rule's;
/// the tables have every reading.
pub(super) const DRAWN_ABLATIONS: &[&str] = &["lazy:recheck", "lazy:strict"];
pub(super) const SLA_MS: f64 = 100.0;
pub(super) const COVERAGE: f64 = 90.0;

/// `model`'s serial capacity on `npu` (1 / single-input latency, requests/s).
pub(super) fn serial_capacity(model: &'static str, npu: &NpuConfig) -> Result<f64> {
    let m = crate::graph::zoo::load(model)?;
    let mb = crate::runtime::MaxBatch::new(MAX_BATCH)?;
    Ok(crate::run::Testbed::new(m, npu.clone(), mb, COVERAGE)?.serial_capacity())
}

/// The arrival rate at `load` times a serial capacity `cap`, rounded to 0.1 req/s so that an
/// experiment's jobs and its writer name the same runs.
pub(super) fn rate_at(cap: f64, load: f64) -> f64 {
    (load * cap * 10.0).round() / 10.0
}

/// Paper-style label of a policy string.
pub(super) fn label(p: &str) -> String {
    match p {
        "serial" => "Serial".into(),
        "lazy" => "LazyB".into(),
        "oracle" => "Oracle".into(),
        "lazy:strict" => "LazyB (strict)".into(),
        "lazy:recheck" => "LazyB (recheck)".into(),
        "lazy:all" => "LazyB (all-or-nothing)".into(),
        "lazy:past-max" => "LazyB (past-max)".into(),
        "lazy:past-again" => "LazyB (past-again)".into(),
        g if g.ends_with(":per-model") => {
            format!("{} per model", label(&g[..g.len() - ":per-model".len()]))
        }
        "lazy:adaptive" => "LazyB (adaptive)".into(),
        "continuous" => "Continuous".into(),
        c if c.starts_with("chunked:") => format!("Chunked({})", &c["chunked:".len()..]),
        "oracle:strict" => "Oracle (strict)".into(),
        g => match (g.strip_prefix("graph:"), g.strip_prefix("cellular:")) {
            (Some(rest), _) => format!("GraphB({})", rest.split(':').next().unwrap_or(rest)),
            (_, Some(rest)) => format!("Cellular({})", rest.split(':').next().unwrap_or(rest)),
            _ => g.into(),
        },
    }
}

pub(super) fn short(model: &str) -> &str {
    match model {
        "resnet50" => "ResNet-50",
        "gnmt" => "GNMT",
        "transformer_base" => "Transformer",
        "vgg16" => "VGG-16",
        "mobilenet_v1" => "MobileNet",
        "las" => "LAS",
        "bert_base" => "BERT",
        "lstm_stack" => "LSTM stack (pure RNN)",
        "gpt2" => "GPT-2",
        m => m,
    }
}

pub(super) fn graph_policy(w: f64, b: u32) -> String {
    if b == MAX_BATCH {
        format!("graph:{w}")
    } else {
        format!("graph:{w}:{b}")
    }
}

/// The policies of the main evaluation: the paper's four design points, and graph batching
/// without a window (`graph:0`, Triton's dynamic batcher with no queue delay), which the paper
/// does not evaluate; "best GraphB" is chosen among the paper's windows only.
pub(super) fn policies(plan: &Plan) -> Vec<String> {
    let mut v = vec!["serial".to_string(), "graph:0".to_string()];
    v.extend(plan.windows.iter().map(|&w| graph_policy(w, MAX_BATCH)));
    v.push("lazy".into());
    v.push("oracle".into());
    v
}

pub(super) fn seeds(plan: &Plan) -> impl Iterator<Item = u64> {
    1..=u64::from(plan.seeds)
}

/// The policies of a table or figure: the evaluation's, and (`ablations`) the ablations.
pub(super) fn with_ablations(plan: &Plan, ablations: bool) -> Vec<String> {
    let mut v = policies(plan);
    if ablations {
        v.extend(ABLATIONS.iter().map(|a| a.to_string()));
    }
    v
}

pub(super) fn eval_jobs(
    models: &[&'static str],
    rates: &[f64],
    plan: &Plan,
    ablations: bool,
    jobs: &mut BTreeSet<Job>,
) {
    for &m in models {
        for p in with_ablations(plan, ablations) {
            for &r in rates {
                for s in seeds(plan) {
                    jobs.insert(Job::new(m, &p, r, s, SLA_MS, COVERAGE, MAX_BATCH));
                }
            }
        }
    }
}

/// The SLA sweep's runs of `readings` (SLA-aware policies) on `models`.
pub(super) fn sla_jobs(
    models: &[&'static str],
    readings: &[&str],
    plan: &Plan,
    jobs: &mut BTreeSet<Job>,
) {
    for &m in models {
        for &p in readings {
            for &sla in &plan.slas {
                for s in seeds(plan) {
                    jobs.insert(Job::new(m, p, plan.high_rate, s, sla, COVERAGE, MAX_BATCH));
                }
            }
        }
    }
}

pub(super) fn dec_rate(model: &str, plan: &Plan) -> f64 {
    // at 1,000 req/s GNMT saturates the NPU model under `default` (and LazyB under `paper`)
    if model == "gnmt" {
        256.0
    } else {
        plan.high_rate
    }
}

/// Across-seed aggregate of one configuration.
#[derive(Clone, Debug, Default)]
pub(crate) struct Agg {
    /// Mean latency (mean over seeds) and its 25th/75th percentiles across seeds.
    pub lat: (f64, f64, f64),
    /// Throughput, likewise.
    pub tp: (f64, f64, f64),
    /// p99 latency (mean over seeds).
    pub p99: f64,
    /// SLA violation at the run's SLA.
    pub viol: (f64, f64, f64),
    /// Mean executed batch size.
    pub batch: (f64, f64, f64),
}

/// Shared state of the writers.
pub(crate) struct Ctx<'a> {
    pub(super) plan: &'a Plan,
    res: &'a Results,
    pub(super) out: PathBuf,
    npu: &'a NpuConfig,
    /// Which configuration (index into the options' list) and its name.
    pub(super) npu_idx: u8,
    pub(super) npu_name: String,
    /// Files written so far (relative to `out`).
    pub files: Vec<String>,
    /// report.md sections, by experiment.
    pub(super) sections: Vec<(String, String)>,
    /// The co-location experiment's gains of each reading, when run.
    pub(super) colo_gains: Vec<ColoGains>,
    /// The capacity experiment's searches, when run.
    pub(super) capacities: Vec<ModelCapacity>,
    /// How the searches that run while the report is written show their progress.
    pub(super) progress: crate::progress::Mode,
}

impl<'a> Ctx<'a> {
    /// A context for NPU configuration `npu_idx` (`npu`, named `name`), writing into `out`.
    pub fn new(
        plan: &'a Plan,
        res: &'a Results,
        out: PathBuf,
        npu: &'a NpuConfig,
        npu_idx: u8,
        name: &str,
        progress: crate::progress::Mode,
    ) -> Result<Self> {
        Ok(Ctx {
            plan,
            res,
            out,
            npu,
            npu_idx,
            npu_name: name.to_string(),
            files: Vec::new(),
            sections: Vec::new(),
            colo_gains: Vec::new(),
            capacities: Vec::new(),
            progress,
        })
    }

    /// The NPU configuration.
    pub(super) fn npu(&self) -> &NpuConfig {
        self.npu
    }

    /// Writes this configuration's `config.json`: the NPU configuration and the plan.
    pub(crate) fn write_config(
        &mut self,
        selected: &[&str],
        quick: bool,
        runs: usize,
    ) -> Result<()> {
        let config = serde_json::json!({
            "lazybatch_version": env!("CARGO_PKG_VERSION"),
            "quick": quick,
            "experiments": selected,
            "plan": self.plan,
            "npu_name": self.npu_name,
            "npu": self.npu,
            "runs_all_configurations": runs,
            "device": "npu",
        });
        let path = self.out.join("config.json");
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&config).map_err(|e| Error::Internal(e.to_string()))?
                + "\n",
        )
        .map_err(|e| Error::io(&path, e))?;
        self.files.push("config.json".into());
        Ok(())
    }

    pub(super) fn runs(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
        sla: f64,
        cov: f64,
        mb: u32,
    ) -> Result<Vec<&'a RunOut>> {
        seeds(self.plan)
            .map(|s| {
                let j = Job::new(model, policy, rate, s, sla, cov, mb).on(self.npu_idx);
                self.res
                    .get(&j)
                    .ok_or_else(|| Error::Internal(format!("missing run {j:?}")))
            })
            .collect()
    }

    /// The runs of one point, its job (defaults otherwise) changed by `with` (another arrival
    /// process, SLA classes).
    pub(super) fn runs_with(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
        with: &dyn Fn(Job) -> Job,
    ) -> Result<Vec<&'a RunOut>> {
        seeds(self.plan)
            .map(|s| {
                let j = with(
                    Job::new(model, policy, rate, s, SLA_MS, COVERAGE, MAX_BATCH).on(self.npu_idx),
                );
                self.res
                    .get(&j)
                    .ok_or_else(|| Error::Internal(format!("missing run {j:?}")))
            })
            .collect()
    }

    /// The run of one job of this configuration.
    pub(super) fn run_of(&self, job: Job) -> Result<&'a RunOut> {
        let j = job.on(self.npu_idx);
        self.res
            .get(&j)
            .ok_or_else(|| Error::Internal(format!("missing run {j:?}")))
    }

    pub(super) fn runs_named(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
    ) -> Result<Vec<&'a RunOut>> {
        self.runs(model, policy, rate, SLA_MS, COVERAGE, MAX_BATCH)
    }

    pub(super) fn agg(
        &self,
        model: &'static str,
        policy: &str,
        rate: f64,
        sla: f64,
        cov: f64,
        mb: u32,
    ) -> Result<Agg> {
        let runs = self.runs(model, policy, rate, sla, cov, mb)?;
        let f = |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|r| g(r)).collect());
        Ok(Agg {
            lat: f(&|r| r.stats.latency_ms.mean),
            tp: f(&|r| r.stats.throughput_rps),
            p99: f(&|r| r.stats.latency_ms.p99).0,
            viol: f(&|r| r.violation(sla)),
            batch: f(&|r| r.stats.mean_batch_size),
        })
    }

    pub(super) fn table(&mut self, t: &Table, name: &str) -> Result<()> {
        t.write(&self.out, name)?;
        self.files.push(format!("{name}.csv"));
        self.files.push(format!("{name}.json"));
        Ok(())
    }

    pub(super) fn figure(&mut self, f: &Figure, name: &str, w: u32, h: u32) -> Result<()> {
        f.write_svg(&self.out.join(format!("{name}.svg")), w, h)?;
        self.files.push(format!("{name}.svg"));
        Ok(())
    }

    pub(super) fn heat_map(&mut self, panels: &[HeatMap], name: &str) -> Result<()> {
        HeatMap::write_svg(panels, &self.out.join(format!("{name}.svg")))?;
        self.files.push(format!("{name}.svg"));
        Ok(())
    }

    /// The GraphB window (at max batch `mb`) with the lowest mean latency averaged over the
    /// evaluated rates: our definition of "the best performing graph batching".
    pub(super) fn best_graph(&self, model: &'static str, rates: &[f64], mb: u32) -> Result<String> {
        let mut best: Option<(f64, String)> = None;
        for &w in &self.plan.windows {
            let p = graph_policy(w, mb);
            let mut s = 0.0;
            for &r in rates {
                s += self.agg(model, &p, r, SLA_MS, COVERAGE, mb)?.lat.0;
            }
            if best.as_ref().is_none_or(|b| s < b.0) {
                best = Some((s, p));
            }
        }
        best.map(|b| b.1)
            .ok_or_else(|| Error::Internal("no graph windows".into()))
    }
}

pub(super) fn geomean(v: &[f64]) -> f64 {
    let v: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}
