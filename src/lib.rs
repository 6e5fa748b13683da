//! # lazybatch
//!
//! SLA-aware, node-level batching of deep-learning inference — the LazyBatching paper
//! (Choi, Kim, Rhu, HPCA 2021) as software: a model graph IR with a seven-network zoo, devices
//! that execute one node for one sub-batch (a cycle-level NPU model here), the per-node latency
//! profile and slack predictor, the batching policies (Serial, GraphB, LazyB, Oracle) and one
//! engine loop that serves Poisson or traced traffic.
//!
//! Start with [`graph::zoo::load`], [`run::Testbed`] and [`engine::run`].

#![warn(missing_docs)]

pub mod device;
pub mod engine;
pub mod error;
pub mod files;
pub mod graph;
pub mod http;
pub mod metrics;
pub(crate) mod plot;
pub mod policy;
pub mod profile;
pub mod progress;
pub mod report;
pub mod run;
pub mod runtime;
pub mod time;
pub mod traffic;

pub use error::{Error, Result};
