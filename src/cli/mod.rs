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

/// A policy flag's help: `lead`, every policy's grammar from the registry
/// ([`lazybatch::policy::grammar`]), the pointer to docs/policies.md, then `more`.
fn policies_help(lead: &str, more: &str) -> String {
    format!(
        "{lead} {} (docs/policies.md){more}",
        lazybatch::policy::grammar()
    )
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

mod capacity;
mod compare;
mod http;
mod kernels;
mod load;
mod merge;
mod models;
mod profile;
mod replicas_needed;
mod reproduce;
mod serve;
mod serve_args;
mod validate;
mod verify;

use serve_args::{serve_args, Serve, ServeArgs};

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use lazybatch::device::measure::Sampling;
use lazybatch::device::open::{open, Choice, Opened};
use lazybatch::device::RealOptions;
use lazybatch::error::num;
use lazybatch::graph::loader::Scale;
use lazybatch::graph::op::Op;
use lazybatch::graph::{zoo, Lengths, Model};
use lazybatch::policy::Spec;
use lazybatch::profile::Profile;
use lazybatch::progress::Mode;
use lazybatch::run::{RunSpec, Testbed, TestbedOptions};
use std::path::PathBuf;

/// SLA-aware node-level batching (LazyBatching, HPCA 2021): serve, profile and compare
/// batching policies on a cycle-level NPU model or on real kernels.
#[derive(Parser, Debug)]
#[command(name = "lazybatch", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Progress of long runs on stderr: `auto` (a bar on a terminal, a line every 10 s
    /// otherwise), `bar`, `lines` or `off`. Results on stdout are the same whatever this says.
    #[arg(long, global = true, default_value = "auto", value_parser = parse_progress)]
    progress: Mode,
}

fn parse_progress(s: &str) -> std::result::Result<Mode, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not one of auto, bar, lines, off"))
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List the model zoo: class, node count, parameters, MACs at batch 1.
    Models {
        /// Describe these models (names, model files or ONNX files, comma-separated) instead
        /// of the zoo.
        #[arg(long, value_delimiter = ',')]
        model: Vec<String>,
        /// The size of a named axis of an ONNX model's input, e.g. `--dim seq=128`.
        #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
        dims: Vec<(String, usize)>,
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
    /// Serve the model over HTTP (Open Inference Protocol, KServe v2) with the engine and the
    /// policy inside, Prometheus metrics at /metrics, until SIGINT or SIGTERM.
    Serve(http::HttpArgs),
    /// Drive a server (lazybatch serve, or any Open Inference Protocol server) with open-loop
    /// traffic — the same arrivals as `run` — and print the same table, JSON and .hgrm.
    Load(load::LoadArgs),
    /// Run several policies at several rates (and seeds) and print one table.
    Compare(compare::CompareArgs),
    /// Assemble the shards of a `compare`, `capacity` or `reproduce` sweep run with `--shard
    /// I/N` (their --out directories) into exactly what the unsharded command writes and
    /// prints.
    Merge(merge::MergeArgs),
    /// The highest Poisson rate each policy serves within a p99 or SLA-violation bound (a
    /// bracket-and-bisect search over the rate), as a table, JSON and a latency-throughput
    /// picture.
    Capacity(capacity::CapacityArgs),
    /// Regenerate the paper's evaluation: every experiment's data (CSV, JSON), SVG figures and
    /// report.md with the paper's headline claims next to ours.
    Reproduce(reproduce::ReproduceArgs),
    /// Serve requests alone and under forced preemptions and merges on a real device, and
    /// compare every request's output (exit 1 on any difference).
    Verify(verify::VerifyArgs),
    /// Compile every CUDA kernel in kernels/ through NVRTC (no GPU needed) and list them.
    Kernels(kernels::KernelsArgs),
    /// Hold the simulator against a real device: serve the same arrivals on the device (wall
    /// time) and on its latency table (virtual time), per policy and load, and print measured
    /// against predicted latency, SLA violations, batch and merges with their errors.
    Validate(validate::ValidateArgs),
}

