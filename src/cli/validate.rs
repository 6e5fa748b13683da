//! `lazybatch validate`: the simulator held against a real run. Profiles the device (or takes
//! `--profile FILE`), then for every policy × rate × seed serves the same arrivals twice — on
//! the device in wall time, and on its table in virtual time (`--device profile:FILE`'s
//! device) — and prints each measured statistic beside its prediction and their relative error
//! ([`lazybatch::validate`]).

use super::serve::{run_json, RunId};
use super::{
    check_load, check_rate, emit, in_range, open_bench, serve_args, specs_for, DeviceArgs,
    ModelArgs, Serve, ServeArgs,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::device::open::Opened;
use lazybatch::device::table::TableDevice;
use lazybatch::metrics::Stats;
use lazybatch::policy::Spec;
use lazybatch::progress::Mode;
use lazybatch::run::grid::mean_stats;
use lazybatch::run::validate::{error, fingerprint, pair, predict, Lag, Pair};
use lazybatch::run::{RunSpec, Testbed, TestbedOptions};
use lazybatch::time::{Nanos, Sla};
use serde_json::json;

/// The requests a run serves when `--requests` is not given: validation serves every point in
/// wall time.
const DEFAULT_REQUESTS: i64 = 300;

#[derive(Args, Debug)]
pub(super) struct ValidateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    // the help lists every policy of the registry
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "serial,graph:5,graph:25,lazy,oracle",
        help = super::policies_help("Policies, comma-separated, of", ".")
    )]
    policies: Vec<String>,
    /// Arrival rates (requests/s), comma-separated.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    rates: Option<Vec<f64>>,
    /// Rates as multiples of the serial capacity (1 / the table's single-input latency)
    /// [default: 0.3,0.6,0.9].
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    load: Option<Vec<f64>>,
    #[command(flatten)]
    serve: ServeArgs,
    /// The first seed of the arrivals (the same seed draws the same instants, lengths and
    /// classes on both sides).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seeds per (policy, rate): --seed, --seed + 1, …
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seeds: i64,
    /// Serve each point's arrivals on the device a second time and report how far the two
    /// real runs differ (`run_to_run`): the measurement's own repeatability, the floor under
    /// any prediction's error on this machine.
    #[arg(long)]
    repeat: bool,
    /// Print a JSON array: per point the policy, rate, seed, `measured` and `predicted` (each
    /// shaped like `run --json`) and the relative `error` of each statistic.
    #[arg(long)]
    json: bool,
    /// Also write DIR/validate.txt (the table), DIR/validate.json (what --json prints),
    /// DIR/validate.svg (predicted against measured mean, p50 and p99 latency, every point)
    /// and, on a real device, DIR/table.json (the latency table the prediction read).
    #[arg(long, value_name = "DIR")]
    out: Option<std::path::PathBuf>,
    /// Replay runs recorded earlier instead of serving: FILE is a `compare --out DIR`'s
    /// `compare.json` or a `validate --out DIR`'s `validate.json` (its measured runs) from a
    /// real device, the device `--device profile:TABLE` with the table measured there (for
    /// validate, DIR/table.json); each recorded (policy, rate, seeds) is run on the table with
    /// the arrivals its seeds draw and compared with the record.
    #[arg(long, value_name = "FILE")]
    measured: Option<std::path::PathBuf>,
}

/// One point: its configuration and both runs.
struct Point {
    cfg: RunSpec,
    load: Option<f64>,
    pair: Pair,
}

