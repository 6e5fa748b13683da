//! `auto`: the policy for the user who does not want to tune (our extension, not the paper's).
//! It serves with one of the other policies at a time — its candidates, [`CANDIDATES`] — and
//! keeps choosing among them by serving the recent past again on the device's own latency
//! table, in virtual time:
//!
//! * **What it remembers**: the last [`WINDOW`] arrivals: arrival time, encoder length, the
//!   request's SLA, and a decoder length drawn (from a fixed seed) from the profiled
//!   output-length distribution that sets the predictor's `dec_timesteps` — what the server
//!   knows of a request before it runs, never its actual output length. With the predictor's
//!   one length for every request instead, the window cannot show what `continuous` gains by
//!   letting each request leave at its own length: on the Transformer's H200 table at 0.9 ×
//!   Serial's capacity (gamma CV 4, 4 seeds × 600 requests) `auto` stayed 1.25× `continuous`'s
//!   mean; with drawn lengths, 1.06×.
//! * **When it chooses**: after the first [`FIRST`] arrivals, then after every [`PERIOD`]
//!   more, doubled after every choice that keeps the serving candidate once the window is
//!   whole, up to [`MAX_PERIOD`], and back to [`PERIOD`] after a change. Until the first
//!   choice it serves as the first candidate, `lazy:adaptive` (the peer that met the goal at
//!   the most points of the dominance grid). A first choice after 16 arrivals chose on
//!   windows too short to tell: on GNMT's H100 table at 4 × (gamma CV 4) it picked
//!   `continuous`, whose backlog the next choice then waited on; after 64, it does not.
//! * **How it chooses**: every candidate serves the remembered arrivals from an empty server on
//!   a table device built from the predictor's table (the one the slack gate reads: the NPU
//!   model's own, the `--device profile:` file, or the real device's measured table), each
//!   from the same start. Each candidate's *regret* is the larger of its mean latency over the
//!   best candidate's mean and its p99 over the best p99; the candidate of least regret serves
//!   from then on, unless the serving one's regret is within [`SWITCH_MARGIN`] of it (ties go
//!   to the earlier in [`CANDIDATES`]). These are the two figures the dominance grid holds
//!   `auto` to (`reproduce --figures dominance`). The window is served twice back to back
//!   and scored on the second copy: it then starts from the backlog the candidate itself left,
//!   which near saturation is what sets the latency (served once from an empty server, the
//!   H200 ResNet-50 f16 table at 4 × Serial's capacity ranked `lazy:adaptive` with `graph:0`
//!   and `auto` came out 1.13× `graph:0`'s mean; served twice, 1.03×).
//! * **Whom it serves**: every [`FULL_EVERY`]th choice serves every candidate; the others
//!   serve only the serving one, the runner-up and the contenders (regret at most
//!   [`CONTENDER`] when last served): the cost of choosing, which near 10× cut `auto`'s own
//!   run time.
//! * **How it switches**: a fresh instance of the chosen policy takes over — at once when it
//!   never preempts (a graph batcher or Serial lets what stands finish, as it would its own
//!   batch), else when the BatchTable is next empty (a preempting one handed sub-batches it did
//!   not schedule stacked newcomers on them: a request waited 32 ms on the H200 table at 2 ×,
//!   against 6.5 ms at most under either policy alone), or once [`PERIOD`] arrivals have
//!   come since the choice (a server past saturation may never empty). `auto` reports itself as a policy
//!   that may preempt and interleave, and answers for the serving one as the engine would:
//!   `Run` while a non-preempting one's batch is in flight.
//!
//! What it costs: each choice serves twice [`WINDOW`] requests under each contender, in virtual
//! time: free in a simulated run, but on a real device it runs on the engine's thread between
//! two nodes, and the requests in the server wait for it (a full choice on ResNet-50 takes
//! milliseconds of CPU; `docs/policies.md` has the measurement). One model only (its
//! candidates include `lazy:adaptive`).

