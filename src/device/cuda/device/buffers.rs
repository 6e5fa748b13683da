//! Allocation at [`Device::prepare`]: every node's output buffer and weights (the GEMM weights
//! also in f16 at f16 precision), convolutions' cuDNN plans and the workspace of the largest,
//! LSTM cell states and decoder K|V caches, and scratch sized for the model's largest gather,
//! GEMM and (on the im2col path) im2col at the maximum batch — so that serving allocates
//! nothing on the device.

use super::*;
use crate::device::memory::{self, Pool};
use crate::graph::{Carried, Node};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

/// Scratch sizes, in elements, that a model needs at the maximum batch.
struct Needs {
    a: usize,
    c: usize,
    cols: usize,
    rows: usize,
    /// Attention scores of the grouped-GEMM path.
    scores: usize,
    /// Entries of its pointer arrays (six per member and head).
    pointers: usize,
}

impl Needs {
    fn new(max_batch: usize) -> Needs {
        Needs {
            a: 1,
            c: 1,
            cols: 1,
            rows: max_batch,
            scores: 1,
            pointers: 0,
        }
    }

    /// Grows the sizes to fit node `n` (input width `in_feat`) at `mb` members, convolutions
    /// running on `conv`.
    fn fit(&mut self, n: &Node, layout: &Layout, mb: usize, in_feat: usize, conv: ConvPath) {
        let feat = layout.nodes[n.id.idx()].feat;
        let rows = if n.loop_id.is_some() {
            1
        } else {
            layout.nodes[n.id.idx()].cap.max(1)
        };
        self.rows = self.rows.max(mb * rows);
        self.a = self.a.max(mb * rows * (in_feat + feat + 3 * feat));
        self.c = self.c.max(mb * rows * 4 * feat.max(in_feat));
        if let (
            Op::Conv2d {
                kernel: (kh, kw),
                groups,
                ..
            },
            ConvPath::Im2col,
        ) = (&n.op, conv)
        {
            let (c, _, _) = n.in_chw();
            let (h, w) = n.out_hw();
            self.cols = self.cols.max(mb * h * w * (c / groups) * kh * kw);
        }
        if let Op::Lstm { hidden, .. } = &n.op {
            self.c = self.c.max(mb * 4 * hidden);
        }
        if attention::by_gemms(n) {
            if let Op::Attention { heads, .. } = &n.op {
                self.scores = self.scores.max(mb * heads * rows * rows);
                self.pointers = self.pointers.max(6 * mb * heads);
            }
        }
    }
}

/// What `prepare` allocates, computed before any allocation and checked.
struct Plan {
    layout: Layout,
    needs: Needs,
    /// Per node: the width of its concatenated inputs.
    in_feats: Vec<usize>,
    /// Segments of the largest gather.
    segs: usize,
    /// i64s of a node's index tables: its gather, scatter and cache-append segment tables
    /// (three i64 a segment) and its index arrays (two i64 and two i32 arrays a row).
    tables: usize,
}

impl Plan {
    fn new(model: &Model, mb: usize, conv: ConvPath) -> Result<Plan> {
        let layout = Layout::new(model, mb);
        let max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
        let max_enc = model.seq.as_ref().map_or(1, |s| s.max_enc as usize);
        let mut needs = Needs::new(mb);
        let in_feats: Vec<usize> = model
            .nodes
            .iter()
            .map(|n| {
                n.in_shapes
                    .iter()
                    .map(|s| s.feat.iter().product::<usize>())
                    .sum()
            })
            .collect();
        for (n, &in_feat) in model.nodes.iter().zip(&in_feats) {
            needs.fit(n, &layout, mb, in_feat, conv);
        }
        let segs = needs.rows * 8 + 64 + mb * max_enc.max(max_dec) * 4;
        let tables = 3 * (segs + needs.rows + mb) + 4 * needs.rows + needs.pointers + 8;
        fits_one_launch(model, &layout, &needs, tables)?;
        Ok(Plan {
            layout,
            needs,
            in_feats,
            segs,
            tables,
        })
    }
}