/// Runs the validation and reports it.
pub(super) fn run(mut a: ValidateArgs, progress: Mode) -> Result<()> {
    let model = a.model.load()?;
    a.serve.requests.get_or_insert(DEFAULT_REQUESTS);
    let sv = serve_args(&a.serve, &model, false)?;
    if sv.spec.replicas.count() > 1 {
        bail!("--replicas applies to the simulator's run, compare and capacity; `validate` serves one device (run one process per replica behind your load balancer)");
    }
    let seeds = in_range("--seeds", a.seeds, 1, 1000)? as u64;
    if model.parts.len() > 1 {
        bail!("validate takes one model (a table holds one model's lengths)");
    }
    let specs = specs_for(&a.policies, sv.max_batch(), &model)?;
    let loads = match (&a.rates, &a.load) {
        (Some(_), Some(_)) => bail!("give --rates or --load, not both"),
        (Some(rs), None) => {
            for &r in rs {
                check_rate("--rates", r)?;
            }
            None
        }
        (None, l) => {
            let l = l.clone().unwrap_or_else(|| vec![0.3, 0.6, 0.9]);
            for &x in &l {
                check_load("--load", x)?;
            }
            Some(l)
        }
    };
    if let Some(file) = &a.measured {
        return replay(&a, model, &sv, file, progress);
    }
    let mut real = open_bench(model.clone(), &a.dev, &sv, progress)?;
    super::warn_slas_below(&real, &sv.spec);
    if real.is_virtual() {
        bail!(
            "validate holds the simulator against a real device: give --device cpu or --device cuda (this run would be on {})",
            real.description()
        );
    }
    // the prediction: the same table, as a device in virtual time, with the same predictor
    let table = TableDevice::from_profile(real.profile.clone(), "the measured table");
    let opts = TestbedOptions {
        max_batch: sv.spec.max_batch,
        coverage: sv.coverage,
        profile: None,
        sampling: lazybatch::device::measure::Sampling::default(),
    };
    let predicted = Testbed::open(model, Opened::Table(table), &opts)?;
    let rates: Vec<(f64, Option<f64>)> = match (&loads, &a.rates) {
        (Some(ls), _) => ls
            .iter()
            .map(|&l| {
                Ok((
                    check_rate("--load × serial capacity", l * real.serial_capacity())?,
                    Some(l),
                ))
            })
            .collect::<Result<_>>()?,
        (None, Some(rs)) => rs.iter().map(|&r| (r, None)).collect(),
        (None, None) => Vec::new(),
    };
    // every real run serves its traffic in wall time: the progress is in seconds of it
    let secs = |rate: f64| (sv.requests() as f64 / rate).ceil() as u64;
    let runs = if a.repeat { 2 } else { 1 };
    let total =
        specs.len() as u64 * seeds * runs * rates.iter().map(|&(r, _)| secs(r)).sum::<u64>();
    let shown = progress.start("validate", total, "s of traffic");
    let mut base = 0;
    let mut points = Vec::new();
    for spec in &specs {
        for &(rate, load) in &rates {
            for s in 0..seeds {
                let cfg = sv.spec(spec.clone(), rate, a.seed + s);
                shown.set_message(format!(
                    "{} at {rate:.1} req/s, seed {}",
                    spec.text, cfg.seed
                ));
                let p = pair(&mut real, &predicted, &cfg, a.repeat, (&shown, base))?;
                base += secs(rate) * runs;
                shown.set_position(base);
                points.push(Point { cfg, load, pair: p });
            }
        }
    }
    shown.finish();
    let note = drift(&mut real)?;
    finish(&real, &a, &points, note)
}

/// The relative errors of the statistics `validate` compares.
fn errors(m: &Stats, p: &Stats) -> serde_json::Value {
    json!({
        "mean": error(m.latency_ms.mean, p.latency_ms.mean),
        "p50": error(m.latency_ms.p50, p.latency_ms.p50),
        "p99": error(m.latency_ms.p99, p.latency_ms.p99),
        "sla_violation_rate": error(m.sla_violation_rate, p.sla_violation_rate),
        "mean_batch_size": error(m.mean_batch_size, p.mean_batch_size),
        "preemptions": error(m.preemptions as f64, p.preemptions as f64),
        "merges": error(m.merges as f64, p.merges as f64),
    })
}

