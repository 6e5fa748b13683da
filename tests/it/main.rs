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
