//! CPU benchmarks (a harness that prints tables; run with `cargo bench --bench cpu`):
//! GEMM throughput on the zoo's shapes, ResNet-50 latency at batch 1 and 16 on the CPU
//! device, and the scheduler's cost per node decision.

use lazybatch::device::cpu::{kernels, CpuDevice};
use lazybatch::device::Device;
use lazybatch::graph::{zoo, NodeStep};
use lazybatch::runtime::{BatchTable, RequestId};
use std::time::Instant;

mod common;
use common::whole_graph;

fn scheduler_overhead() {
    // the yardstick: ResNet-50's mean node on this CPU at batch 1, measured now
    let resnet = zoo::load("resnet50").unwrap();
    let mut dev = CpuDevice::new(1);
    dev.prepare(&resnet, 1).unwrap();
    let node_ns = 1e9 * whole_graph(&mut dev, &resnet, 1) / resnet.nodes.len() as f64;
    println!("\nScheduler cost per node decision (engine + policy + BatchTable, a device that does nothing):");
    println!(
        "{:<18} {:<10} {:>12} {:>12} {:>16}",
        "model",
        "policy",
        "decisions",
        "ns/decision",
        format!("of {:.2} ms", node_ns / 1e6)
    );
    for (name, rate) in [
        ("resnet50", 2000.0),
        ("gnmt", 500.0),
        ("transformer", 1000.0),
    ] {
        for p in ["lazy", "graph:25"] {
            let (decisions, ns) = common::scheduler_cost(name, rate, p);
            // relative to ResNet-50's mean node on this CPU at batch 1
            println!(
                "{:<18} {:<10} {:>12} {:>12.0} {:>15.4}%",
                name,
                p,
                decisions,
                ns,
                100.0 * ns / node_ns
            );
        }
    }
    // a merge moves request ids between two member lists; activations stay in their slots
    let m = zoo::load("resnet50").unwrap();
    let mut t = BatchTable::new(64);
    let mut finished = Vec::with_capacity(64);
    let lens = |_r: RequestId| m.ref_lengths();
    let mut merge_ns = 0u128;
    let mut merges = 0u64;
    for round in 0..20_000u32 {
        // a sub-batch of 8 preempted at node 1 and a newcomer of 8 catching up: one merge
        t.push_from(
            (0..8).map(|i| RequestId(round * 16 + i)),
            NodeStep {
                node: lazybatch::graph::NodeId(1),
                step: 0,
            },
            None,
        );
        t.push_from(
            (8..16).map(|i| RequestId(round * 16 + i)),
            NodeStep {
                node: lazybatch::graph::NodeId(0),
                step: 0,
            },
            None,
        );
        let s = Instant::now();
        merges += u64::from(t.advance(&m, lens, &mut finished).merges);
        merge_ns += s.elapsed().as_nanos();
        while !t.is_empty() {
            finished.clear();
            t.advance(&m, lens, &mut finished);
        }
    }
    println!(
        "BatchTable: merging two 8-request sub-batches (the advance that merges; activations stay in their slots): {:.0} ns per merge ({merges} merges)",
        merge_ns as f64 / merges as f64
    );
}