fn point_json(real: &Testbed, a: &ValidateArgs, p: &Point) -> serde_json::Value {
    let (model, measured_on) = (real.model.name.as_str(), real.description());
    let predicted_on = format!("profile (the table measured on {measured_on})");
    let as_run = |device: &str, st: &Stats| -> serde_json::Value {
        let id = RunId {
            model,
            device,
            policy: &p.cfg.policy.text,
            rate: p.cfg.rate,
            seed: p.cfg.seed,
            sla_ms: a.serve.sla_ms(),
            traced: false,
            arrivals: p.cfg.arrivals,
            classes: None,
            slas: None,
        };
        run_json(&id, st, 0.0)
    };
    let (measured, again) = (&p.pair.measured, p.pair.again.as_ref().map(|(st, _)| st));
    let mut measured_json = as_run(&measured_on, measured);
    // the arrivals drawn, for a replay (`--measured validate.json`) to check it draws the same
    if let Ok(t) = real.traffic(&p.cfg) {
        let drawn: Vec<_> = t.arrivals.collect();
        measured_json["arrivals_fingerprint"] = json!(fingerprint(&drawn));
    }
    measured_json["lazy_rule"] = json!(lazybatch::run::validate::LAZY_RULE);
    json!({
        "policy": p.cfg.policy.text,
        "rate_rps": p.cfg.rate,
        "load": p.load,
        "seed": p.cfg.seed,
        "measured": measured_json,
        "predicted": as_run(&predicted_on, &p.pair.predicted),
        "error": errors(measured, &p.pair.predicted),
        "repeat": again.map(|st| as_run(&measured_on, st)),
        "run_to_run": again.map(|st| errors(measured, st)),
        "delivery_lag_ms": lag_json(p.pair.lag),
        "repeat_delivery_lag_ms": p.pair.again.as_ref().map(|(_, l)| lag_json(*l)),
        // the instants the wall-time run delivered its requests at: what the prediction served
        "delivered_ns": (!p.pair.delivered.is_empty()).then_some(&p.pair.delivered),
    })
}

/// A run's delivery lag in JSON: mean and largest, ms, and whether it passed
/// [`lazybatch::run::validate::LATE_DELIVERY`].
fn lag_json(l: Lag) -> serde_json::Value {
    json!({ "mean": l.mean.as_ms(), "max": l.max.as_ms(), "late": l.is_late() })
}

/// A percentage with its sign.
fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.1}%", 100.0 * x)
    } else {
        "n/a".into()
    }
}

