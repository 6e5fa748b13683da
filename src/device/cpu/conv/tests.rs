//! The convolutions' tests: residual sums fused into the convolution that completes them, and
//! outputs stored around the caches.

use super::super::testing;
use super::*;
use crate::device::capture::CaptureMode;
use crate::device::Device;

/// Three residual blocks: on a 40 × 40 image, whose later input is a 3×3 shortcut
/// convolution (shares of the pixels over the cores, each share in blocks); on 20 × 20,
/// whose later input is a 1×1 convolution (a share is one block) and whose shortcut is the
/// block's own input; on 10 × 10 (a small image: one block, columns over the cores).
const MODEL: &str = r#"
name = "residuals"
max_batch = 4

[[node]]
name = "x"
op = "input"
shape = [64, 40, 40]
seq = "one"

[[node]]
name = "a"
op = "conv2d"
inputs = ["x"]
out_channels = 16
kernel = 1
bn = true
act = "relu"

[[node]]
name = "b"
op = "conv2d"
inputs = ["a"]
out_channels = 16
kernel = 1
bn = true

[[node]]
name = "s"
op = "conv2d"
inputs = ["x"]
out_channels = 16
kernel = 3
padding = 1
bn = true

[[node]]
name = "add1"
op = "add"
inputs = ["b", "s"]
act = "relu"

[[node]]
name = "c"
op = "conv2d"
inputs = ["add1"]
out_channels = 24
kernel = 3
stride = 2
padding = 1
bn = true
act = "relu"

[[node]]
name = "d"
op = "conv2d"
inputs = ["c"]
out_channels = 24
kernel = 1
bn = true

[[node]]
name = "add2"
op = "add"
inputs = ["d", "c"]
act = "relu"

[[node]]
name = "e"
op = "conv2d"
inputs = ["add2"]
out_channels = 32
kernel = 3
stride = 2
padding = 1
bn = true
act = "relu"

[[node]]
name = "f"
op = "conv2d"
inputs = ["e"]
out_channels = 32
kernel = 1
bn = true

[[node]]
name = "add3"
op = "add"
inputs = ["f", "e"]
act = "relu"
"#;

/// Served without a capture, a convolution completing a residual sum writes the sum
/// straight into the add's output (its own output is read by nothing): the same bits as
/// when a capture makes it write both.
#[test]
fn the_sum_written_in_place_is_the_sum_written_beside_the_output() {
    for batch in [1u32, 3] {
        let slots: Vec<u32> = (0..batch).collect();
        let sums = |capture: bool| {
            let (model, mut dev) = testing::prepared(MODEL, 7);
            if capture {
                dev.set_capture(CaptureMode::EveryNode);
            }
            let members = testing::members(&model, &slots, u64::from);
            testing::run(&mut dev, &model, model.nodes.len(), &members);
            let mut out = Vec::new();
            for add in ["add1", "add2", "add3"] {
                let a = model.nodes.iter().position(|n| n.name == add).unwrap();
                let len = model.nodes[a].out.feat.iter().product::<usize>();
                for &slot in &slots {
                    let at = dev.layout.offset(a, slot, 0);
                    out.extend_from_slice(&dev.nodes[a].out[at..at + len]);
                }
            }
            out
        };
        let (apart, in_place) = (sums(true), sums(false));
        assert!(apart.iter().any(|v| *v > 0.0));
        assert_eq!(apart, in_place, "batch {batch}");
    }
}

/// Each fused add's output, as its producer's epilogue wrote it, is bit for bit
/// `relu(conv + skip)` of the two outputs captured beside it, alone and in a batch of
/// three (images in parallel), and the same bits in both.
#[test]
fn a_fused_residual_add_is_the_sum_of_its_inputs() {
    let mut per_batch = Vec::new();
    for batch in [1u32, 3] {
        let (model, mut dev) = testing::prepared(MODEL, 7);
        let id = |name: &str| model.nodes.iter().position(|n| n.name == name).unwrap();
        for (add, conv, skip) in [("add1", "s", "b"), ("add2", "d", "c"), ("add3", "f", "e")] {
            let r = dev.nodes[id(conv)].residual.expect(conv);
            assert_eq!((r.add, r.skip), (id(add), id(skip)), "{add}");
            assert!(dev.nodes[id(add)].fused, "{add}");
        }
        dev.set_capture(CaptureMode::EveryNode);
        let slots: Vec<u32> = (0..batch).collect();
        let members = testing::members(&model, &slots, u64::from);
        testing::run(&mut dev, &model, model.nodes.len(), &members);
        let trace = dev.take_captured().trace;
        let of = |node: usize, input: u64| {
            let e = trace.iter().find(|e| e.node == node && e.input == input);
            e.unwrap().values.clone()
        };
        for input in 0..u64::from(batch) {
            for (add, l, r) in [("add1", "b", "s"), ("add2", "d", "c"), ("add3", "f", "e")] {
                let (l, r) = (of(id(l), input), of(id(r), input));
                let want: Vec<f32> = l.iter().zip(&r).map(|(a, b)| (a + b).max(0.0)).collect();
                assert_eq!(of(id(add), input), want, "{add} of input {input}");
                assert!(want.iter().any(|v| *v > 0.0), "{add}: all zero");
            }
        }
        per_batch.push([of(id("add1"), 0), of(id("add2"), 0), of(id("add3"), 0)]);
    }
    for (k, (alone, batched)) in per_batch[0].iter().zip(&per_batch[1]).enumerate() {
        let differ = alone.iter().zip(batched).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "add{}: alone and batched differ", k + 1);
    }
}