/// Parses and runs the command line; the exit code says whether a check found a difference.
pub fn run() -> Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let ok = std::process::ExitCode::SUCCESS;
    let p = cli.progress;
    let done = match cli.cmd {
        Cmd::Models { model, dims, json } => models::run(&model, &dims, json).map(|()| ok),
        Cmd::Profile(a) => profile::run(a, p).map(|()| ok),
        Cmd::Run(a) => serve::run(a, p).map(|()| ok),
        Cmd::Load(a) => load::run(a, p).map(|()| ok),
        Cmd::Serve(a) => http::run(a, p).map(|()| ok),
        Cmd::Compare(a) => compare::compare(a, p).map(|()| ok),
        Cmd::Merge(a) => merge::run(a).map(|()| ok),
        Cmd::Capacity(a) => capacity::run(a, p).map(|()| ok),
        Cmd::Reproduce(a) => reproduce::run(a, p).map(|()| ok),
        Cmd::Calibrate(a) => reproduce::calibrate(a).map(|()| ok),
        Cmd::NpuConfig { name } => reproduce::npu_config(&name).map(|()| ok),
        Cmd::Verify(a) => verify::run(a),
        Cmd::Kernels(a) => kernels::run(a).map(|()| ok),
        Cmd::Validate(a) => validate::run(a, p).map(|()| ok),
    };
    done.map_err(in_flag_words)
}

/// The flag that sets each run setting the library names in its errors.
const FLAGS: [(&str, &str); 20] = [
    ("SLA", "--sla-ms"),
    ("SLAs", "--slas"),
    ("arrivals", "--arrivals"),
    ("classes", "--classes"),
    ("coverage", "--coverage"),
    ("figures", "--figures"),
    ("max batch", "--max-batch"),
    ("max pending", "--max-pending"),
    ("NPU configurations", "--npu-config"),
    ("p99 bound", "--p99-ms"),
    ("profile", "--profile"),
    ("rate", "--rate"),
    ("replicas", "--replicas"),
    ("requests", "--requests"),
    ("router", "--router"),
    ("search precision", "--search-precision"),
    ("seeds", "--seeds"),
    ("shares", "--shares"),
    ("token bound", "--ttft-p99-ms/--tpot-p99-ms"),
    ("violation bound", "--violations"),
];

/// A library error about a run setting, said with the flag that sets it (the library speaks
/// of "the SLA", the command line of `--sla-ms`); any other error as it is.
fn in_flag_words(e: anyhow::Error) -> anyhow::Error {
    let flag = match e.downcast_ref::<lazybatch::Error>() {
        Some(lazybatch::Error::InvalidArgument { what, msg }) if e.chain().count() == 1 => FLAGS
            .iter()
            .find(|(setting, _)| setting == what)
            .map(|(_, flag)| (*flag, msg.clone())),
        _ => None,
    };
    match flag {
        Some((flag, msg)) => anyhow::anyhow!("invalid {flag}: {msg}"),
        None => e,
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
    /// Input resolution multiplier for a reduced-size CNN variant, in (0, 1] [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    res: Option<f64>,
    /// The size of a named axis of an ONNX model's input (other than the batch axis), e.g.
    /// `--dim seq=128`; repeat for several.
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, usize)>,
}

/// `--dim NAME=SIZE`: a named axis and its size, in [1, 2^20].
fn parse_dim(s: &str) -> std::result::Result<(String, usize), String> {
    let (name, size) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected NAME=SIZE, e.g. seq=128"))?;
    let size: usize = size
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': the size must be an integer in [1, 1048576]"))?;
    if name.trim().is_empty() || !(1..=1 << 20).contains(&size) {
        return Err(format!("'{s}': expected a name and a size in [1, 1048576]"));
    }
    Ok((name.trim().to_string(), size))
}

