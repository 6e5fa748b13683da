//! `lazybatch compare`: a grid of policies × rates × seeds on one bench — the runs through the
//! same runner as `reproduce` ([`run_all`]), averaged over seeds ([`mean_stats`]) — as a table,
//! JSON, `.hgrm` files and SVG pictures; with `--shard I/N`, one shard of the grid's rows into a
//! `shard.json` that `lazybatch merge` assembles (`merge.rs`).

use super::serve::{run_json, RunId};
use super::{
    check_load, check_rate, emit, in_range, open_bench, serve_args, specs_for, DeviceArgs,
    ModelArgs, Serve, ServeArgs,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use lazybatch::graph::Model;
use lazybatch::metrics::{self, Stats};
use lazybatch::policy::Spec;
use lazybatch::progress::Mode;
use lazybatch::report::spectrum;
use lazybatch::run::grid::{mean_stats, run_all, Keep, RunOut};
use lazybatch::run::shard::{self, Shard, ShardFile, ShardRow};
use lazybatch::run::{RunSpec, Testbed};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The policies `compare` runs when none are given.
const DEFAULT_POLICIES: &[&str] = &[
    "serial", "graph:0", "graph:5", "graph:25", "graph:50", "graph:95", "lazy", "oracle",
];

#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Arrival rates (requests/s), comma-separated [default: 16,250,1000].
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    rates: Option<Vec<f64>>,
    /// Rates as multiples of the serial capacity instead of --rates.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    load: Option<Vec<f64>>,
    // the help lists every policy of the registry
    #[arg(long, value_delimiter = ',', help = super::policies_help(
        "Policies, comma-separated, of",
        " [default: serial,graph:0,graph:5,graph:25,graph:50,graph:95,lazy,oracle; co-located models: those of these that serve several models]."
    ))]
    policies: Option<Vec<String>>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Seeds per (policy, rate): 1..=K.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seeds: i64,
    /// Directory for one .hgrm per policy and rate plus compare.json (with --shard: the
    /// shard's shard.json).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run only shard I of N of the grid's (policy, rate) rows, from 0, into --out DIR/shard.json
    /// (`lazybatch merge` assembles the shards): I/N, `slurm` (a job array's
    /// SLURM_ARRAY_TASK_ID less SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT) or `k8s/N` (an
    /// Indexed Job's JOB_COMPLETION_INDEX, of N).
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// On a real device, serve the whole grid a second time (the same arrivals) and report
    /// how far the two passes differ, each row's `run_to_run` mean and p99: the device's own
    /// repeatability, beside every figure it measured (docs/validate.md).
    #[arg(long)]
    repeat: bool,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

/// One (policy, rate) of the grid, over its seeds.
pub(super) struct Row {
    pub policy: String,
    pub rate: f64,
    /// Means over the seeds.
    pub stats: Stats,
    /// The JSON object (with the seeds' 25th/75th percentiles).
    pub json: serde_json::Value,
    /// Co-located models: each model's mean latency, p99, throughput and violation rate.
    pub per_model: Vec<(String, [f64; 4])>,
    /// The first seed's latency histogram (with --out).
    pub histogram: Option<Histogram<u64>>,
    /// With `--repeat`: the second pass's mean and p99 against the first's, relative
    /// ((second − first) / first, means over the seeds).
    pub run_to_run: Option<(f64, f64)>,
}

