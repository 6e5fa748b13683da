//! `lazybatch run` and `lazybatch compare`: serve traffic under one policy, or a grid of
//! policies × rates × seeds, on any device, and print or save what happened.

use super::{
    check_rate, colocation, emit, open_bench, positive, serve_args, DeviceArgs, ModelArgs,
    ServeArgs,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::bench::RunConfig;
use lazybatch::metrics::{self, Stats};
use lazybatch::policy::Spec;
use lazybatch::runs::{mean_stats, run_all, Keep};
use lazybatch::traffic;
use serde_json::json;
use std::path::PathBuf;

/// The policies `compare` runs when none are given.
const DEFAULT_POLICIES: &[&str] = &[
    "serial", "graph:0", "graph:5", "graph:25", "graph:50", "graph:95", "lazy", "oracle",
];

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Policy: serial, graph:W[:B], lazy, oracle.
    #[arg(long)]
    policy: String,
    /// Arrival rate in requests/s.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "load")]
    rate: Option<f64>,
    /// Arrival rate as a multiple of the serial capacity (1 / single-input latency).
    #[arg(long, allow_negative_numbers = true)]
    load: Option<f64>,
    /// Arrival trace (one `TIME_MS [ENC DEC]` per line) instead of Poisson traffic.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "load"])]
    trace: Option<PathBuf>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Traffic seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the latency histogram (HdrHistogram .hgrm text, ms) to FILE.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Arrival rates (requests/s), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "16,250,1000"
    )]
    rates: Vec<f64>,
    /// Rates as multiples of the serial capacity instead of --rates.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    load: Option<Vec<f64>>,
    /// Policies, comma-separated [default: serial,graph:0,graph:5,graph:25,graph:50,graph:95,
    /// lazy,oracle; co-located models: those that serve several models].
    #[arg(long, value_delimiter = ',')]
    policies: Option<Vec<String>>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Seeds per (policy, rate): 1..=K.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seeds: i64,
    /// Directory for one .hgrm per policy and rate plus compare.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

/// What identifies a run in the JSON.
struct RunId<'a> {
    model: &'a str,
    device: &'a str,
    policy: &'a str,
    rate: f64,
    seed: u64,
    sla_ms: f64,
}

fn run_json(id: &RunId, st: &Stats, wall_s: f64) -> serde_json::Value {
    json!({
        "model": id.model, "device": id.device, "policy": id.policy, "rate_rps": id.rate,
        "requests": st.requests, "completed": st.completed, "rejected": st.rejected,
        "seed": id.seed, "sla_ms": id.sla_ms, "latency_ms": st.latency_ms,
        "throughput_rps": st.throughput_rps, "sla_violation_rate": st.sla_violation_rate,
        "mean_batch_size": st.mean_batch_size, "preemptions": st.preemptions, "merges": st.merges,
        "cross_step_executions": st.cross_step_executions,
        "by_class": st.by_class, "wall_s": wall_s,
    })
}