impl ModelArgs {
    /// The model, or several co-located models (`--model a,b,c`) composed into one.
    fn load(&self) -> Result<Model> {
        let scale = Scale {
            width: self.width,
            resolution: self.res.unwrap_or(1.0),
        };
        let names: Vec<&str> = self.model.split(',').map(str::trim).collect();
        let onnx = names.iter().any(|n| lazybatch::graph::onnx::is_onnx(n));
        if let (Some((name, _)), false) = (self.dims.first(), onnx) {
            bail!(
                "invalid --dim: names an ONNX model's input axis ('{name}'); '{}' is not an ONNX model, and its shapes are fixed by its file",
                self.model
            );
        }
        if names.len() == 1 {
            let m = zoo::load_with(names[0], scale, &self.dims)?;
            self.check_res(&m)?;
            return Ok(m);
        }
        let mut models = Vec::with_capacity(names.len());
        for n in &names {
            if n.is_empty() {
                bail!("--model: empty name in the list '{}'", self.model);
            }
            models.push(zoo::load_with(n, scale, &self.dims)?);
        }
        let m = Model::compose(models);
        self.check_res(&m)?;
        Ok(m)
    }

    /// `--res` scales image inputs: refused for a model that has none.
    fn check_res(&self, m: &Model) -> Result<()> {
        let images = m
            .nodes
            .iter()
            .any(|n| matches!(&n.op, Op::Input { shape, .. } if shape.len() == 3));
        if self.res.is_some() && !images {
            bail!(
                "--res scales image inputs, and '{}' has none (use --width to shrink it)",
                self.model
            );
        }
        Ok(())
    }
}

/// A library error about a setting, said in the words of the flag that gave it (the library
/// names the setting, "SLA" or "max batch"; the command line knows which flag that was).
fn flag(name: &'static str) -> impl Fn(lazybatch::Error) -> anyhow::Error {
    move |e| match e {
        lazybatch::Error::InvalidArgument { msg, .. } => anyhow::anyhow!("invalid {name}: {msg}"),
        other => other.into(),
    }
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
    /// Real devices: how the latency table times the nodes: `model` (whole passes in the
    /// model's order, as a request runs them) or `isolated` (each node's runs one after
    /// another, its own data in the caches).
    #[arg(long, default_value = "model")]
    profile_order: String,
    /// Real devices: also measure how the device's time varies (`on`): a request's pass after
    /// the device idled 1, 4, 16 and 64 ms, which the table device adds after such a gap, and
    /// up to 101 passes back to back, whose spread it draws from; or not (`off`).
    #[arg(long, default_value = "on")]
    profile_variation: String,
    /// CUDA: precision of GEMMs and convolutions: f32, f16 (f16 operands, f32 accumulation) or
    /// tf32 (f32 storage, TF32 tensor cores).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// CUDA: replay each node's launches as a CUDA graph (captured once per launch shape).
    #[arg(long)]
    cuda_graphs: bool,
    /// CUDA: how convolutions run: auto (cuDNN where it loads, else im2col), cudnn, or im2col
    /// (im2col + cuBLAS, the device's own kernels).
    #[arg(long, default_value = "auto")]
    conv: String,
    /// Threads for the CPU device's kernels and the parallel simulations (default: the
    /// simulations one per core, the kernels one per core less one, left to the engine and the
    /// arrivals; RAYON_NUM_THREADS sets both).
    #[arg(long, allow_negative_numbers = true)]
    threads: Option<i64>,
}