use super::spec::{Entry, ParamError, Parsed, Spec};
use super::{Decision, Policy, View};
use crate::device::table::TableDevice;
use crate::device::Device;
use crate::engine::{self, Setup};
use crate::runtime::{MaxBatch, RequestId};
use crate::time::{Nanos, Sla, VirtualClock};
use crate::traffic::Arrival;
use std::collections::VecDeque;

/// The policies `auto` chooses among, in the order that breaks ties: the peers the dominance
/// grid holds it against.
pub const CANDIDATES: &[&str] = &[
    "lazy:adaptive",
    "graph:0",
    "serial",
    "graph:5",
    "graph:25",
    "graph:50",
    "continuous",
    "dva:25:5",
    "lazy",
];
/// Arrivals it remembers and serves again to choose.
pub const WINDOW: usize = 256;
/// Arrivals before its first choice.
pub const FIRST: usize = 64;
/// Arrivals between two choices after a change of mind; each choice that keeps the serving
/// candidate doubles it, up to [`MAX_PERIOD`].
pub const PERIOD: usize = 64;
/// The serving candidate keeps serving unless its regret exceeds the best's by this factor.
pub const SWITCH_MARGIN: f64 = 1.02;
/// The longest wait between two choices, in arrivals.
pub const MAX_PERIOD: usize = 1024;
/// Every this many choices, every candidate serves the window; in between, only the serving
/// one and the contenders.
pub const FULL_EVERY: u64 = 4;
/// A contender: a candidate whose regret at its last serving of the window was at most this.
pub const CONTENDER: f64 = 1.25;

/// `auto` as a token bound serves it: scored on TTFT and TPOT p99 ([`Objective::Tokens`]).
pub const FOR_TOKENS: &str = "auto:tokens";

/// `policy` as searched under a token bound (`capacity --ttft-p99-ms/--tpot-p99-ms`, the
/// dominance grid's GPT-2 SLOs): `auto` becomes [`FOR_TOKENS`], as the SLA-aware policies'
/// deadline comes from the bound; every other policy is itself.
pub fn under_token_bound(policy: &str) -> &str {
    if policy == "auto" {
        FOR_TOKENS
    } else {
        policy
    }
}

/// The candidate `auto:tokens` serves with until its first choice: `continuous`, the policy
/// LLM servers run. `lazy:adaptive`, `auto`'s first, starves newcomers (GPT-2 on the default
/// NPU configuration under the tight token SLO: capacity 0.2 req/s against `continuous`'s
/// 16.5), and its first arrivals (64 before the first choice, up to 64 more before a
/// preempting successor takes over a table that never empties) set the p99 time to first
/// token of a 5,000-request probe: `auto:tokens` starting as `lazy:adaptive` chose
/// `continuous` at every choice and still reached only 10.9 req/s.
const FIRST_FOR_TOKENS: &str = "continuous";

/// The seed of the decoder lengths drawn for the remembered requests.
const OUTPUT_SEED: u64 = 0x6175_746f;

/// `auto` or `auto:tokens`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["auto"],
    variant: None,
    usage: "auto[:tokens]",
    examples: &["auto"],
    parse,
};

/// The two figures a candidate is scored on over the window; its regret is the larger of
/// its two ratios to the best candidate's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Objective {
    /// Mean and p99 latency, end to end (`auto`): what the dominance grid holds it to.
    Latency,
    /// p99 time to first token and p99 time per output token (`auto:tokens`): an LLM
    /// service's SLO (`capacity --ttft-p99-ms --tpot-p99-ms` serves `auto` as this). On a
    /// model without a decoder the run has no token figures, and it scores as `auto`.
    Tokens,
}

