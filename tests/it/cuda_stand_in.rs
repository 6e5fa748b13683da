//! The unmodified CUDA device on a software CUDA stand-in (`tests/cuda-stand-in/`): fake
//! `libcuda.so` that runs the shipped `kernels/*.cu` compiled as host C++, and fake
//! `libcublas.so`, `libcublasLt.so` and `libcudnn.so` that compute and check the library calls the
//! device makes, so that CI, which has no GPU, runs the CUDA device's host code (cudarc calls,
//! buffer layout, launch shapes, cuBLAS, cuBLASLt and cuDNN configurations, preemption and
//! merging) end to end. The real NVRTC still compiles the PTX, and the stand-in only hands out
//! kernels the PTX defines.
//!
//! The loader reads `LD_LIBRARY_PATH` once at process start, so the GPU tests of `cuda.rs` (all
//! of them, by the rule in its header) run in a child process of this test binary with the
//! stand-in first on that path and `REQUIRE_GPU=1`. Needs g++ and NVRTC; skips loudly without
//! them and fails instead when `REQUIRE_CUDA_STAND_IN=1` (as in CI).
//!
//! This checks the CUDA device's logic and the kernels' arithmetic, not a GPU: memory model,
//! warp scheduling, cuBLAS's own kernels and every speed figure still need a card.

use lazybatch::device::cuda::nvrtc;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const REQUIRE: &str = "REQUIRE_CUDA_STAND_IN";

/// The kernels' host C++: the shim, the common header, every kernel file (dynamic shared memory
/// rewritten to the stand-in's buffer) and the registry of kernels, each marked cooperative when
/// it synchronizes.
fn host_kernels_source() -> String {
    let mut s = String::from("#include \"shim.h\"\n");
    s.push_str(nvrtc::COMMON);
    let mut registry = String::new();
    let mut n = 0;
    for (file, src) in nvrtc::SOURCES {
        s.push_str(&format!("\n// ---- kernels/{file}\n"));
        for line in src.lines() {
            s.push_str(&rewrite_dynamic_shared(line));
            s.push('\n');
        }
        for name in nvrtc::kernel_names(src) {
            let coop = cooperative(src, &name);
            registry.push_str(&format!("    LB_KERNEL({name}, {coop}),\n"));
            n += 1;
        }
    }
    s.push_str(&format!(
        "\nextern const lb_kernel lb_kernels[] = {{\n{registry}}};\nextern const int lb_nkernels = {n};\n"
    ));
    s
}

/// `extern __shared__ T name[];` becomes `T* name = (T*)lb_dynamic_shared();`.
fn rewrite_dynamic_shared(line: &str) -> String {
    let t = line.trim();
    if let Some(decl) = t
        .strip_prefix("extern __shared__ ")
        .and_then(|d| d.strip_suffix("[];"))
    {
        if let Some((ty, name)) = decl.rsplit_once(' ') {
            return format!("    {ty}* {name} = ({ty}*)lb_dynamic_shared();");
        }
    }
    line.to_string()
}

/// True when the kernel's body uses a barrier or a shuffle (directly or through the common
/// block reductions).
fn cooperative(src: &str, name: &str) -> bool {
    let start = src
        .find(&format!("__global__ void {name}("))
        .expect("kernel_names found it");
    let rest = &src[start + 1..];
    let body = &rest[..rest.find("__global__").unwrap_or(rest.len())];
    ["__syncthreads", "lb_block_", "__shfl"]
        .iter()
        .any(|k| body.contains(k))
}

fn required() -> bool {
    std::env::var(REQUIRE).as_deref() == Ok("1")
}

fn skip(test: &str, why: &str) {
    assert!(!required(), "{test}: {REQUIRE}=1 but {why}");
    crate::say_skipped(&format!("SKIPPED {test}: {why}"));
}