/// Runs the grid and reports it.
pub(super) fn compare(a: CompareArgs, progress: Mode) -> Result<()> {
    let model = a.model.load()?;
    let sv = serve_args(&a.serve, &model, false)?;
    let seeds = in_range("--seeds", a.seeds, 1, 1000)? as u64;
    let specs = policies(&a, &model, &sv)?;
    if a.load.is_some() && a.rates.is_some() {
        bail!("give --rates or --load, not both");
    }
    let given_rates = a.rates.clone().unwrap_or_else(|| vec![16.0, 250.0, 1000.0]);
    if let Some(ls) = &a.load {
        for &l in ls {
            check_load("--load", l)?;
        }
    } else {
        for &r in &given_rates {
            check_rate("--rates", r)?;
        }
    }
    if sv.spec.colocated.is_some() && a.load.is_some() {
        bail!("co-located models take total --rates (split by --shares), not --load");
    }
    let bench = open_bench(model, &a.dev, &sv, progress)?;
    super::warn_slas_below(&bench, &sv.spec);
    let rates: Vec<f64> = match &a.load {
        Some(ls) => ls
            .iter()
            .map(|&l| check_rate("--load × serial capacity", l * bench.serial_capacity()))
            .collect::<Result<_>>()?,
        None => given_rates,
    };
    if a.repeat && bench.is_virtual() {
        bail!("--repeat measures a real device's run-to-run spread: a simulated device (--device npu or a profile table) repeats itself exactly");
    }
    let shard = Shard::from_flag(a.shard.as_deref(), a.out.as_deref())?;
    let all = grid(&specs, &rates, seeds, &sv);
    // a row is one (policy, rate) with all its seeds: a shard runs whole rows
    let rows_total = all.len() / seeds as usize;
    let owned: Vec<usize> = (0..rows_total)
        .filter(|&r| shard.is_none_or(|s| s.owns(r)))
        .collect();
    let cfgs: Vec<RunSpec> = owned
        .iter()
        .flat_map(|&r| {
            all[r * seeds as usize..(r + 1) * seeds as usize]
                .iter()
                .cloned()
        })
        .collect();
    let want_hgrm = a.out.is_some();
    let t0 = std::time::Instant::now();
    // the first seed's histogram of every (policy, rate), for the .hgrm files and pictures
    let keep = |i: usize| Keep {
        histogram: want_hgrm && cfgs[i].seed == 1,
        latencies: false,
    };
    // --repeat: the whole grid again after the first pass, so that both meet the same
    // machine over the same span
    let passes: Vec<RunSpec> = if a.repeat {
        cfgs.iter().chain(&cfgs).cloned().collect()
    } else {
        cfgs.clone()
    };
    let keep_pass = |i: usize| keep(i % cfgs.len());
    let mut results = run_all(&bench, &passes, keep_pass, progress, "compare")?;
    let again = a.repeat.then(|| results.split_off(cfgs.len()));
    let wall = t0.elapsed().as_secs_f64();
    let mut rows = aggregate(&bench, &cfgs, results, seeds, a.serve.sla_ms(), wall);
    if let Some(again) = again {
        for (row, chunk) in rows.iter_mut().zip(again.chunks(seeds as usize)) {
            let st = mean_stats(&chunk.iter().map(|c| &c.stats).collect::<Vec<_>>());
            let rel = |first: f64, second: f64| lazybatch::run::validate::error(first, second);
            let r2r = (
                rel(row.stats.latency_ms.mean, st.latency_ms.mean),
                rel(row.stats.latency_ms.p99, st.latency_ms.p99),
            );
            row.json["run_to_run"] = json!({"mean": r2r.0, "p99": r2r.1});
            row.json["repeat"] =
                json!({"mean_latency_ms": st.latency_ms.mean, "p99_ms": st.latency_ms.p99});
            row.run_to_run = Some(r2r);
        }
    }
    let head = header(&bench, &sv, seeds, a.serve.sla_ms());
    let title = format!("{} on {}", bench.model.name, bench.description());
    if let (Some(s), Some(dir)) = (shard, &a.out) {
        let file = ShardFile {
            sweep: shard::sweep(
                &format!("compare\n{all:?}"),
                &format!("{head}\ncoverage {}", sv.coverage),
                &bench.profile,
            ),
            shard: s.index,
            of: s.count,
            rows: rows_total,
            runs: all.len(),
            header: head.clone(),
            model: bench.model.name.clone(),
            title,
            wall_s: wall,
            entries: owned
                .iter()
                .zip(&rows)
                .map(|(&row, r)| ShardRow {
                    row,
                    policy: r.policy.clone(),
                    rate: r.rate,
                    stats: r.stats.clone(),
                    json: r.json.clone(),
                    per_model: r.per_model.clone(),
                    histogram: r.histogram.as_ref().map(shard::buckets),
                })
                .collect(),
            capacities: Vec::new(),
            search: None,
            reproduce: None,
        };
        file.save(dir)?;
    } else if let Some(dir) = &a.out {
        write_out(dir, &bench.model.name, &title, &rows)?;
    }
    if a.json {
        let arr: Vec<&serde_json::Value> = rows.iter().map(|r| &r.json).collect();
        return emit(&(serde_json::to_string_pretty(&arr)? + "\n"));
    }
    let mut o = String::new();
    out!(o, "{head}");
    table(&mut o, &rows);
    match shard {
        Some(s) => out!(
            o,
            "(shard {} of {}: {} of {} rows, {} runs in {:.2} s wall; `lazybatch merge` assembles the shards)",
            s.index,
            s.count,
            owned.len(),
            rows_total,
            cfgs.len(),
            wall
        ),
        None => out!(o, "({} runs in {:.2} s wall)", passes.len(), wall),
    }
    if a.repeat {
        out!(
            o,
            "(run to run: the grid served a second time on the same arrivals; the columns are its mean and p99 against the first pass's, the device's own spread beside its figures)"
        );
    }
    emit(&o)
}

