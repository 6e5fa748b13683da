//! `lazybatch run`: serve traffic under one policy on any device, and print or save what
//! happened.

use super::{
    check_load, check_rate, emit, open_bench, serve_args, DeviceArgs, ModelArgs, ServeArgs,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::metrics::{self, KeepRecords, Stats};
use lazybatch::policy::Spec;
use lazybatch::progress::{Mode, Progress};
use lazybatch::run::drive::Arrivals;
use lazybatch::run::grid;
use lazybatch::run::RunSpec;
use lazybatch::traffic;
use lazybatch::traffic::Process;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    // the help lists every policy of the registry
    #[arg(long, help = super::policies_help("Policy:", "."))]
    policy: String,
    /// Arrival rate in requests/s.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "load")]
    rate: Option<f64>,
    /// Arrival rate as a multiple of the serial capacity (1 / single-input latency).
    #[arg(long, allow_negative_numbers = true)]
    load: Option<f64>,
    /// Arrival trace (one `TIME_MS [ENC OUT]` per line: source steps and output tokens) instead of Poisson traffic.
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
    /// Stream one CSV line per request to FILE as it leaves the server (id, model, arrival,
    /// first issue, completion, latency, deadline, lengths, outcome; times in ms).
    #[arg(long, value_name = "FILE")]
    keep_records: Option<PathBuf>,
}

/// What identifies a run in the JSON.
pub(super) struct RunId<'a> {
    pub(super) model: &'a str,
    pub(super) device: &'a str,
    pub(super) policy: &'a str,
    pub(super) rate: f64,
    pub(super) seed: u64,
    pub(super) sla_ms: f64,
    /// The arrivals came from a trace (the rate is the trace's mean).
    pub(super) traced: bool,
    /// The arrival process of generated traffic.
    pub(super) arrivals: lazybatch::traffic::Process,
    /// SLA classes, when the requests have them (their deadlines replace `sla_ms`).
    pub(super) classes: Option<String>,
    /// Co-located models' SLAs (ms), in the models' order (`--slas`): they replace `sla_ms`.
    pub(super) slas: Option<Vec<f64>>,
}

pub(super) fn run_json(id: &RunId, st: &Stats, wall_s: f64) -> serde_json::Value {
    // a trace whose arrivals all share one instant has no rate: null, never 0
    let rate = if id.traced && id.rate == 0.0 {
        serde_json::Value::Null
    } else {
        id.rate.into()
    };
    let mut v = json!({
        "model": id.model, "device": id.device, "policy": id.policy, "rate_rps": rate,
        "requests": st.requests, "completed": st.completed, "rejected": st.rejected,
        "rejected_queue_full": st.rejected_queue_full, "rejected_shed": st.rejected_shed,
        "rejected_abandoned": st.rejected_abandoned, "rejected_cancelled": st.rejected_cancelled, "rejected_late": st.rejected_late,
        "rejected_not_admitted": st.rejected_not_admitted,
        "goodput_rps": st.goodput_rps, "traced": id.traced,
        "arrivals": if id.traced { "trace".to_string() } else { id.arrivals.to_string() },
        "classes": id.classes,
        "seed": id.seed, "sla_ms": id.sla_ms, "latency_ms": st.latency_ms,
        "throughput_rps": st.throughput_rps, "sla_violation_rate": st.sla_violation_rate,
        "mean_batch_size": st.mean_batch_size, "preemptions": st.preemptions, "merges": st.merges,
        "cross_step_executions": st.cross_step_executions,
        "by_class": st.by_class, "wall_s": wall_s,
    });
    // models with a decoder: their first token and the tokens after it, each it has (no
    // time per token when every request had one)
    if let Some(t) = &st.ttft_ms {
        v["ttft_ms"] = json!(t);
    }
    if let Some(t) = &st.tpot_ms {
        v["tpot_ms"] = json!(t);
    }
    if let Some(k) = st.tokens_per_s {
        v["tokens_per_s"] = json!(k);
    }
    v
}

/// How many replicas the run has.
fn cfg_replicas(sv: &super::Serve) -> usize {
    sv.spec.replicas.count()
}

