//! Request traffic: seeded arrivals at a mean rate (`--rate`) from an arrival process
//! (`--arrivals`: Poisson, gamma gaps of a given CV, an on-off source; see [`process`]) with
//! lengths drawn from the WMT19 joint histogram for seq2seq models, or an arrival trace file
//! (`--trace`).

pub mod classes;
pub mod lengths;
pub mod process;

use crate::error::{Error, Result};
use crate::graph::{Lengths, Model, SeqConfig};
use crate::time::Nanos;
use crate::traffic::lengths::{draw, JointLengths};
use classes::ClassPicker;
pub use classes::Classes;
use process::Gaps;
pub use process::Process;
use rand::rngs::StdRng;
use rand::SeedableRng;
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
    /// Its SLA class (`--classes`; 0 without classes).
    pub class: u8,
    /// The key a front end exchanges its input and outputs under
    /// ([`crate::device::exchange::Exchange`]); None: its request id.
    pub key: Option<u64>,
}

/// The most requests a run takes (ids are 32-bit; a run of 10⁹ simulated requests takes
/// minutes).
pub const MAX_REQUESTS: usize = 1_000_000_000;

/// Arrival rates a run accepts, requests/s: from one per ~11.6 days to 10⁹.
pub const RATE_RANGE: (f64, f64) = (1e-6, 1e9);

/// A run's arrivals as a stream, generated as the engine asks for them (memory independent of
/// the run's length), with how many there will be.
pub struct Traffic {
    /// The arrivals, sorted by time.
    pub arrivals: Box<dyn Iterator<Item = Arrival> + Send>,
    /// How many it yields.
    pub expected: usize,
    /// Its mean rate (requests/s): the generated traffic's, or a list's gaps' (its arrivals
    /// after the first over the time from the first to the last; 0 when they all arrive at
    /// once).
    pub rate: f64,
}

impl Traffic {
    /// Traffic from a list of arrivals sorted by time (a trace).
    pub fn from_list(list: Vec<Arrival>) -> Traffic {
        let span = match (list.first(), list.last()) {
            (Some(a), Some(b)) => (b.time - a.time).as_secs(),
            (None, _) | (_, None) => 0.0,
        };
        let expected = list.len();
        Traffic {
            // a trace that starts late is not slow: the rate is its gaps', not n / last
            rate: if span > 0.0 {
                (expected - 1) as f64 / span
            } else {
                0.0
            },
            arrivals: Box::new(list.into_iter()),
            expected,
        }
    }
}

/// How each arrival gets its lengths, and for co-located models its model and SLA.
enum Fill {
    /// Static models: {1, 1}.
    Fixed,
    /// One seq2seq model: lengths from its distribution.
    Seq {
        joint: JointLengths,
        seq: SeqConfig,
        rng: Box<StdRng>,
    },
    /// Co-located models.
    Parts(Box<PartsFill>),
}

/// A draw among weighted choices: the cumulative weights of every choice but the last, so that
/// a draw `x` in `[0, Σ weights)` picks the choice whose interval holds it, and the last choice
/// whatever lies above the other bounds (with no index to fall back on when a sum's rounding
/// leaves `x` past them all).
pub(crate) struct Weighted {
    bounds: Vec<f64>,
}

impl Weighted {
    /// The choices of `weights` (each positive).
    pub(crate) fn new(weights: &[f64]) -> Weighted {
        let but_last = weights.split_last().map_or(&[][..], |(_, rest)| rest);
        let mut acc = 0.0;
        Weighted {
            bounds: but_last
                .iter()
                .map(|w| {
                    acc += w;
                    acc
                })
                .collect(),
        }
    }

    /// The choice whose interval holds `x`: how many bounds lie at or below it.
    pub(crate) fn pick(&self, x: f64) -> usize {
        self.bounds.partition_point(|&b| b <= x)
    }
}

/// Co-located models: model `k` with probability `rates[k] / total`, its SLA, its lengths
/// (from its own distribution, `joints[k]`; None for a model without a decoder).
struct PartsFill {
    joints: Vec<Option<JointLengths>>,
    models: Weighted,
    total: f64,
    slas: Vec<Nanos>,
    seqs: Vec<Option<SeqConfig>>,
    pick: StdRng,
    rng: StdRng,
}

