//! The CUDA device. Without a GPU these tests say so on stderr and pass (they fail when
//! `REQUIRE_GPU=1`); the kernel compilation test needs only NVRTC and runs in CI, where
//! `.ci/run` installs it (it fails when `REQUIRE_NVRTC=1` and NVRTC is missing).

use crate::small;
use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::cuda::device::Precision;
use lazybatch::device::cuda::{self, nvrtc, CudaDevice};
use lazybatch::graph::zoo;
use lazybatch::verify::{compare_traces, max_diff, serve_both, trace_both, verify};

fn gpu_or_skip(test: &str) -> bool {
    let p = cuda::probe();
    if p.usable() {
        return true;
    }
    assert!(
        std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
        "{test}: REQUIRE_GPU=1 but no usable GPU: {}",
        p.missing()
    );
    eprintln!("SKIPPED {test}: no usable GPU ({})", p.missing());
    false
}

/// Device allocations made so far, when the driver is the software stand-in (which counts
/// them); None with a real driver.
fn stand_in_allocations() -> Option<u64> {
    // SAFETY: opens the driver library cudarc already loaded and, if it is the stand-in, calls
    // its counter, a plain function without arguments.
    unsafe {
        let lib = libloading::Library::new("libcuda.so").ok()?;
        let f = lib
            .get::<unsafe extern "C" fn() -> u64>(b"lb_stand_in_allocations")
            .ok()?;
        Some(f())
    }
}

#[test]
fn every_shipped_kernel_compiles_with_nvrtc() {
    if !nvrtc::nvrtc_available() {
        assert!(
            std::env::var("REQUIRE_NVRTC").as_deref() != Ok("1"),
            "REQUIRE_NVRTC=1 but {}",
            nvrtc::nvrtc_search_list()
        );
        eprintln!(
            "SKIPPED every_shipped_kernel_compiles_with_nvrtc: no libnvrtc ({})",
            nvrtc::nvrtc_search_list()
        );
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        let compiled = nvrtc::compile_all(Some(arch)).unwrap();
        assert_eq!(compiled.len(), nvrtc::SOURCES.len());
        for c in &compiled {
            assert!(
                c.ptx.contains(&format!(".target {arch}")),
                "{}: wrong target",
                c.file
            );
            for k in &c.kernels {
                assert!(
                    c.ptx.contains(&format!(".entry {k}(")),
                    "{}: {k} missing from the PTX",
                    c.file
                );
            }
        }
    }
}

#[test]
fn kernel_sources_are_self_contained() {
    let names: Vec<String> = nvrtc::SOURCES
        .iter()
        .flat_map(|(_, s)| nvrtc::kernel_names(s))
        .collect();
    for k in [
        "copy_segments",
        "im2col_kp",
        "depthwise",
        "channel_epilogue",
        "pool2d",
        "bias_act",
        "sum_parts",
        "batchnorm_rows",
        "layernorm_rows",
        "softmax_rows",
        "argmax_rows",
        "embedding_rows",
        "lstm_cell",
        "attend_rows",
    ] {
        assert!(names.iter().any(|n| n == k), "no kernel {k}");
    }
    for (f, s) in nvrtc::SOURCES {
        assert!(
            !s.contains("#include"),
            "{f} includes a header: NVRTC ships none"
        );
        assert!(
            !s.contains("INFINITY"),
            "{f} uses INFINITY, which NVRTC does not define"
        );
    }
}

#[test]
fn without_a_gpu_cuda_is_a_clear_error() {
    let p = cuda::probe();
    if p.usable() {
        eprintln!("a GPU is present: nothing to check here");
        return;
    }
    let e = CudaDevice::new(0, 1, Precision::F32).expect_err("no GPU, no device");
    let msg = e.to_string();
    assert!(msg.starts_with("device 'cuda' unavailable:"), "{msg}");
    assert!(!msg.is_empty() && msg.contains("no "), "{msg}");
}

#[test]
fn cuda_matches_the_cpu_model_by_model() {
    if !gpu_or_skip("cuda_matches_the_cpu_model_by_model") {
        return;
    }
    for name in zoo::builtin_names() {
        let m = small(name);
        let mut gpu = CudaDevice::new(0, 3, Precision::F32).unwrap();
        let mut cpu = CpuDevice::new(3);
        let (g, c) = serve_both(&m, &mut gpu, &mut cpu, 4, 4, 3).unwrap();
        let (abs, rel, n) = max_diff(&g, &c)
            .unwrap_or_else(|| panic!("{name}: outputs differ in shape (a decoded token differs)"));
        eprintln!("{name}: {n} values, max abs diff {abs:e}, max rel diff {rel:e}");
        // f32 with different reduction orders (cuBLAS vs gemm): relative 1e-3 of magnitude
        assert!(rel < 1e-3, "{name}: CUDA vs CPU relative difference {rel}");
    }
}

#[test]
fn cuda_matches_the_cpu_op_by_op() {
    if !gpu_or_skip("cuda_matches_the_cpu_op_by_op") {
        return;
    }
    let mut per_op: std::collections::BTreeMap<&str, f64> = Default::default();
    for name in zoo::builtin_names() {
        let m = small(name);
        let mut gpu = CudaDevice::new(0, 4, Precision::F32).unwrap();
        let mut cpu = CpuDevice::new(4);
        let (g, c) = trace_both(&m, &mut gpu, &mut cpu, 2, 2, 4).unwrap();
        // every node execution, f32 with different reduction orders: relative 1e-3 (as above)
        let cmp = compare_traces(&m, &g, &c, 1e-3)
            .unwrap_or_else(|e| panic!("{name}: the CUDA and CPU runs took different paths: {e}"));
        assert_eq!(
            cmp.nodes.len(),
            m.nodes.len(),
            "{name}: a node was not traced"
        );
        for (_, op, rel) in &cmp.nodes {
            let w = per_op.entry(op).or_insert(0.0);
            *w = w.max(*rel);
        }
        assert!(
            cmp.first_divergence.is_none(),
            "{name}: first divergence (node, op, step, request, relative difference): {:?}",
            cmp.first_divergence
        );
    }
    for (op, rel) in per_op {
        eprintln!("op {op}: max relative difference {rel:e}");
    }
}

