//! Command definitions and their handlers. Raw arguments are validated here into library types;
//! this is the only place that uses `anyhow`.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use lazybatch::device::npu::{Npu, NpuConfig};
use lazybatch::device::Device;
use lazybatch::engine::Outcome;
use lazybatch::graph::loader::Scale;
use lazybatch::graph::{zoo, Lengths, Model, NodeId};
use lazybatch::metrics::{self, Stats};
use lazybatch::profile::Profile;
use lazybatch::sim::{Bench, SimConfig};
use lazybatch::time::Nanos;
use lazybatch::traffic::{self, Arrival};
use lazybatch::wall::RealBench;
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;

/// Appends a line to an output buffer.
macro_rules! out {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($t)*);
    }};
}

/// Appends text (no newline) to an output buffer.
macro_rules! outp {
    ($o:expr, $($t:tt)*) => {{
        use std::fmt::Write as _;
        let _ = write!($o, $($t)*);
    }};
}

/// Writes a command's output to stdout; a closed pipe (`| head`) is not an error.
fn emit(s: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// SLA-aware node-level batching (LazyBatching, HPCA 2021): serve, profile and compare
/// batching policies on a cycle-level NPU model or on real kernels.
#[derive(Parser, Debug)]
#[command(name = "lazybatch", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List the model zoo: class, node count, parameters, MACs at batch 1.
    Models {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Per-node latency table for every batch size, the single-input latency (Algorithm 1)
    /// and the batching curve.
    Profile(ProfileArgs),
    /// The NPU model against the paper's Table II (single-batch latency alone, at 30/30 words
    /// and averaged over WMT 2019's lengths) and Fig. 2 (ResNet-50's batching saturation), one
    /// column per NPU configuration.
    Calibrate(CalibrateArgs),
    /// Print a shipped NPU configuration as documented TOML: `default` (the paper's Table I)
    /// or `paper` (calibrated to Table II). Edit it and pass `--npu-config FILE`.
    NpuConfig {
        /// Which configuration.
        #[arg(default_value = "default")]
        name: String,
    },
    /// Serve Poisson (or traced) traffic under one policy and report latency, throughput and
    /// SLA violations.
    Run(RunArgs),
    /// Run several policies at several rates (and seeds) and print one table.
    Compare(CompareArgs),
    /// Regenerate the paper's evaluation: every experiment's data (CSV, JSON), SVG figures and
    /// report.md with the paper's headline claims next to ours.
    Reproduce(ReproduceArgs),
    /// Serve requests alone and under forced preemptions and merges on a real device, and
    /// compare every request's output (exit 1 on any difference).
    Verify(VerifyArgs),
    /// Compile every CUDA kernel in kernels/ through NVRTC (no GPU needed) and list them.
    Kernels(KernelsArgs),
}

#[derive(Args, Debug)]
struct CalibrateArgs {
    /// NPU configurations, comma-separated: shipped names (`default`, `paper`) or TOML files.
    #[arg(long, value_delimiter = ',', default_value = "default,paper")]
    npu_config: Vec<String>,
    /// Print JSON instead of the Markdown table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct KernelsArgs {
    /// Target architecture (sm_70 … sm_120; default: NVRTC's).
    #[arg(long)]
    arch: Option<String>,
    /// Also write each file's PTX to DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct ModelArgs {
    /// Model name (see `lazybatch models`) or path to a model file.
    #[arg(long)]
    model: String,
    /// Width multiplier for a reduced-size variant (channels, features, hidden units), in (0, 1].
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    width: f64,
    /// Input resolution multiplier for a reduced-size CNN variant, in (0, 1].
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    res: f64,
}

impl ModelArgs {
    /// The model, or several co-located models (`--model a,b,c`) composed into one.
    fn load(&self) -> Result<Model> {
        let scale = Scale {
            width: self.width,
            resolution: self.res,
        };
        let names: Vec<&str> = self.model.split(',').map(str::trim).collect();
        if names.len() == 1 {
            return Ok(zoo::load_scaled(names[0], scale)?);
        }
        let mut models = Vec::with_capacity(names.len());
        for n in &names {
            if n.is_empty() {
                bail!("--model: empty name in the list '{}'", self.model);
            }
            models.push(zoo::load_scaled(n, scale)?);
        }
        Ok(Model::compose(models))
    }
}

/// Each co-located model's share of the rate and SLA (None for a single model).
type Colo = Option<(Vec<f64>, Vec<Nanos>)>;

fn colocation(model: &Model, s: &ServeArgs) -> Result<Colo> {
    let n = model.parts.len();
    if n == 1 {
        if s.shares.is_some() || s.slas.is_some() {
            bail!("--shares and --slas apply to co-located models (--model a,b,…)");
        }
        return Ok(None);
    }
    let shares = match &s.shares {
        Some(v) if v.len() != n => bail!("--shares has {} values for {n} models", v.len()),
        Some(v) if v.iter().any(|x| !(*x > 0.0 && x.is_finite())) => {
            bail!("invalid --shares: every share must be positive")
        }
        Some(v) => {
            let t: f64 = v.iter().sum();
            v.iter().map(|x| x / t).collect()
        }
        None => vec![1.0 / n as f64; n],
    };
    let slas = match &s.slas {
        Some(v) if v.len() != n => bail!("--slas has {} values for {n} models", v.len()),
        Some(v) if v.iter().any(|x| !(*x > 0.0 && x.is_finite())) => {
            bail!("invalid --slas: every SLA must be positive")
        }
        Some(v) => v.iter().map(|&x| Nanos::from_ms(x)).collect(),
        None => vec![Nanos::from_ms(s.sla_ms); n],
    };
    Ok(Some((shares, slas)))
}

#[derive(Args, Debug, Clone)]
struct DeviceArgs {
    /// Device: auto (CUDA when usable, else the NPU model), npu (cycle-level model, virtual
    /// time), cpu (real kernels, wall time), cuda.
    #[arg(long, default_value = "auto")]
    device: String,
    /// NPU configuration: `default` (the paper's Table I), `paper` (Table I with weights
    /// entering the array at DRAM bandwidth, calibrated to Table II) or a TOML file (see
    /// `lazybatch npu-config`).
    #[arg(long, value_name = "NAME|FILE")]
    npu_config: Option<String>,
    /// Latency table to use instead of profiling (written by `profile --save`).
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Real devices: runs per measured point of the latency table (median).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true)]
    reps: i64,
    /// Real devices: seed of the generated weights and inputs.
    #[arg(long, default_value_t = 1)]
    weights_seed: u64,
    /// CUDA: storage precision of GEMM operands, f32 or f16 (f16 accumulates in f32).
    #[arg(long, default_value = "f32")]
    precision: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeviceKind {
    Npu,
    Cpu,
    Cuda,
}

