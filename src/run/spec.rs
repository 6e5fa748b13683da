//! One run's settings ([`RunSpec`]), validated once. Each bounded setting is held in a type
//! that cannot hold a value out of its range ([`Sla`], [`MaxBatch`], [`MaxPending`], a policy
//! [`policy::Spec`] that parsed, [`Colocation`] shares that are positive and sum to 1), so a
//! spec, once made, needs no check below it; what only the model can say (the policy serves
//! it, the co-located parts match it, the testbed was profiled far enough) is checked once,
//! where the spec meets its testbed ([`RunSpec::check_for`]). Errors use the library's words
//! ("SLA", "max batch", "shares"); the command line maps them to its flags.

pub use crate::engine::{Replicas, Router};
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::policy;
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::Sla;
use crate::traffic;

/// Everything that fixes one run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The policy.
    pub policy: policy::Spec,
    /// Mean arrival rate (requests/s; co-located models share it by [`Colocation::shares`]).
    pub rate: f64,
    /// The arrival process.
    pub arrivals: traffic::Process,
    /// SLA classes (`None`: every request at `sla`).
    pub classes: Option<traffic::Classes>,
    /// Reject requests whose deadline is lost.
    pub shed: bool,
    /// Let go, at the next node boundary, of every request whose deadline has passed, queued
    /// or part-served (`--abandon-late`).
    pub abandon_late: bool,
    /// Which arrivals are admitted (`--admit`).
    pub admit: crate::engine::Admit,
    /// Number of requests.
    pub requests: usize,
    /// SLA target (co-located models: each has its own, [`Colocation::slas`]).
    pub sla: Sla,
    /// Seed of the traffic.
    pub seed: u64,
    /// Server maximum batch (activation slots; at most the testbed's).
    pub max_batch: MaxBatch,
    /// The most requests waiting in the pending queue; more are rejected and counted.
    pub max_pending: MaxPending,
    /// Co-located models (a model composed of parts): each one's share of the rate and SLA.
    pub colocated: Option<Colocation>,
    /// Servers behind a router (a model device only; [`Replicas::ONE`]: the plain run).
    pub replicas: Replicas,
}

/// Co-located models' traffic: each model's share of the rate and its SLA.
#[derive(Clone, Debug, PartialEq)]
pub struct Colocation {
    shares: Vec<f64>,
    slas: Vec<Sla>,
}

impl Colocation {
    /// `parts` co-located models at `shares` of the rate (any positive numbers, normalised to
    /// sum to 1; equal when `None`) and SLAs `slas` (each model's; `None`: `sla` for all).
    pub fn new(
        parts: usize,
        shares: Option<&[f64]>,
        slas: Option<&[Sla]>,
        sla: Sla,
    ) -> Result<Colocation> {
        if parts < 2 {
            return Err(Error::invalid(
                "shares and SLAs",
                "apply to co-located models (two or more)",
            ));
        }
        let shares = match shares {
            Some(v) if v.len() != parts => {
                return Err(Error::invalid("shares", values_for(v.len(), parts)));
            }
            Some(v) if v.iter().any(|x| !(*x > 0.0 && x.is_finite())) => {
                return Err(Error::invalid("shares", "every share must be positive"));
            }
            Some(v) => {
                let t: f64 = v.iter().sum();
                if t.is_finite() {
                    v.iter().map(|x| x / t).collect()
                } else {
                    // shares near f64::MAX: divided by the largest first, so the sum is finite
                    let top = v.iter().copied().fold(0.0, f64::max);
                    let t: f64 = v.iter().map(|x| x / top).sum();
                    v.iter().map(|x| x / top / t).collect()
                }
            }
            None => vec![1.0 / parts as f64; parts],
        };
        let slas = match slas {
            Some(v) if v.len() != parts => {
                return Err(Error::invalid("SLAs", values_for(v.len(), parts)));
            }
            Some(v) => v.to_vec(),
            None => vec![sla; parts],
        };
        Ok(Colocation { shares, slas })
    }
    /// Each model's share of the rate (summing to 1).
    pub fn shares(&self) -> &[f64] {
        &self.shares
    }
    /// Each model's SLA.
    pub fn slas(&self) -> &[Sla] {
        &self.slas
    }
}

/// "`n` values for `parts` models", in words.
fn values_for(n: usize, parts: usize) -> String {
    match n {
        1 => format!("1 value for {parts} models"),
        n => format!("{n} values for {parts} models"),
    }
}

impl RunSpec {
    /// Checks what only the model and its testbed can say, once, where the spec meets them:
    /// the policy serves `model`, the co-located parts are the model's, classes are not mixed
    /// with co-located SLAs, and the run's maximum batch is within the `profiled` one.
    pub fn check_for(&self, model: &Model, profiled: MaxBatch) -> Result<()> {
        self.policy.check_for(model)?;
        let parts = model.parts.len();
        match &self.colocated {
            Some(c) if c.shares.len() != parts => {
                let n = c.shares.len();
                return Err(Error::invalid(
                    "co-located models",
                    format!("the spec has {n}, the model '{}' {parts}", model.name),
                ));
            }
            None if parts > 1 => {
                return Err(Error::invalid(
                    "co-located models",
                    format!(
                        "the model '{}' has {parts} parts: give each its share and SLA",
                        model.name
                    ),
                ));
            }
            Some(_) if self.classes.is_some() => {
                return Err(Error::invalid(
                    "SLA classes",
                    "do not combine with co-located models (each model has its own SLA)",
                ));
            }
            Some(_) | None => {}
        }
        if self.max_batch > profiled {
            return Err(Error::invalid(
                "max batch",
                format!(
                    "the run's {} exceeds the {} its testbed was profiled to",
                    self.max_batch.get(),
                    profiled.get()
                ),
            ));
        }
        Ok(())
    }
}