/// One run: generated (`--rate`, `--load`, `--arrivals`) or traced traffic under one policy.
pub(super) fn run(a: RunArgs, progress: Mode) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let sv = serve_args(&a.serve, &model, a.trace.is_some())?;
    let spec = Spec::parse(&a.policy, sv.max_batch())?;
    spec.check_for(&model)?;
    let trace = match &a.trace {
        Some(p) => Some(traffic::load_trace(p, &model, a.seed)?),
        None => None,
    };
    if let (Some(l), true) = (a.load, a.rate.is_none()) {
        check_load("--load", l)?;
    } else if let Some(r) = a.rate {
        check_rate("--rate", r)?;
    } else if trace.is_none() {
        bail!("give one of --rate R, --load X or --trace FILE");
    }
    let colocated = sv.spec.colocated.is_some();
    if colocated && (a.load.is_some() || trace.is_some()) {
        bail!("co-located models take a total --rate (split by --shares), not --load or --trace");
    }
    if a.keep_records.is_some() && cfg_replicas(&sv) > 1 {
        bail!("invalid --replicas: per-request records are kept for one server only: drop --keep-records, or run one replica");
    }
    let records = match &a.keep_records {
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            let w: Arc<Mutex<dyn std::io::Write + Send>> =
                Arc::new(Mutex::new(std::io::BufWriter::new(f)));
            Some(w)
        }
        None => None,
    };
    let bench = open_bench(model, &a.dev, &sv, progress)?;
    super::warn_slas_below(&bench, &sv.spec);
    let rate = match (a.rate, a.load, &trace) {
        (Some(r), _, _) => r,
        (None, Some(l), _) => check_rate("--load × serial capacity", l * bench.serial_capacity())?,
        (None, None, Some(t)) => t.rate,
        (None, None, None) => 0.0,
    };
    let cfg = RunSpec {
        requests: trace.as_ref().map_or(sv.requests(), |t| t.expected),
        ..sv.spec(spec, rate, a.seed)
    };
    let traffic = match trace {
        Some(t) => t,
        None => bench.traffic(&cfg)?,
    };
    let keep = KeepRecords {
        csv: records,
        ..KeepRecords::default()
    };
    // a real device serves in wall time: its progress is the traffic delivered so far
    let shown = if bench.is_virtual() {
        Progress::hidden()
    } else {
        progress.start("run", grid::traffic_secs(&traffic), "s of traffic")
    };
    let traffic = grid::delivered(traffic, &shown, 0);
    let t0 = std::time::Instant::now();
    let out = bench.drive(&cfg, keep, Arrivals::Scheduled(traffic))?;
    let wall = t0.elapsed().as_secs_f64();
    shown.finish();
    let st = out.stats();
    // each co-located model's figures, with the SLA they are counted against
    let per_model: Vec<(String, f64, Stats)> = match &cfg.colocated {
        Some(c) => {
            let names = bench.model.parts.iter().map(|p| p.name.clone());
            let slas = c.slas().iter().map(|s| s.as_ms());
            names
                .zip(slas)
                .zip(out.part_stats())
                .map(|((m, sla), s)| (m, sla, s))
                .collect()
        }
        None => Vec::new(),
    };
    if let Some(p) = &a.hgrm {
        let mut f =
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        metrics::write_hgrm(out.record.histogram(), &mut f)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    // each SLA class's figures (its requests, its own deadline)
    let per_class: Vec<(String, f64, Stats)> = match &cfg.classes {
        Some(c) => (0..c.names.len())
            .zip(out.class_stats())
            .map(|(k, s)| (c.names[k].clone(), c.slas[k].as_ms(), s))
            .collect(),
        None => Vec::new(),
    };
    let name = bench.model.name.clone();
    let device = bench.description();
    let id = RunId {
        model: &name,
        device: &device,
        policy: &a.policy,
        rate,
        seed: a.seed,
        sla_ms: a.serve.sla_ms(),
        traced: a.trace.is_some(),
        arrivals: cfg.arrivals,
        classes: cfg.classes.as_ref().map(ToString::to_string),
        slas: cfg
            .colocated
            .as_ref()
            .map(|c| c.slas().iter().map(|s| s.as_ms()).collect()),
    };
    if a.json {
        let mut v = run_json(&id, &st, wall);
        if !per_model.is_empty() {
            v["per_model"] = json!(per_model
                .iter()
                .map(|(m, sla, s)| json!({"model": m, "sla_ms": sla, "completed": s.completed, "rejected": s.rejected, "latency_ms": s.latency_ms, "throughput_rps": s.throughput_rps, "sla_violation_rate": s.sla_violation_rate}))
                .collect::<Vec<_>>());
        }
        if cfg.replicas.count() > 1 {
            v["replicas"] = json!(cfg.replicas.count());
            v["router"] = json!(cfg.replicas.router().name());
            v["per_replica"] = json!(out
                .replicas
                .iter()
                .enumerate()
                .map(|(k, s)| json!({"replica": k, "requests": s.requests, "completed": s.completed, "rejected": s.rejected, "latency_ms": s.latency_ms, "throughput_rps": s.throughput_rps, "sla_violation_rate": s.sla_violation_rate, "mean_batch_size": s.mean_batch_size, "preemptions": s.preemptions, "merges": s.merges}))
                .collect::<Vec<_>>());
        }
        if !per_class.is_empty() {
            v["per_class"] = json!(per_class
                .iter()
                .map(|(c, sla, s)| json!({"class": c, "sla_ms": sla, "requests": s.requests, "completed": s.completed, "rejected": s.rejected, "rejected_shed": s.rejected_shed, "rejected_late": s.rejected_late, "rejected_not_admitted": s.rejected_not_admitted, "latency_ms": s.latency_ms, "throughput_rps": s.throughput_rps, "goodput_rps": s.goodput_rps, "sla_violation_rate": s.sla_violation_rate}))
                .collect::<Vec<_>>());
        }
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
        return emit(&o);
    }
    // co-located models, SLA classes and replicas are listed alike
    let router = cfg.replicas.router().name();
    let groups: Vec<(String, Stats)> = per_model
        .into_iter()
        .chain(per_class)
        .map(|(name, sla, s)| (format!("{name} (SLA {sla} ms)"), s))
        .chain(
            out.replicas
                .iter()
                .enumerate()
                .map(|(k, s)| (format!("replica {k} ({router})"), s.clone())),
        )
        .collect();
    let policy = match cfg.replicas.count() {
        1 => a.policy.clone(),
        n => format!("{} on each of {n} replicas behind {router}", a.policy),
    };
    text(
        &mut o,
        &RunId {
            policy: &policy,
            ..id
        },
        &st,
        wall,
        &groups,
    );
    emit(&o)
}

