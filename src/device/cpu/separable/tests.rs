//! The deferred depthwise convolutions' tests: which pairs run as one, their blocks, and the
//! same bits as the two passes.

use super::super::testing;
use super::*;
use crate::device::capture::CaptureMode;
use crate::device::Device;

/// Depthwise-separable pairs: on the model's input (24 channels, not a whole number of vectors),
/// at stride 1 on 24 × 24 pixels, at stride 2 down to 12 × 12 (still a large image), then one
/// whose depthwise input and 1×1 output have the same size (the arena would give them one
/// region if the depthwise input were not kept live until the 1×1 node), and a depthwise
/// convolution read by two nodes (not deferred).
const MODEL: &str = r#"
name = "separable"
max_batch = 4

[[node]]
name = "x"
op = "input"
shape = [24, 24, 24]
seq = "one"

[[node]]
name = "dw0"
op = "conv2d"
inputs = ["x"]
out_channels = 24
kernel = 3
padding = 1
groups = 24
bn = true
act = "relu6"

[[node]]
name = "pw0"
op = "conv2d"
inputs = ["dw0"]
out_channels = 32
kernel = 1
bn = true
act = "relu6"

[[node]]
name = "dw1"
op = "conv2d"
inputs = ["pw0"]
out_channels = 32
kernel = 3
padding = 1
groups = 32
bn = true
act = "relu6"

[[node]]
name = "pw1"
op = "conv2d"
inputs = ["dw1"]
out_channels = 48
kernel = 1
bn = true
act = "relu6"

[[node]]
name = "dw2"
op = "conv2d"
inputs = ["pw1"]
out_channels = 48
kernel = 3
padding = 1
groups = 48
bn = true
stride = 2
act = "relu6"

[[node]]
name = "pw2"
op = "conv2d"
inputs = ["dw2"]
out_channels = 64
kernel = 1
bn = true
act = "relu"

[[node]]
name = "dwe"
op = "conv2d"
inputs = ["pw2"]
out_channels = 64
kernel = 3
padding = 1
groups = 64
bn = true
act = "relu6"

[[node]]
name = "pwe"
op = "conv2d"
inputs = ["dwe"]
out_channels = 64
kernel = 1
bn = true
act = "relu6"

[[node]]
name = "dw3"
op = "conv2d"
inputs = ["pwe"]
out_channels = 64
kernel = 3
padding = 1
groups = 64
bn = true

[[node]]
name = "pw3"
op = "conv2d"
inputs = ["dw3"]
out_channels = 64
kernel = 1
bn = true

[[node]]
name = "sum"
op = "add"
inputs = ["pw3", "dw3"]
"#;

/// The pairs whose depthwise output only a 1×1 convolution reads are deferred into it, and the
/// 1×1 node reads the depthwise node's input instead; the one read by two nodes is not.
#[test]
fn a_depthwise_read_by_a_pointwise_alone_is_deferred() {
    let (model, dev) = testing::prepared(MODEL, 3);
    let id = |name: &str| model.nodes.iter().position(|n| n.name == name).unwrap();
    for (dw, pw) in [
        ("dw0", "pw0"),
        ("dw1", "pw1"),
        ("dw2", "pw2"),
        ("dwe", "pwe"),
    ] {
        assert!(dev.nodes[id(dw)].deferred, "{dw}");
        assert_eq!(dev.nodes[id(pw)].pre, Some(id(dw)), "{pw}");
        let pre = Pre::of(&model.nodes[id(dw)], &dev.nodes[id(dw)]).expect(dw);
        assert_eq!(pre.src, model.nodes[id(dw)].inputs[0].node.idx(), "{dw}");
    }
    assert!(!dev.nodes[id("dw3")].deferred);
    assert_eq!(dev.nodes[id("pw3")].pre, None);
}

/// Served without a capture, each pair runs as one pass; with every node captured, as two: the
/// same bits in the model's output (which every pair feeds; the pairs' own outputs share
/// memory with later nodes'), alone and in a batch of three (images in parallel), and alone
/// as batched.
#[test]
fn the_pair_in_one_pass_gives_the_bits_of_the_two_passes() {
    let mut alone = Vec::new();
    for batch in [1u32, 3] {
        let slots: Vec<u32> = (0..batch).collect();
        let outputs = |capture: bool| {
            let (model, mut dev) = testing::prepared(MODEL, 11);
            if capture {
                dev.set_capture(CaptureMode::EveryNode);
            }
            let members = testing::members(&model, &slots, u64::from);
            testing::run(&mut dev, &model, model.nodes.len(), &members);
            let last = model.nodes.len() - 1;
            let len = model.nodes[last].out.feat.iter().product::<usize>();
            let at = |slot: u32| dev.layout.offset(last, slot, 0);
            let out: Vec<Vec<f32>> = slots
                .iter()
                .map(|&s| dev.nodes[last].out[at(s)..at(s) + len].to_vec())
                .collect();
            out
        };
        let (two, one) = (outputs(true), outputs(false));
        for (slot, (t, o)) in two.iter().zip(&one).enumerate() {
            assert!(o.iter().any(|v| *v != 0.0), "slot {slot}: all zero");
            let differ = t
                .iter()
                .zip(o)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(differ, 0, "batch {batch}, slot {slot}: values differ");
        }
        alone.push(one[0].clone());
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&alone[0]) == bits(&alone[1]),
        "alone and batched differ"
    );
}

#[test]
fn blocks_are_whole_rows_within_the_budget_and_even_over_the_threads() {
    // MobileNet-v1's pairs: 56 rows of 56 × 128 (7 168 values): 9 rows fit, 8 blocks of 7
    assert_eq!(block_rows((56, 56, 128), 2), 7);
    // 112 × 112 × 32: 18 rows fit; 7 blocks → 8 of 14 rows
    assert_eq!(block_rows((112, 112, 32), 2), 14);
    // 14 × 14 × 512: 9 rows fit; two blocks of 7
    assert_eq!(block_rows((14, 14, 512), 2), 7);
    // a row larger than the budget: one row a block
    assert_eq!(block_rows((8, 1024, 128), 2), 1);
    assert!(scratch_len((56, 56, 128)) <= BLOCK_VALUES);
    assert_eq!(scratch_len((8, 1024, 128)), 1024 * 128);
}
