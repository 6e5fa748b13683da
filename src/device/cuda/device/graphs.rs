//! CUDA graphs (`--cuda-graphs`): what a node enqueues after its index tables are uploaded — its
//! gathers, kernels, cuBLAS calls and scatter — captured once per *launch shape* and replayed
//! as one graph launch, so that the host pays one launch per node instead of one per kernel.
//!
//! A launch shape is everything the host reads to build those launches: the node, the
//! sub-batch's size and the staged plan without its table contents ([`Staged`] but its `host`
//! vector, whose values go to the preallocated table buffer the kernels read, uploaded before
//! each launch). Every buffer is allocated at prepare and never moves, so a graph's pointers
//! stay valid until the next prepare, which drops the graphs first. Input nodes (a host upload
//! of generated values) run directly, as do shapes seen once the cache holds [`MAX_GRAPHS`].
//! The node still ends with its one blocking sync, so its measured time keeps its meaning.
//!
//! cuBLAS has a workspace of its own, graphs or not (`blas_workspace` in mod.rs), so that no
//! capture allocates one; the device's stream is its own, since the legacy default stream
//! cannot be captured; cudarc's cross-stream events are off (their waits on events recorded
//! outside a capture would invalidate it).

use super::*;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaGraph;

/// The most graphs kept; later shapes run without one.
pub(super) const MAX_GRAPHS: usize = 4096;

/// Node executions by how they ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Replayed a graph captured earlier.
    pub replayed: u64,
    /// Captured a new graph (then launched it).
    pub captured: u64,
    /// Ran without a graph: graphs off, an input node, or the cache full.
    pub direct: u64,
}

/// The captured graphs, by launch shape.
#[derive(Default)]
pub(super) struct Graphs {
    on: bool,
    cache: HashMap<Vec<u64>, Graph>,
    stats: GraphStats,
}

/// A captured graph, owned by one device.
struct Graph(CudaGraph);

// SAFETY: CUDA graph objects are not internally synchronized, and may be used from any thread
// as long as their calls are serialized (CUDA driver API, "Graph object thread safety"): a
// `Graph` is only reached through its device's `&mut self`, one thread at a time. It is `Send`
// so that the device can move to a serving thread, never `Sync`.
unsafe impl Send for Graph {}

impl Graphs {
    /// Drops every graph (their pointers die with the buffers of a re-prepare).
    pub(super) fn clear(&mut self) {
        self.cache.clear();
    }
}

impl CudaDevice {
    /// Turns CUDA graphs on or off (off by default); call before [`Device::prepare`].
    pub fn with_graphs(mut self, on: bool) -> Result<Self> {
        self.graphs.clear();
        self.graphs.on = on;
        Ok(self)
    }

    /// How node executions ran so far.
    pub fn graph_stats(&self) -> GraphStats {
        self.graphs.stats
    }

    /// Runs node `at` for the sub-batch as staged: by replaying its shape's graph, capturing
    /// one, or directly.
    pub(super) fn run_staged(
        &mut self,
        model: &Model,
        at: NodeStep,
        members: &[Member],
    ) -> Result<()> {
        let i = at.node.idx();
        if !self.graphs.on || matches!(model.nodes[i].op, Op::Input { .. }) {
            self.graphs.stats.direct += 1;
            return self.run_node(model, at, members);
        }
        let key = shape_key(i, members.len(), &self.host.staged);
        if let Some(Graph(g)) = self.graphs.cache.get(&key) {
            g.launch().map_err(cuda_err)?;
            self.graphs.stats.replayed += 1;
            return Ok(());
        }
        if self.graphs.cache.len() >= MAX_GRAPHS {
            self.graphs.stats.direct += 1;
            return self.run_node(model, at, members);
        }
        let g = self.capture(model, at, members)?;
        g.launch().map_err(cuda_err)?;
        self.graphs.cache.insert(key, Graph(g));
        self.graphs.stats.captured += 1;
        Ok(())
    }

    /// Records what [`CudaDevice::run_node`] enqueues into a graph, without running it.
    fn capture(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<CudaGraph> {
        self.lib
            .stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_err)?;
        let ran = self.run_node(model, at, members);
        // end the capture whatever happened, so that the stream works again
        let graph = self.lib.stream.end_capture(CUgraphInstantiate_flags(0));
        ran?;
        graph
            .map_err(cuda_err)?
            .ok_or_else(|| Error::Internal("cuda graph capture returned no graph".into()))
    }
}

