//! The CUDA device (cargo feature `cuda`, on by default): cuDNN convolutions, cuBLASLt and
//! cuBLAS GEMMs and NVRTC-compiled kernels from `kernels/`, through cudarc with dynamic loading,
//! so the binary links no CUDA library and runs on machines without one. cudarc panics when a
//! library is missing: [`probe`] checks the driver, cuBLAS, cuBLASLt, NVRTC and cuDNN libraries
//! and then the device count before anything else touches CUDA, and turns absence into an error
//! that says what is missing. cuDNN is optional: without it convolutions run as im2col + cuBLAS.

pub mod device;
pub mod nvrtc;

pub use device::CudaDevice;

use crate::error::{Error, Result};

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// libcuda (the driver) loads.
    pub driver: bool,
    /// libcublas loads.
    pub cublas: bool,
    /// libcublasLt loads (linear layers with fused epilogues; it ships beside libcublas).
    pub cublaslt: bool,
    /// libnvrtc loads.
    pub nvrtc: bool,
    /// Devices the driver reports (0 when the driver is absent or reports an error).
    pub devices: i32,
    /// The CUDA version the driver supports, as 1000 × major + 10 × minor (0 when unknown).
    pub driver_version: i32,
    /// The NVRTC library's version, the same way (0 when unknown). Its PTX carries the ISA of
    /// that CUDA version, which an older driver refuses (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`).
    pub nvrtc_version: i32,
    /// libcudnn loads (optional: convolutions through cuDNN; without it, im2col + cuBLAS).
    pub cudnn: bool,
}

/// What to install for cuDNN, in one line (the wheel and where its libraries land).
pub const CUDNN_HINT: &str = "libcudnn.so.9: pip install nvidia-cudnn-cu13 and add its nvidia/cudnn/lib to LD_LIBRARY_PATH, or install cuDNN 9 for CUDA 13";

/// The oldest driver that loads the PTX of NVRTC 13 (PTX ISA 9.0), as the driver reports it.
pub(crate) const MIN_DRIVER_VERSION: i32 = 13000;

impl Probe {
    /// True when a CUDA device can be used.
    pub fn usable(&self) -> bool {
        self.driver
            && self.cublas
            && self.cublaslt
            && self.nvrtc
            && self.devices > 0
            && self.driver_version >= MIN_DRIVER_VERSION
            && self.driver_version >= self.nvrtc_version
    }

    /// Why CUDA cannot be used, in one line.
    pub fn missing(&self) -> String {
        let mut m = Vec::new();
        if !self.driver {
            m.push(
                "no NVIDIA driver (libcuda.so.1 cannot be loaded: install the NVIDIA driver)"
                    .to_string(),
            );
        }
        if !self.cublas {
            m.push(
                "no cuBLAS library (libcublas.so.13: install the CUDA 13 toolkit, or pip install nvidia-cublas==13.* and add its nvidia/cu13/lib to LD_LIBRARY_PATH)"
                    .to_string(),
            );
        }
        if !self.cublaslt {
            m.push(
                "no cuBLASLt library (libcublasLt.so.13, shipped beside libcublas: install the CUDA 13 toolkit, or pip install nvidia-cublas==13.* and add its nvidia/cu13/lib to LD_LIBRARY_PATH)"
                    .to_string(),
            );
        }
        if !self.nvrtc {
            m.push(
                "no NVRTC library (libnvrtc.so.13: install the CUDA 13 toolkit, or pip install nvidia-cuda-nvrtc==13.0.* and add its nvidia/cu13/lib to LD_LIBRARY_PATH)"
                    .to_string(),
            );
        }
        if self.driver && self.devices == 0 {
            m.push("the driver reports no CUDA device".to_string());
        }
        if self.driver && self.driver_version < MIN_DRIVER_VERSION {
            m.push(format!(
                "the driver supports CUDA {}.{}, older than the CUDA {}.{} whose NVRTC compiles the kernels (update the NVIDIA driver)",
                self.driver_version / 1000,
                self.driver_version % 1000 / 10,
                MIN_DRIVER_VERSION / 1000,
                MIN_DRIVER_VERSION % 1000 / 10
            ));
        }
        if self.driver
            && self.nvrtc
            && self.driver_version >= MIN_DRIVER_VERSION
            && self.driver_version < self.nvrtc_version
        {
            m.push(format!(
                "NVRTC {} emits PTX for CUDA {0}, newer than the driver's CUDA {} (update the NVIDIA driver, or use an NVRTC no newer than the driver: pip install nvidia-cuda-nvrtc=={1}.*)",
                version(self.nvrtc_version),
                version(self.driver_version),
            ));
        }
        m.join("; ")
    }
}

/// `major.minor` of a version as CUDA reports it (1000 × major + 10 × minor).
fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// Checks for the CUDA libraries, then for a device, without ever letting cudarc panic.
pub fn probe() -> Probe {
    // SAFETY: these only try to dlopen the libraries.
    let (driver, cublas, cublaslt, nvrtc, cudnn) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
            cudarc::cublaslt::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cudnn::sys::is_culib_present(),
        )
    };
    let devices = if driver {
        cudarc::driver::CudaContext::device_count().unwrap_or(0)
    } else {
        0
    };
    let mut driver_version = 0;
    if driver {
        // SAFETY: the driver library is present (checked above); the call writes one int.
        let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
        if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            driver_version = 0;
        }
    }
    let mut nvrtc_version = 0;
    if nvrtc {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the NVRTC library is present (checked above); the call writes two ints.
        let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
            nvrtc_version = 1000 * major + 10 * minor;
        }
    }
    Probe {
        driver,
        cublas,
        cublaslt,
        nvrtc,
        devices,
        driver_version,
        nvrtc_version,
        cudnn,
    }
}

/// Fails with a clear message unless a CUDA device is usable.
pub(crate) fn require() -> Result<Probe> {
    let p = probe();
    if p.usable() {
        Ok(p)
    } else {
        Err(Error::DeviceUnavailable {
            device: "cuda".into(),
            msg: p.missing(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nvrtc_newer_than_the_driver_is_refused_with_what_to_do() {
        let ok = Probe {
            driver: true,
            cublas: true,
            cublaslt: true,
            nvrtc: true,
            devices: 1,
            driver_version: 13000,
            nvrtc_version: 13000,
            cudnn: false,
        };
        assert!(ok.usable() && ok.missing().is_empty());
        let newer = Probe {
            nvrtc_version: 13020,
            ..ok.clone()
        };
        assert!(!newer.usable());
        let m = newer.missing();
        assert!(
            m.contains("NVRTC 13.2")
                && m.contains("driver's CUDA 13.0")
                && m.contains("update the NVIDIA driver")
                && m.contains("nvidia-cuda-nvrtc==13.0.*"),
            "{m}"
        );
        // a driver as new as NVRTC, or newer, loads its PTX
        let newer_driver = Probe {
            driver_version: 13020,
            ..newer
        };
        assert!(newer_driver.usable());
    }
}
