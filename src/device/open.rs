//! Opening a device by name: `npu` (with a named or file NPU configuration), a real device
//! from [`REAL`] (`cuda`, `cpu`: each declared by its own module as a [`RealDevice`]),
//! `profile:FILE` (a saved latency table in virtual time, [`super::table`]), or `auto` (the
//! first real device marked for it that is usable here, else the NPU model), checked
//! once into a [`Choice`] and opened by [`open`]. The CUDA part is a module swapped by the
//! `cuda` cargo feature (a stub that says the build has no CUDA support when it is off), so
//! nothing else in the crate needs a `cfg`.

#[cfg_attr(feature = "cuda", path = "open/cuda_on.rs")]
#[cfg_attr(not(feature = "cuda"), path = "open/cuda_off.rs")]
mod cuda_backend;

pub use cuda_backend::{compile_kernels, KernelFile};

use super::npu::{Npu, NpuConfig};
use super::table::TableDevice;
use super::{Device, RealDevice, RealOptions};
use crate::error::{Error, Result};

/// The real devices, in the order `auto` tries them.
pub const REAL: &[&RealDevice] = &[&cuda_backend::DEVICE, &super::cpu::DEVICE];

/// The kinds of device.
#[derive(Clone, Copy)]
pub enum Kind {
    /// The cycle-level NPU model (virtual time).
    Npu,
    /// A real device (wall time).
    Real(&'static RealDevice),
    /// A saved latency table (virtual time); the file is the choice's `table`.
    Table,
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Npu => f.write_str("npu"),
            Kind::Real(d) => f.write_str(d.name),
            Kind::Table => f.write_str("profile"),
        }
    }
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
    /// How a real device is opened (checked against the device chosen).
    pub real: RealOptions,
    /// The latency table of `--device profile:FILE`.
    pub table: Option<std::path::PathBuf>,
}

/// The real device named `name`, checked to be usable here.
fn real(name: &str) -> Option<Result<&'static RealDevice>> {
    REAL.iter()
        .find(|d| d.name == name)
        .map(|d| (d.usable)().map(|_| *d))
}

impl Choice {
    /// Checks a device name (`auto`, `npu`, `profile:FILE`, or a real device's), an NPU
    /// configuration (a shipped name or a TOML file; None: `default`) and a real device's
    /// options.
    pub fn new(device: &str, npu_config: Option<&str>, opts: RealOptions) -> Result<Choice> {
        let (kind, note) = match device {
            "npu" => (Kind::Npu, None),
            name if name.starts_with("profile:") => (Kind::Table, None),
            "auto" => auto(),
            name => match real(name) {
                Some(d) => (Kind::Real(d?), None),
                None => {
                    let mut known = vec!["auto", "npu", "profile:FILE"];
                    known.extend(REAL.iter().map(|d| d.name));
                    return Err(Error::invalid(
                        "--device",
                        format!("unknown device '{name}' (available: {})", known.join(", ")),
                    ));
                }
            },
        };
        let accepted: &[&str] = match kind {
            Kind::Npu | Kind::Table => &["f32"],
            Kind::Real(d) => d.precisions,
        };
        check_precision(accepted, &opts.precision)?;
        check_graphs(kind, &opts)?;
        check_conv(kind, &opts)?;
        if let (Some(_), Kind::Real(_) | Kind::Table) = (npu_config, kind) {
            return Err(Error::invalid(
                "--npu-config",
                format!("applies to --device npu (the NPU model), not {kind:?}"),
            ));
        }
        let name = npu_config.unwrap_or("default").to_string();
        let cfg = NpuConfig::resolve(&name)?;
        let table = match device.strip_prefix("profile:") {
            Some("") => {
                return Err(Error::invalid(
                    "--device",
                    "profile:FILE needs the table's file (written by `profile --save FILE`)",
                ))
            }
            Some(f) => Some(std::path::PathBuf::from(f)),
            None => None,
        };
        Ok(Choice {
            kind,
            note,
            npu: (name, cfg),
            real: opts,
            table,
        })
    }
}

