//! Attention: additive and dot attention over a sequence, multi-head self-attention (two GEMMs
//! per head; masked for a decoder-only model's prefill), decoder self-attention over a per-slot
//! key/value cache (after the prompt's keys and values, for a decoder-only model),
//! cross-attention.

use super::aligned::Aligned;
use super::{kernels, numel, par, CpuDevice};
use crate::device::layout::Layout;
use crate::device::Member;
use crate::graph::op::AttnMode;
use crate::graph::{Class, Model};
use kernels::Strided;
/// The scratch buffers attention works in (taken from the device for the node's run).
struct AttnScratch {
    a: Aligned,
    c: Aligned,
    scores: Vec<f32>,
}

impl CpuDevice {
    pub(super) fn attention(
        &mut self,
        model: &Model,
        i: usize,
        members: &[Member],
        mode: AttnMode,
        heads: usize,
    ) {
        let node = &model.nodes[i];
        let mut sc = AttnScratch {
            a: std::mem::take(&mut self.scratch_a),
            c: std::mem::take(&mut self.scratch_c),
            scores: std::mem::take(&mut self.scores),
        };
        for m in members {
            let how = (mode, heads);
            match mode {
                AttnMode::Additive | AttnMode::Dot => self.attend_seq(model, i, m, how, &mut sc),
                AttnMode::SelfAttn if node.class == Class::Decoder => {
                    self.attend_cache(model, i, m, how, &mut sc)
                }
                AttnMode::SelfAttn | AttnMode::Causal => {
                    self.attend_self(model, i, m, how, &mut sc)
                }
                AttnMode::Cross => self.attend_cross(model, i, m, how, &mut sc),
            }
        }
        self.scratch_a = sc.a;
        self.scratch_c = sc.c;
        self.scores = sc.scores;
    }

