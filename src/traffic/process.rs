//! Arrival processes (`--arrivals`): the gaps between arrivals at a given mean rate.
//!
//! * `poisson`: exponential gaps (coefficient of variation 1), the paper's traffic.
//! * `gamma:CV`: gamma-distributed gaps with coefficient of variation `CV` (shape `1/CV²`,
//!   scale `1/(rate·shape)`): CV 1 is Poisson, above 1 burstier, below 1 more regular; the
//!   burstiness knob of vLLM's serving benchmark.
//! * `onoff:ON_MS:OFF_MS`: an on-off (interrupted Poisson) source for flash crowds: ON and OFF
//!   periods of exponentially distributed lengths with means `ON_MS` and `OFF_MS`, Poisson
//!   arrivals at `rate · (ON + OFF) / ON` during ON and none during OFF, so the mean rate is
//!   still `rate`. The source starts at the beginning of an ON period.
//!
//! Every process draws from the run's seeded generator only, so a seed fixes every arrival.

use crate::error::{num, Error, Result};
use rand::rngs::StdRng;
use rand_distr::{Distribution, Exp, Gamma};

/// The allowed coefficients of variation of `gamma:CV`.
pub const CV_RANGE: (f64, f64) = (0.1, 10.0);

/// The allowed mean ON and OFF periods of `onoff`, ms.
pub const PERIOD_MS_RANGE: (f64, f64) = (1e-3, 1e9);

/// An arrival process: what `--arrivals` names.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Process {
    /// Exponential gaps.
    #[default]
    Poisson,
    /// Gamma gaps with this coefficient of variation.
    Gamma {
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
    /// An on-off source.
    OnOff {
        /// Mean ON period, ms.
        on_ms: f64,
        /// Mean OFF period, ms.
        off_ms: f64,
    },
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Process::Poisson => write!(f, "poisson"),
            Process::Gamma { cv } => write!(f, "gamma:{cv}"),
            Process::OnOff { on_ms, off_ms } => write!(f, "onoff:{on_ms}:{off_ms}"),
        }
    }
}

impl std::str::FromStr for Process {
    type Err = Error;

    /// Parses `poisson`, `gamma:CV` or `onoff:ON_MS:OFF_MS`.
    fn from_str(s: &str) -> Result<Process> {
        let bad = |msg: String| Error::invalid("arrivals", msg);
        let field = |name: &str, v: &str, (lo, hi): (f64, f64)| {
            let x: f64 = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{name} must be a number, got '{v}'")))?;
            if !(x >= lo && x <= hi) {
                return Err(bad(format!(
                    "{name} must be in [{}, {}], got {}",
                    num(lo),
                    num(hi),
                    num(x)
                )));
            }
            Ok(x)
        };
        let parts: Vec<&str> = s.trim().split(':').collect();
        match parts.as_slice() {
            ["poisson"] => Ok(Process::Poisson),
            ["gamma", cv] => Ok(Process::Gamma {
                cv: field("gamma's CV", cv, CV_RANGE)?,
            }),
            ["onoff", on, off] => Ok(Process::OnOff {
                on_ms: field("onoff's ON_MS", on, PERIOD_MS_RANGE)?,
                off_ms: field("onoff's OFF_MS", off, PERIOD_MS_RANGE)?,
            }),
            _ => Err(bad(format!(
                "expected poisson, gamma:CV or onoff:ON_MS:OFF_MS, got '{s}'"
            ))),
        }
    }
}

/// The gaps of a process at a mean rate, drawn one arrival at a time.
pub(crate) enum Gaps {
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
    OnOff(Box<OnOff>),
}

/// The on-off source's state: periods' lengths, the rate while ON, and the current period.
pub(crate) struct OnOff {
    on: Exp<f64>,
    off: Exp<f64>,
    burst: Exp<f64>,
    /// When the current period ends (s); `None` before the first arrival.
    end: Option<f64>,
    is_on: bool,
}

impl Gaps {
    /// The gaps of `process` at `rate` requests/s.
    pub(crate) fn new(process: Process, rate: f64) -> Result<Gaps> {
        let e = |what: &str, r: f64| {
            Exp::new(r).map_err(|err| Error::invalid(what, format!("{err} (rate {})", num(r))))
        };
        Ok(match process {
            Process::Poisson => Gaps::Exp(e("rate", rate)?),
            Process::Gamma { cv } => {
                let shape = 1.0 / (cv * cv);
                let g = Gamma::new(shape, 1.0 / (rate * shape))
                    .map_err(|err| Error::invalid("arrivals", err.to_string()))?;
                Gaps::Gamma(g)
            }
            Process::OnOff { on_ms, off_ms } => {
                let (on, off) = (on_ms / 1e3, off_ms / 1e3);
                Gaps::OnOff(Box::new(OnOff {
                    on: e("arrivals", 1.0 / on)?,
                    off: e("arrivals", 1.0 / off)?,
                    burst: e("rate", rate * (on + off) / on)?,
                    end: None,
                    is_on: true,
                }))
            }
        })
    }

