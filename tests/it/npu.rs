//! The NPU model: golden cycle counts from SCALE-Sim's formulas, the batching curve's shape, and
//! configuration errors.

use lazybatch::device::npu::{Dataflow, Npu, NpuConfig};
use lazybatch::device::{Device, Member};
use lazybatch::graph::{zoo, Lengths, NodeStep};
use lazybatch::profile::Profile;
use std::path::Path;

fn scalesim() -> Npu {
    Npu::new(NpuConfig {
        overlap_weight_load: false,
        ..NpuConfig::default()
    })
    .unwrap()
}

#[test]
fn weight_stationary_golden_cycles() {
    let npu = scalesim();
    // folds = ceil(K/128)·ceil(N/128), each 2·128 + 128 + M − 2 cycles (hand-computed)
    assert_eq!(
        npu.gemm_cycles(12544, 64, 147, 1),
        2 * (256 + 128 + 12544 - 2)
    ); // resnet conv1
    assert_eq!(npu.gemm_cycles(49, 512, 4608, 1), 144 * 431); // layer4 3x3
    assert_eq!(npu.gemm_cycles(1, 1000, 2048, 1), 128 * 383); // fc
    assert_eq!(npu.gemm_cycles(128, 128, 128, 1), 510);
    assert_eq!(npu.gemm_cycles(129, 129, 129, 1), 4 * 511);
    // an empty GEMM (any dimension, or the count, zero) takes no cycles
    for (m, n, k, c) in [(0, 9, 9, 1), (9, 0, 9, 1), (9, 9, 0, 1), (9, 9, 9, 0)] {
        assert_eq!(npu.gemm_cycles(m, n, k, c), 0, "{m}x{k}·{k}x{n} ×{c}");
    }
}

#[test]
fn output_stationary_and_overlap_golden_cycles() {
    let os = Npu::new(NpuConfig {
        dataflow: Dataflow::Os,
        overlap_weight_load: false,
        ..NpuConfig::default()
    })
    .unwrap();
    // folds = ceil(M/128)·ceil(N/128), each 2·128 + 128 + K − 2
    assert_eq!(
        os.gemm_cycles(196, 256, 2304, 1),
        4 * (256 + 128 + 2304 - 2)
    );
    let ov = Npu::new(NpuConfig::default()).unwrap();
    // one exposed load (128), folds × max(M, 128), one drain (128 + 128 − 2)
    assert_eq!(ov.gemm_cycles(1, 4096, 3072, 1), 128 + 768 * 128 + 254);
    assert_eq!(ov.gemm_cycles(3136, 64, 576, 1), 128 + 5 * 3136 + 254);
}

/// (M, N, K) of every ResNet-50 conv and the FC, from shared/reference/models.md's table.
const RESNET_GEMMS: &[(u64, u64, u64)] = &[
    (12544, 64, 147),
    (3136, 64, 64),
    (3136, 64, 576),
    (3136, 256, 64),
    (3136, 256, 64),
    (3136, 64, 256),
    (3136, 64, 576),
    (3136, 256, 64),
    (3136, 64, 256),
    (3136, 64, 576),
    (3136, 256, 64),
    (3136, 128, 256),
    (784, 128, 1152),
    (784, 512, 128),
    (784, 512, 256),
    (784, 128, 512),
    (784, 128, 1152),
    (784, 512, 128),
    (784, 128, 512),
    (784, 128, 1152),
    (784, 512, 128),
    (784, 128, 512),
    (784, 128, 1152),
    (784, 512, 128),
    (784, 256, 512),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 1024, 512),
    (196, 256, 1024),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 256, 1024),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 256, 1024),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 256, 1024),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 256, 1024),
    (196, 256, 2304),
    (196, 1024, 256),
    (196, 512, 1024),
    (49, 512, 4608),
    (49, 2048, 512),
    (49, 2048, 1024),
    (49, 512, 2048),
    (49, 512, 4608),
    (49, 2048, 512),
    (49, 512, 2048),
    (49, 512, 4608),
    (49, 2048, 512),
    (1, 1000, 2048),
];

