//! Goodput under overload with SLA classes, with and without shedding (our extension, not the
//! paper's): two classes per model, `gold` at 2 and `bronze` at 8 times its single-input
//! latency (shares 1 : 3), offered at 0.5 to 4 times its serial capacity, under LazyB and
//! Orca-style `continuous`, each as it is, with `--shed` and with `--abandon-late`.

use super::*;
use crate::plot::{Figure, Panel, Series};
use crate::report::table::Table;
use crate::run::grid::CLASS_QUANTILES;
use std::fmt::Write as _;

/// Goodput under overload.
pub(super) struct Goodput;

const MODELS: &[&str] = &["resnet50", "gnmt", "transformer_base"];
const POLICIES: &[&str] = &["lazy", "continuous"];
/// Offered load, multiples of the serial capacity.
const LOADS: &[f64] = &[0.5, 1.0, 2.0, 4.0];

/// What a run does with requests whose deadline is lost: (`--shed`, `--abandon-late`), and the
/// suffix of its series' name.
const MODES: &[(bool, bool, &str)] = &[
    (false, false, ""),
    (true, false, " + shed"),
    (false, true, " + abandon-late"),
];

/// The model's classes and its rates at [`LOADS`] on `npu`.
fn setting(model: &'static str, npu: &NpuConfig) -> Result<(String, Vec<f64>)> {
    let cap = serial_capacity(model, npu)?;
    let single_ms = 1e3 / cap;
    let classes = format!(
        "gold:{:.3}:1,bronze:{:.3}:3",
        2.0 * single_ms,
        8.0 * single_ms
    );
    let rates = LOADS.iter().map(|&l| rate_at(cap, l)).collect();
    Ok((classes, rates))
}

impl Experiment for Goodput {
    fn name(&self) -> &'static str {
        "goodput"
    }
    fn by_default(&self) -> bool {
        false
    }
    fn jobs(&self, plan: &Plan, npu: &NpuConfig, jobs: &mut BTreeSet<Job>) -> Result<()> {
        for &m in MODELS {
            let (classes, rates) = setting(m, npu)?;
            for p in POLICIES {
                for &r in &rates {
                    for &(shed, late, _) in MODES {
                        for s in seeds(plan) {
                            let j = Job::new(m, p, r, s, SLA_MS, COVERAGE, MAX_BATCH);
                            jobs.insert(j.classed(classes.clone(), shed).abandoning_late(late));
                        }
                    }
                }
            }
        }
        Ok(())
    }
    fn write(&self, ctx: &mut Ctx) -> Result<()> {
        goodput(ctx)?;
        class_cdfs(ctx)
    }
}

/// The load at which the per-class CDFs are drawn (twice the serial capacity: overload, where
/// shedding matters).
const CDF_LOAD: f64 = 2.0;

/// Each class's latency CDF at [`CDF_LOAD`] under each policy, with and without shedding (the
/// mean over seeds of each quantile; completed requests only).
fn class_cdfs(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&["model", "policy", "shed", "class", "quantile", "latency_ms"]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from(
        "| model | policy | class | p50 (ms) | p99 (ms) | p50 with --shed | p99 with --shed |\n|---|---|---|---|---|---|---|\n",
    );
    for &m in MODELS {
        let (classes, _) = setting(m, ctx.npu())?;
        let cap = serial_capacity(m, ctx.npu())?;
        let r = rate_at(cap, CDF_LOAD);
        let names: Vec<String> = classes
            .split(',')
            .map(|c| c.split(':').next().unwrap_or(c).to_string())
            .collect();
        let mut panel = Panel {
            title: format!("{} at {CDF_LOAD}× capacity", short(m)),
            x_label: "latency (ms)".into(),
            y_label: "fraction of completed requests".into(),
            log_x: true,
            y_range: Some((0.0, 1.02)),
            legend_lower_right: true,
            ..Panel::default()
        };
        for p in POLICIES {
            let mut cells = vec![Vec::new(); names.len()];
            for shed in [false, true] {
                let runs = ctx.runs_with(m, p, r, &|j| j.classed(classes.clone(), shed))?;
                for (c, name) in names.iter().enumerate() {
                    let mean_at = |k: usize| {
                        let v: Vec<f64> = runs
                            .iter()
                            .filter_map(|x| x.class_cdf.get(c).map(|q| q[k]))
                            .collect();
                        v.iter().sum::<f64>() / v.len().max(1) as f64
                    };
                    let mut s = Series {
                        name: format!("{} {name}{}", label(p), if shed { " + shed" } else { "" }),
                        dashed: shed,
                        ..Series::default()
                    };
                    for (k, &q) in CLASS_QUANTILES.iter().enumerate() {
                        let ms = mean_at(k);
                        s.points.push((ms.max(1e-3), q));
                        t.push(vec![
                            m.into(),
                            (*p).into(),
                            shed.to_string().into(),
                            name.as_str().into(),
                            q.into(),
                            ms.into(),
                        ]);
                    }
                    let at = |q: f64| CLASS_QUANTILES.iter().position(|&x| x == q).unwrap_or(0);
                    cells[c].push(format!(
                        "{:.2} | {:.2}",
                        mean_at(at(0.5)),
                        mean_at(at(0.99))
                    ));
                    panel.series.push(s);
                }
            }
            for (c, name) in names.iter().enumerate() {
                let _ = writeln!(
                    text,
                    "| {} | {} | {name} | {} |",
                    short(m),
                    label(p),
                    cells[c].join(" | ")
                );
            }
        }
        fig.panels.push(panel);
    }
    ctx.table(&t, "goodput_cdf")?;
    ctx.figure(&fig, "goodput_cdf", 440, 400)?;
    ctx.sections.push((
        "Latency by SLA class under overload (our extension)".into(),
        format!(
            "![goodput_cdf](goodput_cdf.svg)\n\nEach class's latency CDF at {CDF_LOAD}× the serial capacity (the mean \
             over seeds of each percentile, from each class's histogram; completed requests only — shed requests do not \
             complete). `goodput_cdf.csv` has every percentile.\n\n{text}"
        ),
    ));
    Ok(())
}

