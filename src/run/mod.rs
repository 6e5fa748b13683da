//! Running: a model on a device with its latency table and predictor ([`Testbed`], in
//! `testbed.rs`), one run's validated settings ([`RunSpec`], `spec.rs`), the one driver that
//! serves a run whatever the device and the clock (`drive.rs`), and what is built of runs:
//! grids of policies × rates × seeds (`grid.rs`), capacity searches (`capacity.rs`), a real
//! device checked against its own table (`validate.rs`) and its outputs served alone against
//! batched (`verify.rs`).

pub mod capacity;
pub mod drive;
pub mod grid;
pub mod replicas_needed;
pub mod shard;
pub mod spec;
pub mod testbed;
pub mod validate;
pub mod verify;

pub use spec::RunSpec;
pub use testbed::{Testbed, TestbedOptions};
