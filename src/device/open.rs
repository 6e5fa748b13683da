//! Opening a device by name: `auto` (CUDA when usable, else the NPU model), `npu` (with a named
//! or file NPU configuration), `cpu` or `cuda`, checked once into a [`Choice`] and opened by
//! [`open`]. The CUDA part is a module swapped by the `cuda` cargo feature (a stub that says the
//! build has no CUDA support when it is off), so nothing else in the crate needs a `cfg`.

#[cfg_attr(feature = "cuda", path = "open/cuda_on.rs")]
#[cfg_attr(not(feature = "cuda"), path = "open/cuda_off.rs")]
mod cuda_backend;

pub use cuda_backend::{compile_kernels, KernelFile};

use super::cpu::CpuDevice;
use super::npu::{Npu, NpuConfig};
use super::Device;
use crate::error::{Error, Result};

/// The kinds of device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The cycle-level NPU model (virtual time).
    Npu,
    /// Real kernels on the CPU (wall time).
    Cpu,
    /// Real kernels on an NVIDIA GPU (wall time).
    Cuda,
}

/// A validated device choice.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Which device (`auto` resolved).
    pub kind: Kind,
    /// Why `auto` chose it, to tell the user (None when the device was named).
    pub note: Option<String>,
    /// The NPU configuration's name (a shipped name or the file given) and its values.
    pub npu: (String, NpuConfig),
    /// Seed of the generated weights and inputs of a real device.
    pub weights_seed: u64,
    /// CUDA: storage precision of GEMM operands (`f32`, `f16`).
    pub precision: String,
}

impl Choice {
    /// Checks a device name (`auto`, `npu`, `cpu`, `cuda`), an NPU configuration (a shipped
    /// name or a TOML file; None: `default`) and a CUDA precision.
    pub fn new(
        device: &str,
        npu_config: Option<&str>,
        weights_seed: u64,
        precision: &str,
    ) -> Result<Choice> {
        let (kind, note) = match device {
            "npu" => (Kind::Npu, None),
            "cpu" => (Kind::Cpu, None),
            "cuda" => {
                cuda_backend::require()?;
                (Kind::Cuda, None)
            }
            "auto" => match cuda_backend::usable() {
                Ok(n) => (
                    Kind::Cuda,
                    Some(format!("device auto: using CUDA ({n} device(s) found)")),
                ),
                Err(why) => {
                    let why = match why {
                        Error::DeviceUnavailable { msg, .. } => msg,
                        other => other.to_string(),
                    };
                    let note = format!("device auto: {why}; using the npu model (virtual time)");
                    (Kind::Npu, Some(note))
                }
            },
            other => {
                return Err(Error::invalid(
                    "--device",
                    format!("unknown device '{other}' (available: auto, npu, cpu, cuda)"),
                ))
            }
        };
        if kind != Kind::Cuda && precision != "f32" {
            return Err(Error::invalid(
                "--precision",
                format!("{precision} applies to --device cuda"),
            ));
        }
        let name = npu_config.unwrap_or("default").to_string();
        let cfg = NpuConfig::resolve(&name)?;
        Ok(Choice {
            kind,
            note,
            npu: (name, cfg),
            weights_seed,
            precision: precision.to_string(),
        })
    }
}

/// An opened device: the NPU model (kept concrete, so that simulated runs clone it and run in
/// parallel) or a real device.
pub enum Opened {
    /// The NPU model and its configuration's name.
    Npu(Npu, String),
    /// A real device.
    Real(Box<dyn Device + Send>),
}

/// Opens the device of `choice`.
pub fn open(choice: &Choice) -> Result<Opened> {
    Ok(match choice.kind {
        Kind::Npu => Opened::Npu(Npu::new(choice.npu.1.clone())?, choice.npu.0.clone()),
        Kind::Cpu => Opened::Real(Box::new(CpuDevice::new(choice.weights_seed))),
        Kind::Cuda => Opened::Real(cuda_backend::open(choice.weights_seed, &choice.precision)?),
    })
}

/// Opens a real device of `kind` (`cpu` or `cuda`) for `verify`.
pub fn open_real(kind: &str, seed: u64, precision: &str) -> Result<Box<dyn Device + Send>> {
    match kind {
        "cpu" => Ok(Box::new(CpuDevice::new(seed))),
        "cuda" => {
            cuda_backend::require()?;
            cuda_backend::open(seed, precision)
        }
        other => Err(Error::invalid(
            "--device",
            format!("verify runs on a real device: cpu or cuda (got '{other}')"),
        )),
    }
}