impl Fill {
    fn fill(&mut self, a: &mut Arrival) {
        match self {
            Fill::Fixed => a.len = Lengths { enc: 1, dec: 1 },
            Fill::Seq { joint, seq, rng } => a.len = draw(joint, seq, &mut **rng),
            Fill::Parts(p) => {
                let PartsFill {
                    joints,
                    models,
                    total,
                    slas,
                    seqs,
                    pick,
                    rng,
                } = &mut **p;
                let k = models.pick(rand::Rng::random_range(pick, 0.0..*total));
                a.part = k as u16;
                a.sla = Some(slas[k]);
                a.len = match (&seqs[k], &joints[k]) {
                    (Some(seq), Some(joint)) => draw(joint, seq, rng),
                    (None, _) | (_, None) => Lengths { enc: 1, dec: 1 },
                };
            }
        }
    }
}

/// Generated arrivals, drawn one at a time: the process's gaps at the rate from one seeded
/// stream, lengths (and models) from others, so that the n-th arrival is the same whoever asks.
pub struct Generated {
    gaps: Gaps,
    classes: Option<ClassPicker>,
    rng: StdRng,
    t: f64,
    left: usize,
    fill: Fill,
}

impl Iterator for Generated {
    type Item = Arrival;
    fn next(&mut self) -> Option<Arrival> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.t = self.gaps.next(self.t, &mut self.rng);
        let mut a = Arrival {
            time: Nanos::from_secs(self.t),
            ..Arrival::default()
        };
        self.fill.fill(&mut a);
        if let Some(c) = &mut self.classes {
            let (class, sla) = c.pick();
            (a.class, a.sla) = (class, Some(sla));
        }
        Some(a)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl Generated {
    /// `n` arrivals of `process` at `rate`, deterministic for `seed`, each completed by `fill`.
    fn new(process: Process, rate: f64, n: usize, seed: u64, fill: Fill) -> Result<Generated> {
        check_rate("rate", rate)?;
        if n == 0 || n > MAX_REQUESTS {
            return Err(Error::invalid(
                "requests",
                format!("must be in [1, {MAX_REQUESTS}], got {n}"),
            ));
        }
        // the run must fit the engine's time horizon with a wide margin (the n-th arrival of
        // these processes is within a few √n gaps, or ON/OFF periods, of n / rate)
        let span = n as f64 / rate;
        if span > Nanos::HORIZON.as_secs() / 2.0 {
            return Err(Error::invalid(
                "requests",
                format!(
                    "{n} requests at {rate} req/s take {:.3e} s, longer than lazybatch measures ({:.3e} s): raise the rate or lower the count",
                    span,
                    Nanos::HORIZON.as_secs() / 2.0
                ),
            ));
        }
        Ok(Generated {
            gaps: Gaps::new(process, rate)?,
            classes: None,
            rng: StdRng::seed_from_u64(seed),
            t: 0.0,
            left: n,
            fill,
        })
    }

    /// The same arrivals, each given a class of `classes` (and its SLA), drawn from a stream of
    /// its own for `seed`.
    pub fn with_classes(self, classes: &Classes, seed: u64) -> Generated {
        Generated {
            classes: Some(ClassPicker::new(classes, seed)),
            ..self
        }
    }

    /// As a [`Traffic`].
    pub fn traffic(self, rate: f64) -> Traffic {
        Traffic {
            expected: self.left,
            rate,
            arrivals: Box::new(self),
        }
    }
}

/// Checks an arrival rate against [`RATE_RANGE`]; `what` names the setting.
pub fn check_rate(what: &str, rate: f64) -> Result<f64> {
    let (lo, hi) = RATE_RANGE;
    if !(rate >= lo && rate <= hi) {
        return Err(Error::invalid(
            what,
            format!(
                "must be in [{lo:e}, {hi:e}] requests/s, got {}",
                crate::error::num(rate)
            ),
        ));
    }
    Ok(rate)
}

/// `n` arrivals of `process` at a mean `rate` requests per second, deterministic for `seed`.
pub fn generate(
    model: &Model,
    (process, rate): (Process, f64),
    n: usize,
    seed: u64,
) -> Result<Generated> {
    let fill = match &model.seq {
        Some(seq) => Fill::Seq {
            joint: JointLengths::for_seq(seq)?,
            seq: seq.clone(),
            rng: Box::new(StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15)),
        },
        None => Fill::Fixed,
    };
    Generated::new(process, rate, n, seed, fill)
}

