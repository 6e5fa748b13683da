//! The BatchTable's own tests: pushing, advancing, splitting, merging, cells, removal.

use super::*;
use crate::graph::{zoo, NodeId};

fn at(node: u32, step: u32) -> NodeStep {
    NodeStep {
        node: NodeId(node),
        step,
    }
}

fn ids(v: &[u32]) -> Vec<RequestId> {
    v.iter().map(|&i| RequestId(i)).collect()
}

const LEN: Lengths = Lengths { enc: 1, dec: 1 };

#[test]
fn a_newcomer_catches_up_and_merges_where_the_batch_below_stands() {
    // the paper's example: Req1 at C, Req2 pushed at A merges when it reaches C
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1]), at(3, 0), None);
    t.push_from(ids(&[2]), at(1, 0), None);
    assert_eq!(t.entries().len(), 2);
    let mut done = Vec::new();
    let a = t.advance(&m, |_| LEN, &mut done);
    assert_eq!((a.merges, t.entries().len()), (0, 2), "at B: not yet");
    let a = t.advance(&m, |_| LEN, &mut done);
    assert_eq!(a.merges, 1, "at C: merged");
    assert_eq!(t.entries().len(), 1);
    assert_eq!(t.top().unwrap().members, ids(&[1, 2]));
    assert_eq!(t.top().unwrap().next, at(3, 0));
    assert!(t.check().is_ok() && done.is_empty());
}

#[test]
fn entries_that_would_exceed_the_maximum_batch_stay_apart() {
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(3);
    t.set_model(&m);
    t.push_from(ids(&[1, 2]), at(2, 0), None);
    t.push_from(ids(&[3, 4]), at(1, 0), None);
    let mut done = Vec::new();
    let a = t.advance(&m, |_| LEN, &mut done);
    assert_eq!(a.merges, 0);
    assert_eq!(t.entries().len(), 2, "2 + 2 > 3");
    assert!(t.check().is_ok());
}

#[test]
fn at_cells_sub_batches_merge_across_timesteps_and_keep_their_steps() {
    let m = zoo::fixture("tiny_seq2seq.toml");
    let dec = m
        .loops
        .iter()
        .find(|l| l.class == crate::graph::Class::Decoder)
        .unwrap();
    let first = dec.first.0;
    let len = Lengths { enc: 3, dec: 6 };
    for cells in [true, false] {
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        if cells {
            t.set_cells(m.nodes.iter().map(|n| n.loop_id.is_some()).collect());
        }
        t.push_from(ids(&[1]), at(first, 4), None);
        t.push_from(ids(&[2]), at(first, 0), None);
        assert_eq!(
            t.entries().len(),
            if cells { 1 } else { 2 },
            "cells: {cells}"
        );
        if cells {
            let top = t.top().unwrap();
            assert_eq!(top.steps, [4, 0], "each member keeps its own step");
            // the loop's end: both run it again, each one step on
            let mut done = Vec::new();
            for _ in dec.first.0..=dec.last.0 {
                t.advance(&m, |_| len, &mut done);
            }
            assert_eq!(t.top().unwrap().steps, [5, 1]);
        }
        assert!(t.check().is_ok());
    }
}

#[test]
fn members_that_part_ways_split_and_merge_again_where_they_meet() {
    // the tiny seq2seq model's encoder (node 2, a one-node loop) with encoder lengths 1
    // and 3: after step 0 request 1 leaves for the decoder (node 3) and request 2 runs the
    // encoder again; the one behind runs first and, standing at another node, does not
    // merge until it reaches the decoder's first unit
    let m = zoo::fixture("tiny_seq2seq.toml");
    let len = |r: RequestId| Lengths {
        enc: if r.0 == 1 { 1 } else { 3 },
        dec: 2,
    };
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1, 2]), at(2, 0), None);
    let mut done = Vec::new();
    let a = t.advance(&m, len, &mut done);
    assert_eq!((a.splits, a.merges), (1, 0));
    let view = |t: &BatchTable| -> Vec<(Vec<RequestId>, NodeStep)> {
        t.entries()
            .iter()
            .map(|e| (e.members.clone(), e.next))
            .collect()
    };
    assert_eq!(
        view(&t),
        [(ids(&[1]), at(3, 0)), (ids(&[2]), at(2, 1))],
        "split: the one behind on top"
    );
    let a = t.advance(&m, len, &mut done);
    assert_eq!((a.splits, a.merges), (0, 0), "another node: no merge");
    assert_eq!(view(&t)[1], (ids(&[2]), at(2, 2)));
    let a = t.advance(&m, len, &mut done);
    assert_eq!(a.merges, 1, "met at the decoder's first unit");
    assert_eq!(view(&t), [(ids(&[1, 2]), at(3, 0))]);
    assert!(done.is_empty() && t.check().is_ok());
}