impl DeviceArgs {
    fn kind(&self) -> Result<DeviceKind> {
        let kind = self.kind_inner()?;
        if kind != DeviceKind::Cuda && self.precision != "f32" {
            bail!("--precision {} applies to --device cuda", self.precision);
        }
        Ok(kind)
    }
    fn kind_inner(&self) -> Result<DeviceKind> {
        match self.device.as_str() {
            "npu" => Ok(DeviceKind::Npu),
            "cpu" => Ok(DeviceKind::Cpu),
            "auto" => Ok(auto_device()),
            "cuda" => {
                cuda_available()?;
                Ok(DeviceKind::Cuda)
            }
            other => bail!("unknown device '{other}' (available: auto, npu, cpu, cuda)"),
        }
    }
    /// A real device of this kind, with weights from `--weights-seed`.
    fn real(&self, kind: DeviceKind) -> Result<Box<dyn Device>> {
        Ok(match kind {
            DeviceKind::Cpu => Box::new(lazybatch::device::cpu::CpuDevice::new(self.weights_seed)),
            DeviceKind::Cuda => cuda_device(self.weights_seed, &self.precision)?,
            DeviceKind::Npu => bail!("the NPU model is not a real device"),
        })
    }
    fn npu_config(&self) -> Result<NpuConfig> {
        Ok(match &self.npu_config {
            Some(spec) => NpuConfig::resolve(spec)?,
            None => NpuConfig::default(),
        })
    }
    /// The NPU configuration's name for reports: a shipped name, a file's name, or `default`.
    fn npu_name(&self) -> String {
        self.npu_config
            .clone()
            .unwrap_or_else(|| "default".to_string())
    }
    fn saved_profile(&self) -> Result<Option<Profile>> {
        Ok(match &self.profile {
            Some(p) => Some(Profile::load(p)?),
            None => None,
        })
    }
}

#[cfg(feature = "cuda")]
fn auto_device() -> DeviceKind {
    let p = lazybatch::device::cuda::probe();
    if p.usable() {
        eprintln!("device auto: using CUDA ({} device(s) found)", p.devices);
        DeviceKind::Cuda
    } else {
        eprintln!(
            "device auto: no usable CUDA device ({}); using the npu model (virtual time)",
            p.missing()
        );
        DeviceKind::Npu
    }
}

#[cfg(not(feature = "cuda"))]
fn auto_device() -> DeviceKind {
    eprintln!("device auto: built without the cuda feature; using the npu model (virtual time)");
    DeviceKind::Npu
}

#[cfg(feature = "cuda")]
fn cuda_available() -> Result<()> {
    lazybatch::device::cuda::require()?;
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn cuda_available() -> Result<()> {
    bail!("this build has no CUDA support (rebuild with the default `cuda` feature)")
}

#[cfg(feature = "cuda")]
fn cuda_device(seed: u64, precision: &str) -> Result<Box<dyn Device>> {
    let p = lazybatch::device::cuda::device::Precision::parse(precision)?;
    let dev = lazybatch::device::cuda::CudaDevice::new(0, seed, p)?;
    eprintln!("cuda: {} ({precision})", dev.gpu_name());
    Ok(Box::new(dev))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(_seed: u64, _precision: &str) -> Result<Box<dyn Device>> {
    bail!("this build has no CUDA support (rebuild with the default `cuda` feature)")
}

#[derive(Args, Debug)]
struct ProfileArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Largest batch size to profile.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    max_batch: i64,
    /// Encoder steps (seq2seq models; default: the model's reference length).
    #[arg(long, allow_negative_numbers = true)]
    enc_steps: Option<i64>,
    /// Decoder steps (seq2seq models; default: the model's reference length).
    #[arg(long, allow_negative_numbers = true)]
    dec_steps: Option<i64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Save the table to FILE (JSON) for `run`/`compare --profile FILE`.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct ServeArgs {
    /// Number of requests per run.
    #[arg(long, default_value_t = 10_000, allow_negative_numbers = true)]
    requests: i64,
    /// SLA target in milliseconds.
    #[arg(long, default_value_t = 100.0, allow_negative_numbers = true)]
    sla_ms: f64,
    /// Server maximum batch (activation slots; graph batching's default B).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    max_batch: i64,
    /// Coverage N (%) of the profiled output lengths that sets dec_timesteps.
    #[arg(long, default_value_t = 90.0, allow_negative_numbers = true)]
    coverage: f64,
    /// Co-located models (--model a,b,…): each model's share of the arrival rate (default: equal).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    shares: Option<Vec<f64>>,
    /// Co-located models: each model's SLA in ms (default: --sla-ms for every model).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    slas: Option<Vec<f64>>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Policy: serial, graph:W[:B], lazy, oracle.
    #[arg(long)]
    policy: String,
    /// Arrival rate in requests/s.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "load")]
    rate: Option<f64>,
    /// Arrival rate as a multiple of the serial capacity (1 / single-input latency).
    #[arg(long, allow_negative_numbers = true)]
    load: Option<f64>,
    /// Arrival trace (one `TIME_MS [ENC DEC]` per line) instead of Poisson traffic.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "load"])]
    trace: Option<PathBuf>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Traffic seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the latency histogram (HdrHistogram .hgrm text, ms) to FILE.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    /// Arrival rates (requests/s), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "16,250,1000"
    )]
    rates: Vec<f64>,
    /// Rates as multiples of the serial capacity instead of --rates.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    load: Option<Vec<f64>>,
    /// Policies, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "serial,graph:0,graph:5,graph:25,graph:50,graph:95,lazy,oracle"
    )]
    policies: Vec<String>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Seeds per (policy, rate): 1..=K.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    seeds: i64,
    /// Directory for one .hgrm per policy and rate plus compare.json.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ReproduceArgs {
    /// Output directory.
    #[arg(long, default_value = "out/reproduce")]
    out: PathBuf,
    /// Fewer seeds, requests and sweep points: finishes in well under a minute (CI runs it).
    #[arg(long)]
    quick: bool,
    /// Seeds per configuration (default 20; 2 with --quick).
    #[arg(long, allow_negative_numbers = true)]
    seeds: Option<i64>,
    /// Experiments to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    figures: Option<Vec<String>>,
    /// NPU configurations, comma-separated: shipped names (`paper`, `default`) or TOML files;
    /// the first is the primary one (the ablations run on it). Default: both shipped ones.
    #[arg(long, value_delimiter = ',', value_name = "NAME|FILE")]
    npu_config: Option<Vec<String>>,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Device: cpu or cuda (cuda also compares with the CPU reference).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Requests to serve.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    requests: i64,
    /// Maximum batch (activation slots).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    max_batch: i64,
    /// Seed of weights, inputs and lengths.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CUDA: storage precision of GEMM operands, f32 or f16.
    #[arg(long, default_value = "f32")]
    precision: String,
    /// CUDA: also compare with the CPU reference node by node (two requests), printing each op
    /// kind's largest relative difference and the first node execution above --tolerance.
    #[arg(long)]
    ops: bool,
    /// Relative tolerance for --ops.
    #[arg(long, default_value_t = 1e-3)]
    tolerance: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Parses and runs the command line.