fn gemm_table() {
    // (label, M, N, K, B stored transposed): the zoo's GEMMs at batch 1 (convs per image over
    // channels-last pixels: M pixels, N output channels) and batch 64; `rows` is the
    // batch-invariant kernel of linear and LSTM layers (kernels::gemm_rows, weights packed
    // beforehand), `gemm crate` the `gemm` crate on the same operands (what convolutions of
    // more than 128 pixels use)
    let shapes: &[(&str, usize, usize, usize, bool)] = &[
        ("resnet conv 3x3 (layer1)", 3136, 64, 576, false),
        ("resnet conv 1x1 (layer3)", 196, 1024, 256, false),
        ("mobilenet pw1 (112x112, 32 in)", 12544, 64, 32, false),
        ("mobilenet pw2 (56x56, 64 in)", 3136, 128, 64, false),
        ("mobilenet pw7 (14x14, 512 in)", 196, 512, 512, false),
        ("resnet conv 3x3 (layer4)", 49, 512, 4608, false),
        ("resnet fc, batch 64", 64, 1000, 2048, false),
        ("gnmt lstm, batch 1", 1, 4096, 3072, false),
        ("gnmt lstm, batch 64", 64, 4096, 3072, false),
        ("transformer ffn1, 30 tokens", 30, 2048, 512, false),
        ("transformer logits, batch 1 (tied)", 1, 33708, 512, true),
        ("transformer logits, batch 64 (tied)", 64, 33708, 512, true),
        ("bert qkv, 128 tokens", 128, 2304, 768, false),
        ("bert ffn2, 128 tokens", 128, 768, 3072, false),
        ("bert ffn1, 8 x 128 tokens", 1024, 3072, 768, false),
    ];
    println!(
        "{:<36} {:>6} {:>6} {:>6} {:>10} {:>12} {:>16}",
        "GEMM", "M", "N", "K", "rows ms", "rows GFLOP/s", "gemm crate GF/s"
    );
    for &(label, m, n, k, tied) in shapes {
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let mut c = vec![0.0f32; m * n];
        let strides = if tied { (1, k) } else { (n, 1) };
        let iters = ((2e9 / (2.0 * (m * n * k) as f64)) as usize).clamp(3, 2000);
        let median = |f: &mut dyn FnMut()| {
            f();
            let mut times: Vec<f64> = (0..iters)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            times[times.len() / 2]
        };
        // the row kernel reads weights packed at prepare time, as the device does
        let packed = if tied {
            kernels::Panels::pack_transposed(&b, n, k)
        } else {
            kernels::Panels::pack(&b, k, n)
        };
        let t = median(&mut || kernels::gemm_rows(m, &a, &packed, &mut c));
        let t_crate = median(&mut || {
            kernels::gemm_strided(
                (m, n, k),
                (&a, (k, 1)),
                (&b, strides),
                (&mut c, (n, 1)),
                false,
            )
        });
        let gf = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e9;
        println!(
            "{:<36} {:>6} {:>6} {:>6} {:>10.3} {:>12.1} {:>16.1}",
            label,
            m,
            n,
            k,
            t * 1e3,
            gf(t),
            gf(t_crate)
        );
    }
}

fn resnet_latency() {
    let m = zoo::load("resnet50").unwrap();
    let mut dev = CpuDevice::new(1);
    dev.prepare(&m, 16).unwrap();
    println!("\nResNet-50 (full size) on the CPU device, whole graph:");
    println!(
        "{:>6} {:>12} {:>14}",
        "batch", "latency (ms)", "per image (ms)"
    );
    for b in [1u32, 16] {
        let best = whole_graph(&mut dev, &m, b);
        println!(
            "{:>6} {:>12.1} {:>14.2}",
            b,
            best * 1e3,
            best * 1e3 / f64::from(b)
        );
    }
}