impl DeviceArgs {
    /// Sizes the thread pool once, for the whole process (`--threads`).
    fn apply_threads(&self) -> Result<()> {
        let Some(n) = self.threads else {
            return Ok(());
        };
        let n = in_range("--threads", n, 1, 1024)? as usize;
        if !lazybatch::device::cpu::team::set_kernel_threads(n) {
            bail!("--threads {n}: the CPU device's kernels already run another count");
        }
        if rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .is_err()
            && rayon::current_num_threads() != n
        {
            bail!(
                "--threads {n}: the thread pool already runs {} threads",
                rayon::current_num_threads()
            );
        }
        Ok(())
    }
    /// The real device's options.
    /// The first flag given that only a real device reads (its value other than the default),
    /// if any: a model device would ignore it.
    fn real_only_given(&self) -> Option<&'static str> {
        [
            ("--reps", self.reps != 3),
            ("--weights-seed", self.weights_seed != 1),
            ("--profile-order", self.profile_order != "model"),
            ("--profile-variation", self.profile_variation != "on"),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    fn real(&self) -> RealOptions {
        RealOptions {
            seed: self.weights_seed,
            precision: self.precision.clone(),
            cuda_graphs: self.cuda_graphs,
            conv: self.conv.clone(),
        }
    }
    /// The validated device choice (`auto` resolved and said on stderr).
    fn choice(&self) -> Result<Choice> {
        self.apply_threads()?;
        let c = Choice::new(&self.device, self.npu_config.as_deref(), self.real())?;
        if let Some(note) = &c.note {
            eprintln!("{note}");
        }
        Ok(c)
    }
    /// `--profile-variation`.
    fn variation(&self) -> Result<bool> {
        match self.profile_variation.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            o => bail!("invalid --profile-variation: '{o}' (on, off)"),
        }
    }

    /// `--profile-order`.
    fn order(&self) -> Result<lazybatch::device::measure::Order> {
        match self.profile_order.as_str() {
            "isolated" => Ok(lazybatch::device::measure::Order::Isolated),
            "model" => Ok(lazybatch::device::measure::Order::InModelOrder),
            o => bail!("invalid --profile-order: '{o}' (isolated, model)"),
        }
    }
    fn saved_profile(&self) -> Result<Option<Profile>> {
        Ok(match &self.profile {
            Some(p) => Some(Profile::load(p)?),
            None => None,
        })
    }
}

/// Names the GPU in use on stderr (`cuda: <GPU name>; f32, cuDNN 9.13.0 convolutions`, then
/// `, CUDA graphs` when on), and the device's notice, if any, on a line of its own.
fn say_gpu(d: &(dyn lazybatch::device::Device + Send), o: &RealOptions) {
    if d.name() == "cuda" {
        let desc = d.description();
        let gpu = desc
            .strip_prefix("cuda (")
            .and_then(|x| x.strip_suffix(')'))
            .unwrap_or(&desc);
        let graphs = if o.cuda_graphs { ", CUDA graphs" } else { "" };
        eprintln!("cuda: {gpu}{graphs}");
    }
    if let Some(n) = d.notice() {
        eprintln!("notice: {n}");
    }
}

