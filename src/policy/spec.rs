//! The policy strings users write (`serial`, `graph:W[:B]`, `cellular:W[:B]`, `lazy`, `oracle`,
//! `lazy:strict`, `oracle:strict`; `lazy+cell` is an alias of `lazy`), checked once into a
//! [`Spec`]: which policy with which parameters, and what it needs of a run. A spec builds a
//! fresh policy for every run (policies keep per-run state).

use super::{Cellular, GraphBatching, Lazy, Policy, Serial};
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::time::Nanos;

/// Which policy, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One request at a time.
    Serial,
    /// Graph batching: window and maximum batch.
    Graph(Nanos, u32),
    /// Cellular batching: window and maximum batch.
    Cellular(Nanos, u32),
    /// LazyB (`oracle`: exact batched latencies; `strict`: merge only at an identical
    /// (node, timestep)).
    Lazy {
        /// The Oracle.
        oracle: bool,
        /// The strict merge rule.
        strict: bool,
    },
}

/// A checked policy string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The policy.
    pub kind: Kind,
    /// The string as the user wrote it (trimmed): how reports name the policy.
    pub text: String,
}

impl Spec {
    /// Parses a policy string; graph and cellular batching's maximum batch defaults to (and
    /// may not exceed) `default_max`, the server's.
    pub fn parse(text: &str, default_max: u32) -> Result<Spec> {
        let bad = |msg: &str| Error::BadPolicy {
            spec: text.to_string(),
            msg: msg.to_string(),
        };
        let parts: Vec<&str> = text.trim().split(':').collect();
        let kind = match parts.as_slice() {
            ["serial"] => Kind::Serial,
            // `lazy+cell` is the name cross-step merging had while it was an option
            ["lazy"] | ["lazy+cell"] => Kind::Lazy {
                oracle: false,
                strict: false,
            },
            ["oracle"] => Kind::Lazy {
                oracle: true,
                strict: false,
            },
            ["lazy", "strict"] => Kind::Lazy {
                oracle: false,
                strict: true,
            },
            ["oracle", "strict"] => Kind::Lazy {
                oracle: true,
                strict: true,
            },
            ["lazy" | "oracle", ..] => {
                return Err(bad("takes no parameter but 'strict' (lazy:strict)"))
            }
            ["serial" | "lazy+cell", ..] => return Err(bad("takes no parameters")),
            ["graph", rest @ ..] if !rest.is_empty() && rest.len() <= 2 => {
                let (w, b) = window_and_batch(text, rest, default_max)?;
                Kind::Graph(w, b)
            }
            ["graph"] | ["graph", ..] => {
                return Err(bad("use graph:W or graph:W:B (W ms, B max batch)"))
            }
            ["cellular", rest @ ..] if !rest.is_empty() && rest.len() <= 2 => {
                let (w, b) = window_and_batch(text, rest, default_max)?;
                Kind::Cellular(w, b)
            }
            ["cellular"] | ["cellular", ..] => {
                return Err(bad("use cellular:W or cellular:W:B (W ms, B max batch)"))
            }
            _ => {
                return Err(bad(
                    "unknown policy (serial, graph:W[:B], cellular:W[:B], lazy, oracle, lazy:strict, oracle:strict)",
                ))
            }
        };
        Ok(Spec {
            kind,
            text: text.trim().to_string(),
        })
    }

    /// A fresh policy.
    pub fn build(&self) -> Box<dyn Policy> {
        match self.kind {
            Kind::Serial => Box::new(Serial),
            Kind::Graph(w, b) => Box::new(GraphBatching::new(w, b, &self.text)),
            Kind::Cellular(w, b) => Box::new(Cellular::new(w, b, &self.text)),
            Kind::Lazy { oracle, strict } => {
                let l = if oracle {
                    Lazy::oracle()
                } else {
                    Lazy::conservative()
                };
                Box::new(if strict { l.strict() } else { l })
            }
        }
    }

    /// True when decisions depend on the SLA and the predicted lengths.
    pub(crate) fn uses_sla(&self) -> bool {
        matches!(self.kind, Kind::Lazy { .. })
    }

    /// Refuses a policy that cannot serve `model`'s co-located models (the Oracle and
    /// cellular batching assume one model).
    pub fn check_for(&self, model: &Model) -> Result<()> {
        let one_model_only = matches!(
            self.kind,
            Kind::Cellular(..) | Kind::Lazy { oracle: true, .. }
        );
        if model.parts.len() > 1 && one_model_only {
            return Err(Error::BadPolicy {
                spec: self.text.clone(),
                msg: "does not support co-located models (serial, graph and lazy do)".into(),
            });
        }
        Ok(())
    }
}

/// A fresh policy from a string ([`Spec::parse`], then [`Spec::build`]).
pub fn parse(text: &str, default_max: u32) -> Result<Box<dyn Policy>> {
    Ok(Spec::parse(text, default_max)?.build())
}

/// [`parse`] for serving `model`: refuses a policy that cannot serve its co-located models.
pub fn parse_for(text: &str, default_max: u32, model: &Model) -> Result<Box<dyn Policy>> {
    let spec = Spec::parse(text, default_max)?;
    spec.check_for(model)?;
    Ok(spec.build())
}

/// Parses `W[:B]`: a window in ms (≥ 0) and a maximum batch (1..=`default_max`).
fn window_and_batch(text: &str, rest: &[&str], default_max: u32) -> Result<(Nanos, u32)> {
    let bad = |msg: String| Error::BadPolicy {
        spec: text.to_string(),
        msg,
    };
    let w: f64 = rest[0]
        .parse()
        .map_err(|_| bad("the window must be a number of milliseconds".into()))?;
    if !w.is_finite() || w < 0.0 {
        return Err(bad("the window must be ≥ 0 ms".into()));
    }
    let b = match rest.get(1) {
        None => default_max,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| bad("the max batch must be a positive integer".into()))?,
    };
    if b > default_max {
        return Err(bad(format!(
            "max batch {b} exceeds the server's --max-batch {default_max}"
        )));
    }
    Ok((Nanos::from_ms(w), b))
}