pub fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Models { json } => cmd_models(json),
        Cmd::Profile(a) => cmd_profile(a),
        Cmd::Run(a) => cmd_run(a),
        Cmd::Compare(a) => cmd_compare(a),
        Cmd::Reproduce(a) => cmd_reproduce(a),
        Cmd::Verify(a) => cmd_verify(a),
        Cmd::Kernels(a) => cmd_kernels(a),
        Cmd::Calibrate(a) => {
            let cfgs = a
                .npu_config
                .iter()
                .map(|c| Ok((c.clone(), NpuConfig::resolve(c)?)))
                .collect::<Result<Vec<_>>>()?;
            let cal = lazybatch::report::calibration::calibrate(&cfgs)?;
            if a.json {
                emit(&(serde_json::to_string_pretty(&cal)? + "\n"))
            } else {
                emit(&cal.markdown())
            }
        }
        Cmd::NpuConfig { name } => match NpuConfig::named_text(&name) {
            Some(text) => emit(text),
            None => bail!(
                "unknown NPU configuration '{name}' (shipped: {})",
                lazybatch::device::npu::config::NAMED
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    }
}

fn positive(what: &str, v: i64) -> Result<u32> {
    if v <= 0 || v > u32::MAX as i64 {
        bail!("invalid {what}: must be a positive integer, got {v}");
    }
    Ok(v as u32)
}

