//! Node timings derived by hand from the module's formulas, for a node of each kind the
//! model distinguishes: a GEMM with its epilogue (weight- and output-stationary, fill and
//! drain overlapped or not, activations in SRAM or streamed, memory- or compute-bound), a
//! decoder step's attention on the vector unit (dot-product and additive) and a whole
//! sequence's on the array.

use super::*;
use crate::graph::op::AttnCost;
use crate::graph::{zoo, Gemm};

fn find(model: &Model, name: &str) -> NodeId {
    model.nodes.iter().find(|n| n.name == name).unwrap().id
}

fn work(batch: u32, rows: u64, pairs: u64, max_keys: u64) -> Work {
    Work {
        batch,
        rows,
        pairs,
        max_keys,
    }
}

fn timing(ns: u64, compute: u64, memory: u64) -> Timing {
    Timing {
        time: Nanos(ns),
        compute_cycles: compute,
        memory_cycles: memory,
    }
}

fn npu(cfg: NpuConfig) -> Npu {
    Npu::new(cfg).unwrap()
}

#[test]
fn a_gemm_nodes_time_is_its_array_or_its_memory_plus_one_dram_latency() {
    let m = zoo::load("resnet50").unwrap();
    let fc = find(&m, "fc");
    // 2048 → 1000 with a bias: 2,049,000 int8 weights, 1,000 bias adds a row
    let c = &m.node(fc).cost;
    assert_eq!(
        (c.gemm, c.weight_elems, c.vec_simple_per_row),
        (
            Some(Gemm {
                m_per_row: 1,
                n: 1000,
                k: 2048,
                count: 1
            }),
            2_049_000,
            1000
        )
    );
    assert_eq!((c.in_elems_per_row, c.out_elems_per_row), (2048, 1000));
    let d = npu(NpuConfig::default());
    // batch 4, Table I: 16·8 folds of max(4, 128) cycles, one load (128) and one drain
    // (254): 16,766 cycles; the bias (4,000 adds on 128 lanes, 32 cycles) overlaps. The
    // weights stream from all 8 channels at 360 GB/s / 700 MHz: ⌈2,049,000 / 514.29⌉ =
    // 3,985 cycles. Time: (16,766 + 100) / 0.7 GHz, rounded up
    assert_eq!(
        d.timing(&m, fc, &work(4, 4, 0, 0)),
        timing(24_095, 16_766, 3_985)
    );
    // at 7 GB/s (10 bytes a cycle) the weights take 204,900 cycles: memory-bound
    let slow = npu(NpuConfig {
        dram_gbps: 7.0,
        ..NpuConfig::default()
    });
    assert_eq!(
        slow.timing(&m, fc, &work(1, 1, 0, 0)),
        timing(292_858, 16_766, 204_900)
    );
    // SCALE-Sim's folds (no overlap), weights filled at 64 bytes a cycle (256 cycles a
    // fold), 1 GHz, 512 bytes a DRAM cycle and a 1 KiB activation SRAM: 128 folds of
    // 256 + 128 + 128 + 4 − 2 = 514 cycles; the inputs (8,192 bytes) stream once per column
    // fold (8) and the outputs (4,000) once: ⌈(2,049,000 + 65,536 + 4,000) / 512⌉ = 4,138
    let fill = NpuConfig {
        freq_mhz: 1000.0,
        dram_gbps: 512.0,
        act_sram_kib: 1,
        weight_fill_gbps: 64.0,
        overlap_weight_load: false,
        ..NpuConfig::default()
    };
    assert_eq!(npu(fill.clone()).weight_load_cycles(), 256);
    // a fold is rows × cols elements of `bytes_per_element` each; a rate too fast for a
    // cycle still takes one; none given, one PE row a cycle
    let load = |cfg: NpuConfig| npu(cfg).weight_load_cycles();
    let two_bytes = NpuConfig {
        bytes_per_element: 2,
        ..fill.clone()
    };
    assert_eq!(load(two_bytes), 512);
    let rows = NpuConfig {
        rows: 64,
        ..fill.clone()
    };
    assert_eq!(load(rows.clone()), 128);
    let fast = NpuConfig {
        weight_fill_gbps: 1e6,
        ..fill.clone()
    };
    assert_eq!(load(fast), 1);
    let row_a_cycle = NpuConfig {
        weight_fill_gbps: 0.0,
        ..rows
    };
    assert_eq!(load(row_a_cycle), 64);
    assert_eq!(
        npu(fill).timing(&m, fc, &work(4, 4, 0, 0)),
        timing(65_892, 65_792, 4_138)
    );
}