#[test]
fn cuda_serving_allocates_no_device_memory() {
    use lazybatch::device::Device;
    use lazybatch::profile::Profile;
    use lazybatch::runtime::Predictor;
    use lazybatch::time::{Nanos, VirtualClock};
    if !gpu_or_skip("cuda_serving_allocates_no_device_memory") {
        return;
    }
    // Free device memory before and after serving, once buffers are prepared and a first run
    // has warmed up: every buffer comes from prepare. (On a card shared with other processes
    // their allocations would show here too.)
    for name in ["resnet50", "gnmt", "transformer_base"] {
        let m = small(name);
        let mut gpu = CudaDevice::new(0, 1, Precision::F32).unwrap();
        gpu.prepare(&m, 4).unwrap();
        let pred = Predictor::new(&m, &Profile::uniform(&m, 4, Nanos::from_us(50.0)), 30);
        let arrivals = lazybatch::traffic::poisson(&m, 20_000.0, 12, 7)
            .unwrap()
            .collect::<Vec<_>>();
        let mut serve = || {
            let mut pol = lazybatch::policy::parse("lazy", 4).unwrap();
            lazybatch::engine::run(
                &lazybatch::engine::Setup {
                    snapshots: false,
                    keep: lazybatch::metrics::KeepRecords {
                        requests: true,
                        ..Default::default()
                    },
                    ..lazybatch::engine::Setup::new(&m, &pred, Nanos::from_secs(60.0), 4)
                },
                &mut gpu,
                pol.as_mut(),
                &mut VirtualClock::new(),
                &arrivals,
            )
            .unwrap()
        };
        serve();
        let (before, _) = cudarc::driver::result::mem_get_info().unwrap();
        let allocs = stand_in_allocations();
        let out = serve();
        let (after, _) = cudarc::driver::result::mem_get_info().unwrap();
        eprintln!(
            "{name}: {} node executions, {} preemptions; free device memory {before} -> {after} bytes",
            out.counters.executions, out.counters.preemptions
        );
        assert!(out.counters.preemptions > 0, "{name}: nothing preempted");
        assert_eq!(
            before, after,
            "{name}: device memory allocated while serving"
        );
        // the stand-in also counts allocations freed again before the end (a real driver cannot)
        if let (Some(a), Some(b)) = (allocs, stand_in_allocations()) {
            assert_eq!(a, b, "{name}: {} device allocations while serving", b - a);
        }
    }
}

#[test]
fn cuda_batched_convolutions_match_one_by_one() {
    if !gpu_or_skip("cuda_batched_convolutions_match_one_by_one") {
        return;
    }
    // convolutions and pooling run a whole sub-batch at once (strided-batched GEMMs)
    for precision in [Precision::F32, Precision::F16] {
        for m in [
            small("resnet50"),
            small("mobilenet_v1"),
            zoo::load("tests/fixtures/grouped_convs.toml").unwrap(),
        ] {
            let mut gpu = CudaDevice::new(0, 6, precision).unwrap();
            let rel = crate::batched_vs_alone(&mut gpu, &m, 4);
            eprintln!(
                "{} {precision:?}: batched vs alone, max relative difference {rel:e}",
                m.name
            );
            // cuBLAS may pick another kernel for a batch: close, not necessarily identical
            assert!(rel < 1e-4, "{} {precision:?}: {rel}", m.name);
        }
    }
}

#[test]
fn cuda_preemption_and_merging_keep_results() {
    if !gpu_or_skip("cuda_preemption_and_merging_keep_results") {
        return;
    }
    for name in ["resnet50", "gnmt", "transformer_base", "bert_base"] {
        let m = small(name);
        let mut gpu = CudaDevice::new(0, 5, Precision::F32).unwrap();
        let r = verify(&m, &mut gpu, 6, 4, 5).unwrap();
        eprintln!("{name}: {r:?}");
        assert!(r.preemptions > 0);
        // cuBLAS may pick a different kernel for a different batch: not bit-identical in general
        assert!(r.max_abs_diff < 1e-3, "{name}: {r:?}");
    }
}

#[test]
fn cuda_f16_storage_stays_close_to_the_cpu() {
    if !gpu_or_skip("cuda_f16_storage_stays_close_to_the_cpu") {
        return;
    }
    for name in ["resnet50", "bert_base"] {
        let m = small(name);
        let mut gpu = CudaDevice::new(0, 3, Precision::F16).unwrap();
        let mut cpu = CpuDevice::new(3);
        let (g, c) = serve_both(&m, &mut gpu, &mut cpu, 4, 4, 3).unwrap();
        let (abs, rel, n) = max_diff(&g, &c).unwrap();
        eprintln!("{name} f16: {n} values, max abs diff {abs:e}, max rel diff {rel:e}");
        // f16 operands (11-bit mantissa) with f32 accumulation: a few 1e-3 of the magnitude
        assert!(
            rel < 5e-2,
            "{name}: f16 CUDA vs CPU relative difference {rel}"
        );
    }
}
