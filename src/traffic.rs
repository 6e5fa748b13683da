//! Request traffic: seeded Poisson arrivals (`--rate`) with lengths drawn from the WMT19 joint
//! histogram for seq2seq models, or an arrival trace file (`--trace`).

use crate::error::{Error, Result};
use crate::graph::{Lengths, Model};
use crate::lengths::{draw, JointLengths};
use crate::time::Nanos;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use std::path::Path;

/// One arrival: when, the request's actual lengths (model steps), and for co-located models
/// which model it is for and its SLA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Arrival time from the start of the run.
    pub time: Nanos,
    /// Actual lengths ({1, 1} for static models).
    pub len: Lengths,
    /// The model (part of a composed model) it is for; 0 for a single model.
    pub part: u16,
    /// Its SLA when it differs from the run's.
    pub sla: Option<Nanos>,
}

fn length_source(model: &Model) -> Result<Option<JointLengths>> {
    model
        .seq
        .as_ref()
        .map(|_| JointLengths::wmt19())
        .transpose()
}

fn draw_len(model: &Model, joint: &Option<JointLengths>, rng: &mut StdRng) -> Lengths {
    match (&model.seq, joint) {
        (Some(seq), Some(j)) => draw(j, seq, rng),
        _ => Lengths { enc: 1, dec: 1 },
    }
}

/// `n` Poisson arrival times at `rate` requests per second, deterministic for `seed`; `fill`
/// completes each arrival (lengths, model) in order.
fn arrivals(
    rate: f64,
    n: usize,
    seed: u64,
    mut fill: impl FnMut(&mut Arrival),
) -> Result<Vec<Arrival>> {
    if !(rate > 0.0 && rate.is_finite()) {
        return Err(Error::invalid(
            "rate",
            format!("must be a positive number of requests/s, got {rate}"),
        ));
    }
    if n == 0 {
        return Err(Error::invalid("requests", "must be at least 1"));
    }
    let exp = Exp::new(rate).map_err(|e| Error::invalid("rate", e.to_string()))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        t += exp.sample(&mut rng);
        let mut a = Arrival {
            time: Nanos::from_secs(t),
            ..Arrival::default()
        };
        fill(&mut a);
        out.push(a);
    }
    Ok(out)
}

/// `n` Poisson arrivals at `rate` requests per second, deterministic for `seed`.
pub fn poisson(model: &Model, rate: f64, n: usize, seed: u64) -> Result<Vec<Arrival>> {
    let mut len_rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let joint = length_source(model)?;
    arrivals(rate, n, seed, |a| {
        a.len = draw_len(model, &joint, &mut len_rng)
    })
}

/// `n` Poisson arrivals for co-located models: part `k` of `model` receives `rates[k]` req/s
/// and has SLA `slas[k]`. One process at the total rate, each arrival given to part `k` with
/// probability `rates[k] / Σ rates` (the superposition of independent Poisson processes).
pub fn poisson_parts(
    model: &Model,
    rates: &[f64],
    slas: &[Nanos],
    n: usize,
    seed: u64,
) -> Result<Vec<Arrival>> {
    if rates.len() != model.parts.len() || slas.len() != model.parts.len() {
        return Err(Error::invalid(
            "co-location",
            format!(
                "{} models but {} rates and {} SLAs",
                model.parts.len(),
                rates.len(),
                slas.len()
            ),
        ));
    }
    if rates.iter().any(|r| !(*r > 0.0 && r.is_finite())) {
        return Err(Error::invalid(
            "rate",
            "every model's rate must be positive",
        ));
    }
    let total: f64 = rates.iter().sum();
    let joint = JointLengths::wmt19()?;
    let mut pick = StdRng::seed_from_u64(seed ^ 0x51ce_0f00_d5ee_d000);
    let mut len_rng = StdRng::seed_from_u64(seed ^ 0x2545_f491_4f6c_dd1d);
    arrivals(total, n, seed, |a| {
        let x: f64 = rand::Rng::random_range(&mut pick, 0.0..total);
        let mut acc = 0.0;
        let mut k = rates.len() - 1;
        for (i, r) in rates.iter().enumerate() {
            acc += r;
            if x < acc {
                k = i;
                break;
            }
        }
        a.part = k as u16;
        a.sla = Some(slas[k]);
        a.len = match &model.parts[k].seq {
            Some(seq) => draw(&joint, seq, &mut len_rng),
            None => Lengths { enc: 1, dec: 1 },
        };
    })
}

/// Reads a trace: one arrival per line, `TIME_MS [ENC DEC]` (lengths in model steps; drawn from
/// WMT19 with `seed` when absent); `#` starts a comment. Times must not decrease.
pub fn load_trace(path: &Path, model: &Model, seed: u64) -> Result<Vec<Arrival>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let joint = length_source(model)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut last = 0.0f64;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |msg: &str| Error::ConfigFile {
            file: path.to_path_buf(),
            line: i + 1,
            msg: msg.to_string(),
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let t: f64 = f[0]
            .parse()
            .map_err(|_| bad("expected an arrival time in ms"))?;
        if !t.is_finite() || t < 0.0 {
            return Err(bad("arrival time must be ≥ 0"));
        }
        if t < last {
            return Err(bad("arrival times must not decrease"));
        }
        last = t;
        let len = match f.len() {
            1 => draw_len(model, &joint, &mut rng),
            3 => {
                let p = |s: &str| s.parse::<u32>().ok().filter(|&x| x > 0);
                match (p(f[1]), p(f[2])) {
                    (Some(enc), Some(dec)) => Lengths { enc, dec },
                    _ => return Err(bad("lengths must be positive integers (ENC DEC)")),
                }
            }
            _ => return Err(bad("expected TIME_MS or TIME_MS ENC DEC")),
        };
        out.push(Arrival {
            time: Nanos::from_ms(t),
            len,
            ..Arrival::default()
        });
    }
    if out.is_empty() {
        return Err(Error::ConfigFile {
            file: path.to_path_buf(),
            line: 0,
            msg: "the trace has no arrivals".into(),
        });
    }
    Ok(out)
}