/// Reversed, each thread still owns the same images (its shares' residue), visits them in the
/// opposite order, and every image runs once.
#[test]
fn a_reversed_order_keeps_each_threads_images_and_visits_each_once() {
    for (count, threads) in [(16, 2), (7, 2), (5, 3), (1, 2), (4, 4)] {
        let forward = Serpentine {
            count,
            threads,
            reverse: false,
        };
        assert!((0..count).all(|k| forward.image(k) == k));
        let order = Serpentine {
            reverse: true,
            ..forward
        };
        let mut seen: Vec<usize> = (0..count).map(|k| order.image(k)).collect();
        for t in 0..threads {
            let mine: Vec<usize> = (t..count)
                .step_by(threads)
                .map(|k| order.image(k))
                .collect();
            let mut expect: Vec<usize> = (t..count).step_by(threads).collect();
            expect.reverse();
            assert_eq!(
                mine, expect,
                "{count} images, {threads} threads: thread {t}"
            );
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..count).collect::<Vec<_>>());
    }
}

/// A direct stem, a 1×1 convolution and a depthwise-separable pair on 128 × 128 images of 64
/// channels (4 MiB an output): two images store their outputs around the caches
/// ([`STREAM_BYTES`]), one does not, and each image's outputs are the same bits either way.
#[test]
fn outputs_stored_around_the_caches_are_the_bits_stored_through_them() {
    const LARGE: &str = r#"
name = "streamed"
max_batch = 2

[[node]]
name = "x"
op = "input"
shape = [3, 128, 128]
seq = "one"

[[node]]
name = "stem"
op = "conv2d"
inputs = ["x"]
out_channels = 64
kernel = 3
padding = 1
bn = true
act = "relu6"

[[node]]
name = "pw"
op = "conv2d"
inputs = ["stem"]
out_channels = 64
kernel = 1
bn = true
act = "relu6"

[[node]]
name = "dw"
op = "conv2d"
inputs = ["pw"]
out_channels = 64
kernel = 3
padding = 1
groups = 64
bn = true
act = "relu6"

[[node]]
name = "pw2"
op = "conv2d"
inputs = ["dw"]
out_channels = 64
kernel = 1
bn = true
act = "relu"
"#;
    let per_image = 128 * 128 * 64;
    assert!(streams(false, 2, per_image) && !streams(false, 1, per_image));
    assert!(
        !streams(true, 2, per_image),
        "a residual sum reads its output back"
    );
    let outputs = |slots: &[u32]| {
        let (model, mut dev) = testing::prepared(LARGE, 3);
        let id = |name: &str| model.nodes.iter().position(|n| n.name == name).unwrap();
        assert!(direct::applies(1, (3, 64), 9), "the stem runs directly");
        assert!(
            dev.nodes[id("stem")].wino.is_none(),
            "the stem runs directly"
        );
        assert!(dev.nodes[id("pw2")].pre.is_some(), "dw runs inside pw2");
        let members = testing::members(&model, slots, u64::from);
        testing::run(&mut dev, &model, model.nodes.len(), &members);
        let mut out = Vec::new();
        for name in ["stem", "pw", "pw2"] {
            let at = dev.layout.offset(id(name), slots[0], 0);
            out.push(dev.nodes[id(name)].out[at..at + per_image].to_vec());
        }
        out
    };
    let (alone, streamed) = (outputs(&[0]), outputs(&[0, 1]));
    for (k, (a, s)) in alone.iter().zip(&streamed).enumerate() {
        // activated: ReLU6 for the first two layers, ReLU for the last; some zeros and some
        // positive values in each
        let most = if k < 2 { 6.0 } else { f32::INFINITY };
        assert!(
            a.iter().all(|v| (0.0..=most).contains(v)),
            "layer {k}: not activated"
        );
        assert!(a.contains(&0.0) && a.iter().any(|v| *v > 0.0), "layer {k}");
        let differ = a
            .iter()
            .zip(s)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "layer {k}: alone and streamed differ");
    }
}
