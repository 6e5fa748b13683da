//! The CPU device: every node of the zoo executed for real in f32, on buffers preallocated at
//! [`Device::prepare`] for the maximum batch. A request's activations live in its slot
//! (`Member::slot`) of every node's buffer for its whole life, so preempting and merging
//! sub-batches moves nothing: a sub-batch is only a list of slots. Batched GEMMs gather their
//! members' rows into preallocated scratch, run one GEMM, and scatter the rows back.
//!
//! Weights are generated from a seed (uniform, variance `gain / fan_in`, gain 2 before a ReLU)
//! so activations stay finite through every network; inputs are generated per request from its
//! input key and the seed. Images (rank-3 tensors) are stored channels-last (`hwc` says why and
//! converts at the edges: the model input, `Flatten`, captured outputs); convolutions run per
//! image, which keeps every request's result independent of the batch it ran in. One file per
//! op family — `conv`, `pool`, `linear`, `recurrent`, `attention`, `rows` — as in the CUDA
//! device, so that an op reads the same way on both; `residual` and `separable` say which nodes
//! a convolution computes besides its own (a residual add, a deferred depthwise convolution);
//! `kernels`, `hwc`, `direct` and `winograd` hold the numeric kernels, `par` how they split
//! work, `team` the threads that run it, `weights` the generated weights, `prepared` how the
//! device holds them (packed, or transformed for Winograd), and `arena` where the nodes'
//! outputs live (image models' share memory by liveness).

mod activation;
pub mod aligned;
mod arena;
mod attention;
mod conv;
mod direct;
pub mod fastmath;
pub mod hwc;
pub mod kernels;
mod linear;
pub mod panels;
pub(crate) mod par;
mod pool;
mod prepared;
mod recurrent;
mod reduce;
mod residual;
mod rowgemm;
mod rows;
mod separable;
pub mod team;
mod winograd;

use super::layout::{Layout, NodeLayout, Seg, Src};
use super::memory;
use super::weights::{self, Weights};
use super::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::op::Op;
use crate::graph::{Carried, Input, Model, Node, NodeStep, Rows};
use crate::time::Nanos;
use aligned::Aligned;
use kernels::{ActK, Window};
use panels::Panels;
use std::time::Instant;

#[derive(Debug)]
struct NodeRt {
    /// Output buffer, laid out by [`Layout`]: a region of the device's arena ([`arena`]).
    out: arena::Buf,
    w: Weights,
    /// LSTM cell state (`max_batch × H`) or decoder self-attention K|V cache
    /// (`max_batch × max_dec × 2D`).
    state: Vec<f32>,
    /// Σ of input widths (the concatenated input row).
    in_feat: usize,
    /// Owner of a tied table.
    tied: Option<usize>,
    /// A linear or LSTM layer's weight matrix, packed for the row GEMM (its `w.w` is then
    /// empty: the weights are held once).
    panels: Panels,
    /// A 3×3 convolution's filters transformed for Winograd's algorithm (its `panels` are
    /// then empty: [`winograd::applies`] says which).
    wino: Option<winograd::Winograd>,
    /// A convolution's: the residual add it completes in its epilogue
    /// ([`residual::fuse_residuals`]).
    residual: Option<residual::Residual>,
    /// An add's: computed by its producer's epilogue, nothing left to do.
    fused: bool,
    /// A depthwise convolution's: computed by the 1×1 convolution that reads it
    /// ([`separable`]), nothing to do at its own place.
    deferred: bool,
    /// A 1×1 convolution's: the deferred depthwise convolution it computes first.
    pre: Option<usize>,
    /// A convolution's: runs each thread's images in reverse at batch ≥ 2
    /// ([`conv::runs_reversed`]).
    reversed: bool,
}

pub use crate::device::capture::Captured;
use crate::device::capture::{Capture, CaptureMode};

