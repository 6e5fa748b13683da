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
//! Preemption wins only when batching pays for the catch-up and the delay it imposes. When a
//! batch costs as much as its members run one by one (`R(k + n) = R(k) + R_new(n)`, and every
//! time proportional to the batch), the difference is `k · n · A(1) > 0`: the rule never
//! preempts, and LazyB's preemptive LIFO (the `lifo` experiment) cannot happen (a test checks
//! it). Lengths are the predictor's (each request's encoder length, the coverage decoder
//! length); the active batch is taken at its first member's; one model only.

use super::lazy::Lazy;
use super::{Decision, Policy, View};
use crate::graph::Lengths;

/// LazyB that preempts only when the profile predicts a lower total completion time.
#[derive(Clone, Debug)]
pub struct Adaptive {
    lazy: Lazy,
}

impl Adaptive {
    /// Over the paper's conservative LazyB.
    pub(crate) fn new() -> Self {
        Adaptive {
            lazy: Lazy::conservative(),
        }
    }
}

/// True when admitting `n` newcomers now lowers the total completion time (module doc).
pub(crate) fn preemption_pays(v: &View, n: usize) -> bool {
    let (Some(top), Some(&first)) = (v.table.top(), v.pending.front()) else {
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
    preempt < wait
}

impl Policy for Adaptive {
    fn name(&self) -> String {
        "lazy:adaptive".into()
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        self.lazy.cell_nodes(model)
    }

    fn decide(&mut self, v: &View) -> Decision {
        match self.lazy.decide(v) {
            Decision::Admit { count, .. } if !v.table.is_empty() && !preemption_pays(v, count) => {
                Decision::Run
            }
            d => d,
        }
    }
}