/// Builds the stand-in once per test process; the directory to put first on `LD_LIBRARY_PATH`.
fn stand_in() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        if !nvrtc::nvrtc_available() {
            return Err(format!("no NVRTC ({})", nvrtc::nvrtc_search_list()));
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cuda-stand-in");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda-stand-in");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let kernels = dir.join("kernels_host.cpp");
        std::fs::write(&kernels, host_kernels_source()).map_err(|e| e.to_string())?;
        let build = |out: &str, files: &[PathBuf]| -> Result<(), String> {
            let o = Command::new("g++")
                .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-I"])
                .arg(&src)
                .arg("-o")
                .arg(dir.join(out))
                .args(files)
                .arg("-ldl")
                .output()
                .map_err(|e| format!("cannot run g++: {e}"))?;
            if !o.status.success() {
                return Err(format!(
                    "g++ failed building {out}:\n{}",
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            Ok(())
        };
        build("libcuda.so", &[kernels, src.join("driver.cpp")])?;
        build("libcublas.so", &[src.join("cublas.cpp")])?;
        build("libcublasLt.so", &[src.join("cublaslt.cpp")])?;
        build(
            "libcudnn.so",
            &[src.join("cudnn.cpp"), src.join("cudnn_graph.cpp")],
        )?;
        // the same stand-in without cuDNN, for the fallback (links to the libraries above)
        let bare = dir.join("without-cudnn");
        std::fs::create_dir_all(&bare).map_err(|e| e.to_string())?;
        for lib in ["libcuda.so", "libcublas.so", "libcublasLt.so"] {
            let link = bare.join(lib);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(dir.join(lib), &link).map_err(|e| e.to_string())?;
        }
        Ok(dir)
    })
    .as_deref()
    .map_err(Clone::clone)
}

/// A command whose dynamic loader sees the stand-in first.
fn with_stand_in(cmd: &mut Command, dir: &Path) {
    let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    cmd.env("LD_LIBRARY_PATH", format!("{}:{old}", dir.display()));
}

#[test]
fn host_kernel_source_marks_the_synchronizing_kernels() {
    let s = host_kernels_source();
    for (k, coop) in [
        ("layernorm_rows", true),
        ("softmax_rows", true),
        ("argmax_rows", true),
        ("attend_rows", true),
        ("copy_segments", false),
        ("lstm_cell", false),
        ("im2col_kp", false),
    ] {
        assert!(
            s.contains(&format!("LB_KERNEL({k}, {coop})")),
            "{k} should be cooperative={coop}"
        );
    }
    assert!(s.contains("float* sc = (float*)lb_dynamic_shared();"));
    assert!(!s.contains("extern __shared__"));
}

/// The GPU tests of `cuda.rs` (by its rule: the tests that call `gpu_or_skip`, all named
/// `cuda_`) run in a child on the stand-in with `REQUIRE_GPU=1`: exactly those must run and pass,
/// and none may skip.
#[test]
fn gpu_tests_pass_on_the_software_cuda_stand_in() {
    let test = "gpu_tests_pass_on_the_software_cuda_stand_in";
    let dir = match stand_in() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    let expected: BTreeSet<String> = crate::cuda::gpu_tests().into_iter().collect();
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["cuda::cuda_", "--test-threads=1", "--nocapture"])
        .env("REQUIRE_GPU", "1");
    with_stand_in(&mut cmd, dir);
    let o = cmd.output().expect("running the GPU tests in a child");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    for l in err
        .lines()
        .filter(|l| l.contains("max") || l.contains("stand-in"))
    {
        eprintln!("stand-in: {l}");
    }
    assert!(
        o.status.success(),
        "GPU tests failed on the stand-in:\n{out}\n{err}"
    );
    let skipped = err
        .lines()
        .filter(|l| l.contains(crate::cuda::SKIP_MARK))
        .count();
    assert_eq!(skipped, 0, "{skipped} GPU tests skipped:\n{err}");
    let passed: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("test cuda::")?.strip_suffix(" ... ok"))
        .map(String::from)
        .collect();
    assert_eq!(
        passed, expected,
        "the tests that passed on the stand-in (left) are not the GPU tests of cuda.rs (right)"
    );
    // the summary agrees: as many passed as cuda.rs has GPU tests, none failed or was ignored
    let summary = out
        .lines()
        .find_map(|l| l.strip_prefix("test result: ok. "))
        .unwrap_or_else(|| panic!("no test summary:\n{out}"));
    let count = |what: &str| -> usize {
        summary
            .split("; ")
            .find_map(|part| part.strip_suffix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{what}' count in '{summary}'"))
    };
    assert_eq!(count(" passed"), expected.len(), "{summary}");
    assert_eq!(count(" failed"), 0, "{summary}");
    assert_eq!(count(" ignored"), 0, "{summary}");
    eprintln!(
        "stand-in: {} of {} GPU tests of cuda.rs ran and passed",
        passed.len(),
        expected.len()
    );
}

