//! A model on a device, ready to serve ([`Testbed`]): the device (the NPU model, a saved
//! latency table, or a real CPU or CUDA device), its per-node latency table and the slack
//! predictor built on it — one recipe for every device: lengths → profile → predictor. Runs
//! are served on it by the one driver (`drive.rs`), each under a [`RunSpec`] that is checked
//! against the testbed once, here ([`Testbed::setup`]). Traffic is generated as the run asks
//! for it, and a run keeps a fixed-size summary, so its memory does not grow with its length.

use super::RunSpec;
use crate::device::measure::warm_up;
use crate::device::npu::{Npu, NpuConfig};
use crate::device::open::Opened;
use crate::device::table::TableDevice;
use crate::device::Device;
use crate::engine;
use crate::error::{Error, Result};
use crate::graph::Model;
use crate::metrics::KeepRecords;
use crate::profile::Profile;
use crate::runtime::{MaxBatch, Predictor};
use crate::time::Nanos;
use crate::traffic::lengths::profiling_lengths;
use crate::traffic::{self, Traffic};

/// How a testbed gets its latency table.
#[derive(Clone, Debug)]
pub struct TestbedOptions {
    /// The largest batch a run on it may use (the table's largest batch).
    pub max_batch: MaxBatch,
    /// Coverage N (%) of the profiled output lengths that sets dec_timesteps.
    pub coverage: f64,
    /// A table measured earlier on this kind of device, instead of measuring (real devices).
    pub profile: Option<Profile>,
    /// Real devices: how the table is measured (runs per point, their order, progress).
    pub sampling: crate::device::measure::Sampling,
}

/// The device of a testbed.
pub enum Backend {
    /// The NPU model, and its configuration's name.
    Npu(Npu, String),
    /// A saved latency table (`--device profile:FILE`), in virtual time.
    Table(TableDevice),
    /// A real device (behind a lock: it serves one run at a time, and a testbed may be shared
    /// between threads that replay NPU runs).
    Real(std::sync::Mutex<Box<dyn Device + Send>>),
}

/// A prepared model + device + latency table + predictor.
pub struct Testbed {
    /// The model.
    pub model: Model,
    /// The device.
    pub backend: Backend,
    /// Its per-node table.
    pub profile: Profile,
    /// The predictor at the configured coverage.
    pub predictor: Predictor,
    /// The largest batch it was profiled (and its device prepared) for.
    pub max_batch: MaxBatch,
}

impl Testbed {
    /// `model` on an NPU model with configuration `cfg`, profiled up to `max_batch`.
    pub fn new(
        model: Model,
        cfg: NpuConfig,
        max_batch: MaxBatch,
        coverage: f64,
    ) -> Result<Testbed> {
        let opts = TestbedOptions {
            max_batch,
            coverage,
            profile: None,
            sampling: crate::device::measure::Sampling::default(),
        };
        Self::open(model, Opened::Npu(Npu::new(cfg)?, "custom".into()), &opts)
    }

