//! # lazybatch
//!
//! SLA-aware, node-level batching of deep-learning inference — the LazyBatching paper
//! (Choi, Kim, Rhu, HPCA 2021) as software: a model graph IR with a seven-network zoo, devices
//! that execute one node for one sub-batch (a cycle-level NPU model here; real CPU and CUDA
//! devices behind the same trait), and the per-node latency profile the slack predictor reads.
//!
//! Start with [`graph::zoo::load`], [`device::npu::Npu`] and [`profile::Profile::measure`].

#![warn(missing_docs)]

pub mod device;
pub mod error;
pub mod graph;
pub mod profile;
pub mod time;

pub use error::{Error, Result};
