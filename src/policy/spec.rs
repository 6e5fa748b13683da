//! The policy strings users write, checked once into a [`Spec`] that builds a fresh policy for
//! every run (policies keep per-run state). Each policy file declares its own grammar in an
//! [`Entry`] (the names it answers to and how it reads its parameters); [`super::REGISTRY`]
//! lists them, so adding a policy is one file and one line there.

use super::Policy;
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::time::Nanos;
use std::sync::Arc;

/// How one policy file reads its strings.
pub struct Entry {
    /// The names before the first `:` it answers to.
    pub names: &'static [&'static str],
    /// The first parameter that selects this entry among others with the same name
    /// (`lazy:adaptive`); None: the name's own entry, for every other parameter.
    pub variant: Option<&'static str>,
    /// Its grammar, for the list of known policies (`graph:W[:B]`).
    pub usage: &'static str,
    /// Strings naming it that exercise its readings (a small maximum batch where it takes
    /// one): what the property tests drive every policy with ([`super::examples`]).
    pub examples: &'static [&'static str],
    /// Reads the parameters after the name (`name` is the one used); an error message says
    /// what is wrong.
    pub parse: fn(
        name: &str,
        params: &[&str],
        default_max: u32,
    ) -> std::result::Result<Parsed, ParamError>,
}

/// What is wrong with a policy's parameters, in words; [`Spec::parse`] names the policy string
/// around it ([`Error::BadPolicy`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

impl From<&str> for ParamError {
    fn from(s: &str) -> Self {
        ParamError(s.to_string())
    }
}

impl From<String> for ParamError {
    fn from(s: String) -> Self {
        ParamError(s)
    }
}

/// Builds a fresh policy named by the string it was parsed from.
pub type Build = Arc<dyn Fn(&str) -> Box<dyn Policy> + Send + Sync>;

/// What a policy string means: how to build the policy, and what it needs of a run.
#[derive(Clone)]
pub struct Parsed {
    /// Builds a fresh policy named by the string it was parsed from.
    pub build: Build,
    /// Decisions depend on the SLA and the predicted lengths (the slack check): runs at other
    /// SLA targets are other runs.
    pub uses_sla: bool,
    /// It assumes one model and cannot serve co-located ones.
    pub one_model_only: bool,
}

impl Parsed {
    /// A policy blind to the SLA that serves co-located models.
    pub fn plain(build: impl Fn(&str) -> Box<dyn Policy> + Send + Sync + 'static) -> Parsed {
        Parsed {
            build: Arc::new(build),
            uses_sla: false,
            one_model_only: false,
        }
    }
}

/// A checked policy string.
#[derive(Clone)]
pub struct Spec {
    /// The string as the user wrote it (trimmed): how reports name the policy.
    pub text: String,
    parsed: Parsed,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Spec({})", self.text)
    }
}

impl Spec {
    /// Parses a policy string; graph and cellular batching's maximum batch defaults to (and
    /// may not exceed) `default_max`, the server's.
    pub fn parse(text: &str, default_max: u32) -> Result<Spec> {
        let text = text.trim();
        let bad = |msg: String| Error::BadPolicy {
            spec: text.to_string(),
            msg,
        };
        let parts: Vec<&str> = text.split(':').collect();
        // a variant's entry (`lazy:adaptive`) before its name's own (`lazy`)
        let named = |e: &&&Entry| e.names.contains(&parts[0]);
        let entry = super::REGISTRY
            .iter()
            .filter(named)
            .find(|e| e.variant.is_some() && e.variant == parts.get(1).copied())
            .or_else(|| {
                super::REGISTRY
                    .iter()
                    .filter(named)
                    .find(|e| e.variant.is_none())
            })
            .ok_or_else(|| {
                let known: Vec<&str> = super::REGISTRY.iter().map(|e| e.usage).collect();
                bad(format!("unknown policy ({})", known.join(", ")))
            })?;
        let parsed = (entry.parse)(parts[0], &parts[1..], default_max).map_err(|e| bad(e.0))?;
        Ok(Spec {
            text: text.to_string(),
            parsed,
        })
    }