fn parse(_: &str, params: &[&str], default_max: u32) -> std::result::Result<Parsed, ParamError> {
    let objective = match params {
        [] => Objective::Latency,
        ["tokens"] => Objective::Tokens,
        _ => {
            return Err(format!(
                "takes no parameter, or `tokens` (score on TTFT and TPOT p99), got `{}`",
                params.join(":")
            )
            .into())
        }
    };
    let candidates = CANDIDATES
        .iter()
        .map(|c| Spec::parse(c, default_max).map_err(|e| ParamError(e.to_string())))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Parsed {
        build: std::sync::Arc::new(move |_| Box::new(Auto::new(candidates.clone(), objective))),
        uses_sla: true,
        one_model_only: true,
    })
}

/// One choice: when, and each candidate's two figures of the [`Objective`] in ms over the
/// window.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Choice {
    /// When it was made.
    pub at: Nanos,
    /// The candidate chosen (index into [`CANDIDATES`]).
    pub chosen: usize,
    /// Each candidate's two figures (ms; mean and p99 latency, or TTFT and TPOT p99) over the
    /// window served again (None: not a contender this time).
    pub scores: Vec<Option<(f64, f64)>>,
}

/// The self-choosing policy.
pub struct Auto {
    candidates: Vec<Spec>,
    objective: Objective,
    /// Which candidates never preempt ([`Policy::never_preempts`]).
    never_preempts: Vec<bool>,
    /// The serving candidate (index) and its instance.
    serving: usize,
    /// The candidate chosen to serve next, waiting for the table to let it.
    next: Option<usize>,
    /// Arrivals since `next` was chosen.
    waiting: usize,
    policy: Box<dyn Policy>,
    /// The latest request folded into the history.
    seen: Option<RequestId>,
    history: VecDeque<Arrival>,
    /// Arrivals since the last choice (or the start).
    since: usize,
    /// Arrivals before the next choice.
    period: usize,
    /// Choices made.
    made: u64,
    /// Each candidate's regret when it last served the window.
    regret: Vec<f64>,
    /// The profiled output lengths (decoder steps, cumulative counts) the remembered requests'
    /// decoder lengths are drawn from (empty for a static model; built at the first arrival).
    outputs: Option<(Vec<u32>, Vec<u64>)>,
    /// Draws those lengths, from a fixed seed.
    rng: rand::rngs::StdRng,
    /// The table device the window is served on (built at the first choice).
    sim: Option<TableDevice>,
    max_batch: usize,
    /// The latest choice.
    last: Option<Choice>,
}

impl Auto {
    fn new(candidates: Vec<Spec>, objective: Objective) -> Self {
        let first = match objective {
            Objective::Latency => 0,
            Objective::Tokens => candidates
                .iter()
                .position(|c| c.text == FIRST_FOR_TOKENS)
                .unwrap_or(0),
        };
        let policy = candidates[first].build();
        let never_preempts = candidates
            .iter()
            .map(|c| c.build().never_preempts())
            .collect();
        let n = candidates.len();
        Auto {
            never_preempts,
            candidates,
            objective,
            serving: first,
            next: None,
            waiting: 0,
            policy,
            seen: None,
            history: VecDeque::with_capacity(WINDOW),
            since: 0,
            period: FIRST,
            made: 0,
            regret: vec![1.0; n],
            outputs: None,
            rng: rand::SeedableRng::seed_from_u64(OUTPUT_SEED),
            sim: None,
            max_batch: 0,
            last: None,
        }
    }

    /// The latest choice.
    #[cfg(test)]
    pub(crate) fn last_choice(&self) -> Option<&Choice> {
        self.last.as_ref()
    }

