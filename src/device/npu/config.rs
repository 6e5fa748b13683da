//! The NPU's configuration: the paper's Table I by default, any field replaceable from a TOML
//! file (`--npu-config FILE`; `lazybatch npu-config` prints the default).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Systolic-array dataflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dataflow {
    /// Weight stationary (TPU-like): weights held in the PEs, activations stream through.
    Ws,
    /// Output stationary: each PE accumulates one output, weights and activations stream.
    Os,
}

/// NPU parameters. Field names are the TOML keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NpuConfig {
    /// Systolic-array rows (PE rows; the reduction dimension in weight-stationary mode).
    pub rows: u32,
    /// Systolic-array columns (output columns in weight-stationary mode).
    pub cols: u32,
    /// Clock frequency in MHz.
    pub freq_mhz: f64,
    /// On-chip activation SRAM in KiB.
    pub act_sram_kib: u64,
    /// On-chip weight SRAM in KiB.
    pub weight_sram_kib: u64,
    /// DRAM channels (a transfer is interleaved across them at `interleave_bytes`).
    pub channels: u32,
    /// DRAM access latency in cycles, exposed once per node (the first tile's load).
    pub dram_latency_cycles: u64,
    /// Aggregate DRAM bandwidth in GB/s (10^9 bytes per second).
    pub dram_gbps: f64,
    /// Bytes per tensor element (1 = int8).
    pub bytes_per_element: u64,
    /// "ws" (weight stationary, SCALE-Sim's default) or "os" (output stationary).
    pub dataflow: Dataflow,
    /// Load the next fold's weights while the current fold computes (a TPU weight FIFO with
    /// double-buffered PE weights). On by default; off gives SCALE-Sim v2's exact fold count.
    pub overlap_weight_load: bool,
    /// Rate at which a fold's weights enter the array, in GB/s; 0 = one PE row per cycle (the
    /// TPU's weight shift-in: `cols × bytes_per_element` bytes per cycle, 89.6 GB/s for a
    /// 128-wide int8 array at 700 MHz). A fold's load then takes
    /// `rows·cols·bytes_per_element / fill` cycles instead of `rows`.
    pub weight_fill_gbps: f64,
    /// Vector-unit lanes: element operations per cycle.
    pub vector_lanes: u32,
    /// Cycles (lane-operations) one transcendental (exp, tanh, sigmoid, rsqrt) costs.
    pub vector_transcendental_cycles: u32,
    /// Channel interleaving granularity in bytes.
    pub interleave_bytes: u64,
}

impl Default for NpuConfig {
    /// The paper's Table I (HPCA 2021), plus our vector unit.
    fn default() -> Self {
        NpuConfig {
            rows: 128,
            cols: 128,
            freq_mhz: 700.0,
            act_sram_kib: 8 * 1024,
            weight_sram_kib: 4 * 1024,
            channels: 8,
            dram_latency_cycles: 100,
            dram_gbps: 360.0,
            bytes_per_element: 1,
            dataflow: Dataflow::Ws,
            overlap_weight_load: true,
            weight_fill_gbps: 0.0,
            vector_lanes: 128,
            vector_transcendental_cycles: 4,
            interleave_bytes: 256,
        }
    }
}

impl NpuConfig {
    /// Checks every field is in range.
    pub fn validate(&self) -> Result<()> {
        let pos = |name: &str, ok: bool| -> Result<()> {
            if ok {
                Ok(())
            } else {
                Err(Error::invalid(
                    format!("npu config {name}"),
                    "must be positive",
                ))
            }
        };
        pos("rows", self.rows > 0)?;
        pos("cols", self.cols > 0)?;
        pos("freq_mhz", self.freq_mhz > 0.0 && self.freq_mhz.is_finite())?;
        pos("act_sram_kib", self.act_sram_kib > 0)?;
        pos("weight_sram_kib", self.weight_sram_kib > 0)?;
        pos("channels", self.channels > 0)?;
        pos(
            "dram_gbps",
            self.dram_gbps > 0.0 && self.dram_gbps.is_finite(),
        )?;
        pos("bytes_per_element", self.bytes_per_element > 0)?;
        pos("vector_lanes", self.vector_lanes > 0)?;
        pos(
            "vector_transcendental_cycles",
            self.vector_transcendental_cycles > 0,
        )?;
        pos("interleave_bytes", self.interleave_bytes > 0)?;
        if !(self.weight_fill_gbps >= 0.0 && self.weight_fill_gbps.is_finite()) {
            return Err(Error::invalid(
                "npu config weight_fill_gbps",
                "must be ≥ 0 (0 = one PE row per cycle)",
            ));
        }
        Ok(())
    }

    /// Parses a TOML configuration; absent keys keep their defaults, unknown keys are errors.
    pub fn from_toml(text: &str, file: &Path) -> Result<Self> {
        let cfg: NpuConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| {
                text[..s.start.min(text.len())].matches('\n').count() + 1
            });
            Error::ConfigFile {
                file: file.to_path_buf(),
                line,
                msg: e.message().trim().to_string(),
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_toml(&text, path)
    }

    /// The configuration as TOML, with a comment per key.
    pub fn to_toml_commented(&self) -> String {
        format!(
            "# lazybatch NPU configuration (defaults: the paper's Table I)\n\
             rows = {}                      # systolic-array PE rows\n\
             cols = {}                      # systolic-array PE columns\n\
             freq_mhz = {:.1}               # clock\n\
             act_sram_kib = {}             # activation SRAM (KiB)\n\
             weight_sram_kib = {}          # weight SRAM (KiB)\n\
             channels = {}                    # DRAM channels\n\
             dram_latency_cycles = {}       # DRAM access latency, exposed once per node\n\
             dram_gbps = {:.1}              # aggregate DRAM bandwidth (GB/s)\n\
             bytes_per_element = {}           # 1 = int8, 2 = fp16/bf16\n\
             dataflow = \"{}\"                # \"ws\" (weight stationary) or \"os\" (output stationary)\n\
             overlap_weight_load = {}     # hide the next fold's weight load behind the current fold\n\
             weight_fill_gbps = {:.1}         # rate weights enter the array (GB/s); 0 = one PE row per cycle\n\
             vector_lanes = {}              # vector unit: element ops per cycle\n\
             vector_transcendental_cycles = {} # lane-cycles per exp/tanh/sigmoid/rsqrt\n\
             interleave_bytes = {}          # DRAM channel interleaving granularity\n",
            self.rows,
            self.cols,
            self.freq_mhz,
            self.act_sram_kib,
            self.weight_sram_kib,
            self.channels,
            self.dram_latency_cycles,
            self.dram_gbps,
            self.bytes_per_element,
            match self.dataflow {
                Dataflow::Ws => "ws",
                Dataflow::Os => "os",
            },
            self.overlap_weight_load,
            self.weight_fill_gbps,
            self.vector_lanes,
            self.vector_transcendental_cycles,
            self.interleave_bytes,
        )
    }
}
