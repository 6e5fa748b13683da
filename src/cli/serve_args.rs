//! The serving flags every command that runs the engine shares (`--requests`, `--sla-ms`,
//! `--max-batch`, `--coverage`, `--max-pending`, `--arrivals`, `--classes`, `--shed`,
//! `--shares`, `--slas`, `--replicas`, `--router`), checked once against their ranges and the
//! model into the run spec each run of the command starts from ([`Serve`]).

use super::{flag, in_range};
use anyhow::{bail, Result};
use clap::Args;
use lazybatch::error::num;
use lazybatch::graph::loader::MAX_BATCH;
use lazybatch::graph::Model;
use lazybatch::policy::Spec;
use lazybatch::run::spec::{Colocation, Replicas, Router};
use lazybatch::run::RunSpec;
use lazybatch::runtime::{MaxBatch, MaxPending};
use lazybatch::time::Sla;
use lazybatch::traffic::MAX_REQUESTS;

#[derive(Args, Debug, Clone)]
pub(super) struct ServeArgs {
    /// Number of requests per run, in [1, 10⁹] [default: 10000; a trace gives its own].
    #[arg(long, allow_negative_numbers = true)]
    pub(super) requests: Option<i64>,
    /// SLA target in milliseconds, in (0, 86400000] (one day) [default: 100; `capacity` under a
    /// token bound: from the bound].
    #[arg(long, allow_negative_numbers = true)]
    pub(super) sla_ms: Option<f64>,
    /// Server maximum batch (activation slots; graph batching's default B), in [1, 4096] and at
    /// most the model's own `max_batch` [default: the smaller of 64 and the model's].
    #[arg(long, allow_negative_numbers = true)]
    pub(super) max_batch: Option<i64>,
    /// Allow --max-batch above the model file's own `max_batch` (still at most 4096).
    #[arg(long)]
    pub(super) force_max_batch: bool,
    /// Seq2seq models: coverage N (%) of the profiled output lengths that sets dec_timesteps,
    /// in (0, 100] [default: 90].
    #[arg(long, allow_negative_numbers = true)]
    pub(super) coverage: Option<f64>,
    /// The most requests waiting to be admitted; an arrival beyond it is rejected (and
    /// counted), in [1, 10⁷].
    #[arg(long, default_value_t = MaxPending::DEFAULT.get() as i64, allow_negative_numbers = true)]
    pub(super) max_pending: i64,
    /// Arrival process at the mean rate: poisson, gamma:CV (gamma gaps with coefficient of
    /// variation CV, in [0.1, 10]; above 1 is burstier than Poisson) or onoff:ON_MS:OFF_MS (an
    /// on-off source: bursts during ON periods, silence during OFF ones, each of exponential
    /// length with that mean) [default: poisson].
    #[arg(long, value_name = "PROCESS")]
    pub(super) arrivals: Option<String>,
    /// SLA classes, NAME:SLA_MS:SHARE,... (at most 16): each request belongs to one, drawn by
    /// share, and has that class's deadline (replacing --sla-ms); `run` reports each class.
    #[arg(long, value_name = "CLASSES")]
    pub(super) classes: Option<String>,
    /// Reject a request, at arrival or when it reaches the head of the queue, whose deadline
    /// can no longer be met even served alone at once (counted as shed; goodput is reported).
    #[arg(long)]
    pub(super) shed: bool,
    /// Let go of a request as soon as its deadline has passed, queued or part-served, at the
    /// next node boundary, freeing its slot (counted as late; goodput is reported).
    #[arg(long)]
    pub(super) abandon_late: bool,
    /// Which arrivals to admit: `all` that the queue has room for (--max-pending), or
    /// `predicted`: only those the slack predictor says complete by their deadline behind the
    /// work already in the server; the others are refused at once (counted as not admitted;
    /// `serve` answers 429 with Retry-After, gRPC RESOURCE_EXHAUSTED) [default: all].
    #[arg(long, value_name = "WHICH")]
    pub(super) admit: Option<String>,
    /// Co-located models (--model a,b,…): each model's share of the arrival rate (default: equal).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub(super) shares: Option<Vec<f64>>,
    /// Co-located models: each model's SLA in ms (default: --sla-ms for every model).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub(super) slas: Option<Vec<f64>>,
    /// Servers behind a load balancer, in [1, 1024], each a copy of the device with its own
    /// queue and policy (model devices: npu or a saved table) [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub(super) replicas: Option<i64>,
    /// How the load balancer in front of --replicas picks a server: rr (round robin), jsq
    /// (fewest outstanding requests), p2c (the less loaded of two drawn at random) or random
    /// [default: rr].
    #[arg(long)]
    pub(super) router: Option<String>,
}

/// The SLA when `--sla-ms` is not given.
pub(super) const DEFAULT_SLA_MS: f64 = 100.0;

impl ServeArgs {
    /// `--sla-ms`, or its default.
    pub(super) fn sla_ms(&self) -> f64 {
        self.sla_ms.unwrap_or(DEFAULT_SLA_MS)
    }
}

/// The serving flags, checked against their ranges and against the model: a run spec every
/// run of the command starts from (its policy, rate and seed set per run by [`Serve::spec`]),
/// and the testbed's decoder coverage.
pub(super) struct Serve {
    pub(super) spec: RunSpec,
    pub(super) coverage: f64,
}