/// The kernels index elements and take counts as 32-bit integers: refuses a layout whose
/// largest buffer (a node's output at every slot, or a scratch) holds more than `i32::MAX`
/// elements, naming the buffer and the largest maximum batch that fits. Every count a kernel
/// receives is bounded by a buffer's size, so none can wrap after this check.
fn fits_one_launch(model: &Model, layout: &Layout, needs: &Needs, seg: usize) -> Result<()> {
    let limit = i32::MAX as usize;
    let mb = layout.max_batch.max(1);
    let node = layout
        .nodes
        .iter()
        .zip(&model.nodes)
        .map(|(l, n)| {
            (
                l.feat.saturating_mul(l.cap.max(1)).saturating_mul(mb),
                n.name.as_str(),
            )
        })
        .max_by_key(|x| x.0)
        .unwrap_or((0, ""));
    let scratch = [
        (needs.a, "gather scratch"),
        (needs.c, "GEMM scratch"),
        (needs.cols, "im2col scratch"),
        (needs.scores, "attention scores"),
        (seg, "index tables"),
    ];
    let (n, what) = scratch
        .into_iter()
        .chain([node])
        .max_by_key(|x| x.0)
        .unwrap_or(node);
    if n > limit {
        return Err(Error::invalid(
            "--max-batch",
            format!(
                "{} at a maximum batch of {mb}: its {what} would hold {n} elements, over the {limit} one CUDA launch can index; use a maximum batch of at most {}",
                model.name,
                (limit / n.div_ceil(mb)).max(1)
            ),
        ));
    }
    Ok(())
}

/// Whether a node's weights are also kept in f16 at f16 precision: GEMM weights, and tables
/// read by tied GEMMs.
fn has_f16_copy(op: &Op) -> bool {
    matches!(
        op,
        Op::Conv2d { .. } | Op::Linear { .. } | Op::Lstm { .. } | Op::Embedding { .. }
    )
}

/// The device bytes `allocate` takes for `model` at `layout`'s maximum batch, at `precision`
/// (f16 copies of the GEMM weights and f16 scratch), decoders running `max_dec` steps: every
/// node's output, weights and carried state, and the scratch. cuDNN's and cuBLAS's workspaces
/// are not counted (cuDNN's is known only once its plans are made; cuBLAS's is 32 MiB, taken
/// when the device opens). Saturating.
fn device_bytes(
    model: &Model,
    layout: &Layout,
    needs: &Needs,
    tables: usize,
    (precision, max_dec): (Precision, usize),
) -> u64 {
    let f16 = precision == Precision::F16;
    let outputs = (0..model.nodes.len())
        .map(|i| layout.buffer_len(i).max(1) as u64)
        .fold(0, u64::saturating_add);
    let weights = model
        .nodes
        .iter()
        .map(|n| {
            // f32 (4 bytes), and an f16 copy (2 more) of a GEMM's at f16
            let per = if has_f16_copy(&n.op) && f16 { 6 } else { 4 };
            n.cost.params.saturating_mul(per)
        })
        .fold(0, u64::saturating_add);
    let states = memory::carried_elements(model, layout, max_dec);
    let scratch = [needs.a, needs.c, needs.cols, needs.scores]
        .iter()
        .map(|&n| n as u64)
        .fold(0, u64::saturating_add);
    let n16 = if f16 {
        needs.a.max(needs.c).max(needs.cols) as u64
    } else {
        0
    };
    memory::f32_bytes(outputs.saturating_add(states).saturating_add(scratch))
        .saturating_add(weights)
        .saturating_add((tables as u64).saturating_mul(8))
        .saturating_add(n16.saturating_mul(3 * 2))
}