fn text(real: &Testbed, a: &ValidateArgs, points: &[Point]) -> String {
    let mut o = String::new();
    out!(
        o,
        "{} on {} against its table in virtual time: {} requests per run, SLA {} ms, single-input latency {:.3} ms",
        real.model.name,
        real.description(),
        points.first().map_or(0, |p| p.cfg.requests),
        a.serve.sla_ms(),
        1e3 / real.serial_capacity()
    );
    // the policy column as wide as its longest name
    let w = points
        .iter()
        .map(|p| p.cfg.policy.text.len())
        .fold(9, usize::max);
    out!(
        o,
        "{:<w$} {:>8} {:>4} | {:>22} | {:>22} | {:>22} | {:>13} | {:>11} | {:>11} | {:>9}",
        "policy",
        "rate/s",
        "seed",
        "mean ms meas/pred err",
        "p50 ms meas/pred err",
        "p99 ms meas/pred err",
        "SLA viol m/p",
        "batch m/p",
        "merges m/p",
        "lag ms"
    );
    if points.iter().any(|p| p.pair.again.is_some()) {
        // the header's last column: the second real run's difference from the first
        o.pop();
        out!(o, " | again: mean  p99");
    }
    let (mut mean_err, mut p99_err) = (Vec::new(), Vec::new());
    for p in points {
        let (m, q) = (&p.pair.measured, &p.pair.predicted);
        let cell = |x: f64, y: f64| format!("{x:>6.2} {y:>6.2} {:>7}", pct(error(x, y)));
        out!(
            o,
            "{:<w$} {:>8.1} {:>4} | {} | {} | {} | {:>5.1}% {:>5.1}% | {:>5.2} {:>5.2} | {:>5} {:>5} | {:>4.2}/{:<4.1}",
            p.cfg.policy.text,
            p.cfg.rate,
            p.cfg.seed,
            cell(m.latency_ms.mean, q.latency_ms.mean),
            cell(m.latency_ms.p50, q.latency_ms.p50),
            cell(m.latency_ms.p99, q.latency_ms.p99),
            100.0 * m.sla_violation_rate,
            100.0 * q.sla_violation_rate,
            m.mean_batch_size,
            q.mean_batch_size,
            m.merges,
            q.merges,
            p.pair.lag.mean.as_ms(),
            p.pair.lag.max.as_ms(),
        );
        if let Some((r, _)) = &p.pair.again {
            o.pop();
            out!(
                o,
                " | {:>11} {:>7}",
                pct(error(m.latency_ms.mean, r.latency_ms.mean)),
                pct(error(m.latency_ms.p99, r.latency_ms.p99))
            );
        }
        mean_err.push(error(m.latency_ms.mean, q.latency_ms.mean).abs());
        p99_err.push(error(m.latency_ms.p99, q.latency_ms.p99).abs());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    out!(
        o,
        "median |error| over {} points: mean latency {:.1}%, p99 {:.1}% (goal: 5% and 10%); lag: how late the wall-time run delivered its requests, mean/max",
        points.len(),
        100.0 * median(&mut mean_err),
        100.0 * median(&mut p99_err)
    );
    let (mut mean_rr, mut p99_rr): (Vec<f64>, Vec<f64>) = points
        .iter()
        .filter_map(|p| {
            let (m, (r, _)) = (&p.pair.measured, p.pair.again.as_ref()?);
            Some((
                error(m.latency_ms.mean, r.latency_ms.mean).abs(),
                error(m.latency_ms.p99, r.latency_ms.p99).abs(),
            ))
        })
        .unzip();
    if !mean_rr.is_empty() {
        out!(
            o,
            "the device against itself (--repeat: the same arrivals served twice): median |difference| mean latency {:.1}%, p99 {:.1}% — errors below these are within the measurement's own spread",
            100.0 * median(&mut mean_rr),
            100.0 * median(&mut p99_rr)
        );
    }
    if let Some(w) = late_warning(points) {
        out!(o, "warning: {w}");
    }
    o
}

/// The warning when a real run delivered a request late: the worst lag, what to do, and which
/// runs were late.
fn late_warning(points: &[Point]) -> Option<String> {
    let w = worst_lag(points).warning()?;
    let runs = points.len()
        * if points.iter().any(|p| p.pair.again.is_some()) {
            2
        } else {
            1
        };
    let mut late = Vec::new();
    for p in points {
        let at = format!(
            "{} at {:.1} req/s, seed {}",
            p.cfg.policy.text, p.cfg.rate, p.cfg.seed
        );
        if p.pair.lag.is_late() {
            late.push(at.clone());
        }
        if p.pair.again.as_ref().is_some_and(|(_, l)| l.is_late()) {
            late.push(format!("{at} (its repeat)"));
        }
    }
    Some(format!(
        "{w} (late: {} of {runs} runs: {})",
        late.len(),
        late.join("; ")
    ))
}

/// The worst delivery lag of every real run of `points`.
fn worst_lag(points: &[Point]) -> Lag {
    points
        .iter()
        .fold(Lag::default(), |l, p| l.worst(p.pair.worst_lag()))
}

/// `--measured FILE`: each recorded run replayed on the table of `--device profile:TABLE`.
fn replay(
    a: &ValidateArgs,
    model: lazybatch::graph::Model,
    sv: &Serve,
    file: &std::path::Path,
    progress: Mode,
) -> Result<()> {
    let body = lazybatch::files::read_text(file, lazybatch::files::MEASURED)?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&body).map_err(|e| {
        anyhow::anyhow!(
            "{}:{}: not a compare.json or validate.json array: {e}",
            file.display(),
            e.line()
        )
    })?;
    let bench = open_bench(model, &a.dev, sv, progress)?;
    if !bench.is_virtual() || bench.npu().is_some() {
        bail!("--measured replays on a table: give --device profile:TABLE (the table measured with the runs)");
    }
    let mut points = Vec::new();
    let mut unchecked = 0;
    let mut renamed = 0;
    for (k, row) in rows.iter().enumerate() {
        // a validate.json point holds its recorded run under "measured", and the instants its
        // requests were delivered at (what its prediction served); a compare.json row is one run
        // and the replay serves its arrivals as drawn
        let delivered: Option<Vec<Nanos>> = match row.get("delivered_ns") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                anyhow::anyhow!(
                    "{}: [{k}].delivered_ns: not a list of instants in ns: {e}",
                    file.display()
                )
            })?),
        };
        let row = row.get("measured").filter(|m| m.is_object()).unwrap_or(row);
        let field = |f: &str| -> Result<&serde_json::Value> {
            row.get(f)
                .ok_or_else(|| anyhow::anyhow!("{}: [{k}].{f}: missing", file.display()))
        };
        let model_name = field("model")?.as_str().unwrap_or_default();
        if model_name != bench.model.name {
            bail!(
                "{}: [{k}].model: '{model_name}', the replay's model is '{}'",
                file.display(),
                bench.model.name
            );
        }
        let recorded = field("policy")?.as_str().unwrap_or_default();
        let rule = row.get("lazy_rule").and_then(|r| r.as_str());
        let policy = lazybatch::run::validate::as_recorded(recorded, rule);
        if policy != recorded {
            renamed += 1;
        }
        let rate = field("rate_rps")?.as_f64().unwrap_or(0.0);
        let requests = field("requests")?.as_u64().unwrap_or(0) as usize;
        let seeds = row
            .get("seeds")
            .and_then(|s| s.as_u64())
            .unwrap_or(1)
            .max(1);
        // the run's first seed (`--seed`), then the next ones
        let first = row.get("seed").and_then(|s| s.as_u64()).unwrap_or(1);
        let sla_ms = field("sla_ms")?.as_f64().unwrap_or(a.serve.sla_ms());
        let measured: Stats = serde_json::from_value(row.clone())
            .map_err(|e| anyhow::anyhow!("{}: [{k}]: {e}", file.display()))?;
        let spec = Spec::parse(&policy, sv.max_batch())?;
        let sla = Sla::from_ms(sla_ms)
            .map_err(|e| anyhow::anyhow!("{}: [{k}].sla_ms: {e}", file.display()))?;
        let cfg_at = |seed| RunSpec {
            classes: None,
            shed: false,
            abandon_late: false,
            admit: Default::default(),
            requests,
            sla,
            ..sv.spec(spec.clone(), rate, seed)
        };
        let mut outs = Vec::new();
        for seed in first..first.saturating_add(seeds) {
            let cfg = cfg_at(seed);
            let keep = lazybatch::metrics::KeepRecords::default();
            if seed == first {
                let drawn: Vec<_> = bench.traffic(&cfg)?.arrivals.collect();
                match row.get("arrivals_fingerprint").and_then(|f| f.as_str()) {
                    Some(f) if f != fingerprint(&drawn) => bail!(
                        "{}: [{k}]: the recorded run drew other arrivals (fingerprint {f}, this build draws {}): it cannot be replayed",
                        file.display(),
                        fingerprint(&drawn)
                    ),
                    Some(_) => {}
                    None => unchecked += 1,
                }
                if let Some(at) = &delivered {
                    if at.len() != drawn.len() || seeds != 1 {
                        bail!(
                            "{}: [{k}].delivered_ns: {} instants for one run of {} requests",
                            file.display(),
                            at.len(),
                            drawn.len()
                        );
                    }
                    if at.windows(2).any(|w| w[1] < w[0]) {
                        bail!(
                            "{}: [{k}].delivered_ns: the instants must not decrease",
                            file.display()
                        );
                    }
                    outs.push(predict(&bench, &cfg, &drawn, at, keep)?.stats());
                    continue;
                }
            }
            outs.push(bench.run(&cfg, keep)?.stats());
        }
        let predicted = mean_stats(&outs.iter().collect::<Vec<_>>());
        let cfg = cfg_at(first);
        let pair = Pair {
            measured,
            predicted,
            lag: Lag::default(),
            delivered: Vec::new(),
            again: None,
        };
        points.push(Point {
            cfg,
            load: None,
            pair,
        });
    }
    let mut note = String::new();
    if unchecked > 0 {
        out!(
            note,
            "{unchecked} of {} recorded runs carry no arrivals fingerprint (recorded before compare and validate wrote one): their replay assumes this build draws the arrivals those runs drew",
            points.len()
        );
    }
    if renamed > 0 {
        out!(
            note,
            "{renamed} of {} recorded runs of a LazyB policy carry no `lazy_rule` (recorded before 2026-12, when its slack gate was asked again at every node): each is replayed as that reading, `…:recheck`",
            points.len()
        );
    }
    finish(&bench, a, &points, note)
}

