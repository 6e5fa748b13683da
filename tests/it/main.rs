//! The integration test binary: one module per area (see DESIGN: one test binary, tiny fixtures).

mod cli;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod graph;
mod kernels;
mod npu;
mod reproduce;
mod runtime;

/// An empty scratch directory for one test, unique to this test process.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lazybatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("creating a scratch directory");
    d
}