/// `n` arrivals for co-located models: part `k` of `model` receives `rates[k]` req/s and has
/// SLA `slas[k]`. One process at the total rate, each arrival given to part `k` with
/// probability `rates[k] / Σ rates` (for Poisson, the superposition of independent Poisson
/// processes; a bursty process's bursts are shared by every model).
pub fn generate_parts(
    model: &Model,
    process: Process,
    (rates, slas): (&[f64], &[Nanos]),
    n: usize,
    seed: u64,
) -> Result<Generated> {
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
    for &r in rates {
        check_rate("rate", r)?;
    }
    let total: f64 = rates.iter().sum();
    let joints = model
        .parts
        .iter()
        .map(|p| p.seq.as_ref().map(JointLengths::for_seq).transpose())
        .collect::<Result<Vec<_>>>()?;
    let fill = Fill::Parts(Box::new(PartsFill {
        joints,
        models: Weighted::new(rates),
        total,
        slas: slas.to_vec(),
        seqs: model.parts.iter().map(|p| p.seq.clone()).collect(),
        pick: StdRng::seed_from_u64(seed ^ 0x51ce_0f00_d5ee_d000),
        rng: StdRng::seed_from_u64(seed ^ 0x2545_f491_4f6c_dd1d),
    }));
    Generated::new(process, total, n, seed, fill)
}

/// Reads a trace: one arrival per line, `TIME_MS [ENC OUT]` (ENC the source's model steps, OUT
/// the output tokens — the decoder steps, or one more where the model's prefill emits the
/// first token —, within the model's maxima and its `max_context`; drawn from the model's
/// length distribution with `seed` when absent); `#` starts a comment. Times must not decrease
/// and must lie within the engine's horizon ([`Nanos::HORIZON`]).
pub fn load_trace(path: &Path, model: &Model, seed: u64) -> Result<Traffic> {
    let text = crate::files::read_text(path, crate::files::TRACE)?;
    parse_trace(&text, path, model, seed)
}

/// [`load_trace`] on a trace's text (`path` names it in errors).
pub fn parse_trace(text: &str, path: &Path, model: &Model, seed: u64) -> Result<Traffic> {
    parse_at_most(text, (path, model, seed), MAX_REQUESTS)
}