    /// `model` on an opened device: the NPU model profiles itself exactly; a real device is
    /// measured (`opts.reps` runs per point) unless `opts.profile` gives its table.
    pub fn open(model: Model, device: Opened, opts: &TestbedOptions) -> Result<Testbed> {
        let mb = opts.max_batch.get();
        // co-located models: each part at its own lengths and decoder coverage
        let (dts, lens) = profiling_lengths(&model, opts.coverage)?;
        let (backend, profile) = match device {
            Opened::Npu(mut npu, name) => {
                if opts.profile.is_some() {
                    return Err(Error::invalid(
                        "profile",
                        "a saved table applies to real devices; the NPU model profiles itself exactly",
                    ));
                }
                let profile = Profile::measure_parts(&mut npu, &model, mb, &lens)?;
                npu.prepare(&model, mb)?;
                (Backend::Npu(npu, name), profile)
            }
            Opened::Table(mut table) => {
                if opts.profile.is_some() {
                    return Err(Error::invalid(
                        "profile",
                        "a saved table applies to real devices; a table device is its own table",
                    ));
                }
                table.prepare(&model, mb)?;
                let profile = table.table().clone();
                (Backend::Table(table), profile)
            }
            Opened::Real(mut device) => {
                let profile = match &opts.profile {
                    Some(p) => {
                        p.check_matches(&model)?;
                        device.prepare(&model, mb)?;
                        // a measured table ran every shape already; a loaded one did not
                        warm_up(device.as_mut(), &model, mb, &lens)?;
                        p.clone()
                    }
                    None => {
                        Profile::measure_sampled(device.as_mut(), &model, mb, &lens, opts.sampling)?
                    }
                };
                (Backend::Real(std::sync::Mutex::new(device)), profile)
            }
        };
        let predictor = Predictor::for_parts(&model, &profile, dts);
        Ok(Testbed {
            model,
            backend,
            profile,
            predictor,
            max_batch: opts.max_batch,
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

    /// The SLAs of `spec` that no request can meet even served alone: each (what it is, its
    /// SLA, the single-input latency at the reference lengths of the model it applies to).
    /// Such a run reports every request late, and its SLA-aware policies find no slack to
    /// batch with.
    pub fn slas_below_single_input(&self, spec: &RunSpec) -> Vec<(String, Nanos, Nanos)> {
        let alone = |p: usize| {
            self.predictor
                .single_input_of(p, self.model.ref_lengths_of(p))
        };
        let mut below = Vec::new();
        match (&spec.colocated, &spec.classes) {
            (Some(c), _) => {
                for (p, sla) in c.slas().iter().enumerate() {
                    let name = &self.model.parts[p].name;
                    below.push((format!("{name}'s SLA"), sla.nanos(), alone(p)));
                }
            }
            (None, Some(classes)) => {
                for (name, &sla) in classes.names.iter().zip(&classes.slas) {
                    below.push((format!("class {name}'s SLA"), sla, alone(0)));
                }
            }
            (None, None) => below.push(("the SLA".to_string(), spec.sla.nanos(), alone(0))),
        }
        below.retain(|(_, sla, alone)| sla < alone);
        below
    }

    /// Traffic for `spec` from its arrival process: at `spec.rate`, shared by co-located models
    /// at their shares, each at its SLA; generated as the run asks for it.
    pub fn traffic(&self, spec: &RunSpec) -> Result<Traffic> {
        let p = match &spec.colocated {
            Some(c) => {
                let rates: Vec<f64> = c.shares().iter().map(|s| s * spec.rate).collect();
                let slas: Vec<_> = c.slas().iter().map(|s| s.nanos()).collect();
                let parts = (&rates[..], &slas[..]);
                traffic::generate_parts(
                    &self.model,
                    spec.arrivals,
                    parts,
                    spec.requests,
                    spec.seed,
                )?
            }
            None => {
                let process = (spec.arrivals, spec.rate);
                traffic::generate(&self.model, process, spec.requests, spec.seed)?
            }
        };
        let p = match &spec.classes {
            Some(c) => p.with_classes(c, spec.seed),
            None => p,
        };
        Ok(p.traffic(spec.rate))
    }

    /// The engine's rules for `spec` on this testbed: the spec is checked against the model and
    /// the table here, once ([`RunSpec::check_for`]); nothing below checks it again.
    pub fn setup(&self, spec: &RunSpec, keep: KeepRecords) -> Result<engine::Setup<'_>> {
        spec.check_for(&self.model, self.max_batch)?;
        Ok(engine::Setup {
            max_pending: spec.max_pending,
            keep,
            classes: spec.classes.as_ref().map_or(1, |c| c.names.len()),
            shed: spec.shed,
            admit: spec.admit,
            abandon_late: spec.abandon_late,
            ..engine::Setup::new(&self.model, &self.predictor, spec.sla, spec.max_batch)
        })
    }

    /// The real device, when that is what the testbed has (None for a model device), with the
    /// model it is prepared for.
    pub fn real_device(&mut self) -> Result<Option<(&mut (dyn Device + Send), &Model)>> {
        match &mut self.backend {
            Backend::Real(d) => Ok(Some((
                d.get_mut()
                    .map_err(|_| Error::Internal("a real device's earlier run panicked".into()))?
                    .as_mut(),
                &self.model,
            ))),
            Backend::Npu(..) | Backend::Table(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::measure::sampled_sizes;
    use crate::device::{Member, Timing};
    use crate::graph::{zoo, NodeStep};
    use std::sync::{Arc, Mutex};

    /// A real device in all but its time: the NPU model underneath, each execution noted.
    struct Counting {
        npu: Npu,
        seen: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Device for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn is_virtual(&self) -> bool {
            false
        }
        fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
            self.npu.prepare(model, max_batch)
        }
        fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
            self.seen
                .lock()
                .unwrap()
                .push((at.node.idx(), members.len()));
            self.npu.execute(model, at, members)
        }
    }

    #[test]
    fn a_real_device_opened_on_a_loaded_table_runs_every_node_at_every_sampled_size_first() {
        let model = zoo::load("gnmt").unwrap();
        let mb = 8;
        let mut npu = Npu::new(NpuConfig::default()).unwrap();
        let (_, lens) = profiling_lengths(&model, 95.0).unwrap();
        let table = Profile::measure_parts(&mut npu, &model, mb, &lens).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let device = Counting {
            npu: Npu::new(NpuConfig::default()).unwrap(),
            seen: seen.clone(),
        };
        let opts = TestbedOptions {
            max_batch: MaxBatch::new(mb).unwrap(),
            coverage: 95.0,
            profile: Some(table),
            sampling: crate::device::measure::Sampling::default(),
        };
        Testbed::open(model.clone(), Opened::Real(Box::new(device)), &opts).unwrap();
        let mut want = Vec::new();
        for b in sampled_sizes(mb) {
            want.extend(model.nodes.iter().map(|n| (n.id.idx(), b as usize)));
        }
        assert_eq!(*seen.lock().unwrap(), want);
    }
}
