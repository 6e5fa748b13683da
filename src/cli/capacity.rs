//! `lazybatch capacity`: for each policy, the highest Poisson rate that meets a p99 or an
//! SLA-violation bound ([`lazybatch::capacity`]), as a table, JSON, and with `--out` the
//! latency-against-throughput picture with each capacity marked; with `--shard I/N`, one shard
//! of the policies into a `shard.json` that `lazybatch merge` assembles ([`report`]).

use super::replicas_needed::Searched;
use super::{emit, in_range, open_bench, serve_args, specs_for, DeviceArgs, ModelArgs, ServeArgs};
use anyhow::{Context, Result};
use clap::Args;
use lazybatch::progress::Mode;
use lazybatch::run::capacity::{self, Bound, Capacity, Search};
use lazybatch::run::replicas_needed::need_all;
use lazybatch::run::shard::{self, CapacityRow, CapacitySearch, Shard, ShardFile};
use lazybatch::run::RunSpec;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The policies searched when none are given.
const DEFAULT_POLICIES: &str =
    "serial,graph:0,graph:5,graph:25,graph:50,lazy,lazy:recheck,lazy:adaptive,oracle";

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("bound").required(true).multiple(true).args(["p99_ms", "violations", "ttft_p99_ms", "tpot_p99_ms"])))]
pub(super) struct CapacityArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    // the help lists every policy of the registry
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_POLICIES,
          help = super::policies_help("Policies, comma-separated, of", "."))]
    policies: Vec<String>,
    /// The bound: p99 latency at most this many ms (above the single-input latency).
    #[arg(long, allow_negative_numbers = true)]
    p99_ms: Option<f64>,
    /// The bound: at most this share (%) of requests over --sla-ms (rejected ones count), in
    /// [0, 100).
    #[arg(long, allow_negative_numbers = true)]
    violations: Option<f64>,
    /// The bound, for models with a decoder: p99 time to first token (the end of a request's
    /// first decoder step, or of its prefill where the prefill chooses it) at most this many
    /// ms; with --tpot-p99-ms, both (an LLM service's SLO).
    #[arg(long, allow_negative_numbers = true)]
    ttft_p99_ms: Option<f64>,
    /// The bound, for models with a decoder: p99 time per output token after the first at
    /// most this many ms; with --ttft-p99-ms, both.
    #[arg(long, allow_negative_numbers = true)]
    tpot_p99_ms: Option<f64>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Seeds per probe (each probe is their mean), in [1, 1000].
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    seeds: i64,
    /// Stop when the bracket is narrower than this (%), in [0.001, 50] (named apart from the CUDA
    /// device's --precision f32|f16|tf32, which `capacity` takes too).
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    search_precision: f64,
    /// Directory for capacity.json and capacity.svg (p99 against throughput, every probe, each
    /// capacity marked); with --shard, the shard's shard.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Search only shard I of N of the policies, from 0, into --out DIR/shard.json (`lazybatch
    /// merge` assembles the shards): I/N, `slurm` (a job array's SLURM_ARRAY_TASK_ID less
    /// SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT) or `k8s/N` (JOB_COMPLETION_INDEX, of N).
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Instead of the highest rate, the fewest replicas (behind --router) that serve this
    /// rate (req/s) within the bound: a search over the count, up to 1024 (model devices).
    #[arg(long, allow_negative_numbers = true, value_name = "RATE")]
    target_rps: Option<f64>,
    /// Print a JSON array (one object per policy) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Searches every policy's capacity and reports it.