#[test]
fn resnet50_array_cycles_equal_scalesim_over_the_reference_gemms() {
    let npu = scalesim();
    let m = zoo::load("resnet50").unwrap();
    for batch in [1u64, 16] {
        let expect: u64 = RESNET_GEMMS
            .iter()
            .map(|&(mm, n, k)| npu.gemm_cycles(mm * batch, n, k, 1))
            .sum();
        let got: u64 = m
            .nodes
            .iter()
            .filter_map(|n| n.cost.gemm)
            .map(|g| npu.gemm_cycles(g.m_per_row * batch, g.n, g.k, g.count))
            .sum();
        assert_eq!(got, expect, "batch {batch}");
    }
}

fn curve(model: &str, npu: Npu) -> Vec<f64> {
    let m = zoo::load(model).unwrap();
    let mut d = npu;
    let p = Profile::measure(&mut d, &m, 64, m.ref_lengths()).unwrap();
    lazybatch::runtime::Predictor::new(&m, &p, m.ref_lengths().dec)
        .batch_curve(m.ref_lengths())
        .iter()
        .map(|c| c.2)
        .collect()
}

#[test]
fn resnet50_throughput_rises_then_saturates() {
    for npu in [scalesim(), Npu::new(NpuConfig::default()).unwrap()] {
        let tp = curve("resnet50", npu);
        assert!(
            tp[1] > 1.15 * tp[0],
            "batch 2 should beat batch 1: {:?}",
            &tp[..2]
        );
        assert!(
            tp[63] < 1.10 * tp[15],
            "no big gain past 16: {} vs {}",
            tp[63],
            tp[15]
        );
        assert!(
            tp.windows(2).all(|w| w[1] >= w[0] * 0.999),
            "throughput never falls"
        );
    }
}

#[test]
fn decoder_steps_are_weight_bound_at_small_batch() {
    let m = zoo::load("gnmt").unwrap();
    let mut npu = Npu::new(NpuConfig::default()).unwrap();
    npu.prepare(&m, 64).unwrap();
    let dec0 = m.find("dec0").unwrap().id;
    let len = m.ref_lengths();
    let at = NodeStep {
        node: dec0,
        step: 3,
    };
    let mut t = |b: u32| {
        let mem: Vec<Member> = (0..b)
            .map(|slot| Member {
                slot,
                len,
                input: u64::from(slot),
                step: at.step,
            })
            .collect();
        npu.execute(&m, at, &mem).unwrap().time.0 as f64
    };
    assert!(
        t(16) < 1.05 * t(1),
        "a decoder LSTM step costs about the same at batch 16 as at 1"
    );
    assert!(
        t(1) > 1e3,
        "a 12.6 M-weight step takes more than a microsecond"
    );
}

#[test]
fn profiles_are_deterministic_and_lookups_match_execute() {
    // every (node, batch) entry of the table is what a fresh device's `execute` returns for
    // that node with that many distinct members (decoder nodes at their middle step), so the
    // profile's O(1) uniform timing and the engine's execution agree
    for name in ["transformer", "gnmt", "resnet50"] {
        let m = zoo::load(name).unwrap();
        let len = Lengths { enc: 20, dec: 9 };
        let mut a = Npu::new(NpuConfig::default()).unwrap();
        let p1 = Profile::measure(&mut a, &m, 8, len).unwrap();
        let p2 = Profile::measure(&mut a, &m, 8, len).unwrap();
        assert_eq!(p1, p2, "{name}");
        let mut fresh = Npu::new(NpuConfig::default()).unwrap();
        fresh.prepare(&m, 8).unwrap();
        for n in &m.nodes {
            let step = if n.class == lazybatch::graph::Class::Decoder {
                4
            } else {
                0
            };
            let at = NodeStep { node: n.id, step };
            for b in [1u32, 2, 5, 8] {
                let members: Vec<Member> = (0..b)
                    .map(|slot| Member {
                        slot,
                        len,
                        input: u64::from(slot),
                        step,
                    })
                    .collect();
                let ran = fresh.execute(&m, at, &members).unwrap().time;
                assert_eq!(p1.latency(n.id, b), ran, "{name} {} at batch {b}", n.name);
            }
        }
        // Algorithm 1 over the table: the whole graph alone is the sum of its lookups
        let algorithm1 = lazybatch::runtime::Predictor::new(&m, &p1, len.dec);
        let alone = algorithm1.single_input(len);
        assert!(alone < algorithm1.graph_latency(8, len), "{name}");
    }
}