/// How far the device's speed moved while it was validated: its median pass alone, timed again
/// now, against the one its table holds (empty when the table timed no passes).
fn drift(real: &mut Testbed) -> Result<String> {
    let before = &real.profile.passes_ns;
    let Some(&then) = before.get(before.len() / 2) else {
        return Ok(String::new());
    };
    let len = real.model.ref_lengths();
    let Some((device, model)) = real.real_device()? else {
        return Ok(String::new());
    };
    let now = lazybatch::device::measure::pass_times(
        device,
        model,
        len,
        lazybatch::device::measure::PASSES,
        lazybatch::device::measure::PASSES_BUDGET,
    )?;
    let now = now[now.len() / 2];
    let mut o = String::new();
    out!(
        o,
        "the device's median pass alone: {:.3} ms when its table was measured, {:.3} ms after the runs ({}): the table is one moment's device",
        then as f64 / 1e6,
        now as f64 / 1e6,
        pct(now as f64 / then.max(1) as f64 - 1.0)
    );
    // the level its passes give (not charged unless the table sets `level`)
    let mut table = TableDevice::from_profile(real.profile.clone(), "the table");
    lazybatch::device::Device::prepare(&mut table, &real.model, real.profile.max_batch)?;
    if let Some(level) = table.passes_level(&real.model)? {
        out!(
            o,
            "its passes ran {} against its nodes' sum (a table's `\"level\": \"passes\"` prices every node at {level:.4}: docs/validate.md, \"Level\")",
            pct(level - 1.0)
        );
    }
    Ok(o)
}