/// [`parse_trace`], refusing the trace at its arrival `max + 1` (a test's bound: a trace of
/// [`MAX_REQUESTS`] arrivals holds some 50 GB before it is refused).
fn parse_at_most(
    text: &str,
    (path, model, seed): (&Path, &Model, u64),
    max: usize,
) -> Result<Traffic> {
    let mut fill = match &model.seq {
        Some(seq) => Fill::Seq {
            joint: JointLengths::for_seq(seq)?,
            seq: seq.clone(),
            rng: Box::new(StdRng::seed_from_u64(seed)),
        },
        None => Fill::Fixed,
    };
    let (max_enc, max_dec) = model
        .seq
        .as_ref()
        .map_or((1, 1), |s| (s.max_enc, s.max_dec));
    // output tokens: the decoder steps, one more where the prefill emits the first
    let first = model.seq.as_ref().map_or(0, |s| u32::from(s.prefill_token));
    let context = model.seq.as_ref().and_then(|s| s.max_context);
    let horizon_ms = Nanos::HORIZON.as_ms();
    let mut out = Vec::new();
    let mut last = 0.0f64;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |msg: String| Error::ConfigFile {
            file: path.to_path_buf(),
            line: i + 1,
            msg,
        };
        if out.len() == max {
            return Err(bad(format!("more than {max} arrivals")));
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let t: f64 = f[0].parse().map_err(|_| {
            bad(format!(
                "TIME_MS: expected an arrival time in ms, got '{}'",
                f[0]
            ))
        })?;
        if !(0.0..=horizon_ms).contains(&t) {
            return Err(bad(format!(
                "TIME_MS: must be in [0, {horizon_ms:.0}] ms (100 years: the clock's horizon, which the run must also end within), got {}",
                crate::error::num(t)
            )));
        }
        if t < last {
            return Err(bad(format!(
                "TIME_MS: arrival times must not decrease ({t} after {last})"
            )));
        }
        last = t;
        let mut a = Arrival {
            time: Nanos::from_ms(t),
            ..Arrival::default()
        };
        match f.len() {
            1 => fill.fill(&mut a),
            3 => {
                let step = |s: &str, what: &str, max: u32| {
                    s.parse::<u32>()
                        .ok()
                        .filter(|&x| (1..=max).contains(&x))
                        .ok_or_else(|| {
                            bad(format!(
                                "{what}: must be an integer in [1, {max}] (the model's maximum), got '{s}'"
                            ))
                        })
                };
                let enc = step(f[1], "ENC", max_enc)?;
                let out = f[2]
                    .parse::<u32>()
                    .ok()
                    .filter(|&x| (1 + first..=max_dec + first).contains(&x))
                    .ok_or_else(|| {
                        bad(format!(
                            "OUT: must be an integer in [{}, {}] (the model's output tokens), got '{}'",
                            1 + first,
                            max_dec + first,
                            f[2]
                        ))
                    })?;
                if let Some(c) = context.filter(|&c| enc + out > c) {
                    return Err(bad(format!(
                        "ENC + OUT: {enc} + {out} exceeds the model's context of {c} tokens"
                    )));
                }
                a.len = Lengths {
                    enc,
                    dec: out - first,
                };
            }
            _ => return Err(bad("expected TIME_MS or TIME_MS ENC OUT".into())),
        }
        out.push(a);
    }
    if out.is_empty() {
        return Err(Error::ConfigFile {
            file: path.to_path_buf(),
            line: 0,
            msg: "the trace has no arrivals".into(),
        });
    }
    Ok(Traffic::from_list(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::zoo;

    /// The (model, lengths) of `n` arrivals of `model` at 100 req/s for `seed`, co-located
    /// at rates 1:3 when `model` is composed.
    fn draws(model: &Model, n: usize, seed: u64) -> Vec<(u16, Lengths)> {
        let g = if model.parts.len() > 1 {
            let slas = [Nanos::from_ms(50.0), Nanos::from_ms(80.0)];
            generate_parts(model, Process::Poisson, (&[25.0, 75.0], &slas), n, seed)
        } else {
            generate(model, (Process::Poisson, 100.0), n, seed)
        };
        g.unwrap().map(|a| (a.part, a.len)).collect()
    }

    #[test]
    fn each_seed_draws_its_own_lengths_and_models() {
        // seeds that differ in one low bit, or in bit 12, draw different requests (a seed
        // mixed into a stream's by `|` or `&` instead of `^` would map some to one stream)
        let one = zoo::load("gnmt").unwrap();
        let two = Model::compose(vec![zoo::load("gnmt").unwrap(), zoo::load("las").unwrap()]);
        // two copies of one model: their lengths come from the lengths' stream alone, whatever
        // the model picks
        let twins = Model::compose(vec![zoo::load("gnmt").unwrap(), zoo::load("gnmt").unwrap()]);
        for m in [&one, &two, &twins] {
            let seeds = [0, 1, 2, 3, 0x1000, 0x3000];
            let all: Vec<_> = seeds.iter().map(|&s| draws(m, 200, s)).collect();
            let lens = |k: usize| all[k].iter().map(|d| d.1).collect::<Vec<_>>();
            let parts = |k: usize| all[k].iter().map(|d| d.0).collect::<Vec<_>>();
            for i in 0..seeds.len() {
                assert_eq!(all[i], draws(m, 200, seeds[i]), "seed {} repeats", seeds[i]);
                for j in 0..i {
                    assert_ne!(lens(i), lens(j), "seeds {} and {}", seeds[i], seeds[j]);
                    if m.parts.len() > 1 {
                        assert_ne!(parts(i), parts(j), "seeds {} and {}", seeds[i], seeds[j]);
                    }
                }
            }
        }
        // co-located at 1:3, each model gets its share (within 5 standard errors of 20,000
        // draws) and its own lengths: LAS's are six characters a word, GNMT's one step a word
        let d = draws(&two, 20_000, 7);
        let las = d.iter().filter(|x| x.0 == 1).count() as f64 / 20_000.0;
        assert!(
            (las - 0.75).abs() < 5.0 * (0.75f64 * 0.25 / 20_000.0).sqrt(),
            "{las}"
        );
        let mean = |part: u16| {
            let v: Vec<f64> = d
                .iter()
                .filter(|x| x.0 == part)
                .map(|x| f64::from(x.1.dec))
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        assert!(mean(1) > 4.0 * mean(0), "GNMT {} LAS {}", mean(0), mean(1));
    }

    #[test]
    fn co_located_traffic_needs_a_rate_and_an_sla_for_each_model() {
        let two = Model::compose(vec![zoo::load("gnmt").unwrap(), zoo::load("las").unwrap()]);
        let sla = Nanos::from_ms(50.0);
        for (rates, slas, counts) in [
            (&[1.0][..], &[sla, sla][..], "1 rates and 2 SLAs"),
            (&[1.0, 1.0][..], &[sla][..], "2 rates and 1 SLAs"),
        ] {
            let e = generate_parts(&two, Process::Poisson, (rates, slas), 10, 1)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(&format!("2 models but {counts}")), "{e}");
        }
        assert!(generate_parts(&two, Process::Poisson, (&[1.0, 1.0], &[sla, sla]), 10, 1).is_ok());
    }

    #[test]
    fn a_weighted_draw_picks_the_interval_that_holds_it() {
        // weights 1, 2, 1: [0, 1) the first, [1, 3) the second, [3, 4) and past it the last
        let w = Weighted::new(&[1.0, 2.0, 1.0]);
        let x = [0.0, 0.999, 1.0, 2.999, 3.0, 3.999, 4.5];
        assert_eq!(x.map(|x| w.pick(x)), [0, 0, 1, 1, 2, 2, 2]);
        assert_eq!(Weighted::new(&[5.0]).pick(4.9), 0);
    }

    #[test]
    fn generated_traffic_knows_how_many_arrivals_are_left() {
        let m = zoo::load("resnet50").unwrap();
        let mut g = generate(&m, (Process::Poisson, 100.0), 5, 1).unwrap();
        assert_eq!(g.size_hint(), (5, Some(5)));
        g.next();
        g.next();
        assert_eq!(g.size_hint(), (3, Some(3)));
        assert_eq!(g.by_ref().count(), 3);
        assert_eq!(g.size_hint(), (0, Some(0)));
        let t = generate(&m, (Process::Poisson, 100.0), 7, 1)
            .unwrap()
            .traffic(100.0);
        assert_eq!((t.expected, t.rate), (7, 100.0));
        assert_eq!(t.arrivals.count(), 7);
    }

    #[test]
    fn a_trace_takes_equal_times_and_a_request_that_fills_the_context_exactly() {
        let gpt2 = zoo::load("gpt2").unwrap();
        let p = Path::new("t.trace");
        // two arrivals at once are a burst, not a decreasing time
        let t = parse_trace("5\n5\n7 # later\n", p, &gpt2, 1).unwrap();
        let at: Vec<Nanos> = t.arrivals.map(|a| a.time).collect();
        assert_eq!(
            at,
            [
                Nanos::from_ms(5.0),
                Nanos::from_ms(5.0),
                Nanos::from_ms(7.0)
            ]
        );
        let e = parse_trace("5\n4.5\n", p, &gpt2, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("t.trace:2: ") && e.contains("must not decrease"),
            "{e}"
        );
        // output tokens: the decoder's 1 to 1,022 steps and the prefill's token, [2, 1023]
        let t = parse_trace("0 1 2\n0 1 1023\n", p, &gpt2, 1).unwrap();
        let len = t.arrivals.map(|a| a.len.dec).collect::<Vec<_>>();
        assert_eq!(len, [1, 1022]);
        for out in [1, 1024] {
            let e = parse_trace(&format!("0 1 {out}\n"), p, &gpt2, 1)
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("OUT: must be an integer in [2, 1023] (the model's output tokens)"),
                "{e}"
            );
        }
        // prompt + output tokens = the context (1,024) is taken; one more is not
        let t = parse_trace("0 1000 24\n", p, &gpt2, 1).unwrap();
        let len = t.arrivals.map(|a| a.len).collect::<Vec<_>>();
        assert_eq!(len, [Lengths { enc: 1000, dec: 23 }]);
        let e = parse_trace("0 1000 25\n", p, &gpt2, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("1000 + 25 exceeds the model's context of 1024"),
            "{e}"
        );
    }

    #[test]
    fn a_trace_is_refused_at_its_first_arrival_past_the_most_a_run_takes() {
        let m = zoo::load("resnet50").unwrap();
        let p = Path::new("t.trace");
        let text = "0\n1\n# a comment\n\n2\n3\n";
        let e = parse_at_most(text, (p, &m, 1), 3)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, "t.trace:6: more than 3 arrivals");
        let t = parse_at_most(text, (p, &m, 1), 4).unwrap();
        assert_eq!(t.expected, 4);
    }

    #[test]
    fn a_lists_rate_is_its_gaps_whenever_it_starts() {
        let at = |s: &[f64]| {
            let list = s
                .iter()
                .map(|&t| Arrival {
                    time: Nanos::from_secs(t),
                    ..Arrival::default()
                })
                .collect();
            Traffic::from_list(list).rate
        };
        // 11 arrivals 0.2 s apart: 5 req/s (10 gaps over 2 s, not 10 × 2 nor 11 / 2), from
        // time 0 or from an hour in
        let fifth: Vec<f64> = (0..11).map(|i| f64::from(i) / 5.0).collect();
        assert!((at(&fifth) - 5.0).abs() < 1e-9, "{}", at(&fifth));
        let late: Vec<f64> = fifth.iter().map(|t| t + 3600.0).collect();
        assert!((at(&late) - 5.0).abs() < 1e-6, "{}", at(&late));
        // one arrival, or all at once: no rate
        assert_eq!(at(&[5.0]), 0.0);
        assert_eq!(at(&[2.0, 2.0]), 0.0);
        assert_eq!(at(&[]), 0.0);
    }
}
