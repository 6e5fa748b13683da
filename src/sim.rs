//! The virtual-time driver: profile the device, build the predictor, draw the traffic, run the
//! engine on a virtual clock and summarize. `run`, `compare` and `reproduce` all come through
//! [`simulate`], so every figure comes from the same code path.

use crate::device::npu::{Npu, NpuConfig};
use crate::device::Device;
use crate::engine::{self, Outcome};
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::metrics::{summarize, Stats};
use crate::policy;
use crate::profile::Profile;
use crate::runtime::lengths::profiling_lengths;
use crate::runtime::Predictor;
use crate::time::{Nanos, VirtualClock};
use crate::traffic::{self, Arrival};

/// Everything that fixes one simulated run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Policy string.
    pub policy: String,
    /// Arrival rate (requests/s).
    pub rate: f64,
    /// Number of requests.
    pub requests: usize,
    /// SLA target.
    pub sla: Nanos,
    /// Seed of the traffic.
    pub seed: u64,
    /// Server maximum batch (activation slots).
    pub max_batch: u32,
    /// Coverage N (%) of the profiled output lengths that sets dec_timesteps.
    pub coverage: f64,
}

/// A prepared model + device + profile + predictor, reusable across runs.
#[derive(Clone, Debug)]
pub struct Bench {
    /// The model.
    pub model: Model,
    /// The NPU.
    pub npu: Npu,
    /// Its per-node table.
    pub profile: Profile,
    /// The predictor at the configured coverage.
    pub predictor: Predictor,
}

impl Bench {
    /// Profiles `model` on an NPU with `cfg` up to `max_batch` and builds the predictor.
    pub fn new(model: Model, cfg: NpuConfig, max_batch: u32, coverage: f64) -> Result<Bench> {
        if max_batch == 0 {
            return Err(Error::invalid("--max-batch", "must be at least 1"));
        }
        let mut npu = Npu::new(cfg)?;
        let (dts, lens) = profiling_lengths(&model, coverage)?;
        let profile = Profile::measure_parts(&mut npu, &model, max_batch, &lens)?;
        let predictor = Predictor::for_parts(&model, &profile, dts);
        npu.prepare(&model, max_batch)?;
        Ok(Bench {
            model,
            npu,
            profile,
            predictor,
        })
    }

    /// Serial capacity: 1 / single-input latency at the reference lengths (requests/s).
    pub fn serial_capacity(&self) -> f64 {
        self.predictor.serial_capacity(self.model.ref_lengths())
    }

    /// Runs co-located models on Poisson traffic: model `k` receives `rates[k]` req/s and has
    /// SLA `slas[k]` (`cfg.rate` and `cfg.sla` are ignored).
    pub fn run_colocated(
        &self,
        cfg: &SimConfig,
        rates: &[f64],
        slas: &[Nanos],
    ) -> Result<(Stats, Outcome)> {
        let arrivals = traffic::poisson_parts(&self.model, rates, slas, cfg.requests, cfg.seed)?;
        self.run_arrivals(cfg, &arrivals)
    }

    /// Runs one configuration on Poisson traffic.
    pub fn run(&self, cfg: &SimConfig) -> Result<(Stats, Outcome)> {
        let arrivals = traffic::poisson(&self.model, cfg.rate, cfg.requests, cfg.seed)?;
        self.run_arrivals(cfg, &arrivals)
    }

    /// Runs one configuration on given arrivals.
    pub fn run_arrivals(&self, cfg: &SimConfig, arrivals: &[Arrival]) -> Result<(Stats, Outcome)> {
        if cfg.sla.0 == 0 {
            return Err(Error::invalid("--sla-ms", "must be positive"));
        }
        let mut pol = policy::parse_for(&cfg.policy, cfg.max_batch, &self.model)?;
        let mut dev = self.npu.clone();
        let mut clock = VirtualClock::new();
        let out = engine::run(
            &self.model,
            &mut dev,
            pol.as_mut(),
            &mut clock,
            &self.predictor,
            arrivals,
            cfg.sla,
            cfg.max_batch,
            false,
        )?;
        let stats = summarize(&out)?;
        Ok((stats, out))
    }
}
