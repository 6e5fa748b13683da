//! `lazy:adaptive`: our extension of LazyB, not the paper's. It keeps the paper's slack gate
//! and adds a second test before every preemption, read from the same per-node profile: admit
//! the newcomers now only if that lowers the **sum of completion times** of everyone affected.
//!
//! With `k` requests in flight (the active sub-batch standing at node `x`) and `n` newcomers,
//! `R(b)` the profile's time from `x` to the end at batch `b`, `A(n)` the newcomers' whole
//! graph at batch `n` and `C(n) = A(n) − R_new(n)` their catch-up to `x`:
//!
//! * preempting now, everyone finishes after `C(n) + R(k + n)`: a total of
//!   `(k + n) · (C(n) + R(k + n))`;
//! * letting the active batch finish first, the `k` finish after `R(k)` and the newcomers after
//!   `R(k) + A(n)`: `k · R(k) + n · (R(k) + A(n))`.
//!
//! Requests that arrive meanwhile wait for the server to clear what either plan keeps it busy
//! with (`D`: `C(n) + R(k + n)` or `R(k) + A(n)`); at the arrival rate `λ` measured so far (a
//! moving average of the gaps between arrivals) that adds `λ · D² / 2` to each side. This is
//! what lets batching win under load, where the busy period is what queues everyone else.
//!
//! Preemption wins only when batching pays for the catch-up and the delay it imposes. When a
//! batch costs as much as its members run one by one (`R(k + n) = R(k) + R_new(n)`, and every
//! time proportional to the batch), both busy periods are `n · A(1) + k · R(1)` and the
//! difference is `k · n · A(1) > 0`: the rule never preempts, and LazyB's preemptive LIFO (the
//! `lifo` experiment) cannot happen (a test checks it).
//!
//! The same objective sizes a sub-batch started on an idle server. With `n` requests waiting,
//! served in groups of `k` one after another (the last one smaller), each waits for every group
//! up to its own: the queued requests' total completion time is `T(k) = Σᵢ mᵢ · A(gᵢ)` (`mᵢ`
//! still waiting when group `i` of size `gᵢ` starts), and the plan keeps the server busy for
//! `D(k) = Σᵢ A(gᵢ)`, which arrivals meanwhile wait for: `λ · D(k)² / 2`. The first group's
//! size minimises `T(k) + λ · D(k)² / 2`: all `n` when batching is nearly free or the load is
//! high, one at a time (Serial) at light load when a batch of `b` costs about `b` single
//! inputs — where LazyB and GraphB(0) both lose to Serial.
//!
//! Lengths are the predictor's (each request's encoder length, the coverage decoder length);
//! the active batch is taken at its first member's; one model only.
//!
//! It builds on `lazy` as the paper wrote it: a refusal of the slack gate holds until the
//! active batch completes (`lazy`'s latch). `lazy:adaptive:recheck` builds on the ablation
//! that asks the gate again at every node (`lazy:recheck`, what `lazy:adaptive` was until
//! 2026-12); both are measured in `docs/policies.md`. Only the gate's refusals latch: a
//! preemption refused because it does not pay is weighed again at the next node.