#[test]
fn cli_picks_and_names_the_stand_in() {
    let test = "cli_picks_and_names_the_stand_in";
    let dir = match stand_in() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazybatch"));
        cmd.args(args);
        with_stand_in(&mut cmd, dir);
        let o = cmd.output().expect("running lazybatch");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{args:?}:\n{out}\n{err}");
        (out, err)
    };
    let (out, err) = run(&[
        "verify",
        "--device",
        "cuda",
        "--model",
        "gnmt",
        "--width",
        "0.125",
        "--requests",
        "4",
        "--ops",
    ]);
    assert!(
        err.contains("cuda: lazybatch software CUDA stand-in"),
        "{err}"
    );
    // a GPU is judged by the f32 tolerance; the stand-in's GEMM is batch-invariant, so its
    // outputs are bit-identical too
    assert!(
        out.contains("OK: largest relative difference 0e0 against a tolerance of")
            && out.contains("(bit-identical too)"),
        "{out}"
    );
    // reports name the stand-in, so its figures cannot pass for a GPU's
    assert!(
        out.contains("on cuda (lazybatch software CUDA stand-in (tests only, not a GPU); f32, "),
        "{out}"
    );
    assert!(out.contains("against the CPU reference"), "{out}");
    assert!(out.contains("    lstm "), "{out}");
    assert!(
        out.contains("no node execution differs by more than"),
        "{out}"
    );
    let (_, err) = run(&[
        "profile",
        "--model",
        "resnet50",
        "--width",
        "0.125",
        "--res",
        "0.25",
        "--max-batch",
        "2",
    ]);
    assert!(err.contains("device auto: using CUDA"), "{err}");
}

