//! The command line: clap definitions and the arguments every command shares, validated into
//! library values ([`DeviceArgs::choice`], [`serve_args`]); one file per command parses, calls the
//! library and prints. This is the only place that uses `anyhow`; exit codes are `main`'s.

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

mod compare;
mod kernels;
mod models;
mod profile;
mod reproduce;
mod serve;
mod verify;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use lazybatch::bench::{Bench, BenchOptions};
use lazybatch::device::open::{open, Choice, Opened};
use lazybatch::graph::loader::Scale;
use lazybatch::graph::{zoo, Lengths, Model};
use lazybatch::profile::Profile;
use lazybatch::runs::Colocation;
use lazybatch::time::Nanos;
use std::path::PathBuf;

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
    Profile(profile::ProfileArgs),
    /// The NPU model against the paper's Table II (single-batch latency alone, at 30/30 words
    /// and averaged over WMT 2019's lengths) and Fig. 2 (ResNet-50's batching saturation), one
    /// column per NPU configuration.
    Calibrate(reproduce::CalibrateArgs),
    /// Print a shipped NPU configuration as documented TOML: `default` (the paper's Table I)
    /// or `paper` (calibrated to Table II). Edit it and pass `--npu-config FILE`.
    NpuConfig {
        /// Which configuration.
        #[arg(default_value = "default")]
        name: String,
    },
    /// Serve Poisson (or traced) traffic under one policy and report latency, throughput and
    /// SLA violations.
    Run(serve::RunArgs),
    /// Run several policies at several rates (and seeds) and print one table.
    Compare(compare::CompareArgs),
    /// Regenerate the paper's evaluation: every experiment's data (CSV, JSON), SVG figures and
    /// report.md with the paper's headline claims next to ours.
    Reproduce(reproduce::ReproduceArgs),
    /// Serve requests alone and under forced preemptions and merges on a real device, and
    /// compare every request's output (exit 1 on any difference).
    Verify(verify::VerifyArgs),
    /// Compile every CUDA kernel in kernels/ through NVRTC (no GPU needed) and list them.
    Kernels(kernels::KernelsArgs),
}

/// Parses and runs the command line; the exit code says whether a check found a difference.
pub fn run() -> Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let ok = std::process::ExitCode::SUCCESS;
    match cli.cmd {
        Cmd::Models { json } => models::run(json).map(|()| ok),
        Cmd::Profile(a) => profile::run(a).map(|()| ok),
        Cmd::Run(a) => serve::run(a).map(|()| ok),
        Cmd::Compare(a) => compare::compare(a).map(|()| ok),
        Cmd::Reproduce(a) => reproduce::run(a).map(|()| ok),
        Cmd::Calibrate(a) => reproduce::calibrate(a).map(|()| ok),
        Cmd::NpuConfig { name } => reproduce::npu_config(&name).map(|()| ok),
        Cmd::Verify(a) => verify::run(a),
        Cmd::Kernels(a) => kernels::run(a).map(|()| ok),
    }
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
type Colo = Option<Colocation>;

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
    Ok(Some(Colocation { shares, slas }))
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

impl DeviceArgs {
    /// The validated device choice (`auto` resolved and said on stderr).
    fn choice(&self) -> Result<Choice> {
        let c = Choice::new(
            &self.device,
            self.npu_config.as_deref(),
            self.weights_seed,
            &self.precision,
        )?;
        if let Some(note) = &c.note {
            eprintln!("{note}");
        }
        Ok(c)
    }
    fn saved_profile(&self) -> Result<Option<Profile>> {
        Ok(match &self.profile {
            Some(p) => Some(Profile::load(p)?),
            None => None,
        })
    }
}

/// Names the GPU in use on stderr (`cuda: <GPU name> (f32)`).
fn say_gpu(d: &(dyn lazybatch::device::Device + Send), precision: &str) {
    if d.name() == "cuda" {
        let desc = d.description();
        let gpu = desc
            .strip_prefix("cuda (")
            .and_then(|x| x.strip_suffix(')'))
            .unwrap_or(&desc);
        eprintln!("cuda: {gpu} ({precision})");
    }
}

/// Opens the device of `dev` for `model` and builds its bench: the NPU model profiles itself;
/// a real device is measured, or takes the table of `--profile` when it was measured on the
/// same kind of device.
fn open_bench(model: Model, dev: &DeviceArgs, sv: &Serve) -> Result<Bench> {
    let saved = dev.saved_profile()?;
    let reps = positive("--reps", dev.reps)?;
    let opened = open(&dev.choice()?)?;
    if let Opened::Real(d) = &opened {
        say_gpu(d.as_ref(), &dev.precision);
        match &saved {
            Some(p) => {
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
            None => eprintln!(
                "profiling the {} device (median of {reps} runs per point); save it with `profile --device {} --save FILE` and pass --profile FILE to skip this",
                d.name(),
                d.name()
            ),
        }
    }
    let opts = BenchOptions {
        max_batch: sv.max_batch,
        coverage: sv.coverage,
        profile: saved,
        reps,
    };
    Ok(Bench::open(model, opened, &opts)?)
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
