//! Devices: what executes one node for one sub-batch and says how long it took. The engine and
//! the policies never see anything but the [`Device`] trait; the NPU model answers in virtual
//! time, real devices (CPU, CUDA) in measured wall time.

pub mod capture;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod emulated;
pub mod exchange;
pub mod layout;
pub mod measure;
pub(crate) mod memory;
pub mod npu;
pub mod open;
pub mod table;
pub mod weights;

use crate::error::Result;
use crate::graph::{Lengths, Model, NodeStep};
use crate::time::Nanos;

/// One request in a sub-batch, as a device sees it: where its activations live and how long its
/// sequences are. A device never sees arrival times or deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Index of the request's preallocated activation slot (0..max_batch).
    pub slot: u32,
    /// The request's sequence lengths (model steps).
    pub len: Lengths,
    /// Key of the request's input (its id): real devices generate the input data from it.
    pub input: u64,
    /// The step this member executes the node at. Equal to the sub-batch's step, except when
    /// cells of different timesteps of one loop layer batch together (cellular batching).
    pub step: u32,
}

impl Member {
    /// A request running alone at lengths `len`, at step `step`: the first slot and input 0
    /// (how profiling and the single-input latency walk a request through the model).
    pub fn alone(len: Lengths, step: u32) -> Self {
        Member {
            slot: 0,
            len,
            input: 0,
            step,
        }
    }
}

/// Timing detail a model-based device can report for one execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Elapsed time.
    pub time: Nanos,
    /// Cycles the compute units were busy (systolic array plus vector unit).
    pub compute_cycles: u64,
    /// Cycles the DRAM transfers take at the configured bandwidth.
    pub memory_cycles: u64,
}

/// A device that executes one node of a model for one sub-batch at a time.
pub trait Device {
    /// Short name (`npu`, `cpu`, `cuda`).
    fn name(&self) -> &'static str;
    /// The device in words for reports and saved profiles: its kind and, for a real device,
    /// what it runs on (the GPU's name for CUDA).
    fn description(&self) -> String {
        self.name().to_string()
    }
    /// True when `execute` returns modeled (virtual) time rather than measured time.
    fn is_virtual(&self) -> bool;
    /// Prepares for serving `model`: weights, buffers sized for `max_batch`, cost tables.
    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()>;
    /// Executes `at` for the sub-batch `members` and returns the device time it took.
    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing>;
    /// Executes `at` for `count` members that all stand where `member` does (its lengths and
    /// step; slots and inputs 0..count): how profiling times a batch size. A virtual device
    /// answers in O(1); the default builds the sub-batch and executes it.
    fn execute_uniform(
        &mut self,
        model: &Model,
        at: NodeStep,
        member: Member,
        count: u32,
    ) -> Result<Timing> {
        let members: Vec<Member> = (0..count)
            .map(|slot| Member {
                slot,
                input: u64::from(slot),
                ..member
            })
            .collect();
        self.execute(model, at, &members)
    }
    /// A virtual device's shortcut for a run of nodes whose time depends on the batch size only:
    /// how many consecutive nodes from `from` (at most `max_nodes`) it can time at once for a
    /// sub-batch of `batch`, stopping after the node during which `budget` runs out (if given),
    /// and their total time — exactly the sum of their one-by-one times. None: execute node by
    /// node (real devices always).
    fn time_run(
        &self,
        _model: &Model,
        _from: crate::graph::NodeId,
        _batch: usize,
        _max_nodes: u32,
        _budget: Option<Nanos>,
    ) -> Option<(u32, Nanos)> {
        None
    }
    /// Says the device sat idle for `idle` before the node it executes next
    /// ([`Nanos::MAX`]: since before the run). A device that models what idling costs (the
    /// table device's measured after-idle rows) uses it; the others ignore it.
    fn resume(&mut self, _idle: Nanos) {}
    /// Called when a request completes, before its slot is reused. Model devices ignore it.
    fn complete(&mut self, _member: &Member) {}
    /// Exchanges request data with a front end through `x` (real devices): inputs taken from it
    /// instead of generated, final outputs put in it when a request completes. Model devices
    /// ignore it (they compute no values).
    fn set_exchange(&mut self, _x: Option<std::sync::Arc<exchange::Exchange>>) {}
    /// Starts (or, with [`capture::CaptureMode::Off`], stops) recording outputs (real devices;
    /// for `verify` and device-against-device checks). Called between runs, while no request is
    /// part-way through the model: what a real device computes may depend on what is captured
    /// (the CPU device runs a depthwise convolution inside the 1×1 convolution that reads it
    /// unless the capture wants its output). A front end's exchange stays: inputs still come
    /// from it, and final outputs go to it as requests complete.
    fn set_capture(&mut self, _mode: capture::CaptureMode) {}
    /// What was recorded since [`Device::set_capture`] (empty for model devices); recording
    /// stops, a front end's exchange stays.
    fn take_captured(&mut self) -> capture::Capture {
        capture::Capture::default()
    }
    /// A one-line notice on how the device was set up, when it took a slower path than asked
    /// for by default (the CUDA device without cuDNN); None otherwise.
    fn notice(&self) -> Option<String> {
        None
    }
}

/// A real device users can name (`--device NAME`): adding one is its module, that module's
/// `mod` line and its line in [`open::REAL`].
pub struct RealDevice {
    /// The name `--device` takes.
    pub name: &'static str,
    /// Whether `auto` picks it when it is usable (before falling back to the NPU model).
    pub auto: bool,
    /// How many such devices this machine has, or why it cannot be used.
    pub usable: fn() -> Result<i32>,
    /// Opens the first one with the given options.
    pub open: fn(&RealOptions) -> Result<Box<dyn Device + Send>>,
    /// The storage precisions it accepts (`f32` first).
    pub precisions: &'static [&'static str],
    /// Whether it takes `--cuda-graphs`.
    pub graphs: bool,
    /// Whether it takes `--conv` (a choice of convolution path).
    pub convs: bool,
}

/// How a real device is opened: the seed of its generated weights and inputs
/// (`--weights-seed`), the precision of GEMMs and convolutions (`--precision`), whether a
/// node's launches replay as CUDA graphs (`--cuda-graphs`) and how convolutions run (`--conv`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealOptions {
    /// Seed of the generated weights and inputs.
    pub seed: u64,
    /// `f32`, `f16` or `tf32`.
    pub precision: String,
    /// CUDA graphs on.
    pub cuda_graphs: bool,
    /// `auto`, `cudnn` or `im2col` (CUDA).
    pub conv: String,
}

impl RealOptions {
    /// f32, no graphs, convolutions as the device chooses.
    pub fn seeded(seed: u64) -> Self {
        RealOptions {
            seed,
            precision: "f32".into(),
            cuda_graphs: false,
            conv: "auto".into(),
        }
    }
}
