//! The paper's headline claims and how to compute ours from a configuration's runs: what each
//! claim is about ([`Kind`]), the paper's figure, and our value of it under any LazyB variant
//! (the ablation included).

use super::experiments::{
    gains_of, geomean, graph_over_half, graph_policy, label, pooled, short, sla_curve,
    throughput_at, throughput_with_overload, zero_from, Ctx, COLO, COVERAGE, MAIN, MAX_BATCH,
    SLA_MS,
};
use crate::error::Result;
use crate::metrics::quantile;

/// What a claim is about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    LatencyGain(&'static str),
    ThroughputGain(&'static str),
    /// Throughput at the highest overload rate, LazyB over the best GraphB.
    ThroughputAt(&'static str),
    /// Throughput over the paper's rates and the overload rates, runs long enough to converge.
    ThroughputWithOverload(&'static str),
    /// Capacity at p99 ≤ the SLA, LazyB over the best GraphB.
    CapacityGain(&'static str),
    TransformerP99,
    ZeroViolation(&'static str),
    AvgLatency,
    AvgThroughput,
    /// [`Kind::AvgThroughput`] with the overload rates in the average (long runs).
    AvgThroughputWithOverload,
    /// The geometric mean of the three models' capacity gains.
    AvgCapacity,
    /// SLA satisfaction as the ratio of the two sides' mean satisfactions (1 − violations).
    AvgSla,
    /// SLA satisfaction as the ratio of the two sides' mean violation rates (GraphB / LazyB).
    AvgSlaViolations,
    /// GraphB configurations over 50% violations at 100 ms, at each rate (the paper's check of
    /// its operating point; GraphB's alone).
    GraphOverHalf,
    /// Co-located latency or throughput gain: against the best window (or every window run),
    /// with one queue for every model (or a queue per model).
    Colo {
        throughput: bool,
        per_model: bool,
        every_window: bool,
    },
    ColoCapacity,
    VsGraph0(&'static str),
}

/// One headline claim: the paper's figure and how to compute ours.
pub(super) struct Claim {
    pub(super) kind: Kind,
    pub(super) text: String,
    pub(super) paper: &'static str,
    /// The paper's figure as a number comparable with ours (None: not in the paper).
    pub(super) paper_value: Option<f64>,
    /// The experiment that gives it.
    pub(super) figure: &'static str,
}

pub(super) fn claims() -> Vec<Claim> {
    let mut v = Vec::new();
    let lat = [5.3, 2.7, 2.5];
    let tp = [1.1, 1.3, 1.2];
    let lat_s = ["5.3×", "2.7×", "2.5×"];
    let tp_s = ["1.1×", "1.3×", "1.2×"];
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::LatencyGain(m),
            text: format!("{} mean latency, best GraphB / LazyB", short(m)),
            paper: lat_s[i],
            paper_value: Some(lat[i]),
            figure: "eval",
        });
    }
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::ThroughputGain(m),
            text: format!("{} throughput, LazyB / best GraphB", short(m)),
            paper: tp_s[i],
            paper_value: Some(tp[i]),
            figure: "eval",
        });
    }
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::ThroughputAt(m),
            text: format!(
                "{} throughput at 2,000 req/s, LazyB / best GraphB (not in the paper's averages)",
                short(m)
            ),
            paper: tp_s[i],
            paper_value: Some(tp[i]),
            figure: "eval",
        });
    }
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::ThroughputWithOverload(m),
            text: format!(
                "{} throughput, LazyB / best GraphB, the average with 1,500 and 2,000 req/s (long runs)",
                short(m)
            ),
            paper: tp_s[i],
            paper_value: Some(tp[i]),
            figure: "overload",
        });
    }
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::CapacityGain(m),
            text: format!(
                "{} capacity at p99 ≤ 100 ms, LazyB / best GraphB (the throughput claim at the SLA)",
                short(m)
            ),
            paper: tp_s[i],
            paper_value: Some(tp[i]),
            figure: "capacity",
        });
    }
    v.push(Claim {
        kind: Kind::TransformerP99,
        text: "Transformer p99 at 1 K req/s, LazyB vs best GraphB".into(),
        paper: "54 vs 123 ms",
        paper_value: Some(123.0 / 54.0),
        figure: "cdf",
    });
    let zero = [("20", 20.0), ("40", 40.0), ("60", 60.0)];
    for (i, &m) in MAIN.iter().enumerate() {
        v.push(Claim {
            kind: Kind::ZeroViolation(m),
            text: format!("{} LazyB has zero SLA violations at 1 K req/s", short(m)),
            paper: ["from 20 ms", "from 40 ms", "from 60 ms"][i],
            paper_value: Some(zero[i].1),
            figure: "sla",
        });
    }
    v.push(Claim {
        kind: Kind::AvgLatency,
        text: "average latency improvement over graph batching".into(),
        paper: "15×",
        paper_value: Some(15.0),
        figure: "eval",
    });
    v.push(Claim {
        kind: Kind::AvgThroughput,
        text: "average throughput improvement".into(),
        paper: "1.5×",
        paper_value: Some(1.5),
        figure: "eval",
    });
    v.push(Claim {
        kind: Kind::AvgThroughputWithOverload,
        text: "average throughput improvement, with 1,500 and 2,000 req/s (long runs)".into(),
        paper: "1.5×",
        paper_value: Some(1.5),
        figure: "overload",
    });
    v.push(Claim {
        kind: Kind::AvgCapacity,
        text: "average throughput improvement, as capacity at p99 ≤ 100 ms".into(),
        paper: "1.5×",
        paper_value: Some(1.5),
        figure: "capacity",
    });
    v.push(Claim {
        kind: Kind::AvgSla,
        text: "average SLA satisfaction improvement, as the ratio of satisfactions".into(),
        paper: "5.5×",
        paper_value: Some(5.5),
        figure: "sla",
    });
    v.push(Claim {
        kind: Kind::AvgSlaViolations,
        text:
            "average SLA satisfaction improvement, as the ratio of violation rates (GraphB / LazyB)"
                .into(),
        paper: "5.5×",
        paper_value: Some(5.5),
        figure: "sla",
    });
    v.push(Claim {
        kind: Kind::GraphOverHalf,
        text: "GraphB configurations with > 50% SLA violations at 100 ms (the paper's operating point; GraphB alone)"
            .into(),
        paper: "two-thirds at 1 K req/s",
        paper_value: None,
        figure: "overload",
    });
    for throughput in [false, true] {
        for per_model in [false, true] {
            for every_window in [false, true] {
                v.push(Claim {
                    kind: Kind::Colo {
                        throughput,
                        per_model,
                        every_window,
                    },
                    text: format!(
                        "four co-located models: {} vs {}, GraphB with {}",
                        if throughput { "throughput" } else { "latency" },
                        if every_window {
                            "every GraphB window run"
                        } else {
                            "best GraphB"
                        },
                        if per_model {
                            "a queue per model"
                        } else {
                            "one queue"
                        }
                    ),
                    paper: if throughput { "1.8×" } else { "2.4×" },
                    paper_value: Some(if throughput { 1.8 } else { 2.4 }),
                    figure: "colocation",
                });
            }
        }
    }
    v.push(Claim {
        kind: Kind::ColoCapacity,
        text: "four co-located models: capacity at p99 ≤ 100 ms vs best GraphB".into(),
        paper: "1.8×",
        paper_value: Some(1.8),
        figure: "capacity",
    });
    for &m in MAIN {
        v.push(Claim {
            kind: Kind::VsGraph0(m),
            text: format!(
                "{} mean latency, GraphB(0) / LazyB (not in the paper)",
                short(m)
            ),
            paper: "–",
            paper_value: None,
            figure: "eval",
        });
    }
    v
}