use super::lazy::Lazy;
use super::spec::{Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::graph::Lengths;
use crate::time::Nanos;

/// LazyB that preempts only when the profile predicts a lower total completion time.
#[derive(Clone, Debug)]
pub struct Adaptive {
    lazy: Lazy,
    /// The latest arrival counted in `gap_ns`.
    seen: Option<Nanos>,
    /// Moving average of the gaps between arrivals (ns; 0 before two arrivals).
    gap_ns: f64,
    /// [`launch_size`]'s scratch: the whole graph's time at each batch size.
    whole: Vec<f64>,
}

/// Weight of a new gap in the moving average (about the last 32 arrivals).
const GAP_WEIGHT: f64 = 1.0 / 32.0;

/// `lazy:adaptive[:recheck]`: the `adaptive` variant of `lazy`, whose own entry
/// ([`super::lazy::ENTRY`]) reads every other parameter.
pub(crate) const ENTRY: Entry = Entry {
    names: &["lazy"],
    variant: Some("adaptive"),
    usage: "lazy:adaptive[:recheck]",
    examples: &["lazy:adaptive"],
    parse,
};

fn parse(_: &str, params: &[&str], _: u32) -> std::result::Result<Parsed, ParamError> {
    let recheck = match params {
        ["adaptive"] => false,
        ["adaptive", "recheck"] => true,
        _ => return Err("takes no parameter after 'adaptive' but 'recheck'".into()),
    };
    // one model only: its test reads one profile's times
    Ok(Parsed {
        build: std::sync::Arc::new(move |_| {
            Box::new(if recheck {
                Adaptive::rechecking()
            } else {
                Adaptive::new()
            })
        }),
        uses_sla: true,
        one_model_only: true,
    })
}

impl Adaptive {
    /// Over the paper's conservative LazyB, whose refusals hold until the active batch
    /// completes.
    pub(crate) fn new() -> Self {
        Adaptive::over(Lazy::conservative())
    }

    /// Over `lazy:recheck`, which asks the gate again at every node.
    pub(crate) fn rechecking() -> Self {
        Adaptive::over(Lazy::conservative().reading(super::lazy::Readings {
            recheck: true,
            ..Default::default()
        }))
    }

    fn over(lazy: Lazy) -> Self {
        Adaptive {
            lazy,
            seen: None,
            gap_ns: 0.0,
            whole: Vec::new(),
        }
    }

    /// Folds the arrivals not yet seen into the gap average.
    fn observe(&mut self, v: &View) {
        // the fresh ones are the queue's newest: count them from its back, fold them in order
        let fresh = v
            .infq
            .iter()
            .rev()
            .take_while(|&&r| self.seen < Some(v.arrival(r)))
            .count();
        let oldest_fresh = v.infq.len() - fresh;
        for a in v.infq.iter().skip(oldest_fresh).map(|&r| v.arrival(r)) {
            if let Some(prev) = self.seen {
                let gap = (a - prev).0 as f64;
                self.gap_ns = if self.gap_ns == 0.0 {
                    gap
                } else {
                    self.gap_ns + GAP_WEIGHT * (gap - self.gap_ns)
                };
            }
            self.seen = Some(a);
        }
    }

    /// Arrivals per ns measured so far (0 before two arrivals).
    fn rate(&self) -> f64 {
        if self.gap_ns > 0.0 {
            1.0 / self.gap_ns
        } else {
            0.0
        }
    }
}

/// True when admitting `n` newcomers now lowers the total completion time (module doc).
pub(crate) fn preemption_pays(v: &View, n: usize, rate: f64) -> bool {
    let (Some(top), Some(&first)) = (v.table.top(), v.infq.front()) else {
        return true;
    };
    let Some(&running) = top.members.first() else {
        return true;
    };
    let p = v.predictor;
    let (k, n32) = (v.table.in_flight() as u128, n as u32);
    let n = n as u128;
    let (len_run, len_new): (Lengths, Lengths) = (v.predicted_len(running), v.predicted_len(first));
    let r = |len: Lengths, b: u32| u128::from(p.remaining(Some(top.next), len, b).0);
    let whole = u128::from(p.remaining(None, len_new, n32).0);
    let catch_up = whole.saturating_sub(r(len_new, n32));
    let (r_k, r_kn) = (r(len_run, k as u32), r(len_run, (k + n) as u32));
    let preempt = (k + n) * (catch_up + r_kn);
    let wait = k * r_k + n * (r_k + whole);
    // arrivals meanwhile wait for the busy period each plan makes (module doc)
    let late = |busy: u128| rate * (busy as f64).powi(2) / 2.0;
    preempt as f64 + late(catch_up + r_kn) < wait as f64 + late(r_k + whole)
}

/// How many of the `n` waiting requests to start as one sub-batch on an idle server, with
/// arrivals at `rate` per ns: the group size that minimises the queued requests' total
/// completion time plus the delay the plan imposes on arrivals (module doc). `a` is scratch
/// (the whole graph's time at each batch size).
pub(crate) fn launch_size(v: &View, n: usize, rate: f64, a: &mut Vec<f64>) -> usize {
    let Some(&first) = v.infq.front() else {
        return n;
    };
    if n <= 1 {
        return n;
    }
    let len = v.predicted_len(first);
    // a[b - 1]: the whole graph at batch b
    a.clear();
    a.extend((1..=n as u32).map(|b| v.predictor.remaining(None, len, b).0 as f64));
    let mut best = (f64::INFINITY, n);
    // larger groups first: ties go to fewer sub-batches
    for k in (1..=n).rev() {
        let (mut waiting, mut total, mut busy) = (n, 0.0, 0.0);
        while waiting > 0 {
            let g = k.min(waiting);
            busy += a[g - 1];
            total += waiting as f64 * a[g - 1];
            waiting -= g;
        }
        let cost = total + rate * busy * busy / 2.0;
        if cost < best.0 {
            best = (cost, k);
        }
    }
    best.1
}

impl Policy for Adaptive {
    fn name(&self) -> String {
        match self.lazy.name().as_str() {
            "lazy" => "lazy:adaptive".into(),
            other => format!("lazy:adaptive{}", &other["lazy".len()..]),
        }
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        self.lazy.cell_nodes(model)
    }

    /// [`launch_size`]'s scratch, one entry a batch size.
    fn reserve(&mut self, max_batch: usize) {
        self.lazy.reserve(max_batch);
        self.whole.reserve(max_batch);
    }

    fn decide(&mut self, v: &View) -> Decision {
        self.observe(v);
        match self.lazy.decide(v) {
            Decision::Admit { count, .. }
                if !v.table.is_empty() && !preemption_pays(v, count, self.rate()) =>
            {
                Decision::Run
            }
            Decision::Admit { count, pad } if v.table.is_empty() => Decision::Admit {
                count: launch_size(v, count, self.rate(), &mut self.whole),
                pad,
            },
            d => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, Model, NodeId, NodeStep};
    use crate::profile::Profile;
    use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};

    /// The eight-node graph (nine nodes with its input), every node `0.5 + 0.5·b` ms at batch
    /// `b`: a batch of four costs 2.5 single-input halves, not four (a batching gain, not a
    /// free one). `active` requests (the first ids) stand at `node`, the `waiting` ones (the
    /// next ids) arrived at `arrivals` ms.
    struct Bench {
        m: Model,
        p: Predictor,
        table: BatchTable,
        infq: InfQ,
        requests: Vec<Request>,
    }

    fn bench(active: u32, node: u32, arrivals: &[f64]) -> Bench {
        let m = zoo::fixture("eight_nodes.toml");
        let mut prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
        for n in &mut prof.nodes {
            for (i, l) in n.latency_ns.iter_mut().enumerate() {
                *l = Nanos::from_ms(0.5 + 0.5 * (i + 1) as f64).0;
            }
        }
        let p = Predictor::new(&m, &prof, 1);
        let len = Lengths { enc: 1, dec: 1 };
        let waiting = arrivals.len() as u32;
        let requests: Vec<Request> = (0..active + waiting)
            .map(|i| {
                let at = match i.checked_sub(active) {
                    Some(w) => Nanos::from_ms(arrivals[w as usize]),
                    None => Nanos(0),
                };
                Request::new(RequestId(i), at, Nanos::from_ms(500.0), len)
            })
            .collect();
        let mut infq = InfQ::with_capacity(8);
        (active..active + waiting).for_each(|i| infq.push(RequestId(i)));
        let mut table = BatchTable::new(8);
        table.set_model(&m);
        if active > 0 {
            let at = NodeStep {
                node: NodeId(node),
                step: 0,
            };
            table.push_from((0..active).map(RequestId), at, None);
        }
        Bench {
            m,
            p,
            table,
            infq,
            requests,
        }
    }

    impl Bench {
        fn with<T>(&self, now: f64, f: impl FnOnce(&View) -> T) -> T {
            let ledger = Ledger::of(&self.requests).unwrap();
            let v = View::new(
                Nanos::from_ms(now),
                &self.m,
                &self.infq,
                &self.table,
                &self.p,
                8,
                &ledger,
            );
            f(&v)
        }
    }

    /// `waiting` requests arrived `gap` ms apart from 0, all pending at `now` ms on an idle
    /// server.
    fn idle_server(waiting: u32, gap: f64, now: f64, pol: &mut Adaptive) -> Decision {
        let arrivals: Vec<f64> = (0..waiting).map(|i| gap * f64::from(i)).collect();
        bench(0, 0, &arrivals).with(now, |v| pol.decide(v))
    }

    #[test]
    fn the_arrival_rate_is_the_moving_average_of_the_gaps_seen() {
        let mut pol = Adaptive::new();
        assert_eq!(pol.rate(), 0.0, "no gap before two arrivals");
        idle_server(4, 2.0, 6.0, &mut pol);
        // three gaps of 2 ms: 0.5 arrivals per ms
        assert!((pol.rate() - 1.0 / 2e6).abs() < 1e-15, "{}", pol.rate());
        // the same queue seen again adds no gap
        idle_server(4, 2.0, 7.0, &mut pol);
        assert_eq!(pol.gap_ns, 2e6);
        // one more, 10 ms after the last: a thirty-second of the 8 ms difference joins in
        let later = bench(0, 0, &[0.0, 2.0, 4.0, 6.0, 16.0]);
        later.with(16.0, |v| pol.decide(v));
        assert_eq!(pol.gap_ns, 2e6 + 8e6 / 32.0);
        assert_eq!(pol.seen, Some(Nanos::from_ms(16.0)));
        // the requests already seen may have left the queue: only the new one is folded in
        let after = bench(0, 0, &[16.0, 17.0]);
        after.with(17.0, |v| pol.decide(v));
        assert_eq!(pol.gap_ns, 2.25e6 + (1e6 - 2.25e6) / 32.0);
    }

    #[test]
    fn preemption_pays_when_batching_saves_more_than_the_catch_up_costs() {
        // one request at node 4 (five nodes left), one newcomer: preempting finishes both
        // after the catch-up (4 ms) and five nodes at batch 2 (7.5 ms), 2·11.5 = 23 ms in all;
        // waiting, the one finishes after 5 ms and the newcomer after 5 + 9: 19 ms. The busy
        // periods, 11.5 and 14 ms, delay arrivals by λ·D²/2: preempting pays above
        // λ = 4 / (63.75 / 2) per ms, 1.2549e-7 per ns
        let b = bench(1, 4, &[1.0]);
        b.with(1.0, |v| {
            assert!(!preemption_pays(v, 1, 0.0));
            assert!(!preemption_pays(v, 1, 1.25e-7));
            assert!(preemption_pays(v, 1, 1.26e-7));
        });
        // two at node 4, two newcomers: 4·(6 + 12.5) = 74 against 2·7.5 + 2·(7.5 + 13.5)
        // = 57 ms; busy 18.5 against 21 ms: preempting pays above 17 / 49.375 per ms
        let b = bench(2, 4, &[1.0, 1.0]);
        b.with(1.0, |v| {
            assert!(!preemption_pays(v, 2, 0.0));
            assert!(!preemption_pays(v, 2, 3.44e-7));
            assert!(preemption_pays(v, 2, 3.45e-7));
        });
        // one at node 0 (nothing done), one newcomer: 2·13.5 = 27 ms either way at rate 0,
        // and a tie lets the running request finish; any arrivals tip it (busy 13.5 < 18 ms)
        let b = bench(1, 0, &[1.0]);
        b.with(1.0, |v| {
            assert!(!preemption_pays(v, 1, 0.0));
            assert!(preemption_pays(v, 1, 1e-12));
        });
        // nothing running, or nobody waiting: nothing to weigh
        bench(0, 0, &[1.0]).with(1.0, |v| assert!(preemption_pays(v, 1, 0.0)));
        bench(2, 4, &[]).with(1.0, |v| assert!(preemption_pays(v, 0, 0.0)));
    }

    #[test]
    fn lazy_admissions_that_do_not_pay_are_turned_into_runs() {
        // LazyB's slack gate (a 500 ms SLA) admits the newcomer; at rate 0 the adaptive rule
        // lets the running request finish first, at one arrival a millisecond it preempts
        let b = bench(1, 4, &[1.0]);
        let admit = Decision::Admit {
            count: 1,
            pad: false,
        };
        assert_eq!(b.with(1.0, |v| Lazy::conservative().decide(v)), admit);
        assert_eq!(b.with(1.0, |v| Adaptive::new().decide(v)), Decision::Run);
        let mut loaded = Adaptive::new();
        loaded.gap_ns = 1e6;
        assert_eq!(b.with(1.0, |v| loaded.decide(v)), admit);
        // a preemption that pays takes every newcomer LazyB admits: one running at node 0
        // with four waiting ties at rate 0 (5·27 = 1·9 + 4·31.5 ms) and the busy period
        // decides, while an idle server at this rate would start three of them first
        let b = bench(1, 0, &[1.0; 4]);
        let mut loaded = Adaptive::new();
        loaded.gap_ns = 1e9;
        let all = Decision::Admit {
            count: 4,
            pad: false,
        };
        assert_eq!(b.with(1.0, |v| loaded.decide(v)), all);
        b.with(1.0, |v| {
            assert_eq!(launch_size(v, 4, loaded.rate(), &mut Vec::new()), 3)
        });
    }

    #[test]
    fn its_scratch_is_sized_before_the_run() {
        let mut pol = Adaptive::new();
        pol.reserve(8);
        assert!(pol.whole.capacity() >= 8);
    }

    #[test]
    fn it_is_named_by_its_string_and_merges_where_lazy_does() {
        let pol = Adaptive::new();
        assert_eq!(pol.name(), "lazy:adaptive");
        let m = zoo::fixture("tiny_seq2seq.toml");
        let cells = pol.cell_nodes(&m);
        assert_eq!(cells, crate::policy::cellular::loop_cells(&m));
        assert!(cells.contains(&true) && cells.contains(&false), "{cells:?}");
    }

    #[test]
    fn the_launch_size_weighs_the_arrivals_a_busy_period_delays() {
        // four waiting, whole graph a(b) = 9·(0.5 + 0.5·b) ms: alone (rate 0) groups of 3 then
        // 1 give the least total completion time (9·9 ms against 9·10 for one group of four);
        // with arrivals every millisecond the shorter busy period of one group of four wins
        let mut fresh = Adaptive::new();
        let launched = |d: Decision| match d {
            Decision::Admit { count, .. } => count,
            other => panic!("{other:?}"),
        };
        // one request seen: no rate yet, so the rate-0 choice
        assert_eq!(launched(idle_server(1, 1.0, 0.0, &mut fresh)), 1);
        let mut slow = Adaptive::new();
        // arrivals 100 ms apart: the busy period hardly matters
        assert_eq!(launched(idle_server(4, 100.0, 300.0, &mut slow)), 3);
        let mut busy = Adaptive::new();
        assert_eq!(launched(idle_server(4, 1.0, 3.0, &mut busy)), 4);
        // the threshold: one group of four costs 90 + λ·22.5²/2 ms, three then one
        // 81 + λ·27²/2, equal at λ = 9 / 111.375 per ms, 8.0808e-8 per ns
        let mut a = Vec::new();
        let four = bench(0, 0, &[0.0; 4]);
        four.with(0.0, |v| {
            assert_eq!(launch_size(v, 4, 8.08e-8, &mut a), 3);
            assert_eq!(launch_size(v, 4, 8.09e-8, &mut a), 4);
        });
        // five: groups of three then two (5·18 + 2·13.5 = 117 ms, busy 31.5) or two, two and
        // one (117 ms too, busy 36: the larger group wins the tie), or all five (135 ms, busy
        // 27): equal at λ = 18 / 131.625 per ms
        let five = bench(0, 0, &[0.0; 5]);
        five.with(0.0, |v| {
            assert_eq!(launch_size(v, 5, 0.0, &mut a), 3);
            assert_eq!(launch_size(v, 5, 1.367e-7, &mut a), 3);
            assert_eq!(launch_size(v, 5, 1.368e-7, &mut a), 5);
            assert_eq!(a.len(), 5, "the scratch holds one time a batch size");
        });
        // nobody, or one: no choice
        bench(0, 0, &[]).with(0.0, |v| assert_eq!(launch_size(v, 0, 0.0, &mut a), 0));
        four.with(0.0, |v| assert_eq!(launch_size(v, 1, 1.0, &mut a), 1));
    }
}