#[test]
fn activations_stream_only_when_they_exceed_the_activation_sram() {
    let m = zoo::load("resnet50").unwrap();
    let fc = find(&m, "fc");
    // batch 128: (2048 + 1000) · 128 = 390,144 bytes = 381 KiB exactly
    let at = |kib: u64| {
        npu(NpuConfig {
            act_sram_kib: kib,
            ..NpuConfig::default()
        })
        .timing(&m, fc, &work(128, 128, 0, 0))
        .memory_cycles
    };
    // fits: the weights alone, ⌈2,049,000 / 514.29⌉; one KiB less: the inputs 8 times
    // (one per column fold) and the outputs once, ⌈(2,049,000 + 2,097,152 + 128,000) /
    // 514.29⌉
    assert_eq!(at(381), 3_985);
    assert_eq!(at(380), 8_311);
    // at two bytes an element every byte count doubles: 762 KiB exactly fits, and the
    // weights alone take ⌈4,098,000 / 514.29⌉; one KiB less streams the inputs 8 times
    // and the outputs once, ⌈(4,098,000 + 4,194,304 + 256,000) / 514.29⌉
    let wide = |kib: u64| {
        npu(NpuConfig {
            act_sram_kib: kib,
            bytes_per_element: 2,
            ..NpuConfig::default()
        })
        .timing(&m, fc, &work(128, 128, 0, 0))
        .memory_cycles
    };
    assert_eq!((wide(762), wide(761)), (7_969, 16_622));
}

#[test]
fn output_stationary_weights_stream_once_per_row_fold_when_the_weight_sram_is_short() {
    let m = zoo::load("resnet50").unwrap();
    let fc = find(&m, "fc");
    let os = |weight_sram_kib: u64| {
        npu(NpuConfig {
            dataflow: Dataflow::Os,
            weight_sram_kib,
            ..NpuConfig::default()
        })
    };
    // batch 200: ⌈200/128⌉·⌈1000/128⌉ = 16 folds of 256 + 128 + 2048 − 2 = 2,430 cycles;
    // 2,049,000 weight bytes exceed a 1 KiB weight SRAM, so they stream for each of the
    // two row folds: ⌈4,098,000 / 514.29⌉ = 7,969 cycles
    assert_eq!(
        os(1).timing(&m, fc, &work(200, 200, 0, 0)),
        timing(55_686, 38_880, 7_969)
    );
    // 128 requests are one row fold: the weights stream once, short SRAM or not
    assert_eq!(
        os(1).timing(&m, fc, &work(128, 128, 0, 0)).memory_cycles,
        3_985
    );
    // with a weight SRAM of 2,049,000 bytes or more they stream once
    assert_eq!(
        os(2001).timing(&m, fc, &work(200, 200, 0, 0)).memory_cycles,
        3_985
    );
    // weights exactly the SRAM's size fit: the Transformer's 512 × 512 output projection
    // (no bias) is 262,144 bytes, 256 KiB; over 2 row folds, ⌈262,144 / 514.29⌉ = 510
    // cycles once, 1,020 twice
    let t = zoo::load("transformer_base").unwrap();
    let out = find(&t, "enc0.out");
    assert_eq!(t.node(out).cost.weight_elems, 512 * 512);
    let at = |kib: u64| os(kib).timing(&t, out, &work(200, 200, 0, 0)).memory_cycles;
    assert_eq!((at(256), at(255)), (510, 1_020));
}

