//! The CUDA device (cargo feature `cuda`, on by default): cuBLAS GEMMs and NVRTC-compiled
//! kernels from `kernels/`, through cudarc with dynamic loading, so the binary links no CUDA
//! library and runs on machines without one. cudarc panics when a library is missing: [`probe`]
//! checks the driver, cuBLAS and NVRTC libraries and then the device count before anything else
//! touches CUDA, and turns absence into an error that says what is missing.

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
    /// libnvrtc loads.
    pub nvrtc: bool,
    /// Devices the driver reports (0 when the driver is absent or reports an error).
    pub devices: i32,
    /// The CUDA version the driver supports, as 1000 × major + 10 × minor (0 when unknown).
    pub driver_version: i32,
}

/// The oldest driver that loads the PTX of NVRTC 13 (PTX ISA 9.0), as the driver reports it.
pub(crate) const MIN_DRIVER_VERSION: i32 = 13000;

impl Probe {
    /// True when a CUDA device can be used.
    pub fn usable(&self) -> bool {
        self.driver
            && self.cublas
            && self.nvrtc
            && self.devices > 0
            && self.driver_version >= MIN_DRIVER_VERSION
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
        m.join("; ")
    }
}

/// Checks for the CUDA libraries, then for a device, without ever letting cudarc panic.
pub fn probe() -> Probe {
    // SAFETY: these only try to dlopen the libraries.
    let (driver, cublas, nvrtc) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
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
    Probe {
        driver,
        cublas,
        nvrtc,
        devices,
        driver_version,
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