impl Serve {
    /// The run of `policy` at `rate` requests/s with traffic seed `seed`.
    pub(super) fn spec(&self, policy: Spec, rate: f64, seed: u64) -> RunSpec {
        RunSpec {
            policy,
            rate,
            seed,
            ..self.spec.clone()
        }
    }
    /// The requests of a run.
    pub(super) fn requests(&self) -> usize {
        self.spec.requests
    }
    /// The server's maximum batch.
    pub(super) fn max_batch(&self) -> u32 {
        self.spec.max_batch.get()
    }
}

/// Checks the serving flags for `model`; `traced`: the requests come from a trace (which gives
/// their number).
pub(super) fn serve_args(s: &ServeArgs, model: &Model, traced: bool) -> Result<Serve> {
    if traced && s.requests.is_some() {
        bail!("--requests does not apply to --trace: the trace gives the requests");
    }
    if traced && s.arrivals.is_some() {
        bail!("--arrivals does not apply to --trace: the trace gives the arrival times");
    }
    let arrivals = match &s.arrivals {
        Some(a) => a.parse()?,
        None => lazybatch::traffic::Process::Poisson,
    };
    let classes = match &s.classes {
        Some(_) if traced => {
            bail!("--classes does not apply to --trace: a trace line has no class")
        }
        Some(_) if model.parts.len() > 1 => bail!(
            "--classes does not combine with co-located models (--slas gives each model its SLA)"
        ),
        Some(c) => Some(c.parse()?),
        None => None,
    };
    let requests = in_range(
        "--requests",
        s.requests.unwrap_or(10_000),
        1,
        MAX_REQUESTS as i64,
    )?;
    let sla = Sla::from_ms(s.sla_ms())?;
    let model_max = i64::from(model.max_batch.clamp(1, MAX_BATCH));
    let max_batch = match s.max_batch {
        None => 64.min(model_max),
        Some(b) if b > model_max && !s.force_max_batch => bail!(
            "invalid --max-batch: {b} exceeds the model's own max_batch {model_max} (--force-max-batch allows up to {MAX_BATCH})"
        ),
        Some(b) => b,
    };
    // the flag's own range (a negative or huge number) is the library's: MaxBatch says it
    let max_batch = MaxBatch::new(u32::try_from(max_batch).unwrap_or(0)).map_err(|_| {
        anyhow::anyhow!(
            "invalid --max-batch: must be an integer in [1, {MAX_BATCH}], got {max_batch}"
        )
    })?;
    let coverage = match s.coverage {
        Some(_) if !model.is_seq2seq() => bail!(
            "--coverage sets the decoder length the predictor assumes, and '{}' has no decoder",
            model.name
        ),
        Some(c) if !(c > 0.0 && c <= 100.0) => {
            bail!("invalid --coverage: must be in (0, 100], got {}", num(c))
        }
        Some(c) => c,
        None => 90.0,
    };
    let max_pending =
        MaxPending::new(usize::try_from(s.max_pending).unwrap_or(0)).map_err(|_| {
            anyhow::anyhow!(
                "invalid --max-pending: must be an integer in [1, {}], got {}",
                MaxPending::MAX,
                s.max_pending
            )
        })?;
    let replicas = replicas(s)?;
    let spec = RunSpec {
        // a placeholder: every run sets its own policy, rate and seed (Serve::spec)
        policy: Spec::parse("serial", 1)?,
        rate: 1.0,
        seed: 1,
        arrivals,
        classes,
        shed: s.shed,
        abandon_late: s.abandon_late,
        admit: admit(s.admit.as_deref())?,
        requests: requests as usize,
        sla,
        max_batch,
        max_pending,
        colocated: colocation(model, s, sla)?,
        replicas,
    };
    Ok(Serve { spec, coverage })
}

/// `--admit`: `all` or `predicted`.
fn admit(v: Option<&str>) -> Result<lazybatch::engine::Admit> {
    use lazybatch::engine::Admit;
    match v {
        None | Some("all") => Ok(Admit::All),
        Some("predicted") => Ok(Admit::Predicted),
        Some(other) => {
            anyhow::bail!("invalid --admit: must be `all` or `predicted`, got '{other}'")
        }
    }
}

/// `--replicas` and `--router`: one server unless several are asked for (the count checked
/// first); a router without several replicas to choose among is refused.
fn replicas(s: &ServeArgs) -> Result<Replicas> {
    let n = s.replicas.unwrap_or(1);
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=Replicas::MAX).contains(n))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "invalid --replicas: must be an integer in [1, {}], got {n}",
                Replicas::MAX
            )
        })?;
    let router = match &s.router {
        Some(_) if n == 1 => bail!("--router picks among --replicas N (two or more)"),
        Some(r) => Router::parse(r)?,
        None => Router::RoundRobin,
    };
    Ok(Replicas::new(n, router)?)
}

/// Co-located models' shares of the rate and SLAs (`--shares`, `--slas`), None for one model.
fn colocation(model: &Model, s: &ServeArgs, sla: Sla) -> Result<Option<Colocation>> {
    let n = model.parts.len();
    if n == 1 {
        if s.shares.is_some() || s.slas.is_some() {
            bail!("--shares and --slas apply to co-located models (--model a,b,…)");
        }
        return Ok(None);
    }
    let slas = match &s.slas {
        Some(v) => Some(
            v.iter()
                .map(|&x| Sla::from_ms(x).map_err(flag("--slas")))
                .collect::<Result<Vec<_>>>()?,
        ),
        None => None,
    };
    // its errors name "shares" and "SLAs", which the command line's edge says as flags
    let shares = s.shares.as_deref();
    Ok(Some(Colocation::new(n, shares, slas.as_deref(), sla)?))
}