pub(super) fn run(mut a: CapacityArgs, progress: Mode) -> Result<()> {
    let model = a.model.load()?;
    // a probe needs enough requests to fill a queue, and stays quick on the NPU model
    a.serve.requests.get_or_insert(5_000);
    // the search tries several replicas: its router is read here, not as one run's
    let mut router = lazybatch::run::spec::Router::RoundRobin;
    if let Some(rate) = a.target_rps {
        if a.serve.replicas.is_some() {
            anyhow::bail!("--target-rps searches the number of replicas: drop --replicas");
        }
        if a.shard.is_some() {
            anyhow::bail!("--target-rps searches in one process: drop --shard");
        }
        super::check_rate("--target-rps", rate)?;
        if matches!(a.dev.device.as_str(), "cpu" | "cuda") {
            anyhow::bail!("--target-rps runs replicas in the simulator: use --device npu or a saved --profile table");
        }
        if let Some(r) = a.serve.router.take() {
            router = lazybatch::run::spec::Router::parse(&r)?;
        }
    }
    let sv = serve_args(&a.serve, &model, false)?;
    let seeds = in_range("--seeds", a.seeds, 1, 1000)? as u64;
    let floor = 100.0 * capacity::MIN_PRECISION;
    if !(a.search_precision >= floor && a.search_precision <= 50.0) {
        anyhow::bail!(
            "invalid --search-precision: must be in [{floor}, 50] %, got {}",
            a.search_precision
        );
    }
    let bound = match (a.p99_ms, a.violations, a.ttft_p99_ms, a.tpot_p99_ms) {
        (Some(x), None, None, None) => Bound::P99Ms(x),
        (None, Some(v), None, None) => Bound::Violations(v / 100.0),
        (None, None, Some(x), None) => Bound::TtftP99Ms(x),
        (None, None, None, Some(x)) => Bound::TpotP99Ms(x),
        (None, None, Some(ttft_ms), Some(tpot_ms)) => Bound::TokenSlo { ttft_ms, tpot_ms },
        (None, None, None, None) => anyhow::bail!(
            "give one of --p99-ms, --violations, --ttft-p99-ms or --tpot-p99-ms (or both of the last two)"
        ),
        (p99, violations, ttft, tpot) => {
            let given: Vec<&str> = [
                (p99.is_some(), "--p99-ms"),
                (violations.is_some(), "--violations"),
                (ttft.is_some(), "--ttft-p99-ms"),
                (tpot.is_some(), "--tpot-p99-ms"),
            ]
            .into_iter()
            .filter_map(|(on, flag)| on.then_some(flag))
            .collect();
            anyhow::bail!(
                "{} cannot be used with {}: give one of --p99-ms, --violations, --ttft-p99-ms or \
                 --tpot-p99-ms (or both of the last two)",
                given[0],
                given[1..].join(" and ")
            )
        }
    };
    if bound.on_tokens() {
        if !model.is_seq2seq() {
            anyhow::bail!(
                "--ttft-p99-ms and --tpot-p99-ms bound a model with a decoder; '{}' has none",
                model.name
            );
        }
        // said before any device is opened (a token bound does not need the single-input
        // latency to be checked)
        capacity::check(bound, 0.0, a.serve.sla_ms())?;
    }
    if bound.on_tokens() && a.policies.iter().any(|p| p == "auto") {
        eprintln!(
            "under a token bound `auto` is searched as `{}`: it scores its candidates on TTFT and TPOT p99 (docs/policies.md)",
            lazybatch::policy::FOR_TOKENS
        );
        for p in &mut a.policies {
            *p = lazybatch::policy::under_token_bound(p).to_string();
        }
    }
    let shard = Shard::from_flag(a.shard.as_deref(), a.out.as_deref())?;
    let all = specs_for(&a.policies, sv.max_batch(), &model)?;
    let rows_total = all.len();
    // every search's settings (the policy with the run's SLA, batch, arrivals, classes, …)
    let sweep_text = format!(
        "{:?}",
        all.iter()
            .map(|p| sv.spec(p.clone(), 1.0, 1))
            .collect::<Vec<RunSpec>>()
    );
    let owned: Vec<usize> = (0..rows_total)
        .filter(|&r| shard.is_none_or(|s| s.owns(r)))
        .collect();
    let specs: Vec<_> = owned.iter().map(|&r| all[r].clone()).collect();
    let bench = open_bench(model, &a.dev, &sv, progress)?;
    // under a token bound, the SLA-aware policies' deadlines come from it unless --sla-ms says
    let mut sv = sv;
    let derived = match (a.serve.sla_ms, &sv.spec.colocated) {
        (None, None) => capacity::token_sla_ms(&bench, bound),
        _ => None,
    };
    if let Some(ms) = derived {
        sv.spec.sla = lazybatch::time::Sla::from_ms(ms)?;
        eprintln!(
            "the SLA-aware policies' deadline, from the token bound: {ms:.1} ms (the first token within its bound, each later one within its own, for a request of the predictor's lengths; --sla-ms sets another)"
        );
    }
    let sla_ms = sv.spec.sla.as_ms();
    super::warn_slas_below(&bench, &sv.spec);
    let single_ms = 1e3 / bench.serial_capacity();
    capacity::check(bound, single_ms, sla_ms)?;
    let how = Search {
        bound,
        precision: a.search_precision / 100.0,
        seeds,
        lowest_share: capacity::lowest_share(bench.is_virtual()),
    };
    if !bench.is_virtual() {
        let per_probe = seeds as f64 * sv.requests() as f64 / bench.serial_capacity();
        let units = capacity::probe_time_at_most(sv.max_batch(), how.precision, how.lowest_share);
        eprintln!(
            "capacity on a real device serves every probe in real time: each {seeds} × {} requests, about {} at the serial capacity (less at higher rates; a policy that misses the bound there halves its rate down to 1/{:.0} of it, each probe longer); {} policies: up to about {}",
            sv.requests(),
            lazybatch::progress::human(per_probe),
            1.0 / how.lowest_share,
            specs.len(),
            lazybatch::progress::human(per_probe * units * specs.len() as f64)
        );
    }
    let templates: Vec<RunSpec> = specs
        .into_iter()
        .map(|policy| sv.spec(policy, 1.0, 1))
        .collect();
    if let Some(rate) = a.target_rps {
        if !bench.is_virtual() {
            anyhow::bail!("--target-rps runs replicas in the simulator: use --device npu or a saved --profile table");
        }
        let templates: Vec<RunSpec> = templates
            .into_iter()
            .map(|t| {
                Ok(RunSpec {
                    replicas: lazybatch::run::spec::Replicas::new(1, router)?,
                    ..t
                })
            })
            .collect::<lazybatch::Result<_>>()?;
        let t0 = std::time::Instant::now();
        let needs = need_all(&bench, &templates, rate, &how, progress)?;
        let head = format!(
            "{} on {}: replicas behind {} for {rate} req/s at {}; {} requests per probe, {seeds} seed(s), single-input latency {single_ms:.3} ms (one server's serial capacity {:.1} req/s)",
            bench.model.name,
            bench.description(),
            router.name(),
            bound_text(bound, sla_ms),
            sv.requests(),
            bench.serial_capacity()
        );
        let search = Searched {
            model: &bench.model.name,
            device: &bench.description(),
            router: router.name(),
            target_rps: rate,
            bound: bound_json(bound, sla_ms),
            head: &head,
            wall: t0.elapsed().as_secs_f64(),
        };
        return search.report(&needs, a.out.as_deref(), a.json);
    }
    let t0 = std::time::Instant::now();
    let caps = capacity::search_all(&bench, &templates, &how, progress)?;
    let wall = t0.elapsed().as_secs_f64();
    let serial = bench.serial_capacity();
    let device = bench.description();
    let name = bench.model.name.clone();
    let behind = match sv.spec.replicas.count() {
        1 => String::new(),
        n => format!(
            " of {n} replicas behind {}",
            sv.spec.replicas.router().name()
        ),
    };
    let head = format!(
        "{name} on {device}: capacity{behind} at {}; {} requests per probe, {seeds} seed(s), precision {}%, single-input latency {single_ms:.3} ms (one server's serial capacity {serial:.1} req/s)",
        bound_text(bound, sla_ms),
        sv.requests(),
        a.search_precision
    );
    let title = format!("{name} on {device}: {}", bound_text(bound, sla_ms));
    let rows: Vec<(Capacity, serde_json::Value)> = caps
        .into_iter()
        .map(|c| {
            let j = cap_json(&name, &device, bound, sla_ms, &c);
            (c, j)
        })
        .collect();
    let Some(s) = shard else {
        let report = Report {
            header: &head,
            title: &title,
            bound,
            bound_words: &bound_text(bound, sla_ms),
            serial,
            wall,
        };
        return report.write(a.out.as_deref(), &rows, a.json);
    };
    let file = ShardFile {
        sweep: shard::sweep(
            &format!("capacity\n{sweep_text}"),
            &format!("{head}\n{bound:?} sla {} coverage {}", sla_ms, sv.coverage),
            &bench.profile,
        ),
        shard: s.index,
        of: s.count,
        rows: rows_total,
        runs: rows_total,
        header: head.clone(),
        model: name,
        title,
        wall_s: wall,
        entries: Vec::new(),
        search: Some(CapacitySearch {
            bound,
            bound_words: bound_text(bound, sla_ms),
            serial,
        }),
        capacities: owned
            .iter()
            .zip(rows)
            .map(|(&row, (capacity, json))| CapacityRow {
                row,
                capacity,
                json,
            })
            .collect(),
        reproduce: None,
    };
    let path = file.save(a.out.as_deref().unwrap_or(Path::new(".")))?;
    emit(&format!(
        "{head}\n(shard {} of {}: {} of {rows_total} policies searched in {wall:.2} s wall into {}; `lazybatch merge` assembles the shards)\n",
        s.index,
        s.count,
        owned.len(),
        path.display()
    ))
}

