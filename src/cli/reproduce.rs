//! `lazybatch reproduce`, `calibrate` and `npu-config`: the paper's evaluation and the NPU
//! configurations against it.

use super::{emit, positive};
use anyhow::{bail, Result};
use clap::Args;
use lazybatch::device::npu::NpuConfig;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(super) struct ReproduceArgs {
    /// Output directory.
    #[arg(long, default_value = "out/reproduce")]
    out: PathBuf,
    /// Fewer seeds, requests and sweep points: finishes in well under a minute (CI runs it).
    #[arg(long)]
    quick: bool,
    /// Seeds per configuration (default 20; 2 with --quick).
    #[arg(long, allow_negative_numbers = true)]
    seeds: Option<i64>,
    /// Experiments to run, comma-separated (default: the paper's and capacity; `beyond` = bursts,
    /// goodput, adaptive, tokens, llm, our experiments past the paper; `all` = every one).
    #[arg(long, value_delimiter = ',')]
    figures: Option<Vec<String>>,
    /// NPU configurations, comma-separated: shipped names (`paper`, `default`) or TOML files;
    /// the first is the primary one (the ablations run on it). Default: both shipped ones.
    #[arg(long, value_delimiter = ',', value_name = "NAME|FILE")]
    npu_config: Option<Vec<String>>,
    /// Also hold the simulator against this machine's CPU: MobileNet-v1's table against its
    /// real runs, 5 policies × 0.3/0.6/0.9 of Serial's capacity, 200 requests each (30 with
    /// --quick), each point served twice (`validate --repeat`), into OUT/validation/. It runs
    /// in wall time (about 2 minutes; seconds with --quick), so unlike the rest its figures
    /// change from run to run.
    #[arg(long)]
    validate_cpu: bool,
    /// Run only shard I of N of the sweep's runs, from 0, into --out DIR/shard.json (`lazybatch
    /// merge` writes every file from the shards): I/N, `slurm` (a job array's task, of
    /// SLURM_ARRAY_TASK_COUNT) or `k8s/N` (JOB_COMPLETION_INDEX, of N).
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
}

/// The validation `reproduce --validate-cpu` runs, as `validate`'s arguments.
#[derive(clap::Parser, Debug)]
struct CpuValidation {
    #[command(flatten)]
    args: super::validate::ValidateArgs,
}

#[derive(Args, Debug)]
pub(super) struct CalibrateArgs {
    /// NPU configurations, comma-separated: shipped names (`default`, `paper`) or TOML files.
    #[arg(long, value_delimiter = ',', default_value = "default,paper")]
    npu_config: Vec<String>,
    /// Print JSON instead of the Markdown table.
    #[arg(long)]
    json: bool,
}

/// Runs the evaluation and writes its files.
pub(super) fn run(a: ReproduceArgs, progress: lazybatch::progress::Mode) -> Result<()> {
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
        progress,
        npus,
    };
    let t0 = std::time::Instant::now();
    if let Some(text) = &a.shard {
        if a.validate_cpu {
            bail!("--validate-cpu runs in wall time on this machine: run it without --shard");
        }
        let shard =
            lazybatch::run::shard::Shard::parse("--shard", text, |k| std::env::var(k).ok())?;
        let (path, runs) = lazybatch::report::shard::reproduce_shard(&opts, shard)?;
        return emit(&format!(
            "reproduce shard {} of {}: {runs} runs in {:.1} s into {}; `lazybatch merge` writes the report from the shards\n",
            shard.index,
            shard.count,
            t0.elapsed().as_secs_f64(),
            path.display()
        ));
    }
    let files = lazybatch::report::reproduce(&opts)?;
    eprintln!(
        "wrote {} files to {} in {:.1} s; start with {}",
        files.len(),
        a.out.display(),
        t0.elapsed().as_secs_f64(),
        a.out.join("report.md").display()
    );
    if a.validate_cpu {
        let dir = a.out.join("validation");
        let requests = if a.quick { "30" } else { "200" };
        let argv = [
            "validate",
            "--model",
            "mobilenet",
            "--device",
            "cpu",
            "--load",
            "0.3,0.6,0.9",
            "--requests",
            requests,
            "--repeat",
            "--out",
        ];
        let dir_arg = dir.to_string_lossy().into_owned();
        let v = <CpuValidation as clap::Parser>::try_parse_from(
            argv.iter().copied().chain([dir_arg.as_str()]),
        )?;
        eprintln!(
            "holding the simulator against this machine's CPU (MobileNet-v1) into {}",
            dir.display()
        );
        super::validate::run(v.args, progress)?;
    }
    Ok(())
}

/// Table II and Fig. 2 against the given configurations.
pub(super) fn calibrate(a: CalibrateArgs) -> Result<()> {
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

/// Prints a shipped configuration's documented file.
pub(super) fn npu_config(name: &str) -> Result<()> {
    match NpuConfig::named_text(name) {
        Some(text) => emit(text),
        None => bail!(
            "unknown NPU configuration '{name}' (shipped: {})",
            lazybatch::device::npu::config::NAMED
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
