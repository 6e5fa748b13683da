//! The NPU's configuration: the paper's Table I by default, any field replaceable from a TOML
//! file (`--npu-config FILE`; `lazybatch npu-config` prints the default). Two documented
//! configurations ship in `configs/npu/` and are selected by name: `default` (Table I taken
//! literally) and `paper` (Table I with weights entering the array at DRAM bandwidth, the
//! reading of Table II); every value there names its source.

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

/// The shipped configurations, by name: (name, documented TOML).
pub const NAMED: &[(&str, &str)] = &[
    ("default", include_str!("../../../configs/npu/default.toml")),
    ("paper", include_str!("../../../configs/npu/paper.toml")),
];

impl NpuConfig {
    /// A shipped configuration by name (`default`, `paper`), or None.
    pub fn named(name: &str) -> Option<Result<Self>> {
        NAMED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| Self::from_toml(text, Path::new(&format!("configs/npu/{n}.toml"))))
    }

    /// `--npu-config SPEC`: a shipped configuration's name, or a TOML file's path (a file
    /// named like a shipped configuration needs a directory: `./paper`).
    pub fn resolve(spec: &str) -> Result<Self> {
        match Self::named(spec) {
            Some(cfg) => cfg,
            None => Self::load(Path::new(spec)),
        }
    }

    /// The documented TOML of a shipped configuration.
    pub fn named_text(name: &str) -> Option<&'static str> {
        NAMED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// The allowed range of every numeric field (inclusive), as documented in the shipped
    /// files: wide enough for any real NPU, narrow enough that no time computed from them
    /// overflows or vanishes.
    pub const RANGES: &'static [(&'static str, f64, f64)] = &[
        ("rows", 1.0, 65_536.0),
        ("cols", 1.0, 65_536.0),
        ("freq_mhz", 1.0, 100_000.0),
        ("act_sram_kib", 1.0, 1_073_741_824.0),
        ("weight_sram_kib", 1.0, 1_073_741_824.0),
        ("channels", 1.0, 1024.0),
        ("dram_latency_cycles", 0.0, 1e9),
        ("dram_gbps", 1e-3, 1e6),
        ("bytes_per_element", 1.0, 8.0),
        ("weight_fill_gbps", 0.0, 1e6),
        ("vector_lanes", 1.0, 1_048_576.0),
        ("vector_transcendental_cycles", 1.0, 1000.0),
        ("interleave_bytes", 1.0, 1_073_741_824.0),
    ];

    fn value_of(&self, field: &str) -> f64 {
        match field {
            "rows" => f64::from(self.rows),
            "cols" => f64::from(self.cols),
            "freq_mhz" => self.freq_mhz,
            "act_sram_kib" => self.act_sram_kib as f64,
            "weight_sram_kib" => self.weight_sram_kib as f64,
            "channels" => f64::from(self.channels),
            "dram_latency_cycles" => self.dram_latency_cycles as f64,
            "dram_gbps" => self.dram_gbps,
            "bytes_per_element" => self.bytes_per_element as f64,
            "weight_fill_gbps" => self.weight_fill_gbps,
            "vector_lanes" => f64::from(self.vector_lanes),
            "vector_transcendental_cycles" => f64::from(self.vector_transcendental_cycles),
            "interleave_bytes" => self.interleave_bytes as f64,
            _ => f64::NAN,
        }
    }

    /// The first field out of its range: (field, message).
    fn out_of_range(&self) -> Option<(&'static str, String)> {
        Self::RANGES.iter().find_map(|&(field, lo, hi)| {
            let v = self.value_of(field);
            // weight_fill_gbps: 0 means one PE row per cycle; otherwise at least `dram_gbps`'s floor
            let ok =
                (lo..=hi).contains(&v) && !(field == "weight_fill_gbps" && v > 0.0 && v < 1e-3);
            (!ok).then(|| {
                (
                    field,
                    format!("must be in [{lo}, {hi}], got {}", crate::error::num(v)),
                )
            })
        })
    }

    /// Checks every field is in range ([`NpuConfig::RANGES`]).
    pub(crate) fn validate(&self) -> Result<()> {
        match self.out_of_range() {
            Some((field, msg)) => Err(Error::invalid(format!("npu config {field}"), msg)),
            None => Ok(()),
        }
    }

    /// Parses a TOML configuration: every field named, or `base = "NAME"` (a shipped
    /// configuration) and the fields that differ from it. Unknown keys are errors, a missing
    /// field is an error naming every one missing (an empty or cut-short file is not silently
    /// the default), and a value out of range names its line and field.
    pub fn from_toml(text: &str, file: &Path) -> Result<Self> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        // an error on the line that sets `key`
        let bad = |key: &str, msg: String| Error::ConfigFile {
            file: file.to_path_buf(),
            line: text.lines().position(|l| sets(l, key)).map_or(0, |i| i + 1),
            msg,
        };
        let syntax = |e: toml::de::Error| Error::ConfigFile {
            file: file.to_path_buf(),
            line: e.span().map_or(0, |s| line_of(s.start)),
            // the parser says nothing of a value cut off at the end of the file
            msg: match e.message().trim() {
                "" => "malformed TOML here (a value missing, or the file cut short)".into(),
                m => m.to_string(),
            },
        };
        let keys: toml::Table = toml::from_str(text).map_err(syntax)?;
        let base = match keys.get("base") {
            None => None,
            Some(toml::Value::String(name)) => Some(name.clone()),
            Some(other) => {
                return Err(bad(
                    "base",
                    format!(
                        "base: a shipped configuration's name ({}), not {other}",
                        names()
                    ),
                ))
            }
        };
        // the typed fields, read from the text with `base`'s line blanked (offsets kept, so an
        // error still names its line)
        let typed = match base {
            None => text.to_string(),
            Some(_) => blank_key(text, "base"),
        };
        let given: NpuConfig = toml::from_str(&typed).map_err(syntax)?;
        let cfg = match base {
            Some(name) => {
                let Some(from) = Self::named(&name) else {
                    return Err(bad(
                        "base",
                        format!(
                            "base: no shipped configuration is named '{name}' ({})",
                            names()
                        ),
                    ));
                };
                overlay(from?, &given, &keys)?
            }
            None => {
                let missing: Vec<&str> = FIELDS
                    .iter()
                    .copied()
                    .filter(|f| !keys.contains_key(*f))
                    .collect();
                if !missing.is_empty() {
                    return Err(Error::ConfigFile {
                        file: file.to_path_buf(),
                        line: 0,
                        msg: format!(
                            "missing {}: name every field, or start from a shipped configuration with `base = \"default\"` ({})",
                            missing.join(", "),
                            names()
                        ),
                    });
                }
                given
            }
        };
        if let Some((field, msg)) = cfg.out_of_range() {
            // (line 0: from the base, out of range only if the code is wrong)
            return Err(bad(field, format!("{field}: {msg}")));
        }
        Ok(cfg)
    }

    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::NPU_CONFIG)?;
        Self::from_toml(&text, path)
    }
}