#[test]
fn a_decoder_steps_attention_runs_on_the_vector_unit() {
    let t = zoo::load("transformer_base").unwrap();
    let id = find(&t, "dec0.self_attn");
    let node = t.node(id);
    assert!(matches!(node.keys, Keys::Cache));
    assert_eq!(
        node.cost.attn,
        Some(AttnCost {
            heads: 8,
            d: 512,
            dv: 512,
            additive: false,
            kv_elems_per_key: 1024
        })
    );
    // 2 requests, 20 (query, key) pairs: 20 · 1024 multiply-adds and 3 · 8 · 20 softmax
    // operations, 8 · 20 exponentials at 4 cycles each, on 128 lanes: ⌈21,600 / 128⌉ =
    // 169 cycles; the cache (24,576 bytes with the rows) stays in SRAM and no weights
    // move, so no DRAM latency either
    let d = npu(NpuConfig::default());
    assert_eq!(d.timing(&t, id, &work(2, 2, 20, 10)), timing(242, 169, 0));

    // GNMT's additive attention adds tanh(keys + q)·v per pair and feature
    let g = zoo::load("gnmt").unwrap();
    let id = find(&g, "attn");
    let node = g.node(id);
    assert!(matches!(node.keys, Keys::Seq(_)) && node.loop_id.is_some());
    assert_eq!(
        node.cost.attn,
        Some(AttnCost {
            heads: 1,
            d: 1024,
            dv: 1024,
            additive: true,
            kv_elems_per_key: 2048
        })
    );
    // 20 pairs: 20 · 2048 + 3 · 20 + 2 · 20 · 1024 simple operations and 20 + 20 · 1024
    // transcendentals (×4): ⌈163,980 / 128⌉ = 1,282 cycles; its 2,049 weights (v, b, g)
    // take ⌈2,049 / 514.29⌉ = 4 DRAM cycles, hidden, and the latency (100) is exposed
    assert_eq!(
        d.timing(&g, id, &work(2, 2, 20, 10)),
        timing(1_975, 1_282, 4)
    );
}

#[test]
fn a_whole_sequences_attention_runs_on_the_array_in_folds_of_each_head() {
    let t = zoo::load("transformer_base").unwrap();
    let id = find(&t, "enc0.attn");
    assert!(t.node(id).loop_id.is_none());
    // a 64 × 128 array (rows ≠ columns, so that each is checked where it is used); two
    // requests of 200 positions: per head (64 wide), scores in ⌈64/64⌉·⌈200/128⌉ = 2 folds
    // and context in ⌈200/64⌉·⌈64/128⌉ = 4, each filling (2·64 + 128 − 2 = 254 cycles)
    // per request and streaming the 400 rows: 8 · 6 · (2 · 254 + 400) = 43,584 cycles; the
    // softmax (3 + 4·1 operations per pair and head, 80,000 pairs, 8 heads) on the vector
    // unit: 4,480,000 / 128 = 35,000
    let d = npu(NpuConfig {
        rows: 64,
        ..NpuConfig::default()
    });
    assert_eq!(
        d.timing(&t, id, &work(2, 400, 80_000, 200)),
        timing(112_263, 78_584, 0)
    );
    // on 64 × 32, a head's 64 features span two columns: scores in ⌈64/64⌉·⌈200/32⌉ = 7
    // folds, context in ⌈200/64⌉·⌈64/32⌉ = 8, each filling 2·64 + 32 − 2 = 158 cycles:
    // 8 · 15 · (2 · 158 + 400) = 85,920, and the same softmax
    let narrow = npu(NpuConfig {
        rows: 64,
        cols: 32,
        ..NpuConfig::default()
    });
    assert_eq!(
        narrow.timing(&t, id, &work(2, 400, 80_000, 200)),
        timing(172_743, 120_920, 0)
    );
}