#[test]
fn npu_config_round_trips_and_rejects_unknown_keys() {
    let d = NpuConfig::default();
    let text = lazybatch::device::npu::config::NpuConfig::named_text("default").unwrap();
    assert_eq!(NpuConfig::from_toml(text, Path::new("x.toml")).unwrap(), d);
    let e = NpuConfig::from_toml(
        "base = \"default\"\nrows = 64\ncolumns = 9\n",
        Path::new("c.toml"),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("c.toml:3:"), "{e}");
    assert!(NpuConfig::from_toml("base = \"default\"\nrows = 0\n", Path::new("c.toml")).is_err());
    assert_eq!(
        NpuConfig::from_toml("base = \"default\"\nrows = 64\n", Path::new("c.toml"))
            .unwrap()
            .rows,
        64
    );
}

#[test]
fn the_readme_calibration_table_is_what_calibrate_prints() {
    // the README's Table II comparison is regenerated by `lazybatch calibrate`: every row of
    // it must be in the README as printed, under both shipped configurations
    use lazybatch::report::calibration::calibrate;
    let cfgs: Vec<(String, NpuConfig)> = ["default", "paper"]
        .iter()
        .map(|n| (n.to_string(), NpuConfig::resolve(n).unwrap()))
        .collect();
    let table = calibrate(&cfgs).unwrap().markdown();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for line in table.lines() {
        assert!(
            readme.contains(line),
            "README lacks the calibration row\n{line}\n(rerun `lazybatch calibrate`)"
        );
    }
    // and the paper configuration's Table II figures are the ones the README states
    assert!(readme.contains("| GNMT | WMT 2019 mean | 7.2 | 31.980 (4.44×) | 8.133 (1.13×) |"));
}

#[test]
fn a_device_prepared_for_one_model_times_another_as_a_fresh_one_does() {
    // the NPU model memoizes each node's time for the model it was prepared for; a copy used
    // on another model (a bench's clone, a co-located part) must not read the first model's
    // table, and on its own model the memo must be what computing gives
    let (a, b) = (zoo::load("resnet50").unwrap(), zoo::load("gnmt").unwrap());
    let mut used = Npu::new(NpuConfig::default()).unwrap();
    used.prepare(&a, 8).unwrap();
    let mut fresh = Npu::new(NpuConfig::default()).unwrap();
    let mut mine = Npu::new(NpuConfig::default()).unwrap();
    mine.prepare(&b, 8).unwrap();
    let len = b.ref_lengths();
    for (k, node) in b.nodes.iter().enumerate() {
        for batch in [1u32, 3, 8] {
            let at = NodeStep {
                node: node.id,
                step: 0,
            };
            let members: Vec<Member> = (0..batch)
                .map(|slot| Member {
                    slot,
                    len,
                    input: u64::from(slot),
                    step: 0,
                })
                .collect();
            let want = fresh.execute(&b, at, &members).unwrap().time;
            assert_eq!(
                used.execute(&b, at, &members).unwrap().time,
                want,
                "node {k} at {batch}"
            );
            assert_eq!(
                mine.execute(&b, at, &members).unwrap().time,
                want,
                "node {k} at {batch}"
            );
            // a sub-batch of one request times as the uniform path does
            let one = mine
                .execute_uniform(&b, at, members[0], batch)
                .unwrap()
                .time;
            assert_eq!(one, want, "node {k} at {batch}");
        }
    }
    // and the first model's table is still its own
    let n0 = a.nodes[1].id;
    let m1 = [Member {
        slot: 0,
        len: a.ref_lengths(),
        input: 0,
        step: 0,
    }];
    let at = NodeStep { node: n0, step: 0 };
    assert_eq!(
        used.execute(&a, at, &m1).unwrap().time,
        fresh.execute(&a, at, &m1).unwrap().time
    );
}