#[test]
fn a_graph_batch_never_merges() {
    // a padded sub-batch (graph batching) runs to its end on its own, even through the
    // node where the entry below stands
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1]), at(3, 0), None);
    t.push_from(ids(&[2]), at(1, 0), Some(LEN));
    let mut done = Vec::new();
    for _ in 0..3 {
        assert_eq!(t.advance(&m, |_| LEN, &mut done).merges, 0);
        assert_eq!(t.entries().len(), 2);
    }
    assert_eq!(t.top().unwrap().next, at(4, 0), "past C, still apart");
}

#[test]
fn check_names_a_broken_invariant() {
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1]), at(3, 0), None);
    t.push_from(ids(&[2]), at(1, 0), None);
    // the same request in two entries
    t.stack[1].members[0] = RequestId(1);
    assert!(t.check().unwrap_err().to_string().contains("two entries"));
}

/// With the checks compiled in (debug builds, the `check` feature of the test command), a
/// change that leaves the table broken panics at once, naming the invariant.
#[test]
#[cfg_attr(
    any(debug_assertions, feature = "check"),
    should_panic(expected = "request 1 is in two entries")
)]
fn a_broken_table_panics_at_the_next_change_when_checked() {
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1]), at(3, 0), None);
    t.push_from(ids(&[2]), at(1, 0), None);
    t.stack[1].members[0] = RequestId(1);
    t.advance_straight(1);
    // reached only where the checks are compiled out
    let checked = std::hint::black_box(BatchTable::CHECKED);
    assert!(!checked, "a checked build must have panicked");
}

#[test]
fn a_straight_run_ends_before_a_loop_end_the_model_end_the_entry_below_or_a_class_change() {
    // a table on `m` with one request per entry at `entries` (bottom first)
    let ahead = |m: &Model, entries: &[u32]| {
        let mut t = BatchTable::new(8);
        t.set_model(m);
        for (r, &n) in entries.iter().enumerate() {
            t.push_from(ids(&[r as u32]), at(n, 0), None);
        }
        t.straight_ahead()
    };
    // eight_nodes: in, A..H, one class, no loops: from node i, 8 - i nodes (H ends it)
    let m = zoo::fixture("eight_nodes.toml");
    for i in 0..=8 {
        assert_eq!(ahead(&m, &[i]), 8 - i, "eight_nodes from {i}");
    }
    // an entry below at E (5): a newcomer at B (2) runs 3 nodes and meets it
    assert_eq!(ahead(&m, &[5, 2]), 3);
    // tiny_seq2seq: src, emb, enc (the encoder loop, ends it), dec_emb, dec, ctx, logits,
    // tok (the decoder loop's last)
    let m = zoo::fixture("tiny_seq2seq.toml");
    for (i, w) in [2, 1, 0, 4, 3, 2, 1, 0].into_iter().enumerate() {
        assert_eq!(ahead(&m, &[i as u32]), w, "tiny_seq2seq from {i}");
    }
    // the Transformer's last encoder layer runs straight into the decoder's first: the run
    // stops at the class change (device time is counted by class)
    let m = zoo::load("transformer").unwrap();
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    let change = (0..m.nodes.len() - 1)
        .find(|&i| t.straight[i] && t.straight[i + 1] && m.nodes[i].class != m.nodes[i + 1].class)
        .expect("a class change between straight nodes");
    assert_eq!(ahead(&m, &[change as u32]), 1);
}