impl CudaDevice {
    /// Allocates everything `model` needs to serve up to `mb` requests at once, once the GPU
    /// is known to have the memory for it.
    pub(super) fn allocate(&mut self, model: &Model, mb: usize) -> Result<()> {
        // free the previous model's buffers first: a re-prepare must not need both sets
        self.lib.stream.synchronize().map_err(cuda_err)?;
        self.graphs.clear();
        self.lib.lt.clear();
        if let Some(d) = self.lib.dnn.as_mut() {
            d.clear();
        }
        self.mem.nodes.clear();
        (self.mem.input_len, self.host.pinned) = (0, None);
        (self.mem.scratch, self.mem.s16, self.mem.layout) = (None, None, None);
        self.mem.model_name.clear();
        let Plan {
            layout,
            needs,
            in_feats,
            segs,
            tables,
        } = Plan::new(model, mb, self.lib.conv_path)?;
        self.mem.max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
        // the previous model's memory is free once its frees have run
        self.lib.stream.synchronize().map_err(cuda_err)?;
        let need = device_bytes(
            model,
            &layout,
            &needs,
            tables,
            (self.precision, self.mem.max_dec),
        );
        let what = format!("the CUDA plan of '{}' at max batch {mb}", model.name);
        self.lib.ctx.bind_to_thread().map_err(cuda_err)?;
        let free = cudarc::driver::result::mem_get_info()
            .ok()
            .map(|(free, _)| free as u64);
        memory::check(Pool::Gpu, &what, need, free)?;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for (n, &in_feat) in model.nodes.iter().zip(&in_feats) {
            nodes.push(self.node_buffers(model, n, &layout, in_feat)?);
        }
        let workspace = nodes
            .iter()
            .filter_map(|g| g.conv.as_ref().map(|c| c.workspace()))
            .max();
        if let (Some(bytes), Some(d)) = (workspace, self.lib.dnn.as_mut()) {
            d.allocate_workspace(&self.lib.stream, bytes)?;
        }
        self.mem.scratch = Some(Scratch {
            a: self.zeros(needs.a)?,
            c: self.zeros(needs.c)?,
            cols: self.zeros(needs.cols)?,
            scores: self.zeros(needs.scores)?,
            tables: self.zeros(tables)?,
        });
        self.mem.s16 = if self.precision == Precision::F16 {
            let n16 = needs.a.max(needs.c).max(needs.cols);
            Some(Scratch16 {
                a: self.zeros(n16)?,
                b: self.zeros(n16)?,
                c: self.zeros(n16)?,
            })
        } else {
            None
        };
        self.host.segs = Vec::with_capacity(segs);
        self.host.staged.host = Vec::with_capacity(tables);
        self.host.host_i32 = Vec::with_capacity(needs.rows);
        self.host.host_i64 = Vec::with_capacity(needs.rows);
        self.host.host_i64b = Vec::with_capacity(needs.rows);
        self.mem.input_len = model
            .nodes
            .iter()
            .zip(&nodes)
            .filter(|(n, _)| matches!(n.op, Op::Input { .. }))
            .map(|(_, g)| g.out.len())
            .max()
            .unwrap_or(0);
        self.mem.nodes = nodes;
        self.mem.layout = Some(layout);
        self.mem.model_name = model.name.clone();
        Ok(())
    }

