//! A model on a device, ready to serve: the device (the NPU model, a saved latency table, or a
//! real CPU or CUDA device), its per-node latency table and the slack predictor built on it.
//! One recipe for every device — lengths → profile → predictor; then per run: policy → engine
//! → summary — and one run configuration ([`RunConfig`]). The NPU model and a table run in
//! virtual time and, being models, can replay many runs at once ([`Bench::run`] takes `&self`);
//! a real device serves one run at a time in wall time ([`Bench::serve`]). Traffic is generated as the run asks for
//! it, and the run keeps a fixed-size summary, so a run's memory does not grow with its length.

use crate::device::npu::{Npu, NpuConfig};
use crate::device::open::Opened;
use crate::device::table::TableDevice;
use crate::device::Device;
use crate::engine::{self, ArrivalSource, Outcome};
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::lengths::profiling_lengths;
use crate::metrics::KeepRecords;
use crate::policy;
use crate::profile::Profile;
use crate::runtime::Predictor;
use crate::time::{Nanos, VirtualClock, MAX_SLA};
use crate::traffic::{self, Traffic};

/// Everything that fixes one run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The policy.
    pub policy: policy::Spec,
    /// Mean arrival rate (requests/s).
    pub rate: f64,
    /// The arrival process (`--arrivals`).
    pub arrivals: traffic::Process,
    /// SLA classes (`--classes`; `None`: every request at `sla`).
    pub classes: Option<traffic::Classes>,
    /// Reject requests whose deadline is lost (`--shed`).
    pub shed: bool,
    /// Number of requests.
    pub requests: usize,
    /// SLA target.
    pub sla: Nanos,
    /// Seed of the traffic.
    pub seed: u64,
    /// Server maximum batch (activation slots).
    pub max_batch: u32,
    /// The most requests waiting in the pending queue; more are rejected and counted.
    pub max_pending: usize,
}

/// How a bench gets its latency table.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Server maximum batch (activation slots; the table's largest batch).
    pub max_batch: u32,
    /// Coverage N (%) of the profiled output lengths that sets dec_timesteps.
    pub coverage: f64,
    /// A table measured earlier on this kind of device, instead of measuring (real devices).
    pub profile: Option<Profile>,
    /// Real devices: how the table is measured (runs per point, their order, progress).
    pub sampling: crate::profile::Sampling,
}

/// The device of a bench.
pub enum Backend {
    /// The NPU model, and its configuration's name.
    Npu(Npu, String),
    /// A saved latency table (`--device profile:FILE`), in virtual time.
    Table(TableDevice),
    /// A real device (behind a lock: it serves one run at a time, and a bench may be shared
    /// between threads that replay NPU runs).
    Real(std::sync::Mutex<Box<dyn Device + Send>>),
}

/// A prepared model + device + latency table + predictor.
pub struct Bench {
    /// The model.
    pub model: Model,
    /// The device.
    pub backend: Backend,
    /// Its per-node table.
    pub profile: Profile,
    /// The predictor at the configured coverage.
    pub predictor: Predictor,
}

impl Bench {
    /// `model` on an NPU model with configuration `cfg`, profiled up to `max_batch`.
    pub fn new(model: Model, cfg: NpuConfig, max_batch: u32, coverage: f64) -> Result<Bench> {
        let opts = BenchOptions {
            max_batch,
            coverage,
            profile: None,
            sampling: crate::profile::Sampling::default(),
        };
        Self::open(model, Opened::Npu(Npu::new(cfg)?, "custom".into()), &opts)
    }