/// Node `i`'s launch shape for a sub-batch of `members` as staged (see the module's header).
fn shape_key(i: usize, members: usize, s: &Staged) -> Vec<u64> {
    // every field named, so that a new one cannot be left out of the key
    let Staged {
        host: _,
        gathers,
        rows,
        scatter,
        cache,
        i64a,
        i64b,
        i32a,
        i32b,
        attn,
        attn_gemm,
        runs,
        direct_in,
        direct_out,
        gather_into,
    } = s;
    let mut k = Key(Vec::with_capacity(32 + 4 * gathers.len() + 3 * runs.len()));
    k.n(i)
        .n(members)
        .n(*rows)
        .n(*i64a)
        .n(*i64b)
        .n(*i32a)
        .n(*i32b);
    k.n(gathers.len());
    for g in gathers {
        k.seg(Some(g));
    }
    k.seg(scatter.as_ref()).seg(cache.as_ref());
    match attn {
        None => k.n(0),
        Some((a, max_keys)) => {
            let AttnShape {
                qstride,
                kv_node,
                kstride,
                vstride,
                dh,
                dv,
                additive,
                prefix,
            } = a;
            k.n(1).n(*qstride).pair(*kv_node).n(*kstride).n(*vstride);
            k.n(*dh)
                .n(*dv)
                .n(usize::from(*additive))
                .n(usize::from(*prefix))
                .n(*max_keys as usize)
        }
    };
    k.n(attn_gemm.len());
    for g in attn_gemm {
        let attention::GemmGroup {
            len,
            count,
            ptrs,
            scores,
        } = g;
        k.n(*len).n(*count).n(*ptrs).n(*scores);
    }
    k.n(runs.len());
    for r in runs {
        k.pair(*r);
    }
    match direct_in {
        None => k.n(0),
        Some(DirectIn::Whole(p, off)) => k.n(1).n(*p).n(*off),
        Some(DirectIn::Pair([a, b])) => k.n(2).pair(Some(*a)).pair(Some(*b)),
    };
    k.pair(direct_out.map(|o| (o, 0))).pair(*gather_into);
    k.0
}

/// A launch shape's words.
struct Key(Vec<u64>);

impl Key {
    fn n(&mut self, x: usize) -> &mut Self {
        self.0.push(x as u64);
        self
    }
    fn pair(&mut self, p: Option<(usize, usize)>) -> &mut Self {
        match p {
            None => self.n(0),
            Some((a, b)) => self.n(1).n(a).n(b),
        }
    }
    fn seg(&mut self, c: Option<&SegCopy>) -> &mut Self {
        let Some(SegCopy {
            src,
            at,
            nseg,
            max_len,
        }) = c
        else {
            return self.n(0);
        };
        match src {
            Src::Node { node, off } => self.n(1).n(*node).n(*off),
            Src::Fill(v) => self.n(2).n(v.to_bits() as usize),
        };
        self.n(*at).n(*nseg).n(*max_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(off: usize) -> SegCopy {
        SegCopy {
            src: Src::Node { node: 3, off },
            at: 0,
            nseg: 2,
            max_len: 64,
        }
    }

    #[test]
    fn launch_shapes_differ_in_whatever_the_launches_read_but_the_tables() {
        let base = Staged {
            host: vec![1, 2, 3],
            gathers: vec![seg(0)],
            rows: 4,
            ..Staged::default()
        };
        let key = |s: &Staged| shape_key(7, 2, s);
        // the tables' contents are uploaded before each launch: not part of the shape
        let mut same = Staged {
            host: vec![9, 9],
            gathers: vec![seg(0)],
            rows: 4,
            ..Staged::default()
        };
        assert_eq!(key(&base), key(&same));
        // a different node, sub-batch size, row count, source offset or in-place offset is not
        assert_ne!(key(&base), shape_key(8, 2, &base));
        assert_ne!(key(&base), shape_key(7, 3, &base));
        same.rows = 5;
        assert_ne!(key(&base), key(&same));
        same.rows = 4;
        same.gathers = vec![seg(16)];
        assert_ne!(key(&base), key(&same));
        same.gathers = vec![seg(0)];
        same.direct_out = Some(0);
        assert_ne!(key(&base), key(&same), "in place at 0 is not staged");
        same.direct_out = None;
        same.gathers[0].src = Src::Fill(0.0);
        let mut fill1 = same.gathers.clone();
        fill1[0].src = Src::Fill(1.0);
        let other = Staged {
            gathers: fill1,
            rows: 4,
            ..Staged::default()
        };
        assert_ne!(key(&same), key(&other), "fills of different values");
    }
}