/// The table's entries as (members, next unit), bottom first.
fn view(t: &BatchTable) -> Vec<(Vec<RequestId>, NodeStep)> {
    t.entries()
        .iter()
        .map(|e| (e.members.clone(), e.next))
        .collect()
}

#[test]
fn a_group_that_splits_onto_the_entry_below_merges_with_it_at_once() {
    // tiny_seq2seq, encoder lengths 1 and 3 for requests 1 and 2 (at the encoder, node 2),
    // request 0 waiting at the decoder's first unit: request 1 leaves for it and merges
    // there in the same advance; request 2 runs the encoder again, on top
    let m = zoo::fixture("tiny_seq2seq.toml");
    let len = |r: RequestId| Lengths {
        enc: if r.0 == 2 { 3 } else { 1 },
        dec: 2,
    };
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[0]), at(3, 0), None);
    t.push_from(ids(&[1, 2]), at(2, 0), None);
    let a = t.advance(&m, len, &mut Vec::new());
    assert_eq!((a.splits, a.merges), (1, 1));
    assert_eq!(view(&t), [(ids(&[0, 1]), at(3, 0)), (ids(&[2]), at(2, 1))]);
}

#[test]
fn a_loop_that_wraps_onto_the_entry_below_merges_with_it() {
    // tiny_seq2seq's decoder loop (nodes 3..=7), three steps each: request 1 at its last
    // node (tok, step 0) wraps to its first node at step 1, where request 0 stands
    let m = zoo::fixture("tiny_seq2seq.toml");
    let len = |_| Lengths { enc: 1, dec: 3 };
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[0]), at(3, 1), None);
    t.push_from(ids(&[1]), at(7, 0), None);
    let a = t.advance(&m, len, &mut Vec::new());
    assert!(a.wrapped);
    assert_eq!(a.merges, 1);
    assert_eq!(view(&t), [(ids(&[0, 1]), at(3, 1))]);
}

#[test]
fn a_full_sub_batch_takes_no_one_more() {
    // eight_nodes, maximum batch 8: a newcomer reaching C where 8 requests stand stays
    // apart; where 7 stand it merges
    let m = zoo::fixture("eight_nodes.toml");
    for (below, merged) in [(8u32, false), (7, true)] {
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from((0..below).map(RequestId), at(3, 0), None);
        t.push_from(ids(&[100]), at(2, 0), None);
        let a = t.advance(&m, |_| LEN, &mut Vec::new());
        assert_eq!(
            (a.merges == 1, t.entries().len() == 1),
            (merged, merged),
            "{below} below"
        );
    }
}

#[test]
fn a_removed_member_leaves_its_entry_and_an_emptied_entry_goes_letting_its_neighbours_merge() {
    let m = zoo::fixture("eight_nodes.toml");
    let mut t = BatchTable::new(8);
    t.set_model(&m);
    t.push_from(ids(&[1, 2]), at(3, 0), None);
    t.push_from(ids(&[3]), at(1, 0), None);
    let g = t.generation();
    // a member of the bottom entry: the entry runs on without it, unmerged
    assert_eq!(t.remove(RequestId(2)), Some(0));
    assert_eq!(t.entries()[0].members, ids(&[1]));
    assert_eq!((t.entries()[0].steps.len(), t.entries().len()), (1, 2));
    assert!(t.generation() > g, "the engine rebuilds its member list");
    // not in the table: nothing changes
    assert_eq!(t.remove(RequestId(2)), None);
    assert_eq!(t.remove(RequestId(9)), None);
    // a third entry at the bottom's unit, above the one at node 1: emptying the middle entry
    // brings the two at node 3 together, and they merge
    t.push_from(ids(&[4]), at(3, 0), None);
    assert_eq!(t.entries().len(), 3);
    assert_eq!(t.remove(RequestId(3)), Some(1));
    assert_eq!(t.entries().len(), 1);
    assert_eq!(t.top().unwrap().members, ids(&[1, 4]));
    assert!(t.check().is_ok());
    // the last members go: the table is empty
    assert_eq!(t.remove(RequestId(1)), Some(0));
    assert_eq!(t.remove(RequestId(4)), Some(0));
    assert!(t.is_empty() && t.check().is_ok());
}