/// One run: Poisson (`--rate`, `--load`) or traced traffic under one policy.
pub(super) fn run(a: RunArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let sv = serve_args(&a.serve)?;
    let spec = Spec::parse(&a.policy, sv.max_batch)?;
    spec.check_for(&model)?;
    let trace = match &a.trace {
        Some(p) => Some(traffic::load_trace(p, &model, a.seed)?),
        None => None,
    };
    if let (Some(l), true) = (a.load, a.rate.is_none()) {
        check_rate("--load", l)?;
    } else if let Some(r) = a.rate {
        check_rate("--rate", r)?;
    } else if trace.is_none() {
        bail!("give one of --rate R, --load X or --trace FILE");
    }
    let colo = colocation(&model, &a.serve)?;
    if colo.is_some() && (a.load.is_some() || trace.is_some()) {
        bail!("co-located models take a total --rate (split by --shares), not --load or --trace");
    }
    let mut bench = open_bench(model, &a.dev, &sv)?;
    let rate = match (a.rate, a.load) {
        (Some(r), _) => r,
        (None, Some(l)) => l * bench.serial_capacity(),
        (None, None) => 0.0,
    };
    let cfg = RunConfig {
        policy: spec,
        rate,
        requests: sv.requests,
        sla: sv.sla,
        seed: a.seed,
        max_batch: sv.max_batch,
        coverage: sv.coverage,
    };
    let arrivals = match (trace, &colo) {
        (Some(t), _) => t,
        (None, Some(c)) => {
            let rates: Vec<f64> = c.shares.iter().map(|s| s * rate).collect();
            bench.arrivals(&cfg, Some((&rates, &c.slas)))?
        }
        (None, None) => bench.arrivals(&cfg, None)?,
    };
    let t0 = std::time::Instant::now();
    let (st, out) = bench.serve(&cfg, arrivals)?;
    let wall = t0.elapsed().as_secs_f64();
    let per_model: Vec<(String, Stats)> = if colo.is_some() {
        let parts = &bench.model.parts;
        let names = parts.iter().map(|p| p.name.clone());
        names
            .zip(metrics::summarize_parts(&out, parts.len())?)
            .collect()
    } else {
        Vec::new()
    };
    if let Some(p) = &a.hgrm {
        let h = metrics::histogram(&out)?;
        let mut f =
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        metrics::write_hgrm(&h, &mut f).with_context(|| format!("writing {}", p.display()))?;
    }
    let name = bench.model.name.clone();
    if a.json {
        let id = RunId {
            model: &name,
            device: &bench.description(),
            policy: &a.policy,
            rate,
            seed: a.seed,
            sla_ms: a.serve.sla_ms,
        };
        let mut v = run_json(&id, &st, wall);
        if !per_model.is_empty() {
            v["per_model"] = json!(per_model
                .iter()
                .map(|(m, s)| json!({"model": m, "completed": s.completed, "latency_ms": s.latency_ms, "throughput_rps": s.throughput_rps, "sla_violation_rate": s.sla_violation_rate}))
                .collect::<Vec<_>>());
        }
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
        return emit(&o);
    }
    out!(
        o,
        "{} on {}, policy {}, {:.1} req/s, {} requests, SLA {} ms, seed {}",
        name,
        bench.description(),
        a.policy,
        rate,
        st.requests,
        a.serve.sla_ms,
        a.seed
    );
    out!(o, "  completed {} (rejected {})", st.completed, st.rejected);
    let l = &st.latency_ms;
    out!(
        o,
        "  latency ms: mean {:.3}  p50 {:.3}  p90 {:.3}  p95 {:.3}  p99 {:.3}  max {:.3}",
        l.mean,
        l.p50,
        l.p90,
        l.p95,
        l.p99,
        l.max
    );
    out!(
        o,
        "  throughput {:.1} req/s   SLA violations {:.2}%   mean batch {:.2}",
        st.throughput_rps,
        100.0 * st.sla_violation_rate,
        st.mean_batch_size
    );
    out!(
        o,
        "  preemptions {}   merges {} ({} executions across timesteps)   ({:.3} s wall)",
        st.preemptions,
        st.merges,
        st.cross_step_executions,
        wall
    );
    if st.by_class.len() > 1 {
        let parts: Vec<String> = st
            .by_class
            .iter()
            .map(|k| {
                format!(
                    "{} {:.3} ms at mean batch {:.2}",
                    k.class, k.busy_ms_per_request, k.mean_batch
                )
            })
            .collect();
        out!(o, "  device time per request: {}", parts.join("; "));
    }
    for (m, ps) in &per_model {
        out!(
            o,
            "  {:<20} completed {:>6}  mean {:>9.3} ms  p99 {:>9.3} ms  {:>8.1} req/s  SLA violations {:>6.2}%",
            m,
            ps.completed,
            ps.latency_ms.mean,
            ps.latency_ms.p99,
            ps.throughput_rps,
            100.0 * ps.sla_violation_rate
        );
    }
    emit(&o)
}