/// The output's first line: the bench and the run settings.
fn header(bench: &Testbed, sv: &Serve, seeds: u64, sla_ms: f64) -> String {
    let mut o = String::new();
    outp!(
        o,
        "{} on {}{}: {} requests per run{}, {} seed(s), {}, max batch {}, single-input latency {:.3} ms",
        bench.model.name,
        bench.description(),
        match sv.spec.replicas.count() {
            1 => String::new(),
            n => format!(" × {n} replicas behind {}", sv.spec.replicas.router().name()),
        },
        sv.requests(),
        match sv.spec.arrivals {
            lazybatch::traffic::Process::Poisson => String::new(),
            p => format!(" ({p} arrivals)"),
        },
        seeds,
        match &sv.spec.colocated {
            Some(c) => format!(
                "SLAs {} ms (each model's, in order)",
                c.slas()
                    .iter()
                    .map(|s| s.as_ms().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("SLA {sla_ms} ms"),
        },
        sv.max_batch(),
        1e3 / bench.serial_capacity()
    );
    o
}

/// The policies to run, checked for the model: the given ones, or the defaults that serve it.
fn policies(a: &CompareArgs, model: &Model, sv: &Serve) -> Result<Vec<Spec>> {
    let names: Vec<String> = match &a.policies {
        Some(p) => p.clone(),
        None => DEFAULT_POLICIES
            .iter()
            .filter(|p| Spec::parse(p, sv.max_batch()).is_ok_and(|s| s.check_for(model).is_ok()))
            .map(|p| p.to_string())
            .collect(),
    };
    specs_for(&names, sv.max_batch(), model)
}

/// Every run of the grid: policies × rates × seeds 1..=`seeds`, in that order.
fn grid(specs: &[Spec], rates: &[f64], seeds: u64, sv: &Serve) -> Vec<RunSpec> {
    let mut cfgs = Vec::new();
    for p in specs {
        for &r in rates {
            for s in 1..=seeds {
                cfgs.push(sv.spec(p.clone(), r, s));
            }
        }
    }
    cfgs
}

/// Each (policy, rate) averaged over its seeds.
fn aggregate(
    bench: &Testbed,
    cfgs: &[RunSpec],
    results: Vec<RunOut>,
    seeds: u64,
    sla_ms: f64,
    wall: f64,
) -> Vec<Row> {
    let name = &bench.model.name;
    let device = bench.description();
    let mut rows = Vec::new();
    for (gi, chunk) in results.chunks(seeds as usize).enumerate() {
        let c0 = &cfgs[gi * seeds as usize];
        let (p, r) = (&c0.policy.text, c0.rate);
        let st = mean_stats(&chunk.iter().map(|c| &c.stats).collect::<Vec<_>>());
        let spread = |f: &dyn Fn(&Stats) -> f64| {
            metrics::spread(chunk.iter().map(|c| f(&c.stats)).collect())
        };
        let id = RunId {
            model: name,
            device: &device,
            policy: p,
            rate: r,
            seed: 1,
            sla_ms,
            traced: false,
            arrivals: c0.arrivals,
            classes: c0.classes.as_ref().map(ToString::to_string),
            slas: c0
                .colocated
                .as_ref()
                .map(|c| c.slas().iter().map(|s| s.as_ms()).collect()),
        };
        let mut v = run_json(&id, &st, wall);
        let (_, lat25, lat75) = spread(&|s| s.latency_ms.mean);
        let (_, tp25, tp75) = spread(&|s| s.throughput_rps);
        v["seeds"] = json!(seeds);
        if c0.replicas.count() > 1 {
            v["replicas"] = json!(c0.replicas.count());
            v["router"] = json!(c0.replicas.router().name());
        }
        v["mean_latency_ms_p25"] = json!(lat25);
        v["mean_latency_ms_p75"] = json!(lat75);
        v["throughput_rps_p25"] = json!(tp25);
        v["throughput_rps_p75"] = json!(tp75);
        let per = per_model(bench, chunk);
        // the first seed's arrivals, for a replay to check it draws the same (one model)
        if per.is_empty() {
            if let Ok(t) = bench.traffic(c0) {
                let drawn: Vec<_> = t.arrivals.collect();
                v["arrivals_fingerprint"] = json!(lazybatch::run::validate::fingerprint(&drawn));
            }
        }
        // which rule a LazyB policy's refusals followed, for a replay of this record
        v["lazy_rule"] = json!(lazybatch::run::validate::LAZY_RULE);
        if !per.is_empty() {
            v["per_model"] = json!(per
                .iter()
                .map(|(m, x)| json!({"model": m, "mean_latency_ms": x[0], "p99_ms": x[1], "throughput_rps": x[2], "sla_violation_rate": x[3]}))
                .collect::<Vec<_>>());
        }
        rows.push(Row {
            policy: p.clone(),
            rate: r,
            stats: st,
            json: v,
            per_model: per,
            histogram: chunk[0].histogram.clone(),
            run_to_run: None,
        });
    }
    rows
}

/// Co-located models: each model's figures, averaged over the seeds (empty for one model).
fn per_model(bench: &Testbed, chunk: &[RunOut]) -> Vec<(String, [f64; 4])> {
    (0..chunk[0].parts.len())
        .map(|k| {
            let avg = |f: &dyn Fn(&Stats) -> f64| {
                chunk.iter().map(|c| f(&c.parts[k])).sum::<f64>() / chunk.len() as f64
            };
            (
                bench.model.parts[k].name.clone(),
                [
                    avg(&|s| s.latency_ms.mean),
                    avg(&|s| s.latency_ms.p99),
                    avg(&|s| s.throughput_rps),
                    avg(&|s| s.sla_violation_rate),
                ],
            )
        })
        .collect()
}

/// `--out DIR`: one `.hgrm` per policy and rate, `compare.json`, and the pictures (each
/// policy's percentile spectrum per rate, mean and p99 against rate) titled `title`.
pub(super) fn write_out(dir: &Path, name: &str, title: &str, rows: &[Row]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // the name starts file names: never a path (a tampered shard.json's model may be anything)
    let name = &lazybatch::files::file_stem(name);
    let mut points = Vec::new();
    for row in rows {
        let Some(h) = &row.histogram else {
            continue;
        };
        let path = dir.join(format!(
            "{}_{}_{}rps.hgrm",
            name,
            row.policy.replace(':', "-"),
            row.rate.round()
        ));
        let mut f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        metrics::write_hgrm(h, &mut f)?;
        points.push(spectrum::Point {
            policy: &row.policy,
            rate: row.rate,
            histogram: h,
            mean_ms: row.stats.latency_ms.mean,
            p99_ms: row.stats.latency_ms.p99,
        });
    }
    let arr: Vec<&serde_json::Value> = rows.iter().map(|r| &r.json).collect();
    std::fs::write(
        dir.join("compare.json"),
        serde_json::to_string_pretty(&arr)?,
    )?;
    spectrum::write(dir, name, title, &points)?;
    Ok(())
}

/// The table: a row per policy and rate, and under it each co-located model's figures.
pub(super) fn table(o: &mut String, rows: &[Row]) {
    // the policy column as wide as its longest name
    let w = rows.iter().map(|r| r.policy.len()).fold(12, usize::max);
    let repeated = rows.iter().any(|r| r.run_to_run.is_some());
    outp!(
        o,
        "{:<w$} {:>9} {:>11} {:>11} {:>13} {:>9} {:>10}",
        "policy",
        "rate/s",
        "mean (ms)",
        "p99 (ms)",
        "throughput/s",
        "SLA viol",
        "mean batch"
    );
    if repeated {
        outp!(o, " {:>12} {:>11}", "r2r mean", "r2r p99");
    }
    out!(o, "");
    for r in rows {
        let st = &r.stats;
        outp!(
            o,
            "{:<w$} {:>9.1} {:>11.3} {:>11.3} {:>13.1} {:>8.2}% {:>10.2}",
            r.policy,
            r.rate,
            st.latency_ms.mean,
            st.latency_ms.p99,
            st.throughput_rps,
            100.0 * st.sla_violation_rate,
            st.mean_batch_size
        );
        if let Some((m, p)) = r.run_to_run {
            outp!(o, " {:>11.1}% {:>10.1}%", 100.0 * m, 100.0 * p);
        }
        out!(o, "");
        for (m, x) in &r.per_model {
            // under the policy column, aligned with the row above (the full names, with any
            // reduced-size suffix, are in the header)
            let label: String = m.split('@').next().unwrap_or(m).chars().take(20).collect();
            let lw = w + 8;
            out!(
                o,
                "  {:<lw$} {:>11.3} {:>11.3} {:>13.1} {:>8.2}%",
                label,
                x[0],
                x[1],
                x[2],
                100.0 * x[3]
            );
        }
    }
}