/// Runs `lazybatch ARGS` with `dir` first on the loader path; (success, stdout, stderr).
fn lazybatch_on(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazybatch"));
    cmd.args(args);
    with_stand_in(&mut cmd, dir);
    let o = cmd.output().expect("running lazybatch");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn verify_passes_for_every_zoo_model_on_both_convolution_paths() {
    let test = "verify_passes_for_every_zoo_model_on_both_convolution_paths";
    let dir = match stand_in() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    // `verify --device cuda` (alone vs forced preemptions and merges, and against the CPU) for
    // every zoo model in f32 and f16 on the default cuDNN path (the graph API), for the models
    // with convolutions on the im2col path too, and for ResNet-50 on cuDNN's legacy API; the
    // reports name the path
    for name in crate::cuda_models() {
        let convs = crate::small(name)
            .nodes
            .iter()
            .any(|n| matches!(n.op, lazybatch::graph::op::Op::Conv2d { .. }));
        let paths: &[&str] = match (convs, name) {
            (true, "resnet50") => &["cudnn", "cudnn-legacy", "im2col"],
            (true, _) => &["cudnn", "im2col"],
            (false, _) => &["cudnn"],
        };
        for conv in paths {
            for precision in ["f32", "f16"] {
                let mut args = vec![
                    "verify",
                    "--device",
                    "cuda",
                    "--model",
                    name,
                    "--width",
                    // (a fixture, small already, as it is)
                    if name.ends_with(".toml") {
                        "1"
                    } else {
                        "0.125"
                    },
                    "--requests",
                    "3",
                    "--max-batch",
                    "3",
                    "--conv",
                    conv,
                    "--precision",
                    precision,
                ];
                if convs {
                    // the image models: --res scales their input
                    args.extend(["--res", "0.25"]);
                }
                let (ok, out, err) = lazybatch_on(dir, &args);
                assert!(ok, "{name} {conv} {precision}:\n{out}\n{err}");
                let named = match *conv {
                    "cudnn" => format!("{precision}, cuDNN 9.10.0 convolutions)"),
                    "cudnn-legacy" => format!("{precision}, cuDNN 9.10.0 legacy-API convolutions)"),
                    _ => format!("{precision}, im2col convolutions)"),
                };
                assert!(out.contains(&named), "{name} {conv} {precision}: {out}");
                assert!(out.contains("OK"), "{name} {conv} {precision}: {out}");
            }
        }
    }
}

#[test]
fn without_cudnn_auto_takes_im2col_with_a_notice_and_cudnn_is_an_error() {
    let test = "without_cudnn_auto_takes_im2col_with_a_notice_and_cudnn_is_an_error";
    let dir = match stand_in() {
        Ok(d) => d.join("without-cudnn"),
        Err(why) => return skip(test, &why),
    };
    let resnet = [
        "verify",
        "--device",
        "cuda",
        "--model",
        "resnet50",
        "--width",
        "0.125",
        "--res",
        "0.25",
        "--requests",
        "2",
    ];
    let (ok, out, err) = lazybatch_on(&dir, &resnet);
    assert!(ok, "{out}\n{err}");
    assert!(
        err.contains("notice: cuDNN not found (libcudnn.so.9: pip install nvidia-cudnn-cu13")
            && err.contains("convolutions run as im2col + cuBLAS"),
        "{err}"
    );
    assert!(out.contains("f32, im2col convolutions)"), "{out}");
    let (ok, out, err) = lazybatch_on(&dir, &[&resnet[..], &["--conv", "cudnn"]].concat());
    assert!(!ok, "{out}");
    assert!(
        err.contains("invalid --conv: cudnn needs the cuDNN library: cuDNN not found (libcudnn.so.9: pip install nvidia-cudnn-cu13"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // with cuDNN, no notice
    let (ok, _, err) = lazybatch_on(stand_in().unwrap(), &resnet);
    assert!(ok && !err.contains("notice:"), "{err}");
}

#[test]
fn an_old_driver_is_a_clear_error_and_auto_falls_back() {
    let test = "an_old_driver_is_a_clear_error_and_auto_falls_back";
    let dir = match stand_in() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazybatch"));
        cmd.args(args).env("LB_STAND_IN_DRIVER_VERSION", "12080");
        with_stand_in(&mut cmd, dir);
        cmd.output().expect("running lazybatch")
    };
    let o = run(&["verify", "--device", "cuda", "--model", "resnet50"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the driver supports CUDA 12.8, older than the CUDA 13.0"),
        "{err}"
    );
    let o = run(&[
        "run",
        "--model",
        "resnet50",
        "--policy",
        "lazy",
        "--rate",
        "100",
        "--requests",
        "20",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("device auto: no usable CUDA device (the driver supports CUDA 12.8"),
        "{err}"
    );
}

// ---- the stand-in must be able to fail: misuse the CUDA API on purpose in a child ----

/// Loads one shipped kernel through the real NVRTC path onto device 0.
fn child_kernel(
    file: &str,
    name: &str,
) -> (
    std::sync::Arc<cudarc::driver::CudaStream>,
    cudarc::driver::CudaFunction,
) {
    let ctx = cudarc::driver::CudaContext::new(0).expect("a (stand-in) device");
    let c = nvrtc::compile_all(Some("sm_90"))
        .expect("kernels compile")
        .into_iter()
        .find(|c| c.file == file)
        .expect("the kernel file");
    let m = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(c.ptx))
        .expect("module loads");
    (ctx.default_stream(), m.load_function(name).expect("kernel"))
}

#[test]
#[ignore = "run by misuse_is_caught_by_the_stand_in in a child with the stand-in loaded"]
fn stand_in_child_partial_warp() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let (s, f) = child_kernel("rows.cu", "layernorm_rows");
    let x = s.alloc_zeros::<f32>(200).unwrap();
    let mut y = s.alloc_zeros::<f32>(200).unwrap();
    let g = s.alloc_zeros::<f32>(200).unwrap();
    let (n, eps) = (200i32, 1e-5f32);
    let mut b = s.launch_builder(&f);
    b.arg(&x).arg(&mut y).arg(&g).arg(&g).arg(&n).arg(&eps);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (200, 1, 1), // not a whole number of warps: the block reductions shuffle
        shared_mem_bytes: 0,
    };
    // SAFETY: a deliberate misuse on the software stand-in, which aborts.
    let _ = unsafe { b.launch(cfg) };
    s.synchronize().unwrap();
}

#[test]
#[ignore = "run by misuse_is_caught_by_the_stand_in in a child with the stand-in loaded"]
fn stand_in_child_write_past_a_buffer() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let (s, f) = child_kernel("gather.cu", "copy_segments");
    let src = s.clone_htod(&vec![1.0f32; 4096]).unwrap();
    let mut dst = s.alloc_zeros::<f32>(1000).unwrap();
    let seg = s.clone_htod(&[0i64, 0, 4096]).unwrap(); // 4096 floats into a 1000-float buffer
    let (n, fill) = (1i32, 0.0f32);
    let mut b = s.launch_builder(&f);
    b.arg(&src).arg(&mut dst).arg(&seg).arg(&n).arg(&fill);
    // SAFETY: a deliberate misuse on the software stand-in, which faults.
    let _ = unsafe { b.launch(LaunchConfig::for_num_elems(256)) };
    s.synchronize().unwrap();
}