/// Our value of a claim: a number comparable with the paper's (None: never / not measured)
/// and how it reads.
#[derive(Clone, Debug)]
pub(super) struct Value {
    pub(super) v: Option<f64>,
    pub(super) shown: String,
}

fn missing() -> Value {
    Value {
        v: None,
        shown: "–".into(),
    }
}

/// The ratios of LazyB (`lazy`) against every graph-batching window at every model and rate:
/// (latency ratios GraphB / LazyB, throughput ratios LazyB / GraphB).
pub(super) fn ratios(ctx: &Ctx, lazy: &str) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut lr, mut tr) = (Vec::new(), Vec::new());
    for &m in MAIN {
        for &w in &ctx.plan.windows {
            let g = graph_policy(w, MAX_BATCH);
            for &rate in &ctx.plan.rates {
                let a = ctx.agg(m, &g, rate, SLA_MS, COVERAGE, MAX_BATCH)?;
                let z = ctx.agg(m, lazy, rate, SLA_MS, COVERAGE, MAX_BATCH)?;
                lr.push(a.lat.0 / z.lat.0);
                tr.push(z.tp.0 / a.tp.0);
            }
        }
    }
    Ok((lr, tr))
}

/// The arithmetic mean.
pub(super) fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// SLA satisfaction (1 − violation) averaged over models, windows and targets: (the LazyB
/// reading `lazy`'s, GraphB's).
pub(super) fn satisfaction(ctx: &Ctx, lazy: &str) -> Result<(f64, f64)> {
    let (mut z, mut g) = (Vec::new(), Vec::new());
    for &m in MAIN {
        for &w in &ctx.plan.windows {
            let cg = sla_curve(ctx, m, &graph_policy(w, MAX_BATCH))?;
            let cz = sla_curve(ctx, m, lazy)?;
            g.extend(cg.iter().map(|x| 1.0 - x.1));
            z.extend(cz.iter().map(|x| 1.0 - x.1));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Ok((mean(&z), mean(&g)))
}

fn evaluate(ctx: &Ctx, kind: Kind, lazy: &str) -> Result<Value> {
    Ok(match kind {
        Kind::LatencyGain(m) => {
            let (best, l, _) = gains_of(ctx, m, MAX_BATCH, lazy)?;
            Value {
                v: Some(l),
                shown: format!("{l:.2}× (best: {})", label(&best)),
            }
        }
        Kind::ThroughputGain(m) => {
            let (_, _, t) = gains_of(ctx, m, MAX_BATCH, lazy)?;
            Value {
                v: Some(t),
                shown: format!("{t:.2}×"),
            }
        }
        Kind::ThroughputAt(m) => {
            let high = ctx.plan.overload_rates.iter().copied().fold(0.0, f64::max);
            let best = ctx.best_graph(m, &ctx.plan.rates, MAX_BATCH)?;
            match throughput_at(ctx, m, lazy, &best, high)? {
                Some((z, g)) => Value {
                    v: Some(z / g),
                    shown: format!("{:.2}× ({z:.0} vs {g:.0} req/s)", z / g),
                },
                None => missing(),
            }
        }
        Kind::ThroughputWithOverload(m) => {
            let t = throughput_with_overload(ctx, m, lazy)?;
            Value {
                v: Some(t),
                shown: format!("{t:.2}×"),
            }
        }
        Kind::AvgThroughputWithOverload => {
            let v: Vec<f64> = MAIN
                .iter()
                .map(|&m| throughput_with_overload(ctx, m, lazy))
                .collect::<Result<_>>()?;
            let g = geomean(&v);
            Value {
                v: Some(g),
                shown: format!("{g:.2}× (arithmetic mean: {:.2}×)", mean(&v)),
            }
        }
        Kind::GraphOverHalf => {
            let counts = graph_over_half(ctx)?;
            Value {
                v: None,
                shown: counts
                    .iter()
                    .map(|(r, n, all)| format!("{n} of {all} at {r}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        }
        Kind::CapacityGain(m) => capacity_value(ctx, m, lazy),
        Kind::ColoCapacity => capacity_value(ctx, COLO, lazy),
        Kind::AvgCapacity => {
            let gains: Vec<f64> = MAIN
                .iter()
                .filter_map(|&m| ctx.capacities.iter().find(|c| c.model == m))
                .filter_map(|c| c.gain_of(lazy))
                .collect();
            if gains.len() < MAIN.len() {
                missing()
            } else {
                let g = geomean(&gains);
                Value {
                    v: Some(g),
                    shown: format!("{g:.2}× (arithmetic mean: {:.2}×)", mean(&gains)),
                }
            }
        }
        Kind::TransformerP99 => {
            let m = "transformer_base";
            let best = ctx.best_graph(m, &ctx.plan.rates, MAX_BATCH)?;
            let r = ctx.plan.high_rate;
            let tz = quantile(&pooled(ctx, m, lazy, r)?, 0.99);
            let tg = quantile(&pooled(ctx, m, &best, r)?, 0.99);
            Value {
                v: Some(tg / tz),
                shown: format!("{tz:.1} vs {tg:.1} ms"),
            }
        }
        Kind::ZeroViolation(m) => match zero_from(&sla_curve(ctx, m, lazy)?) {
            Some(z) => Value {
                v: Some(z),
                shown: format!("from {z} ms"),
            },
            None => Value {
                v: None,
                shown: "never in 20–100 ms".into(),
            },
        },
        Kind::AvgLatency => {
            let (l, _) = ratios(ctx, lazy)?;
            let g = geomean(&l);
            Value {
                v: Some(g),
                shown: format!("{g:.2}× (arithmetic mean: {:.2}×)", mean(&l)),
            }
        }
        Kind::AvgThroughput => {
            let (_, t) = ratios(ctx, lazy)?;
            let g = geomean(&t);
            Value {
                v: Some(g),
                shown: format!("{g:.2}× (arithmetic mean: {:.2}×)", mean(&t)),
            }
        }
        Kind::AvgSla => {
            let (z, g) = satisfaction(ctx, lazy)?;
            Value {
                v: Some(z / g),
                shown: format!("{:.2}× ({:.1}% vs {:.1}%)", z / g, 100.0 * z, 100.0 * g),
            }
        }
        Kind::AvgSlaViolations => {
            let (z, g) = satisfaction(ctx, lazy)?;
            let (vz, vg) = (1.0 - z, 1.0 - g);
            if vz <= 0.0 {
                Value {
                    v: None,
                    shown: format!("∞ (LazyB 0% vs {:.1}%)", 100.0 * vg),
                }
            } else {
                Value {
                    v: Some(vg / vz),
                    shown: format!("{:.2}× ({:.1}% vs {:.1}%)", vg / vz, 100.0 * vg, 100.0 * vz),
                }
            }
        }
        Kind::Colo {
            throughput,
            per_model,
            every_window,
        } => match ctx.colo_gains.iter().find(|g| g.reading == lazy) {
            Some(g) => {
                let q = usize::from(per_model);
                let (x, best) = match (every_window, throughput) {
                    (false, false) => (g.best[q].1, Some(&g.best[q].0)),
                    (false, true) => (g.best[q].2, Some(&g.best[q].0)),
                    (true, false) => (g.windows[q].0, None),
                    (true, true) => (g.windows[q].1, None),
                };
                Value {
                    v: Some(x),
                    shown: match best {
                        Some(b) => format!("{x:.2}× (best: {})", label(b)),
                        None => format!("{x:.2}×"),
                    },
                }
            }
            None => missing(),
        },
        Kind::VsGraph0(m) => {
            let mut v = Vec::new();
            for &r in &ctx.plan.rates {
                let g = ctx.agg(m, "graph:0", r, SLA_MS, COVERAGE, MAX_BATCH)?;
                let z = ctx.agg(m, lazy, r, SLA_MS, COVERAGE, MAX_BATCH)?;
                v.push(g.lat.0 / z.lat.0);
            }
            let x = geomean(&v);
            Value {
                v: Some(x),
                shown: format!("{x:.2}×"),
            }
        }
    })
}

/// The LazyB reading `lazy`'s capacity gain over the best GraphB on `model` (a zoo name or
/// [`COLO`]).
fn capacity_value(ctx: &Ctx, model: &str, lazy: &str) -> Value {
    let Some(mc) = ctx.capacities.iter().find(|c| c.model == model) else {
        return missing();
    };
    match (mc.gain_of(lazy), mc.best_graph(), mc.of(lazy)) {
        (Some(g), Some((w, gc)), Some(z)) => Value {
            v: Some(g),
            shown: format!("{g:.2}× ({z:.0} vs {gc:.0} req/s; best: {})", label(w)),
        },
        _ => missing(),
    }
}

/// A claim's value, or "–" when the runs it needs were not part of this reproduction.
pub(super) fn value(ctx: &Ctx, kind: Kind, lazy: &str) -> Value {
    evaluate(ctx, kind, lazy).unwrap_or_else(|_| missing())
}

/// True when ours differs from the paper's by more than 30% (or ours never happens).
pub(super) fn differs(paper: Option<f64>, ours: &Value) -> bool {
    match (paper, ours.v) {
        (Some(p), Some(v)) => (v / p - 1.0).abs() > 0.3,
        (Some(_), None) => ours.shown != "–",
        (None, _) => false,
    }
}