    /// Folds the arrivals not yet seen into the history (they are the queue's newest).
    fn observe(&mut self, v: &View) {
        let fresh = v
            .infq
            .iter()
            .rev()
            .take_while(|&&r| self.seen < Some(r))
            .count();
        let from = v.infq.len() - fresh;
        if fresh > 0 && self.outputs.is_none() {
            self.outputs = Some(output_steps(v.model));
        }
        for &r in v.infq.iter().skip(from) {
            let q = v.request(r);
            let mut len = v
                .predictor
                .predicted_in(usize::from(q.part), q.enc_len(), 0);
            if let Some((steps, cum)) = &self.outputs {
                if let Some(&total) = cum.last() {
                    let x = rand::Rng::random_range(&mut self.rng, 0..total);
                    len.dec = steps[cum.partition_point(|&c| c <= x)];
                }
            }
            let arrival = Arrival {
                time: q.arrival,
                len,
                part: 0,
                sla: Some(q.deadline.saturating_sub(q.arrival)),
                class: 0,
                key: None,
            };
            if self.history.len() == WINDOW {
                self.history.pop_front();
            }
            self.history.push_back(arrival);
            self.seen = Some(r);
            self.since += 1;
            self.waiting += usize::from(self.next.is_some());
        }
    }

    /// True when a choice is due.
    fn due(&self) -> bool {
        self.since >= self.period
    }

    /// Serves the history under the contenders (every candidate at a full choice) and picks
    /// the least regret; the next choice comes sooner after a change of mind, later after none.
    fn choose(&mut self, v: &View) {
        self.since = 0;
        let full = self.made.is_multiple_of(FULL_EVERY);
        self.made += 1;
        let serving = self.next.unwrap_or(self.serving);
        // the runner-up always contends, so that the serving one never runs unopposed
        let runner_up = (0..self.candidates.len())
            .filter(|&i| i != serving)
            .min_by(|&a, &b| self.regret[a].total_cmp(&self.regret[b]));
        let served: Vec<bool> = (0..self.candidates.len())
            .map(|i| full || i == serving || Some(i) == runner_up || self.regret[i] <= CONTENDER)
            .collect();
        let Some(scores) = self.serve_history(v, &served) else {
            return;
        };
        let known = || scores.iter().flatten();
        let best_mean = known().map(|s| s.0).fold(f64::INFINITY, f64::min);
        let best_p99 = known().map(|s| s.1).fold(f64::INFINITY, f64::min);
        for (r, s) in self.regret.iter_mut().zip(&scores) {
            if let Some((mean, p99)) = s {
                *r = ratio(*mean, best_mean).max(ratio(*p99, best_p99));
            }
        }
        let mut best = serving;
        for (i, s) in scores.iter().enumerate() {
            if s.is_some() && self.regret[i] < self.regret[best] {
                best = i;
            }
        }
        // a change of policy must pay for itself: the serving one stays unless it is worse by
        // more than the margin
        let chosen = if self.regret[serving] > self.regret[best] * SWITCH_MARGIN {
            best
        } else {
            serving
        };
        // the period grows only once the window is whole and the choice stands
        self.period = if chosen == serving && self.history.len() == WINDOW {
            (self.period * 2).clamp(PERIOD, MAX_PERIOD)
        } else {
            PERIOD
        };
        let next = (chosen != self.serving).then_some(chosen);
        if next != self.next {
            self.waiting = 0;
        }
        self.next = next;
        self.last = Some(Choice {
            at: v.now,
            chosen,
            scores,
        });
    }

    /// Hands over to the chosen candidate, if one waits and the table lets it: at once for a
    /// policy that never preempts (it lets what stands finish), else once the table is empty
    /// (a preempting one would take over sub-batches it did not schedule, and starve them).
    fn switch(&mut self, v: &View) {
        let Some(next) = self.next else {
            return;
        };
        // a choice that waited a whole period for an empty table takes over what stands
        let waited = self.waiting >= PERIOD;
        if !v.table.is_empty() && !self.never_preempts[next] && !waited {
            return;
        }
        self.next = None;
        self.serving = next;
        self.policy = self.candidates[next].build();
        self.policy.reserve(self.max_batch);
    }