/// The median of `rounds` passes (after one warm-up) of `model` at batch `b`, in ms: the whole
/// graph (`step` false) or one decoder step at the middle of the reference output (`step`
/// true: the decoder nodes only; caches and encoder outputs are the zeros prepare leaves, which
/// costs the same as real values). The harness `scripts/bench-vs-onnxruntime.sh` calls this.
fn pass_ms(model: &str, b: u32, rounds: usize, step: bool, by_node: bool) -> f64 {
    let m = zoo::load(model).unwrap();
    let mut dev = CpuDevice::new(1);
    dev.prepare(&m, b).unwrap();
    let len = m.ref_lengths();
    let mid = len.dec.saturating_sub(1) / 2;
    let members: Vec<lazybatch::device::Member> = (0..b)
        .map(|slot| lazybatch::device::Member {
            slot,
            len,
            input: u64::from(slot),
            step: if step { mid } else { 0 },
        })
        .collect();
    let nodes: Vec<_> = m
        .nodes
        .iter()
        .filter(|n| !step || n.class == lazybatch::graph::Class::Decoder)
        .map(|n| NodeStep {
            node: n.id,
            step: if step { mid } else { 0 },
        })
        .collect();
    let mut times = Vec::with_capacity(rounds);
    let mut per_node = vec![Vec::with_capacity(if by_node { rounds } else { 0 }); nodes.len()];
    for r in 0..=rounds {
        let t = Instant::now();
        for (k, &at) in nodes.iter().enumerate() {
            // each node timed only when asked (the pass's own time stays clock-free)
            let n = by_node.then(Instant::now);
            dev.execute(&m, at, &members).unwrap();
            if let (true, Some(n)) = (r > 0, n) {
                per_node[k].push(n.elapsed().as_secs_f64() * 1e3);
            }
        }
        if r > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    if by_node {
        // each node's median in a real pass (caches as the pass leaves them), by operator
        let mut ops: Vec<(&str, usize, f64)> = Vec::new();
        let mut each: Vec<(f64, usize)> = Vec::new();
        for (k, t) in per_node.into_iter().enumerate() {
            let op = m.node(nodes[k].node).op.kind_name();
            let t = median(t);
            each.push((t, k));
            match ops.iter_mut().find(|o| o.0 == op) {
                Some(o) => (o.1, o.2) = (o.1 + 1, o.2 + t),
                None => ops.push((op, 1, t)),
            }
        }
        ops.sort_by(|a, b| b.2.total_cmp(&a.2));
        for (op, n, t) in ops {
            eprintln!("{op:<12} {n:>4} nodes {t:>10.3} ms");
        }
        // the heaviest nodes (12, or LB_TOP_NODES), with their GEMM (M per batch x N x K,
        // groups) and its speed
        each.sort_by(|a, b| b.0.total_cmp(&a.0));
        let top = std::env::var("LB_TOP_NODES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(12);
        for &(t, k) in each.iter().take(top) {
            let node = m.node(nodes[k].node);
            let (shape, gflops) = match node.cost.gemm {
                Some(g) => {
                    // a sequence's rows each take the GEMM (BERT's 128 tokens)
                    let rows = lazybatch::device::layout::Layout::rows(node, len) as f64;
                    let flop =
                        2.0 * (g.m_per_row * g.n * g.k * g.count) as f64 * rows * f64::from(b);
                    let desc = format!("{}x{}x{} g{}", g.m_per_row, g.n, g.k, g.count);
                    (desc, format!("{:.1} GFLOP/s", flop / t / 1e6))
                }
                None => (String::new(), String::new()),
            };
            eprintln!(
                "  {:<28} {:<10} {:<22} {t:>8.3} ms {gflops}",
                node.name,
                node.op.kind_name(),
                shape
            );
        }
    }
    median(times)
}

/// The depthwise convolutions of MobileNet-v1 (3×3, the first of each size), alone with warm
/// caches: time (the best of 7 batches) and multiply-adds per second.
fn depthwise_table() {
    use lazybatch::device::cpu::aligned::Aligned;
    use lazybatch::device::cpu::hwc;
    use lazybatch::device::cpu::kernels::{ActK, Window};
    println!(
        "\nDepthwise 3x3 convolutions (MobileNet-v1's shapes, channels-last, ReLU6 epilogue):"
    );
    println!(
        "{:<22} {:>10} {:>10}",
        "input (h, w, c) / s", "us", "GMAC/s"
    );
    for (h, c, s) in [
        (112, 32, 1),
        (112, 64, 2),
        (56, 128, 1),
        (56, 128, 2),
        (28, 256, 1),
        (14, 512, 1),
        (7, 1024, 1),
    ] {
        let out = (h + 2 - 3) / s + 1;
        let win = Window {
            kernel: (3, 3),
            stride: s,
            pad: 1,
            out: (out, out),
        };
        // on cache lines, as the device's activations are
        let mut x = Aligned::zeroed(h * h * c);
        x.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = (i % 7) as f32 * 0.1);
        let wt: Vec<f32> = (0..9 * c).map(|i| (i % 5) as f32 * 0.1).collect();
        let shift = vec![0.1f32; c];
        let mut y = Aligned::zeroed(out * out * c);
        let run = |y: &mut [f32]| hwc::depthwise(&x, (h, h, c), &wt, win, (&shift, ActK::Relu6), y);
        run(&mut y);
        // the best of 7 batches of 20 (this VM's neighbours make single timings wander)
        let reps = 20;
        let us = (0..7)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    run(&mut y);
                }
                t.elapsed().as_secs_f64() * 1e6 / reps as f64
            })
            .fold(f64::INFINITY, f64::min);
        let macs = (out * out * c * 9) as f64;
        println!(
            "{:<22} {:>10.1} {:>10.2}",
            format!("{h}x{h}x{c} / {s}"),
            us,
            macs / us / 1e3
        );
    }
}

