//! Command definitions and their handlers. Raw arguments are validated here into library types;
//! this is the only place that uses `anyhow`.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use lazybatch::device::npu::{Npu, NpuConfig};
use lazybatch::device::Device;
use lazybatch::graph::{zoo, Lengths, Model};
use lazybatch::profile::Profile;
use serde_json::json;
use std::path::PathBuf;

/// SLA-aware node-level batching (LazyBatching, HPCA 2021): serve, profile and compare
/// batching policies on a cycle-level NPU model or real devices.
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
    /// Print the default NPU configuration (the paper's Table I) as TOML.
    NpuConfig,
}

#[derive(Args, Debug)]
struct DeviceArgs {
    /// Device: npu (the cycle-level model).
    #[arg(long, default_value = "npu")]
    device: String,
    /// NPU configuration file (TOML; see `lazybatch npu-config`).
    #[arg(long, value_name = "FILE")]
    npu_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ProfileArgs {
    /// Model name (see `lazybatch models`) or path to a model file.
    #[arg(long)]
    model: String,
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
}

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

/// Parses and runs the command line.
pub fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Models { json } => cmd_models(json),
        Cmd::Profile(a) => cmd_profile(a),
        Cmd::NpuConfig => emit(&NpuConfig::default().to_toml_commented()),
    }
}

fn positive(what: &str, v: i64) -> Result<u32> {
    if v <= 0 || v > u32::MAX as i64 {
        bail!("invalid {what}: must be a positive integer, got {v}");
    }
    Ok(v as u32)
}

fn make_device(a: &DeviceArgs) -> Result<Box<dyn Device>> {
    match a.device.as_str() {
        "npu" | "auto" => {
            let cfg = match &a.npu_config {
                Some(p) => NpuConfig::load(p)?,
                None => NpuConfig::default(),
            };
            Ok(Box::new(Npu::new(cfg)?))
        }
        other => bail!("unknown device '{other}' (available: npu)"),
    }
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
    Ok(len)
}

fn cmd_models(json_out: bool) -> Result<()> {
    let mut o = String::new();
    let mut rows = Vec::new();
    for name in zoo::builtin_names() {
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
    let model = zoo::load(&a.model)?;
    let max_batch = positive("--max-batch", a.max_batch)?;
    let len = lengths_for(&model, a.enc_steps, a.dec_steps)?;
    let mut dev = make_device(&a.dev)?;
    let prof = Profile::measure(dev.as_mut(), &model, max_batch, len)?;
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
        let out = json!({
            "model": model.name,
            "device": prof.device,
            "max_batch": max_batch,
            "enc_steps": model.seq.as_ref().map(|_| len.enc),
            "dec_steps": model.seq.as_ref().map(|_| len.dec),
            "single_input_latency_us": single.as_us(),
            "batch_curve": curve.iter().map(|(b, t, tp)| json!({"batch": b, "latency_us": t.as_us(), "throughput_rps": tp})).collect::<Vec<_>>(),
            "nodes": nodes,
        });
        out!(o, "{}", serde_json::to_string_pretty(&out)?);
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
    out!(
        o,
        "single-input latency (Algorithm 1): {:.3} ms\n",
        single.as_ms()
    );
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
        let rep = model.repeats(lazybatch::graph::NodeId(n.id), len);
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
    if s.len() <= n {
        s.to_string()
    } else {
        format!("{}…", &s[..n - 1])
    }
}
