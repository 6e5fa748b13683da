//! The CPU device: every node of the zoo executed for real in f32, on buffers preallocated at
//! [`Device::prepare`] for the maximum batch. A request's activations live in its slot
//! (`Member::slot`) of every node's buffer for its whole life, so preempting and merging
//! sub-batches moves nothing: a sub-batch is only a list of slots. Batched GEMMs gather their
//! members' rows into preallocated scratch, run one GEMM, and scatter the rows back.
//!
//! Weights are generated from a seed (uniform, variance `gain / fan_in`, gain 2 before a ReLU)
//! so activations stay finite through every network; inputs are generated per request from its
//! input key and the seed. Convolutions run per image (im2col + GEMM), which keeps every
//! request's result independent of the batch it ran in.

pub mod kernels;
pub mod weights;

use super::layout::{Layout, NodeLayout, Seg, Src};
use super::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::op::{AttnMode, Op, PoolKind, PosEnc};
use crate::graph::{Class, Input, Model, Node, NodeStep, Rows};
use crate::time::Nanos;
use kernels::ActK;
use std::time::Instant;
use weights::Weights;

#[derive(Debug)]
struct NodeRt {
    /// Output buffer, laid out by [`Layout`].
    out: Vec<f32>,
    w: Weights,
    /// LSTM cell state (`max_batch × H`) or decoder self-attention K|V cache
    /// (`max_batch × max_dec × 2D`).
    state: Vec<f32>,
    /// Σ of input widths (the concatenated input row).
    in_feat: usize,
    /// Owner of a tied table.
    tied: Option<usize>,
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
    scratch_a: Vec<f32>,
    scratch_c: Vec<f32>,
    cols: Vec<f32>,
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
        A::Tanh => ActK::Tanh,
        A::Sigmoid => ActK::Sigmoid,
    }
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// Largest row count of a tensor over the model's lengths.
fn max_rows(model: &Model, r: Rows) -> usize {
    let max_enc = model.seq.as_ref().map_or(1, |s| s.max_enc);
    r.count(max_enc) as usize
}

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
            scratch_a: Vec::new(),
            scratch_c: Vec::new(),
            cols: Vec::new(),
            scores: Vec::new(),
            capture: Capture::default(),
        }
    }

    /// Bytes of activation, state and scratch buffers (weights excluded).
    pub fn activation_bytes(&self) -> usize {
        4 * (self
            .nodes
            .iter()
            .map(|n| n.out.len() + n.state.len())
            .sum::<usize>()
            + self.scratch_a.len()
            + self.scratch_c.len()
            + self.cols.len()
            + self.scores.len())
    }

    /// Bytes of weights.
    pub fn weight_bytes(&self) -> usize {
        4 * self.nodes.iter().map(|n| n.w.count()).sum::<usize>()
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
    fn gather_row(
        &self,
        model: &Model,
        node: &Node,
        m: &Member,
        step: u32,
        r: usize,
        dst: &mut [f32],
    ) {
        let mut off = 0;
        for (k, inp) in node.inputs.iter().enumerate() {
            self.layout
                .input_segs(model, node, inp, m.slot, m.len, step, r, off, |seg| {
                    self.copy_seg(seg, dst)
                });
            off += numel(&node.in_shapes[k].feat);
        }
    }

    /// Writes input `inp`'s row `r` for member `m` into `dst`.
    #[allow(clippy::too_many_arguments)]
    fn read_input(
        &self,
        model: &Model,
        node: &Node,
        inp: &Input,
        m: &Member,
        step: u32,
        r: usize,
        dst: &mut [f32],
    ) {
        self.layout
            .input_segs(model, node, inp, m.slot, m.len, step, r, 0, |seg| {
                self.copy_seg(seg, dst)
            });
    }

    /// The rows (`valid` of them) of a sequence input seen whole (attention keys/values).
    fn seq_input(&self, model: &Model, inp: &Input, m: &Member) -> (usize, usize) {
        let p = inp.node.idx();
        (p, Layout::valid_rows(model, p, m.len))
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
                    weights::fill_input(out, self.seed, m.input, i as u64, *tokens);
                }
            }
            Op::Conv2d { .. } => self.conv(model, i, members),
            Op::Pool {
                kind,
                kernel,
                stride,
                padding,
            } => {
                let (c, h, w) = (
                    node.in_shapes[0].feat[0],
                    node.in_shapes[0].feat[1],
                    node.in_shapes[0].feat[2],
                );
                let (ho, wo) = (node.out.feat[1], node.out.feat[2]);
                let mut a = std::mem::take(&mut self.scratch_a);
                for m in members {
                    let step = m.step;
                    self.gather_row(model, node, m, step, 0, &mut a[..c * h * w]);
                    let out = self.out_row_mut(i, m.slot, 0);
                    match kind {
                        PoolKind::GlobalAvg => {
                            kernels::pool(&a, (c, h, w), h.max(w), 1, 0, (1, 1), false, out)
                        }
                        PoolKind::Max | PoolKind::Avg => kernels::pool(
                            &a,
                            (c, h, w),
                            *kernel,
                            *stride,
                            *padding,
                            (ho, wo),
                            *kind == PoolKind::Max,
                            out,
                        ),
                    }
                }
                self.scratch_a = a;
            }
            Op::Linear { act, .. } => self.linear(model, i, members, act_k(*act)),
            Op::Lstm { hidden, .. } => self.lstm(model, i, members, *hidden),
            Op::Attention { mode, heads } => self.attention(model, i, members, *mode, *heads),
            _ => self.rowwise(model, i, members),
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
                v.extend_from_slice(self.row(i, m.slot, pos));
            }
            self.capture.record(model, i, m.step, m.input, v);
        }
    }

    fn conv(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let Op::Conv2d {
            out_channels,
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            act,
            ..
        } = &node.op
        else {
            return;
        };
        let (c, h, w) = (
            node.in_shapes[0].feat[0],
            node.in_shapes[0].feat[1],
            node.in_shapes[0].feat[2],
        );
        let (ho, wo) = (node.out.feat[1], node.out.feat[2]);
        let p = ho * wo;
        let (g, co) = (*groups, *out_channels);
        let (cg, cog) = (c / g, co / g);
        let kk = cg * kh * kw;
        let depthwise = node.op.is_depthwise(c);
        let mut cols = std::mem::take(&mut self.cols);
        let mut a = std::mem::take(&mut self.scratch_a);
        let prod = node.inputs[0].node.idx();
        for m in members {
            a[..c * h * w].copy_from_slice(self.row(prod, m.slot, 0));
            let o = self.layout.offset(i, m.slot, 0);
            let n = &mut self.nodes[i];
            let (wts, out) = (&n.w, &mut n.out[o..o + co * p]);
            if depthwise {
                kernels::depthwise(
                    &a,
                    (c, h, w),
                    &wts.w,
                    (*kh, *kw),
                    *stride,
                    *padding,
                    (ho, wo),
                    out,
                );
            } else {
                let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
                for gi in 0..g {
                    let wg = &wts.w[gi * kk * cog..(gi + 1) * kk * cog];
                    // A[pixel, k] read from a [K × P] layout; C[pixel, channel] written
                    // channel-major into the [C, H, W] output
                    let a_kp: &[f32] = if pointwise {
                        &a[gi * cg * p..(gi + 1) * cg * p]
                    } else {
                        kernels::im2col_kp(
                            &a,
                            (h, w),
                            (gi * cg, cg),
                            (*kh, *kw),
                            *stride,
                            *padding,
                            (ho, wo),
                            &mut cols,
                        );
                        &cols
                    };
                    kernels::gemm_strided(
                        p,
                        cog,
                        kk,
                        a_kp,
                        (1, p),
                        wg,
                        (cog, 1),
                        &mut out[gi * cog * p..],
                        (1, p),
                        false,
                    );
                }
            }
            let ak = act_k(*act);
            for ch in 0..co {
                let (sc, sh) = (
                    wts.scale.get(ch).copied().unwrap_or(1.0),
                    wts.shift.get(ch).copied().unwrap_or(0.0),
                );
                for v in &mut out[ch * p..(ch + 1) * p] {
                    *v = kernels::act1(ak, *v * sc + sh);
                }
            }
        }
        self.cols = cols;
        self.scratch_a = a;
    }

    fn linear(&mut self, model: &Model, i: usize, members: &[Member], ak: ActK) {
        let node = &model.nodes[i];
        let k = self.nodes[i].in_feat;
        let n = self.layout.nodes[i].feat;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        let mut r_total = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                self.gather_row(
                    model,
                    node,
                    m,
                    step,
                    r,
                    &mut a[r_total * k..(r_total + 1) * k],
                );
                r_total += 1;
            }
        }
        match self.nodes[i].tied {
            // the tied table is [n × k]: read it transposed
            Some(t) => {
                kernels::gemm_rows(r_total, n, k, &mut a, &self.nodes[t].w.w, (1, k), &mut c)
            }
            None => kernels::gemm_rows(r_total, n, k, &mut a, &self.nodes[i].w.w, (n, 1), &mut c),
        }
        let bias = &self.nodes[i].w.bias;
        for row in c[..r_total * n].chunks_exact_mut(n) {
            if !bias.is_empty() {
                for (v, b) in row.iter_mut().zip(bias) {
                    *v += b;
                }
            }
            kernels::act(ak, row);
        }
        let mut r_at = 0;
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                let pos = self.layout.out_pos(model, i, step, r, m.len);
                let src = &c[r_at * n..(r_at + 1) * n];
                let nd = &mut self.nodes[i];
                let o = self.layout.offset(i, m.slot, pos);
                nd.out[o..o + n].copy_from_slice(src);
                r_at += 1;
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }

    fn lstm(&mut self, model: &Model, i: usize, members: &[Member], h: usize) {
        let node = &model.nodes[i];
        let kx = self.nodes[i].in_feat;
        let k = kx + h;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        for (j, m) in members.iter().enumerate() {
            let step = m.step;
            let row = &mut a[j * k..(j + 1) * k];
            self.gather_row(model, node, m, step, 0, &mut row[..kx]);
            if step == 0 {
                row[kx..].iter_mut().for_each(|v| *v = 0.0);
            } else {
                let pos = self.layout.pos(model, i, step - 1, m.len);
                row[kx..].copy_from_slice(self.row(i, m.slot, pos));
            }
        }
        let b = members.len();
        kernels::gemm_rows(b, 4 * h, k, &mut a, &self.nodes[i].w.w, (4 * h, 1), &mut c);
        for (j, m) in members.iter().enumerate() {
            let step = m.step;
            let gates = &mut c[j * 4 * h..(j + 1) * 4 * h];
            for (g, bb) in gates.iter_mut().zip(&self.nodes[i].w.bias) {
                *g += bb;
            }
            let pos = self.layout.pos(model, i, step, m.len);
            let nd = &mut self.nodes[i];
            let cs = &mut nd.state[m.slot as usize * h..(m.slot as usize + 1) * h];
            if step == 0 {
                cs.iter_mut().for_each(|v| *v = 0.0);
            }
            let o = self.layout.offset(i, m.slot, pos);
            kernels::lstm_cell(gates, cs, &mut nd.out[o..o + h]);
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }

    fn attention(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) {
        let node = &model.nodes[i];
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        let mut scores = std::mem::take(&mut self.scores);
        let dout = self.layout.nodes[i].feat;
        for m in members {
            let step = m.step;
            match mode {
                AttnMode::Additive | AttnMode::Dot => {
                    let d = numel(&node.in_shapes[0].feat);
                    self.read_input(model, node, &node.inputs[0], m, step, 0, &mut a[..d]);
                    let (kp, nk) = self.seq_input(model, &node.inputs[1], m);
                    let (vp, _) = self.seq_input(model, &node.inputs[2], m);
                    let q = &a[..d];
                    let s = &mut scores[..nk];
                    if mode == AttnMode::Additive {
                        let w = &self.nodes[i].w;
                        let (vn, bias) = (&w.w, &w.bias);
                        for (j, sj) in s.iter_mut().enumerate() {
                            let key = self.row(kp, m.slot, j);
                            *sj = (0..d)
                                .map(|t| vn[t] * (key[t] + q[t] + bias[t]).tanh())
                                .sum();
                        }
                    } else {
                        for (j, sj) in s.iter_mut().enumerate() {
                            *sj = q
                                .iter()
                                .zip(self.row(kp, m.slot, j))
                                .map(|(x, y)| x * y)
                                .sum();
                        }
                    }
                    kernels::softmax(s);
                    let out = &mut c[..dout];
                    out.iter_mut().for_each(|v| *v = 0.0);
                    for (j, &pj) in s.iter().enumerate() {
                        for (o, v) in out.iter_mut().zip(self.row(vp, m.slot, j)) {
                            *o += pj * v;
                        }
                    }
                    let pos = self.layout.pos(model, i, step, m.len);
                    let src = &c[..dout];
                    let nd = &mut self.nodes[i];
                    let o = self.layout.offset(i, m.slot, pos);
                    nd.out[o..o + dout].copy_from_slice(src);
                }
                AttnMode::SelfAttn if node.class == Class::Decoder => {
                    let d = dout;
                    self.read_input(model, node, &node.inputs[0], m, step, 0, &mut a[..3 * d]);
                    let max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
                    let base = m.slot as usize * max_dec * 2 * d;
                    {
                        let st = &mut self.nodes[i].state;
                        let t = base + step as usize * 2 * d;
                        st[t..t + 2 * d].copy_from_slice(&a[d..3 * d]);
                    }
                    let dh = d / heads;
                    let scale = 1.0 / (dh as f32).sqrt();
                    let st = &self.nodes[i].state;
                    let nk = step as usize + 1;
                    for hd in 0..heads {
                        let q = &a[hd * dh..(hd + 1) * dh];
                        kernels::attend_dot(
                            q,
                            nk,
                            |j| &st[base + j * 2 * d + hd * dh..base + j * 2 * d + (hd + 1) * dh],
                            |j| {
                                &st[base + j * 2 * d + d + hd * dh
                                    ..base + j * 2 * d + d + (hd + 1) * dh]
                            },
                            scale,
                            &mut scores,
                            &mut c[hd * dh..(hd + 1) * dh],
                        );
                    }
                    let pos = self.layout.pos(model, i, step, m.len);
                    let src = &c[..d];
                    let nd = &mut self.nodes[i];
                    let o = self.layout.offset(i, m.slot, pos);
                    nd.out[o..o + d].copy_from_slice(src);
                }
                AttnMode::SelfAttn => {
                    // whole-sequence self-attention: two GEMMs per head over the packed Q|K|V rows
                    // of this request's slot (scores = Q·Kᵀ, out = softmax(scores)·V)
                    let d = dout;
                    let rows = Layout::rows(node, m.len);
                    let p = node.inputs[0].node.idx();
                    let dh = d / heads;
                    let scale = 1.0 / (dh as f32).sqrt();
                    let base = self.layout.offset(p, m.slot, 0);
                    let qkv = &self.nodes[p].out[base..base + rows * 3 * d];
                    for hd in 0..heads {
                        let q = &qkv[hd * dh..];
                        let k = &qkv[d + hd * dh..];
                        let v = &qkv[2 * d + hd * dh..];
                        let sc = &mut scores[..rows * rows];
                        kernels::gemm_strided(
                            rows,
                            rows,
                            dh,
                            q,
                            (3 * d, 1),
                            k,
                            (1, 3 * d),
                            sc,
                            (rows, 1),
                            false,
                        );
                        for row in sc.chunks_exact_mut(rows) {
                            row.iter_mut().for_each(|x| *x *= scale);
                            kernels::softmax(row);
                        }
                        kernels::gemm_strided(
                            rows,
                            dh,
                            rows,
                            sc,
                            (rows, 1),
                            v,
                            (3 * d, 1),
                            &mut c[hd * dh..],
                            (d, 1),
                            false,
                        );
                    }
                    for r in 0..rows {
                        let src = &c[r * d..(r + 1) * d];
                        let nd = &mut self.nodes[i];
                        let o = self.layout.offset(i, m.slot, r);
                        nd.out[o..o + d].copy_from_slice(src);
                    }
                }
                AttnMode::Cross => {
                    let d = dout;
                    let rows = Layout::rows(node, m.len);
                    let (kvp, nk) = self.seq_input(model, &node.inputs[1], m);
                    let dh = d / heads;
                    let scale = 1.0 / (dh as f32).sqrt();
                    for r in 0..rows {
                        self.read_input(model, node, &node.inputs[0], m, step, r, &mut a[..d]);
                        for hd in 0..heads {
                            kernels::attend_dot(
                                &a[hd * dh..(hd + 1) * dh],
                                nk,
                                |j| &self.row(kvp, m.slot, j)[hd * dh..(hd + 1) * dh],
                                |j| &self.row(kvp, m.slot, j)[d + hd * dh..d + (hd + 1) * dh],
                                scale,
                                &mut scores,
                                &mut c[r * d + hd * dh..r * d + (hd + 1) * dh],
                            );
                        }
                    }
                    for r in 0..rows {
                        let pos = self.layout.out_pos(model, i, step, r, m.len);
                        let src = &c[r * d..(r + 1) * d];
                        let nd = &mut self.nodes[i];
                        let o = self.layout.offset(i, m.slot, pos);
                        nd.out[o..o + d].copy_from_slice(src);
                    }
                }
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
        self.scores = scores;
    }

    /// Ops that work row by row on their (concatenated) inputs.
    fn rowwise(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let kin = self.nodes[i].in_feat;
        let fo = self.layout.nodes[i].feat;
        let mut a = std::mem::take(&mut self.scratch_a);
        let mut c = std::mem::take(&mut self.scratch_c);
        for m in members {
            let step = m.step;
            for r in 0..Layout::rows(node, m.len) {
                self.gather_row(model, node, m, step, r, &mut a[..kin]);
                let x = &a[..kin];
                let y = &mut c[..fo];
                let w = &self.nodes[i].w;
                match &node.op {
                    Op::Flatten | Op::Concat | Op::Take { .. } => y.copy_from_slice(&x[..fo]),
                    Op::Add { act } => {
                        y.copy_from_slice(&x[..fo]);
                        for part in x[fo..].chunks_exact(fo) {
                            for (v, p) in y.iter_mut().zip(part) {
                                *v += p;
                            }
                        }
                        kernels::act(act_k(*act), y);
                    }
                    Op::Activation { kind } => {
                        y.copy_from_slice(x);
                        kernels::act(act_k(*kind), y);
                    }
                    Op::BatchNorm => {
                        let ch = node.out.feat[0];
                        let per = fo / ch.max(1);
                        for (j, v) in y.iter_mut().enumerate() {
                            *v = x[j] * w.scale[j / per] + w.shift[j / per];
                        }
                    }
                    Op::LayerNorm => {
                        y.copy_from_slice(x);
                        kernels::layernorm(y, &w.scale, &w.shift);
                    }
                    Op::Softmax => {
                        y.copy_from_slice(x);
                        kernels::softmax(y);
                    }
                    Op::Argmax => {
                        let mut best = 0;
                        for (j, v) in x.iter().enumerate() {
                            if *v > x[best] {
                                best = j;
                            }
                        }
                        y[0] = best as f32;
                    }
                    Op::Embedding {
                        vocab,
                        dim,
                        scale,
                        positional,
                        token_types,
                        ..
                    } => {
                        let id = (x[0].max(0.0) as usize) % vocab;
                        let table = match self.nodes[i].tied {
                            Some(t) => &self.nodes[t].w.w,
                            None => &w.w,
                        };
                        y.copy_from_slice(&table[id * dim..(id + 1) * dim]);
                        if *scale {
                            let s = (*dim as f32).sqrt();
                            y.iter_mut().for_each(|v| *v *= s);
                        }
                        let pos = if node.loop_id.is_some() {
                            step as usize
                        } else {
                            r
                        };
                        match positional {
                            PosEnc::Sinusoidal => {
                                for (j, v) in y.iter_mut().enumerate() {
                                    *v += kernels::sinusoid(pos, j, *dim);
                                }
                            }
                            PosEnc::Learned => {
                                let np = w.extra.len() / dim;
                                let p = pos.min(np.saturating_sub(1));
                                for (v, e) in y.iter_mut().zip(&w.extra[p * dim..(p + 1) * dim]) {
                                    *v += e;
                                }
                            }
                            PosEnc::None => {}
                        }
                        if *token_types > 0 {
                            // every token is of type 0
                            for (v, e) in y.iter_mut().zip(&w.bias[..*dim]) {
                                *v += e;
                            }
                        }
                    }
                    _ => y.copy_from_slice(&x[..fo]),
                }
                let pos = self.layout.out_pos(model, i, step, r, m.len);
                let src = &c[..fo];
                self.scatter_row(i, m.slot, pos, src);
            }
        }
        self.scratch_a = a;
        self.scratch_c = c;
    }
}

impl Device for CpuDevice {
    /// Starts (or stops) capturing final outputs per request, for `verify`.
    fn set_capture(&mut self, mode: CaptureMode) {
        self.capture = Capture::new(mode);
    }

    /// Takes the captured outputs.
    fn take_captured(&mut self) -> Capture {
        std::mem::take(&mut self.capture)
    }

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let mb = max_batch as usize;
        let layout = Layout::new(model, mb);
        let max_dec = model.seq.as_ref().map_or(1, |s| s.max_dec as usize);
        let mut nodes = Vec::with_capacity(model.nodes.len());
        let (mut need_a, mut need_c, mut need_cols, mut need_scores) =
            (1usize, 1usize, 1usize, 1usize);
        for n in &model.nodes {
            let NodeLayout { feat, cap, .. } = layout.nodes[n.id.idx()];
            let in_feat: usize = n.in_shapes.iter().map(|s| numel(&s.feat)).sum();
            let rows = if n.loop_id.is_some() { 1 } else { cap };
            let tied = model.tied_owner(n)?;
            let w = weights::generate(model, n, self.seed);
            let state = match &n.op {
                Op::Lstm { hidden, .. } => vec![0.0; mb * hidden],
                Op::Attention {
                    mode: AttnMode::SelfAttn,
                    ..
                } if n.class == Class::Decoder => vec![0.0; mb * max_dec * 2 * feat],
                _ => Vec::new(),
            };
            let max_in_rows = n
                .in_shapes
                .iter()
                .map(|s| max_rows(model, s.rows))
                .max()
                .unwrap_or(1);
            match &n.op {
                Op::Conv2d {
                    kernel: (kh, kw),
                    groups,
                    ..
                } => {
                    let (c, h, w) = (
                        n.in_shapes[0].feat[0],
                        n.in_shapes[0].feat[1],
                        n.in_shapes[0].feat[2],
                    );
                    need_a = need_a.max(c * h * w);
                    need_cols =
                        need_cols.max(n.out.feat[1] * n.out.feat[2] * (c / groups) * kh * kw);
                }
                // at least two rows: a lone row is computed as a 2-row GEMM (kernels::gemm_rows)
                Op::Linear { .. } => {
                    need_a = need_a.max((mb * rows).max(2) * in_feat);
                    need_c = need_c.max((mb * rows).max(2) * feat);
                }
                Op::Lstm { hidden, .. } => {
                    need_a = need_a.max(mb.max(2) * (in_feat + hidden));
                    need_c = need_c.max(mb.max(2) * 4 * hidden);
                }
                Op::Attention { .. } => {
                    need_a = need_a.max(in_feat.max(3 * feat));
                    need_c = need_c.max(rows * feat);
                    need_scores = need_scores.max(max_in_rows.max(max_dec).max(rows * rows));
                }
                _ => {
                    need_a = need_a.max(in_feat);
                    need_c = need_c.max(feat);
                }
            }
            nodes.push(NodeRt {
                out: vec![0.0; layout.buffer_len(n.id.idx())],
                w,
                state,
                in_feat,
                tied,
            });
        }
        self.nodes = nodes;
        self.layout = layout;
        self.scratch_a = vec![0.0; need_a];
        self.scratch_c = vec![0.0; need_c];
        self.cols = vec![0.0; need_cols];
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