/// Opens the device of `dev` for `model` and builds its bench: the NPU model profiles itself;
/// a real device is measured, or takes the table of `--profile` when it was measured on the
/// same kind of device; `progress` shows the measuring.
fn open_bench(model: Model, dev: &DeviceArgs, sv: &Serve, progress: Mode) -> Result<Testbed> {
    let saved = dev.saved_profile()?;
    let reps = in_range("--reps", dev.reps, 1, 1000)? as u32;
    // every value checked before whether it applies
    let (order, variation) = (dev.order()?, dev.variation()?);
    let opened = open(&dev.choice()?)?;
    if let (Opened::Npu(..) | Opened::Table(_), Some(flag)) = (&opened, dev.real_only_given()) {
        bail!(
            "{flag} applies to real devices (cpu, cuda); this run is on a model device ({}), which ignores it",
            dev.device
        );
    }
    if let (Opened::Real(d), true) = (&opened, sv.spec.replicas.count() > 1) {
        bail!(
            "invalid --replicas: several replicas run on a model device (npu, or a saved table); the {} device is one server",
            d.name()
        );
    }
    if let Opened::Real(d) = &opened {
        say_gpu(d.as_ref(), &dev.real());
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
    let opts = TestbedOptions {
        max_batch: sv.spec.max_batch,
        coverage: sv.coverage,
        profile: saved,
        sampling: Sampling {
            reps,
            order,
            progress,
            variation,
        },
    };
    Ok(Testbed::open(model, opened, &opts)?)
}

/// Says on stderr which SLAs of `spec` no request of the reference lengths can meet even served
/// alone on `bench` (a run then reports them late, and the SLA-aware policies find no slack).
fn warn_slas_below(bench: &Testbed, spec: &RunSpec) {
    for (what, sla, alone) in bench.slas_below_single_input(spec) {
        eprintln!(
            "warning: {what} ({} ms) is below {}'s single-input latency ({:.3} ms, served alone at its reference lengths): a request of those lengths is late even served alone, and the SLA-aware policies (lazy, oracle, lazy:adaptive) find no slack to batch with; raise --sla-ms (--slas, --classes){}",
            sla.as_ms(),
            bench.model.name,
            alone.as_ms(),
            if bench.model.is_seq2seq() {
                ", or bound the tokens instead (`capacity --ttft-p99-ms X --tpot-p99-ms Y` sets the deadlines from them)"
            } else {
                ""
            }
        );
    }
}

/// Policy strings parsed at the server's maximum batch and checked for `model` (one that cannot
/// serve its co-located models is refused).
fn specs_for(names: &[String], max_batch: u32, model: &Model) -> Result<Vec<Spec>> {
    Ok(names
        .iter()
        .map(|p| {
            let s = Spec::parse(p, max_batch)?;
            s.check_for(model)?;
            Ok(s)
        })
        .collect::<lazybatch::Result<Vec<_>>>()?)
}

fn positive(what: &str, v: i64) -> Result<u32> {
    if v <= 0 || v > u32::MAX as i64 {
        bail!("invalid {what}: must be a positive integer, got {v}");
    }
    Ok(v as u32)
}

/// An integer flag within `[lo, hi]`.
fn in_range(what: &str, v: i64, lo: i64, hi: i64) -> Result<i64> {
    if !(lo..=hi).contains(&v) {
        bail!("invalid {what}: must be an integer in [{lo}, {hi}], got {v}");
    }
    Ok(v)
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

fn check_rate(what: &str, r: f64) -> Result<f64> {
    Ok(lazybatch::traffic::check_rate(what, r)?)
}

/// A `--load` factor (a multiple of the serial capacity), in (0, 1000].
fn check_load(what: &str, l: f64) -> Result<f64> {
    if !(l > 0.0 && l <= 1000.0) {
        bail!(
            "invalid {what}: must be in (0, 1000] (multiples of the serial capacity), got {}",
            num(l)
        );
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_command_that_takes_a_policy_lists_every_policy_in_its_help() {
        let mut cli = Cli::command();
        for name in ["run", "serve", "compare", "validate", "capacity"] {
            let help = cli
                .find_subcommand_mut(name)
                .unwrap()
                .render_long_help()
                .to_string();
            for entry in lazybatch::policy::REGISTRY {
                for usage in entry.usage.split(", ") {
                    assert!(help.contains(usage), "`{name} --help` lacks {usage}");
                }
            }
        }
    }

    #[test]
    fn a_library_setting_is_named_by_its_flag_and_other_errors_pass_unchanged() {
        for (setting, flag) in FLAGS {
            let e = in_flag_words(lazybatch::Error::invalid(setting, "why").into());
            assert_eq!(e.to_string(), format!("invalid {flag}: why"));
        }
        let e = in_flag_words(lazybatch::Error::invalid("--listen", "why").into());
        assert_eq!(e.to_string(), "invalid --listen: why");
        let e = in_flag_words(anyhow::anyhow!("plain"));
        assert_eq!(e.to_string(), "plain");
        // an error with context keeps it
        let e = anyhow::Error::from(lazybatch::Error::invalid("SLA", "why")).context("in a.json");
        assert_eq!(in_flag_words(e).to_string(), "in a.json");
    }

    #[test]
    fn progress_takes_its_four_modes_and_names_them_when_refused() {
        for (s, m) in [
            ("auto", Mode::Auto),
            ("bar", Mode::Bar),
            ("lines", Mode::Lines),
            ("off", Mode::Off),
        ] {
            assert_eq!(parse_progress(s), Ok(m));
        }
        let e = parse_progress("loud").unwrap_err();
        assert!(e.contains("auto, bar, lines, off"), "{e}");
    }
}
