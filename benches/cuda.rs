//! CUDA benchmarks (a harness that prints tables; run with `cargo bench --bench cuda`, add
//! `-- --small` for the reduced models). Needs a GPU: without one it says so and exits 0, or 1
//! with `REQUIRE_GPU=1`. For the GEMM nodes (convolutions and linear layers) of ResNet-50, GNMT
//! and Transformer at batch 1, 8 and 32: the node's time on the CUDA device (CUDA events; it
//! includes gathering the inputs, im2col, the epilogue and scattering the outputs) against one
//! cuBLAS SGEMM of the node's whole GEMM (the same M, N and K), which is the throughput cuBLAS
//! itself reaches on that shape. Then the scheduler's cost per node decision as a share of the
//! mean node time on the card.

use cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
use cudarc::driver::CudaContext;
use lazybatch::device::cuda::device::Precision;
use lazybatch::device::cuda::{self, CudaDevice};
use lazybatch::device::layout::Layout;
use lazybatch::device::Device;
use lazybatch::graph::{loader::Scale, zoo, Model, NodeStep};

mod common;

const BATCHES: [u32; 3] = [1, 8, 32];
const REPS: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median node time in microseconds (CUDA events, after a warm-up).
fn node_us(dev: &mut CudaDevice, m: &Model, at: NodeStep, b: u32) -> f64 {
    let members = common::members(m, b);
    dev.execute(m, at, &members).unwrap();
    median(
        (0..REPS)
            .map(|_| dev.execute(m, at, &members).unwrap().time.0 as f64 / 1e3)
            .collect(),
    )
}

/// cuBLAS SGEMM `[m × k] · [k × n]` on preallocated operands, median microseconds.
struct Blas {
    ctx: std::sync::Arc<CudaContext>,
    blas: CudaBlas,
    a: cudarc::driver::CudaSlice<f32>,
    b: cudarc::driver::CudaSlice<f32>,
    c: cudarc::driver::CudaSlice<f32>,
}

impl Blas {
    fn new(elems: usize) -> Blas {
        let ctx = CudaContext::new(0).unwrap();
        let s = ctx.default_stream();
        let blas = CudaBlas::new(s.clone()).unwrap();
        Blas {
            a: s.alloc_zeros(elems).unwrap(),
            b: s.alloc_zeros(elems).unwrap(),
            c: s.alloc_zeros(elems).unwrap(),
            ctx,
            blas,
        }
    }

    fn sgemm_us(&mut self, m: usize, n: usize, k: usize) -> f64 {
        let s = self.ctx.default_stream();
        // row-major C = A·B as the column-major C^T = B^T·A^T
        let cfg = GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: 1.0f32,
            lda: n as i32,
            ldb: k as i32,
            beta: 0.0,
            ldc: n as i32,
        };
        let mut run = || {
            let e0 = self.ctx.new_event(Some(CU_EVENT_DEFAULT)).unwrap();
            let e1 = self.ctx.new_event(Some(CU_EVENT_DEFAULT)).unwrap();
            e0.record(&s).unwrap();
            // SAFETY: the operands hold at least m·k, k·n and m·n elements (checked by the caller).
            unsafe { self.blas.gemm(cfg, &self.b, &self.a, &mut self.c) }.unwrap();
            e1.record(&s).unwrap();
            e1.synchronize().unwrap();
            f64::from(e0.elapsed_ms(&e1).unwrap()) * 1e3
        };
        run();
        median((0..REPS).map(|_| run()).collect())
    }
}