/// The CPU device.
#[derive(Debug)]
pub struct CpuDevice {
    seed: u64,
    model_name: String,
    max_batch: usize,
    layout: Layout,
    nodes: Vec<NodeRt>,
    /// The memory of every node's output ([`arena`]).
    arena: Aligned,
    scratch_a: Aligned,
    scratch_c: Aligned,
    /// Unfolding scratch, one per thread of the pool (convolutions run images in parallel).
    cols: Vec<std::sync::Mutex<Aligned>>,
    /// The member index of each slot during a parallel convolution ([`NO_MEMBER`] otherwise).
    slot_member: Vec<u32>,
    scores: Vec<f32>,
    capture: Capture,
}

fn act_k(a: crate::graph::op::Act) -> ActK {
    use crate::graph::op::Act as A;
    match a {
        A::None => ActK::None,
        A::Relu => ActK::Relu,
        A::Relu6 => ActK::Relu6,
        A::Gelu => ActK::Gelu,
        A::GeluErf => ActK::GeluErf,
        A::Tanh => ActK::Tanh,
        A::Sigmoid => ActK::Sigmoid,
    }
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// Images with fewer output pixels than this (ResNet's last stage: 7 × 7) run their GEMM as one
/// block whose columns the cores share, rather than a share of the pixels each.
const SMALL_IMAGE: usize = 128;

/// No member in this slot (see `CpuDevice::slot_member`).
const NO_MEMBER: u32 = u32::MAX;

/// A convolution's or a pooling's window over its input (None: another op).
fn window(node: &Node) -> Option<Window> {
    let (kernel, stride, pad) = match &node.op {
        Op::Conv2d {
            kernel,
            stride,
            padding,
            ..
        } => (*kernel, *stride, *padding),
        Op::Pool {
            kernel,
            stride,
            padding,
            ..
        } => ((*kernel, *kernel), *stride, *padding),
        Op::Input { .. }
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
        | Op::Take { .. } => return None,
    };
    let out = node.out_hw();
    Some(Window {
        kernel,
        stride,
        pad,
        out,
    })
}

/// A tensor's `(C, H, W)` when it is an image (rank 3), which this device stores channels-last.
fn image(feat: &[usize]) -> Option<(usize, usize, usize)> {
    match feat {
        [c, h, w] => Some((*c, *h, *w)),
        _ => None,
    }
}

/// An embedding table that a linear layer reads as its weights (tied logits) moves into
/// [`Panels`] of its transpose, held once: the logits GEMM streams it like any packed layer,
/// and lookups read a column of it.
fn tie_tables(model: &Model, nodes: &mut [NodeRt]) {
    for n in &model.nodes {
        let (Op::Linear { .. }, Some(t)) = (&n.op, nodes[n.id.idx()].tied) else {
            continue;
        };
        let Op::Embedding { vocab, dim, .. } = model.nodes[t].op else {
            continue;
        };
        let owner = &mut nodes[t];
        if owner.panels.data.is_empty() {
            owner.panels = Panels::pack_transposed(&owner.w.w, vocab, dim);
            owner.w.w = Vec::new();
        }
    }
}

/// Largest row count of a tensor over the model's lengths.
fn max_rows(model: &Model, r: Rows) -> usize {
    let max_enc = model.seq.as_ref().map_or(1, |s| s.max_enc);
    r.count(max_enc) as usize
}

/// `--device cpu`.
pub(crate) const DEVICE: crate::device::RealDevice = crate::device::RealDevice {
    name: "cpu",
    auto: false,
    usable: || Ok(1),
    open: |o| Ok(Box::new(CpuDevice::new(o.seed))),
    precisions: &["f32"],
    graphs: false,
    convs: false,
};

impl CpuDevice {
    /// A CPU device whose weights and inputs derive from `seed`.
    pub fn new(seed: u64) -> Self {
        CpuDevice {
            seed,
            model_name: String::new(),
            max_batch: 0,
            layout: Layout {
                nodes: Vec::new(),
                max_batch: 0,
            },
            nodes: Vec::new(),
            arena: Aligned::default(),
            scratch_a: Aligned::default(),
            scratch_c: Aligned::default(),
            cols: Vec::new(),
            slot_member: Vec::new(),
            scores: Vec::new(),
            capture: Capture::default(),
        }
    }

    fn row(&self, i: usize, slot: u32, pos: usize) -> &[f32] {
        let o = self.layout.offset(i, slot, pos);
        &self.nodes[i].out[o..o + self.layout.nodes[i].feat]
    }

    /// Performs one input copy into a row buffer.
    fn copy_seg(&self, seg: Seg, dst: &mut [f32]) {
        let d = &mut dst[seg.dst..seg.dst + seg.len];
        match seg.src {
            Src::Node { node, off } => d.copy_from_slice(&self.nodes[node].out[off..off + seg.len]),
            Src::Fill(v) => d.iter_mut().for_each(|x| *x = v),
        }
    }

    /// Writes the consumer's input row `r` (all inputs concatenated) for member `m` into `dst`.
    fn gather_row(&self, model: &Model, node: &Node, m: &Member, r: usize, dst: &mut [f32]) {
        let mut off = 0;
        for (k, inp) in node.inputs.iter().enumerate() {
            self.layout.input_segs(model, node, inp, m, r, |seg| {
                let dst_at = seg.dst + off;
                self.copy_seg(Seg { dst: dst_at, ..seg }, dst)
            });
            off += numel(&node.in_shapes[k].feat);
        }
    }

    /// Writes input `inp`'s row `r` for member `m` into `dst`.
    fn read_input(
        &self,
        model: &Model,
        node: &Node,
        inp: &Input,
        m: &Member,
        r: usize,
        dst: &mut [f32],
    ) {
        self.layout
            .input_segs(model, node, inp, m, r, |seg| self.copy_seg(seg, dst));
    }

    /// The rows (`valid` of them) of a sequence input seen whole (attention keys/values).
    fn seq_input(&self, model: &Model, inp: &Input, m: &Member) -> (usize, usize) {
        let p = inp.node.idx();
        (p, Layout::valid_rows(model, p, m.len))
    }

    /// Where input `k`'s row `r` for member `m` lies when it is one run of an earlier node's
    /// buffer, the input's whole width: `(producer, offset)`; None when it must be gathered.
    fn input_run(
        &self,
        model: &Model,
        node: &Node,
        k: usize,
        m: &Member,
        r: usize,
    ) -> Option<(usize, usize)> {
        let width = numel(&node.in_shapes[k].feat);
        let mut found = (None, 0);
        self.layout
            .input_segs(model, node, &node.inputs[k], m, r, |seg| {
                found.1 += 1;
                if let Src::Node { node: p, off } = seg.src {
                    if p < node.id.idx() && seg.len == width {
                        found.0 = Some((p, off));
                    }
                }
            });
        found.0.filter(|_| found.1 == 1)
    }

    fn scatter_row(&mut self, i: usize, slot: u32, pos: usize, src: &[f32]) {
        self.out_row_mut(i, slot, pos).copy_from_slice(src);
    }

    fn out_row_mut(&mut self, i: usize, slot: u32, pos: usize) -> &mut [f32] {
        let o = self.layout.offset(i, slot, pos);
        &mut self.nodes[i].out[o..o + self.layout.nodes[i].feat]
    }

    fn check_capacity(&self, model: &Model, members: &[Member]) -> Result<()> {
        if model.name != self.model_name {
            return Err(Error::Internal(format!(
                "cpu device prepared for {}, asked to run {}",
                self.model_name, model.name
            )));
        }
        if members.len() > self.max_batch {
            return Err(Error::Internal(
                "sub-batch larger than the prepared maximum".into(),
            ));
        }
        for m in members {
            if m.slot as usize >= self.max_batch {
                return Err(Error::Internal(format!(
                    "slot {} beyond the prepared {}",
                    m.slot, self.max_batch
                )));
            }
            if let Some(s) = &model.seq {
                if m.len.enc > s.max_enc || m.len.dec > s.max_dec {
                    return Err(Error::Internal(format!(
                        "lengths {}/{} exceed the model's maxima {}/{}",
                        m.len.enc, m.len.dec, s.max_enc, s.max_dec
                    )));
                }
            }
        }
        Ok(())
    }

    /// Runs node `i` (the body of `execute`).
    fn run_node(&mut self, model: &Model, at: NodeStep, members: &[Member]) {
        let i = at.node.idx();
        let node = &model.nodes[i];
        match &node.op {
            Op::Input { shape, tokens, .. } => {
                let feat = numel(shape);
                for m in members {
                    let rows = Layout::rows(node, m.len);
                    let base = self.layout.offset(i, m.slot, 0);
                    let out = &mut self.nodes[i].out[base..base + rows * feat];
                    let given = self
                        .capture
                        .exchange()
                        .and_then(|x| x.input_for(m.input, rows * feat, feat));
                    match (given, image(shape)) {
                        // a front end's values, one request's worth in the graph's order
                        (Some(v), chw) => match chw {
                            Some(chw) => hwc::to_hwc(&v, chw, out),
                            None => out.copy_from_slice(&v),
                        },
                        // the [C, H, W] values, stored channels-last
                        (_, Some(chw)) => {
                            for row in out.chunks_exact_mut(feat) {
                                weights::fill_input_hwc(row, self.seed, m.input, i as u64, chw);
                            }
                        }
                        (_, None) => {
                            weights::fill_input(out, self.seed, m.input, i as u64, *tokens)
                        }
                    }
                }
            }
            Op::Conv2d { .. } => self.conv(model, i, members),
            Op::Pool { .. } => self.pool(model, i, members),
            Op::Linear { act, .. } => self.linear(model, i, members, act_k(*act)),
            Op::Lstm { hidden, .. } => self.lstm(model, i, members, *hidden),
            Op::Attention { mode, heads } => self.attention(model, i, members, *mode, *heads),
            // every other op, named: a new op is a compile error here, not a silent row copy
            Op::Flatten
            | Op::Add { .. }
            | Op::Concat
            | Op::Activation { .. }
            | Op::BatchNorm
            | Op::LayerNorm { .. }
            | Op::Softmax
            | Op::Embedding { .. }
            | Op::Argmax
            | Op::Take { .. } => self.rowwise(model, i, members),
        }
        if self.capture.is_on() {
            self.capture_outputs(model, i, members);
        }
    }

    fn capture_outputs(&mut self, model: &Model, i: usize, members: &[Member]) {
        if !self.capture.wants(model, i) {
            return;
        }
        for m in members {
            let node = &model.nodes[i];
            let mut v = Vec::new();
            for r in 0..Layout::rows(node, m.len) {
                let pos = self.layout.out_pos(model, i, m.step, r, m.len);
                let row = self.row(i, m.slot, pos);
                match image(&node.out.feat) {
                    // captured in the graph's [C, H, W] order
                    Some(chw) => {
                        let at = v.len();
                        v.resize(at + row.len(), 0.0);
                        hwc::to_chw(row, chw, &mut v[at..]);
                    }
                    None => v.extend_from_slice(row),
                }
            }
            self.capture.record(model, i, m.step, m.input, v);
        }
    }
}

impl Device for CpuDevice {
    /// Starts (or stops) capturing final outputs per request, for `verify`.
    fn set_capture(&mut self, mode: CaptureMode) {
        self.capture = self.capture.recording(mode);
    }

    /// Takes the captured outputs.
    fn take_captured(&mut self) -> Capture {
        self.capture.take()
    }

    /// Serves a front end: inputs from `x` where it holds them, each request's final outputs
    /// (captured as `verify` captures them) handed to `x` when it completes.
    fn set_exchange(&mut self, x: Option<std::sync::Arc<crate::device::exchange::Exchange>>) {
        self.capture = Capture::exchanging(x);
    }

    fn complete(&mut self, m: &Member) {
        self.capture.hand_over(m.input);
    }

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// `cpu (2 threads)`: the thread count changes every timing, so it names the device (a
    /// profile measured with other threads is refused).
    fn description(&self) -> String {
        let n = team::team().threads();
        format!("cpu ({n} thread{})", if n == 1 { "" } else { "s" })
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let mb = max_batch as usize;
        // the linear layers' packing buffers on the serving thread, before serving
        rowgemm::reserve();
        let layout = Layout::new(model, mb);
        let max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
        let what = format!("the CPU plan of '{}' at max batch {mb}", model.name);
        // before a weight is drawn: every weight, and the largest twice (drawn, then packed),
        // and every node's state across steps
        let states = memory::carried_elements(model, &layout, max_dec);
        let largest = model.nodes.iter().map(|n| n.cost.params).max().unwrap_or(0);
        let first = model
            .params()
            .saturating_add(largest)
            .saturating_add(states);
        memory::check_host(&what, memory::f32_bytes(first))?;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        let (mut need_a, mut need_c, mut need_cols, mut need_scores) =
            (1usize, 1usize, 1usize, 1usize);
        for n in &model.nodes {
            let NodeLayout { feat, cap, .. } = layout.nodes[n.id.idx()];
            let in_feat: usize = n.in_shapes.iter().map(|s| numel(&s.feat)).sum();
            let rows = if n.loop_id.is_some() { 1 } else { cap };
            let tied = model.tied_owner(n)?;
            let w = prepared::cpu_weights(n, weights::of(model, n, self.seed));
            let state = match n.carried() {
                Carried::Hidden(hidden) => vec![0.0; mb * hidden],
                Carried::KeysValues => vec![0.0; mb * max_dec * 2 * feat],
                Carried::Nothing => Vec::new(),
            };
            let max_in_rows = n
                .in_shapes
                .iter()
                .map(|s| max_rows(model, s.rows))
                .max()
                .unwrap_or(1);
            let (w, panels, wino) = prepared::weight_panels(n, w, in_feat);
            match (&n.op, &wino) {
                // a convolution run by Winograd needs its tiles' scratch, not an unfolding's
                (Op::Conv2d { .. }, Some(wg)) => {
                    need_cols = need_cols.max(wg.scratch_len(n.out_hw()));
                }
                (
                    Op::Conv2d {
                        out_channels,
                        kernel: (kh, kw),
                        stride,
                        padding,
                        groups,
                        ..
                    },
                    None,
                ) => {
                    let (c, _, _) = n.in_chw();
                    let p = n.out_hw().0 * n.out_hw().1;
                    let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
                    let in_place =
                        pointwise || direct::applies(*groups, (c, *out_channels), kh * kw);
                    let k = (c / groups) * kh * kw;
                    let n = *out_channels;
                    need_cols = need_cols.max(conv::scratch_len(p, *groups, (k, n), in_place, mb));
                }
                (Op::Linear { .. }, _) => {
                    need_a = need_a.max(mb * rows * in_feat);
                    need_c = need_c.max(mb * rows * feat);
                }
                (Op::Lstm { hidden, .. }, _) => {
                    need_a = need_a.max(mb * (in_feat + hidden));
                    need_c = need_c.max(mb * 4 * hidden);
                }
                (Op::Input { shape, .. }, _) => need_a = need_a.max(numel(shape)),
                (Op::Attention { heads, .. }, _) => {
                    need_a = need_a.max(in_feat.max(3 * feat));
                    // (additive attention's terms of one score use it too)
                    need_c = need_c.max(rows * feat).max(in_feat);
                    // self-attention keeps every head's scores at once
                    let all_heads = heads.max(&1) * rows * rows;
                    // (a decoder-only model's decode step: its prompt's keys, then its cache's)
                    need_scores = need_scores.max((max_in_rows + max_dec).max(all_heads));
                }
                (
                    Op::Pool { .. }
                    | Op::Flatten
                    | Op::Add { .. }
                    | Op::Concat
                    | Op::Activation { .. }
                    | Op::BatchNorm
                    | Op::LayerNorm { .. }
                    | Op::Softmax
                    | Op::Embedding { .. }
                    | Op::Argmax
                    | Op::Take { .. },
                    _,
                ) => {
                    need_a = need_a.max(in_feat);
                    need_c = need_c.max(feat);
                }
            }
            nodes.push(NodeRt {
                out: arena::Buf::default(),
                w,
                state,
                in_feat,
                tied,
                panels,
                wino,
                residual: None,
                fused: false,
                deferred: false,
                pre: None,
                reversed: false,
            });
        }
        tie_tables(model, &mut nodes);
        residual::fuse_residuals(model, &mut nodes);
        separable::defer_depthwise(model, &mut nodes);
        let deferred: Vec<bool> = nodes.iter().map(|n| n.deferred).collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            n.reversed = conv::runs_reversed(model, i, &deferred);
            if let Some(d) = n.pre {
                let dw = &model.nodes[d];
                let ((ho, wo), c) = (dw.out_hw(), dw.in_chw().0);
                need_cols = need_cols.max(separable::scratch_len((ho, wo, c)));
            }
        }
        // the outputs' regions, now that the fused residual sums say who writes what and the
        // deferred depthwise convolutions who reads what
        let lens: Vec<usize> = (0..nodes.len()).map(|i| layout.buffer_len(i)).collect();
        let mut written_by = vec![None; nodes.len()];
        let mut read_by = vec![None; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            if let Some(r) = n.residual {
                written_by[r.add] = Some(i);
            }
            if let Some(d) = n.pre {
                let src = model.nodes[d].inputs[0].node.idx();
                read_by[src] = read_by[src].max(Some(i));
            }
        }
        let plan = arena::plan(model, &lens, (&written_by, &read_by));
        // before the activations: the arena and the scratch, against what is left now that
        // the weights are drawn
        let threads = team::team().threads();
        let rest = [plan.len, need_a, need_c.max(mb), need_scores]
            .iter()
            .map(|&n| n as u64)
            .fold(
                (need_cols as u64).saturating_mul(threads as u64),
                u64::saturating_add,
            );
        memory::check_host(&what, memory::f32_bytes(rest))?;
        let (arena, bufs) = plan.allocate();
        for (n, buf) in nodes.iter_mut().zip(bufs) {
            n.out = buf;
        }
        self.nodes = nodes;
        self.arena = arena;
        self.layout = layout;
        self.scratch_a = Aligned::zeroed(need_a);
        // (an argmax's picks take one value a member)
        self.scratch_c = Aligned::zeroed(need_c.max(mb));
        // the team's helpers start now, not in the first pass; each thread its unfolding scratch
        self.cols = (0..team::team().threads())
            .map(|_| std::sync::Mutex::new(Aligned::zeroed(need_cols)))
            .collect();
        self.slot_member = vec![NO_MEMBER; mb];
        self.scores = vec![0.0; need_scores];
        self.max_batch = mb;
        self.model_name = model.name.clone();
        Ok(())
    }

    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        self.check_capacity(model, members)?;
        let t0 = Instant::now();
        self.run_node(model, at, members);
        Ok(Timing {
            time: Nanos(t0.elapsed().as_nanos() as u64),
            ..Timing::default()
        })
    }
}

