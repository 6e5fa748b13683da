//! The CUDA backend of [`super::open`] in a build without the `cuda` feature: every CUDA
//! request is a clear error, and `auto` falls back to the NPU model.

use crate::device::{Device, RealOptions};
use crate::error::{Error, Result};

/// One compiled kernel file (`lazybatch kernels`); none in this build.
#[derive(Clone, Debug)]
pub struct KernelFile {
    /// File name.
    pub file: &'static str,
    /// Kernels defined in it.
    pub kernels: Vec<String>,
    /// PTX text.
    pub ptx: String,
    /// Compile time in milliseconds.
    pub ms: f64,
}

fn unsupported() -> Error {
    Error::DeviceUnavailable {
        device: "cuda".into(),
        msg: "this build has no CUDA support (rebuild with the default `cuda` feature)".into(),
    }
}

/// Never usable in this build.
pub fn usable() -> Result<i32> {
    Err(unsupported())
}

/// Always fails: no CUDA in this build.
pub fn open(_: &RealOptions) -> Result<Box<dyn Device + Send>> {
    Err(unsupported())
}

/// Always fails: no NVRTC in this build.
pub fn compile_kernels(_arch: Option<&str>) -> Result<(Option<&'static str>, Vec<KernelFile>)> {
    Err(unsupported())
}

/// `--device cuda`.
pub(crate) const DEVICE: crate::device::RealDevice = crate::device::RealDevice {
    name: "cuda",
    auto: true,
    usable,
    open,
    precisions: &["f32", "f16", "tf32"],
    graphs: true,
    convs: true,
};