/// Prints the points (the table and `note`, or JSON) and with `--out` writes them and their
/// figure.
fn finish(bench: &Testbed, a: &ValidateArgs, points: &[Point], note: String) -> Result<()> {
    let arr: Vec<_> = points.iter().map(|p| point_json(bench, a, p)).collect();
    let json = serde_json::to_string_pretty(&arr)? + "\n";
    let table = text(bench, a, points) + &note;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("--out {}", dir.display()))?;
        let write = |name: &str, body: &str| {
            let f = dir.join(name);
            std::fs::write(&f, body).with_context(|| format!("writing {}", f.display()))
        };
        write("validate.txt", &table)?;
        write("validate.json", &json)?;
        let fig: Vec<_> = points
            .iter()
            .map(|p| {
                (
                    p.cfg.policy.text.as_str(),
                    &p.pair.measured,
                    &p.pair.predicted,
                )
            })
            .collect();
        lazybatch::run::validate::write_figure(&fig, &dir.join("validate.svg"))?;
        // a real device's table (measured here, or --profile's): what the prediction read
        let saved = if bench.is_virtual() {
            ""
        } else {
            bench.profile.save(&dir.join("table.json"))?;
            " and table.json (the table the prediction read)"
        };
        eprintln!(
            "wrote validate.txt, validate.json, validate.svg{saved} to {}",
            dir.display()
        );
    }
    if a.json {
        // the table (which ends with it) is not printed: the warning goes to stderr
        if let Some(w) = late_warning(points) {
            eprintln!("warning: {w}");
        }
    }
    emit(if a.json { &json } else { &table })
}