    /// The next arrival time after `t` (s).
    pub(crate) fn next(&mut self, t: f64, rng: &mut StdRng) -> f64 {
        match self {
            Gaps::Exp(d) => t + d.sample(rng),
            Gaps::Gamma(d) => t + d.sample(rng),
            Gaps::OnOff(s) => {
                let mut t = t;
                let mut end = match s.end {
                    Some(end) => end,
                    None => t + s.on.sample(rng),
                };
                loop {
                    if s.is_on {
                        // exponential gaps are memoryless: a gap that outlasts the ON period
                        // is cut at its end and drawn again in the next one
                        let next = t + s.burst.sample(rng);
                        if next <= end {
                            s.end = Some(end);
                            return next;
                        }
                        t = end;
                        end += s.off.sample(rng);
                    } else {
                        t = end;
                        end += s.on.sample(rng);
                    }
                    s.is_on = !s.is_on;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Mean and coefficient of variation of `n` gaps at `rate`.
    fn gap_stats(p: Process, rate: f64, n: usize, seed: u64) -> (f64, f64) {
        let mut g = Gaps::new(p, rate).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut t = 0.0;
        let gaps: Vec<f64> = (0..n)
            .map(|_| {
                let next = g.next(t, &mut rng);
                let gap = next - t;
                t = next;
                gap
            })
            .collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn gamma_gaps_have_the_requested_cv_and_mean() {
        for cv in [0.5, 1.0, 2.0, 4.0] {
            let (mean, got) = gap_stats(Process::Gamma { cv }, 200.0, 100_000, 7);
            assert!((got / cv - 1.0).abs() < 0.05, "CV {cv}: measured {got}");
            assert!(
                (mean * 200.0 - 1.0).abs() < 0.02,
                "CV {cv}: mean gap {mean}"
            );
        }
        let (_, cv) = gap_stats(Process::Poisson, 200.0, 100_000, 7);
        assert!((cv - 1.0).abs() < 0.05, "poisson CV {cv}");
    }

    #[test]
    fn an_on_off_source_keeps_the_mean_rate_and_comes_in_bursts() {
        // ON 20 ms, OFF 180 ms: arrivals at 10× the mean rate a tenth of the time
        let p = Process::OnOff {
            on_ms: 20.0,
            off_ms: 180.0,
        };
        let (mean, cv) = gap_stats(p, 1000.0, 100_000, 3);
        assert!((mean * 1000.0 - 1.0).abs() < 0.05, "mean gap {mean}");
        assert!(cv > 2.0, "an on-off source is bursty: CV {cv}");
    }

    #[test]
    fn an_on_off_source_starts_in_an_on_period() {
        // ON and OFF periods of 1,000 s on average, 2,000 req/s while ON: the first arrivals
        // come at once (the first 100 within 0.2 s, their gaps 0.5 ms on average), not after
        // an OFF period nor before time 0
        let p = Process::OnOff {
            on_ms: 1e6,
            off_ms: 1e6,
        };
        for seed in 0..20 {
            let mut g = Gaps::new(p, 1000.0).unwrap();
            let mut rng = StdRng::seed_from_u64(seed);
            let mut t = 0.0;
            for i in 0..100 {
                let next = g.next(t, &mut rng);
                assert!(next >= t, "seed {seed}, arrival {i}: {next} before {t}");
                t = next;
            }
            assert!(t < 0.2, "seed {seed}: the 100th arrival at {t} s");
        }
    }

    #[test]
    fn arrivals_flags_parse_and_bad_ones_say_what_is_allowed() {
        let ok = [
            ("poisson", Process::Poisson),
            ("gamma:2", Process::Gamma { cv: 2.0 }),
            (
                "onoff:50:450",
                Process::OnOff {
                    on_ms: 50.0,
                    off_ms: 450.0,
                },
            ),
        ];
        for (s, p) in ok {
            assert_eq!(s.parse::<Process>().unwrap(), p);
            assert_eq!(p.to_string(), s, "round trip");
        }
        for (s, says) in [
            ("gamma:0", "gamma's CV must be in [0.1, 10]"),
            ("gamma:x", "must be a number"),
            ("gamma:NaN", "must be in"),
            (
                "onoff:50",
                "expected poisson, gamma:CV or onoff:ON_MS:OFF_MS",
            ),
            ("onoff:0:5", "ON_MS must be in"),
            ("bursty", "expected poisson"),
        ] {
            let e = s.parse::<Process>().unwrap_err().to_string();
            assert!(
                e.starts_with("invalid arrivals: ") && e.contains(says),
                "{s}: {e}"
            );
        }
    }
}
