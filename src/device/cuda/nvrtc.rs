//! The CUDA kernel sources (`kernels/*.cu`, embedded with `include_str!`) and their compilation
//! through NVRTC at run time: `kernels/common.cuh` is prepended to each file (the kernels have no
//! `#include`), and each file is compiled for one architecture. This path needs NVRTC only — no
//! GPU and no driver — so CI checks every kernel with the real compiler.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Helpers prepended to every kernel file.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");

/// Every kernel file: (file name, source without the common header).
pub const SOURCES: &[(&str, &str)] = &[
    ("gather.cu", include_str!("../../../kernels/gather.cu")),
    ("conv.cu", include_str!("../../../kernels/conv.cu")),
    ("rows.cu", include_str!("../../../kernels/rows.cu")),
    ("lstm.cu", include_str!("../../../kernels/lstm.cu")),
    (
        "attention.cu",
        include_str!("../../../kernels/attention.cu"),
    ),
];

/// Architectures `--arch` accepts.
pub(crate) const ARCHS: &[&str] = &[
    "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
];

/// The full source NVRTC compiles for one file.
pub(crate) fn full_source(src: &str) -> String {
    format!("{COMMON}\n{src}")
}

/// Names of the `extern "C" __global__` kernels a source defines.
pub fn kernel_names(src: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("__global__ void ") {
        rest = &rest[i + "__global__ void ".len()..];
        let end = rest.find('(').unwrap_or(0);
        names.push(rest[..end].trim().to_string());
    }
    names
}

/// One compiled kernel file.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// File name.
    pub file: &'static str,
    /// Kernels defined in it.
    pub kernels: Vec<String>,
    /// PTX text.
    pub ptx: String,
    /// Compile time in milliseconds.
    pub ms: f64,
}

/// Where the NVRTC library is looked for (the file names cudarc tries, on the loader path).
pub fn nvrtc_search_list() -> String {
    // cudarc's candidates repeat names and include Windows' (nvrtc64_130_0 with this OS's
    // suffix): each Linux name (libnvrtc.so, libnvrtc.so.13, …) once
    let mut names: Vec<String> = cudarc::get_lib_name_candidates("nvrtc")
        .into_iter()
        .filter(|n| n.starts_with("libnvrtc.so"))
        .collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let ld = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    format!(
        "looked for {} on the system loader path and LD_LIBRARY_PATH='{}' (pip install nvidia-cuda-nvrtc==13.0.* and add its nvidia/cu13/lib to LD_LIBRARY_PATH)",
        names.join(", "),
        ld
    )
}

/// True when libnvrtc can be loaded. cudarc panics when a library is missing, so this is asked
/// before anything else touches NVRTC.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library; no NVRTC function is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Checks `arch` is one we know (NVRTC takes it as a `&'static str`).
pub(crate) fn parse_arch(arch: &str) -> Result<&'static str> {
    ARCHS.iter().copied().find(|a| *a == arch).ok_or_else(|| {
        Error::invalid(
            "--arch",
            format!(
                "unknown architecture '{arch}' (known: {})",
                ARCHS.join(", ")
            ),
        )
    })
}

/// Compiles every kernel file for `arch` (None: NVRTC's default).
pub fn compile_all(arch: Option<&'static str>) -> Result<Vec<Compiled>> {
    if !nvrtc_available() {
        return Err(Error::DeviceUnavailable {
            device: "nvrtc".into(),
            msg: nvrtc_search_list(),
        });
    }
    let mut out = Vec::with_capacity(SOURCES.len());
    for (file, src) in SOURCES {
        let t = Instant::now();
        let opts = cudarc::nvrtc::CompileOptions {
            arch,
            name: Some((*file).to_string()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(full_source(src), opts).map_err(|e| {
            Error::DeviceUnavailable {
                device: "nvrtc".into(),
                msg: format!("{file} does not compile: {e:?}"),
            }
        })?;
        out.push(Compiled {
            file,
            kernels: kernel_names(src),
            ptx: ptx.to_src(),
            ms: t.elapsed().as_secs_f64() * 1e3,
        });
    }
    Ok(out)
}

/// [`compile_all`] once per architecture per process: devices opened later (or again) reuse
/// the PTX.
pub(crate) fn compile_all_cached(arch: Option<&'static str>) -> Result<Arc<Vec<Compiled>>> {
    type Cache = Mutex<HashMap<Option<&'static str>, Arc<Vec<Compiled>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().ok().and_then(|m| m.get(&arch).cloned()) {
        return Ok(c);
    }
    let compiled = Arc::new(compile_all(arch)?);
    if let Ok(mut m) = cache.lock() {
        m.insert(arch, compiled.clone());
    }
    Ok(compiled)
}