    /// `model` on an opened device: the NPU model profiles itself exactly; a real device is
    /// measured (`opts.reps` runs per point) unless `opts.profile` gives its table.
    pub fn open(model: Model, device: Opened, opts: &BenchOptions) -> Result<Bench> {
        if opts.max_batch == 0 {
            return Err(Error::invalid("--max-batch", "must be at least 1"));
        }
        // co-located models: each part at its own lengths and decoder coverage
        let (dts, lens) = profiling_lengths(&model, opts.coverage)?;
        let (backend, profile) = match device {
            Opened::Npu(mut npu, name) => {
                if opts.profile.is_some() {
                    return Err(Error::invalid(
                        "--profile",
                        "applies to real devices; the NPU model profiles itself exactly",
                    ));
                }
                let profile = Profile::measure_parts(&mut npu, &model, opts.max_batch, &lens)?;
                npu.prepare(&model, opts.max_batch)?;
                (Backend::Npu(npu, name), profile)
            }
            Opened::Table(mut table) => {
                if opts.profile.is_some() {
                    return Err(Error::invalid(
                        "--profile",
                        "applies to real devices; --device profile:FILE is its own table",
                    ));
                }
                table.prepare(&model, opts.max_batch)?;
                let profile = table.table().clone();
                (Backend::Table(table), profile)
            }
            Opened::Real(mut device) => {
                let profile = match &opts.profile {
                    Some(p) => {
                        p.check_matches(&model)?;
                        device.prepare(&model, opts.max_batch)?;
                        p.clone()
                    }
                    None => Profile::measure_sampled(
                        device.as_mut(),
                        &model,
                        opts.max_batch,
                        &lens,
                        opts.sampling,
                    )?,
                };
                (Backend::Real(std::sync::Mutex::new(device)), profile)
            }
        };
        let predictor = Predictor::for_parts(&model, &profile, dts);
        Ok(Bench {
            model,
            backend,
            profile,
            predictor,
        })
    }

    /// The NPU model, if that is the device.
    pub fn npu(&self) -> Option<&Npu> {
        match &self.backend {
            Backend::Npu(n, _) => Some(n),
            Backend::Table(_) | Backend::Real(_) => None,
        }
    }

    /// True for the NPU model and a table (virtual time; runs can be replayed in parallel).
    pub fn is_virtual(&self) -> bool {
        matches!(self.backend, Backend::Npu(..) | Backend::Table(_))
    }

    /// The device in words for reports: `npu (paper)`, `cpu`, `cuda (<GPU>)`.
    pub fn description(&self) -> String {
        match &self.backend {
            Backend::Npu(_, name) => format!("npu ({name})"),
            Backend::Table(t) => t.description(),
            Backend::Real(d) => d
                .lock()
                .map_or_else(|_| "real device".into(), |d| d.description()),
        }
    }

    /// Serial capacity: 1 / single-input latency at the reference lengths (requests/s).
    pub fn serial_capacity(&self) -> f64 {
        self.predictor.serial_capacity(self.model.ref_lengths())
    }

    /// Traffic for `cfg` from its arrival process: at `cfg.rate`, or for co-located models at
    /// `rates[k]` with SLA `slas[k]` each; generated as the run asks for it.
    pub fn traffic(&self, cfg: &RunConfig, colo: Option<(&[f64], &[Nanos])>) -> Result<Traffic> {
        let p = match colo {
            Some((rates, slas)) => {
                let parts = (rates, slas);
                traffic::generate_parts(&self.model, cfg.arrivals, parts, cfg.requests, cfg.seed)?
            }
            None => {
                let process = (cfg.arrivals, cfg.rate);
                traffic::generate(&self.model, process, cfg.requests, cfg.seed)?
            }
        };
        let p = match &cfg.classes {
            Some(c) => p.with_classes(c, cfg.seed),
            None => p,
        };
        Ok(p.traffic(cfg.rate))
    }

    /// Runs one configuration on Poisson traffic in virtual time (the NPU model); `colo` gives
    /// co-located models' rates and SLAs (`cfg.rate` and `cfg.sla` are then ignored).
    pub fn run(
        &self,
        cfg: &RunConfig,
        colo: Option<(&[f64], &[Nanos])>,
        keep: KeepRecords,
    ) -> Result<Outcome> {
        let t = self.traffic(cfg, colo)?;
        let mut src = engine::Stream::new(t.arrivals, t.expected);
        self.run_source(cfg, keep, &mut src)
    }

    /// Runs one configuration on any virtual-time arrival source, on a copy of the NPU model
    /// or the table (so that many runs can go at once). A real device serves through
    /// [`Bench::serve`].
    pub fn run_source(
        &self,
        cfg: &RunConfig,
        keep: KeepRecords,
        arrivals: &mut dyn ArrivalSource,
    ) -> Result<Outcome> {
        let setup = setup(&self.model, &self.predictor, cfg, keep)?;
        let mut pol = cfg.policy.build();
        let mut clock = VirtualClock::new();
        match &self.backend {
            Backend::Npu(npu, _) => {
                engine::run_source(&setup, &mut npu.clone(), pol.as_mut(), &mut clock, arrivals)
            }
            Backend::Table(t) => {
                engine::run_source(&setup, &mut t.clone(), pol.as_mut(), &mut clock, arrivals)
            }
            Backend::Real(_) => Err(Error::Internal(
                "a real device serves one run at a time, in wall time (Bench::serve)".into(),
            )),
        }
    }

