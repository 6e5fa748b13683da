//! Where the CPU device's node outputs live: one allocation (the arena) cut into a region per
//! node, and — in an image model, whose every node writes its whole output — nodes whose
//! outputs are never live at once share a region, as onnxruntime's memory planner shares its
//! buffers. A node's output is live from the node that writes it (a convolution that completes
//! a residual sum writes the add's output: [`super::residual::Residual`]) to its last reader in the
//! node order, and every request runs the nodes in that order, so a region is written again
//! only once the request that could still read it has read it. A region holds every slot, each
//! slot at the same place for every node sharing it, so one request's writes never reach
//! another's values, and preempting and merging sub-batches still move nothing. Only outputs
//! of the same size share a region, so slots follow each other as without sharing (a sub-batch
//! in consecutive slots is one run of rows).
//!
//! Why: with a region per node, MobileNet-v1's activations (22 MB at batch 1) and weights
//! (17 MB) exceed a 32 MiB L3, and each pass evicts what the next one reads first; shared, its
//! activations take a few megabytes that stay in cache from one layer to the next.
//!
//! In a model with loops, a loop node's output and every output a loop node reads keep a region
//! of their own (a loop reads its outputs again at the next step, and its steps read what came
//! before them at every step); the other outputs — the static nodes only static nodes read, such
//! as a decoder-only model's prefill but for its keys and values — share by liveness as an
//! image model's do: every reader reads only the rows its own request's lengths give, which the
//! writer wrote for that request in the same pass.

use super::aligned::Aligned;
use crate::graph::Model;

/// A node's output: its region of the arena (`len` values; a region may be shared with nodes
/// whose outputs are never live at the same time as this one's).
pub(super) struct Buf {
    ptr: *mut f32,
    len: usize,
}

impl Default for Buf {
    fn default() -> Self {
        Buf {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }
}

// SAFETY: a `Buf` is a view of the arena, which the device owns beside its nodes; the device
// hands the views to its kernels as slices, under the borrow rules of `&self` / `&mut self`.
unsafe impl Send for Buf {}
unsafe impl Sync for Buf {}

impl std::ops::Deref for Buf {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        // SAFETY: `len` values of the arena (or none); the regions of nodes live at the same
        // time are disjoint ([`plan`]), and a kernel only touches the outputs of live nodes
        // (its own, and its inputs', which are live while it runs).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as for `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf({} values)", self.len)
    }
}

/// Each node's region (its offset in the arena and its length) and the arena's length.
pub(super) struct Plan {
    pub(super) regions: Vec<(usize, usize)>,
    pub(super) len: usize,
}

/// Plans the regions of `model`'s node outputs, node `i`'s buffer taking `lens[i]` values
/// (every slot's rows, as [`super::Layout`] lays them out); `written_by[i]` is the earlier node
/// that writes node `i`'s output, if one does (a fused residual sum), and `read_by[i]` a later
/// node that reads it besides its graph readers, if one does (the 1×1 convolution that computes
/// a deferred depthwise convolution from the depthwise one's input: [`super::separable`]).
pub(super) fn plan(
    model: &Model,
    lens: &[usize],
    (written_by, read_by): (&[Option<usize>], &[Option<usize>]),
) -> Plan {
    let n = model.nodes.len();
    let shares = shareable(model);
    // each output's live range: from its first write to its last read (never ends: no reuse)
    let mut end: Vec<usize> = shares
        .iter()
        .map(|&s| if s { 0 } else { usize::MAX })
        .collect();
    for (j, node) in model.nodes.iter().enumerate() {
        for input in &node.inputs {
            let e = &mut end[input.node.idx()];
            *e = (*e).max(j);
        }
        if let Some(&Some(r)) = read_by.get(j) {
            end[j] = end[j].max(r);
        }
    }
    let start: Vec<usize> = (0..n).map(|i| written_by[i].unwrap_or(i).min(i)).collect();
    for (i, e) in end.iter_mut().enumerate() {
        // an output nothing reads (the model's result) stays to the end of the pass
        if *e <= i {
            *e = usize::MAX;
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (start[i], i));
    // (length, live until) of every region so far, and each node's region
    let mut pool: Vec<(usize, usize)> = Vec::new();
    let mut region_of = vec![None; n];
    for i in order {
        let need = lens[i];
        if need == 0 {
            continue;
        }
        // a free region (its last reader runs before this output's first write) of the same
        // size, so that each slot's rows lie where the layout puts them for every node sharing
        // it: another size would space this node's slots apart (a sub-batch in consecutive
        // slots would no longer be one run of rows, each image would sit megabytes from the
        // next) and, even with one slot, cut the region into other halves than the two cores
        // wrote it in, so that a core would write lines the other one holds (MobileNet-v1 at
        // batch 1 ran 18% slower than without an arena on some runs of the VM)
        let fit = pool
            .iter()
            .position(|r| shares[i] && r.1 < start[i] && r.0 == need);
        let k = fit.unwrap_or_else(|| {
            pool.push((0, 0));
            pool.len() - 1
        });
        pool[k] = (need, end[i]);
        region_of[i] = Some(k);
    }
    // the regions one after another, each on a cache line
    let mut base = Vec::with_capacity(pool.len());
    let mut len = 0;
    for r in &pool {
        base.push(len);
        len += r.0.next_multiple_of(16);
    }
    let regions = region_of
        .iter()
        .map(|r| r.map_or((0, 0), |k| (base[k], pool[k].0)))
        .collect();
    Plan { regions, len }
}

/// Which nodes' outputs may share a region: every node of a model without loops; in one with
/// loops, the static nodes no loop node reads (as an input, or as what an `@prev` input reads
/// at step 0).
pub(super) fn shareable(model: &Model) -> Vec<bool> {
    use crate::graph::View;
    let mut read_in_a_loop = vec![false; model.nodes.len()];
    for node in model.nodes.iter().filter(|n| n.loop_id.is_some()) {
        for input in &node.inputs {
            read_in_a_loop[input.node.idx()] = true;
            if let View::PrevOr(init) = input.view {
                read_in_a_loop[init.idx()] = true;
            }
        }
    }
    model
        .nodes
        .iter()
        .map(|n| n.loop_id.is_none() && !read_in_a_loop[n.id.idx()])
        .collect()
}

impl Plan {
    /// The arena, and each node's view of it.
    pub(super) fn allocate(&self) -> (Aligned, Vec<Buf>) {
        let mut arena = Aligned::zeroed(self.len);
        let base = arena.as_mut_ptr();
        let bufs = self
            .regions
            .iter()
            .map(|&(off, len)| match len {
                0 => Buf::default(),
                // SAFETY: `off + len ≤ self.len` (every region lies inside the arena)
                _ => Buf {
                    ptr: unsafe { base.add(off) },
                    len,
                },
            })
            .collect();
        (arena, bufs)
    }
}

#[cfg(test)]
mod tests;