fn lengths_for(model: &Model, enc: Option<i64>, dec: Option<i64>) -> Result<Lengths> {
    let mut len = model.ref_lengths();
    if let Some(e) = enc {
        len.enc = positive("--enc-steps", e)?;
    }
    if let Some(d) = dec {
        len.dec = positive("--dec-steps", d)?;
    }
    if !model.is_seq2seq() && (enc.is_some() || dec.is_some()) {
        bail!(
            "model '{}' is static: --enc-steps/--dec-steps do not apply",
            model.name
        );
    }
    if let Some(s) = &model.seq {
        if len.enc > s.max_enc || len.dec > s.max_dec {
            bail!(
                "lengths {}/{} exceed the model's maxima {}/{}",
                len.enc,
                len.dec,
                s.max_enc,
                s.max_dec
            );
        }
    }
    Ok(len)
}
fn cmd_models(json_out: bool) -> Result<()> {
    let mut o = String::new();
    let mut rows = Vec::new();
    for name in zoo::all_names() {
        let m = zoo::load(name).with_context(|| format!("loading built-in model {name}"))?;
        let len = m.ref_lengths();
        rows.push(json!({
            "name": m.name,
            "class": if m.is_seq2seq() { "seq2seq" } else { "static" },
            "nodes": m.nodes.len(),
            "params": m.params(),
            "macs": m.macs(len),
            "enc_steps": m.seq.as_ref().map(|_| len.enc),
            "dec_steps": m.seq.as_ref().map(|_| len.dec),
            "max_batch": m.max_batch,
            "description": m.description,
        }));
    }
    if json_out {
        out!(o, "{}", serde_json::to_string_pretty(&rows)?);
        return emit(&o);
    }
    out!(
        o,
        "{:<18} {:<8} {:>6} {:>13} {:>16}  {}",
        "model",
        "class",
        "nodes",
        "params",
        "MACs (batch 1)",
        "lengths (enc/dec steps)"
    );
    for r in &rows {
        let lens = match (r["enc_steps"].as_u64(), r["dec_steps"].as_u64()) {
            (Some(e), Some(d)) => format!("{e}/{d}"),
            _ => "-".into(),
        };
        out!(
            o,
            "{:<18} {:<8} {:>6} {:>13} {:>16}  {}",
            r["name"].as_str().unwrap_or(""),
            r["class"].as_str().unwrap_or(""),
            r["nodes"].as_u64().unwrap_or(0),
            group(r["params"].as_u64().unwrap_or(0)),
            group(r["macs"].as_u64().unwrap_or(0)),
            lens
        );
    }
    emit(&o)
}
/// 1234567 -> "1,234,567".
fn group(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn cmd_profile(a: ProfileArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let max_batch = positive("--max-batch", a.max_batch)?;
    let len = lengths_for(&model, a.enc_steps, a.dec_steps)?;
    let reps = positive("--reps", a.dev.reps)?;
    // on the NPU model, also the latency of one request served alone: at these lengths, and
    // averaged over WMT 2019's length pairs (Table II's "single-batch latency")
    let mut alone = None;
    let prof = match a.dev.kind()? {
        DeviceKind::Npu => {
            let mut dev = Npu::new(a.dev.npu_config()?)?;
            let p = Profile::measure(&mut dev, &model, max_batch, len)?;
            if model.parts.len() == 1 {
                let at = lazybatch::profile::alone_latency(&mut dev, &model, len)?;
                let (mean, words) = lazybatch::profile::wmt19_mean_alone_latency(&mut dev, &model)?;
                alone = Some((at, mean, words));
            }
            p
        }
        kind => {
            let mut dev = a.dev.real(kind)?;
            Profile::measure_sampled(dev.as_mut(), &model, max_batch, &[len], reps)?
        }
    };
    if let Some(p) = &a.save {
        prof.save(p)?;
        eprintln!("saved the latency table to {}", p.display());
    }
    let single = prof.single_input_latency(&model, len);
    let curve = prof.batch_curve(&model, len);
    if a.json {
        let nodes: Vec<_> = prof
            .nodes
            .iter()
            .map(|n| {
                let mut o = json!({
                    "id": n.id, "name": n.name, "op": n.op, "class": n.class,
                    "latency_us": n.latency_ns.iter().map(|&x| x as f64 / 1e3).collect::<Vec<_>>(),
                });
                if !n.compute_cycles.is_empty() {
                    o["compute_cycles"] = json!(n.compute_cycles);
                    o["memory_cycles"] = json!(n.memory_cycles);
                }
                o
            })
            .collect();
        let v = json!({
            "model": model.name,
            "device": prof.device,
            "max_batch": max_batch,
            "enc_steps": model.seq.as_ref().map(|_| len.enc),
            "dec_steps": model.seq.as_ref().map(|_| len.dec),
            "single_input_latency_us": single.as_us(),
            "alone_latency_us": alone.map(|a| a.0.as_us()),
            "wmt19_mean_alone_latency_us": alone.and_then(|a| a.2.map(|_| a.1.as_us())),
            "wmt19_mean_words": alone.and_then(|a| a.2.map(|w| [w.0, w.1])),
            "batch_curve": curve.iter().map(|(b, t, tp)| json!({"batch": b, "latency_us": t.as_us(), "throughput_rps": tp})).collect::<Vec<_>>(),
            "nodes": nodes,
        });
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
        return emit(&o);
    }
    out!(
        o,
        "{} on {}: {} nodes{}",
        model.name,
        prof.device,
        model.nodes.len(),
        if model.is_seq2seq() {
            format!(", {} encoder / {} decoder steps", len.enc, len.dec)
        } else {
            String::new()
        }
    );
    if prof.device != "npu" {
        out!(o, "measured: median of {reps} runs at batch 1, 2, 4, …, {max_batch}; sizes in between interpolated");
    }
    out!(
        o,
        "single-input latency (Algorithm 1): {:.3} ms",
        single.as_ms()
    );
    if let Some((at, mean, words)) = alone {
        match words {
            Some((en, de)) => out!(
                o,
                "served alone: {:.3} ms at these lengths; {:.3} ms on average over WMT 2019 newstest lengths (mean {en:.2} / {de:.2} words)",
                at.as_ms(),
                mean.as_ms()
            ),
            None => out!(o, "served alone: {:.3} ms", at.as_ms()),
        }
    }
    out!(o,);
    let show: Vec<u32> = [1u32, 2, 4, 8, 16, 32, 64]
        .into_iter()
        .filter(|&b| b <= max_batch)
        .collect();
    out!(
        o,
        "batching curve (whole graph, every member at the same lengths):"
    );
    out!(
        o,
        "{:>6} {:>14} {:>16} {:>12}",
        "batch",
        "latency (ms)",
        "throughput (/s)",
        "per input (ms)"
    );
    for &(b, t, tp) in &curve {
        if show.contains(&b) || b == max_batch {
            out!(
                o,
                "{:>6} {:>14.3} {:>16.1} {:>12.4}",
                b,
                t.as_ms(),
                tp,
                t.as_ms() / f64::from(b)
            );
        }
    }
    out!(
        o,
        "\nper-node latency (us) at batch {show:?}; x = runs per request:"
    );
    outp!(o, "{:>4} {:<28} {:<10} {:>5}", "id", "node", "op", "x");
    for b in &show {
        outp!(o, " {:>9}", format!("b={b}"));
    }
    out!(o,);
    for n in &prof.nodes {
        let rep = model.repeats(NodeId(n.id), len);
        outp!(
            o,
            "{:>4} {:<28} {:<10} {:>5}",
            n.id,
            truncate(&n.name, 28),
            n.op,
            rep
        );
        for &b in &show {
            outp!(o, " {:>9.2}", n.latency_ns[b as usize - 1] as f64 / 1e3);
        }
        out!(o,);
    }
    emit(&o)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

struct Serve {
    requests: usize,
    sla: Nanos,
    max_batch: u32,
    coverage: f64,
}

fn serve_args(s: &ServeArgs) -> Result<Serve> {
    let requests = positive("--requests", s.requests)? as usize;
    if !(s.sla_ms > 0.0 && s.sla_ms.is_finite()) {
        bail!(
            "invalid --sla-ms: must be a positive number of milliseconds, got {}",
            s.sla_ms
        );
    }
    if !(s.coverage > 0.0 && s.coverage <= 100.0) {
        bail!(
            "invalid --coverage: must be in (0, 100], got {}",
            s.coverage
        );
    }
    Ok(Serve {
        requests,
        sla: Nanos::from_ms(s.sla_ms),
        max_batch: positive("--max-batch", s.max_batch)?,
        coverage: s.coverage,
    })
}

fn check_rate(what: &str, r: f64) -> Result<f64> {
    if !(r > 0.0 && r.is_finite()) {
        bail!("invalid {what}: must be positive, got {r}");
    }
    Ok(r)
}

/// A model on a device, ready to serve: the NPU model in virtual time, or a real device (CPU,
/// CUDA) in wall time.
enum Backend {
    /// The NPU model and the name of its configuration.
    Npu(Box<Bench>, String),
    Real(Box<RealBench>),
}

impl Backend {
    fn new(model: Model, dev: &DeviceArgs, sv: &Serve) -> Result<Backend> {
        let saved = dev.saved_profile()?;
        Ok(match dev.kind()? {
            DeviceKind::Npu => {
                if saved.is_some() {
                    bail!(
                        "--profile applies to real devices; the NPU model profiles itself exactly"
                    );
                }
                Backend::Npu(
                    Box::new(Bench::new(
                        model,
                        dev.npu_config()?,
                        sv.max_batch,
                        sv.coverage,
                    )?),
                    dev.npu_name(),
                )
            }
            kind => {
                let reps = positive("--reps", dev.reps)?;
                let d = dev.real(kind)?;
                if let Some(p) = &saved {
                    // "cuda (NVIDIA …)": the kind before the details
                    let kind_of = |s: &str| s.split(' ').next().unwrap_or("").to_string();
                    if kind_of(&p.device) != d.name() {
                        bail!(
                            "--profile was measured on '{}', but this run is on '{}': profile this device",
                            p.device,
                            d.description()
                        );
                    }
                    if p.device != d.description() {
                        eprintln!(
                            "warning: --profile was measured on '{}', this run is on '{}'",
                            p.device,
                            d.description()
                        );
                    }
                }
                if saved.is_none() {
                    eprintln!(
                        "profiling the {} device (median of {reps} runs per point); save it with `profile --device {} --save FILE` and pass --profile FILE to skip this",
                        d.name(),
                        d.name()
                    );
                }
                Backend::Real(Box::new(RealBench::new(
                    model,
                    d,
                    sv.max_batch,
                    sv.coverage,
                    saved,
                    reps,
                )?))
            }
        })
    }
    fn model(&self) -> &Model {
        match self {
            Backend::Npu(b, _) => &b.model,
            Backend::Real(b) => &b.model,
        }
    }
    fn device(&self) -> String {
        match self {
            Backend::Npu(_, name) => format!("npu ({name})"),
            Backend::Real(b) => b.device.description(),
        }
    }
    fn serial_capacity(&self) -> f64 {
        match self {
            Backend::Npu(b, _) => b.serial_capacity(),
            Backend::Real(b) => b.serial_capacity(),
        }
    }
    fn single_input_ms(&self) -> f64 {
        1e3 / self.serial_capacity()
    }
    fn run(
        &mut self,
        cfg: &SimConfig,
        trace: Option<Vec<Arrival>>,
        colo: &Colo,
    ) -> Result<(Stats, Outcome)> {
        let arrivals = match trace {
            Some(t) => t,
            None => arrivals_for(self.model(), cfg, colo)?,
        };
        Ok(match self {
            Backend::Npu(b, _) => b.run_arrivals(cfg, &arrivals)?,
            Backend::Real(b) => b.run(cfg, arrivals)?,
        })
    }
}

/// Poisson arrivals at `cfg.rate` (split over co-located models by their shares, each with
/// its own SLA).
fn arrivals_for(model: &Model, cfg: &SimConfig, colo: &Colo) -> lazybatch::Result<Vec<Arrival>> {
    match colo {
        Some((shares, slas)) => {
            let rates: Vec<f64> = shares.iter().map(|s| s * cfg.rate).collect();
            traffic::poisson_parts(model, &rates, slas, cfg.requests, cfg.seed)
        }
        None => traffic::poisson(model, cfg.rate, cfg.requests, cfg.seed),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_json(
    model: &str,
    device: &str,
    policy: &str,
    rate: f64,
    seed: u64,
    sla_ms: f64,
    st: &Stats,
    wall_s: f64,
) -> serde_json::Value {
    json!({
        "model": model, "device": device, "policy": policy, "rate_rps": rate,
        "requests": st.requests, "completed": st.completed, "rejected": st.rejected,
        "seed": seed, "sla_ms": sla_ms, "latency_ms": st.latency_ms,
        "throughput_rps": st.throughput_rps, "sla_violation_rate": st.sla_violation_rate,
        "mean_batch_size": st.mean_batch_size, "preemptions": st.preemptions, "merges": st.merges,
        "cross_step_executions": st.cross_step_executions,
        "by_class": st.by_class, "wall_s": wall_s,
    })
}

fn cmd_run(a: RunArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let sv = serve_args(&a.serve)?;
    lazybatch::policy::parse(&a.policy, sv.max_batch)?;
    let trace = match &a.trace {
        Some(p) => Some(traffic::load_trace(p, &model, a.seed)?),
        None => None,
    };
    if let (Some(l), true) = (a.load, a.rate.is_none()) {
        check_rate("--load", l)?;
    } else if let Some(r) = a.rate {
        check_rate("--rate", r)?;
    } else if trace.is_none() {
        bail!("give one of --rate R, --load X or --trace FILE");
    }
    let colo = colocation(&model, &a.serve)?;
    if colo.is_some() && (a.load.is_some() || trace.is_some()) {
        bail!("co-located models take a total --rate (split by --shares), not --load or --trace");
    }
    let mut be = Backend::new(model, &a.dev, &sv)?;
    let rate = match (a.rate, a.load) {
        (Some(r), _) => r,
        (None, Some(l)) => l * be.serial_capacity(),
        (None, None) => 0.0,
    };
    let cfg = SimConfig {
        policy: a.policy.clone(),
        rate,
        requests: sv.requests,
        sla: sv.sla,
        seed: a.seed,
        max_batch: sv.max_batch,
        coverage: sv.coverage,
    };
    let t0 = std::time::Instant::now();
    let (st, out) = be.run(&cfg, trace, &colo)?;
    let wall = t0.elapsed().as_secs_f64();
    let per_model: Vec<(String, Stats)> = if colo.is_some() {
        let parts = &be.model().parts;
        let names = parts.iter().map(|p| p.name.clone());
        names
            .zip(metrics::summarize_parts(&out, parts.len())?)
            .collect()
    } else {
        Vec::new()
    };
    if let Some(p) = &a.hgrm {
        let h = metrics::histogram(&out)?;
        let mut f =
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        metrics::write_hgrm(&h, &mut f).with_context(|| format!("writing {}", p.display()))?;
    }
    let name = be.model().name.clone();
    if a.json {
        let mut v = run_json(
            &name,
            &be.device(),
            &a.policy,
            rate,
            a.seed,
            a.serve.sla_ms,
            &st,
            wall,
        );
        if !per_model.is_empty() {
            v["per_model"] = json!(per_model
                .iter()
                .map(|(m, s)| json!({"model": m, "completed": s.completed, "latency_ms": s.latency_ms, "throughput_rps": s.throughput_rps, "sla_violation_rate": s.sla_violation_rate}))
                .collect::<Vec<_>>());
        }
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
        return emit(&o);
    }
    out!(
        o,
        "{} on {}, policy {}, {:.1} req/s, {} requests, SLA {} ms, seed {}",
        name,
        be.device(),
        a.policy,
        rate,
        st.requests,
        a.serve.sla_ms,
        a.seed
    );
    out!(o, "  completed {} (rejected {})", st.completed, st.rejected);
    let l = &st.latency_ms;
    out!(
        o,
        "  latency ms: mean {:.3}  p50 {:.3}  p90 {:.3}  p95 {:.3}  p99 {:.3}  max {:.3}",
        l.mean,
        l.p50,
        l.p90,
        l.p95,
        l.p99,
        l.max
    );
    out!(
        o,
        "  throughput {:.1} req/s   SLA violations {:.2}%   mean batch {:.2}",
        st.throughput_rps,
        100.0 * st.sla_violation_rate,
        st.mean_batch_size
    );
    out!(
        o,
        "  preemptions {}   merges {} ({} executions across timesteps)   ({:.3} s wall)",
        st.preemptions,
        st.merges,
        st.cross_step_executions,
        wall
    );
    if st.by_class.len() > 1 {
        let parts: Vec<String> = st
            .by_class
            .iter()
            .map(|k| {
                format!(
                    "{} {:.3} ms at mean batch {:.2}",
                    k.class, k.busy_ms_per_request, k.mean_batch
                )
            })
            .collect();
        out!(o, "  device time per request: {}", parts.join("; "));
    }
    for (m, ps) in &per_model {
        out!(
            o,
            "  {:<20} completed {:>6}  mean {:>9.3} ms  p99 {:>9.3} ms  {:>8.1} req/s  SLA violations {:>6.2}%",
            m,
            ps.completed,
            ps.latency_ms.mean,
            ps.latency_ms.p99,
            ps.throughput_rps,
            100.0 * ps.sla_violation_rate
        );
    }
    emit(&o)
}

fn cmd_compare(a: CompareArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let sv = serve_args(&a.serve)?;
    let seeds = positive("--seeds", a.seeds)? as u64;
    for p in &a.policies {
        lazybatch::policy::parse(p, sv.max_batch)?;
    }
    if let Some(ls) = &a.load {
        for &l in ls {
            check_rate("--load", l)?;
        }
    } else {
        for &r in &a.rates {
            check_rate("--rates", r)?;
        }
    }
    let colo = colocation(&model, &a.serve)?;
    if colo.is_some() && a.load.is_some() {
        bail!("co-located models take total --rates (split by --shares), not --load");
    }
    let mut be = Backend::new(model, &a.dev, &sv)?;
    let rates: Vec<f64> = match &a.load {
        Some(ls) => ls.iter().map(|&l| l * be.serial_capacity()).collect(),
        None => a.rates.clone(),
    };
    let mut jobs = Vec::new();
    for p in &a.policies {
        for &r in &rates {
            for s in 1..=seeds {
                jobs.push((p.clone(), r, s));
            }
        }
    }
    let cfg_of = |p: &str, r: f64, s: u64| SimConfig {
        policy: p.to_string(),
        rate: r,
        requests: sv.requests,
        sla: sv.sla,
        seed: s,
        max_batch: sv.max_batch,
        coverage: sv.coverage,
    };
    let want_hgrm = a.out.is_some();
    let t0 = std::time::Instant::now();
    type JobOut = (Stats, Option<hdrhistogram::Histogram<u64>>, Vec<Stats>);
    // one job's figures: its stats, the first seed's histogram, per-model stats if co-located
    let finish = |st: Stats, out: &Outcome, seed: u64, parts: usize| -> lazybatch::Result<JobOut> {
        let h = if want_hgrm && seed == 1 {
            Some(metrics::histogram(out)?)
        } else {
            None
        };
        let per = if colo.is_some() {
            metrics::summarize_parts(out, parts)?
        } else {
            Vec::new()
        };
        Ok((st, h, per))
    };
    let results: Vec<JobOut> = match &mut be {
        Backend::Npu(b, _) => jobs
            .par_iter()
            .map(|(p, r, s)| {
                let cfg = cfg_of(p, *r, *s);
                let (st, out) = b.run_arrivals(&cfg, &arrivals_for(&b.model, &cfg, &colo)?)?;
                finish(st, &out, *s, b.model.parts.len())
            })
            .collect::<lazybatch::Result<_>>()?,
        Backend::Real(b) => jobs
            .iter()
            .map(|(p, r, s)| {
                let cfg = cfg_of(p, *r, *s);
                let (st, out) = b.run(&cfg, arrivals_for(&b.model, &cfg, &colo)?)?;
                finish(st, &out, *s, b.model.parts.len())
            })
            .collect::<lazybatch::Result<_>>()?,
    };
    let wall = t0.elapsed().as_secs_f64();
    let name = be.model().name.clone();
    let mut rows = Vec::new();
    for (gi, chunk) in results.chunks(seeds as usize).enumerate() {
        let (p, r, _) = &jobs[gi * seeds as usize];
        let avg = |f: &dyn Fn(&Stats) -> f64| {
            chunk.iter().map(|c| f(&c.0)).sum::<f64>() / chunk.len() as f64
        };
        let spread =
            |f: &dyn Fn(&Stats) -> f64| metrics::spread(chunk.iter().map(|c| f(&c.0)).collect());
        let st = Stats {
            requests: chunk[0].0.requests,
            completed: avg(&|s| s.completed as f64).round() as u64,
            rejected: avg(&|s| s.rejected as f64).round() as u64,
            latency_ms: metrics::LatencyMs {
                mean: avg(&|s| s.latency_ms.mean),
                p50: avg(&|s| s.latency_ms.p50),
                p90: avg(&|s| s.latency_ms.p90),
                p95: avg(&|s| s.latency_ms.p95),
                p99: avg(&|s| s.latency_ms.p99),
                max: avg(&|s| s.latency_ms.max),
            },
            throughput_rps: avg(&|s| s.throughput_rps),
            sla_violation_rate: avg(&|s| s.sla_violation_rate),
            mean_batch_size: avg(&|s| s.mean_batch_size),
            preemptions: avg(&|s| s.preemptions as f64).round() as u64,
            merges: avg(&|s| s.merges as f64).round() as u64,
            cross_step_executions: avg(&|s| s.cross_step_executions as f64).round() as u64,
            by_class: (0..chunk[0].0.by_class.len())
                .map(|k| metrics::ClassStats {
                    class: chunk[0].0.by_class[k].class.clone(),
                    busy_ms_per_request: avg(&|s| s.by_class[k].busy_ms_per_request),
                    mean_batch: avg(&|s| s.by_class[k].mean_batch),
                })
                .collect(),
        };
        let mut v = run_json(&name, &be.device(), p, *r, 1, a.serve.sla_ms, &st, wall);
        let (_, lat25, lat75) = spread(&|s| s.latency_ms.mean);
        let (_, tp25, tp75) = spread(&|s| s.throughput_rps);
        v["seeds"] = json!(seeds);
        v["mean_latency_ms_p25"] = json!(lat25);
        v["mean_latency_ms_p75"] = json!(lat75);
        v["throughput_rps_p25"] = json!(tp25);
        v["throughput_rps_p75"] = json!(tp75);
        if let (Some(dir), Some(h)) = (&a.out, &chunk[0].1) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(format!(
                "{}_{}_{}rps.hgrm",
                name,
                p.replace(':', "-"),
                r.round()
            ));
            let mut f = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            metrics::write_hgrm(h, &mut f)?;
        }
        // co-located models: each model's figures, averaged over the seeds
        let nparts = chunk[0].2.len();
        let per: Vec<(String, [f64; 4])> = (0..nparts)
            .map(|k| {
                let avg = |f: &dyn Fn(&Stats) -> f64| {
                    chunk.iter().map(|c| f(&c.2[k])).sum::<f64>() / chunk.len() as f64
                };
                (
                    be.model().parts[k].name.clone(),
                    [
                        avg(&|s| s.latency_ms.mean),
                        avg(&|s| s.latency_ms.p99),
                        avg(&|s| s.throughput_rps),
                        avg(&|s| s.sla_violation_rate),
                    ],
                )
            })
            .collect();
        if nparts > 0 {
            v["per_model"] = json!(per
                .iter()
                .map(|(m, x)| json!({"model": m, "mean_latency_ms": x[0], "p99_ms": x[1], "throughput_rps": x[2], "sla_violation_rate": x[3]}))
                .collect::<Vec<_>>());
        }
        rows.push((p.clone(), *r, st, v, per));
    }
    let arr: Vec<serde_json::Value> = rows.iter().map(|r| r.3.clone()).collect();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("compare.json"),
            serde_json::to_string_pretty(&arr)?,
        )?;
        // the pictures: each policy's percentile spectrum per rate, mean and p99 against rate
        let points: Vec<lazybatch::report::spectrum::Point> = results
            .chunks(seeds as usize)
            .zip(&rows)
            .filter_map(|(chunk, (p, r, st, _, _))| {
                chunk[0]
                    .1
                    .as_ref()
                    .map(|h| lazybatch::report::spectrum::Point {
                        policy: p,
                        rate: *r,
                        histogram: h,
                        mean_ms: st.latency_ms.mean,
                        p99_ms: st.latency_ms.p99,
                    })
            })
            .collect();
        let title = format!("{name} on {}", be.device());
        lazybatch::report::spectrum::write(dir, &name, &title, &points)?;
    }
    if a.json {
        out!(o, "{}", serde_json::to_string_pretty(&arr)?);
        return emit(&o);
    }
    out!(
        o,
        "{} on {}: {} requests per run, {} seed(s), SLA {} ms, max batch {}, single-input latency {:.3} ms",
        name,
        be.device(),
        sv.requests,
        seeds,
        a.serve.sla_ms,
        sv.max_batch,
        be.single_input_ms()
    );
    out!(
        o,
        "{:<12} {:>9} {:>11} {:>11} {:>13} {:>9} {:>10}",
        "policy",
        "rate/s",
        "mean (ms)",
        "p99 (ms)",
        "throughput/s",
        "SLA viol",
        "mean batch"
    );
    for (p, r, st, _, per) in &rows {
        out!(
            o,
            "{:<12} {:>9.1} {:>11.3} {:>11.3} {:>13.1} {:>8.2}% {:>10.2}",
            p,
            r,
            st.latency_ms.mean,
            st.latency_ms.p99,
            st.throughput_rps,
            100.0 * st.sla_violation_rate,
            st.mean_batch_size
        );
        for (m, x) in per {
            // under the policy column, aligned with the row above (the full names, with any
            // reduced-size suffix, are in the header)
            let label: String = m.split('@').next().unwrap_or(m).chars().take(20).collect();
            out!(
                o,
                "  {:<20} {:>11.3} {:>11.3} {:>13.1} {:>8.2}%",
                label,
                x[0],
                x[1],
                x[2],
                100.0 * x[3]
            );
        }
    }
    out!(o, "({} runs in {:.2} s wall)", jobs.len(), wall);
    emit(&o)
}

fn cmd_reproduce(a: ReproduceArgs) -> Result<()> {
    let seeds = a.seeds.map(|s| positive("--seeds", s)).transpose()?;
    let specs = a
        .npu_config
        .clone()
        .unwrap_or_else(|| vec!["paper".into(), "default".into()]);
    let mut npus = Vec::new();
    for spec in &specs {
        // a file's configuration is named after the file
        let name = match NpuConfig::named(spec) {
            Some(_) => spec.clone(),
            None => std::path::Path::new(spec)
                .file_stem()
                .map_or_else(|| spec.clone(), |s| s.to_string_lossy().into_owned()),
        };
        if npus.iter().any(|(n, _)| n == &name) {
            bail!("--npu-config: '{name}' given twice");
        }
        npus.push((name, NpuConfig::resolve(spec)?));
    }
    let opts = lazybatch::report::Options {
        out: a.out.clone(),
        quick: a.quick,
        seeds,
        figures: a.figures.clone(),
        progress: true,
        npus,
    };
    let t0 = std::time::Instant::now();
    let files = lazybatch::report::reproduce(&opts)?;
    eprintln!(
        "wrote {} files to {} in {:.1} s; start with {}",
        files.len(),
        a.out.display(),
        t0.elapsed().as_secs_f64(),
        a.out.join("report.md").display()
    );
    Ok(())
}

fn cmd_verify(a: VerifyArgs) -> Result<()> {
    let mut o = String::new();
    let model = a.model.load()?;
    let n = positive("--requests", a.requests)? as usize;
    let mb = positive("--max-batch", a.max_batch)?;
    let mut dev: Box<dyn Device> = match a.device.as_str() {
        "cpu" if a.precision == "f32" => Box::new(lazybatch::device::cpu::CpuDevice::new(a.seed)),
        "cpu" => bail!("--precision {} applies to --device cuda", a.precision),
        "cuda" => cuda_device(a.seed, &a.precision)?,
        other => bail!("verify runs on a real device: --device cpu or cuda (got '{other}')"),
    };
    let t0 = std::time::Instant::now();
    let r = lazybatch::verify::verify(&model, dev.as_mut(), n, mb, a.seed)?;
    // on a GPU, also compare with the CPU reference (same weights and inputs)
    let vs_cpu = if dev.name() == "cuda" {
        let mut cpu = lazybatch::device::cpu::CpuDevice::new(a.seed);
        let (g, c) = lazybatch::verify::serve_both(&model, dev.as_mut(), &mut cpu, n, mb, a.seed)?;
        Some(lazybatch::verify::max_diff(&g, &c))
    } else {
        None
    };
    let ops = if a.ops {
        if dev.name() != "cuda" {
            bail!("--ops compares a CUDA device with the CPU: use it with --device cuda");
        }
        if a.tolerance.is_nan() || a.tolerance <= 0.0 {
            bail!("--tolerance must be positive (got {})", a.tolerance);
        }
        let mut cpu = lazybatch::device::cpu::CpuDevice::new(a.seed);
        let (g, c) =
            lazybatch::verify::trace_both(&model, dev.as_mut(), &mut cpu, n.min(2), mb, a.seed)?;
        Some(lazybatch::verify::compare_traces(
            &model,
            &g,
            &c,
            a.tolerance,
        )?)
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(t) = &ops {
            v["ops_executions"] = json!(t.executions);
            v["ops_nodes"] = json!(t
                .nodes
                .iter()
                .map(|(name, op, rel)| json!({"node": name, "op": op, "max_rel_diff": rel}))
                .collect::<Vec<_>>());
            v["ops_first_divergence"] = json!(t.first_divergence.as_ref().map(
                |(name, op, step, input, rel)| {
                    json!({"node": name, "op": op, "step": step, "request": input, "rel_diff": rel})
                }
            ));
        }
        if let Some(d) = vs_cpu {
            v["vs_cpu_max_abs_diff"] = json!(d.map(|x| x.0));
            v["vs_cpu_max_rel_diff"] = json!(d.map(|x| x.1));
        }
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!(o, "{} on {}: {} requests alone vs under {} forced preemptions and {} merges (mean batch {:.2}; {} executions mixed timesteps)", r.model, dev.description(), r.requests, r.preemptions, r.merges, r.mean_batch, r.cross_step);
        out!(
            o,
            "  compared {} output values: {} requests differ, largest difference {:e}",
            r.values,
            r.mismatched_requests,
            r.max_abs_diff
        );
        out!(
            o,
            "  {} ({:.1} s)",
            if r.mismatched_requests == 0 {
                "bit-identical: OK"
            } else {
                "MISMATCH"
            },
            t0.elapsed().as_secs_f64()
        );
        match vs_cpu {
            Some(Some((abs, rel, vals))) => out!(o, "  against the CPU reference: {vals} values, largest difference {abs:e} (relative {rel:e})"),
            Some(None) => out!(o, "  against the CPU reference: outputs differ in shape (a decoded token differs)"),
            None => {}
        }
        if let Some(t) = &ops {
            let mut per_op: std::collections::BTreeMap<&str, f64> = Default::default();
            for (_, op, rel) in &t.nodes {
                let w = per_op.entry(op).or_insert(0.0);
                *w = w.max(*rel);
            }
            out!(
                o,
                "  node by node against the CPU ({} node executions, {} nodes):",
                t.executions,
                t.nodes.len()
            );
            for (op, rel) in per_op {
                out!(o, "    {op:<12} largest relative difference {rel:e}");
            }
            match &t.first_divergence {
                Some((name, op, step, input, rel)) => out!(
                    o,
                    "  FIRST DIVERGENCE above {:e}: node '{name}' ({op}) at step {step}, request {input}: {rel:e}",
                    a.tolerance
                ),
                None => out!(o, "  no node execution differs by more than {:e}", a.tolerance),
            }
        }
    }
    emit(&o)?;
    let diverged = ops.is_some_and(|t| t.first_divergence.is_some());
    if r.mismatched_requests > 0 || diverged {
        std::process::exit(1);
    }
    Ok(())
}

fn cmd_kernels(a: KernelsArgs) -> Result<()> {
    use lazybatch::device::cuda::nvrtc;
    let mut o = String::new();
    let arch = match &a.arch {
        Some(s) => Some(nvrtc::parse_arch(s)?),
        None => None,
    };
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let t0 = std::time::Instant::now();
    let compiled = nvrtc::compile_all(arch)?;
    out!(
        o,
        "NVRTC, arch {}: {} files",
        arch.unwrap_or("(NVRTC default)"),
        compiled.len()
    );
    out!(
        o,
        "{:<14} {:<22} {:>10} {:>12}",
        "file",
        "kernel",
        "PTX bytes",
        "compile ms"
    );
    for c in &compiled {
        for (i, k) in c.kernels.iter().enumerate() {
            let (size, ms) = if i == 0 {
                (c.ptx.len().to_string(), format!("{:.1}", c.ms))
            } else {
                (String::new(), String::new())
            };
            out!(
                o,
                "{:<14} {:<22} {:>10} {:>12}",
                if i == 0 { c.file } else { "" },
                k,
                size,
                ms
            );
            if !c.ptx.contains(&format!(".entry {k}(")) {
                bail!("{}: kernel {k} is missing from the PTX", c.file);
            }
        }
        if let Some(dir) = &a.out {
            let p = dir.join(c.file.replace(".cu", ".ptx"));
            std::fs::write(&p, &c.ptx).with_context(|| format!("writing {}", p.display()))?;
        }
    }
    out!(
        o,
        "all {} kernels compiled in {:.0} ms",
        compiled.iter().map(|c| c.kernels.len()).sum::<usize>(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    emit(&o)
}
