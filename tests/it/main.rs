//! The integration test binary: one module per area (see DESIGN: one test binary, tiny fixtures).

mod cli;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_stand_in;
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

/// The reduced-size variant of a zoo model the device tests run: width 1/8, inputs at 1/4
/// resolution (LAS at full resolution).
pub fn small(name: &str) -> lazybatch::graph::Model {
    let s = if name == "las" {
        lazybatch::graph::loader::Scale {
            width: 0.125,
            resolution: 1.0,
        }
    } else {
        lazybatch::graph::loader::Scale {
            width: 0.125,
            resolution: 0.25,
        }
    };
    lazybatch::graph::zoo::load_scaled(name, s).unwrap()
}
