//! `lazybatch kernels`: compile every CUDA kernel through NVRTC (no GPU needed).

use super::emit;
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::device::open::compile_kernels;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(super) struct KernelsArgs {
    /// Target architecture (sm_75 … sm_120; NVRTC 13 dropped sm_70; default: NVRTC's).
    #[arg(long)]
    arch: Option<String>,
    /// Also write each file's PTX to DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Compiles and lists every kernel.
pub(super) fn run(a: KernelsArgs) -> Result<()> {
    let mut o = String::new();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let t0 = std::time::Instant::now();
    let (arch, compiled) = compile_kernels(a.arch.as_deref())?;
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