    /// Serves `traffic` under `cfg` on any device: the NPU model in virtual time, a real
    /// device in wall time with the requests delivered at their real instants.
    pub fn serve(&mut self, cfg: &RunConfig, keep: KeepRecords, t: Traffic) -> Result<Outcome> {
        if self.is_virtual() {
            let mut src = engine::Stream::new(t.arrivals, t.expected);
            return self.run_source(cfg, keep, &mut src);
        }
        let Bench {
            model,
            predictor,
            backend,
            ..
        } = self;
        let setup = setup(model, predictor, cfg, keep)?;
        let mut pol = cfg.policy.build();
        let Backend::Real(device) = backend else {
            return Err(Error::Internal("not a real device".into()));
        };
        let device = device
            .get_mut()
            .map_err(|_| Error::Internal("a real device's earlier run panicked".into()))?;
        crate::wall::serve(&setup, device.as_mut(), pol.as_mut(), t)
    }
}

impl Bench {
    /// Serves a network front end on the wall clock until its senders are gone and the server
    /// has drained: requests from `arrivals`, each one's departure told to `observer`, its
    /// data exchanged through `exchange` (a real device computes on the front end's inputs; the
    /// NPU model computes nothing and, wrapped in [`crate::wall::Emulated`], takes its modelled
    /// time on the wall clock).
    pub fn serve_front_end(
        &mut self,
        cfg: &RunConfig,
        observer: &dyn engine::Observer,
        exchange: std::sync::Arc<crate::device::exchange::Exchange>,
        arrivals: &mut crate::wall::ChannelArrivals,
    ) -> Result<Outcome> {
        let Bench {
            model,
            predictor,
            backend,
            ..
        } = self;
        let mut setup = setup(model, predictor, cfg, KeepRecords::default())?;
        setup.observer = Some(observer);
        let mut pol = cfg.policy.build();
        let mut clock = crate::wall::WallClock::starting_at(arrivals.origin());
        match backend {
            Backend::Npu(npu, _) => {
                let mut dev = crate::wall::Emulated::new(npu.clone());
                engine::run_source(&setup, &mut dev, pol.as_mut(), &mut clock, arrivals)
            }
            Backend::Table(t) => {
                let mut dev = crate::wall::Emulated::new(t.clone());
                engine::run_source(&setup, &mut dev, pol.as_mut(), &mut clock, arrivals)
            }
            Backend::Real(device) => {
                let device = device
                    .get_mut()
                    .map_err(|_| Error::Internal("a real device's earlier run panicked".into()))?;
                device.set_exchange(Some(exchange));
                let out =
                    engine::run_source(&setup, device.as_mut(), pol.as_mut(), &mut clock, arrivals);
                device.set_exchange(None);
                out
            }
        }
    }
}

/// The engine's rules for `cfg` on `model`, checked.
fn setup<'a>(
    model: &'a Model,
    predictor: &'a Predictor,
    cfg: &RunConfig,
    keep: KeepRecords,
) -> Result<engine::Setup<'a>> {
    check_sla(cfg)?;
    cfg.policy.check_for(model)?;
    if cfg.max_pending == 0 {
        return Err(Error::invalid("--max-pending", "must be at least 1"));
    }
    Ok(engine::Setup {
        max_pending: cfg.max_pending,
        keep,
        classes: cfg.classes.as_ref().map_or(1, |c| c.names.len()),
        shed: cfg.shed,
        ..engine::Setup::new(model, predictor, cfg.sla, cfg.max_batch)
    })
}

/// Checks an SLA against (0, [`MAX_SLA`]]; `what` names the flag.
pub fn check_sla_ms(what: &str, ms: f64) -> Result<Nanos> {
    crate::time::sla_from_ms(ms).ok_or_else(|| {
        Error::invalid(
            what,
            format!(
                "must be in {}, got {}",
                crate::time::SLA_RANGE,
                crate::error::num(ms)
            ),
        )
    })
}

fn check_sla(cfg: &RunConfig) -> Result<()> {
    if cfg.sla.0 == 0 || cfg.sla > MAX_SLA {
        return Err(Error::invalid(
            "--sla-ms",
            format!("must be in (0, {}] ms (one day)", MAX_SLA.as_ms()),
        ));
    }
    Ok(())
}