/// The run in words: identity, latency percentiles, throughput, batches, device time by class
/// and each co-located model's or SLA class's figures.
pub(super) fn text(o: &mut String, id: &RunId, st: &Stats, wall: f64, groups: &[(String, Stats)]) {
    out!(
        o,
        "{} on {}, policy {}, {}, {} requests, {}, seed {}",
        id.model,
        id.device,
        id.policy,
        match (id.traced, id.arrivals) {
            (true, _) if id.rate == 0.0 => "trace (every arrival at one instant: no rate)".into(),
            (true, _) => format!("trace (mean {:.1} req/s)", id.rate),
            (false, Process::Poisson) => format!("{:.1} req/s", id.rate),
            (false, p) => format!("{:.1} req/s ({p} arrivals)", id.rate),
        },
        st.requests,
        match (&id.classes, &id.slas) {
            (Some(c), _) => format!("SLA classes {c}"),
            (None, Some(slas)) => format!(
                "SLAs {} ms (each model's, in order)",
                slas.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (None, None) => format!("SLA {} ms", id.sla_ms),
        },
        id.seed
    );
    if st.rejected > 0 {
        // every reason a request was turned away or let go, those that happened
        let why: Vec<String> = [
            (
                st.rejected_queue_full,
                "with the pending queue full, --max-pending",
            ),
            (st.rejected_shed, "shed, their deadline lost, --shed"),
            (
                st.rejected_not_admitted,
                "not admitted, predicted late behind the work in the server, --admit predicted",
            ),
            (
                st.rejected_late,
                "let go past their deadline, --abandon-late",
            ),
            (st.rejected_cancelled, "cancelled, their client gone"),
            (st.rejected_abandoned, "abandoned at a shutdown's limit"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, words)| format!("{n} {words}"))
        .collect();
        out!(
            o,
            "  completed {} (rejected {}: {})",
            st.completed,
            st.rejected,
            why.join("; ")
        );
    } else {
        out!(o, "  completed {} (rejected 0)", st.completed);
    }
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
        "  throughput {:.1} req/s   goodput {:.1} req/s   SLA violations {:.2}%   mean batch {:.2}",
        st.throughput_rps,
        st.goodput_rps,
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
    if let Some(t) = &st.ttft_ms {
        outp!(
            o,
            "  time to first token ms: mean {:.3}  p50 {:.3}  p99 {:.3}",
            t.mean,
            t.p50,
            t.p99
        );
        if let Some(p) = &st.tpot_ms {
            outp!(
                o,
                "   per output token ms: mean {:.3}  p50 {:.3}  p99 {:.3}",
                p.mean,
                p.p50,
                p.p99
            );
        }
        out!(o, "   {:.1} tokens/s", st.tokens_per_s.unwrap_or(0.0));
    }
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
    for (m, ps) in groups {
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
}