/// `count` GEMMs run `count` times the folds of one, in each dataflow, on a square and a
/// non-square array (so that rows and columns are each checked where they are used).
#[test]
fn a_gemm_counted_several_times_runs_each_ones_folds() {
    let cfg = |rows, dataflow, overlap_weight_load| {
        npu(NpuConfig {
            rows,
            dataflow,
            overlap_weight_load,
            ..NpuConfig::default()
        })
    };
    // 3 GEMMs of 10×300 · 300×256; on 128×128: ⌈300/128⌉·⌈256/128⌉ = 6 folds each
    let (m, n, k) = (10, 256, 300);
    // overlapped: one load (128), 18 folds of max(10, 128), one drain (254)
    let ws = cfg(128, Dataflow::Ws, true);
    assert_eq!(ws.gemm_cycles(m, n, k, 3), 128 + 18 * 128 + 254);
    assert_eq!(ws.gemm_cycles(200, n, k, 3), 128 + 18 * 200 + 254);
    // not overlapped: 18 folds of 2·128 + 128 + 10 − 2
    let ws = cfg(128, Dataflow::Ws, false);
    assert_eq!(ws.gemm_cycles(m, n, k, 3), 18 * 392);
    // output-stationary: ⌈10/128⌉·⌈256/128⌉ = 2 folds each, of 2·128 + 128 + 300 − 2
    let os = cfg(128, Dataflow::Os, false);
    assert_eq!(os.gemm_cycles(m, n, k, 3), 6 * 682);
    // on 64 rows × 128 columns: ⌈300/64⌉·⌈256/128⌉ = 10 folds each, a load of 64, a
    // drain of 64 + 128 − 2
    let ws = cfg(64, Dataflow::Ws, true);
    assert_eq!(ws.gemm_cycles(m, n, k, 3), 64 + 30 * 64 + 190);
    let ws = cfg(64, Dataflow::Ws, false);
    assert_eq!(ws.gemm_cycles(m, n, k, 3), 30 * (2 * 64 + 128 + 10 - 2));
    let os = cfg(64, Dataflow::Os, false);
    assert_eq!(os.gemm_cycles(m, n, k, 3), 6 * (2 * 64 + 128 + 300 - 2));
    // an empty GEMM (any dimension, or the count, zero) takes no cycles in every mode,
    // not one exposed load and drain (overlapped) or folds of an empty sum (OS)
    for (rows, flow, overlap) in [
        (128, Dataflow::Ws, true),
        (128, Dataflow::Ws, false),
        (64, Dataflow::Os, false),
    ] {
        let d = cfg(rows, flow, overlap);
        for (m, n, k, c) in [(0, 9, 9, 1), (9, 0, 9, 1), (9, 9, 0, 1), (9, 9, 9, 0)] {
            let what = format!("{m}x{k}·{k}x{n} ×{c} in {flow:?}, overlap {overlap}");
            assert_eq!(d.gemm_cycles(m, n, k, c), 0, "{what}");
        }
    }
}

