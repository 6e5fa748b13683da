//! The CUDA backend of [`super::open`] when the `cuda` feature is on.

use crate::device::cuda::device::{ConvChoice, Precision};
use crate::device::cuda::{self, nvrtc, CudaDevice};
use crate::device::{Device, RealOptions};
use crate::error::{Error, Result};

/// One compiled kernel file (`lazybatch kernels`).
pub use nvrtc::Compiled as KernelFile;

/// The number of usable CUDA devices, or why there is none.
pub fn usable() -> Result<i32> {
    let p = cuda::probe();
    if p.usable() {
        Ok(p.devices)
    } else {
        Err(Error::DeviceUnavailable {
            device: "cuda".into(),
            msg: p.missing(),
        })
    }
}

/// The first CUDA device, opened with `o`.
pub fn open(o: &RealOptions) -> Result<Box<dyn Device + Send>> {
    let p = Precision::parse(&o.precision)?;
    let conv = ConvChoice::parse(&o.conv)?;
    Ok(Box::new(
        CudaDevice::new(0, o.seed, p)?
            .with_graphs(o.cuda_graphs)?
            .with_conv(conv)?,
    ))
}

/// Compiles every kernel of `kernels/` through NVRTC for `arch` (e.g. `sm_90`; None: NVRTC's
/// default).
pub fn compile_kernels(arch: Option<&str>) -> Result<(Option<&'static str>, Vec<KernelFile>)> {
    let arch = arch.map(nvrtc::parse_arch).transpose()?;
    Ok((arch, nvrtc::compile_all(arch)?))
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