/// What splitting work in two costs: from a thread outside rayon's pool (every fork a job sent
/// into the pool, the caller asleep until it is done), from one of its threads, and with the
/// CPU device's team (`device::cpu::team`: helpers that spin for the next job): `work` µs on
/// each side after `gap` µs alone, the time above the ideal `gap + work`, against running both
/// sides on one thread (`work` above it). Medians of 9 batches of 300.
fn fork_join_table() {
    fn spin(us: f64) {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() * 1e6 < us {
            std::hint::spin_loop();
        }
    }
    /// Runs one side of the work on each of two threads.
    type Split<'a> = &'a dyn Fn(&(dyn Fn() + Sync));
    /// `split` runs both sides; None: one after the other here.
    fn overhead(gap: f64, work: f64, split: Option<Split>) -> f64 {
        let reps = 300;
        let side = || spin(work);
        let mut batches: Vec<f64> = (0..9)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    spin(gap);
                    match split {
                        Some(split) => split(&side),
                        None => {
                            side();
                            side();
                        }
                    }
                }
                t.elapsed().as_secs_f64() * 1e6 / reps as f64 - gap - work
            })
            .collect();
        batches.sort_by(f64::total_cmp);
        batches[batches.len() / 2]
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(rayon::current_num_threads())
        .build()
        .expect("a thread pool");
    println!(
        "\nFork and join ({} threads): microseconds above the ideal, each side 20 us of work",
        pool.current_num_threads()
    );
    println!(
        "{:<12} {:>12} {:>14} {:>14} {:>12}",
        "alone before", "one thread", "rayon outside", "rayon inside", "team"
    );
    let team = lazybatch::device::cpu::team::team();
    for gap in [5.0, 50.0, 200.0] {
        let serial = overhead(gap, 20.0, None);
        let outside = overhead(
            gap,
            20.0,
            Some(&|f| {
                pool.join(f, f);
            }),
        );
        let inside = pool.install(|| {
            overhead(
                gap,
                20.0,
                Some(&|f| {
                    rayon::join(f, f);
                }),
            )
        });
        let ours = overhead(gap, 20.0, Some(&|f| team.run(2, &|_| f())));
        println!(
            "{:<12} {serial:>12.1} {outside:>14.1} {inside:>14.1} {ours:>12.1}",
            format!("{gap} us")
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `whole MODEL BATCH ROUNDS` / `step MODEL BATCH ROUNDS`: one number, for the harness;
    // `whole-nodes` / `step-nodes`: also the time by operator on stderr
    if let (
        Some(mode @ ("whole" | "step" | "whole-nodes" | "step-nodes")),
        Some(model),
        Some(b),
        Some(r),
    ) = (
        args.get(1).map(String::as_str),
        args.get(2),
        args.get(3).and_then(|x| x.parse::<u32>().ok()),
        args.get(4).and_then(|x| x.parse::<usize>().ok()),
    ) {
        let (step, by_node) = (mode.starts_with("step"), mode.ends_with("nodes"));
        println!("{:.4}", pass_ms(model, b, r.max(1), step, by_node));
        return;
    }
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    if only.as_deref().is_none_or(|o| o == "gemm") {
        gemm_table();
    }
    if only.as_deref().is_none_or(|o| o == "depthwise") {
        depthwise_table();
    }
    if only.as_deref().is_none_or(|o| o == "fork-join") {
        fork_join_table();
    }
    if only.as_deref().is_none_or(|o| o == "scheduler") {
        scheduler_overhead();
    }
    if only.as_deref().is_none_or(|o| o == "resnet") {
        resnet_latency();
    }
}
