//! The arena's plan: outputs live at the same time, and different slots, never share memory.

use super::*;
use crate::graph::zoo;

/// For every zoo model, with one slot and with three: no two nodes whose outputs are live at
/// once (by the device's rule: from the first write to the last read) share memory, nor do any
/// two slots; each node's slots follow each other; image models share (their arena is smaller
/// than the sum of their outputs), and so does GPT-2's prefill, but a loop node's output and
/// every output a loop reads keep a region of their own.
#[test]
fn outputs_live_at_once_never_share_a_region() {
    for name in zoo::all_names() {
        let model = zoo::load(name).unwrap();
        for slots in [1, 3] {
            check(&model, name, slots);
        }
    }
}

fn check(model: &Model, name: &str, slots: usize) {
    let n = model.nodes.len();
    // each slot's size (not a multiple of a cache line, too), and each buffer's: `slots` of them
    let lens: Vec<usize> = model
        .nodes
        .iter()
        .map(|x| 1 + x.out.feat.iter().product::<usize>())
        .collect();
    let buffers: Vec<usize> = lens.iter().map(|l| slots * l).collect();
    // as if every third node's output were written by the node before it (a fused sum)
    let written_by: Vec<Option<usize>> = (0..n)
        .map(|i| i.checked_sub(1).filter(|_| i % 3 == 0))
        .collect();
    // and every fifth node's output read again four nodes later (a deferred depthwise
    // convolution's input)
    let read_by: Vec<Option<usize>> = (0..n)
        .map(|i| Some(i + 4).filter(|r| i % 5 == 0 && *r < n))
        .collect();
    let plan = plan(model, &buffers, (&written_by, &read_by));
    let mut last = vec![0usize; n];
    for (j, node) in model.nodes.iter().enumerate() {
        for input in &node.inputs {
            last[input.node.idx()] = last[input.node.idx()].max(j);
            if let crate::graph::View::PrevOr(init) = input.view {
                last[init.idx()] = last[init.idx()].max(j);
            }
        }
        if let Some(r) = read_by[j] {
            last[j] = last[j].max(r);
        }
    }
    let live = |i: usize| {
        let start = written_by[i].unwrap_or(i);
        let end = if last[i] <= i { usize::MAX } else { last[i] };
        (start, end)
    };
    // slot s of node i: values base + s·lens[i] .. + lens[i], as the layout puts them
    let values = |i: usize, s: usize| {
        let (base, len) = plan.regions[i];
        assert_eq!(len, buffers[i], "{name}: node {i}'s region");
        base + s * lens[i]..base + (s + 1) * lens[i]
    };
    for i in 0..n {
        assert!(
            values(i, slots - 1).end <= plan.len,
            "{name}: node {i} outside the arena"
        );
        for j in i + 1..n {
            let ((si, ei), (sj, ej)) = (live(i), live(j));
            let at_once = si <= ej && sj <= ei;
            for (a, b) in (0..slots).flat_map(|a| (0..slots).map(move |b| (a, b))) {
                let (x, y) = (values(i, a), values(j, b));
                let shared = x.start < y.end && y.start < x.end;
                // the same request's outputs live at once, or any two requests' outputs (one
                // may be at any node while the other runs another)
                assert!(
                    !(shared && (a != b || at_once)),
                    "{name}: node {i} of slot {a} and node {j} of slot {b} share memory ({slots} slots)"
                );
            }
        }
    }
    // a loop node's output, and every output a loop reads, alone in its region: a loop reads
    // its outputs again at the next step, and what came before at every step
    let shares = shareable(model);
    for i in (0..n).filter(|&i| !shares[i]) {
        let alone = (0..n).all(|j| j == i || plan.regions[j].0 != plan.regions[i].0);
        assert!(alone, "{name}: node {i} shares the region a loop needs");
        let node = &model.nodes[i];
        let read_by_a_loop = model.nodes.iter().any(|m| {
            m.loop_id.is_some()
                && m.inputs
                    .iter()
                    .any(|x| x.node == node.id || x.view == crate::graph::View::PrevOr(node.id))
        });
        assert!(node.loop_id.is_some() || read_by_a_loop, "{name}: node {i}");
    }
    let total: usize = buffers.iter().map(|l| l.next_multiple_of(16)).sum();
    if model.loops.is_empty() || name == "gpt2" {
        assert!(plan.len < total, "{name}: {} of {total}", plan.len);
    }
}