#[test]
#[ignore = "run by misuse_is_caught_by_the_stand_in in a child with the stand-in loaded"]
fn stand_in_child_gemm_past_a_buffer() {
    use cudarc::cublas::{sys::cublasOperation_t::CUBLAS_OP_N, CudaBlas, Gemm, GemmConfig};
    let ctx = cudarc::driver::CudaContext::new(0).expect("a (stand-in) device");
    let s = ctx.default_stream();
    let blas = CudaBlas::new(s.clone()).unwrap();
    let a = s.alloc_zeros::<f32>(64 * 64).unwrap();
    let b = s.alloc_zeros::<f32>(64 * 64).unwrap();
    let mut c = s.alloc_zeros::<f32>(64 * 64).unwrap();
    let cfg = |n: i32| GemmConfig {
        transa: CUBLAS_OP_N,
        transb: CUBLAS_OP_N,
        m: 64,
        n,
        k: 64,
        alpha: 1.0f32,
        lda: 64,
        ldb: 64,
        beta: 0.0,
        ldc: 64,
    };
    // SAFETY: n = 64 fits the buffers; n = 65 (valid leading dimensions) reads a column past
    // the end of B, which the stand-in refuses.
    unsafe { blas.gemm(cfg(64), &a, &b, &mut c) }.expect("an in-bounds GEMM runs");
    let e = unsafe { blas.gemm(cfg(65), &a, &b, &mut c) }.expect_err("an out-of-bounds GEMM");
    assert!(format!("{e:?}").contains("INVALID_VALUE"), "{e:?}");
}