/// What `capacity` reports of its searches: [`Report::write`].
pub(super) struct Report<'a> {
    /// The first line: the bench and the search's settings.
    pub header: &'a str,
    /// The picture's title.
    pub title: &'a str,
    /// The bound.
    pub bound: Bound,
    /// The bound in words.
    pub bound_words: &'a str,
    /// The serial capacity (req/s), for the `× serial` column.
    pub serial: f64,
    /// Wall seconds the searches took.
    pub wall: f64,
}

impl Report<'_> {
    /// With `out`, capacity.json and capacity.svg; then the JSON array or the table. Fails
    /// when no policy has a capacity.
    pub(super) fn write(
        &self,
        out: Option<&Path>,
        rows: &[(Capacity, serde_json::Value)],
        json: bool,
    ) -> Result<()> {
        let caps: Vec<Capacity> = rows.iter().map(|(c, _)| c.clone()).collect();
        if caps.iter().all(|c| c.capacity_rps.is_none()) {
            let why: Vec<String> = caps
                .iter()
                .map(|c| format!("{}: {}", c.policy, c.note.clone().unwrap_or_default()))
                .collect();
            anyhow::bail!(
                "no policy has a capacity at {}: {}",
                self.bound_words,
                why.join("; ")
            );
        }
        let arr: Vec<&serde_json::Value> = rows.iter().map(|(_, j)| j).collect();
        if let Some(dir) = out {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(
                dir.join("capacity.json"),
                serde_json::to_string_pretty(&arr)? + "\n",
            )?;
            capacity::write_figure(&dir.join("capacity.svg"), self.title, &caps, self.bound)?;
        }
        if json {
            return emit(&(serde_json::to_string_pretty(&arr)? + "\n"));
        }
        let (serial, wall) = (self.serial, self.wall);
        let mut o = String::new();
        out!(o, "{}", self.header);
        // the policy column as wide as its longest name
        let w = caps.iter().map(|c| c.policy.len()).fold(14, usize::max);
        // a token bound's own figure in a column of its own, beside the end-to-end latency
        type Of = fn(&lazybatch::metrics::Stats) -> f64;
        let ttft: (&str, Of) = ("TTFT p99", |st| Bound::TtftP99Ms(0.0).value(st));
        let tpot: (&str, Of) = ("TPOT p99", |st| Bound::TpotP99Ms(0.0).value(st));
        let token: Vec<(&str, Of)> = match self.bound {
            Bound::TtftP99Ms(_) => vec![ttft],
            Bound::TpotP99Ms(_) => vec![tpot],
            Bound::TokenSlo { .. } => vec![ttft, tpot],
            Bound::P99Ms(_) | Bound::Violations(_) => Vec::new(),
        };
        outp!(
            o,
            "{:<w$} {:>12} {:>9} {:>10} {:>10}",
            "policy",
            "capacity/s",
            "× serial",
            "mean (ms)",
            "p99 (ms)"
        );
        for (t, _) in &token {
            outp!(o, " {t:>10}");
        }
        out!(o, " {:>9} {:>10} {:>7}", "SLA viol", "mean batch", "probes");
        for c in &caps {
            let st = &c.at;
            match c.capacity_rps {
                Some(cap) => {
                    outp!(
                        o,
                        "{:<w$} {:>12.1} {:>9.2} {:>10.3} {:>10.3}",
                        c.policy,
                        cap,
                        cap / serial,
                        st.latency_ms.mean,
                        st.latency_ms.p99
                    );
                    for (_, of) in &token {
                        outp!(o, " {:>10.3}", of(st));
                    }
                    out!(
                        o,
                        " {:>8.2}% {:>10.2} {:>7}",
                        100.0 * st.sla_violation_rate,
                        st.mean_batch_size,
                        c.probes.len()
                    );
                }
                None => {
                    outp!(
                        o,
                        "{:<w$} {:>12} {:>9} {:>10} {:>10}",
                        c.policy,
                        "none",
                        "–",
                        "–",
                        "–"
                    );
                    for _ in &token {
                        outp!(o, " {:>10}", "–");
                    }
                    out!(o, " {:>9} {:>10} {:>7}", "–", "–", c.probes.len());
                }
            }
        }
        for c in caps.iter().filter(|c| c.capacity_rps.is_none()) {
            out!(o, "  {}: {}", c.policy, c.note.as_deref().unwrap_or(""));
        }
        out!(
            o,
            "({} probes in {:.2} s wall; each probe's figures are the mean over its seeds)",
            caps.iter().map(|c| c.probes.len()).sum::<usize>(),
            wall
        );
        emit(&o)
    }
}