    /// Every candidate's two figures of the objective in ms over the history, served from an empty
    /// server on the predictor's table; None when it cannot be served (a bug elsewhere: a
    /// policy that cannot serve its own model's table is caught by every other run).
    fn serve_history(&mut self, v: &View, served: &[bool]) -> Option<Vec<Option<(f64, f64)>>> {
        let first = *self.history.front()?;
        let sla = Sla::new(first.sla?).ok()?;
        let mb = MaxBatch::new(v.capacity as u32).ok()?;
        if self.sim.is_none() {
            let mut dev = TableDevice::from_shared(v.predictor.table().clone(), "auto's window");
            dev.prepare(v.model, mb.get()).ok()?;
            self.sim = Some(dev);
        }
        let dev = self.sim.as_mut()?;
        // the window twice, back to back (the second copy one mean gap after the first's
        // last arrival), scored on the second: it starts from the backlog the candidate left
        let n = self.history.len();
        let span = self.history.back()?.time - first.time;
        let shift = span + Nanos(span.0 / (n.max(2) as u64 - 1));
        let arrivals: Vec<Arrival> = (0..2u8)
            .flat_map(|copy| {
                self.history.iter().map(move |a| Arrival {
                    time: a.time - first.time + if copy == 1 { shift } else { Nanos(0) },
                    class: copy,
                    ..*a
                })
            })
            .collect();
        let mut setup = Setup::new(v.model, v.predictor, sla, mb);
        setup.check_invariants = false;
        setup.classes = 2;
        let mut scores = Vec::with_capacity(self.candidates.len());
        for (spec, &serve) in self.candidates.iter().zip(served) {
            if !serve {
                scores.push(None);
                continue;
            }
            dev.restart();
            let mut pol = spec.build();
            let out = engine::run(
                &setup,
                dev,
                pol.as_mut(),
                &mut VirtualClock::new(),
                &arrivals,
            )
            .ok()?;
            let classes = out.class_stats();
            let second = classes.get(1)?;
            let lat = &second.latency_ms;
            let tokens = match self.objective {
                Objective::Latency => None,
                Objective::Tokens => second
                    .ttft_ms
                    .as_ref()
                    .zip(second.tpot_ms.as_ref())
                    .map(|(f, t)| (f.p99, t.p99)),
            };
            scores.push(Some(tokens.unwrap_or((lat.mean, lat.p99))));
        }
        Some(scores)
    }
}