    /// Additive or dot attention of one query row over a sequence's keys and values.
    fn attend_seq(
        &mut self,
        model: &Model,
        i: usize,
        m: &Member,
        (mode, _): (AttnMode, usize),
        sc: &mut AttnScratch,
    ) {
        let node = &model.nodes[i];
        let dout = self.layout.nodes[i].feat;
        let step = m.step;
        let AttnScratch { a, c, scores } = sc;
        let d = numel(&node.in_shapes[0].feat);
        self.read_input(model, node, &node.inputs[0], m, 0, &mut a[..d]);
        let (kp, nk) = self.seq_input(model, &node.inputs[1], m);
        let (vp, _) = self.seq_input(model, &node.inputs[2], m);
        let q = &a[..d];
        let s = &mut scores[..nk];
        if mode == AttnMode::Additive {
            let w = &self.nodes[i].w;
            let (vn, bias) = (&w.w, &w.bias);
            let terms = &mut c[..d];
            for (j, sj) in s.iter_mut().enumerate() {
                let key = self.row(kp, m.slot, j);
                *sj = kernels::additive_score((q, key), (vn, bias), terms);
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
        self.scatter_row(i, m.slot, pos, &c[..dout]);
    }

    /// Decoder self-attention of one step over the member's key/value cache (this step's keys and values appended first).
    fn attend_cache(
        &mut self,
        model: &Model,
        i: usize,
        m: &Member,
        (_, heads): (AttnMode, usize),
        sc: &mut AttnScratch,
    ) {
        let node = &model.nodes[i];
        let dout = self.layout.nodes[i].feat;
        let step = m.step;
        let AttnScratch { a, c, scores } = sc;
        let d = dout;
        self.read_input(model, node, &node.inputs[0], m, 0, &mut a[..3 * d]);
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
        // a decoder-only model's prompt: its packed Q|K|V rows, read where its prefill wrote them
        let prompt = node.inputs.get(1).map(|inp| {
            let (p, rows) = self.seq_input(model, inp, m);
            (p, self.layout.offset(p, m.slot, 0), rows)
        });
        for hd in 0..heads {
            let q = &a[hd * dh..(hd + 1) * dh];
            let at = |first| Strided {
                buf: st,
                first,
                stride: 2 * d,
            };
            let cache = (at(base + hd * dh), at(base + d + hd * dh), nk);
            let out = &mut c[hd * dh..(hd + 1) * dh];
            match prompt {
                None => kernels::attend_dot(q, cache, scale, scores, out),
                Some((p, off, rows)) => {
                    let at = |first| Strided {
                        buf: &self.nodes[p].out,
                        first: off + first,
                        stride: 3 * d,
                    };
                    let prompt = (at(d + hd * dh), at(2 * d + hd * dh), rows);
                    kernels::attend_dot_two(q, [prompt, cache], scale, scores, out)
                }
            }
        }
        let pos = self.layout.pos(model, i, step, m.len);
        self.scatter_row(i, m.slot, pos, &c[..d]);
    }

    /// Multi-head self-attention over the member's own rows (masked with [`AttnMode::Causal`]):
    /// two GEMMs per head, the heads shared between the cores (each with its own block of
    /// scores and of output, `[head][row]`, written to the rows of the slot at the end).
    fn attend_self(
        &mut self,
        model: &Model,
        i: usize,
        m: &Member,
        (mode, heads): (AttnMode, usize),
        sc: &mut AttnScratch,
    ) {
        let causal = mode == AttnMode::Causal;
        let node = &model.nodes[i];
        let d = self.layout.nodes[i].feat;
        let AttnScratch { c, scores, .. } = sc;
        let rows = Layout::rows(node, m.len);
        let p = node.inputs[0].node.idx();
        let dh = d / heads;
        let base = self.layout.offset(p, m.slot, 0);
        let qkv = &self.nodes[p].out[base..base + rows * 3 * d];
        let head = |hd: usize, (sc, out): (&mut [f32], &mut [f32])| {
            kernels::self_attention_head((qkv, d), (hd * dh, dh), (rows, causal), sc, out)
        };
        let (c, scores) = (&mut c[..rows * d], &mut scores[..heads * rows * rows]);
        // heads over the threads (each head's output and scores rows of their own)
        par::split_rows_pair(
            (c, scores),
            (rows * dh, rows * rows),
            rows * rows * d,
            |h0, outs, scores| {
                for (hd, (out, sc)) in outs
                    .chunks_mut(rows * dh)
                    .zip(scores.chunks_mut(rows * rows))
                    .enumerate()
                {
                    head(h0 + hd, (sc, out));
                }
            },
        );
        let out = self.layout.offset(i, m.slot, 0);
        let dst = &mut self.nodes[i].out[out..out + rows * d];
        for (hd, block) in c[..rows * d].chunks_exact(rows * dh).enumerate() {
            for (r, v) in block.chunks_exact(dh).enumerate() {
                dst[r * d + hd * dh..r * d + (hd + 1) * dh].copy_from_slice(v);
            }
        }
    }

    /// Cross-attention of each of the member's query rows over the source's keys and values.
    fn attend_cross(
        &mut self,
        model: &Model,
        i: usize,
        m: &Member,
        (_, heads): (AttnMode, usize),
        sc: &mut AttnScratch,
    ) {
        let node = &model.nodes[i];
        let dout = self.layout.nodes[i].feat;
        let step = m.step;
        let AttnScratch { a, c, scores } = sc;
        let d = dout;
        let rows = Layout::rows(node, m.len);
        let (kvp, nk) = self.seq_input(model, &node.inputs[1], m);
        let dh = d / heads;
        let scale = 1.0 / (dh as f32).sqrt();
        for r in 0..rows {
            self.read_input(model, node, &node.inputs[0], m, r, &mut a[..d]);
            for hd in 0..heads {
                // key/value row j of the source: [K | V] rows of its node's slot
                let at = |first| Strided {
                    buf: &self.nodes[kvp].out,
                    first: self.layout.offset(kvp, m.slot, 0) + first,
                    stride: self.layout.nodes[kvp].feat,
                };
                kernels::attend_dot(
                    &a[hd * dh..(hd + 1) * dh],
                    (at(hd * dh), at(d + hd * dh), nk),
                    scale,
                    scores,
                    &mut c[r * d + hd * dh..r * d + (hd + 1) * dh],
                );
            }
        }
        for r in 0..rows {
            let pos = self.layout.out_pos(model, i, step, r, m.len);
            self.scatter_row(i, m.slot, pos, &c[r * d..(r + 1) * d]);
        }
    }
}