    /// Node `n`'s output buffer, weights and state (an LSTM's cell state, a decoder
    /// self-attention's K|V cache); on the cuDNN path a convolution's plan, which holds its
    /// weights instead.
    fn node_buffers(
        &self,
        model: &Model,
        n: &Node,
        layout: &Layout,
        in_feat: usize,
    ) -> Result<NodeGpu> {
        let mb = layout.max_batch;
        let feat = layout.nodes[n.id.idx()].feat;
        let mut w = weights::of(model, n, self.seed);
        let conv = match (&n.op, &self.lib.dnn) {
            (
                Op::Conv2d {
                    kernel,
                    stride,
                    padding,
                    groups,
                    act,
                    ..
                },
                Some(d),
            ) if self.lib.conv_path.cudnn() => {
                let (ho, wo) = n.out_hw();
                let spec = dnn::ConvSpec {
                    name: &n.name,
                    chw: n.in_chw(),
                    out_chw: (n.out.feat[0], ho, wo),
                    kernel: *kernel,
                    stride: *stride,
                    padding: *padding,
                    groups: *groups,
                    act: *act,
                    weights: &w,
                };
                let how = (self.precision, self.lib.conv_path);
                let plan = dnn::ConvPlan::new(d, &self.lib.stream, &spec, mb, how)?;
                w = Weights::default();
                Some(plan)
            }
            // the im2col path: the convolution runs as a GEMM over its unfolding
            (Op::Conv2d { .. }, _) => None,
            (
                Op::Input { .. }
                | Op::Pool { .. }
                | Op::Flatten
                | Op::Linear { .. }
                | Op::Add { .. }
                | Op::Concat
                | Op::Activation { .. }
                | Op::BatchNorm
                | Op::LayerNorm { .. }
                | Op::Softmax
                | Op::Embedding { .. }
                | Op::Lstm { .. }
                | Op::Attention { .. }
                | Op::Argmax
                | Op::Take { .. },
                _,
            ) => None,
        };
        let state = match n.carried() {
            Carried::Hidden(hidden) => Some(self.zeros(mb * hidden)?),
            Carried::KeysValues => Some(self.zeros(mb * self.mem.max_dec * 2 * feat)?),
            Carried::Nothing => None,
        };
        let gemm = has_f16_copy(&n.op);
        Ok(NodeGpu {
            out: self.zeros(layout.buffer_len(n.id.idx()).max(1))?,
            w: self.upload_weights(&w, gemm)?,
            conv,
            state,
            in_feat,
            tied: model.tied_owner(n)?,
        })
    }

    /// `n` zeroed elements on the device.
    fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.lib.stream.alloc_zeros::<T>(n).map_err(cuda_err)
    }

    fn upload(&self, v: &[f32]) -> Result<Option<CudaSlice<f32>>> {
        if v.is_empty() {
            Ok(None)
        } else {
            Ok(Some(self.lib.stream.clone_htod(v).map_err(cuda_err)?))
        }
    }

    fn upload_weights(&self, w: &Weights, gemm: bool) -> Result<GpuWeights> {
        let w16 = if gemm && self.precision == Precision::F16 && !w.w.is_empty() {
            let h: Vec<half::f16> = w.w.iter().map(|&x| half::f16::from_f32(x)).collect();
            Some(self.lib.stream.clone_htod(&h).map_err(cuda_err)?)
        } else {
            None
        };
        Ok(GpuWeights {
            w: self.upload(&w.w)?,
            w16,
            bias: self.upload(&w.bias)?,
            scale: self.upload(&w.scale)?,
            shift: self.upload(&w.shift)?,
            extra: self.upload(&w.extra)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::zoo;

    /// The refusal of `mb` on `path`: the buffer it names and the largest batch it says fits.
    fn refusal(m: &Model, mb: usize, path: ConvPath) -> (String, usize) {
        let e = Plan::new(m, mb, path).err().unwrap().to_string();
        assert!(e.contains("--max-batch"), "{e}");
        let fits = e
            .rsplit("at most ")
            .next()
            .unwrap()
            .trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap();
        (e, fits)
    }

    #[test]
    fn a_maximum_batch_whose_buffers_overflow_a_launch_is_refused_before_allocating() {
        // VGG-16's conv1_2 im2col is 224 × 224 × 64 × 9 = 28.9 M elements an image: 64
        // images fit 2^31 − 1, 149 (the review's example) do not; the error names the largest
        // maximum batch that fits, and it does
        let m = zoo::load("vgg16").unwrap();
        assert!(Plan::new(&m, 64, ConvPath::Im2col).is_ok());
        let (e, fits) = refusal(&m, 149, ConvPath::Im2col);
        assert!(e.contains("im2col"), "{e}");
        assert!(
            Plan::new(&m, fits, ConvPath::Im2col).is_ok()
                && Plan::new(&m, fits + 1, ConvPath::Im2col).is_err(),
            "{fits}"
        );
        // cuDNN needs no im2col scratch: the next largest buffer (the gather scratch) sets a
        // higher limit
        let (e, dnn_fits) = refusal(&m, 4096, ConvPath::Cudnn);
        assert!(e.contains("gather scratch"), "{e}");
        assert!(
            dnn_fits > fits && Plan::new(&m, dnn_fits, ConvPath::Cudnn).is_ok(),
            "{dnn_fits}"
        );
    }
}