fn goodput(ctx: &mut Ctx) -> Result<()> {
    let mut t = Table::new(&[
        "model",
        "policy",
        "shed",
        "abandon_late",
        "load",
        "rate_rps",
        "goodput_rps",
        "throughput_rps",
        "sla_violation",
        "shed_requests",
        "late_requests",
    ]);
    let mut fig = Figure {
        shared_legend: true,
        ..Figure::default()
    };
    let mut text = String::from("| model | load |");
    for p in POLICIES {
        for &(_, _, suffix) in MODES {
            let _ = write!(text, " {}{suffix} |", label(p));
        }
    }
    text.push_str("\n|---|---|");
    text.push_str(&"---|".repeat(POLICIES.len() * MODES.len()));
    text.push('\n');
    for &m in MODELS {
        let (classes, rates) = setting(m, ctx.npu())?;
        let mut panel = Panel {
            title: format!("{} ({classes})", short(m)),
            x_label: "offered load (× serial capacity)".into(),
            y_label: "goodput (req/s)".into(),
            ..Panel::default()
        };
        let mut cells = vec![Vec::new(); LOADS.len()];
        for p in POLICIES {
            for &(shed, late, suffix) in MODES {
                let mut s = Series {
                    name: format!("{}{suffix}", label(p)),
                    markers: true,
                    dashed: shed || late,
                    ..Series::default()
                };
                for (k, (&load, &r)) in LOADS.iter().zip(&rates).enumerate() {
                    let runs = ctx.runs_with(m, p, r, &|j| {
                        j.classed(classes.clone(), shed).abandoning_late(late)
                    })?;
                    let f =
                        |g: &dyn Fn(&RunOut) -> f64| spread(runs.iter().map(|x| g(x)).collect());
                    let good = f(&|x| x.stats.goodput_rps);
                    t.push(vec![
                        m.into(),
                        (*p).into(),
                        shed.to_string().into(),
                        late.to_string().into(),
                        load.into(),
                        r.into(),
                        good.0.into(),
                        f(&|x| x.stats.throughput_rps).0.into(),
                        f(&|x| x.stats.sla_violation_rate).0.into(),
                        f(&|x| x.stats.rejected_shed as f64).0.into(),
                        f(&|x| x.stats.rejected_late as f64).0.into(),
                    ]);
                    s.push_spread(load, good);
                    cells[k].push(format!("{:.1}", good.0));
                }
                panel.series.push(s);
            }
        }
        for (k, load) in LOADS.iter().enumerate() {
            let _ = writeln!(text, "| {} | {load} | {} |", short(m), cells[k].join(" | "));
        }
        fig.panels.push(panel);
    }
    ctx.table(&t, "goodput")?;
    ctx.figure(&fig, "goodput", 440, 400)?;
    ctx.sections.push((
        "Goodput under overload: as served, shedding, letting late work go (our extension)".into(),
        format!(
            "![goodput](goodput.svg)\n\nGoodput (requests completed within their own deadline per second) with two SLA classes \
             per model (`gold` at 2 and `bronze` at 8 times the single-input latency, shares 1 : 3; `--classes`), offered at \
             0.5 to 4 times the serial capacity: as served, with `--shed` (reject a request whose deadline can no longer be \
             met even served alone at once) and with `--abandon-late` (let a request go at the next node boundary once its \
             deadline has passed, queued or part-served). `goodput.csv` has throughput, violations and the requests shed \
             and let go.\n\n{text}"
        ),
    ));
    Ok(())
}