/// What the CPU device's unit tests share: a model from its text on a prepared device, and
/// members to serve.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use crate::device::Device;

    /// The model in `text` and a CPU device (weights from `seed`) prepared for it at batch 4.
    pub(crate) fn prepared(text: &str, seed: u64) -> (Model, CpuDevice) {
        let model = crate::graph::loader::parse_model(text, "test.toml".as_ref()).unwrap();
        let mut dev = CpuDevice::new(seed);
        dev.prepare(&model, 4).unwrap();
        (model, dev)
    }

    /// Requests in `slots`, each with input key `key(slot)`, at step 0 and the model's
    /// reference lengths.
    pub(crate) fn members(model: &Model, slots: &[u32], key: impl Fn(u32) -> u64) -> Vec<Member> {
        slots
            .iter()
            .map(|&slot| Member {
                slot,
                len: model.ref_lengths(),
                input: key(slot),
                step: 0,
            })
            .collect()
    }

    /// Nodes `nodes` of a static model executed once each for `members`, in order.
    pub(crate) fn run(dev: &mut CpuDevice, model: &Model, nodes: usize, members: &[Member]) {
        for n in &model.nodes[..nodes] {
            let at = NodeStep {
                node: n.id,
                step: 0,
            };
            dev.execute(model, at, members).unwrap();
        }
    }
}