/// A figure over the best candidate's: 1 where both are 0 (a TPOT p99 of requests of one
/// token), unbounded where only the best's is.
fn ratio(x: f64, best: f64) -> f64 {
    if best > 0.0 {
        x / best
    } else if x > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// The profiled output-length distribution of `model`'s first part in decoder steps, as
/// (steps, cumulative counts); empty for a static model, or one whose data cannot be read
/// (the predictor's length stands in then).
fn output_steps(model: &crate::graph::Model) -> (Vec<u32>, Vec<u64>) {
    let Some(seq) = model.parts.first().and_then(|p| p.seq.as_ref()) else {
        return (Vec::new(), Vec::new());
    };
    let Ok(hist) = crate::traffic::lengths::profiled_output_steps(seq) else {
        return (Vec::new(), Vec::new());
    };
    let mut acc = 0;
    hist.iter()
        .filter(|h| h.1 > 0)
        .map(|&(steps, n)| {
            acc += n;
            (steps, acc)
        })
        .unzip()
}

impl Policy for Auto {
    fn name(&self) -> String {
        "auto".into()
    }

    fn interleaves(&self) -> bool {
        true
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        super::cellular::loop_cells(model)
    }

    fn reserve(&mut self, max_batch: usize) {
        self.max_batch = max_batch;
        self.policy.reserve(max_batch);
    }

    fn decide(&mut self, v: &View) -> Decision {
        self.observe(v);
        if self.due() {
            self.choose(v);
        }
        self.switch(v);
        let p = &mut self.policy;
        // the engine's own rule for a policy with nothing to decide
        let (never, interleaves) = (p.never_preempts(), p.interleaves());
        if super::nothing_to_decide(v.table, v.infq.is_empty(), never, interleaves) {
            return Decision::Run;
        }
        p.decide(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, Lengths, Model};
    use crate::metrics::Stats;
    use crate::profile::Profile;
    use crate::runtime::Predictor;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_distr::Distribution;

    /// The eight-node fixture (nine nodes with its input), every node `base · (1 + slope·(b −
    /// 1))` ms at batch `b`: slope 0, batching is free; slope 1, a batch costs its members run
    /// one by one.
    fn table(base_ms: f64, slope: f64) -> (Model, Profile) {
        let m = zoo::fixture("eight_nodes.toml");
        let mut prof = Profile::uniform(&m, 8, Nanos::from_ms(base_ms));
        for n in &mut prof.nodes {
            for (i, l) in n.latency_ns.iter_mut().enumerate() {
                *l = Nanos::from_ms(base_ms * (1.0 + slope * i as f64)).0;
            }
        }
        (m, prof)
    }

    fn arrivals_at(ms: &[f64]) -> Vec<Arrival> {
        ms.iter()
            .map(|&t| Arrival {
                time: Nanos::from_ms(t),
                len: Lengths { enc: 1, dec: 1 },
                ..Arrival::default()
            })
            .collect()
    }

    /// Poisson arrivals at `rate` per ms.
    fn poisson(n: usize, rate: f64, seed: u64) -> Vec<Arrival> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let gap = rand_distr::Exp::new(rate).unwrap();
        let mut t = 0.0;
        let ms: Vec<f64> = (0..n)
            .map(|_| {
                t += gap.sample(&mut rng);
                t
            })
            .collect();
        arrivals_at(&ms)
    }

    fn serve(m: &Model, prof: &Profile, pol: &mut dyn Policy, arrivals: &[Arrival]) -> Stats {
        let p = Predictor::new(m, prof, 1);
        let setup = Setup::new(
            m,
            &p,
            Sla::from_ms(100.0).unwrap(),
            MaxBatch::new(8).unwrap(),
        );
        let mut dev = TableDevice::from_profile(prof.clone(), "test");
        dev.prepare(m, 8).unwrap();
        engine::run(&setup, &mut dev, pol, &mut VirtualClock::new(), arrivals)
            .unwrap()
            .stats()
    }

    fn auto() -> Auto {
        match Spec::parse("auto", 8).unwrap().build().name().as_str() {
            "auto" => {}
            other => panic!("{other}"),
        }
        let candidates = CANDIDATES
            .iter()
            .map(|c| Spec::parse(c, 8).unwrap())
            .collect();
        Auto::new(candidates, Objective::Latency)
    }

    #[test]
    fn it_takes_no_parameter_or_tokens() {
        let e = Spec::parse("auto:1", 64).err().unwrap().to_string();
        assert!(e.contains("takes no parameter, or `tokens`"), "{e}");
        assert!(e.contains("got `1`"), "{e}");
        assert!(Spec::parse("auto:tokens:1", 64).is_err());
        assert_eq!(parse("auto", &[], 64).map(|p| p.uses_sla).ok(), Some(true));
        assert_eq!(
            Spec::parse(FOR_TOKENS, 64).unwrap().build().name(),
            "auto",
            "it reports itself as auto"
        );
        assert_eq!(under_token_bound("auto"), FOR_TOKENS);
        assert_eq!(under_token_bound("lazy"), "lazy");
        assert_eq!(under_token_bound(FOR_TOKENS), FOR_TOKENS);
    }

    /// `auto:tokens` on the two-layer GPT fixture, every node 0.01 ms at every batch.
    fn tokens_auto() -> Auto {
        let candidates = CANDIDATES
            .iter()
            .map(|c| Spec::parse(c, 8).unwrap())
            .collect();
        Auto::new(candidates, Objective::Tokens)
    }

    #[test]
    fn auto_tokens_starts_as_continuous_and_scores_the_token_figures() {
        let m = zoo::fixture("tiny_gpt.toml");
        let prof = Profile::uniform(&m, 8, Nanos::from_ms(0.01));
        let mut pol = tokens_auto();
        assert_eq!(CANDIDATES[pol.serving], FIRST_FOR_TOKENS);
        assert_eq!(pol.policy.name(), "continuous");
        // a request every 100 ms, each alone on the server (the longest, 126 decoder steps,
        // takes under 70 ms): its time to first token and per output token are the same
        // whatever its output length, the window's drawn ones included
        let arrivals: Vec<Arrival> = (0..FIRST as u32 + 10)
            .map(|i| Arrival {
                time: Nanos::from_ms(100.0 * f64::from(i)),
                len: Lengths { enc: 4, dec: 6 },
                ..Arrival::default()
            })
            .collect();
        serve(&m, &prof, &mut pol, &arrivals);
        let c = pol.last_choice().expect("a choice").clone();
        let serial = CANDIDATES.iter().position(|&c| c == "serial").unwrap();
        let alone = serve(
            &m,
            &prof,
            Spec::parse("serial", 8).unwrap().build().as_mut(),
            &arrivals,
        );
        let (ttft, tpot) = (alone.ttft_ms.unwrap().p99, alone.tpot_ms.unwrap().p99);
        assert!(ttft > 0.0 && tpot > 0.0 && ttft != tpot, "{ttft} {tpot}");
        let (a, b) = c.scores[serial].unwrap();
        assert!(
            (a - ttft).abs() < 1e-9 && (b - tpot).abs() < 1e-9,
            "{:?} vs ({ttft}, {tpot})",
            c.scores[serial]
        );
        // every candidate ties (each request alone): the serving one stays
        assert_eq!(CANDIDATES[c.chosen], "continuous", "{c:?}");
        // `auto` on the same arrivals scores end-to-end latency: other figures
        let mut lat = auto();
        serve(&m, &prof, &mut lat, &arrivals);
        let l = lat.last_choice().unwrap().scores[serial].unwrap();
        assert!(l.0 > ttft, "{l:?}");
    }

    #[test]
    fn auto_tokens_on_a_model_without_a_decoder_scores_as_auto() {
        let (m, prof) = table(0.01, 0.5);
        let ms: Vec<f64> = (0..FIRST as u32 + 10).map(f64::from).collect();
        let (mut t, mut l) = (tokens_auto(), auto());
        serve(&m, &prof, &mut t, &arrivals_at(&ms));
        serve(&m, &prof, &mut l, &arrivals_at(&ms));
        assert_eq!(
            t.last_choice().unwrap().scores,
            l.last_choice().unwrap().scores
        );
        assert_eq!(t.last_choice().unwrap().scores[0], Some((0.09, 0.09)));
    }

    #[test]
    fn a_ratio_to_a_best_of_zero_is_one_or_unbounded() {
        assert_eq!(ratio(0.0, 0.0), 1.0);
        assert_eq!(ratio(1.0, 0.0), f64::INFINITY);
        assert_eq!(ratio(3.0, 2.0), 1.5);
    }

    #[test]
    fn the_first_choice_comes_at_the_64th_arrival_and_takes_the_least_regret() {
        // a request every ms on a device that serves one in 0.09 ms: each arrives to an idle
        // server, so the policy decides at each arrival's time exactly
        let (m, prof) = table(0.01, 0.5);
        let mut pol = auto();
        let ms: Vec<f64> = (0..FIRST as u32 + 10).map(f64::from).collect();
        serve(&m, &prof, &mut pol, &arrivals_at(&ms));
        let c = pol.last_choice().expect("a choice").clone();
        assert_eq!(FIRST, 64);
        assert_eq!(c.at, Nanos::from_ms(63.0), "the 64th arrival's time");
        // a full choice: every candidate served the window
        assert!(c.scores.iter().all(Option::is_some), "{:?}", c.scores);
        // each request alone: 0.09 ms for every policy that does not wait; graph:5 holds the
        // first of a batch until the window closes or the batch fills
        let s: Vec<(f64, f64)> = c.scores.iter().flatten().copied().collect();
        assert_eq!(s[0], (0.09, 0.09), "lazy:adaptive");
        let graph5 = CANDIDATES.iter().position(|&c| c == "graph:5").unwrap();
        assert!(s[graph5].0 > 1.0, "{:?}", s[graph5]);
        // all tie at the least regret: the serving one (the first) stays
        assert_eq!(c.chosen, 0);
        assert_eq!(pol.serving, 0);
    }

    #[test]
    fn it_leaves_a_policy_whose_regret_passes_the_margin() {
        // free batching (every batch costs one request's 4.5 ms) and bursts of eight every
        // 5 ms: whatever it chose, the choice is the least regret unless the serving one is
        // within the margin, and it serves no worse than graph:0 by more than 5%
        let (m, prof) = table(0.5, 0.0);
        let ms: Vec<f64> = (0..400).map(|i| f64::from(i / 8) * 5.0).collect();
        let arrivals = arrivals_at(&ms);
        let mut pol = auto();
        let a = serve(&m, &prof, &mut pol, &arrivals);
        let c = pol.last_choice().unwrap().clone();
        let known: Vec<(usize, (f64, f64))> = c
            .scores
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (i, s)))
            .collect();
        let best_mean = known.iter().map(|k| k.1 .0).fold(f64::INFINITY, f64::min);
        let best_p99 = known.iter().map(|k| k.1 .1).fold(f64::INFINITY, f64::min);
        let regret = |s: (f64, f64)| (s.0 / best_mean).max(s.1 / best_p99);
        let least = known
            .iter()
            .map(|k| regret(k.1))
            .fold(f64::INFINITY, f64::min);
        let chosen = known.iter().find(|k| k.0 == c.chosen).unwrap().1;
        assert!(regret(chosen) <= least * SWITCH_MARGIN, "{c:?}");
        assert_ne!(CANDIDATES[c.chosen], "serial", "{c:?}");
        let g = serve(
            &m,
            &prof,
            Spec::parse("graph:0", 8).unwrap().build().as_mut(),
            &arrivals,
        );
        assert!(
            a.latency_ms.mean <= 1.05 * g.latency_ms.mean,
            "auto {} ms, graph:0 {} ms",
            a.latency_ms.mean,
            g.latency_ms.mean
        );
    }

    /// The bound the property test holds `auto` to against Serial and `graph:0`.
    const BOUND: f64 = 1.2;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Over random batching curves (flat to proportional) and loads, `auto`'s mean latency
        /// is within [`BOUND`] of the better of Serial's and `graph:0`'s.
        #[test]
        fn it_never_does_much_worse_than_serial_or_graph0(
            slope in 0.0f64..1.0,
            load in 0.1f64..0.9,
            seed in 0u64..1000,
        ) {
            let (m, prof) = table(0.1, slope);
            // Serial's capacity: one request in 0.9 ms
            let arrivals = poisson(600, load / 0.9, seed);
            let mean = |p: &str| {
                serve(&m, &prof, Spec::parse(p, 8).unwrap().build().as_mut(), &arrivals)
                    .latency_ms
                    .mean
            };
            let peer = mean("serial").min(mean("graph:0"));
            let a = serve(&m, &prof, &mut auto(), &arrivals).latency_ms.mean;
            prop_assert!(a <= BOUND * peer, "auto {a} ms, best of serial and graph:0 {peer} ms");
        }
    }
}