/// The bound in words.
pub(super) fn bound_text(bound: Bound, sla_ms: f64) -> String {
    match bound {
        Bound::P99Ms(x) => format!("p99 ≤ {x} ms"),
        Bound::Violations(v) => format!("SLA violations ≤ {}% at {sla_ms} ms", 100.0 * v),
        Bound::TtftP99Ms(x) => format!("p99 time to first token ≤ {x} ms"),
        Bound::TpotP99Ms(x) => format!("p99 time per output token ≤ {x} ms"),
        Bound::TokenSlo { ttft_ms, tpot_ms } => {
            format!("p99 time to first token ≤ {ttft_ms} ms and per output token ≤ {tpot_ms} ms")
        }
    }
}

/// The bound as JSON.
pub(super) fn bound_json(bound: Bound, sla_ms: f64) -> serde_json::Value {
    match bound {
        Bound::P99Ms(x) => json!({"p99_ms": x}),
        Bound::Violations(v) => json!({"violations": v, "sla_ms": sla_ms}),
        Bound::TtftP99Ms(x) => json!({"ttft_p99_ms": x}),
        Bound::TpotP99Ms(x) => json!({"tpot_p99_ms": x}),
        Bound::TokenSlo { ttft_ms, tpot_ms } => {
            json!({"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms})
        }
    }
}

/// One policy's capacity and its probes, as JSON.
fn cap_json(
    model: &str,
    device: &str,
    bound: Bound,
    sla_ms: f64,
    c: &Capacity,
) -> serde_json::Value {
    let st = &c.at;
    let bound_words = bound_json(bound, sla_ms);
    json!({
        "model": model,
        "device": device,
        "policy": c.policy,
        "bound": bound_words,
        "capacity_rps": c.capacity_rps,
        "note": c.note,
        "at_capacity": tokens_too(json!({
            "latency_ms": st.latency_ms,
            "throughput_rps": st.throughput_rps,
            "sla_violation_rate": st.sla_violation_rate,
            "mean_batch_size": st.mean_batch_size,
            "rejected": st.rejected,
        }), st, |l| json!(l)),
        "probes": c.probes.iter().map(|p| tokens_too(json!({
            "rate_rps": p.rate,
            "ok": p.ok,
            "mean_ms": p.stats.latency_ms.mean,
            "p99_ms": p.stats.latency_ms.p99,
            "throughput_rps": p.stats.throughput_rps,
            "sla_violation_rate": p.stats.sla_violation_rate,
            "rejected": p.stats.rejected,
        }), &p.stats, |l| json!(l.p99))).collect::<Vec<_>>(),
    })
}

/// `v` with a decoder model's token figures (`ttft_ms`, `tpot_ms`, each as `show` writes it,
/// and `tokens_per_s`), each that the run has.
fn tokens_too(
    mut v: serde_json::Value,
    st: &lazybatch::metrics::Stats,
    show: impl Fn(&lazybatch::metrics::LatencyMs) -> serde_json::Value,
) -> serde_json::Value {
    if let Some(t) = &st.ttft_ms {
        v["ttft_ms"] = show(t);
    }
    if let Some(t) = &st.tpot_ms {
        v["tpot_ms"] = show(t);
    }
    if let Some(k) = st.tokens_per_s {
        v["tokens_per_s"] = json!(k);
    }
    v
}