fn bench_model(dev: &mut CudaDevice, blas: &mut Blas, m: &Model, cap: usize) -> f64 {
    dev.prepare(m, *BATCHES.last().unwrap()).unwrap();
    println!(
        "\n{} ({} nodes): GEMM nodes on the CUDA device vs one cuBLAS SGEMM of the same shape",
        m.name,
        m.nodes.len()
    );
    println!(
        "{:<28} {:<7} {:>5} {:>8} {:>6} {:>6} {:>10} {:>10} {:>8} {:>9}",
        "node", "op", "batch", "M", "N", "K", "node (us)", "cuBLAS", "cuBLAS/node", "GFLOP/s"
    );
    let mut mean_node_b1 = 0.0;
    for &b in &BATCHES {
        // (node, op, M, N, K, node us, cuBLAS us) for every GEMM node
        let mut rows = Vec::new();
        for n in &m.nodes {
            let at = NodeStep {
                node: n.id,
                step: 0,
            };
            let t = node_us(dev, m, at, b);
            if b == 1 {
                mean_node_b1 += t / m.nodes.len() as f64;
            }
            let Some(g) = n.cost.gemm.filter(|g| g.count == 1) else {
                continue;
            };
            let r = Layout::rows(n, m.ref_lengths()) * b as usize;
            let (mm, nn, kk) = (g.m_per_row as usize * r, g.n as usize, g.k as usize);
            if mm * kk > cap || kk * nn > cap || mm * nn > cap {
                continue;
            }
            rows.push((n, mm, nn, kk, t, blas.sgemm_us(mm, nn, kk)));
        }
        // the six largest GEMMs in full; every GEMM node in the total
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(rows[i].1 * rows[i].2 * rows[i].3));
        for &i in order.iter().take(6) {
            let (n, mm, nn, kk, t, c) = rows[i];
            println!(
                "{:<28} {:<7} {:>5} {:>8} {:>6} {:>6} {:>10.1} {:>10.1} {:>10.0}% {:>9.0}",
                n.name,
                n.op.kind_name(),
                b,
                mm,
                nn,
                kk,
                t,
                c,
                100.0 * c / t,
                2.0 * (mm * nn * kk) as f64 / (t * 1e-6) / 1e9
            );
        }
        let node_sum: f64 = rows.iter().map(|r| r.4).sum();
        let blas_sum: f64 = rows.iter().map(|r| r.5).sum();
        println!(
            "{:<28} {:<7} {:>5} {:>8} {:>6} {:>6} {:>10.1} {:>10.1} {:>10.0}%",
            format!("all {} GEMM nodes", rows.len()),
            "",
            b,
            "",
            "",
            "",
            node_sum,
            blas_sum,
            100.0 * blas_sum / node_sum.max(1e-9)
        );
    }
    mean_node_b1
}

fn main() {
    let small = std::env::args().any(|a| a == "--small");
    let p = cuda::probe();
    if !p.usable() {
        if std::env::var("REQUIRE_GPU").as_deref() == Ok("1") {
            eprintln!("REQUIRE_GPU=1 but no usable GPU: {}", p.missing());
            std::process::exit(1);
        }
        eprintln!("SKIPPED cuda bench: no usable GPU ({})", p.missing());
        return;
    }
    let mut dev = CudaDevice::new(0, 1, Precision::F32).unwrap();
    println!("device: {}", dev.gpu_name());
    if dev.gpu_name().contains("stand-in") {
        println!("NOTE: the software CUDA stand-in measures host code: these are not GPU figures");
    }
    let cap = 64 << 20; // operand elements (256 MB each)
    let mut blas = Blas::new(cap);
    let scale = Scale {
        width: 0.125,
        resolution: 0.25,
    };
    let mut node_means = Vec::new();
    for name in ["resnet50", "gnmt", "transformer"] {
        let m = if small {
            zoo::load_scaled(name, scale).unwrap()
        } else {
            zoo::load(name).unwrap()
        };
        node_means.push((name, bench_model(&mut dev, &mut blas, &m, cap)));
    }
    println!("\nScheduler cost per node decision (this CPU) against the mean node time on the card at batch 1:");
    println!(
        "{:<14} {:<10} {:>14} {:>16} {:>9}",
        "model", "policy", "ns/decision", "mean node (us)", "share"
    );
    for (name, node_us) in node_means {
        let rate = if name == "resnet50" { 2000.0 } else { 500.0 };
        for pol in ["lazy", "graph:25"] {
            let (_, ns) = common::scheduler_cost(name, rate, pol);
            println!(
                "{:<14} {:<10} {:>14.0} {:>16.1} {:>8.3}%",
                name,
                pol,
                ns,
                node_us,
                100.0 * ns / (node_us * 1e3)
            );
        }
    }
}