    /// A fresh policy.
    pub fn build(&self) -> Box<dyn Policy> {
        (self.parsed.build)(&self.text)
    }

    /// True when decisions depend on the SLA and the predicted lengths.
    pub fn uses_sla(&self) -> bool {
        self.parsed.uses_sla
    }

    /// Refuses a policy that cannot serve `model`'s co-located models.
    pub fn check_for(&self, model: &Model) -> Result<()> {
        if model.parts.len() > 1 && self.parsed.one_model_only {
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

/// Reads no parameters.
pub(crate) fn no_params(params: &[&str], what: &str) -> std::result::Result<(), ParamError> {
    if params.is_empty() {
        Ok(())
    } else {
        Err(format!("takes no parameters{what}").into())
    }
}

/// Reads `W[:B]`: a window in ms (≥ 0) and a maximum batch (1..=`default_max`, default
/// `default_max`); `usage` is the grammar to name when there are too few or too many.
pub(crate) fn window_and_batch(
    params: &[&str],
    default_max: u32,
    usage: &str,
) -> std::result::Result<(Nanos, u32), ParamError> {
    if params.is_empty() || params.len() > 2 {
        return Err(format!("use {usage} (W ms, B max batch)").into());
    }
    let w: f64 = params[0]
        .parse()
        .map_err(|_| "the window must be a number of milliseconds".to_string())?;
    let day = crate::time::MAX_SLA.as_ms();
    if !(0.0..=day).contains(&w) {
        return Err(format!(
            "the window must be in [0, {day}] ms (one day), got {}",
            crate::error::num(w)
        )
        .into());
    }
    let b = match params.get(1) {
        None => default_max,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| "the max batch must be a positive integer".to_string())?,
    };
    if b > default_max {
        return Err(format!("max batch {b} exceeds the server's max batch {default_max}").into());
    }
    Ok((Nanos::from_ms(w), b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::zoo;

    /// What each policy family declares: whether it serves co-located models (refused by
    /// [`Spec::check_for`], named) and whether its decisions read the SLA.
    #[test]
    fn each_policy_declares_whether_it_serves_colocated_models_and_reads_the_sla() {
        let m = zoo::fixture("eight_nodes.toml");
        let two = Model::compose(vec![m.clone(), m.clone()]);
        // (policy, serves co-located models, reads the SLA)
        for (text, colocates, sla) in [
            ("serial", true, false),
            ("graph:5", true, false),
            ("lazy", true, true),
            ("lazy:no-decoder-preempt", true, true),
            ("oracle", false, true),
            ("lazy:adaptive", false, true),
            ("cellular:5", false, false),
            ("continuous", false, false),
            ("chunked:2", false, false),
            ("dva:50:5", false, false),
        ] {
            let spec = Spec::parse(text, 8).unwrap();
            assert_eq!(spec.uses_sla(), sla, "{text}");
            assert!(spec.check_for(&m).is_ok(), "{text}: one model");
            match spec.check_for(&two) {
                Ok(()) => assert!(colocates, "{text} accepted co-located models"),
                Err(e) => {
                    assert!(!colocates, "{text}: {e}");
                    assert!(e.to_string().contains("does not support co-located"), "{e}");
                }
            }
        }
    }

    #[test]
    fn every_entry_gives_examples_that_parse_to_itself() {
        // each example names its own entry (a variant's examples are the variant's), and a
        // policy without examples would go undriven by the property tests
        for e in super::super::REGISTRY {
            assert!(!e.examples.is_empty(), "{}: no examples", e.usage);
            for &x in e.examples {
                let parts: Vec<&str> = x.split(':').collect();
                assert!(
                    e.names.contains(&parts[0]),
                    "{x} is not named {:?}",
                    e.names
                );
                if let Some(v) = e.variant {
                    assert_eq!(parts.get(1), Some(&v), "{x}");
                }
                Spec::parse(x, 8).unwrap_or_else(|err| panic!("{x}: {err}"));
            }
        }
        assert_eq!(
            super::super::examples().count(),
            super::super::REGISTRY
                .iter()
                .map(|e| e.examples.len())
                .sum::<usize>()
        );
    }
}