/// Policies × rates × seeds on one bench: a table, JSON, `.hgrm` files and SVG pictures.
pub(super) fn compare(a: CompareArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let sv = serve_args(&a.serve)?;
    let seeds = positive("--seeds", a.seeds)? as u64;
    let policies: Vec<String> = match &a.policies {
        Some(p) => p.clone(),
        None => DEFAULT_POLICIES
            .iter()
            .filter(|p| Spec::parse(p, sv.max_batch).is_ok_and(|s| s.check_for(&model).is_ok()))
            .map(|p| p.to_string())
            .collect(),
    };
    let specs = policies
        .iter()
        .map(|p| {
            let s = Spec::parse(p, sv.max_batch)?;
            s.check_for(&model)?;
            Ok(s)
        })
        .collect::<lazybatch::Result<Vec<_>>>()?;
    if let Some(ls) = &a.load {
        for &l in ls {
            check_rate("--load", l)?;
        }
    } else {
        for &r in &a.rates {
            check_rate("--rates", r)?;
        }
    }
    let colo = colocation(&model, &a.serve)?;
    if colo.is_some() && a.load.is_some() {
        bail!("co-located models take total --rates (split by --shares), not --load");
    }
    let mut bench = open_bench(model, &a.dev, &sv)?;
    let rates: Vec<f64> = match &a.load {
        Some(ls) => ls.iter().map(|&l| l * bench.serial_capacity()).collect(),
        None => a.rates.clone(),
    };
    let mut cfgs = Vec::new();
    for p in &specs {
        for &r in &rates {
            for s in 1..=seeds {
                cfgs.push(RunConfig {
                    policy: p.clone(),
                    rate: r,
                    requests: sv.requests,
                    sla: sv.sla,
                    seed: s,
                    max_batch: sv.max_batch,
                    coverage: sv.coverage,
                });
            }
        }
    }
    let want_hgrm = a.out.is_some();
    let t0 = std::time::Instant::now();
    // the first seed's histogram of every (policy, rate), for the .hgrm files and pictures
    let results = run_all(&mut bench, &cfgs, colo.as_ref(), |i| Keep {
        histogram: want_hgrm && cfgs[i].seed == 1,
    })?;
    let wall = t0.elapsed().as_secs_f64();
    let name = bench.model.name.clone();
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
            model: &name,
            device: &device,
            policy: p,
            rate: r,
            seed: 1,
            sla_ms: a.serve.sla_ms,
        };
        let mut v = run_json(&id, &st, wall);
        let (_, lat25, lat75) = spread(&|s| s.latency_ms.mean);
        let (_, tp25, tp75) = spread(&|s| s.throughput_rps);
        v["seeds"] = json!(seeds);
        v["mean_latency_ms_p25"] = json!(lat25);
        v["mean_latency_ms_p75"] = json!(lat75);
        v["throughput_rps_p25"] = json!(tp25);
        v["throughput_rps_p75"] = json!(tp75);
        if let (Some(dir), Some(h)) = (&a.out, &chunk[0].histogram) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(format!(
                "{}_{}_{}rps.hgrm",
                name,
                p.replace(':', "-"),
                r.round()
            ));
            let mut f = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            metrics::write_hgrm(h, &mut f)?;
        }
        // co-located models: each model's figures, averaged over the seeds
        let nparts = chunk[0].parts.len();
        let per: Vec<(String, [f64; 4])> = (0..nparts)
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
            .collect();
        if nparts > 0 {
            v["per_model"] = json!(per
                .iter()
                .map(|(m, x)| json!({"model": m, "mean_latency_ms": x[0], "p99_ms": x[1], "throughput_rps": x[2], "sla_violation_rate": x[3]}))
                .collect::<Vec<_>>());
        }
        rows.push((p.clone(), r, st, v, per));
    }
    let arr: Vec<serde_json::Value> = rows.iter().map(|r| r.3.clone()).collect();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("compare.json"),
            serde_json::to_string_pretty(&arr)?,
        )?;
        // the pictures: each policy's percentile spectrum per rate, mean and p99 against rate
        let points: Vec<lazybatch::report::spectrum::Point> = results
            .chunks(seeds as usize)
            .zip(&rows)
            .filter_map(|(chunk, (p, r, st, _, _))| {
                chunk[0]
                    .histogram
                    .as_ref()
                    .map(|h| lazybatch::report::spectrum::Point {
                        policy: p,
                        rate: *r,
                        histogram: h,
                        mean_ms: st.latency_ms.mean,
                        p99_ms: st.latency_ms.p99,
                    })
            })
            .collect();
        let title = format!("{name} on {device}");
        lazybatch::report::spectrum::write(dir, &name, &title, &points)?;
    }
    if a.json {
        out!(o, "{}", serde_json::to_string_pretty(&arr)?);
        return emit(&o);
    }
    out!(
        o,
        "{} on {}: {} requests per run, {} seed(s), SLA {} ms, max batch {}, single-input latency {:.3} ms",
        name,
        bench.description(),
        sv.requests,
        seeds,
        a.serve.sla_ms,
        sv.max_batch,
        1e3 / bench.serial_capacity()
    );
    out!(
        o,
        "{:<12} {:>9} {:>11} {:>11} {:>13} {:>9} {:>10}",
        "policy",
        "rate/s",
        "mean (ms)",
        "p99 (ms)",
        "throughput/s",
        "SLA viol",
        "mean batch"
    );
    for (p, r, st, _, per) in &rows {
        out!(
            o,
            "{:<12} {:>9.1} {:>11.3} {:>11.3} {:>13.1} {:>8.2}% {:>10.2}",
            p,
            r,
            st.latency_ms.mean,
            st.latency_ms.p99,
            st.throughput_rps,
            100.0 * st.sla_violation_rate,
            st.mean_batch_size
        );
        for (m, x) in per {
            // under the policy column, aligned with the row above (the full names, with any
            // reduced-size suffix, are in the header)
            let label: String = m.split('@').next().unwrap_or(m).chars().take(20).collect();
            out!(
                o,
                "  {:<20} {:>11.3} {:>11.3} {:>13.1} {:>8.2}%",
                label,
                x[0],
                x[1],
                x[2],
                100.0 * x[3]
            );
        }
    }
    out!(o, "({} runs in {:.2} s wall)", cfgs.len(), wall);
    emit(&o)
}