/// Nodes without a GEMM: a depthwise convolution's multiply-adds on the vector unit with
/// its epilogue, and an embedding's rows gathered from DRAM.
#[test]
fn depthwise_convolutions_run_on_the_vector_unit_and_embeddings_gather_from_dram() {
    let d = npu(NpuConfig::default());
    // MobileNet's first depthwise 3×3 over 32 channels of 112×112: 3,612,672 multiply-adds
    // and 1,204,224 epilogue operations a request (batch-norm and ReLU6, three an output)
    let mb = zoo::load("mobilenet_v1").unwrap();
    let dw = find(&mb, "dw1");
    let c = &mb.node(dw).cost;
    assert_eq!(c.gemm, None);
    assert_eq!(
        (c.vec_macs_per_row, c.vec_simple_per_row, c.weight_elems),
        (112 * 112 * 32 * 9, 112 * 112 * 32 * 3, 352)
    );
    // two requests: (3,612,672 + 1,204,224) · 2 / 128 lanes = 75,264 cycles; activations
    // in SRAM (1,568 KiB), the 352 weight bytes over 2 channels (128.6 B a cycle): 3
    // cycles; (75,264 + 100) / 0.7 GHz
    assert_eq!(
        d.timing(&mb, dw, &work(2, 2, 0, 0)),
        timing(107_663, 75_264, 3)
    );
    // GNMT's source embedding: no weights streamed, 1,024 bytes gathered a word; two
    // sentences of 20 words: 40,960 bytes over all 8 channels (514.3 B a cycle), 80
    // cycles, + 100: 258 ns
    let g = zoo::load("gnmt").unwrap();
    let e = find(&g, "src_emb");
    let c = &g.node(e).cost;
    assert_eq!((c.weight_elems, c.gather_elems_per_row), (0, 1024));
    assert_eq!(d.timing(&g, e, &work(2, 40, 0, 0)), timing(258, 0, 80));
    // at two bytes an element, twice the bytes: 160 cycles, 372 ns
    let wide = npu(NpuConfig {
        bytes_per_element: 2,
        ..NpuConfig::default()
    });
    assert_eq!(wide.timing(&g, e, &work(2, 40, 0, 0)), timing(372, 0, 160));
}

/// A layer norm: its element operations and one reciprocal square root a row, which costs
/// `vector_transcendental_cycles` lanes' operations.
#[test]
fn a_layer_norms_transcendentals_cost_their_lane_cycles_for_each_row() {
    let t = zoo::load("transformer_base").unwrap();
    let ln = find(&t, "enc0.ln1");
    let c = &t.node(ln).cost;
    assert_eq!(
        (c.vec_simple_per_row, c.vec_transc_per_row, c.weight_elems),
        (5 * 512, 1, 1024)
    );
    // 128 rows: (2,560 · 128 + 4 · 128) / 128 lanes = 2,564 cycles; the 1,024 bytes of
    // scale and shift over 4 channels: 4 cycles; (2,564 + 100) / 0.7 GHz
    let d = npu(NpuConfig::default());
    assert_eq!(
        d.timing(&t, ln, &work(2, 128, 0, 0)),
        timing(3_806, 2_564, 4)
    );
}