/// Every field's TOML key, in the order of the shipped files.
const FIELDS: &[&str] = &[
    "rows",
    "cols",
    "freq_mhz",
    "act_sram_kib",
    "weight_sram_kib",
    "channels",
    "dram_latency_cycles",
    "dram_gbps",
    "bytes_per_element",
    "dataflow",
    "overlap_weight_load",
    "weight_fill_gbps",
    "vector_lanes",
    "vector_transcendental_cycles",
    "interleave_bytes",
];

/// The shipped configurations' names, for messages.
fn names() -> String {
    let n: Vec<&str> = NAMED.iter().map(|(n, _)| *n).collect();
    format!("shipped: {}", n.join(", "))
}

/// True when `line` sets `key`.
fn sets(line: &str, key: &str) -> bool {
    line.trim_start()
        .strip_prefix(key)
        .is_some_and(|r| r.trim_start().starts_with('='))
}

/// `text` with the top-level line that sets `key` turned to spaces.
fn blank_key(text: &str, key: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| {
            if sets(line, key) {
                line.chars()
                    .map(|c| if c == '\n' { c } else { ' ' })
                    .collect()
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// `base` with the fields the file names (`keys`) taken from `given`.
fn overlay(base: NpuConfig, given: &NpuConfig, keys: &toml::Table) -> Result<NpuConfig> {
    let internal = |e: &dyn std::fmt::Display| Error::Internal(format!("npu config overlay: {e}"));
    let mut merged = toml::Table::try_from(base).map_err(|e| internal(&e))?;
    let given = toml::Table::try_from(given).map_err(|e| internal(&e))?;
    for k in keys.keys().filter(|k| *k != "base") {
        if let Some(v) = given.get(k) {
            merged.insert(k.clone(), v.clone());
        }
    }
    merged.try_into().map_err(|e| internal(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_out_of_range_names_its_line_field_and_range() {
        let e = NpuConfig::from_toml(
            "base = \"default\"\nrows = 64\ndram_gbps = 1e-300\n",
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("x.toml:3: dram_gbps: must be in [0.001, 1000000]"),
            "{e}"
        );
        let e = NpuConfig::from_toml("base = \"default\"\nfreq_mhz = inf\n", Path::new("x.toml"));
        assert!(e.is_err());
        let e = NpuConfig::from_toml(
            "base = \"default\"\nweight_fill_gbps = 1e-9\n",
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":2: weight_fill_gbps"), "{e}");
        // every shipped value is within its range
        for (n, _) in NAMED {
            NpuConfig::named(n).unwrap().unwrap();
        }
    }

    #[test]
    fn a_file_names_every_field_or_the_shipped_configuration_it_starts_from() {
        let file = Path::new("x.toml");
        let fields: Vec<String> = toml::Table::try_from(NpuConfig::default())
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut sorted: Vec<&str> = FIELDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, fields, "FIELDS lists every field once");
        // an empty, a cut-short and a one-field file are refused, naming what is missing
        let default = NpuConfig::named_text("default").unwrap();
        let cut_short: String = default.split_inclusive('\n').take(12).collect();
        for (text, missing) in [
            ("", "missing rows, cols, freq_mhz"),
            ("rows = 64\n", "missing cols, freq_mhz"),
            (&cut_short, "interleave_bytes"),
        ] {
            let e = NpuConfig::from_toml(text, file).unwrap_err().to_string();
            assert!(
                e.contains(missing) && e.contains("base = \"default\""),
                "{e}"
            );
        }
        // a file cut mid-value says what is wrong there
        let e = NpuConfig::from_toml("base = \"default\"\nfreq_mhz = 700.\n", file)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.toml:2: ") && e.len() > "x.toml:2: ".len() + 5,
            "{e}"
        );
        // from a shipped one: its values, with the file's on top
        let c = NpuConfig::from_toml(
            "# c\nbase = \"paper\"  # Table II's reading\nrows = 64\n",
            file,
        )
        .unwrap();
        let paper = NpuConfig::named("paper").unwrap().unwrap();
        assert_eq!(c, NpuConfig { rows: 64, ..paper });
        assert_eq!(
            NpuConfig::from_toml("base = \"default\"\n", file).unwrap(),
            NpuConfig::default()
        );
        // errors keep their lines with a base; a bad base names itself
        let e = NpuConfig::from_toml("base = \"default\"\nrows = 64\ncolumns = 9\n", file)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.toml:3:"), "{e}");
        let e = NpuConfig::from_toml("base = \"default\"\nrows = 0\n", file)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.toml:2: rows: must be in [1, 65536]"),
            "{e}"
        );
        let e = NpuConfig::from_toml("rows = 64\nbase = \"fastest\"\n", file)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.toml:2:")
                && e.contains("'fastest'")
                && e.contains("shipped: default, paper"),
            "{e}"
        );
        let e = NpuConfig::from_toml("base = 3\n", file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("base: a shipped configuration's name"), "{e}");
    }

    #[test]
    fn each_field_is_taken_at_both_ends_of_its_range_and_refused_past_them() {
        let file = Path::new("x.toml");
        let integer = |field: &str| !matches!(field, "freq_mhz" | "dram_gbps" | "weight_fill_gbps");
        // `field = v` on the default (an integer field's value written as an integer)
        let with = |field: &str, v: f64| {
            let v = if integer(field) {
                (v as u64).to_string()
            } else {
                format!("{v:?}")
            };
            NpuConfig::from_toml(&format!("base = \"default\"\n{field} = {v}\n"), file)
        };
        for &(field, lo, hi) in NpuConfig::RANGES {
            for v in [lo, hi] {
                let c = with(field, v).unwrap_or_else(|e| panic!("{field} = {v}: {e}"));
                assert_eq!(c.value_of(field), v, "{field}");
            }
            let (below, above) = match (integer(field), lo > 0.0) {
                (true, _) => (lo - 1.0, hi + 1.0),
                (false, true) => (lo / 2.0, hi * 2.0),
                (false, false) => (-1.0, hi * 2.0),
            };
            for v in [below, above] {
                if integer(field) && v < 0.0 {
                    continue; // an unsigned field cannot be written below 0
                }
                let e = with(field, v)
                    .err()
                    .unwrap_or_else(|| panic!("{field} = {v} taken"))
                    .to_string();
                assert!(
                    e.starts_with(&format!("x.toml:2: {field}: must be in [")),
                    "{e}"
                );
            }
        }
        // a weight fill rate is 0 (a PE row a cycle) or at least dram_gbps's floor, 0.001 GB/s
        assert!(with("weight_fill_gbps", 1e-3).is_ok());
        assert!(with("weight_fill_gbps", 0.999e-3).is_err());
        assert!(NpuConfig::default().value_of("no such field").is_nan());
    }

    #[test]
    fn the_shipped_default_file_is_the_default() {
        assert_eq!(
            NpuConfig::named("default").unwrap().unwrap(),
            NpuConfig::default()
        );
    }

    #[test]
    fn a_configuration_built_in_code_is_checked_when_the_model_is_made() {
        let bad = NpuConfig {
            rows: 0,
            ..NpuConfig::default()
        };
        let e = crate::device::npu::Npu::new(bad).err().unwrap().to_string();
        assert!(
            e.contains("npu config rows") && e.contains("must be in [1, 65536], got 0"),
            "{e}"
        );
        assert!(crate::device::npu::Npu::new(NpuConfig::default()).is_ok());
    }

    #[test]
    fn each_shipped_text_is_its_own_configuration() {
        // the text `reproduce` writes beside its figures parses to the configuration it names
        for (name, _) in NAMED {
            let text = NpuConfig::named_text(name).unwrap();
            assert_eq!(
                NpuConfig::from_toml(text, Path::new(name)).unwrap(),
                NpuConfig::resolve(name).unwrap(),
                "{name}"
            );
        }
        assert_ne!(
            NpuConfig::named_text("default"),
            NpuConfig::named_text("paper")
        );
        assert_eq!(NpuConfig::named_text("./paper"), None);
        assert!(NpuConfig::named("./paper").is_none());
    }

    #[test]
    fn the_paper_configuration_differs_only_in_the_weight_fill_rate() {
        let paper = NpuConfig::resolve("paper").unwrap();
        assert_eq!(paper.weight_fill_gbps, paper.dram_gbps);
        assert_eq!(
            NpuConfig {
                weight_fill_gbps: 0.0,
                ..paper
            },
            NpuConfig::default()
        );
        assert!(NpuConfig::named("nonesuch").is_none());
        let e = NpuConfig::resolve("no/such/file.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no/such/file.toml"), "{e}");
    }
}