#[test]
#[ignore = "run by misuse_is_caught_by_the_stand_in in a child with the stand-in loaded"]
fn stand_in_child_cudnn_without_its_workspace() {
    use cudarc::cudnn::{result as dnn, sys as ds};
    use cudarc::driver::DevicePtr;
    let ctx = cudarc::driver::CudaContext::new(0).expect("a (stand-in) device");
    let s = ctx.default_stream();
    let x = s.alloc_zeros::<f32>(8 * 8 * 8).unwrap();
    let w = s.alloc_zeros::<f32>(8 * 8 * 9).unwrap();
    let mut y = s.alloc_zeros::<f32>(8 * 8 * 8).unwrap();
    let h = dnn::create_handle().unwrap();
    let (xd, yd) = (
        dnn::create_tensor_descriptor().unwrap(),
        dnn::create_tensor_descriptor().unwrap(),
    );
    let (wd, cd) = (
        dnn::create_filter_descriptor().unwrap(),
        dnn::create_convolution_descriptor().unwrap(),
    );
    let f32t = ds::cudnnDataType_t::CUDNN_DATA_FLOAT;
    let nchw = ds::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
    let algo = ds::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    // SAFETY: a deliberate misuse on the software stand-in: a 3x3 convolution of 8 channels
    // on 8x8 images with the precomputed-index algorithm and no workspace, which it refuses.
    let e = unsafe {
        dnn::set_tensor4d_descriptor(xd, nchw, f32t, [1, 8, 8, 8]).unwrap();
        dnn::set_tensor4d_descriptor(yd, nchw, f32t, [1, 8, 8, 8]).unwrap();
        dnn::set_filter4d_descriptor(wd, f32t, nchw, [8, 8, 3, 3]).unwrap();
        dnn::set_convolution2d_descriptor(
            cd,
            1,
            1,
            1,
            1,
            1,
            1,
            ds::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            f32t,
        )
        .unwrap();
        let ws = dnn::get_convolution_forward_workspace_size(h, xd, wd, cd, yd, algo).unwrap();
        assert!(
            ws > 0,
            "the stand-in's rule gives this algorithm a workspace"
        );
        let (one, zero) = (1.0f32, 0.0f32);
        let (xp, _gx) = x.device_ptr(&s);
        let (wp, _gw) = w.device_ptr(&s);
        let (yp, _gy) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut y, &s);
        dnn::convolution_forward(
            h,
            (&one as *const f32).cast(),
            xd,
            xp as *const _,
            wd,
            wp as *const _,
            cd,
            algo,
            std::ptr::null_mut(),
            0,
            (&zero as *const f32).cast(),
            yd,
            yp as *mut _,
        )
    }
    .expect_err("a convolution without the workspace its algorithm needs");
    assert!(format!("{e:?}").contains("BAD_PARAM"), "{e:?}");
}

#[test]
fn misuse_is_caught_by_the_stand_in() {
    let test = "misuse_is_caught_by_the_stand_in";
    let dir = match stand_in() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    let child = |name: &str| {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
        cmd.args(["--ignored", "--exact", &format!("cuda_stand_in::{name}")]);
        with_stand_in(&mut cmd, dir);
        let o = cmd.output().expect("running a child");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, err) = child("stand_in_child_partial_warp");
    assert!(!ok, "a partial-warp shuffle went unnoticed:\n{err}");
    assert!(
        err.contains("layernorm_rows: shuffle in a block that is not a whole number of warps"),
        "{err}"
    );
    let (ok, err) = child("stand_in_child_write_past_a_buffer");
    assert!(!ok, "a write past a buffer went unnoticed:\n{err}");
    assert!(
        err.contains("out-of-bounds device access) in kernel copy_segments"),
        "{err}"
    );
    let (ok, err) = child("stand_in_child_gemm_past_a_buffer");
    assert!(ok, "{err}");
    assert!(
        err.contains("cublasSgemm_v2 operand B extends past its device allocation"),
        "{err}"
    );
    let (ok, err) = child("stand_in_child_cudnn_without_its_workspace");
    assert!(ok, "{err}");
    assert!(
        err.contains(
            "cudnnConvolutionForward refuses: a workspace of 0 bytes where the algorithm needs"
        ),
        "{err}"
    );
}