/// The time of a run of memoized nodes: the sum of each node's own timing at that batch
/// (computed here, not read from the memo), as many nodes as asked or as the run of
/// batch-size-only nodes from `from` holds, and with a budget the fewest nodes that spend
/// it. GNMT mixes batch-size-only nodes with length-dependent ones, where a run ends.
#[test]
fn a_run_of_memoized_nodes_is_timed_at_once_up_to_its_budget() {
    let m = zoo::load("gnmt").unwrap();
    let mut d = npu(NpuConfig::default());
    assert!(d.prepare(&m, 0).is_err(), "a max batch of 0");
    d.prepare(&m, 3).unwrap();
    let len = m.ref_lengths();
    let time = |i: usize, b: u32| {
        let id = m.nodes[i].id;
        let at = NodeStep { node: id, step: 0 };
        d.timing(&m, id, &m.work_uniform(at, len, b)).time.0
    };
    let free: Vec<bool> = m
        .nodes
        .iter()
        .map(|n| m.node_is_length_free(n.id))
        .collect();
    assert!(free.contains(&true) && free.contains(&false));
    let mut longest = 0;
    for (i, node) in m.nodes.iter().enumerate() {
        let from = node.id;
        // the run of memoized nodes starting at i
        let k = free[i..].iter().take_while(|f| **f).count();
        longest = longest.max(k);
        for b in 1..=3usize {
            let run =
                |max: u32, budget: Option<u64>| d.time_run(&m, from, b, max, budget.map(Nanos));
            if k == 0 {
                assert_eq!(run(u32::MAX, None), None, "{} length-dependent", node.name);
                continue;
            }
            let times: Vec<u64> = (i..i + k).map(|j| time(j, b as u32)).collect();
            let sum = |c: usize| times[..c].iter().sum::<u64>();
            let nodes = |c: usize| Some((c as u32, Nanos(sum(c))));
            assert_eq!(run(0, None), None, "{} no node", node.name);
            for max in [1, 2, k as u32, k as u32 + 1, u32::MAX] {
                let c = (max as usize).min(k);
                assert_eq!(
                    run(max, None),
                    nodes(c),
                    "{} at {b}, {max} nodes",
                    node.name
                );
            }
            // a budget: the run stops at the first node whose end spends it
            let spends = |budget: u64| (1..=k).find(|&c| sum(c) >= budget).unwrap_or(k);
            for c in 1..=k {
                for budget in [sum(c).saturating_sub(1), sum(c), sum(c) + 1] {
                    let want = nodes(spends(budget));
                    assert_eq!(
                        run(u32::MAX, Some(budget)),
                        want,
                        "{} {budget} ns",
                        node.name
                    );
                }
            }
            assert_eq!(run(u32::MAX, Some(0)), nodes(1), "{} no budget", node.name);
            assert_eq!(run(1, Some(u64::MAX)), nodes(1), "{} one node", node.name);
            assert_eq!(run(u32::MAX, Some(u64::MAX)), nodes(k), "{}", node.name);
        }
        // batches the memo does not hold
        assert_eq!(d.time_run(&m, from, 0, u32::MAX, None), None);
        assert_eq!(d.time_run(&m, from, 4, u32::MAX, None), None);
    }
    assert!(longest > 2, "GNMT's longest run is {longest} nodes");
    // a memoized node executed uniformly reads its own batch's entry
    let member = Member {
        slot: 0,
        len,
        input: 0,
        step: 0,
    };
    for node in m.nodes.iter().filter(|n| m.node_is_length_free(n.id)) {
        let at = NodeStep {
            node: node.id,
            step: 0,
        };
        for b in 1..=3u32 {
            let want = d.timing(&m, node.id, &m.work_uniform(at, len, b));
            let got = d.execute_uniform(&m, at, member, b).unwrap();
            assert_eq!(got, want, "{} at {b}", node.name);
            let members = vec![member; b as usize];
            let got = d.execute(&m, at, &members).unwrap();
            assert_eq!(got, want, "{} executing {b}", node.name);
        }
    }
    // a copy under another name is another model: its runs are not the memo's; the same
    // node list renamed still is
    let start = m.nodes[free.iter().position(|f| *f).unwrap()].id;
    let mut other = m.clone();
    other.name = "another".into();
    assert_eq!(d.time_run(&other, start, 1, u32::MAX, None), None);
    let mut renamed = m;
    renamed.name = "renamed".into();
    assert!(d.time_run(&renamed, start, 1, u32::MAX, None).is_some());
    // and no sub-batch is empty
    let at = NodeStep {
        node: start,
        step: 0,
    };
    assert!(d.execute_uniform(&renamed, at, member, 0).is_err());
    assert!(d.execute(&renamed, at, &[]).is_err());
}

#[test]
fn dram_transfers_spread_over_the_channels_they_touch() {
    let d = npu(NpuConfig::default());
    // 514.29 bytes a cycle over 8 channels interleaved at 256 bytes: 300 bytes touch two
    // (128.57 a cycle, 3 cycles), 2,048 all eight (4 cycles), one byte one (1 cycle)
    let cycles = [0, 1, 300, 2048].map(|b| d.dram_cycles(b));
    assert_eq!(cycles, [0, 1, 3, 4]);
    // cycles to time: 700 cycles are a microsecond; 1 cycle rounds up to 2 ns
    assert_eq!(
        [0, 1, 700].map(|c| d.cycles_to_ns(c)),
        [Nanos(0), Nanos(2), Nanos(1000)]
    );
    // transcendentals cost 4 lanes' operations: (100 + 10 · 4) / 128, rounded up
    assert_eq!(d.vector_cycles(100, 10), 2);
    assert_eq!(d.vector_cycles(128, 0), 1);
}
