//! The integration test binary: one module per area (see DESIGN: one test binary, tiny fixtures).

mod capacity;
mod cli;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_stand_in;
mod figures;
mod fuzz;
mod graph;
mod grpc;
mod hostile;
mod http;
mod http_cancel;
mod http_colocated;
mod http_load;
mod kernels;
mod llm;
mod npu;
mod onnx;
mod replicas;
mod reproduce;
mod runtime;
mod shard;
mod statistics;
mod table;
mod tokens;

/// The seed every property test draws from unless `PROPTEST_RNG_SEED` names another: fixed,
/// so that a failure recurs on the next run and on every machine.
pub(crate) const PROPTEST_SEED: u64 = 20_261_127;

/// A property test's configuration: `cases` cases (or `PROPTEST_CASES`, to run more) drawn from
/// a fixed seed ([`PROPTEST_SEED`], or `PROPTEST_RNG_SEED`), which a failing test's output
/// names; no failure files (the seed replays a failure).
/// An SLA of `ms` milliseconds (a test's own, in range).
pub(crate) fn sla(ms: f64) -> lazybatch::time::Sla {
    lazybatch::time::Sla::from_ms(ms).unwrap()
}

/// A maximum batch of `n` (a test's own, in range).
pub(crate) fn mb(n: u32) -> lazybatch::runtime::MaxBatch {
    lazybatch::runtime::MaxBatch::new(n).unwrap()
}

pub(crate) fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, RngSeed};
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("PROPTEST_RNG_SEED").unwrap_or(PROPTEST_SEED);
    let cases = env("PROPTEST_CASES").map_or(cases, |c| c as u32);
    // captured by libtest, shown when the test fails
    eprintln!(
        "proptest: {cases} cases from seed {seed} (PROPTEST_RNG_SEED=… PROPTEST_CASES=… to change)"
    );
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Says that a test skipped, written to the process's stderr past libtest's capture (which
/// swallows a passing test's `eprintln!`), so that a skip shows beside its `ok` on every run.
pub(crate) fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The output of a Python check script, or None (said on stderr as `SKIPPED-<TOOL> what: why`)
/// when the tool it needs is missing: python3 cannot run, or the script exits 3. A missing tool
/// fails the test instead when the variable `require` is 1 (CI sets it).
pub(crate) fn python_check(
    out: std::io::Result<std::process::Output>,
    require: &str,
    what: &str,
) -> Option<std::process::Output> {
    let why = match out {
        Ok(o) if o.status.code() == Some(3) => {
            String::from_utf8_lossy(&o.stderr).trim().to_string()
        }
        Ok(o) => return Some(o),
        Err(e) => format!("python3 cannot run: {e}"),
    };
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{what}: {require}=1 but {why}"
    );
    let tool = require.trim_start_matches("REQUIRE_");
    say_skipped(&format!("SKIPPED-{tool} {what}: {why}"));
    None
}

/// A device where every node takes 1 ms whatever the batch (the paper's time units); the input
/// node (a copy into the preallocated buffer) takes no time, so the times match the figure.
pub struct UnitDevice;
impl lazybatch::device::Device for UnitDevice {
    fn name(&self) -> &'static str {
        "unit"
    }
    fn is_virtual(&self) -> bool {
        true
    }
    fn prepare(&mut self, _: &lazybatch::graph::Model, _: u32) -> lazybatch::Result<()> {
        Ok(())
    }
    fn execute(
        &mut self,
        _: &lazybatch::graph::Model,
        at: lazybatch::graph::NodeStep,
        _: &[lazybatch::device::Member],
    ) -> lazybatch::Result<lazybatch::device::Timing> {
        let ms = if at.node.0 == 0 { 0.0 } else { 1.0 };
        Ok(lazybatch::device::Timing {
            time: lazybatch::time::Nanos::from_ms(ms),
            ..lazybatch::device::Timing::default()
        })
    }
}

/// An empty scratch directory for one test, unique to this test process.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lazybatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("creating a scratch directory");
    d
}

/// The reduced-size variant of a zoo model the device tests run: width 1/8, inputs at 1/4
/// resolution (LAS at full resolution).
/// GPT-2's graph at two layers, d = 32 and a 128-token context (`scripts/gen_models.py`).
pub const TINY_GPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_gpt.toml");

/// Every model the CPU device's tests serve: the paper's seven and the decoder-only GPT-2
/// (medium adds only layers), each reduced by [`small`].
pub fn served_models() -> Vec<&'static str> {
    let mut v = lazybatch::graph::zoo::builtin_names();
    v.push("gpt2");
    v
}

/// [`served_models`] for the CUDA device's tests, GPT-2 as [`TINY_GPT`]: its prompts of
/// hundreds of tokens take minutes on the software CUDA stand-in.
pub fn cuda_models() -> Vec<&'static str> {
    let mut v = lazybatch::graph::zoo::builtin_names();
    v.push(TINY_GPT);
    v
}

/// A model reduced for tests: a zoo model at an eighth of its width (and a quarter of its
/// resolution), a fixture's path as it is.
pub fn small(name: &str) -> lazybatch::graph::Model {
    if name.ends_with(".toml") {
        return lazybatch::graph::zoo::load(name).unwrap();
    }
    let s = if name == "las" {
        lazybatch::graph::loader::Scale {
            width: 0.125,
            resolution: 1.0,
        }
    } else {
        lazybatch::graph::loader::Scale {
            width: 0.125,
            resolution: 0.25,
        }
    };
    lazybatch::graph::zoo::load_scaled(name, s).unwrap()
}

/// Runs every node of `m` once for `b` requests batched together and once for each request
/// alone (static models: every node at step 0), capturing the final outputs, and returns the
/// largest relative difference between the two. The same body runs on every real device.
pub fn batched_vs_alone(
    dev: &mut dyn lazybatch::device::Device,
    m: &lazybatch::graph::Model,
    b: u32,
) -> f64 {
    use lazybatch::device::capture::CaptureMode;
    use lazybatch::device::Member;
    use lazybatch::graph::NodeStep;
    let members: Vec<Member> = (0..b)
        .map(|slot| Member {
            slot,
            len: m.ref_lengths(),
            input: u64::from(slot) + 100,
            step: 0,
        })
        .collect();
    let mut run = |groups: Vec<&[Member]>| {
        dev.prepare(m, b).unwrap();
        dev.set_capture(CaptureMode::Outputs);
        for g in groups {
            for n in &m.nodes {
                dev.execute(
                    m,
                    NodeStep {
                        node: n.id,
                        step: 0,
                    },
                    g,
                )
                .unwrap();
            }
        }
        dev.take_captured().outputs
    };
    let together = run(vec![&members[..]]);
    let alone = run(members.chunks(1).collect());
    assert_eq!(together.len(), b as usize);
    lazybatch::run::verify::max_diff(&together, &alone)
        .expect("the same requests and output sizes")
        .1
}