/// Checks that `--cuda-graphs` goes to a device that takes it.
fn check_graphs(kind: Kind, real: &RealOptions) -> Result<()> {
    match kind {
        Kind::Real(d) if d.graphs => Ok(()),
        _ if !real.cuda_graphs => Ok(()),
        k => Err(Error::invalid(
            "--cuda-graphs",
            format!("applies to --device cuda, not {k:?}"),
        )),
    }
}

/// The values `--conv` takes.
const CONVS: &[&str] = &["auto", "cudnn", "cudnn-legacy", "im2col"];

/// Checks `--conv`: one of [`CONVS`], and other than `auto` only for a device that takes it.
fn check_conv(kind: Kind, real: &RealOptions) -> Result<()> {
    if !CONVS.contains(&real.conv.as_str()) {
        return Err(Error::invalid(
            "--conv",
            format!(
                "unknown convolution path '{}' (allowed: {})",
                real.conv,
                CONVS.join(", ")
            ),
        ));
    }
    match kind {
        Kind::Real(d) if d.convs => Ok(()),
        _ if real.conv == "auto" => Ok(()),
        k => Err(Error::invalid(
            "--conv",
            format!("applies to --device cuda, not {k:?}"),
        )),
    }
}

/// Checks that a device accepting `accepted` precisions can store GEMM operands in `precision`.
fn check_precision(accepted: &[&str], precision: &str) -> Result<()> {
    if accepted.contains(&precision) {
        return Ok(());
    }
    let takes: Vec<String> = REAL
        .iter()
        .filter(|d| d.precisions.contains(&precision))
        .map(|d| format!("--device {}", d.name))
        .collect();
    let msg = if takes.is_empty() {
        let mut all: Vec<&str> = REAL
            .iter()
            .flat_map(|d| d.precisions.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        format!(
            "unknown precision '{precision}' (allowed: {})",
            all.join(", ")
        )
    } else {
        format!("{precision} applies to {}", takes.join(", "))
    };
    Err(Error::invalid("--precision", msg))
}

/// `auto`: the first real device marked for it that is usable here, else the NPU model; and
/// why, in one short line (the first missing piece only: `--device cuda` gives every one, with
/// how to install it).
fn auto() -> (Kind, Option<String>) {
    let mut why = Vec::new();
    for d in REAL.iter().filter(|d| d.auto) {
        match (d.usable)() {
            Ok(n) => {
                let note = format!(
                    "device auto: using {} ({n} device(s) found)",
                    d.name.to_uppercase()
                );
                return (Kind::Real(d), Some(note));
            }
            Err(Error::DeviceUnavailable { msg, .. }) => {
                // "no NVIDIA driver (libcuda.so.1 …); no cuBLAS …" → "no NVIDIA driver"
                let first = msg.split([';', '(']).next().unwrap_or(&msg).trim();
                why.push(format!(
                    "no usable {} device ({first})",
                    d.name.to_uppercase()
                ))
            }
            Err(other) => why.push(other.to_string()),
        }
    }
    let note = format!(
        "device auto: {}; using the npu model (--device npu skips this check, --device cpu runs real kernels, --device cuda says what is missing)",
        why.join("; ")
    );
    (Kind::Npu, Some(note))
}

/// An opened device: the NPU model or a latency table (kept concrete, so that simulated runs
/// clone them and run in parallel), or a real device.
pub enum Opened {
    /// The NPU model and its configuration's name.
    Npu(Npu, String),
    /// A saved latency table in virtual time.
    Table(TableDevice),
    /// A real device.
    Real(Box<dyn Device + Send>),
}

/// Opens the device of `choice`.
pub fn open(choice: &Choice) -> Result<Opened> {
    Ok(match choice.kind {
        Kind::Npu => Opened::Npu(Npu::new(choice.npu.1.clone())?, choice.npu.0.clone()),
        Kind::Real(d) => Opened::Real((d.open)(&choice.real)?),
        Kind::Table => {
            let path = choice.table.as_ref().ok_or_else(|| {
                Error::Internal("a profile device chosen without its file".into())
            })?;
            Opened::Table(TableDevice::load(path)?)
        }
    })
}

/// Opens the real device named `name` for `verify`.
pub fn open_real(name: &str, o: &RealOptions) -> Result<Box<dyn Device + Send>> {
    match real(name) {
        Some(d) => {
            let d = d?;
            check_precision(d.precisions, &o.precision)?;
            check_graphs(Kind::Real(d), o)?;
            check_conv(Kind::Real(d), o)?;
            (d.open)(o)
        }
        None => {
            let known: Vec<&str> = REAL.iter().map(|d| d.name).collect();
            Err(Error::invalid(
                "--device",
                format!(
                    "verify runs on a real device: {} (got '{name}')",
                    known.join(" or ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(precision: &str) -> RealOptions {
        RealOptions {
            precision: precision.into(),
            ..RealOptions::seeded(1)
        }
    }

    fn error(device: &str, precision: &str) -> String {
        match Choice::new(device, None, opts(precision)) {
            Ok(c) => panic!("{device}/{precision} accepted as {:?}", c.kind),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_registered_device_is_named_in_the_unknown_device_error() {
        let e = error("tpu", "f32");
        assert!(e.contains("--device") && e.contains("'tpu'"), "{e}");
        for d in REAL {
            assert!(e.contains(d.name), "{e} omits {}", d.name);
        }
    }

    #[test]
    fn a_precision_is_checked_against_the_device_that_stores_it() {
        assert!(Choice::new("cpu", None, opts("f32")).is_ok());
        assert!(Choice::new("npu", None, opts("f32")).is_ok());
        let e = error("cpu", "f16");
        assert!(
            e.contains("--precision") && e.contains("--device cuda"),
            "{e}"
        );
        let e = error("npu", "f16");
        assert!(e.contains("f16 applies to --device cuda"), "{e}");
        let e = error("npu", "bf16");
        assert!(e.contains("allowed: f16, f32, tf32"), "{e}");
    }

    #[test]
    fn verify_refuses_the_npu_model_and_a_precision_its_device_does_not_store() {
        let e = open_real("npu", &opts("f32"))
            .err()
            .expect("npu is not real");
        assert!(
            e.to_string().contains("verify runs on a real device"),
            "{e}"
        );
        let e = open_real("cpu", &opts("f16"))
            .err()
            .expect("cpu stores f32 only");
        assert!(e.to_string().contains("--precision"), "{e}");
    }

    #[test]
    fn cuda_graphs_go_to_the_cuda_device_only() {
        let graphs = RealOptions {
            cuda_graphs: true,
            ..opts("f32")
        };
        for device in ["cpu", "npu"] {
            let e = Choice::new(device, None, graphs.clone()).err().unwrap();
            assert!(
                e.to_string().contains("--cuda-graphs") && e.to_string().contains("--device cuda"),
                "{device}: {e}"
            );
        }
        let e = open_real("cpu", &graphs).err().unwrap();
        assert!(e.to_string().contains("--cuda-graphs"), "{e}");
    }

    #[test]
    fn a_convolution_path_goes_to_the_cuda_device_only_and_is_one_of_three() {
        let conv = |c: &str| RealOptions {
            conv: c.into(),
            ..opts("f32")
        };
        for device in ["cpu", "npu"] {
            assert!(Choice::new(device, None, conv("auto")).is_ok());
            let e = Choice::new(device, None, conv("cudnn")).err().unwrap();
            assert!(
                e.to_string().contains("--conv") && e.to_string().contains("--device cuda"),
                "{device}: {e}"
            );
        }
        let e = Choice::new("npu", None, conv("fft"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--conv")
                && e.contains("'fft'")
                && e.contains("auto, cudnn, cudnn-legacy, im2col"),
            "{e}"
        );
        let e = open_real("cpu", &conv("im2col")).err().unwrap();
        assert!(e.to_string().contains("--conv"), "{e}");
    }
}
